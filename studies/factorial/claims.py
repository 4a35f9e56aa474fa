"""The paper's claims the factorial study tests, with measures of the factorial runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvprobe.readouts.stats import group_bootstrap_weights
from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, excludes_zero,
                                           floor_reason, pp_measurement, read_summary)
from kvprobe.studies.common.report import estimate
from kvprobe.studies.common.runner import read_rows

from .contrasts import Table, factor_contrasts, outcome_table, summarize_values

__all__ = ["ARMS", "CLAIMS", "arm_correct", "controls_vs_full", "factorial_contrast", "factorial_factor"]


#: The arms a contrast's testability can rest on: the matched controls (the paper's reference arms) or full access
#: (the second reference of the claims' secondary rows), as a count key suffix and a name.
ARMS = {"full": ("/full", "full access"), "control": ("-control", "the matched controls")}


def arm_correct(q: dict[str, Any], rule: str, arm: str) -> tuple[int, int]:
    """Correct answers under ``rule`` and answers of every cell of one arm (a key of :data:`ARMS`) in a matrix
    summary ``q`` (``summary.json``'s ``matrices[...]``)."""
    found = [c for k, c in q["counts"].items() if k.endswith(ARMS[arm][0])]
    return sum(c[rule] for c in found), sum(c["n"] for c in found)


def factorial_contrast(q: dict[str, Any], factor: str, rule: str, arm: str = "control",
                       note: str = "") -> Measurement:
    """A factor contrast of a matrix summary ``q`` (pp): the change of the mask-minus-control contrast under
    ``rule``; not testable when ``arm`` (:data:`ARMS`: the matched controls, the paper's reference arms, or full
    access) is at the floor. ``note``: what the row adds (the controls' own change against full access).

    The run's report (``summary.effect_cell``) and the scorecard (:func:`factorial_factor`) both judge this
    measurement.
    """
    f = q["factors"][rule][factor]
    correct, n = arm_correct(q, rule, arm)
    label = "full" if arm == "full" else "controls"
    return pp_measurement(f["estimate"], f["ci"], f"{f['n']} cases per cell, {q['groups']} groups",
                          f"{label} {correct}/{n}", floor_reason(correct, n, ARMS[arm][1]), units=q["groups"],
                          note=note)


def _matrix_rows(run: Path, matrix: str) -> tuple[dict[str, Any], list[str], Any]:
    """A committed run's matrix: its outcome tables by rule, its record cases and the summary's bootstrap weights
    (the same group draws, seed and count as ``summary.json``)."""
    s = read_summary(run)
    rows = [r for r in read_rows(run) if r["matrix"] == matrix]
    group_of = {r["record_case"]: r["group"] for r in rows}
    records = sorted(group_of)
    weights = group_bootstrap_weights([group_of[r] for r in records], n_draws=s["draws"], seed=s["seed"])
    return {m: outcome_table(rows, m) for m in ("exact", "complete", "lenient")}, records, weights


def _against_full(table: Table) -> Table:
    """``table`` with every matched control's outcome replaced by full access's (mask minus full, not control)."""
    out = dict(table)
    for (record, info, note, wording, condition), _ in table.items():
        if condition.endswith("-control"):
            out[(record, info, note, wording, condition)] = table[(record, info, note, wording, "full")]
    return out


def controls_vs_full(table: Table, records: Sequence[str], weights: Any) -> dict[str, Any]:
    """The matched controls' own change against full access (pp): per record case, the mean over every cell and
    both masks' controls of control minus full, with the group-bootstrap interval."""
    values = []
    for record in records:
        diffs = [v - table[(record, info, note, wording, "full")]
                 for (r, info, note, wording, condition), v in table.items()
                 if r == record and condition.endswith("-control")]
        values.append(sum(diffs) / len(diffs) if diffs else float("nan"))
    return summarize_values(values, weights)


def factorial_factor(factor: str, rule: str, reference: str = "control") -> Callable[[Path], Measurement]:
    """A factor contrast of a committed run's quantity matrix against a fixed ``reference``: ``control`` (the
    summary's mask-minus-control contrast, the paper's; the note gives the controls' own change against full
    access, flagged "not neutral" when its interval excludes 0) or ``full`` (the same contrast of mask minus full
    access, recomputed from the answer rows on the summary's draws). The floor is checked on the reference."""
    def measure(run: Path) -> Measurement:
        q = read_summary(run)["matrices"]["quantity"]
        tables, records, weights = _matrix_rows(run, "quantity")
        if reference == "full":
            f = factor_contrasts(_against_full(tables[rule]), records, q["narrow"], weights)[factor]
            correct, n = arm_correct(q, rule, "full")
            return pp_measurement(f["estimate"], f["ci"], f"{f['n']} cases per cell, {q['groups']} groups",
                                  f"full {correct}/{n}", floor_reason(correct, n, ARMS["full"][1]),
                                  units=q["groups"])
        own = controls_vs_full(tables[rule], records, weights)
        note = (f"controls - full {estimate(own['estimate'], own['ci'], '+.1f')} pp"
                + (" (not neutral)" if excludes_zero(own["ci"]) else ""))
        return factorial_contrast(q, factor, rule, "control", note)
    return measure


FACTORIAL = "factorial/smollm2-135m-instruct"

CLAIMS: tuple[Claim, ...] = (
    Claim("factorial.scope", "factorial", "Hiding only the old number loses fewer answers than hiding the whole "
          "record",
          Paper("The number-only versus whole-source contrast is positive for every model except Gemma 4 31B, whose "
                "cells are all correct.", (5197, 5198), "Information, Question Wording, and Mask Scope",
                "Qwen3-4B +23.8 [20.4, 27.1], Qwen3-32B +25.0 [23.3, 27.1] pp", (5183, 5185)),
          "up",
          (Test(FACTORIAL, f"{PAPER_RULE}: complete answer; number-minus-whole change of mask minus control",
                factorial_factor("scope", "complete")),
           Test(FACTORIAL, f"{LENIENT}; number-minus-whole change of mask minus control",
                factorial_factor("scope", "lenient"), primary=False),
           Test(FACTORIAL, f"{LENIENT}; number-minus-whole change of mask minus full access",
                factorial_factor("scope", "lenient", "full"), primary=False)),
          reference="matched controls", units="groups"),
    Claim("factorial.explicit-request", "factorial", "Asking explicitly for the complete value (unit) repairs "
          "answers under the masks",
          Paper("In separate quantity constructions, explicitly requesting a unit repairs many omissions", (392, 393),
                "Preferring the New Value Does Not Ensure a Complete Answer",
                "Qwen3-4B +11.2 [6.2, 15.8], Qwen3-32B +8.3 [4.2, 12.5] pp", (5183, 5185)),
          "up",
          (Test(FACTORIAL, f"{PAPER_RULE}: complete answer; explicit-request change of mask minus control, masks "
                "averaged", factorial_factor("wording/both", "complete")),
           Test(FACTORIAL, f"{LENIENT}; explicit-request change of mask minus control, masks averaged",
                factorial_factor("wording/both", "lenient"), primary=False),
           Test(FACTORIAL, f"{LENIENT}; explicit-request change of mask minus full access, masks averaged",
                factorial_factor("wording/both", "lenient", "full"), primary=False)),
          reference="matched controls", units="groups"),
)
