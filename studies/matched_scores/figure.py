"""The matched-scores figure (``figure.png``), drawn from its ``summary.json`` alone: the paired accuracy changes
(pp) of every subset and rule, with each arm's count and n.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.studies.common.figures import Panel, plot_changes

from .summary import CONTRASTS


def draw(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """The paired accuracy changes (pp) of every subset and rule; each arm's count and n in each note."""
    if not summary.get("cases"):
        return None
    panels: dict[str, Panel] = {}
    for name, s in summary["subsets"].items():
        for rule in ("exact", "complete", "lenient"):
            r = s["rules"][rule]
            k = r["correct"]
            panels[f"{name}, {rule} rule"] = Panel(
                [(c.replace("_vs_", " - "), r[c]["pp"], r[c]["ci"]) for c in CONTRASTS],
                note=f"n = {s['n']}; correct: full {k['full']}, control {k['control']}, mask {k['mask']}")
    return plot_changes(panels, path, columns=3, xlabel="accuracy change, pp (95% CI)",
                        title=f"Matched scores ({summary['dataset']}) on {model}")
