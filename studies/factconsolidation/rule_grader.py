"""The FactConsolidation rule grader: displayed text, the paper's match metrics and a label per answer, the
grading columns every result row carries (the LLM path is :mod:`.grading`).

Displayed text (paper L1564-1566): "The parser extracts the final boxed answer when a box marker
occurs; otherwise it displays the complete original response" (an unclosed box, e.g. a capped
answer cut inside it, displays the whole response).

Metrics per answer (spec partA section 3):

* ``official_match``: MemoryAgentBench's ``substring_exact_match``: a reference, SQuAD-normalized,
  is a substring of the normalized full response (no EOS needed);
* ``final_match``: a reference occurs in the normalized displayed text and the answer ended with EOS;
* termination (paper Table tab:v43_mab_termination): ``valid_box`` (a closed ``\\boxed{}``),
  ``only_box`` (the whole stripped response is one box), and the row's ``stop_reason``.

Rule grader (offline default; the paper used GPT-5.6 with a source-aware rubric), a label per
answer from its displayed text (``label``):

* ``complete``: a reference or alias occurs in it (word-bounded after SQuAD normalization) and no
  previous (outdated) answer does, since the source review marks answers listing a current and a
  conflicting value incorrect (paper L1630-1634);
* ``abstain``: otherwise, when it declines (the shared decline phrases, ``answers.DECLINE_PHRASES``);
* ``wrong``: otherwise (an empty displayed text included).

The net-accuracy analysis assigns capped answers first, whatever their label (:mod:`outcomes`).
``old_in_box``: the final box holds a previous-answer alias and no current alias (paper L1694-1696).

Example::

    grade_columns("It is \\boxed{Paris}.", "eos", ["Paris"], ["Lyon"])["label"]   # "complete"
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvprobe.studies.common.answers import boxed_content, contains_answer, declines, displayed_answer, normalize_answer


#: The rule grader's name in reports.
RULE_GRADER = "rule-v1"


def only_box(output: str) -> bool:
    r"""The whole stripped response is one closed box (``\boxed{Paris}``)."""
    text = output.strip()
    box = boxed_content(text)
    return box is not None and text == "\\boxed{" + box + "}"


def official_match(output: str, answers: Sequence[str]) -> bool:
    """MemoryAgentBench's substring match: a normalized reference inside the normalized full response.

    Example: ``official_match("It is the Paris office.", ["Paris"])`` is True.
    """
    text = normalize_answer(output)
    return any(n and n in text for n in map(normalize_answer, answers))


def final_match(output: str, answers: Sequence[str], eos: bool) -> bool:
    """A normalized reference inside the normalized displayed text, and the answer ended with EOS."""
    return eos and official_match(displayed_answer(output), answers)


def old_in_box(output: str, answers: Sequence[str], previous: Sequence[str]) -> bool:
    """The final box holds a previous-answer alias and no current-answer alias."""
    box = boxed_content(output)
    return box is not None and contains_answer(box, list(previous)) and not contains_answer(box, list(answers))


def rule_label(output: str, answers: Sequence[str], previous: Sequence[str]) -> str:
    """``complete``, ``abstain`` or ``wrong`` (module docstring).

    Example: ``rule_label("\\\\boxed{Paris or Lyon}", ["Paris"], ["Lyon"])`` is ``"wrong"``.
    """
    shown = displayed_answer(output)
    if not shown.strip():
        return "wrong"
    if contains_answer(shown, list(answers)) and not contains_answer(shown, list(previous)):
        return "complete"
    return "abstain" if declines(shown) else "wrong"


def grade_columns(output: str, stop_reason: str, answers: Sequence[str], previous: Sequence[str]) -> dict[str, Any]:
    """The grading columns of one result row."""
    eos = stop_reason == "eos"
    return {"displayed": displayed_answer(output), "official_match": official_match(output, answers),
            "final_match": final_match(output, answers, eos), "valid_box": boxed_content(output) is not None,
            "only_box": only_box(output), "label": rule_label(output, answers, previous),
            "old_in_box": old_in_box(output, answers, previous), "grader": RULE_GRADER}
