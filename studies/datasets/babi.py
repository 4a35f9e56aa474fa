"""bAbI story parser for the object-location tasks qa2 and qa3 (spec partA section 2).

File format (they are not among kvprobe's data sets): ``<line_id> <sentence>``; a line id of 1 starts a new
story. Question lines are ``<line_id> <question>\\t<answer>\\t<supporting line ids>``.

Every fact sentence must be one of three kinds, or parsing fails loudly (``ValueError`` naming the
file and line). The verb sets were collected from the qa2 and qa3 English test files:

* ``move``: ``X moved|went|went back|journeyed|travelled to the L.``
* ``get``: ``X got|grabbed|picked up|took the O[ there].``
* ``drop``: ``X put down|dropped|discarded|left the O[ there].``

Questions are ``Where is the O?`` (qa2: the object's current location) and
``Where was the O before the L?`` (qa3: the location the object was in before it reached L).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

MOVE_VERBS = ("moved", "went", "went back", "journeyed", "travelled")
GET_VERBS = ("got", "grabbed", "picked up", "took")
DROP_VERBS = ("put down", "dropped", "discarded", "left")
FACT_KINDS = ("move", "get", "drop")
#: qa1-qa3 answers are one of six locations (bathroom, bedroom, garden, hallway, kitchen, office): the chance
#: level of a uniform guess is one in six.
BABI_LOCATIONS = 6


def _alternatives(verbs: Iterable[str]) -> str:
    """Regex alternation of ``verbs``, longest first ("went back" before "went")."""
    return "|".join(re.escape(v) for v in sorted(verbs, key=len, reverse=True))


_PERSON = r"(?P<person>[A-Z][a-z]+)"
_FACT_PATTERNS = {
    "move": re.compile(rf"^{_PERSON} (?:{_alternatives(MOVE_VERBS)}) to the (?P<location>[a-z]+)\.$"),
    "get": re.compile(rf"^{_PERSON} (?:{_alternatives(GET_VERBS)}) the (?P<obj>[a-z]+)(?: there)?\.$"),
    "drop": re.compile(rf"^{_PERSON} (?:{_alternatives(DROP_VERBS)}) the (?P<obj>[a-z]+)(?: there)?\.$"),
}
_QUESTION_PATTERNS = {
    "where_is": re.compile(r"^Where is the (?P<obj>[a-z]+)\?$"),
    "where_before": re.compile(r"^Where was the (?P<obj>[a-z]+) before the (?P<before>[a-z]+)\?$"),
}


@dataclass(frozen=True)
class Fact:
    """One story sentence: a person's movement, or a person getting or dropping an object."""

    kind: str  # "move" | "get" | "drop"
    person: str
    obj: str | None  # None for movements
    location: str | None  # None for object events (the sentence does not name it)
    text: str
    line_id: int


@dataclass(frozen=True)
class Question:
    """A question line with its gold answer; ``position`` = number of story facts before it."""

    text: str
    answer: str
    support_ids: tuple[int, ...]
    line_id: int
    position: int
    kind: str  # "where_is" (qa2) | "where_before" (qa3)
    obj: str
    before: str | None = None  # the named location of a "where_before" question


@dataclass(frozen=True)
class Story:
    """One bAbI story: its facts in order and the questions interleaved with them."""

    index: int  # 0-based story number within its file
    facts: tuple[Fact, ...]
    questions: tuple[Question, ...]
    source: str = "<string>"

    @property
    def fact_line_ids(self) -> tuple[int, ...]:
        return tuple(f.line_id for f in self.facts)

    def without_questions(self) -> Story:
        """The same facts with the questions stripped (for checks that rules ignore them)."""
        return Story(self.index, self.facts, (), self.source)


def parse_fact(text: str, line_id: int) -> Fact:
    """Parse one fact sentence; ``ValueError`` if it is not a known movement or object event."""
    for kind, pattern in _FACT_PATTERNS.items():
        match = pattern.match(text)
        if match:
            groups = match.groupdict()
            return Fact(kind=kind, person=groups["person"], obj=groups.get("obj"),
                        location=groups.get("location"), text=text, line_id=line_id)
    raise ValueError(f"unknown fact sentence: {text!r}")


def parse_question(text: str, answer: str, support: str, line_id: int, position: int) -> Question:
    """Parse a question line's three fields; ``ValueError`` on an unknown question form."""
    for kind, pattern in _QUESTION_PATTERNS.items():
        match = pattern.match(text)
        if match:
            return Question(text=text, answer=answer, support_ids=tuple(int(s) for s in support.split()),
                            line_id=line_id, position=position, kind=kind, obj=match["obj"],
                            before=match.groupdict().get("before"))
    raise ValueError(f"unknown question form: {text!r}")


def _split_line(line: str) -> tuple[int, str]:
    """``"12 John went to the garden."`` -> ``(12, "John went to the garden.")``."""
    head, _, rest = line.partition(" ")
    if not head.isdigit() or not rest:
        raise ValueError(f"expected '<line_id> <text>', got {line!r}")
    return int(head), rest


class _StoryBuilder:
    """Accumulates one story's facts and questions while lines are read."""

    def __init__(self, index: int, source: str) -> None:
        self.index, self.source = index, source
        self.facts: list[Fact] = []
        self.questions: list[Question] = []
        self.last_id = 0

    def add(self, line_id: int, rest: str) -> None:
        if line_id != self.last_id + 1:
            raise ValueError(f"line id {line_id} does not follow {self.last_id}")
        self.last_id = line_id
        if "\t" not in rest:
            self.facts.append(parse_fact(rest.strip(), line_id))
            return
        fields = rest.split("\t")
        if len(fields) != 3:
            raise ValueError(f"question line needs 3 tab-separated fields, got {len(fields)}")
        question = parse_question(fields[0].strip(), fields[1].strip(), fields[2], line_id, len(self.facts))
        fact_ids = {f.line_id for f in self.facts}
        if not set(question.support_ids) <= fact_ids:
            raise ValueError(f"supporting ids {question.support_ids} are not earlier facts of the story")
        self.questions.append(question)

    def build(self) -> Story:
        return Story(self.index, tuple(self.facts), tuple(self.questions), self.source)


def parse_babi_lines(lines: Iterable[str], source: str = "<string>") -> list[Story]:
    """Parse bAbI lines into stories; errors name ``source`` and the 1-based line number."""
    stories: list[Story] = []
    builder: _StoryBuilder | None = None
    for number, raw in enumerate(lines, start=1):
        line = raw.rstrip("\r\n")
        if not line.strip():
            continue
        try:
            line_id, rest = _split_line(line)
            if line_id == 1:
                if builder is not None:
                    stories.append(builder.build())
                builder = _StoryBuilder(len(stories), source)
            if builder is None:
                raise ValueError(f"first story starts at line id {line_id}, not 1")
            builder.add(line_id, rest)
        except ValueError as err:
            raise ValueError(f"{source}:{number}: {err}") from None
    if builder is not None:
        stories.append(builder.build())
    return stories


def parse_babi(path: str | Path) -> list[Story]:
    """Parse a bAbI qa2/qa3 file into its stories (``ValueError`` on any unknown sentence)."""
    path = Path(path)
    with path.open(encoding="utf-8") as handle:
        return parse_babi_lines(handle, source=str(path))
