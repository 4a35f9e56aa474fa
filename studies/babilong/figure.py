"""BABILong's figure (``figure.png``), drawn from its ``summary.json`` alone: each policy's change in correct
answers against full access, one panel per (task, length), with full access's count and n and the chance line
of always answering the most common gold location (the study's chance level, as in its report and the scorecard).

Example: ``draw(json.loads(Path("artifacts/babilong/smollm2-135m-instruct/summary.json").read_text()),
"figure.png", "smollm2-135m-instruct")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.studies.common.figures import Panel, plot_changes
from kvprobe.studies.common.formatting import count


def draw(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """Each policy's change in correct answers against full access, one panel per (task, length); full
    access's count and n in each panel's note, and the change always answering the most common gold location
    would make (majority - full) as the chance line. None (nothing drawn) when no policy has a change."""
    full = {(c["task"], c["length"]): c for c in summary["cells"] if c["policy"] == "full"}
    panels: dict[str, Panel] = {}
    for c in summary["cells"]:
        if (ch := c.get("official_change_vs_full")) is None:
            continue
        f = full[(c["task"], c["length"])]
        name = f"{c['task']}, {c['length']} tokens"
        if name not in panels:
            panels[name] = Panel([], note=f"full access {count(f['official'], f['n'])}; n = {f['n']} inputs",
                                 chance=f["majority"] - f["official"],
                                 chance_label=f"always the most common gold location ({f['majority']} correct)")
        panels[name].rows.append((c["policy"], ch["change"], ch["ci"], count(c["official"], c["n"])))
    if not panels:
        return None
    return plot_changes(panels, path, title=f"BABILong{': ' + model if model else ''}",
                        xlabel="change in correct answers vs full access (95% CI)")
