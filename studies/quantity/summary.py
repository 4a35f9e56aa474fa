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
from kvprobe.readouts.stats import DRAWS, auc_two_samples, group_bootstrap_indices, percentile_interval, \
    zero_failure_bound
from kvprobe.studies.report import estimate, heading, interval, table_head
from kvprobe.studies.runner import read_rows

#: Report order of conditions (unknown names sort after these, alphabetically).
RELATION_ORDER = ("replacement", "confirmation", "other_attribute", "other_entity")
CONDITION_ORDER = ("full", "source", "source-control", "number", "number-control", "recompute", "rebuild", "compact")
QUERY_ORDER = ("current", "historical", "unrelated")


def _cell_order(key: tuple[str, str, str]) -> tuple:
    info, query, cond = key
    q = QUERY_ORDER.index(query) if query in QUERY_ORDER else len(QUERY_ORDER)
    c = CONDITION_ORDER.index(cond) if cond in CONDITION_ORDER else len(CONDITION_ORDER)
    return (info, q, query, c, cond)
RULES = ("complete", "complete_exact", "lenient_complete")


def _interval(values: np.ndarray, draws: np.ndarray) -> list[float]:
    """Percentile 95 % interval of the mean of ``values`` (NaN = not in the cell) over bootstrap draws."""
    return percentile_interval(np.nanmean(values[draws], axis=1), points="alpha")


def warning_signal(cells, order: list[str], sample: np.ndarray, rule: str = "lenient_complete") -> dict[str, Any]:
    """How well D_c = -(logp_current(source) - logp_current(control)) ranks lost above kept answers.

    Lost: complete under full access, incomplete under the whole-source mask; kept:
    complete under both; cases incomplete under full access are excluded (partC 5).
    Current query, replacement groups, per information condition and pooled over
    both (``"both"``: each drawn group brings its cases of both conditions);
    bootstrap draws with an empty class are dropped and counted.
    """
    index = {g: i for i, g in enumerate(order)}
    per_info: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for info in sorted({k[0] for k in cells}):
        full, src, ctrl = (cells.get((info, "current", c), {}) for c in ("full", "source", "source-control"))
        label = np.full(len(order), np.nan)
        d_c = np.full(len(order), np.nan)
        for g, row in src.items():
            if row["relation"] != "replacement" or g not in full or g not in ctrl or not full[g][rule]:
                continue
            label[index[g]] = 0.0 if row[rule] else 1.0  # 1 = lost
            d_c[index[g]] = -(row["logp_right"] - ctrl[g]["logp_right"])
        per_info[info] = (label[None], d_c[None])
    if len(per_info) > 1:
        per_info["both"] = (np.concatenate([v[0] for v in per_info.values()]),
                            np.concatenate([v[1] for v in per_info.values()]))
    out: dict[str, Any] = {}
    for info, (label, d_c) in per_info.items():  # label, d_c: Float[k, groups]
        pos, neg = d_c[label == 1], d_c[label == 0]
        boot, kept = [], 0
        for idx in sample:
            lab, dc = label[:, idx], d_c[:, idx]
            p_, n_ = dc[lab == 1], dc[lab == 0]
            if len(p_) and len(n_):
                boot.append(auc_two_samples(p_, n_))
                kept += 1
        value = auc_two_samples(pos, neg)
        out[info] = {"rule": rule, "lost": int(len(pos)), "kept": int(len(neg)),
                     "auc": None if np.isnan(value) else value,  # undefined with an empty class
                     "auc_ci": percentile_interval(boot, points="alpha") if boot else None,
                     "draws_kept": kept,
                     "mean_d_c_lost": float(pos.mean()) if len(pos) else None,
                     "mean_d_c_kept": float(neg.mean()) if len(neg) else None}
    return out


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> dict[str, Any]:
    """Recompute the summary from the rows on disk (streamed).

    Cells are (relation, information, query, condition); relation ``"all"`` pools
    the four relations, the others restrict to one (the paper's headline is the
    replacements' current query).
    """
    cells: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    relation_of: dict[str, str] = {}
    for row in read_rows(out_dir):
        cells[(row["information"], row["query"], row["condition"])][row["group_id"]] = row
        relation_of[row["group_id"]] = row["relation"]
    order = sorted(relation_of)
    index = {g: i for i, g in enumerate(order)}
    # Long[draws, groups]: indices into ``order`` (each group its own bootstrap unit), resampled within
    # each relation, so a statistic restricted to one relation sees a full resample of it (paper partC 6).
    sample = group_bootstrap_indices(order, n_draws=draws, seed=seed, strata=[relation_of[g] for g in order]).draws
    relations = ("all",) + tuple(r for r in RELATION_ORDER if r in relation_of.values())

    def vector(cell: dict[str, dict[str, Any]], key: str, members: np.ndarray) -> np.ndarray:
        v = np.full(len(order), np.nan)
        for g, row in cell.items():
            value = row[key]
            v[index[g]] = np.nan if value is None else float(value)
        return np.where(members, v, np.nan)

    def versus(mine: np.ndarray, base: np.ndarray, members: np.ndarray) -> dict[str, Any]:
        corrections, reversals = (mine == 1) & (base == 0), (mine == 0) & (base == 1)
        net = np.where(members, corrections.astype(float) - reversals.astype(float), np.nan)
        return {"corrections": int(corrections.sum()), "reversals": int(reversals.sum()),
                "net": float(np.nanmean(net)), "net_ci": _interval(net, sample)}

    summary: dict[str, Any] = {"groups": len(order), "draws": draws, "seed": seed,
                               "groups_per_relation": {r: sum(v == r for v in relation_of.values())
                                                       for r in relations[1:]},
                               "cells": []}
    for (info, query, cond), cell in sorted(cells.items(), key=lambda kv: _cell_order(kv[0])):
        full = cells[(info, query, "full")]
        control = cells.get((info, query, f"{cond}-control"))
        for relation in relations:
            members = np.array([g in cell and relation in ("all", relation_of[g]) for g in order])
            entry: dict[str, Any] = {"relation": relation, "information": info, "query": query,
                                     "condition": cond, "n": int(members.sum())}
            for rule in RULES:
                mine, base = vector(cell, rule, members), vector(full, rule, members)
                entry[rule] = int(np.nansum(mine))
                entry[f"{rule}_vs_full"] = versus(mine, base, members)
                if control is not None:
                    entry[f"{rule}_vs_control"] = versus(mine, vector(control, rule, members), members)
            for key in ("margin_change_vs_full", "margin_change_vs_control"):
                v = vector(cell, key, members)
                if not np.isnan(v[members]).any():
                    entry[key] = {"mean": float(np.nanmean(v)), "ci": _interval(v, sample)}
            if entry["lenient_complete_vs_full"]["reversals"] == 0 and cond != "full":
                entry["zero_reversal_upper_bound"] = zero_failure_bound(entry["n"])
            summary["cells"].append(entry)
    summary["warning_signal"] = warning_signal(cells, order, sample)
    return summary


def _cells(summary: dict[str, Any], relation: str, info: str, query: str) -> list[dict[str, Any]]:
    return [c for c in summary["cells"] if (c["relation"], c["information"], c["query"]) == (relation, info, query)]


def _table(entries: list[dict[str, Any]]) -> list[str]:
    def fmt(m: dict[str, Any] | None) -> str:
        return "" if m is None else estimate(m["mean"], m["ci"])

    def net(v: dict[str, Any] | None) -> str:
        if v is None:
            return ""
        return f"{v['corrections']}/{v['reversals']}, {estimate(v['net'], v['net_ci'], '+.3f')}"

    lines = table_head(["condition", "strict", "exact", "lenient", "lenient C/R, net vs full [95% CI]",
                        "lenient C/R, net vs control", "margin change vs full", "margin change vs control"])
    for c in entries:
        lines.append(f"| {c['condition']} | {c['complete']}/{c['n']} | {c['complete_exact']}/{c['n']} | "
                     f"{c['lenient_complete']}/{c['n']} | {net(c['lenient_complete_vs_full'])} | "
                     f"{net(c.get('lenient_complete_vs_control'))} | {fmt(c.get('margin_change_vs_full'))} | "
                     f"{fmt(c.get('margin_change_vs_control'))} |")
    return lines + [""]


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """A markdown report: replacements' current query first (the paper's headline), then the warning
    signal, the other relations, and all groups for the historical and unrelated queries."""
    lines = [*heading("Quantity study", config),
             f"{summary['groups']} groups; paired group bootstrap, {summary['draws']} draws, 95 % percentile "
             "intervals. complete = strict JSON, equivalent units, EOS; lenient = first complete quantity "
             "anywhere in the answer, EOS. C/R = corrections / reversals; net = (C - R) / groups. Bootstrap "
             "draws resample groups within each relation.", ""]
    if timing:
        m = timing["machine"]
        lines += [f"Run time {timing['seconds']:.0f} s ({timing['seconds'] / 60:.1f} min) for "
                  f"{timing['cases_run']} cases and {timing['rows_written']} rows (each row: one greedy answer "
                  f"and two candidate scores): {timing['seconds_per_case']:.2f} s per case, "
                  f"{timing['rows_per_second']:.2f} rows/s; {timing['cases_per_batch']} cases per batch, "
                  f"{config.get('model', {}).get('attn_implementation', '?')} attention, {m['threads']} threads "
                  f"on {m['cpus']} CPUs ({m['processor']}), {timing['invocations']} invocation(s).", ""]
    per_relation = summary.get("groups_per_relation", {})
    infos = sorted({c["information"] for c in summary["cells"]})
    for info in infos:
        head = _cells(summary, "replacement", info, "current")
        if head:
            lines += [f"## Replacements ({per_relation.get('replacement', '?')} groups), {info}, current query", ""]
            lines += _table(head)
    warn = summary.get("warning_signal", {})
    if warn:
        lines += ["## Warning signal: D_c = drop of log p(current) under the source mask vs its control", "",
                  "Replacements, current query, lenient rule; cases complete under full access.", "",
                  *table_head(["information", "lost", "kept", "mean D_c lost / kept",
                               "AUC (lost ranked above kept) [95% CI]"])]
        for info, w in warn.items():
            ci = "" if not w["auc_ci"] else f" {interval(w['auc_ci'], '.2f')}"
            value = "undefined (a class is empty)" if w["auc"] is None else f"{w['auc']:.2f}{ci}"
            means = " / ".join("-" if w.get(k) is None else f"{w[k]:+.2f}" for k in ("mean_d_c_lost", "mean_d_c_kept"))
            lines.append(f"| {info} | {w['lost']} | {w['kept']} | {means} | {value} |")
        lines.append("")
    others = [r for r in RELATION_ORDER[1:] if r in per_relation]
    if others:
        lines += ["## Other relations, current query: lenient complete answers", "",
                  "| condition | " + " | ".join(f"{r}, {i}" for i in infos for r in others) + " |",
                  "|---|" + "---|" * (len(others) * len(infos))]
        conds = [c["condition"] for c in _cells(summary, others[0], infos[0], "current")]
        for cond in conds:
            counts = []
            for info in infos:
                for r in others:
                    c = next(c for c in _cells(summary, r, info, "current") if c["condition"] == cond)
                    counts.append(f"{c['lenient_complete']}/{c['n']}")
            lines.append(f"| {cond} | " + " | ".join(counts) + " |")
        lines.append("")
    for query in QUERY_ORDER[1:]:
        for info in infos:
            entries = _cells(summary, "all", info, query)
            if entries:
                lines += [f"## All {summary['groups']} groups, {info}, {query} query", ""]
                lines += _table(entries)
    return "\n".join(lines)


def write_summary(out_dir: Path | str, seed: int = 0) -> dict[str, Any]:
    """Write ``summary.json``, ``report.md`` and ``figure.png`` next to ``results.jsonl``.

    Run time comes from the runner's ``timing.json`` when present.
    """
    from kvprobe.studies.runner import read_timing

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
