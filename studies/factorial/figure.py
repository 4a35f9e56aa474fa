"""The factorial study's figure (``figure.png``), drawn from its ``summary.json`` alone: the factor contrasts of
(mask - control), exact and lenient rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.studies.common.figures import Panel, plot_changes

from .summary import _contrast_name


def draw(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """The factor contrasts of (mask - control), exact and lenient rules; n in each note."""
    panels: dict[str, Panel] = {}
    for matrix, s in summary["matrices"].items():
        for metric in ("exact", "lenient"):
            rows = [(_contrast_name(k, s["narrow"]), e["estimate"], e["ci"])
                    for k, e in s["factors"][metric].items() if e["estimate"] is not None]
            if rows:
                panels[f"{matrix}, {metric} rule"] = Panel(
                    rows, note=f"n = {s['records']} record cases, {s['groups']} groups")
    if not panels:
        return None
    return plot_changes(panels, path, columns=2, title=f"Factorial: {model}",
                        xlabel="change in (mask - control), pp (95% CI)",
                        footer="each contrast: the change in (mask - matched control) when one factor changes")
