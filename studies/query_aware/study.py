"""Query-aware selection against a fixed source mask on the record histories (paper partE section E4).

The paper's controlled comparison: 300 record histories (50 test items x 6
variants, ``studies.datasets.record_histories``), each question answered greedily under

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

On the study protocol (:class:`~kvprobe.studies.common.protocol.HistoryStudy`) the case's
conditions are full access and the source mask; the query-aware conditions depend on the
question (matched K), so :meth:`QueryAwareStudy.setup` builds every question's conditions
(:meth:`QueryAwareStudy.budgeted_conditions`) and :meth:`QueryAwareStudy.question_conditions`
hands them to the run loop. A row's ``condition`` is one of them (``full``, ``source-mask``,
``quest@matched``...).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.interventions.capacity import matched_capacity, observation_length, resident_tokens
from kvprobe.studies.datasets.recognition.records import RECORDS_SEED
from kvprobe.studies.common.answers import grade, normalize
from kvprobe.studies.datasets.recognition.cases import SPLITS
from kvprobe.studies.datasets.recognition.records import POSITIVE_VARIANTS
from kvprobe.studies.datasets.record_histories import MAX_NEW_TOKENS, QUERY_KINDS, RecordHistory, question_text, \
    selected_histories
from kvprobe.studies.common.conditions import QUERY_AWARE_METHODS, query_aware_condition, supported
from kvprobe.studies.common.protocol import CaseRun, HistoryStudy, Question, require_at_least, require_choices, use_chat

METHODS = QUERY_AWARE_METHODS
#: The paper's fixed capacity for the controlled histories (E4).
FIXED_BUDGET = 128
#: The conditions every question is answered under besides the query-aware ones (the case's conditions).
REFERENCES = ("full", "source-mask")


@dataclass
class QueryAwareStudy(HistoryStudy):
    """Full, source mask and the query-aware methods at matched and fixed capacity on the record histories."""

    name: ClassVar[str] = "query-aware"
    #: Split of the record histories (the paper: the 300 test histories, 50 items x 6 variants).
    split: str = "test"
    #: Run only N items (6 histories each), taken from the families in turn; None: all 50.
    n_groups: int | None = None
    #: Queries asked of every history (current, historical, unrelated; the paper reports one accuracy).
    queries: tuple[str, ...] = ("current",)
    #: Query-aware methods compared with the source mask (recent-pages, quest, finch, refreshkv).
    methods: tuple[str, ...] = METHODS
    #: The fixed capacity K besides the matched one (the paper: 128); None: matched capacity only.
    fixed_budget: int | None = FIXED_BUDGET
    #: Greedy answer budget in tokens (as the record-history study: 40).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Generator seed of the record dataset.
    seed: int = RECORDS_SEED
    #: Histories answered in one batch.
    cases_per_batch: int = 4

    def __post_init__(self) -> None:
        self.queries, self.methods = tuple(self.queries), tuple(self.methods)
        require_at_least(self, n_groups=1, fixed_budget=1, max_new_tokens=1, cases_per_batch=1)
        require_choices(self, split=SPLITS, queries=QUERY_KINDS, methods=METHODS)

    def make_cases(self) -> list[RecordHistory]:
        return selected_histories(self.split, self.seed, self.n_groups)

    def budgeted_conditions(self, model: kvprobe.Model, history: kvprobe.History, case: RecordHistory,
                            question: str) -> list[tuple[str, str, int | None, kvprobe.Condition]]:
        """(name, capacity kind, K, condition) of every condition of one question: full access, the source
        mask, then each method at matched and fixed capacity."""
        source = kvprobe.Mask(case.a_span(history), name="source-mask")
        out: list[tuple[str, str, int | None, kvprobe.Condition]] = [("full", "-", None, kvprobe.Full()),
                                                                  ("source-mask", "-", None, source)]
        budgets = [("matched", matched_capacity(model, history, question, source))]
        if self.fixed_budget is not None:
            budgets.append(("fixed", self.fixed_budget))
        for kind, K in budgets:
            for method in self.methods:
                out.append((f"{method}@{kind}", kind, K, query_aware_condition(method, K)))
        return out

    # ------------------------------------------------------------------ the protocol's hooks
    def group(self, case: RecordHistory) -> str:
        return case.case.group

    def prompt(self, model: kvprobe.Model, case: RecordHistory) -> kvprobe.Prompt:
        return case.prompt(use_chat(model.tokenizer, self.chat))

    def questions(self, model: kvprobe.Model, case: RecordHistory, history: kvprobe.History) -> list[Question]:
        """The asked queries (``queries``); ``info``: the reference answer."""
        return [Question(kind, question_text(question), None, reference)
                for kind, question, reference in case.queries() if kind in self.queries]

    def conditions(self, model: kvprobe.Model, case: RecordHistory, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        """Full access and the source mask (the question-independent conditions, prepared once per history)."""
        return {"full": kvprobe.Full(), "source-mask": kvprobe.Mask(case.a_span(history), name="source-mask")}

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """Every question's conditions (matched K depends on the question) as ``run.extra["conditions"]``:
        name -> (capacity kind, K, condition); its observation window and the masked tokens."""
        run.extra["masked"] = len(run.case.a_span(run.history))
        run.extra["window"], run.extra["conditions"] = {}, {}
        for q in run.questions:
            run.extra["window"][q.text] = observation_length(model, run.history, q.text)
            candidates = self.budgeted_conditions(model, run.history, run.case, q.text)
            methods = supported(self.name, run.history, {n: c for n, _, _, c in candidates if n not in REFERENCES})
            run.extra["conditions"][q.text] = {
                name: (capacity, K, run.conditions[name] if name in REFERENCES else methods[name])
                for name, capacity, K, _ in candidates if name in run.conditions or name in methods}

    def question_conditions(self, run: CaseRun, question: Question) -> dict[str, kvprobe.Condition]:
        """The question's conditions: full, source mask, then each method at matched and fixed capacity."""
        return {name: condition for name, (_, _, condition) in run.extra["conditions"][question.text].items()}

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        c = run.case.case
        g = answers[condition].generation
        capacity, K, _ = run.extra["conditions"][question.text][condition]
        window = run.extra["window"][question.text]
        method = condition.split("@")[0]
        values = [c.old_value, c.new_value, run.case.other_value]
        return {
            "family": c.family, "variant": c.variant, "changed_value": c.variant in POSITIVE_VARIANTS,
            "method": method, "capacity": capacity, "budget": K, "observation_tokens": window,
            "masked_tokens": run.extra["masked"],
            "resident_tokens": resident_tokens(method, len(run.history), window, K or 0),
            "reference": question.info, **grade(g.text, question.info, values),
            "mentions_old": normalize(c.old_value) in normalize(g.text),
        }
