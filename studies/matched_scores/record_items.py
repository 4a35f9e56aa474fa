"""The synthetic-record arm: the 300 test histories with the notebook note before Time 2 (paper
app:v7_bridge, seed L5574-5598; spec partD section 6).

Each history is :class:`kvprobe.studies.datasets.record_histories.RecordHistory` (system instruction,
``Ordered records:`` / ``Time 1:`` A / ``Other record:`` / ``Time 2:`` B, the deadline family in
hours as in the paper's dataset) with one more segment, ``note``, between the other record and
Time 2: the notebook sentence repeated 16 times, identical in every arm ("all arms add the same
control note before Time 2"). One question, the current one, is asked; the candidates are the
canonical current and old answers (``{"answer": "value"}``). The old mask covers every token
overlapping A; the control the same number of tokens from the start of the note.

Replacement, role swap and explicit rejection make current differ from old (the 150 cases of the
margin and accuracy contrasts); confirmation, role confirmation and other-entity updates keep A's
value current, so their current and old candidates are one string (a zero margin) and only its
score is computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kvprobe
from kvprobe.studies.common.answers import normalize
from kvprobe.studies.datasets.record_histories import NOTE_SEGMENT, RecordHistory, note_text, question_text, with_note

from . import strings

#: The variants whose current answer differs from A's value (seed L5584-5586).
REPLACEMENT_VARIANTS = ("replacement", "role_swap", "explicit_rejection")


@dataclass(frozen=True)
class RecordItem:
    """One record history of the matched experiment (a study case)."""

    history: RecordHistory
    #: Repetitions of the notebook sentence in the note before Time 2 (the paper: 16).
    note_repeats: int

    @property
    def note(self) -> str:
        """The note's text (:func:`kvprobe.studies.datasets.record_histories.note_text`)."""
        return note_text("notebook", self.note_repeats)

    @property
    def case_id(self) -> str:
        return self.history.case_id

    @property
    def group(self) -> str:
        """The bootstrap unit: the base item, its six variants together."""
        return self.history.case.group

    @property
    def stratum(self) -> None:
        """No strata: the 50 groups are resampled as a whole (seed L5627)."""
        return None

    @property
    def reference(self) -> str:
        """The current answer (after Time 2)."""
        return self.history.queries()[0][2]

    @property
    def old(self) -> str:
        """A's value."""
        return self.history.case.old_value

    @property
    def replacement(self) -> bool:
        """Whether current and old differ (replacement, role swap, explicit rejection)."""
        return normalize(self.reference) != normalize(self.old)

    @property
    def mentions(self) -> tuple[str, ...]:
        """The values the lenient rule looks for, the current one first: current, old, the other record's."""
        return tuple(dict.fromkeys((self.reference, self.old, self.history.other_value)))

    @property
    def question(self) -> str:
        """The current question as it follows the records (``Question: ...``)."""
        return question_text(self.history.queries()[0][1])

    def prompt(self, chat: bool, date: str) -> kvprobe.Prompt:
        """The record history with the note segment inserted before Time 2 (``date``: the chat template's)."""
        return with_note(self.history.prompt(chat, date), "notebook", self.note_repeats)

    def spans(self, history: kvprobe.History, trailing_newline: bool = False
              ) -> tuple[kvprobe.TokenSpan, kvprobe.TokenSpan]:
        """(old span: every token overlapping A, neutral span: the note) in ``history``."""
        return self.history.a_span(history), history.span(NOTE_SEGMENT)

    def columns(self) -> dict[str, Any]:
        """The row columns describing the case."""
        c = self.history.case
        return {"family": c.family, "variant": c.variant, "replacement": self.replacement, "stratum": None,
                "reference": self.reference, "old_value": self.old}
