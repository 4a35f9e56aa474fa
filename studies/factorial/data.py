"""The factorial's cells: which record cases, which B, which note, which question (paper app:v17_scope).

Two matrices on the 300 synthetic test histories (:func:`kvprobe.studies.datasets.record_histories.record_histories`
with the deadline family in hours, as the paper's dataset states its quantity targets):

* ``quantity``: the replacement, role-swap and explicit-rejection cases of the ten deadline groups
  (30 cases) x 2 information conditions for B x 2 notes = 120 histories, each asked 2 questions under
  5 access conditions: 1,200 rows (seed L4750-4753);
* ``endpoint``: the same three variants of the ten api_endpoint groups (30 cases) x 2 notes = 60
  histories, B as written, 2 questions x 5 conditions: 600 rows (seed L4857-4862).

A *case* here is one prefilled history: (record case, information, note). Information and note change
the history text, so each is its own prefill (seed L4796-4797: "Each changed B or note is prefilled
separately"); the two question wordings are asked of the same history.

Example::

    >>> cases = factorial_cases(("quantity",), n_groups=1)
    >>> len(cases), cases[0].case_id
    (12, 'rec-deadline-009-replacement/stated/notebook')
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

import kvprobe
from kvprobe.studies.datasets.recognition.records import RECORDS_SEED
from kvprobe.studies.common.answers import canonical_answer
from kvprobe.studies.common.detectors import strings as record_strings
from kvprobe.studies.common.detectors.strings import TIME_2
from kvprobe.studies.datasets.record_histories import RecordHistory, question_text, record_histories, with_note

from . import strings

#: The two matrices and the record family each one uses.
MATRICES = ("quantity", "endpoint")
FAMILY = {"quantity": "deadline", "endpoint": "api_endpoint"}
#: The record variants whose old and current values differ (seed L4750-4751).
VARIANTS = ("replacement", "role_swap", "explicit_rejection")
#: Information conditions for B: as written (states "hours"), or referring to A for its unit.
INFORMATION = ("stated", "refers-to-a")
#: The two neutral notes inserted before Time 2.
NOTES = tuple(record_strings.NOTE_SENTENCES)
#: The two question wordings: the current question as is, or with the complete-answer request appended.
QUESTIONS = ("original", "complete")
#: Name of the narrow mask of each matrix (the old number before its unit; the complete old endpoint).
NARROW = {"quantity": "number", "endpoint": "endpoint"}
#: Groups per family in the test split (seed L4750: "ten base groups").
GROUPS_PER_FAMILY = 10


def conditions_of(matrix: str) -> tuple[str, ...]:
    """The five access conditions of a matrix, in the paper's column order (seed L5109).

    >>> conditions_of("quantity")
    ('full', 'whole-control', 'whole', 'number-control', 'number')
    """
    narrow = NARROW[matrix]
    return ("full", "whole-control", "whole", f"{narrow}-control", narrow)


@dataclass(frozen=True)
class FactorialCase:
    """One history of the factorial: a record case under one information condition and one note.

    Attributes:
        record: the synthetic record history (A, the other record, B, the queries).
        matrix: ``"quantity"`` or ``"endpoint"``.
        information: one of :data:`INFORMATION` (always ``"stated"`` in the endpoint matrix).
        note: one of :data:`NOTES`.
    """

    record: RecordHistory
    matrix: str
    information: str
    note: str

    @property
    def case_id(self) -> str:
        return f"{self.record.case_id}/{self.information}/{self.note}"

    @property
    def group(self) -> str:
        """The base group (the bootstrap's resampling unit: its three variants stay together)."""
        return self.record.case.group

    @property
    def reference(self) -> str:
        """The current value (B's value: every variant here replaces A's)."""
        return self.record.case.new_value

    @property
    def old_value(self) -> str:
        return self.record.case.old_value

    def b_text(self) -> str:
        """B as this case shows it (rewritten to refer to A in the ``refers-to-a`` condition)."""
        b = self.record.case.b_text
        return refer_to_a(b) if self.information == "refers-to-a" else b

    def prompt(self, chat: bool) -> kvprobe.Prompt:
        """The record history with the note before Time 2 and this case's B (every other segment as in
        :meth:`RecordHistory.prompt`), the chat template's date fixed as in the paper (seed L4763)."""
        base = with_note(self.record.prompt(chat, record_strings.TEMPLATE_DATE), self.note)
        segments = [(name, f"{TIME_2} {self.b_text()}" if name == "time2" else text) for name, text in base.segments]
        return dataclasses.replace(base, segments=segments)

    def question(self, wording: str) -> str:
        """The current question in one of :data:`QUESTIONS` (the complete request appended after a space)."""
        kind, text, reference = self.record.queries()[0]
        assert kind == "current" and reference == self.reference
        q = question_text(text)
        if wording == "original":
            return q
        extra = strings.COMPLETE_QUANTITY if self.matrix == "quantity" else strings.COMPLETE_ENDPOINT
        return f"{q} {extra}"

    def candidates(self) -> tuple[str, str]:
        """The canonical current and old JSON answers (scored without a leading space or EOS)."""
        return canonical_answer(self.reference), canonical_answer(self.old_value)




_UNIT_WORD = re.compile(rf"\s*\b{strings.REMOVED_UNIT}\b")


def refer_to_a(b_text: str) -> str:
    """B referring to A for its unit: every "hours" removed (with the space before it) and the paper's
    sentence prepended (seed L4769-4771).

    >>> refer_to_a("Project Highbrook is now 109 hours, no longer 107 hours.")
    'Use the same measurement unit as the Time 1 entry. Project Highbrook is now 109, no longer 107.'
    """
    return f"{strings.REFERS_TO_A} {_UNIT_WORD.sub('', b_text)}"


def matrix_records(matrix: str, n_groups: int | None = None, seed: int = RECORDS_SEED) -> list[RecordHistory]:
    """The record cases of a matrix: the three replacing variants of the first ``n_groups`` groups of its
    family, in dataset order."""
    family = FAMILY[matrix]
    records = [r for r in record_histories("test", seed, deadline_unit="hours")
               if r.case.family == family and r.case.variant in VARIANTS]
    groups = list(dict.fromkeys(r.case.group for r in records))[:n_groups]
    return [r for r in records if r.case.group in groups]


def factorial_cases(matrices: tuple[str, ...] = MATRICES, n_groups: int | None = None,
                    information: tuple[str, ...] = INFORMATION, notes: tuple[str, ...] = NOTES,
                    seed: int = RECORDS_SEED) -> list[FactorialCase]:
    """Every history of the chosen matrices, record case by record case (then information, then note).

    ``information`` applies to the quantity matrix; the endpoint matrix always shows B as written (its
    values carry no unit to refer to).
    """
    out = []
    for matrix in matrices:
        levels = information if matrix == "quantity" else ("stated",)
        for record in matrix_records(matrix, n_groups, seed):
            out += [FactorialCase(record, matrix, info, note) for info in levels for note in notes]
    return out
