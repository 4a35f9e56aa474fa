"""The record histories' figure (``coverage.png``), drawn from its ``summary.json`` alone: net corrections when A
is hidden in the top-ranked histories (lenient rule), with the random ranking's line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.studies.common.detectors.coverage import plot_coverage


def draw(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """coverage.png of a records run: net corrections when A is hidden in the top-ranked histories (lenient
    rule), with the random ranking's line; n and the net of hiding A everywhere in the title (``model``: unused,
    the title names none; every study figure takes it)."""
    if "coverage" not in summary:
        return None
    curves = summary["coverage"]["lenient"]
    first = next(iter(curves.values()))
    return plot_coverage(curves, path, title="Record histories: hiding A in the top-ranked histories (lenient "
                         f"rule)\nn = {first['n']} histories; hiding A in all: net {first['total_utility']:+g}")
