"""One figure every policy study can draw: paired changes against full access with their intervals.

Panels side by side (one per task, length or question type), one row per policy:
the point is the change of the policy against full access on the same inputs, the
bar its 95% paired-bootstrap interval, and the full-access level is written in each
panel's title. Drawn from ``summary.json`` values only, so the figure always
matches the report.

Example::

    panels = {"qa3, 7500 tokens": [("naive", -7.0, (-13.0, -2.0)), ("dependency", -3.0, (-8.0, 2.0))]}
    plot_changes(panels, "figure.png", title="BABILong on smollm2", xlabel="change in correct answers")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

#: One row of a panel: (policy, change vs full, (low, high) of its interval).
ChangeRow = tuple[str, float, Sequence[float]]


def plot_changes(panels: Mapping[str, Sequence[ChangeRow]], path: Path | str, title: str = "",
                 xlabel: str = "change vs full access (95% CI)", columns: int = 3) -> Path:
    """Write one forest panel per key of ``panels`` to ``path`` (PNG, written atomically; at most ``columns``
    panels per row); returns the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(panels)
    if not names:
        raise ValueError("plot_changes: no panels to draw")
    height = 1.2 + 0.35 * max(len(rows) for rows in panels.values())
    ncols = min(columns, len(names))
    nrows = -(-len(names) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols + 0.8, height * nrows), squeeze=False, sharex=True)
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    for ax, name in zip(axes.flat, names):
        rows = list(panels[name])
        y = list(range(len(rows)))[::-1]
        for yi, (_, change, ci) in zip(y, rows):
            lo, hi = ci
            color = "#b03a48" if hi < 0 else "#1f4e79" if lo > 0 else "#555555"
            ax.errorbar(change, yi, xerr=[[change - lo], [hi - change]], fmt="o", color=color, capsize=3)
        ax.axvline(0, color="gray", lw=0.8)
        ax.set_yticks(y, [r[0] for r in rows])
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def plot_heatmaps(panels: Mapping[str, tuple[Sequence[Sequence[float]], Sequence[str], Sequence[str]]],
                  path: Path | str, title: str = "", colorbar: str = "", center: float | None = 0.0,
                  xlabel: str = "") -> Path:
    """One annotated heatmap per key of ``panels``: ``(matrix [rows][columns], row labels, column labels)``.

    NaN cells stay blank; with ``center`` the color scale is symmetric around it (a diverging map).
    Example: ``plot_heatmaps({"quantity": (recovery, pieces, bands)}, "map.png", colorbar="recovered")``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = list(panels)
    if not names:
        raise ValueError("plot_heatmaps: no panels to draw")
    fig, axes = plt.subplots(1, len(names), figsize=(1.2 + 3.4 * len(names), 3.2), squeeze=False)
    for ax, name in zip(axes.flat, names):
        matrix, rows, columns = panels[name]
        m = np.asarray(matrix, dtype=float)
        finite = m[np.isfinite(m)]
        span = float(np.max(np.abs(finite - (center or 0.0)))) if finite.size else 1.0
        span = span or 1.0
        kw = (dict(cmap="RdBu_r", vmin=center - span, vmax=center + span) if center is not None
              else dict(cmap="viridis"))
        image = ax.imshow(np.ma.masked_invalid(m), aspect="auto", **kw)
        for (i, j), value in np.ndenumerate(m):
            if np.isfinite(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(columns)), list(columns), fontsize=7)
        ax.set_yticks(range(len(rows)), list(rows), fontsize=7)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(xlabel, fontsize=8)
        fig.colorbar(image, ax=ax, label=colorbar, shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path)


def save_figure(fig, path: Path | str, dpi: int = 110) -> Path:
    """Write a matplotlib figure to ``path`` atomically (a temporary file, then a rename) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    tmp.replace(path)
    return path


def run_model(out_dir: Path | str) -> str:
    """The model name of a run directory (its ``config.json``), for figure titles."""
    import json

    return json.loads((Path(out_dir) / "config.json").read_text()).get("model", {}).get("name", "?")
