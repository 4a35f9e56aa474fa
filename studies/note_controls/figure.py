"""The note controls' figure (``figure.png``), drawn from its ``summary.json`` alone: changes in correct labels
(paper rule and lenient) against original full access and against each configuration's own profile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.studies.common.figures import Panel, plot_changes
from kvprobe.studies.common.formatting import count

from .summary import RULES


def draw(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """Changes in correct labels (paper rule and lenient), pp, against original full access and against the
    full access of each configuration's own profile; the reference's count and n in each note, each arm's
    count at the right."""
    configs = summary["configurations"]
    full = next((c for c in configs if c["configuration"] == "full"), None)
    by_name = {c["configuration"]: c for c in configs}
    panels: dict[str, Panel] = {}
    for rule, name in RULES.items():
        for key, title in (("vs_full", "vs original full"), ("vs_reference", "vs its profile's full")):
            rows = []
            for c in configs:
                if not c[key].get(rule):
                    continue
                label = count(c["correct"][rule], c["n"])
                if key == "vs_reference":
                    ref = by_name.get(c.get("reference"))
                    label += f" (ref {ref['correct'][rule]})" if ref else ""
                rows.append((c["configuration"], c[key][rule]["pp"], c[key][rule]["pp_ci"], label))
            near_far = summary["by_rule"][rule].get("near_far")
            if key == "vs_reference" and near_far:
                rows.append(("far - near", near_far["pp"], near_far["pp_ci"], ""))
            if not rows:
                continue
            n = configs[0]["n"]
            note = (f"original full {count(full['correct'][rule], full['n'])}; n = {n} per arm" if key == "vs_full"
                    and full else f"reference: the profile's full access; n = {n} per arm")
            panels[f"{name}: {title}"] = Panel(rows, note=note)
    if not panels:
        return None
    return plot_changes(panels, path, title=f"Note controls: {model}", columns=2,
                        xlabel="change in correct labels, pp (95% CI)")
