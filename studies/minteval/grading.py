"""Optional LLM-judge grading of a MINTEval run (a sensitivity; the default grader is the rule).

The paper scores MINTEval by normalized reference exact match with EOS (L1431), which the
study computes for every row (``em``). A judge can additionally decide whether an answer
gives the reference in other words: :func:`grade_run` turns every generated row into one
complete rubric prompt (``strings.JUDGE_RUBRIC``: question, references, the displayed
answer, i.e. the last ``\\boxed{}`` content if any, else the whole response, as the paper's
judged studies display it; never the policy or the rule's verdict), asks a
:class:`kvprobe.studies.common.judge.BatchedJudge` with labels yes/no (identical prompts judged
once, shuffled anonymous batches, retries, the model variant logged), and writes
``grades.jsonl``: one line per (case_id, question_id, condition). Empty answers are "no"
without asking. ``common.summary.write_summary("minteval", out_dir, grades=path)`` adds the ``judge`` column.

Example::

    from kvprobe.studies.common.judge import BatchedJudge
    grade_run("runs/minteval", BatchedJudge(my_client, labels=("yes", "no"), log_path="judge.jsonl"))
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvprobe.studies.common.answers import displayed_answer
from kvprobe.studies.common.grades import GRADES, read_grade_lines
from kvprobe.studies.common.judge import judge_answered

from . import strings

if TYPE_CHECKING:
    from kvprobe.studies.common.judge import BatchedJudge



def rubric(row: dict[str, Any]) -> str:
    """The full rubric prompt of one result row."""
    return strings.JUDGE_RUBRIC.format(question=row["question"], reference=" / ".join(row["answers"]),
                                       response=displayed_answer(row["output"] or "").strip())


def grade_run(run_dir: str | Path, judge: BatchedJudge, out_name: str = GRADES) -> Path:
    """Judge every generated row of a run; write ``out_name`` in the run directory and return its path."""
    from kvprobe.studies.common.runner import read_rows

    rows = [r for r in read_rows(run_dir) if r.get("output") is not None]
    judged = judge_answered(judge, [rubric(r) if displayed_answer(r["output"] or "").strip() else None for r in rows],
                            "no")
    verdicts = [{"correct": j.label == "yes", "explanation": j.explanation, "grader": j.grader} for j in judged]
    path = Path(run_dir) / out_name
    with open(path, "w") as f:
        for r, v in zip(rows, verdicts):
            f.write(json.dumps({"case_id": r["case_id"], "question_id": r["question_id"],
                                "condition": r["condition"], **v}, sort_keys=True) + "\n")
    return path


def read_grades(path: str | Path) -> dict[tuple[str, str, str], bool]:
    """``(case_id, question_id, condition) -> correct`` from a ``grades.jsonl``."""
    return {k: bool(g["correct"]) for k, g in read_grade_lines(path, ("case_id", "question_id", "condition")).items()}
