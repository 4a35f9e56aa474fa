"""Grading FactConsolidation answers with an LLM judge (the rule grader, the offline default that each row
carries, is :mod:`.rule_grader`).

LLM grader (:func:`grade_run`): the shared batched judge protocol (:mod:`kvprobe.studies.common.judge`);
one judge per history whose request instructions hold the complete numbered history (as each of the
paper's forty batches did); each answer's rubric (``strings.RUBRIC``) holds its question, references
and displayed text, never the condition; labels ``strings.JUDGE_LABELS``. Beside each label the judge
returns the source review's verdicts on the question (``strings.JUDGE_FIELDS``: ``answerable``, and
``reference`` agreement; paper L1569-1572: "Source assessments and answer labels are produced together").
It writes ``grades.jsonl``, which ``common.summary.write_summary(..., grades=...)`` reads instead of the rule
labels; :func:`question_verdicts` turns the per-answer verdicts into one per question (the summary reports
questions not judged answerable apart). The rule grader gives no such verdict: every question counts as
answerable there.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable, Iterable
from pathlib import Path
from typing import Any

from kvprobe.studies.common.grades import GRADES, read_grade_lines
from . import strings

#: Labels of an answer that ended with EOS (the rule grader never says "partial"; the LLM judge may).
LABELS = strings.JUDGE_LABELS


# ----------------------------------------------------------------------------- the LLM judge

def rubric(row: dict[str, Any]) -> str:
    """The full rubric prompt of one result row (question, references, displayed text; no condition)."""
    return strings.RUBRIC.format(question=row["question"], references="; ".join(row["answers"]),
                                 answer=row["displayed"])


def grade_run(run_dir: str | Path, client: Any, batch_size: int = 40, seed: int = 0,
              log_path: str | Path | None = None, out_name: str = GRADES) -> Path:
    """Grade every row of a run with an LLM judge; write ``out_name`` (one JSON line per (case_id,
    qa_pair_id, condition): label, explanation, grader) and return its path.

    Args:
        client: a :class:`kvprobe.studies.common.judge.JudgeClient` (users implement it; nothing here opens a
            network connection).
        batch_size: answers per request (the paper: ten questions with every answer to them).

    Example: ``grade_run("runs/fc", MyClient())``, then
    ``kvprobe.studies.common.summary.write_summary("factconsolidation", "runs/fc", grades=path)``.
    """
    from kvprobe.studies.common.judge import BatchedJudge, instructions_for
    from kvprobe.studies.common.runner import read_rows

    from .study import study_from_config

    run_dir = Path(run_dir)
    study = study_from_config(json.loads((run_dir / "config.json").read_text()))
    contexts = {case.case_id: case.context for case in study.cases()}
    rows = list(read_rows(run_dir))
    out = run_dir / out_name
    lines = []
    for case_id in dict.fromkeys(r["case_id"] for r in rows):
        mine = [r for r in rows if r["case_id"] == case_id]
        instructions = instructions_for(strings.JUDGE_LABELS, strings.JUDGE_FIELDS) + "\n\n" + strings.JUDGE_HISTORY.format(
            history=contexts[case_id])
        judge = BatchedJudge(client, labels=strings.JUDGE_LABELS, instructions=instructions, batch_size=batch_size,
                             seed=seed, log_path=log_path, name="llm-judge", fields=strings.JUDGE_FIELDS)
        for r, j in zip(mine, judge.judge([rubric(r) for r in mine])):
            lines.append(json.dumps({"case_id": case_id, "qa_pair_id": r["qa_pair_id"], "condition": r["condition"],
                                     "label": j.label, "explanation": j.explanation, "grader": j.grader,
                                     **j.fields}, sort_keys=True))
    out.write_text("\n".join(lines) + "\n")
    return out


def read_grades(path: str | Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """``(case_id, qa_pair_id, condition) -> {"label", "grader", ...}`` from a grades file (named errors); the
    source-review fields (``strings.JUDGE_FIELDS``) are optional (files written before them lack them), but a
    value given must be one of the field's verdicts."""
    return read_grade_lines(path, ("case_id", "qa_pair_id", "condition"), _check_grade)


def _check_grade(g: dict[str, Any], where: str) -> None:
    missing = [k for k in ("case_id", "qa_pair_id", "condition", "label", "grader") if k not in g]
    if missing or g["label"] not in LABELS:
        raise ValueError(f"{where}: " + (f"missing field(s) {', '.join(missing)}" if missing else
                                         f"label {g['label']!r} is not one of {', '.join(LABELS)}"))
    bad = [f"{name} {g[name]!r} is not one of {', '.join(values)}" for name, values in strings.JUDGE_FIELDS.items()
           if name in g and g[name] not in values]
    if bad:
        raise ValueError(f"{where}: {'; '.join(bad)}")


def question_verdict(verdicts: Iterable[str], tie: str = "ambiguous") -> str:
    """One question's verdict from the verdicts of its answers' judgments: the one most of them give; a tie
    between the most frequent gives ``tie``.

    Example: ``question_verdict(["answerable", "answerable", "unanswerable"])`` is ``"answerable"``;
    ``question_verdict(["answerable", "unanswerable"])`` is ``"ambiguous"``.
    """
    counts = Counter(verdicts).most_common()
    if not counts:
        raise ValueError("a question needs at least one verdict")
    return tie if len(counts) > 1 and counts[0][1] == counts[1][1] else counts[0][0]


def question_verdicts(grades: Iterable[dict[str, Any]], field: str = "answerable"
                      ) -> tuple[dict[Hashable, str], int] | None:
    """``({(case_id, qa_pair_id): verdict}, questions whose judgments disagree)`` of one source-review field
    over grade lines (:func:`read_grades` values), or None when no line gives it (the rule grader, an older
    grades file). A question some of whose lines lack the field takes the verdict of those that give it."""
    by: dict[Hashable, list[str]] = {}
    for g in grades:
        if field in g:
            by.setdefault((g["case_id"], g["qa_pair_id"]), []).append(g[field])
    if not by:
        return None
    tie = strings.JUDGE_TIES[field]
    return {k: question_verdict(v, tie) for k, v in by.items()}, sum(len(set(v)) > 1 for v in by.values())
