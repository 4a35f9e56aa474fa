"""The quantity and endpoint factorial (paper app:v17_scope, seed L4737-4897; spec partD section 1c).

Does a model's answer after a masked old record depend on what B states, how the question asks, which
neutral note sits before Time 2, and how much of A the mask hides? Each history (record case x
information x note, :mod:`.design`) is prefilled once; both question wordings are asked under five
access conditions (full; whole-A mask and its equal-token control; the narrow mask, number-only or
endpoint, and its control; :mod:`.spans`). Every (history, question, condition) scores the canonical
current and old JSON answers (summed teacher-forced log-probabilities, no leading space, no EOS) and
generates a greedy, EOS-stopped answer of at most 40 tokens through the native chat template, graded by
:mod:`.grading`. One row per (history, question, condition): 1,200 quantity and 600 endpoint rows for the
full design.

Example::

    from kvprobe.studies.common.runner import run_study
    run_study(FactorialStudy(matrices=("quantity",), n_groups=2, notes=("notebook",)),
              kvprobe.load_model("smollm2-135m-instruct"), "runs/factorial-small")
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.studies.datasets.recognition.records import RECORDS_SEED
from kvprobe.studies.common.protocol import (CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least,
                                      require_choices, use_chat)
from kvprobe.studies.datasets.record_histories import MAX_NEW_TOKENS

from . import strings
from .data import GROUPS_PER_FAMILY, INFORMATION, MATRICES, NOTES, QUESTIONS, FactorialCase, factorial_cases
from .grading import grade_answer
from .spans import span_text, study_conditions


def old_mentions(text: str, case: FactorialCase) -> int:
    """How often B (as shown) mentions A's old number (quantities, with or without the unit) or endpoint:
    the role-swapped and rejected candidate mentions the paper records (seed L4786-4787)."""
    if case.matrix == "endpoint":
        return text.count(case.old_value)
    number = case.old_value.split()[0]
    return len(re.findall(rf"(?<![\w.\-]){re.escape(number)}(?!\d|\.\d)", text))


@dataclass
class FactorialStudy(HistoryStudy):
    """Source information x question wording x note x five access conditions, on the deadline (hours) and
    api_endpoint record groups."""

    name: ClassVar[str] = "factorial"
    strings: ClassVar[ModuleType] = strings
    #: Matrices to run: quantity (deadline groups, values in hours), endpoint (api_endpoint groups).
    matrices: tuple[str, ...] = MATRICES
    #: Run only the first N groups of each family (3 cases each); None: all 10.
    n_groups: int | None = None
    #: Information conditions for B in the quantity matrix (stated: B as written; refers-to-a: every
    #: "hours" removed and the paper's sentence prepended). The endpoint matrix always shows B as written.
    information: tuple[str, ...] = INFORMATION
    #: Neutral notes inserted before Time 2 (notebook, shelf: the paper's two sentences, 16 times each).
    notes: tuple[str, ...] = NOTES
    #: Question wordings asked of every history (original: the current question; complete: the
    #: complete-answer request appended).
    wordings: tuple[str, ...] = QUESTIONS
    #: Greedy answer budget in tokens (paper: 40 for the small models).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the chat template (auto: when the tokenizer has one; the paper uses native chat).
    chat: bool | None = None
    #: Generator seed of the record dataset.
    seed: int = RECORDS_SEED
    #: Histories answered in one batch.
    cases_per_batch: int = 4

    def __post_init__(self) -> None:
        require_at_least(self, n_groups=1, max_new_tokens=1, cases_per_batch=1)
        require_choices(self, matrices=MATRICES, information=INFORMATION, notes=NOTES, wordings=QUESTIONS)
        for name in ("matrices", "information", "notes", "wordings"):
            value = tuple(getattr(self, name))
            if not value:
                raise InvalidParameter(name, "needs at least one level")
            if len(set(value)) != len(value):
                raise InvalidParameter(name, f"lists a level twice: {value!r}")
        if self.n_groups is not None and self.n_groups > GROUPS_PER_FAMILY:
            raise InvalidParameter("n_groups", f"the test split has {GROUPS_PER_FAMILY} groups per family, "
                                   f"got {self.n_groups}")

    def make_cases(self) -> list[FactorialCase]:
        return factorial_cases(tuple(self.matrices), self.n_groups, tuple(self.information), tuple(self.notes),
                               self.seed)

    def data_sha256(self) -> str:
        """The digest of every case's A, B as shown, current and old values, one line per case."""
        return hashlib.sha256("\n".join(
            f"{c.case_id}\t{c.record.case.a_text}\t{c.b_text()}\t{c.reference}\t{c.old_value}"
            for c in self.cases()).encode()).hexdigest()

    # ------------------------------------------------------------------ the protocol's hooks
    def prompt(self, model: kvprobe.Model, case: FactorialCase) -> kvprobe.Prompt:
        return case.prompt(use_chat(model.tokenizer, self.chat))

    def questions(self, model: kvprobe.Model, case: FactorialCase, history: kvprobe.History) -> list[Question]:
        """Both wordings of the current question, each scoring the canonical current and old answers."""
        return [Question(wording, case.question(wording), case.candidates()) for wording in self.wordings]

    def conditions(self, model: kvprobe.Model, case: FactorialCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        return study_conditions(history, case)

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        case: FactorialCase = run.case
        scores, out = answers[condition].scores, answers[condition].generation
        margins = {name: a.scores.margin() for name, a in answers.items()}
        mask = run.originals[condition]
        spans = list(mask.spans) if isinstance(mask, kvprobe.Mask) else []
        control = f"{condition}-control"
        return {
            "matrix": case.matrix, "family": case.record.case.family, "variant": case.record.case.variant,
            "record_case": case.record.case_id, "information": case.information, "note": case.note,
            "mask": condition.removesuffix("-control") if spans else None,
            "spans": [[s.start, s.end] for s in spans],
            "masked_tokens": sum(len(s) for s in spans),
            "masked_text": [span_text(run.history, s) for s in spans],
            "b_old_mentions": old_mentions(case.b_text(), case),
            "reference": case.reference, "old_value": case.old_value, "candidates": list(question.candidates),
            "logp_current": round(scores[0], 6), "logp_old": round(scores[1], 6),
            "margin": round(margins[condition], 6),
            "margin_change_vs_control": (round(margins[condition] - margins[control], 6)
                                         if control in margins else None),
            **grade_answer(out.text, out.stop_reason, case.reference, case.old_value, case.record.other_value),
        }
