"""MINTEval's figure (``figure.png``), drawn from its ``summary.json`` alone: the exact-match change against full
access per question scope, with full access's exact matches and n and each policy's count.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.studies.common.figures import Panel, plot_changes
from kvprobe.studies.common.formatting import count


def draw(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """EM change against full access (pp, component intervals), one panel per question scope; full access's
    exact matches and n in each note, each policy's count at the right."""
    full = {c["scope"]: c for c in summary["cells"] if c["policy"] == "full"}
    panels: dict[str, Panel] = {}
    for c in summary["cells"]:
        if (ch := c.get("change_component")) is None:
            continue
        f = full.get(c["scope"])
        name = c["scope"].replace("_", " ")
        if name not in panels:
            note = (f"full access {count(f['em'], f['n'])} exact ({100 * f['em'] / f['n']:.2f}%); n = {f['n']} "
                    "questions") if f else ""
            panels[name] = Panel([], note=note)
        panels[name].rows.append((c["policy"], ch["pp"], ch["ci"], count(c["em"], c["n"])))
    if not panels:
        return None
    return plot_changes(panels, path, title=f"MINTEval: {model}",
                        xlabel="exact-match change vs full, pp (95% CI over components)",
                        footer=f"{summary.get('components', '?')} components resampled; a change of one answer "
                               "is 100/n pp")
