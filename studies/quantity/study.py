"""The quantity study: every case x condition x query, scored, generated and graded.

Per case (a group in one information condition) the history is prefilled once.
Every (case, query, condition) of a batch of cases is one row of a single
batched forward: its question runs once, the candidates (current vs other
canonical JSON answers) are scored from copies of that row and the greedy
answer continues from it.
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
from kvprobe import decoding

from ..conditions import check_unchanged
from . import grading, tasks

#: Answer budget (paper section 1.3: 40 tokens for the small models).
MAX_NEW_TOKENS = 40
#: Cases run together as one batch (measured on 2 CPU cores: see README "Performance").
CASES_PER_BATCH = 4
#: Conditions whose matched control is named "<name>-control".
CONTROLLED = ("source", "number")


@dataclass
class QuantityStudy:
    """The quantity study (runner protocol: ``name``, ``config``, ``cases``, ``cases_per_batch``, ``run_cases``)."""

    seed: int = tasks.TaskConfig.seed
    n_groups: int | None = None
    dev: bool = False
    max_new_tokens: int = MAX_NEW_TOKENS
    operations: bool = True
    cases_per_batch: int = CASES_PER_BATCH
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

    def run_cases(self, model: kvprobe.Model, cases: list[tasks.Case]) -> list[list[dict[str, Any]]]:
        """The rows of each case; every (case, query, condition) row runs in one batch."""
        prepared = []
        previous: tuple[str, kvprobe.History] | None = None
        for case in cases:
            # The information conditions of a group differ only in record B, the last
            # segment: the second one reuses the first one's K/V up to B.
            same_group = previous is not None and previous[0] == case.group.group_id
            history = model.prefill(tasks.build_prompt(case), reuse=previous[1] if same_group else None)
            previous = (case.group.group_id, history)
            conds = tasks.study_conditions(history, case, operations=self.operations)
            spans = {name: [[s.start, s.end] for s in c.spans] for name, c in conds.items()
                     if isinstance(c, kvprobe.Mask)}
            # Prepare every condition once (recompute and rebuild are costly) for all its queries.
            conds = {name: kvprobe.Prepared.of(model, history, c) for name, c in conds.items()}
            prepared.append((case, history, conds, spans, tasks.queries(case)))
        items, candidates = [], []
        for case, history, conds, _, asked in prepared:
            for q in asked:
                for cond in conds.values():
                    items.append((history, kvprobe.Request(q.question, cond)))
                    candidates.append(q.candidates)
        answers = iter(decoding.answer(model, items, candidates, max_new_tokens=self.max_new_tokens))
        out = []
        for case, history, conds, spans, asked in prepared:
            rows = []
            for q in asked:
                got = {name: next(answers) for name in conds}
                rows.extend(self._rows(case, history, q, got, spans))
            check_unchanged(history, case.case_id)
            out.append(rows)
        return out

    def _rows(self, case: tasks.Case, history: kvprobe.History, q: tasks.Query,
              got: dict[str, decoding.Answer], spans: dict[str, list[list[int]]]) -> list[dict[str, Any]]:
        """One row per condition for one query of one case."""
        g = case.group
        margins = {name: a.scores.margin() for name, a in got.items()}
        rows = []
        for name, a in got.items():
            out, scores = a.generation, a.scores
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
                "prompt_sha256": history.rendered.sha256,
                "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
                "history_tokens": len(history),
                "spans": spans.get(name),
                "reference": q.reference,
                "candidates": list(q.candidates),
                "logp_right": round(scores[0], 6),
                "logp_other": round(scores[1], 6),
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
        return rows
