"""The source-answerability review before grading, and each question's target time.

The paper (seed L6807-6816): "Before answer grading, a separate review checks whether each complete
history supports the requested answer and specifies the relevant time or relation. The reviewer sees
the history, questions and original references, without generated answers or cache-operation labels."
Its verdicts are answerable / partial / unanswerable / ambiguous (857 / 1 / 266 / 44 of 1,168); completeness
is measured on the answerable questions, reference agreement on all (L6856-6858). The same review's
"source-only labels" give each question's target time: historical, change-aggregation or current
(L6830, L6895-6897).

:func:`review_run` asks one prompt per question of a run (``strings.REVIEW_PROMPT``: history, question type,
question, original references; never an answer or an operation) through the shared batched judge
(:class:`kvprobe.studies.common.judge.BatchedJudge`, labels the four verdicts, the target time as an extra
field, as FactConsolidation's judge returns its source verdicts beside each label) and writes
``source_review.jsonl``. ``grading.grade_run`` then gives the answer grader the reviewed label ("fixed
source assessments", L6843-6844), and ``summary.summarize`` takes answerability and target time from it.

Without a review (the offline default) a question's answerability is the data's ``source_answerable``
field (generated questions: answerable by construction) and its target time :func:`target_time`'s rule; the
summary says which source set each.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvprobe.studies.common.judge import BatchedJudge, JudgeClient
from . import strings
from .data import GENERATED_TARGET_TIME

#: The file :func:`review_run` writes in a run directory.
REVIEW = "source_review.jsonl"
#: The review's verdicts (the paper's labels, L6812-6815).
REVIEW_LABELS = strings.PAPER_SOURCE_LABELS
#: The extra verdict each review entry gives (name -> allowed values).
REVIEW_FIELDS = {"target_time": strings.TARGET_TIMES}


def review_prompt(history: str, question: Mapping[str, Any]) -> str:
    """The review prompt of one question (a row or question dict with ``question_type``, ``question``,
    ``answers``): the history and the question, never an answer or an operation."""
    return strings.REVIEW_PROMPT.format(history=history, question_type=question["question_type"],
                                        question=question["question"],
                                        references=json.dumps(list(question["answers"]), ensure_ascii=False))


def make_reviewer(client: JudgeClient, **protocol: Any) -> BatchedJudge:
    """A :class:`BatchedJudge` with the review's labels and target-time field (keywords: ``batch_size``,
    ``seed``, ``max_retries``, ``log_path``, ``name``, default ``"source-review"``)."""
    protocol.setdefault("name", "source-review")
    return BatchedJudge(client, labels=REVIEW_LABELS, fields=REVIEW_FIELDS, **protocol)


def review_run(run_dir: str | Path, reviewer: BatchedJudge, out_name: str = REVIEW) -> Path:
    """Review every question of a run once (:func:`make_reviewer`); write ``out_name``, one JSON line per
    question: ``case_id``, ``question_id``, ``answerable`` (a verdict of :data:`REVIEW_LABELS`),
    ``target_time``, ``explanation``, ``reviewer``. The articles are rebuilt from ``config.json`` (hash checked).

    Example: ``review_run("runs/revisions", make_reviewer(MyClient()))``, then ``grading.grade_run(...)``.
    """
    from kvprobe.studies.common.runner import read_rows
    from .history import history_text
    from .study import study_from_config

    if set(reviewer.labels) != set(REVIEW_LABELS) or dict(reviewer.fields) != REVIEW_FIELDS:
        raise ValueError(f"the reviewer must have labels {list(REVIEW_LABELS)} and fields {REVIEW_FIELDS} "
                         "(use make_reviewer)")
    histories = {a.article_id: history_text(a) for a in study_from_config(run_dir).articles()}
    questions: dict[tuple[str, str], dict[str, Any]] = {}
    for r in read_rows(run_dir):
        if not r.get("skipped"):
            questions.setdefault((r["case_id"], r["question_id"]), r)
    keys = list(questions)
    judged = reviewer.judge([review_prompt(histories[questions[k]["article_id"]], questions[k]) for k in keys])
    path = Path(run_dir) / out_name
    path.write_text("".join(json.dumps({"case_id": c, "question_id": q, "answerable": j.label,
                                        "target_time": j.fields["target_time"], "explanation": j.explanation,
                                        "reviewer": j.grader}, sort_keys=True) + "\n"
                            for (c, q), j in zip(keys, judged)))
    return path


def read_review(path: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """``(case_id, question_id) -> review line`` of a ``source_review.jsonl`` (errors name file, line, field)."""
    out = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        g = json.loads(line)
        missing = [k for k in ("case_id", "question_id", "answerable", "target_time", "reviewer") if k not in g]
        if missing:
            raise ValueError(f"{path} line {lineno}: missing field(s) {', '.join(missing)}")
        if g["answerable"] not in REVIEW_LABELS or g["target_time"] not in strings.TARGET_TIMES:
            raise ValueError(f"{path} line {lineno}: answerable {g['answerable']!r} must be one of "
                             f"{', '.join(REVIEW_LABELS)} and target_time {g['target_time']!r} one of "
                             f"{', '.join(strings.TARGET_TIMES)}")
        out[(g["case_id"], g["question_id"])] = g
    return out


def target_time(row: Mapping[str, Any], generated: bool) -> tuple[str, str]:
    """A question's target time without a review, and where it came from: the row's ``target_time`` (the data
    file's field) -> ``"data"``; else, in a generated run, its family's (:data:`data.GENERATED_TARGET_TIME`)
    -> ``"family rule"``; else ``strings.TARGET_TIME_DEFAULT`` -> ``"default"``.

    Example: ``target_time({"question_id": "counting"}, generated=True)`` is
    ``("change-aggregation", "family rule")``.
    """
    if row.get("target_time") is not None:
        return row["target_time"], "data"
    if generated and row["question_id"] in GENERATED_TARGET_TIME:
        return GENERATED_TARGET_TIME[row["question_id"]], "family rule"
    return strings.TARGET_TIME_DEFAULT, "default"
