"""The session-bias judge audit, the study's side (:class:`kvprobe.studies.common.judge_audit.AuditTask`).

The audited verdict is LongMemEval's answer check (yes / no). Each item of ``judge_audit.jsonl`` (written by hand)
holds a question's fields (``question_id``, whose ``_abs`` picks the abstention prompt, ``question_type``,
``question``, ``reference``, ``is_abstention``) and a response; the judge sees the official prompt of them
(:func:`grading.anscheck_prompt`), is asked as ``summary.judge_run`` asks it (a
:class:`~kvprobe.studies.common.local_judge.LocalJudgeClient`, one prompt per request, greedy, 10 new tokens) and its
label is ``'yes' in reply.lower()`` (:func:`~kvprobe.studies.common.judge.yes_label`).
``kvprobe report judge-audit MODEL session-bias`` runs it; ``kvprobe report judge-audit rule session-bias`` scores
the study's rule grader (:class:`grading.RuleGrader`) beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvprobe.studies.common.judge import yes_label
from kvprobe.studies.common.judge_audit import AuditItem, AuditTask
from kvprobe.studies.common.local_judge import LocalJudgeClient

from .grading import GradeTask, RuleGrader, anscheck_prompt

#: The answer-check prompt's fields besides the response.
FIELDS = ("question_id", "question_type", "question", "reference", "is_abstention")


def grade_task(inputs: Mapping[str, Any], answer: str) -> GradeTask:
    """What the study's graders see of one audit item."""
    return GradeTask(inputs["question_id"], inputs["question_type"], inputs["question"], inputs["reference"], answer,
                     bool(inputs["is_abstention"]))


def prompt(inputs: Mapping[str, Any], answer: str) -> str:
    """The official answer-check prompt of one audit item."""
    return anscheck_prompt(grade_task(inputs, answer))


def rule(item: AuditItem) -> str:
    """The rule grader's label of one audit item."""
    return "yes" if RuleGrader().grade_one(grade_task(item.inputs, item.answer)).correct else "no"


AUDIT = AuditTask(task="session-bias", path=Path(__file__).with_name("judge_audit.jsonl"), labels=("yes", "no"),
                  accept="yes", verdict="LongMemEval's answer check (yes or no)", fields=FIELDS, prompt=prompt,
                  label_of=yes_label, client=LocalJudgeClient, rule=rule, rule_name=RuleGrader.name)
