"""Candidate scores and generated answers under matched conditions (paper app:v7_bridge, seed
L5561-5693; app:v35_generation L4899-5100 and its generation limits L5345-5370; spec partD
sections 0, 1a, 1b, 1e and 6).

Per case the history is prefilled once; three arms read it (the protocol forks the cache per
condition and proves it unchanged after the case):

* ``full``: full access;
* ``mask``: the old source hidden (records: every token overlapping A, applied unconditionally,
  also when current = old; OAKS: the earlier source and its trailing newline);
* ``control``: as many tokens hidden from the start of the neutral block (records: the notebook
  note every arm carries before Time 2; OAKS: the unrelated-source text).

Under each arm the canonical current and old answers (``{"answer": "value"}``, no leading space, no
EOS) are scored teacher-forced and a greedy EOS-stopped answer is generated (40 tokens for the
small models), with the same prompt and answer requirements. Each row holds both scores and the
margin, the answer graded four ways (:mod:`.scoring`: exact field, complete, value category, lenient) and
the grades of the trace's prefixes at every ``prefix_budgets`` budget (generation limits).

``dataset="records"``: the 300 test record histories (50 groups x 6 variants), the current question.
``dataset="oaks"``: one answer transition per held-out OAKS question, a JSON A/B/UNKNOWN choice.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, Union

import kvprobe
from kvprobe import decoding
from kvprobe.studies.datasets.recognition.records import RECORDS_SEED
from kvprobe.studies.common.protocol import (CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least,
                                      require_choices, require_fits, use_chat)
from kvprobe.studies.datasets.recognition.cases import SPLITS
from kvprobe.studies.datasets.recognition.families import DEADLINE_UNITS
from kvprobe.studies.common.answers import canonical_answer
from kvprobe.studies.common.chat_template import template_kwargs
from kvprobe.studies.datasets.record_histories import MAX_NEW_TOKENS, selected_histories

from . import strings
from .oaks_items import DEMONSTRATION, OAKS_SPLITS, OaksFormatError, OaksItem, load_books, oaks_items
from kvprobe.studies.common.detectors import strings as record_strings
from .record_items import RecordItem
from .scoring import budget_grades, grade_answer

DATASETS = ("records", "oaks")
#: The three conditions, in report order.
CONDITIONS = ("full", "mask", "control")
#: Tokens the chat template may add around a question (for the position check).
FRAMING_TOKENS = 32

Item = Union[RecordItem, OaksItem]


@dataclass
class MatchedScoresStudy(HistoryStudy):
    """Full access, the old-source mask and its equal-token control: candidate scores and greedy answers."""

    name: ClassVar[str] = "matched-scores"
    strings: ClassVar[ModuleType] = strings
    #: Cases: "records" (the 300 synthetic record histories) or "oaks" (one transition per OAKS question).
    dataset: str = "records"
    #: records: run only N items (6 histories each), taken from the families in turn; None: all 50.
    n_groups: int | None = None
    #: records: split of the record histories (the paper: the 300 test histories).
    split: str = "test"
    #: records: generator seed of the record dataset.
    seed: int = RECORDS_SEED
    #: records: how the deadline family states values (the paper's dataset: hours).
    deadline_unit: str = "hours"
    #: records: repetitions of the notebook sentence in the note before Time 2 (the paper: 16).
    note_repeats: int = record_strings.NOTE_REPEATS
    #: oaks: "demonstration" (an OAKS-schema set generated from the PG-19 novel, labelled as generated) or the
    #: path of an OAKS JSON file in the schema of studies/datasets/oaks.py.
    oaks_source: str = DEMONSTRATION
    #: oaks: books (the paper: the 5 held-out evaluation books), or calibration, development, all.
    oaks_split: str = "evaluation"
    #: oaks: run only the first N questions; None: all.
    n_questions: int | None = None
    #: oaks: the old span also covers the newline after the earlier source (the natural-source panel's rule).
    trailing_newline: bool = True
    #: Neutral-block tokens skipped before the control starts (0: its first token, as in the paper).
    control_skip: int = 0
    #: Greedy answer budget in tokens (the paper: 40 for Qwen3-4B/8B and Llama-3.2-3B, 256 for larger models).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Budgets whose trace prefixes are graded as if generation had stopped there (e.g. 40,128,256 with
    #: --max-new-tokens 256); each at most max_new_tokens.
    prefix_budgets: tuple[int, ...] = (MAX_NEW_TOKENS,)
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Chat-template date (the paper fixes Llama's to 11 September 2026; templates without a date ignore it).
    template_date: str = record_strings.TEMPLATE_DATE
    #: Cases answered in one batch (records: the 6 variants of an item share their prefix K/V).
    cases_per_batch: int = 6

    def __post_init__(self) -> None:
        require_at_least(self, n_groups=1, note_repeats=1, n_questions=1, control_skip=0, max_new_tokens=1,
                         prefix_budgets=1, cases_per_batch=1)
        require_choices(self, dataset=DATASETS, split=SPLITS, deadline_unit=DEADLINE_UNITS, oaks_split=OAKS_SPLITS)
        budgets = tuple(self.prefix_budgets)
        if not budgets:
            raise InvalidParameter("prefix_budgets", "give at least one budget")
        if list(budgets) != sorted(set(budgets)):
            raise InvalidParameter("prefix_budgets", f"must increase without repeats, got {budgets!r}")
        if budgets[-1] > self.max_new_tokens:
            raise InvalidParameter("prefix_budgets", f"{budgets[-1]} exceeds max_new_tokens ({self.max_new_tokens}): "
                                   "a prefix cannot be longer than the trace")
        self.prefix_budgets = budgets
        if self.dataset == "oaks" and self.oaks_source != DEMONSTRATION:
            try:  # read the file now, so a bad file fails before any model loads
                self.cases()
            except (OSError, OaksFormatError) as e:
                raise InvalidParameter("oaks_source", str(e)) from e

    def config_extra(self) -> dict[str, Any]:
        """The conditions and the chat-template variables (:mod:`kvprobe.studies.common.chat_template`: thinking off,
        UNCLEAR for this experiment; ``template_date``)."""
        return {"conditions": list(CONDITIONS), "template_kwargs": template_kwargs(self.template_date)}

    def make_cases(self) -> list[Item]:
        if self.dataset == "records":
            return [RecordItem(h, self.note_repeats) for h in
                    selected_histories(self.split, self.seed, self.n_groups, self.deadline_unit)]
        return oaks_items(load_books(self.oaks_source), self.oaks_split)[:self.n_questions]

    # ------------------------------------------------------------------ the protocol's hooks
    def group(self, case: Item) -> str:
        return case.group

    def reuse_key(self, case: Item) -> str | None:
        """The six variants of a record item share every token before Time 2: reuse those K/V."""
        return case.group if self.dataset == "records" else None

    def prompt(self, model: kvprobe.Model, case: Item) -> kvprobe.Prompt:
        return case.prompt(use_chat(model.tokenizer, self.chat), self.template_date)

    def questions(self, model: kvprobe.Model, case: Item, history: kvprobe.History) -> list[Question]:
        """The current question; candidates: the canonical current and old answers (one when they coincide)."""
        current, old = canonical_answer(case.reference), canonical_answer(case.old)
        return [Question("current", case.question, (current, old) if current != old else (current,), case)]

    def conditions(self, model: kvprobe.Model, case: Item, history: kvprobe.History) -> dict[str, kvprobe.Condition]:
        old, neutral = case.spans(history, self.trailing_newline)
        mask = kvprobe.Mask(old, name="mask")
        return {"full": kvprobe.Full(), "mask": mask,
                "control": kvprobe.matched_control(history, mask, neutral, skip=self.control_skip, name="control")}

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """Refuse a case that does not fit the model's positions; keep what prefix re-scoring needs."""
        require_fits(model, run.case.case_id, len(run.history), [q.text for q in run.questions], self.max_new_tokens,
                     FRAMING_TOKENS, "max_new_tokens", " (at most {room})")
        run.extra["decode"] = model.tokenizer.decode
        run.extra["eos_ids"] = model.eos_ids

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        """Both candidate scores and the margin, the answer's grades, and the grades of its prefixes."""
        item: Item = run.case
        scores, generation = answers[condition].scores, answers[condition].generation
        lp = scores.logprobs
        original = run.originals[condition]
        hidden = [[s.start, s.end] for s in getattr(original, "spans", ())]
        return {"dataset": self.dataset, **item.columns(), "candidates": list(scores.candidates),
                "lp_current": lp[0], "lp_old": lp[-1], "margin": lp[0] - lp[-1],
                "masked_tokens": sum(e - s for s, e in hidden), "hidden": hidden,
                **grade_answer(generation.text, generation.stop_reason, item.reference, item.old, item.mentions),
                "budgets": budget_grades(generation, self.prefix_budgets, run.extra["decode"], run.extra["eos_ids"],
                                         item.reference, item.old, item.mentions),
                "output_token_ids": list(generation.token_ids)}
