"""The paper's claims the factorial study tests, with measures of the factorial runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, floor_reason,
                                           pp_measurement, read_summary)

__all__ = ["ARMS", "CLAIMS", "arm_correct", "factorial_contrast", "factorial_factor"]


#: The arms a contrast's testability can rest on: full access (the scorecard's: a gain needs a model that does the
#: task) or the matched controls (the run's report: the paper's reference arms), as a count key suffix and a name.
ARMS = {"full": ("/full", "full access"), "control": ("-control", "the matched controls")}


def arm_correct(q: dict[str, Any], rule: str, arm: str) -> tuple[int, int]:
    """Correct answers under ``rule`` and answers of every cell of one arm (a key of :data:`ARMS`) in a matrix
    summary ``q`` (``summary.json``'s ``matrices[...]``)."""
    found = [c for k, c in q["counts"].items() if k.endswith(ARMS[arm][0])]
    return sum(c[rule] for c in found), sum(c["n"] for c in found)


def factorial_contrast(q: dict[str, Any], factor: str, rule: str, arm: str = "full") -> Measurement:
    """A factor contrast of a matrix summary ``q`` (pp): the change of the mask-minus-control contrast under
    ``rule``; not testable when ``arm`` (:data:`ARMS`: full access, or the matched controls) is at the floor.

    The run's report (``summary.effect_cell``, ``arm="control"``) and the scorecard (:func:`factorial_factor`)
    both judge this measurement.
    """
    f = q["factors"][rule][factor]
    correct, n = arm_correct(q, rule, arm)
    label = "full" if arm == "full" else "controls"
    return pp_measurement(f["estimate"], f["ci"], f"{f['n']} cases per cell, {q['groups']} groups",
                          f"{label} {correct}/{n}", floor_reason(correct, n, ARMS[arm][1]), units=q["groups"])


def factorial_factor(factor: str, rule: str) -> Callable[[Path], Measurement]:
    """:func:`factorial_contrast` of a committed run's quantity matrix (full access must answer)."""
    def measure(run: Path) -> Measurement:
        return factorial_contrast(read_summary(run)["matrices"]["quantity"], factor, rule)
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("factorial.scope", "factorial", "Hiding only the old number loses fewer answers than hiding the whole "
          "record",
          Paper("The number-only versus whole-source contrast is positive for every model except Gemma 4 31B, whose "
                "cells are all correct.", (5197, 5198), "Information, Question Wording, and Mask Scope",
                "Qwen3-4B +23.8 [20.4, 27.1], Qwen3-32B +25.0 [23.3, 27.1] pp", (5183, 5185)),
          "up",
          (Test("factorial/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer; number-minus-whole change of "
                "mask minus control", factorial_factor("scope", "complete")),
           Test("factorial/smollm2-135m-instruct", f"{LENIENT}; number-minus-whole change of mask minus control",
                factorial_factor("scope", "lenient")))),
    Claim("factorial.explicit-request", "factorial", "Asking explicitly for the complete value (unit) repairs "
          "answers under the masks",
          Paper("In separate quantity constructions, explicitly requesting a unit repairs many omissions", (392, 393),
                "Preferring the New Value Does Not Ensure a Complete Answer",
                "Qwen3-4B +11.2 [6.2, 15.8], Qwen3-32B +8.3 [4.2, 12.5] pp", (5183, 5185)),
          "up",
          (Test("factorial/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer; explicit-request change of mask "
                "minus control, masks averaged", factorial_factor("wording/both", "complete")),
           Test("factorial/smollm2-135m-instruct", f"{LENIENT}; explicit-request change, masks averaged",
                factorial_factor("wording/both", "lenient")))),
)
