"""The revisions rule grader, the outcome every result row carries (the LLM-judge path is :mod:`.grading`,
the outcomes themselves ``grading.OUTCOMES``).

:func:`rule_grade` (the default, offline; the paper used GPT-5.6 against the complete
history): capped; else an empty displayed answer is ``wrong`` (spec partE E2); else
``complete`` when a reference or alias occurs word-bounded in the displayed answer after
SQuAD normalization (``studies.common.answers.contains_answer``) and no other choice of the
question's ``options`` does (Ordering: "X or Y?" answered "X, then Y" is wrong); else
``abstain`` when it declines (``studies.session_bias.grading.declines``); else ``wrong``. It never gives ``partial`` or
``unverifiable``, and it cannot tell an answer naming the reference in a wrong claim from a
complete one (an LLM judge can).

Example::

    rule_grade("It was \\boxed{Dick}.", "eos", ["Dick"]).outcome   # "complete"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvprobe.studies.common.answers import contains_answer, declines, displayed_answer, normalize_answer

#: Name of the rule grader in rows and reports.
RULE_GRADER = "rule-v1"


@dataclass(frozen=True)
class Grade:
    """One answer's outcome, the text that was graded, and why."""

    outcome: str
    displayed: str
    explanation: str


def rule_grade(output: str, stop_reason: str, answers: Sequence[str], options: Sequence[str] = ()) -> Grade:
    """The rule grader (module docstring).

    Example: ``rule_grade("It was \\boxed{Dick}.", "eos", ["Dick"]).outcome == "complete"``.
    """
    shown = displayed_answer(output)
    if stop_reason != "eos":
        return Grade("capped", shown, "no EOS before the token cap")
    if not shown.strip():
        return Grade("wrong", shown, "empty answer")
    others = [o for o in options if normalize_answer(o) not in {normalize_answer(a) for a in answers}]
    if contains_answer(shown, list(answers)):
        if contains_answer(shown, others):
            return Grade("wrong", shown, "names a reference and another choice")
        return Grade("complete", shown, "a reference occurs in the displayed answer")
    if declines(shown):
        return Grade("abstain", shown, "declines to answer")
    return Grade("wrong", shown, "no reference in the displayed answer")
