"""The quantity study: every case x condition x query, scored, generated and graded.

Per case (a group in one information condition) the history is prefilled once.
Every (case, query, condition) of a batch of cases is one row of a single
batched forward: its question runs once, the candidates (current vs other
canonical JSON answers) are scored from copies of that row and the greedy
answer continues from it.
Each row holds the candidate log-probabilities, the margin and its change
against full access and against the matched control, the raw answer with its
stop reason, and the grades of ``quantity_task/grading.py`` (exact, equivalent-unit and
lenient rules).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.studies.quantity_task import grading, tasks
from kvprobe.studies.quantity_task.histories import QuantityTaskHistories
from kvprobe.studies.protocol import CaseRun, Question, require_at_least

#: Answer budget (paper section 1.3: 40 tokens for the small models).
MAX_NEW_TOKENS = 40
#: Cases run together as one batch (measured on 2 CPU cores: see docs/benchmarks.md).
CASES_PER_BATCH = 4
#: Conditions whose matched control is named "<name>-control".
CONTROLLED = ("source", "number")


@dataclass
class QuantityStudy(QuantityTaskHistories):
    """The quantity study: 120 test groups (or the 18 development groups) x two information conditions."""

    name: ClassVar[str] = "quantity"
    #: Generator seed of the groups (values, units, entity names).
    seed: int = tasks.TaskConfig.seed
    #: Run only the first N groups (2 cases each); None: all (120 test, 18 development).
    n_groups: int | None = None
    #: Use the 18 development groups instead of the 120 test groups.
    dev: bool = False
    #: Greedy answer budget in tokens (paper section 1.3: 40 for the small models).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Also run the cache operations (recompute, rebuild, compact), not only the five access conditions.
    operations: bool = True
    #: Cases answered in one batch (4 was fastest on 2 CPU cores).
    cases_per_batch: int = CASES_PER_BATCH

    def __post_init__(self) -> None:
        require_at_least(self, n_groups=1, max_new_tokens=1, cases_per_batch=1)

    def task_config(self) -> tasks.TaskConfig:
        return tasks.TaskConfig(seed=self.seed, n_groups=self.n_groups, dev=self.dev)

    def cases(self) -> list[tasks.Case]:
        return tasks.generate_cases(self.task_config())

    def config(self) -> dict[str, Any]:
        cfg = asdict(self)
        cfg["dataset_hash"] = tasks.dataset_hash(self.cases())
        cfg["segment_order"] = list(tasks.SEGMENT_ORDER)
        cfg["template_kwargs"] = tasks.TEMPLATE_KWARGS
        return cfg

    def questions(self, model: kvprobe.Model, case: tasks.Case, history: kvprobe.History) -> list[Question]:
        return [Question(q.role, q.question, q.candidates, q) for q in tasks.queries(case)]

    def conditions(self, model: kvprobe.Model, case: tasks.Case, history: kvprobe.History
                   ) -> dict[str, kvprobe.Access]:
        return tasks.study_conditions(history, case, operations=self.operations)

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        case, q, g = run.case, question.info, run.case.group
        out, scores = answers[condition].generation, answers[condition].scores
        margins = {name: a.scores.margin() for name, a in answers.items()}
        if q.kind == "quantity":
            auxiliary = g.b_value if g.relation in ("other_attribute", "other_entity") else None
            equiv = grading.grade_quantity(out.text, out.stop_reason, q.reference, old=g.old_value,
                                           auxiliary=auxiliary, rule="equivalent")
            exact = grading.grade_quantity(out.text, out.stop_reason, q.reference, old=g.old_value,
                                           auxiliary=auxiliary, rule="exact")
        else:
            equiv = exact = grading.grade_label(out.text, out.stop_reason, q.reference)
        original = run.originals[condition]
        control = f"{condition}-control"
        return {
            "group_id": g.group_id,
            "split": g.split,
            "relation": g.relation,
            "unit": g.unit,
            "information": case.information,
            "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
            "spans": ([[s.start, s.end] for s in original.spans] if isinstance(original, kvprobe.Mask) else None),
            "reference": q.reference,
            "candidates": list(q.candidates),
            "logp_right": round(scores[0], 6),
            "logp_other": round(scores[1], 6),
            "margin": round(margins[condition], 6),
            "margin_change_vs_full": round(margins[condition] - margins["full"], 6),
            "margin_change_vs_control": (round(margins[condition] - margins[control], 6)
                                         if condition in CONTROLLED else None),
            "category": equiv.category,
            "complete_exact": exact.complete,
            "complete": equiv.complete,
            "lenient_complete": equiv.lenient_complete,
            "strict_single_field": equiv.strict_single_field,
            "fenced": equiv.fenced,
            "first_answer_correct": equiv.first_answer_correct,
            "case_complete": True,
        }
