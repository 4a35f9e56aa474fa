"""Summary statistics and report of a quantity run, recomputed from ``results.jsonl`` alone.

For every (information, query, condition) cell: complete answers under the
strict equivalent-unit rule, the exact rule and the lenient rule; corrections,
reversals and net change against full access and (for the two masks) against
their matched controls; and the mean margin change against full access and
against the control. Intervals: paired group bootstrap (paper partC 6) with
10,000 seeded draws of groups, the same draws for every cell, percentile 95 %.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from kvprobe.files import atomic_write_text

from ..runner import read_rows

DRAWS = 10_000
#: Report order of conditions (unknown names sort after these, alphabetically).
CONDITION_ORDER = ("full", "source", "source-control", "number", "number-control", "recompute", "rebuild", "compact")
QUERY_ORDER = ("current", "historical", "unrelated")


def _cell_order(key: tuple[str, str, str]) -> tuple:
    info, query, cond = key
    q = QUERY_ORDER.index(query) if query in QUERY_ORDER else len(QUERY_ORDER)
    c = CONDITION_ORDER.index(cond) if cond in CONDITION_ORDER else len(CONDITION_ORDER)
    return (info, q, query, c, cond)
RULES = ("complete", "complete_exact", "lenient_complete")


def _interval(values: np.ndarray, draws: np.ndarray) -> list[float]:
    boot = values[draws].mean(axis=1)
    return [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]


def auc(scores_pos: np.ndarray, scores_neg: np.ndarray) -> float:
    """Probability that a positive outranks a negative, ties counted one half (Mann-Whitney)."""
    if len(scores_pos) == 0 or len(scores_neg) == 0:
        return float("nan")
    diff = scores_pos[:, None] - scores_neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


def zero_failure_bound(n: int, alpha: float = 0.05) -> float:
    """One-sided upper bound on a rate with zero observed failures in n trials: 1 - alpha^(1/n)."""
    return 1.0 - alpha ** (1.0 / n) if n > 0 else float("nan")


def warning_signal(cells, order: list[str], sample: np.ndarray, rule: str = "lenient_complete") -> dict[str, Any]:
    """How well D_c = -(logp_current(source) - logp_current(control)) ranks lost above kept answers.

    Lost: complete under full access, incomplete under the whole-source mask; kept:
    complete under both; cases incomplete under full access are excluded (partC 5).
    Current query, replacement groups, per information condition; bootstrap draws with
    an empty class are dropped and counted.
    """
    out: dict[str, Any] = {}
    index = {g: i for i, g in enumerate(order)}
    for info in sorted({k[0] for k in cells}):
        full, src, ctrl = (cells.get((info, "current", c), {}) for c in ("full", "source", "source-control"))
        label = np.full(len(order), np.nan)
        d_c = np.full(len(order), np.nan)
        for g, row in src.items():
            if row["relation"] != "replacement" or g not in full or g not in ctrl or not full[g][rule]:
                continue
            label[index[g]] = 0.0 if row[rule] else 1.0  # 1 = lost
            d_c[index[g]] = -(row["logp_right"] - ctrl[g]["logp_right"])
        ok = ~np.isnan(label)
        pos, neg = d_c[ok & (label == 1)], d_c[ok & (label == 0)]
        boot, kept = [], 0
        for idx in sample:
            lab, dc = label[idx], d_c[idx]
            p_, n_ = dc[lab == 1], dc[lab == 0]
            if len(p_) and len(n_):
                boot.append(auc(p_, n_))
                kept += 1
        value = auc(pos, neg)
        out[info] = {"rule": rule, "lost": int(len(pos)), "kept": int(len(neg)),
                     "auc": None if np.isnan(value) else value,  # undefined with an empty class
                     "auc_ci": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))] if boot else None,
                     "draws_kept": kept}
    return out


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> dict[str, Any]:
    """Recompute the summary from the rows on disk (streamed)."""
    cells: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    groups: set[str] = set()
    for row in read_rows(out_dir):
        cells[(row["information"], row["query"], row["condition"])][row["group_id"]] = row
        groups.add(row["group_id"])
    order = sorted(groups)
    index = {g: i for i, g in enumerate(order)}
    rng = np.random.default_rng(seed)
    sample = rng.integers(0, len(order), size=(draws, len(order)))

    def vector(cell: dict[str, dict[str, Any]], key: str) -> np.ndarray:
        v = np.full(len(order), np.nan)
        for g, row in cell.items():
            value = row[key]
            v[index[g]] = np.nan if value is None else float(value)
        return v

    summary: dict[str, Any] = {"groups": len(order), "draws": draws, "seed": seed, "cells": []}
    for (info, query, cond), cell in sorted(cells.items(), key=lambda kv: _cell_order(kv[0])):
        full = cells[(info, query, "full")]
        entry: dict[str, Any] = {"information": info, "query": query, "condition": cond, "n": len(cell)}
        for rule in RULES:
            mine, base = vector(cell, rule), vector(full, rule)
            entry[rule] = int(np.nansum(mine))
            corrections, reversals = (mine == 1) & (base == 0), (mine == 0) & (base == 1)
            net = corrections.astype(float) - reversals.astype(float)
            entry[f"{rule}_vs_full"] = {"corrections": int(corrections.sum()), "reversals": int(reversals.sum()),
                                        "net": float(net.mean()), "net_ci": _interval(net, sample)}
            control = cells.get((info, query, f"{cond}-control"))
            if control is not None:
                ctrl = vector(control, rule)
                c, r = (mine == 1) & (ctrl == 0), (mine == 0) & (ctrl == 1)
                net_c = c.astype(float) - r.astype(float)
                entry[f"{rule}_vs_control"] = {"corrections": int(c.sum()), "reversals": int(r.sum()),
                                               "net": float(net_c.mean()), "net_ci": _interval(net_c, sample)}
        for key in ("margin_change_vs_full", "margin_change_vs_control"):
            v = vector(cell, key)
            if not np.isnan(v).any():
                entry[key] = {"mean": float(v.mean()), "ci": _interval(v, sample)}
        reversals = entry["lenient_complete_vs_full"]["reversals"]
        if reversals == 0 and cond != "full":
            entry["zero_reversal_upper_bound"] = zero_failure_bound(len(cell))
        summary["cells"].append(entry)
    summary["warning_signal"] = warning_signal(cells, order, sample)
    return summary


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """A markdown report: one table per information condition and query."""
    model = config.get("model", {}).get("name", "?")
    lines = [f"# Quantity study: {model}", "",
             f"{summary['groups']} groups; paired group bootstrap, {summary['draws']} draws, 95 % percentile "
             "intervals. complete = strict JSON, equivalent units, EOS; lenient = first complete quantity "
             "anywhere in the answer, EOS. Net = (corrections - reversals) / groups.", ""]
    if timing:
        m = timing["machine"]
        lines += [f"Run time {timing['seconds']:.0f} s ({timing['seconds'] / 60:.1f} min) for "
                  f"{timing['cases_run']} cases and {timing['rows_written']} rows (each row: one greedy answer "
                  f"and two candidate scores): {timing['seconds_per_case']:.2f} s per case, "
                  f"{timing['rows_per_second']:.2f} rows/s; {timing['cases_per_batch']} cases per batch, "
                  f"{config.get('model', {}).get('attn_implementation', '?')} attention, {m['threads']} threads "
                  f"on {m['cpus']} CPUs ({m['processor']}), {timing['invocations']} invocation(s).", ""]
    warn = summary.get("warning_signal", {})
    if warn:
        lines += ["## Warning signal: D_c = drop of log p(current) under the source mask vs its control", "",
                  "| information | lost | kept | AUC (lost ranked above kept) [95% CI] |", "|---|---|---|---|"]
        for info, w in warn.items():
            ci = "" if not w["auc_ci"] else f" [{w['auc_ci'][0]:.2f}, {w['auc_ci'][1]:.2f}]"
            value = "undefined (a class is empty)" if w["auc"] is None else f"{w['auc']:.2f}{ci}"
            lines.append(f"| {info} | {w['lost']} | {w['kept']} | {value} |")
        lines.append("")
    by_table: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in summary["cells"]:
        by_table[(c["information"], c["query"])].append(c)
    for (info, query), entries in by_table.items():
        lines += [f"## {info}, {query} query", "",
                  "| condition | complete | exact | lenient | lenient net vs full [95% CI] | "
                  "margin change vs full | margin change vs control |",
                  "|---|---|---|---|---|---|---|"]
        for c in entries:
            net = c["lenient_complete_vs_full"]
            mf = c.get("margin_change_vs_full")
            mc = c.get("margin_change_vs_control")

            def fmt(m: dict[str, Any] | None) -> str:
                return "" if m is None else f"{m['mean']:+.2f} [{m['ci'][0]:+.2f}, {m['ci'][1]:+.2f}]"

            lines.append(f"| {c['condition']} | {c['complete']}/{c['n']} | {c['complete_exact']}/{c['n']} | "
                         f"{c['lenient_complete']}/{c['n']} | {net['net']:+.3f} [{net['net_ci'][0]:+.3f}, "
                         f"{net['net_ci'][1]:+.3f}] | {fmt(mf)} | {fmt(mc)} |")
        lines.append("")
    return "\n".join(lines)


def write_summary(out_dir: Path | str, seed: int = 0) -> dict[str, Any]:
    """Write ``summary.json``, ``report.md`` and ``figure.png`` next to ``results.jsonl``.

    Run time comes from the runner's ``timing.json`` when present.
    """
    from studies.runner import read_timing

    out = Path(out_dir)
    summary = summarize(out, seed=seed)
    config = json.loads((out / "config.json").read_text())
    timing = read_timing(out)
    if timing:
        summary["timing"] = timing
    report = format_report(summary, config, timing) + "\n![complete answers and margin change](figure.png)\n"
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=2) + "\n")
    atomic_write_text(out / "report.md", report)
    from .figure import plot_summary

    plot_summary(summary, out / "figure.png", model=config.get("model", {}).get("name", ""))
    return summary
