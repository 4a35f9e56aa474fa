"""Generated MINTEval-schema sessions from bAbI stories (offline stand-in for the released sessions).

Session ``k`` draws from ``random.Random(f"minteval-{seed}-{k}")`` (so the first N sessions
do not depend on how many are generated). Its length is uniform in ``[min_events,
max_events]`` (the paper's 18-148, L1348), drawn once. Its events are the fact sentences
of consecutive stories of one bAbI test file, from a start story on, cut at that length.
With probability ``share`` (drawn once per session) the start story is one an earlier
session started at, the window taking no other session's story (so sessions share source
stories and form connected components, as the paper's 99 form 83, L1357-1358); otherwise
(or when no shared window fits) the window lies on stories no earlier session took: the
first that fits, scanning the file from a random story on. A window fits when the
concatenated stories do not contradict each other (:attr:`.state.State.anomalies`: one
story's object taken in another story's room) and every question type has an askable
question. The file cycles through ``tasks``; when no window of that length fits (long qa2
and qa5 windows cross many story boundaries), the next file is tried. Each question type
gets up to ``max_per_type`` questions sampled from :func:`.questions.candidates` (12 by
default: the paper's 5,656 questions over 99 sessions are ~11.4 per type). The default 99
sessions form 86 components (4,784 questions).

Every choice here is ours (UNCLEAR: the released sessions' construction is not described).
Sessions carry ``source_stories`` and, in ``extra``, ``"origin": "generated"`` and the task;
each event keeps its bAbI line in ``extra["source"]``.

Example::

    sessions = generate_sessions(3)
    sessions[0].session_id, len(sessions[0].events), sessions[0].source_stories
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from dataclasses import dataclass, field


from .questions import candidates
from .schema import QUESTION_TYPES, Event, Session, SessionQuestion
from .state import replay
from .stories import BABI_FILES, SourceStory, read_stories

#: 20260914: the offline MINTEval sessions generated from bAbI stories (``studies.minteval.data``).
MINTEVAL_SEED = 20260914

TASKS = ("qa1", "qa2", "qa3", "qa5")
#: The paper's session count and event range (L1347-1348).
N_SESSIONS = 99
MIN_EVENTS, MAX_EVENTS = 18, 148
#: Probability that a session starts at an earlier session's start story (~ (99 - 83) / 99).
SHARE = 0.16
#: Questions sampled per type and session (~ 5,656 / 99 / 5).
MAX_PER_TYPE = 12
#: ``extra["origin"]`` of a generated session (reports label such runs "generated").
ORIGIN = "generated"


def _window(stories: Sequence[SourceStory], start: int, length: int) -> tuple[list[int], list[Event]] | None:
    """Story indices and the first ``length`` events of stories ``start, start + 1, ...`` (None: file ends)."""
    used, events = [], []
    for i in range(start, len(stories)):
        used.append(i)
        events += stories[i].events
        if len(events) >= length:
            return used, events[:length]
    return None


def _session(k: int, task: str, stories: Sequence[SourceStory], used: list[int], events: list[Event],
             rng: random.Random, max_per_type: int) -> Session:
    session_id = f"state-{k:03d}"
    events = [dataclasses.replace(e, id=f"e{i}", extra={"source": e.id}) for i, e in enumerate(events)]
    asked = []
    for qtype, cands in candidates(replay(events)).items():
        for text, answer, aliases in rng.sample(cands, min(max_per_type, len(cands))):
            asked.append(SessionQuestion(f"q{len(asked)}", qtype, text, answer, aliases))
    return Session(session_id, tuple(events), tuple(asked), tuple(stories[i].story_id for i in used),
                   {"origin": ORIGIN, "task": task})


def _consistent(stories: Sequence[SourceStory], start: int, length: int) -> tuple[list[int], list[Event]] | None:
    """The window from ``start`` if its events are consistent and every question type is askable."""
    window = _window(stories, start, length)
    if window is None:
        return None
    state = replay(window[1])
    return window if not state.anomalies and all(candidates(state).values()) else None


@dataclass
class _Pool:
    """One bAbI file's stories as sessions take them: fresh windows on untaken stories, shared ones at old starts."""

    stories: tuple[SourceStory, ...]
    #: start story -> the stories of the sessions that started there.
    starts: dict[int, set[int]] = field(default_factory=dict)
    taken: set[int] = field(default_factory=set)

    def fresh(self, length: int, rng: random.Random) -> tuple[int, list[int], list[Event]] | None:
        """The first consistent window on untaken stories, scanning the file from a random story on (wrapping)."""
        offset, n = rng.randrange(len(self.stories)), len(self.stories)
        for start in [(offset + i) % n for i in range(n)]:
            if start in self.taken:
                continue
            window = _consistent(self.stories, start, length)
            if window is not None and not self.taken & set(window[0]):
                return start, *window
        return None

    def shared(self, length: int, rng: random.Random) -> tuple[int, list[int], list[Event]] | None:
        """A consistent window at an earlier start that takes no other session's story (random order)."""
        for start in rng.sample(sorted(self.starts), len(self.starts)):
            window = _consistent(self.stories, start, length)
            if window is not None and self.taken & set(window[0]) <= self.starts[start]:
                return start, *window
        return None

    def take(self, start: int, used: list[int]) -> None:
        self.starts.setdefault(start, set()).update(used)
        self.taken.update(used)


def generate_sessions(n: int = N_SESSIONS, tasks: Sequence[str] = TASKS, min_events: int = MIN_EVENTS,
                      max_events: int = MAX_EVENTS, share: float = SHARE, seed: int = MINTEVAL_SEED,
                      max_per_type: int = MAX_PER_TYPE) -> list[Session]:
    """``n`` sessions in the MINTEval schema (module docstring); deterministic for the same arguments."""
    if not tasks or any(t not in BABI_FILES for t in tasks):
        raise ValueError(f"tasks must be among {', '.join(BABI_FILES)}, got {list(tasks)}")
    if not 1 <= min_events <= max_events:
        raise ValueError(f"need 1 <= min_events <= max_events, got {min_events}, {max_events}")
    pools = {t: _Pool(read_stories(t)) for t in tasks}
    sessions = []
    for k in range(n):
        rng = random.Random(f"minteval-{seed}-{k}")
        length, share_draw = rng.randint(min_events, max_events), rng.random()
        order = [tasks[(k + j) % len(tasks)] for j in range(len(tasks))]
        tries = [(t, _Pool.shared) for t in order] if share_draw < share else []
        for task, draw in tries + [(t, _Pool.fresh) for t in order]:
            found = draw(pools[task], length, rng)
            if found is not None:
                break
        else:
            raise RuntimeError(f"session {k}: no consistent window of {length} events left in {list(tasks)}")
        start, used, events = found
        pools[task].take(start, used)
        sessions.append(_session(k, task, pools[task].stories, used, events, rng, max_per_type))
    return sessions


def question_counts(sessions: Sequence[Session]) -> dict[str, int]:
    """Questions per type over ``sessions``."""
    return {t: sum(q.type == t for s in sessions for q in s.questions) for t in QUESTION_TYPES}
