"""The revision histories' figure (``figure.png``), drawn from its ``summary.json`` alone: the complete-answer
change against full access, all questions and by question type.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.studies.common.figures import Panel, plot_changes
from kvprobe.studies.common.formatting import count


def draw(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """Complete-answer change against full access (pp), all questions and by question type; full access's
    count and n in each note, each operation's count at the right."""
    def panel(cells: list[dict[str, Any]]) -> Panel:
        full = next((c for c in cells if c["operation"] == "full"), None)
        rows = [(c["operation"], c["change_vs_full"]["pp"], c["change_vs_full"]["pp_ci"],
                 count(c["complete"], c["n"])) for c in cells if "change_vs_full" in c]
        return Panel(rows, note=f"full access {count(full['complete'], full['n'])}; n = {full['n']} questions"
                     if full else "")

    panels = {"all questions": panel(summary["cells"])}
    panels.update({qtype: panel(cells) for qtype, cells in summary["by_type"].items()})
    panels = {k: v for k, v in panels.items() if v.rows}
    if not panels:
        return None
    return plot_changes(panels, path, title=f"Revision histories: {model}",
                        xlabel="complete-answer change vs full, pp (95% CI)")
