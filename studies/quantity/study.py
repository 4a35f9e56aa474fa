"""The quantity study: every case x condition x query, scored, generated and graded.

Per case (a group in one information condition) the history is prefilled once.
Every (case, query, condition) of a batch of cases is one row of a single
batched forward: its question runs once, the candidates (current vs other
canonical JSON answers) are scored from copies of that row and the greedy
answer continues from it.
Each row holds the candidate log-probabilities, the margin and its change
against full access and against the matched control, the raw answer with its
stop reason, and the grades of ``quantity_task/grading.py`` (:data:`GRADE_COLUMNS`: the
paper's three rules and the lenient one). Generation does not depend on grading, so a
stored row can be regraded with the current rules (:func:`regrade_row`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Iterator

import kvprobe
from kvprobe import decoding
from kvprobe.studies.datasets.quantity_task import grading, strings as task_strings, tasks
from kvprobe.studies.datasets.quantity_task.histories import QuantityTaskHistories
from kvprobe.studies.common.chat_template import template_kwargs
from kvprobe.studies.common.no_context import NO_CONTEXT, NoContext
from kvprobe.studies.common.protocol import CaseRun, Question, require_at_least
from kvprobe.studies.common.runner import regrade_results

#: Answer budget (paper section 1.3: 40 tokens for the small models).
MAX_NEW_TOKENS = 40
#: Cases run together as one batch (measured on 2 CPU cores: see docs/benchmarks.md).
CASES_PER_BATCH = 4


#: The row columns the grading writes: ``complete_exact``, ``complete_equivalent`` and ``complete`` are
#: the paper's rules 1, 2 and 3 (``grading.RULES``); ``category``, ``strict_single_field``, ``fenced``
#: and ``first_answer_correct`` come from rule 3's grade; ``lenient_complete`` is the lenient rule; the
#: capped-output diagnostics of the paper (L4425-4457) are :data:`DIAGNOSTIC_COLUMNS`.
GRADE_COLUMNS = ("category", "complete_exact", "complete_equivalent", "complete", "lenient_complete",
                 "strict_single_field", "fenced", "first_answer_correct")
#: Whether the output holds a re-check phrase ("Wait", "re-read", "misread") or a missing-referent phrase
#: ("not specified", "does not mention", "missing"; ``quantity_task/strings.py``), and whether a later answer
#: object differs from the first (the paper: "No capped replacement output contains a second, different answer
#: object", L4431-4432). Computed for every row, read for capped ones.
DIAGNOSTIC_COLUMNS = ("recheck_phrase", "missing_referent_phrase", "second_different_answer")


def grade_columns(group: tasks.Group, query: tasks.Query, text: str, stop_reason: str) -> dict[str, Any]:
    """The :data:`GRADE_COLUMNS` and :data:`DIAGNOSTIC_COLUMNS` of one answer to ``query`` in ``group``."""
    if query.kind == "quantity":
        auxiliary = group.b_value if group.relation in ("other_attribute", "other_entity") else None
        grades = {rule: grading.grade_quantity(text, stop_reason, query.reference, old=group.old_value,
                                               auxiliary=auxiliary, rule=rule) for rule in grading.RULES}
    else:
        grades = {rule: grading.grade_label(text, stop_reason, query.reference, rule=rule) for rule in grading.RULES}
    complete = grades["fenced"]
    return {"category": complete.category, "complete_exact": grades["exact"].complete,
            "complete_equivalent": grades["equivalent"].complete, "complete": complete.complete,
            "lenient_complete": complete.lenient_complete, "strict_single_field": complete.strict_single_field,
            "fenced": complete.fenced, "first_answer_correct": complete.first_answer_correct,
            **{column: getattr(complete, column) for column in DIAGNOSTIC_COLUMNS}}


def run_groups(config: dict[str, Any]) -> dict[str, tasks.Group]:
    """The groups of a run by id, regenerated from its ``config.json`` (checked against its ``data_sha256``)."""
    study = config["study_config"]
    task = tasks.TaskConfig(seed=study["seed"], n_groups=study["n_groups"], dev=study["dev"])
    if tasks.dataset_hash(tasks.generate_cases(task)) != study["data_sha256"]:
        raise ValueError(f"the task generator no longer gives this run's groups (seed {study['seed']})")
    return {g.group_id: g for g in tasks.generate_groups(task)}


def regrade_row(row: dict[str, Any], groups: dict[str, tasks.Group]) -> dict[str, Any]:
    """``row`` with its :data:`GRADE_COLUMNS` and :data:`DIAGNOSTIC_COLUMNS` recomputed from its stored output and
    stop reason."""
    group = groups[row["group_id"]]
    query = next(q for q in tasks.queries(tasks.Case(group, row["information"])) if q.role == row["query"])
    if query.reference != row["reference"]:
        raise ValueError(f"{row['case_id']} {row['query']}: reference {row['reference']!r}, the task gives "
                         f"{query.reference!r}")
    return {**row, **grade_columns(group, query, row["output"], row["stop_reason"])}


def regrade_rows(rows: Iterator[dict[str, Any]], config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """:func:`regrade_row` of every row of a run (its groups regenerated once)."""
    groups = run_groups(config)
    return (regrade_row(row, groups) for row in rows)


def regrade_run(out_dir: Path | str) -> int:
    """Regrade a run's stored rows in place (``runner.regrade_results``); the number of rows that changed.

    How the committed runs got :data:`DIAGNOSTIC_COLUMNS`: ``python -m kvprobe.studies.quantity.study RUN ...``.
    """
    groups = run_groups(json.loads((Path(out_dir) / "config.json").read_text()))
    return regrade_results(out_dir, lambda row: regrade_row(row, groups))


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
    #: Run the cache operations (recompute, rebuild, compact) as well as the five access conditions.
    operations: bool = True
    #: Also apply each operation to the source mask's equal-token note control (recompute-, rebuild- and
    #: compact-control; the paper's operation-matched controls of the compaction panel, L4535-4537).
    operation_controls: bool = False
    #: Note tokens skipped before each matched control starts (0: the note's first word, as in the
    #: paper's quoted control window, seed ~3803-3806).
    control_skip: int = tasks.CONTROL_SKIP
    #: Cases answered in one batch (4 was fastest on 2 CPU cores).
    cases_per_batch: int = CASES_PER_BATCH
    #: Also answer every query with no history (weights only: the system message and the question; the
    #: paper's no-context baseline), whose wrong historical answers condition the report's no-context table.
    no_context: bool = False

    def __post_init__(self) -> None:
        require_at_least(self, n_groups=1, max_new_tokens=1, control_skip=0, cases_per_batch=1)
        if self.operation_controls and not self.operations:
            raise ValueError("quantity: operation_controls applies the cache operations to the note control; "
                             "it needs the operations (drop --no-operations)")

    def task_config(self) -> tasks.TaskConfig:
        return tasks.TaskConfig(seed=self.seed, n_groups=self.n_groups, dev=self.dev)

    def make_cases(self) -> list[tasks.Case]:
        return tasks.generate_cases(self.task_config())

    def data_sha256(self) -> str:
        """The generated cases' digest (:func:`tasks.dataset_hash`: values, units, names)."""
        return tasks.dataset_hash(self.cases())

    def config_extra(self) -> dict[str, Any]:
        return {"segment_order": list(tasks.SEGMENT_ORDER),
                "template_kwargs": template_kwargs(task_strings.TEMPLATE_DATE)}

    def questions(self, model: kvprobe.Model, case: tasks.Case, history: kvprobe.History) -> list[Question]:
        return [Question(q.role, q.question, q.candidates, q) for q in tasks.queries(case)]

    def conditions(self, model: kvprobe.Model, case: tasks.Case, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        conditions = tasks.study_conditions(history, case, operations=self.operations, control_skip=self.control_skip,
                                            operation_controls=self.operation_controls)
        if self.no_context:
            conditions[NO_CONTEXT] = NoContext()
        return conditions

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        case, q, g = run.case, question.info, run.case.group
        out, scores = answers[condition].generation, answers[condition].scores
        margins = {name: a.scores.margin() for name, a in answers.items()}
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
                                         if control in margins else None),
            **grade_columns(g, q, out.text, out.stop_reason),
            "case_complete": True,
        }


if __name__ == "__main__":  # pragma: no cover - the regrade of committed runs after a grading change
    import sys

    for run_dir in sys.argv[1:]:
        print(run_dir, regrade_run(run_dir), "rows changed")
