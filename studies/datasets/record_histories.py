"""Synthetic record histories for generation (paper partD section 3, L5437-5491).

Shared by the records, query-aware and requests studies (answers graded with
:func:`studies.common.answers.grade`).

Each history is one D3 test case (``studies.datasets.recognition.records``: 50 items x 6
variants = 300) laid out as the paper's user message: ``Ordered records:``,
``Time 1:`` A, ``Other record:`` a record about a different entity,
``Time 2:`` B, then the question. Three queries per history:

* current: A's entity and attribute after Time 2 (B's value for replacements, role
  swaps and explicit rejections; A's value otherwise);
* historical: the same attribute at Time 1 (A's value);
* unrelated: the other record's entity and attribute.

UNCLEAR (paper), our choices: the other record is record A of the next item of the
same split and family (the first later item whose entity differs from this item's
entities and whose value differs from both candidate values), so it uses the same
wording and vocabulary as A; the query wordings (:mod:`studies.common.detectors.strings`)
name the attribute with the split's first slot phrasing.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import kvprobe
from .recognition.records import RECORDS_SEED
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.detectors import strings
from .recognition import families
from .recognition.cases import RecognitionCase, expected_answer
from .recognition.records import SLOT_INDICES, generate_records
from .recognition.records import ITEMS  # noqa: F401  (re-exported for the studies on these histories)

QUERY_KINDS = ("current", "historical", "unrelated")
#: Answer budget (paper L5450-5451).
MAX_NEW_TOKENS = 40
#: Segment names of the history; ``time1`` is the section recompute arms delete.
SEGMENTS = ("header", "time1", "other", "time2")


@dataclass(frozen=True)
class RecordHistory:
    """One history: a D3 case plus the other-entity record."""

    case: RecognitionCase
    other_entity: str
    other_value: str
    other_text: str
    #: How the deadline family states values ("date" or "hours"; ``families.DEADLINE_UNITS``).
    deadline_unit: str = "date"

    @property
    def case_id(self) -> str:
        return self.case.case_id

    @property
    def same_slot(self) -> bool:
        """Whether B concerns A's entity and attribute (the latest-record baseline's annotation)."""
        return self.case.variant != "other_entity"

    def slot(self, entity: str) -> str:
        return families.slot(self.case.family, SLOT_INDICES[self.case.split][0], entity, self.deadline_unit)

    def queries(self) -> list[tuple[str, str, str]]:
        """(kind, question, reference answer) of the three queries."""
        c = self.case
        return [
            ("current", strings.CURRENT_QUERY.format(slot=self.slot(c.entity)), expected_answer(c)[0]),
            ("historical", strings.HISTORICAL_QUERY.format(slot=self.slot(c.entity)), c.old_value),
            ("unrelated", strings.UNRELATED_QUERY.format(slot=self.slot(self.other_entity)), self.other_value),
        ]

    def prompt(self, chat: bool, date: str | None = None) -> kvprobe.Prompt:
        """The history as the paper's user message (sections on their own lines).

        Without a chat template (base models) the system message opens the text instead
        (our choice; the paper runs this task with native chat templates only). ``date``: the
        chat template's date where the experiment's section states one (``strings.TEMPLATE_DATE``
        for the matched-score experiment and the factorial); None: the policies' section states none
        (:mod:`kvprobe.studies.common.chat_template` decides).
        """
        c = self.case
        segments = [("header", strings.RECORDS_HEADER), ("time1", f"{strings.TIME_1} {c.a_text}"),
                    ("other", f"{strings.OTHER_RECORD} {self.other_text}"), ("time2", f"{strings.TIME_2} {c.b_text}")]
        if not chat:
            segments.insert(0, ("instructions", strings.RECORDS_SYSTEM))
        return study_prompt(segments, chat=chat, system=strings.RECORDS_SYSTEM if chat else None, sep="\n",
                            question_sep="\n\n", date=date)

    def a_span(self, history: kvprobe.History) -> kvprobe.TokenSpan:
        """Tokens of record A inside the Time-1 section (every token overlapping A)."""
        start = len(strings.TIME_1) + 1
        return history.span("time1", chars=(start, start + len(self.case.a_text)), strict=False)


def question_text(question: str) -> str:
    """The question section as it follows the records."""
    return f"{strings.QUESTION} {question}"


def record_histories(split: str = "test", seed: int = RECORDS_SEED, deadline_unit: str = "date"
                     ) -> list[RecordHistory]:
    """The D3 cases of ``split`` with their other-entity records, in dataset order.

    ``deadline_unit="hours"``: the deadline family in hours, as in the paper's dataset
    (:func:`studies.datasets.recognition.families.restate`); other families are unchanged.
    """
    cases = [c for c in generate_records(seed, deadline_unit) if c.split == split]
    items: dict[str, list[RecognitionCase]] = {}
    for c in cases:
        if c.variant == "replacement":
            items.setdefault(c.family, []).append(c)
    other_of: dict[str, RecognitionCase] = {}
    for family_items in items.values():
        for i, item in enumerate(family_items):
            entities = {item.entity, *(c.b_text for c in cases if c.group == item.group)}
            for step in range(1, len(family_items)):
                cand = family_items[(i + step) % len(family_items)]
                if cand.old_value not in (item.old_value, item.new_value) and \
                        not any(cand.entity in text for text in entities):
                    other_of[item.group] = cand
                    break
            else:
                raise ValueError(f"{item.group}: no other record with a distinct entity and value")
    return [RecordHistory(c, other_of[c.group].entity, other_of[c.group].old_value, other_of[c.group].a_text,
                          deadline_unit) for c in cases]


def selected_histories(split: str, seed: int, n_groups: int | None, deadline_unit: str = "date"
                       ) -> list[RecordHistory]:
    """The record histories of ``split``, or those of ``n_groups`` items taken from the families in turn."""
    cases = record_histories(split, seed, deadline_unit)
    if n_groups is not None:
        groups = _spread_groups(cases, n_groups)
        cases = [c for c in cases if c.case.group in groups]
    return cases


def _spread_groups(cases: list[RecordHistory], n: int) -> set[str]:
    """``n`` items taken from the families in turn (the first item of each family, then the second...)."""
    by_family: dict[str, list[str]] = {}
    for c in cases:
        items = by_family.setdefault(c.case.family, [])
        if c.case.group not in items:
            items.append(c.case.group)
    order = [items[i] for i in range(max(map(len, by_family.values()))) for items in by_family.values()
             if i < len(items)]
    return set(order[:n])


# ----------------------------------------------------------------------------- a neutral note before Time 2
#: The prompt segment holding a neutral note (:func:`with_note`).
NOTE_SEGMENT = "note"
#: The segment the note goes before.
NOTE_BEFORE = "time2"
#: Names of the notes (``strings.NOTE_SENTENCES``), and ``none``.
NOTES = ("none", *strings.NOTE_SENTENCES)


def note_text(note: str = "notebook", repeats: int = strings.NOTE_REPEATS) -> str:
    """A neutral note: its sentence (``strings.NOTE_SENTENCES``) ``repeats`` times, joined by one space.

    >>> note_text("notebook", 2)
    'The notebook contains numbered pages and a plain cover. The notebook contains numbered pages and a plain cover.'
    """
    if note not in strings.NOTE_SENTENCES:
        raise ValueError(f"unknown note {note!r}; known: {', '.join(strings.NOTE_SENTENCES)}")
    return strings.NOTE_JOINER.join([strings.NOTE_SENTENCES[note]] * repeats)


def with_note(prompt: kvprobe.Prompt, note: str = "notebook", repeats: int = strings.NOTE_REPEATS) -> kvprobe.Prompt:
    """``prompt`` with a neutral note as its own segment (:data:`NOTE_SEGMENT`) right before Time 2.

    The paper's matched-score experiment and factorial insert the note "before Time 2" in every arm (seed
    L5574-5577, L4779-4781); every other segment, the system message and the separators are kept. ``"none"``
    returns ``prompt`` unchanged.

    Example: ``with_note(history.prompt(chat=True), "shelf")`` has segments header, time1, other, note, time2.
    """
    if note == "none":
        return prompt
    names = [name for name, _ in prompt.segments]
    if NOTE_BEFORE not in names or NOTE_SEGMENT in names:
        raise ValueError(f"cannot insert a note before {NOTE_BEFORE!r} into segments {names}")
    segments = list(prompt.segments)
    segments.insert(names.index(NOTE_BEFORE), (NOTE_SEGMENT, note_text(note, repeats)))
    return dataclasses.replace(prompt, segments=segments)
