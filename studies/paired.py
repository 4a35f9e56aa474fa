"""Paired changes between two arms of a study, with group-bootstrap intervals.

Every history study reports the same quantity: for the cases both arms answered,
the change in correct answers (arm minus reference), its corrections and
reversals, and a percentile interval over whole-group bootstrap draws (the same
draws for every cell of a report, so cells are comparable).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def percentile_interval(values: np.ndarray, level: float = 0.95) -> list[float]:
    """Two-sided percentile interval of bootstrap values."""
    tail = 100 * (1 - level) / 2
    return [float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))]


def paired_change(arm: Sequence[float] | np.ndarray, reference: Sequence[float] | np.ndarray,
                  weights: np.ndarray, level: float = 0.95) -> dict[str, Any]:
    """Change in the sum of ``arm`` against ``reference`` (case-aligned 0/1 or real outcomes).

    Args:
        weights: bootstrap case multiplicities, int array [n_draws, n_cases]
            (``readouts.stats.GroupBootstrap.weights()``).
    """
    diff = np.asarray(arm, dtype=float) - np.asarray(reference, dtype=float)
    if weights.shape[1] != len(diff):
        raise ValueError(f"{weights.shape[1]} bootstrap columns for {len(diff)} paired cases")
    change = float(diff.sum())
    return {"change": int(change) if change.is_integer() else change, "corrections": int((diff > 0).sum()),
            "reversals": int((diff < 0).sum()), "ci": percentile_interval(weights @ diff, level)}


def format_change(change: dict[str, Any] | None) -> str:
    """``+3 [-1, +7]`` (empty for the reference arm)."""
    if not change:
        return ""
    lo, hi = change["ci"]
    return f"{change['change']:+g} [{lo:+g}, {hi:+g}]"
