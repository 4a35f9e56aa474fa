"""The paper's claims the factorial study tests, with measures of the factorial runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, floor_reason,
                                           pp_measurement, read_summary)

__all__ = ["CLAIMS", "factorial_factor"]


def factorial_factor(factor: str, rule: str) -> Callable[[Path], Measurement]:
    """A factor contrast of the quantity matrix (pp): the change of the mask-minus-control contrast."""
    def measure(run: Path) -> Measurement:
        q = read_summary(run)["matrices"]["quantity"]
        f = q["factors"][rule][factor]
        full = [c for k, c in q["counts"].items() if k.endswith("/full")]
        correct, n = sum(c[rule] for c in full), sum(c["n"] for c in full)
        return pp_measurement(f["estimate"], f["ci"], f"{f['n']} cases per cell, {q['groups']} groups",
                              f"full {correct}/{n}", floor_reason(correct, n, "full access"), units=q["groups"])
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
