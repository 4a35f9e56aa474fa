"""The fact map's figures, drawn from their JSON alone: a run's ``figure.png`` (recovery of the recompute effect
by later piece x layer band, from ``summary.json``; :func:`draw`) and ``kvprobe map --out``'s ``map.png``
(one history, from ``map.json``; :func:`draw_map`), on one colour scale saturated at :data:`RECOVERY_LIMIT`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kvprobe.studies.common.figures import plot_heatmaps

from .summary import heatmap


#: Recovery ratios beyond this are drawn saturated (their numbers are still written in the cells).
RECOVERY_LIMIT = 1.5


def draw(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """Recovery of the recompute effect by later piece x layer band, all histories and by variant, on one
    colour scale. A panel whose recompute effect has an interval including 0 shows no ratios (the report
    does not give them either): a ratio over an effect that may be 0 is not a recovery."""
    if not summary["bands"]:
        return None
    bands = [f"{lo}-{hi}" for lo, hi in summary["bands"]]
    blocks = {f"{summary['dataset']}, all": summary["all"], **summary["by_variant"]}
    grid, notes = {}, {}
    for name, stats in blocks.items():
        matrix = heatmap(stats, summary["pieces"], summary["bands"])
        effect = stats.get("target_effect") or {}
        shown = stats.get("target_effect_excludes_zero", True)
        notes[name] = (f"n = {stats.get('n_cases', '?')} histories, {stats.get('n_groups', '?')} groups; recompute "
                       f"effect {effect.get('change', math.nan):+.2f} [{effect.get('change_ci', [math.nan] * 2)[0]:+.2f}, "
                       f"{effect.get('change_ci', [math.nan] * 2)[1]:+.2f}]" + ("" if shown else "\nincludes 0: no ratios"))
        grid[name] = ([[math.nan if (x is None or not shown) else x for x in row] for row in matrix],
                      summary["pieces"], bands)
    return plot_heatmaps(grid, path, title=f"Fact map on {model}: recovery of the recompute effect by later "
                         "piece x layer band", colorbar="recovered (share of the recompute effect)",
                         xlabel="layers where the piece cannot see the source", notes=notes, limit=RECOVERY_LIMIT,
                         footer=f"one colour scale, saturated beyond +/-{RECOVERY_LIMIT}; hatched: not reported")


def draw_map(data: dict[str, Any], path: Path | str) -> Path:
    """``kvprobe map --out``'s map.png from its map.json."""
    return plot_heatmaps({data["input"]: (data["heatmap"], [p["label"] for p in data["pieces"]],
                                          [f"{lo}-{hi}" for lo, hi in data["bands"]])},
                         path, title=f"Fact map on {data['model']}: recovery by later piece x layer band",
                         colorbar="recovered", xlabel="layers where the piece cannot see the source",
                         notes={data["input"]: f"one history; recompute effect {data['target_effect']:+.2f} nats"},
                         limit=RECOVERY_LIMIT)
