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


#: Tile colours of :func:`plot_preservation` (the paper's fig:v33_preservation: blue, rose, gray).
CORRECT, WRONG, CAPPED = "#3d6fb0", "#d9a0a8", "#b5b5b5"
#: Short query names under the tiles.
QUERY_SHORT = {"current": "cur", "historical": "hist", "unrelated": "unrel"}


def plot_preservation(entries: list[dict[str, Any]], path: Path | str, rule: str = "complete") -> Path:
    """The paper's fig:v33_preservation (L4106-4110) from the panel's rates (``panel.model_entry``): one panel per
    model; rows B states the unit / B refers to A; columns condition x query; each tile stacks the answers
    correct under ``rule`` (blue, its percentage and count printed), wrong or malformed (rose) and at the token
    limit (gray), as fractions of the cell's n. Current-query cells hold the replacements, the others all groups.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch, Rectangle

    from kvprobe.studies.common.report import ordered

    from .cells import INFO_NAMES, INFO_ORDER, by_cell, cell_keys
    from .summary import CONDITION_ORDER, QUERY_ORDER

    keys = cell_keys(entries, "rates")
    infos = ordered({k[0] for k in keys}, INFO_ORDER)
    # (condition, query): a block of queries per condition, as in the paper
    columns = [(c, q) for c in ordered({k[2] for k in keys}, CONDITION_ORDER)
               for q in ordered({k[1] for k in keys}, QUERY_ORDER) if any(k[1:] == (q, c) for k in keys)]
    width = max(0.52 * len(columns) + 2.2, 6.0)
    fig, axes = plt.subplots(len(entries), 1, figsize=(width, 1.05 * len(infos) * len(entries) + 1.9 + 0.35 *
                                                      len(entries)), squeeze=False, layout="constrained")
    for ax, entry in zip(axes[:, 0], entries):
        found = by_cell(entry, "rates")
        for y, info in enumerate(reversed(infos)):
            for x, (cond, query) in enumerate(columns):
                r = found.get((info, query, cond))
                if r is None or not r["n"]:
                    continue
                correct, capped = r[rule] / r["n"], r["capped"] / r["n"]
                bottom = y + 0.05
                for share, colour in ((correct, CORRECT), (1 - correct - capped, WRONG), (capped, CAPPED)):
                    ax.add_patch(Rectangle((x + 0.05, bottom), 0.9, 0.9 * share, color=colour, lw=0))
                    bottom += 0.9 * share
                ax.text(x + 0.5, y + 0.5, f"{100 * correct:.0f}%\n({r[rule]})", ha="center", va="center",
                        fontsize=5.5, bbox={"boxstyle": "square,pad=0.1", "fc": "white", "alpha": 0.7, "lw": 0})
        ax.set_xlim(0, len(columns))
        ax.set_ylim(0, len(infos))
        ax.set_yticks([y + 0.5 for y in range(len(infos))], [INFO_NAMES.get(i, i) for i in reversed(infos)],
                      fontsize=7)
        ax.set_xticks([x + 0.5 for x in range(len(columns))], [QUERY_SHORT.get(q, q) for _, q in columns],
                      fontsize=5.5)
        ax.tick_params(length=0)
        starts = [x for x, (cond, _) in enumerate(columns) if x == 0 or columns[x - 1][0] != cond]
        top = ax.secondary_xaxis("top")  # the condition of each block of queries
        top.set_xticks([x + sum(c == columns[x][0] for c, _ in columns) / 2 for x in starts],
                       [columns[x][0] for x in starts], fontsize=6.5)
        top.tick_params(length=0)
        for x in starts[1:]:
            ax.axvline(x, color="white", lw=2.5)
        for side in (*ax.spines.values(), *top.spines.values()):
            side.set_visible(False)
        n = {q: next((r["n"] for r in entry["rates"] if r["query"] == q), 0) for q in QUERY_SHORT}
        ax.set_title(f"{entry['model']}: n = {n['current']} replacements (cur), {n['historical']} groups "
                     "(hist, unrel)", fontsize=8)
    name = "complete (the paper's rule 3)" if rule == "complete" else "lenient (ours)"
    fig.legend(handles=[Patch(color=CORRECT, label=f"correct: {name}"), Patch(color=WRONG, label="wrong or malformed"),
                        Patch(color=CAPPED, label="token limit")], loc="outside lower center", ncol=3, fontsize=7,
               frameon=False)
    fig.suptitle("Quantity study: answers per condition and query (percent and count correct)", fontsize=9)
    return save_figure(fig, path)


def plot_margins(entries: list[dict[str, Any]], path: Path | str) -> Path:
    """Margin change per condition (replacements, current query) with its 95 % interval, one panel per model
    (``studies.common.figures.plot_changes``): against the matched control where there is one, else full access."""
    from kvprobe.studies.common.figures import Panel, plot_changes

    from .cells import INFO_NAMES, by_cell, cell_keys

    keys = cell_keys(entries, "margins")
    panels = {}
    for entry in entries:
        found = by_cell(entry, "margins")
        rows = [(f"{INFO_NAMES.get(k[0], k[0])}: {k[2]} vs {found[k]['against']}", found[k]["mean"],
                 tuple(found[k]["ci"])) for k in keys if k in found]
        n = next((r["n"] for r in entry["margins"]), 0)
        panels[entry["model"]] = Panel(rows, note=f"n = {n} replacements; reference: the control, else full access")
    return plot_changes(panels, path, title="Quantity study: margin change log p(current) - log p(old)",
                        xlabel="margin change (nats, 95% CI)", columns=2)
