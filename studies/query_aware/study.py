"""Query-aware selection against a fixed source mask on the record histories (paper partE section E4).

The paper's controlled comparison: 300 record histories (50 test items x 6
variants, ``studies.records``), each question answered greedily under

* ``full``: every key readable;
* ``source-mask``: record A hidden (in all 300 histories, whatever B says);
* ``quest``, ``finch``, ``refreshkv``: the query-aware methods
  (``interventions.quest`` / ``finch`` / ``refreshkv``);
* ``recent-pages``: as many of the latest pages as Quest reads;

the last four at two capacities: *matched* K = history + observation - masked
(``interventions.capacity``; what the source mask leaves readable before the
question's final token) and a *fixed* K (the paper: 128). Answers are graded as in
the record-history study (exact JSON field, plus our lenient first-value rule).
The history cache is checked bit-identical after every case.

UNCLEAR (paper): which queries the controlled comparison asks (it reports one
accuracy per condition); we ask the current query by default and can add the
historical and unrelated ones (``queries``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import kvprobe
from kvprobe import decoding
from kvprobe.interventions.capacity import matched_capacity, observation_length, resident_tokens
from kvprobe.interventions.finch import Finch
from kvprobe.interventions.quest import Quest, RecentPages
from kvprobe.interventions.refreshkv import RefreshKV
from kvprobe.studies.detection.detectors import use_chat
from kvprobe.studies.quantity.grading import normalize
from kvprobe.studies.recognition.records import POSITIVE_VARIANTS
from kvprobe.studies.records.cases import RecordHistory, question_text
from kvprobe.studies.records.study import MAX_NEW_TOKENS, grade, selected_histories

from ..conditions import check_unchanged
from ..runner import study_parameters

METHODS = ("recent-pages", "quest", "finch", "refreshkv")
#: The paper's fixed capacity for the controlled histories (E4).
FIXED_BUDGET = 128


def method_condition(method: str, budget: int) -> kvprobe.Access:
    """The query-aware condition ``method`` at ``budget`` tokens (paper settings)."""
    if method == "quest":
        return Quest(budget=budget)
    if method == "recent-pages":
        return RecentPages(budget)
    if method == "finch":
        return Finch(budget=budget)
    if method == "refreshkv":
        return RefreshKV(budget=budget)
    raise ValueError(f"unknown query-aware method {method!r}; choose from {METHODS}")


@dataclass
class QueryAwareStudy:
    """Full, source mask and the query-aware methods at matched and fixed capacity (runner protocol)."""

    split: str = "test"
    n_groups: int | None = None  # N items (6 histories each), families in turn; None: all 50
    queries: tuple[str, ...] = ("current",)
    methods: tuple[str, ...] = METHODS
    fixed_budget: int | None = FIXED_BUDGET  # None: matched capacity only
    max_new_tokens: int = MAX_NEW_TOKENS
    chat: bool | None = None
    seed: int = 20260910
    cases_per_batch: int = 4
    name: str = "query-aware"
    _cases: list[RecordHistory] | None = field(default=None, repr=False, compare=False)

    def config(self) -> dict[str, Any]:
        return study_parameters(self)

    def cases(self) -> list[RecordHistory]:
        if self._cases is None:
            self._cases = selected_histories(self.split, self.seed, self.n_groups)
        return self._cases

    def arms(self, model: kvprobe.Model, history: kvprobe.History, case: RecordHistory,
             question: str) -> list[tuple[str, str, int | None, kvprobe.Access]]:
        """(arm, capacity kind, K, condition) of one question."""
        source = kvprobe.Mask(case.a_span(history), name="source-mask")
        arms: list[tuple[str, str, int | None, kvprobe.Access]] = [("full", "-", None, kvprobe.Full()),
                                                                   ("source-mask", "-", None, source)]
        budgets = [("matched", matched_capacity(model, history, question, source))]
        if self.fixed_budget is not None:
            budgets.append(("fixed", self.fixed_budget))
        for kind, K in budgets:
            for method in self.methods:
                arms.append((f"{method}@{kind}", kind, K, method_condition(method, K)))
        return arms

    def run_cases(self, model: kvprobe.Model, cases: list[RecordHistory]) -> list[list[dict[str, Any]]]:
        chat = use_chat(model, self.chat)
        plans, items = [], []
        for case in cases:
            history = model.prefill(case.prompt(chat))
            plan = []
            for kind, question, reference in case.queries():
                if kind not in self.queries:
                    continue
                q = question_text(question)
                window = observation_length(model, history, q)
                for arm, capacity, K, condition in self.arms(model, history, case, q):
                    plan.append((kind, reference, arm, capacity, K, len(items), window))
                    items.append((history, kvprobe.Request(q, condition)))
            plans.append((case, history, plan))
        answers = decoding.answer(model, items, max_new_tokens=self.max_new_tokens)
        out = []
        for case, history, plan in plans:
            rows = []
            values = [case.case.old_value, case.case.new_value, case.other_value]
            masked = len(case.a_span(history))
            for kind, reference, arm, capacity, K, i, window in plan:
                g = answers[i].generation
                method = arm.split("@")[0]
                rows.append({
                    "case_id": case.case_id, "group": case.case.group, "family": case.case.family,
                    "variant": case.case.variant, "changed_value": case.case.variant in POSITIVE_VARIANTS,
                    "query": kind, "arm": arm, "method": method, "capacity": capacity, "budget": K,
                    "history_tokens": len(history), "observation_tokens": window, "masked_tokens": masked,
                    "resident_tokens": resident_tokens(method, len(history), window, K or 0),
                    "reference": reference, "output": g.text, "stop_reason": g.stop_reason,
                    "output_tokens": g.n_tokens, **grade(g.text, reference, values),
                    "mentions_old": normalize(case.case.old_value) in normalize(g.text),
                })
            check_unchanged(history, case.case_id)
            out.append(rows)
        return out
