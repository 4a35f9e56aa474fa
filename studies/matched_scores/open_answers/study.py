"""Open answers on natural source excerpts (paper app:v41_oaks_open, seed L4564-4736; L398-411).

The supplied-option OAKS arm of the matched-scores study (:mod:`kvprobe.studies.matched_scores.oaks_items`:
one question's earliest kept answer transition, the natural-source prefix ``Earlier source:`` /
``Unrelated source:`` / ``Later source:``) with the answer options and the A/B/UNKNOWN instruction
removed: the model answers the question in its own words ("Three generators use native templates,
greedy decoding, normal EOS, and a 256-token ceiling; full access, old-source masking, and
equal-token unrelated masking share the same prefilled history", L4571-4574). Per question the
history is prefilled once and read under three arms:

* ``full``: full access;
* ``mask``: the earlier source and its trailing newline hidden (the matched-scores OAKS old span);
* ``control``: as many tokens hidden from the start of the unrelated-source text.

Each row keeps the answer, its stop reason, the reference (the later answer) and the rule grader's
labels (:mod:`.grading`); the source-aware model grader runs afterwards on the run folder
(``kvprobe report oaks-open RUN --judge-model MODEL``) and writes ``grades.jsonl``,
which the summary reads instead of the rule labels.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.studies.common.chat_template import DEFAULT_DATE, template_kwargs
from kvprobe.studies.common.protocol import (CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least,
                                             require_choices, require_fits, use_chat)
from kvprobe.studies.matched_scores.oaks_items import (DEMONSTRATION, OAKS_SPLITS, OaksFormatError, OaksItem,
                                                       load_books, oaks_items)
from kvprobe.studies.matched_scores.study import CONDITIONS, FRAMING_TOKENS

from . import grading, strings

#: The paper's ceiling (L4572: "a 256-token ceiling").
MAX_NEW_TOKENS = 256


@dataclass
class OaksOpenStudy(HistoryStudy):
    """Open OAKS answers under full access, the old-source mask and its equal-token control."""

    name: ClassVar[str] = "oaks-open"
    strings: ClassVar[ModuleType] = strings
    #: "demonstration" (an OAKS-schema set generated from the PG-19 novel, labelled as generated) or the path of an
    #: OAKS JSON file in the schema of studies/datasets/oaks.py.
    oaks_source: str = DEMONSTRATION
    #: Books (the paper: the 5 held-out evaluation books), or calibration, development, all.
    oaks_split: str = "evaluation"
    #: Run only the first N questions; None: all.
    n_questions: int | None = None
    #: The old span also covers the newline after the earlier source (the natural-source panel's rule).
    trailing_newline: bool = True
    #: Greedy answer budget in tokens (the paper: 256).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the chat template (auto: when the tokenizer has one; the paper: native templates).
    chat: bool | None = None
    #: Chat-template date (the section states none: the default; templates without a date ignore it).
    template_date: str = DEFAULT_DATE
    #: Questions answered in one batch.
    cases_per_batch: int = 4

    def __post_init__(self) -> None:
        require_at_least(self, n_questions=1, max_new_tokens=1, cases_per_batch=1)
        require_choices(self, oaks_split=OAKS_SPLITS)
        if self.oaks_source != DEMONSTRATION:
            try:  # read the file now, so a bad file fails before any model loads
                self.cases()
            except (OSError, OaksFormatError) as e:
                raise InvalidParameter("oaks_source", str(e)) from e

    def config_extra(self) -> dict[str, Any]:
        return {"conditions": list(CONDITIONS), "template_kwargs": template_kwargs(self.template_date)}

    def make_cases(self) -> list[OaksItem]:
        return oaks_items(load_books(self.oaks_source), self.oaks_split)[:self.n_questions]

    def group(self, case: OaksItem) -> str:
        return case.group

    def prompt(self, model: kvprobe.Model, case: OaksItem) -> kvprobe.Prompt:
        return case.prompt(use_chat(model.tokenizer, self.chat), self.template_date, system=strings.OPEN_SYSTEM)

    def questions(self, model: kvprobe.Model, case: OaksItem, history: kvprobe.History) -> list[Question]:
        return [Question("current", strings.OPEN_QUESTION.format(query=case.change.question), None, case)]

    def conditions(self, model: kvprobe.Model, case: OaksItem, history: kvprobe.History) -> dict[str, kvprobe.Condition]:
        old, neutral = case.spans(history, self.trailing_newline)
        mask = kvprobe.Mask(old, name="mask")
        return {"full": kvprobe.Full(), "mask": mask,
                "control": kvprobe.matched_control(history, mask, neutral, name="control")}

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        require_fits(model, run.case.case_id, len(run.history), [q.text for q in run.questions], self.max_new_tokens,
                     FRAMING_TOKENS, "max_new_tokens", " (at most {room})")

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        """The case's columns, the question and excerpts the grader reads, the hidden tokens and the rule grades."""
        item: OaksItem = run.case
        c = item.change
        generation = answers[condition].generation
        original = run.originals[condition]
        hidden = [[s.start, s.end] for s in getattr(original, "spans", ())]
        return {"family": item.book_title, "stratum": c.book_id, "question_id": c.question_id,
                "question": c.question, "reference": c.new_answer, "old_answer": c.old_answer,
                "earlier": c.old_source, "later": c.new_source, "unrelated": item.neutral,
                "masked_tokens": sum(e - s for s, e in hidden), "hidden": hidden,
                **grading.rule_columns(generation.text, generation.stop_reason, c.new_answer, c.old_answer,
                                       c.old_source, [c.question, c.new_source, item.neutral]),
                "output_token_ids": list(generation.token_ids)}
