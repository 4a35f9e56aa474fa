"""The oaks-open judge audit, the study's side (:class:`kvprobe.studies.common.judge_audit.AuditTask`).

The audited verdict is source completeness (``strings.COMPLETENESS``: complete, partial, abstain or wrong), the
label the study's source-complete counts and error types rest on. Each item of ``judge_audit.jsonl`` (written by
hand) holds the completeness prompt's inputs (the earlier, later and unrelated excerpts, the question and the
reference) and a candidate answer; the judge sees :func:`grading.prompt` of them, is asked as
``summary.judge_run`` asks it (:class:`grading.PrefixSharingClient`, one prompt per request, greedy, 10 new
tokens) and its label is the first label word of the reply (:func:`grading.first_label`; none: ``unparsed``).
``kvprobe report judge-audit MODEL oaks-open`` runs it; ``kvprobe report judge-audit rule oaks-open`` scores the
rule grader (:func:`grading.rule_label`, from the answer, the reference and the item's ``old_answer``) beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvprobe.studies.common.judge_audit import AuditItem, AuditTask

from . import grading, strings

#: The completeness prompt's fields besides the answer.
FIELDS = ("question", "reference", "earlier", "later", "unrelated")


def prompt(inputs: Mapping[str, Any], answer: str) -> str:
    """The study's completeness prompt of one audit item."""
    return grading.prompt("completeness", {**inputs, "output": answer})


def rule(item: AuditItem) -> str:
    """The rule grader's label of one audit item (no old answer: none to exclude)."""
    return grading.rule_label(item.answer, item.inputs["reference"], item.extra.get("old_answer") or "")


AUDIT = AuditTask(task="oaks-open", path=Path(__file__).with_name("judge_audit.jsonl"),
                  labels=strings.COMPLETENESS_LABELS, accept="complete",
                  verdict="source completeness (complete, partial, abstain or wrong)", fields=FIELDS,
                  prompt=prompt, label_of=grading.first_label(strings.COMPLETENESS_LABELS),
                  client=grading.PrefixSharingClient, rule=rule, rule_name=grading.RULE_GRADER)
