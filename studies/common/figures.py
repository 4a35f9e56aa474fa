"""Figures every study draws: paired changes against a reference arm with their intervals, and heatmaps.

Rules every figure follows (issue 31): the reference arm's level and the number of units are on the
figure (each panel's note line), each row can carry its own count, a chance line is drawn where one
exists, every panel of a figure shares one scale (one x axis for changes, one colour scale and one
colour bar for heatmaps), and titles, notes and labels do not overlap (matplotlib's constrained
layout places the suptitle and the notes). Drawn from ``summary.json`` values only, so a figure
always matches its report; each study draws its own in its ``figure.py`` and ``kvprobe.tools.figures``
redraws every committed figure from its committed summary.

Example::

    panels = {"qa3, 7500 tokens": Panel([("naive", -7.0, (-13.0, -2.0), "3/64")], note="full 10/64; n = 64",
                                        chance=0.7)}
    plot_changes(panels, "figure.png", title="BABILong on smollm2", xlabel="change in correct answers")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: One row of a panel: (policy, change vs the reference, (low, high) of its interval[, label]); the optional
#: label (e.g. the arm's count, "7/400") is written at the right edge of the row.
ChangeRow = tuple

#: Colours of a change: interval above 0, below 0, including 0.
UP, DOWN, NEUTRAL = "#1f4e79", "#b03a48", "#555555"


@dataclass
class Panel:
    """A panel of :func:`plot_changes`: its rows, a note under its title (the reference arm's level and n)
    and, where one exists, the change that chance reaches (a dashed line)."""

    rows: Sequence[ChangeRow]
    note: str = ""
    chance: float | None = None
    chance_label: str = "chance"
    extra: dict = field(default_factory=dict)


def _panel(value) -> Panel:
    return value if isinstance(value, Panel) else Panel(list(value))


def plot_changes(panels: Mapping[str, Sequence[ChangeRow] | Panel], path: Path | str, title: str = "",
                 xlabel: str = "change vs full access (95% CI)", columns: int = 3, footer: str = "") -> Path:
    """Write one forest panel per key of ``panels`` to ``path`` (PNG, written atomically; at most ``columns``
    panels per row, one shared x axis); returns the path.

    A value is a list of rows or a :class:`Panel` (rows plus a note line and a chance line). ``footer``: a
    line under the panels (what the reference arm is, what the colours mean)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(panels)
    if not names:
        raise ValueError("plot_changes: no panels to draw")
    items = {name: _panel(panels[name]) for name in names}
    labelled = any(len(r) > 3 and r[3] for p in items.values() for r in p.rows)
    longest = max(len(str(r[0])) for p in items.values() for r in p.rows) if any(p.rows for p in items.values()) else 8
    height = 1.5 + 0.32 * max(len(p.rows) for p in items.values())
    ncols = min(columns, len(names))
    nrows = -(-len(names) // ncols)
    width = 2.6 + 0.075 * longest + (0.8 if labelled else 0.0)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols + 0.6, height * nrows + 0.9), squeeze=False,
                             sharex=True, layout="constrained")
    for ax in axes.flat[len(names):]:
        ax.set_visible(False)
    chance_drawn = False
    for ax, name in zip(axes.flat, names):
        panel = items[name]
        rows = list(panel.rows)
        y = list(range(len(rows)))[::-1]
        for yi, row in zip(y, rows):
            change, (lo, hi) = row[1], row[2]
            color = UP if lo > 0 else DOWN if hi < 0 else NEUTRAL
            ax.errorbar(change, yi, xerr=[[change - lo], [hi - change]], fmt="o", color=color, capsize=3, ms=5)
        ax.axvline(0, color="gray", lw=0.8)
        if panel.chance is not None:
            ax.axvline(panel.chance, color="#c07000", lw=1.0, ls="--")
            chance_drawn = True
        ax.set_yticks(y, [str(r[0]) for r in rows], fontsize=8)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        if labelled:
            right = ax.twinx()
            right.set_ylim(ax.get_ylim())
            right.set_yticks(y, [str(r[3]) if len(r) > 3 else "" for r in rows], fontsize=7, color="#333333")
            right.tick_params(length=0)
        ax.set_title(name + (f"\n{panel.note}" if panel.note else ""), fontsize=8.5)
        ax.set_xlabel(xlabel, fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    legend = "blue: interval above 0; red: below 0; grey: includes 0"
    if chance_drawn:
        legend += "; dashed orange: " + next(p.chance_label for p in items.values() if p.chance is not None)
    if labelled:
        legend += "; right: the arm's count"
    fig.supxlabel(legend + (f"\n{footer}" if footer else ""), fontsize=7.5, color="#444444")
    return save_figure(fig, path)


def _text_color(rgba) -> str:
    """Black or white, whichever reads better on a cell of colour ``rgba`` (relative luminance)."""
    r, g, b = rgba[:3]
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def plot_heatmaps(panels: Mapping[str, tuple[Sequence[Sequence[float]], Sequence[str], Sequence[str]]],
                  path: Path | str, title: str = "", colorbar: str = "", center: float | None = 0.0,
                  xlabel: str = "", notes: Mapping[str, str] | None = None, footer: str = "",
                  limit: float | None = None) -> Path:
    """One annotated heatmap per key of ``panels``: ``(matrix [rows][columns], row labels, column labels)``.

    Every panel shares ONE colour scale and one colour bar: with ``center`` the scale is symmetric around it
    (a diverging map) and spans the largest distance from it over all panels (or ``limit``); values beyond
    ``limit`` saturate. Cell text is black or white by the cell's luminance. NaN cells stay blank (grey
    hatching: not reported). ``notes``: a line under a panel's title (n, what is hidden).
    Example: ``plot_heatmaps({"quantity": (recovery, pieces, bands)}, "map.png", colorbar="recovered")``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.colors import Normalize

    names = list(panels)
    if not names:
        raise ValueError("plot_heatmaps: no panels to draw")
    mats = {name: np.asarray(panels[name][0], dtype=float) for name in names}
    finite = np.concatenate([m[np.isfinite(m)] for m in mats.values()]) if mats else np.array([])
    if center is not None:
        span = limit if limit is not None else (float(np.max(np.abs(finite - center))) if finite.size else 1.0)
        norm, cmap = Normalize(center - (span or 1.0), center + (span or 1.0)), plt.get_cmap("RdBu_r")
    else:
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        norm, cmap = Normalize(lo, hi if hi > lo else lo + 1.0), plt.get_cmap("viridis")
    width = max(max(len(panels[n][2]) for n in names) * 0.75 + 1.6, 3.4)
    height = max(len(panels[n][1]) for n in names) * 0.32 + 1.6
    fig, axes = plt.subplots(1, len(names), figsize=(width * len(names) + 1.4, height + 0.8), squeeze=False,
                             layout="constrained")
    image = None
    for ax, name in zip(axes.flat, names):
        m, (_, rows, columns) = mats[name], panels[name]
        ax.set_facecolor("#eeeeee")
        image = ax.imshow(np.ma.masked_invalid(m), aspect="auto", cmap=cmap, norm=norm)
        for (i, j), value in np.ndenumerate(m):
            if np.isfinite(value):
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=7,
                        color=_text_color(cmap(norm(value))))
            else:
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="#bbbbbb",
                                           lw=0))
        ax.set_xticks(range(len(columns)), list(columns), fontsize=7)
        ax.set_yticks(range(len(rows)), list(rows), fontsize=7)
        ax.set_title(name + (f"\n{notes[name]}" if notes and notes.get(name) else ""), fontsize=8.5)
        ax.set_xlabel(xlabel, fontsize=8)
    fig.colorbar(image, ax=list(axes.flat), label=colorbar, shrink=0.85)
    if title:
        fig.suptitle(title, fontsize=10)
    if footer:
        fig.supxlabel(footer, fontsize=7.5, color="#444444")
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
