"""The detection calibration's figures (``kvprobe calibrate``'s ``coverage-RULE-MASK.png``), drawn from
``action.json`` alone: one coverage curve per (rule, mask) cell, with n and the total net.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.studies.common.detectors.coverage import plot_coverage


def draw_calibration(cell: dict[str, Any], path: Path | str, model: str) -> Path:
    """One coverage figure of ``kvprobe calibrate`` (a rule x mask cell), with n and the total net."""
    first = next(iter(cell["coverage"].values()))
    return plot_coverage(cell["coverage"], path, title=f"{model}: {cell['mask']} mask, {cell['rule']} rule\n"
                         f"n = {first['n']} test cases; acting on all: net {first['total_utility']:+g}")
