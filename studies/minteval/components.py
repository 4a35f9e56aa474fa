"""Bootstrap units of MINTEval: connected components of sessions that share a bAbI source story.

Paper L1357-1360: "The 99 histories match original bAbI source stories and form 83
connected components under shared source identity. Primary uncertainty resamples these
components". A session's source stories are its ``source_stories`` field when the file
has one; otherwise (INFERRED: the paper matched them, the released schema may not carry
them) every bAbI story of the test files (qa1, qa2, qa3, qa5) that shares a run of
:data:`MATCH_RUN` consecutive fact sentences with the session's event texts. A story
matched by an ambiguous run counts for every story holding it (components only grow, so
the bootstrap stays conservative); a session matching no story is a component of its own.

Example::

    components({"s1": {"qa3:1"}, "s2": {"qa3:1", "qa3:2"}, "s3": {"qa1:9"}})
    # {"s1": "s1", "s2": "s1", "s3": "s3"}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache

from kvprobe.readouts.stats import connected_components

from .schema import Session
from .stories import BABI_FILES, read_stories

#: Consecutive sentences a session must share with a bAbI story to count it as a source (ours).
MATCH_RUN = 5


@lru_cache(maxsize=None)
def _runs(run: int) -> dict[tuple[str, ...], frozenset[str]]:
    """Every run of ``run`` consecutive fact sentences (a shorter story: all of it) -> the stories holding it."""
    index: dict[tuple[str, ...], set[str]] = {}
    for task in BABI_FILES:
        for story in read_stories(task):
            texts = [e.text for e in story.events]
            for i in range(max(1, len(texts) - run + 1)):
                index.setdefault(tuple(texts[i:i + run]), set()).add(story.story_id)
    return {k: frozenset(v) for k, v in index.items()}


@lru_cache(maxsize=None)
def _lengths(run: int) -> frozenset[int]:
    return frozenset(len(k) for k in _runs(run))


def matched_stories(texts: Sequence[str], run: int = MATCH_RUN) -> set[str]:
    """The bAbI stories sharing a run of ``run`` consecutive sentences with ``texts`` (module docstring)."""
    index = _runs(run)
    found: set[str] = set()
    for n in _lengths(run):
        for i in range(len(texts) - n + 1):
            found |= index.get(tuple(texts[i:i + n]), frozenset())
    return found


def session_sources(session: Session) -> set[str]:
    """A session's source stories: the file's ``source_stories``, else the matched ones."""
    if session.source_stories is not None:
        return set(session.source_stories)
    return matched_stories([e.text for e in session.events])


def components(sources: Mapping[str, Iterable[str]]) -> dict[str, str]:
    """Session -> its component's label (the component's first session, in the mapping's order;
    :func:`kvprobe.readouts.stats.connected_components`)."""
    return connected_components(sources)
