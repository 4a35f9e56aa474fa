"""The quantity study's figure, in the spirit of the paper's Figure 2.

Left: complete answers per condition (the paper's complete rule and the lenient
rule) with counts of n, for the current query in each information condition.
Right: margin change with 95 % paired-bootstrap intervals against the paper's
reference, the matched control (filled: source vs source-control, number vs
number-control); conditions without a matched control (the controls themselves and
the cache operations) against full access (hollow, named "vs full"). Drawn from
``summary.json`` only, so it always matches the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.studies.common.figures import save_figure


def plot_summary(summary: dict[str, Any], path: Path | str, model: str = "", query: str = "current",
                 relation: str = "replacement") -> Path:
    """Write the two-panel figure for ``query`` and ``relation`` to ``path`` (PNG); returns the path.

    ``relation`` falls back to ``"all"`` when the run has no group of that relation.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not any(c["relation"] == relation for c in summary["cells"]):
        relation = "all"
    cells = [c for c in summary["cells"] if c["query"] == query and c["relation"] == relation]
    infos = sorted({c["information"] for c in cells})
    fig, axes = plt.subplots(len(infos), 2, figsize=(12, 3.4 * len(infos) + 0.6), squeeze=False,
                             layout="constrained")
    for row, info in enumerate(infos):
        mine = [c for c in cells if c["information"] == info]
        names = [c["condition"] for c in mine]
        y = list(range(len(mine)))[::-1]
        ax = axes[row][0]
        strict = [c["complete"] for c in mine]
        lenient = [c["lenient_complete"] for c in mine]
        ax.barh([v + 0.2 for v in y], lenient, height=0.4, label="lenient", color="#8fb3d9")
        ax.barh([v - 0.2 for v in y], strict, height=0.4, label="complete (paper)", color="#1f4e79")
        for yi, s, l, c in zip(y, strict, lenient, mine):
            ax.text(max(s, l) + 0.3, yi, f"{s} / {l} of {c['n']}", va="center", fontsize=8)
        ax.set_yticks(y, names)
        ax.set_xlim(0, max(c["n"] for c in mine) * 1.35)
        ax.set_xlabel("complete answers (paper / lenient) of n")
        ax.set_title(f"{relation}, {info}, {query} query (n = {mine[0]['n']})", fontsize=9)
        ax = axes[row][1]
        shown = [c for c in mine if c["condition"] != "full"]
        ys = list(range(len(shown)))[::-1]
        labels = []
        for yi, c in zip(ys, shown):
            m, against = c.get("margin_change_vs_control"), "control"
            if m is None:
                m, against = c.get("margin_change_vs_full"), "full"
            labels.append(c["condition"] + (" vs full" if against == "full" else " vs control"))
            if m is None:
                continue
            lo, hi = m["ci"]
            ax.errorbar(m["mean"], yi, xerr=[[m["mean"] - lo], [hi - m["mean"]]], fmt="o", capsize=3,
                        color="#1f4e79", mfc="#1f4e79" if against == "control" else "white")
        ax.axvline(0, color="gray", lw=0.8)
        ax.set_yticks(ys, labels, fontsize=8)
        ax.set_xlabel("margin change (nats, 95% CI)")
        ax.set_title("log p(current) - log p(old): filled vs matched control, hollow vs full", fontsize=9)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2, fontsize=8, frameon=False)
    n = cells[0]["n"] if cells else 0
    fig.suptitle(f"Quantity study{': ' + model if model else ''} ({relation}: {n} groups; our reconstruction of "
                 "the paper's templates)", fontsize=10)
    return save_figure(fig, path)
