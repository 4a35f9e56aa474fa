"""The quantity study: every case x condition x query, scored, generated and graded.

Per case (a group in one information condition) the history is prefilled once;
for each query all conditions are scored together (current vs other canonical
JSON answers) and all (condition, query) answers decode together as one batch.
Each row holds the candidate log-probabilities, the margin and its change
against full access and against the matched control, the raw answer with its
stop reason, and the grades of ``grading.py`` (exact, equivalent-unit and
lenient rules).
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

import kvprobe

from . import grading, tasks

#: Answer budget (paper section 1.3: 40 tokens for the small models).
MAX_NEW_TOKENS = 40
#: Conditions whose matched control is named "<name>-control".
CONTROLLED = ("source", "number")


@dataclass
class QuantityStudy:
    """The quantity study (runner protocol: ``name``, ``config``, ``cases``, ``run_case``)."""

    seed: int = tasks.TaskConfig.seed
    n_groups: int | None = None
    dev: bool = False
    max_new_tokens: int = MAX_NEW_TOKENS
    operations: bool = True
    name: str = "quantity"

    def task_config(self) -> tasks.TaskConfig:
        return tasks.TaskConfig(seed=self.seed, n_groups=self.n_groups, dev=self.dev)

    def cases(self) -> list[tasks.Case]:
        return tasks.generate_cases(self.task_config())

    def config(self) -> dict[str, Any]:
        cfg = {k: v for k, v in asdict(self).items() if k != "name"}
        cfg["dataset_hash"] = tasks.dataset_hash(self.cases())
        cfg["segment_order"] = list(tasks.SEGMENT_ORDER)
        cfg["template_kwargs"] = tasks.TEMPLATE_KWARGS
        return cfg

    def run_case(self, model: kvprobe.Model, case: tasks.Case) -> list[dict[str, Any]]:
        history = model.prefill(tasks.build_prompt(case))
        conds = tasks.study_conditions(history, case, operations=self.operations)
        spans = {name: [[s.start, s.end] for s in c.spans] for name, c in conds.items()
                 if isinstance(c, kvprobe.Mask)}
        # Prepare every condition once (recompute and rebuild are costly) for all calls below.
        conds = {name: kvprobe.Prepared.of(model, history, c) for name, c in conds.items()}
        asked = tasks.queries(case)
        outputs = model.generate(history, [q.question for q in asked], access=conds,
                                 max_new_tokens=self.max_new_tokens)
        prompt_hash = history.rendered.sha256
        g = case.group
        rows = []
        for qi, q in enumerate(asked):
            scores = model.score(history, q.question, list(q.candidates), access=conds)
            margins = {name: s.margin() for name, s in scores.items()}
            for name in conds:
                out = outputs[name][qi]
                if q.kind == "quantity":
                    auxiliary = g.b_value if g.relation in ("other_attribute", "other_entity") else None
                    equiv = grading.grade_quantity(out.text, out.stop_reason, q.reference, old=g.old_value,
                                                   auxiliary=auxiliary, rule="equivalent")
                    exact = grading.grade_quantity(out.text, out.stop_reason, q.reference, old=g.old_value,
                                                   auxiliary=auxiliary, rule="exact")
                else:
                    equiv = exact = grading.grade_label(out.text, out.stop_reason, q.reference)
                control = f"{name}-control"
                rows.append({
                    "case_id": case.case_id,
                    "group_id": g.group_id,
                    "split": g.split,
                    "relation": g.relation,
                    "unit": g.unit,
                    "information": case.information,
                    "query": q.role,
                    "condition": name,
                    "prompt_sha256": prompt_hash,
                    "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
                    "history_tokens": len(history),
                    "spans": spans.get(name),
                    "reference": q.reference,
                    "candidates": list(q.candidates),
                    "logp_right": round(scores[name][0], 6),
                    "logp_other": round(scores[name][1], 6),
                    "margin": round(margins[name], 6),
                    "margin_change_vs_full": round(margins[name] - margins["full"], 6),
                    "margin_change_vs_control": (round(margins[name] - margins[control], 6)
                                                 if name in CONTROLLED else None),
                    "output": out.text,
                    "stop_reason": out.stop_reason,
                    "output_tokens": out.n_tokens,
                    "category": equiv.category,
                    "complete_exact": exact.complete,
                    "complete": equiv.complete,
                    "lenient_complete": equiv.lenient_complete,
                    "strict_single_field": equiv.strict_single_field,
                    "fenced": equiv.fenced,
                    "first_answer_correct": equiv.first_answer_correct,
                    "case_complete": True,
                })
        if not history.check_digest():
            raise RuntimeError(f"{case.case_id}: the shared history cache changed during the case")
        return rows
