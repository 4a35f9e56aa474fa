"""Grading revision-history answers: the paper's outcomes, a rule grader (default) and the LLM-judge path.

Outcomes (seed L6878; spec partE E9): ``capped`` takes precedence over every semantic
label and is read from the decode record (the token cap was reached, no EOS); every other
outcome requires EOS: ``complete``, ``partial``, ``wrong``, ``abstain``, ``unverifiable``.
The displayed answer is the content of the last ``\\boxed{}`` when a box marker is present,
else the whole response (seed L6846-6848; ``studies.common.answers.boxed_content``).

The rule grader (the default, offline) is :mod:`.rule_grader`.

The LLM path (:func:`grade_run`): every EOS or capped answer with a non-empty displayed
text becomes one rubric prompt (``strings.RUBRIC``: the complete history, question type,
question, references, source assessment and displayed answer; never the operation, the
model or the termination) judged through :class:`kvprobe.studies.common.judge.BatchedJudge`
with the labels :data:`JUDGE_LABELS` (identical prompts judged once, shuffled anonymous
batches of at most 48, retries, model variant logged) and, beside each label, the separate
reference-agreement verdict (``strings.JUDGE_FIELDS``: agrees / disagrees; paper L6848-6850,
L6856-6857). The grades go to ``grades.jsonl``, which ``common.summary.write_summary`` uses instead
of the rule outcomes; capped still takes precedence there. When the run directory holds a
source review (``review.REVIEW``, written before grading), each rubric carries the reviewed
label as the source assessment (the paper's "fixed source assessments", L6843-6844), else
the data's ``source_answerable``.

Reference agreement with EOS (:func:`reference_agreement`; the paper's own metric over all
questions): the judge's ``reference`` verdict when the grades give it, else the rule grader's
``complete`` (a reference and no other offered option in the displayed answer), EOS required.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvprobe.studies.common.grades import GRADES, read_grade_lines
from kvprobe.studies.common.judge import judge_answered
from . import strings
from .history import history_text

if TYPE_CHECKING:
    from kvprobe.studies.common.judge import BatchedJudge, JudgeClient

#: Every outcome, in report order.
OUTCOMES = ("complete", "partial", "wrong", "abstain", "unverifiable", "capped")
assert set(OUTCOMES) == set(strings.PAPER_OUTCOMES)
#: The labels an LLM judge chooses from (capped is read from the decode record, not judged).
JUDGE_LABELS = tuple(o for o in OUTCOMES if o != "capped")


# ----------------------------------------------------------------------------- the LLM judge path

def make_judge(client: "JudgeClient", **protocol: Any) -> "BatchedJudge":
    """A :class:`kvprobe.studies.common.judge.BatchedJudge` with this study's labels (keywords: ``batch_size``,
    ``seed``, ``max_retries``, ``log_path``, ``name``).

    Example: ``grade_run("runs/revisions", make_judge(MyApiClient(), log_path="runs/revisions/judge.jsonl"))``.
    """
    from kvprobe.studies.common.judge import BatchedJudge

    return BatchedJudge(client, labels=JUDGE_LABELS, fields=strings.JUDGE_FIELDS, **protocol)


def rubric(history: str, row: dict[str, Any], source: str | None = None, reference: bool = True) -> str:
    """The complete grading prompt of one answer row (``strings.RUBRIC``; no operation, model or termination);
    ``source``: the reviewed source label (default the row's ``source_answerable``); ``reference``: also ask
    for the reference-agreement verdict (``strings.RUBRIC_REFERENCE``)."""
    source = source if source is not None else row["source_answerable"]
    return strings.RUBRIC.format(history=history, question_type=row["question_type"], question=row["question"],
                                 references=json.dumps(row["answers"], ensure_ascii=False),
                                 source=source or "not assessed", answer=row["displayed"]) + (
        strings.RUBRIC_REFERENCE if reference else "")


def grade_run(run_dir: str | Path, judge: "BatchedJudge", out_name: str = GRADES) -> Path:
    """Grade every answered row of a run with an LLM ``judge`` (:func:`make_judge`); write ``out_name``.

    One JSON line per row: ``case_id``, ``question_id``, ``condition``, ``label``, ``explanation``,
    ``grader`` and, from a judge with the reference field (:func:`make_judge`), ``reference``. Rows with an
    empty displayed answer are ``wrong`` (and ``disagrees``) without asking. The articles are rebuilt from the
    run's ``config.json`` (their hash must match); a ``source_review.jsonl`` there sets each rubric's source label.
    """
    from kvprobe.studies.common.runner import read_rows
    from .review import REVIEW, read_review
    from .study import study_from_config

    if set(judge.labels) != set(JUDGE_LABELS):
        raise ValueError(f"the judge's labels must be {list(JUDGE_LABELS)}, got {list(judge.labels)} (use make_judge)")
    study = study_from_config(run_dir)
    histories = {a.article_id: history_text(a) for a in study.articles()}
    reviewed = read_review(Path(run_dir) / REVIEW) if (Path(run_dir) / REVIEW).exists() else {}
    asks = "reference" in judge.fields
    rows = [r for r in read_rows(run_dir) if not r.get("skipped")]
    judged = judge_answered(judge, [rubric(histories[r["article_id"]], r,
                                           reviewed.get((r["case_id"], r["question_id"]), {}).get("answerable"), asks)
                                    if r["displayed"].strip() else None for r in rows], "wrong")
    path = Path(run_dir) / out_name
    with open(path, "w") as f:
        for r, j in zip(rows, judged):
            extra = {"reference": j.fields.get("reference", "disagrees")} if asks else {}
            f.write(json.dumps({"case_id": r["case_id"], "question_id": r["question_id"], "condition": r["condition"],
                                "label": j.label, "explanation": j.explanation, "grader": j.grader, **extra},
                               sort_keys=True) + "\n")
    return path


def read_grades(path: str | Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    """``(case_id, question_id, condition) -> grade line`` of a ``grades.jsonl``; a ``reference`` verdict is
    optional (files written before it lack it) but, when given, one of ``strings.REFERENCE_AGREEMENT``."""
    return read_grade_lines(path, ("case_id", "question_id", "condition"), _check_reference)


def _check_reference(g: dict[str, Any], where: str) -> None:
    if "reference" in g and g["reference"] not in strings.REFERENCE_AGREEMENT:
        raise ValueError(f"{where}: reference {g['reference']!r} is not one of "
                         f"{', '.join(strings.REFERENCE_AGREEMENT)}")


def reference_agreement(row: dict[str, Any], grade: dict[str, Any] | None = None) -> bool:
    """Reference agreement with EOS of one answer row (module docstring): EOS, and the grade line's
    ``reference`` verdict is ``agrees`` when it gives one, else the row's rule outcome is ``complete``.

    Example: ``reference_agreement({"stop_reason": "eos", "outcome": "wrong"}, {"reference": "agrees"})`` is True.
    """
    if row["stop_reason"] != "eos":
        return False
    if grade is not None and "reference" in grade:
        return grade["reference"] == "agrees"
    return row["outcome"] == "complete"
