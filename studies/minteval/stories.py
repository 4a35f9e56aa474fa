"""bAbI source stories (qa1, qa2, qa3, qa5 test files) as MINTEval events.

Movements, acquisitions and drops are parsed by the BABILong study's bAbI grammar
(:func:`kvprobe.studies.datasets.babi.parse_fact`: ``move`` / ``get`` / ``drop``);
transfers (qa5) by :data:`TRANSFER`: ``X gave|handed|passed the O to Y.``. Question lines
(tab-separated) are skipped: MINTEval sessions carry their own questions. Any other
sentence is refused with the file and line.

Example::

    stories = read_stories("qa5")
    stories[0].story_id, stories[0].events[1].kind    # ("qa5:0", "transfer")
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from kvprobe.data import DataFiles
from kvprobe.studies.datasets.babi import parse_fact

from .schema import Event

#: The bAbI test files sessions are built from (people move; qa2/qa3/qa5 also pick up, drop and give objects;
#: the ``babi`` data set of :mod:`kvprobe.data`).
BABI_FILES = DataFiles("babi", {"qa1": "qa1_single-supporting-fact_test.txt", "qa2": "qa2_two-supporting-facts_test.txt",
                                "qa3": "qa3_three-supporting-facts_test.txt", "qa5": "qa5_three-arg-relations_test.txt"})
TRANSFER = re.compile(r"^(?P<person>[A-Z][a-z]+) (?:gave|handed|passed) the (?P<obj>[a-z]+) "
                      r"to (?P<recipient>[A-Z][a-z]+)\.$")
_KIND = {"move": "movement", "get": "acquisition", "drop": "drop"}


@dataclass(frozen=True)
class SourceStory:
    """One bAbI story's fact sentences as events (ids ``<story_id>/<line id>``)."""

    story_id: str
    events: tuple[Event, ...]


def parse_event(text: str, event_id: str) -> Event:
    """One bAbI fact sentence as an event; ``ValueError`` for any other sentence."""
    m = TRANSFER.match(text)
    if m:
        return Event(event_id, text, "transfer", m["person"], object=m["obj"], recipient=m["recipient"])
    fact = parse_fact(text, 0)
    return Event(event_id, text, _KIND[fact.kind], fact.person, object=fact.obj, location=fact.location)


def parse_stories(lines: list[str], task: str, source: str = "<string>") -> list[SourceStory]:
    """The stories of bAbI lines (a line id of 1 starts a story); errors name ``source`` and the line."""
    stories: list[list[Event]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        head, _, rest = line.rstrip("\r\n").partition(" ")
        try:
            if not head.isdigit() or not rest:
                raise ValueError(f"expected '<line_id> <text>', got {line!r}")
            if head == "1":
                stories.append([])
            if not stories:
                raise ValueError(f"first story starts at line id {head}, not 1")
            if "\t" not in rest:
                stories[-1].append(parse_event(rest.strip(), f"{task}:{len(stories) - 1}/{head}"))
        except ValueError as err:
            raise ValueError(f"{source}:{number}: {err}") from None
    return [SourceStory(f"{task}:{i}", tuple(events)) for i, events in enumerate(stories)]


@lru_cache(maxsize=None)
def read_stories(task: str) -> tuple[SourceStory, ...]:
    """Every story of one bAbI test file (``task`` in :data:`BABI_FILES`)."""
    path = BABI_FILES[task]
    if not path.exists():
        raise FileNotFoundError(f"bAbI {task} not found at {path} (`kvprobe data pull babi`)")
    return tuple(parse_stories(path.read_text(encoding="utf-8").splitlines(), task, str(path)))
