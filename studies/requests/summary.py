"""Summary and report of a request-workload run, from ``results.jsonl`` and ``timings.jsonl``.

Per background length and condition (the paper's policies):

* time over the ten requests: mean resident time (from B's arrival) and mean cold time
  (history tokenization and prefill included), and the paired overhead over keep-all
  (mean of per-history differences, ms) with a 95 % percentile interval from whole-history
  bootstrap draws (the histories are the units, paper L6481-6482; the same draws for
  every cell of a length);
* the components: detection (and how often the detector fired: true triggers on the
  15 replacements, false triggers on the others), update tokenization, append vs
  re-encode, mask construction, and per request tokenization, cache copy, suffix
  prefill, decode (ms per generated token);
* accuracy per query kind (C / H / U) under the exact JSON rule and the lenient
  first-value rule, with bootstrap intervals and the paired change against keep-all in
  percentage points.

``report.md`` opens with one compact cost table meant for the README, with the
machine (platform, CPUs, threads, torch) stated.
"""

from __future__ import annotations

import json
import os
import platform
from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, bootstrap_mean, group_bootstrap_weights, percentile_interval
from kvprobe.studies.common.formatting import cap_count
from kvprobe.studies.common.report import Items, estimate, heading, interval, run_time, small_sample_note, table_head
from kvprobe.studies.datasets.record_histories import ITEMS as HISTORIES
from kvprobe.studies.common.runner import read_rows
from .conditions import CONDITIONS, DETECTOR_CONDITIONS
from .study import read_timings

KINDS = ("current", "historical", "unrelated")
RULES = ("lenient", "correct")


def _mean_ci(diff: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """Mean of per-history values and its bootstrap interval (weights: [draws, histories])."""
    return {"mean": float(diff.mean()), "ci": percentile_interval(bootstrap_mean(diff, weights))}


def _stats(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    a = np.asarray(values, dtype=float)
    return {"mean": float(a.mean()), "median": float(np.median(a)), "n": len(a)}


def _time_cell(mine: dict[str, dict], base: dict[str, dict], keys: list[str], weights: np.ndarray) -> dict[str, Any]:
    """Cost of one condition at one length (timing records keyed by history)."""
    ts = [mine[k] for k in keys]
    queries = [q for t in ts for q in t["queries"]]
    decode_steps = sum(max(q["output_tokens"] - 1, 0) for q in queries)
    cell: dict[str, Any] = {
        "n": len(ts),
        "resident_ms": _stats([t["resident_ms"] for t in ts]), "cold_ms": _stats([t["cold_ms"] for t in ts]),
        "queries_ms": _stats([t["queries_ms"] for t in ts]),
        "update_tokenize_ms": _stats([t["update_tokenize_ms"] for t in ts]),
        "mask_ms": _stats([t["mask_ms"] for t in ts]),
        "append_ms": _stats([t["edit_ms"] for t in ts if t["edit"] == "append"]),
        "reencode_ms": _stats([t["edit_ms"] for t in ts if t["edit"] == "reencode"]),
        "reencodes": sum(t["edit"] == "reencode" for t in ts),
        "request": {k: _stats([q[k] for q in queries]) for k in ("tokenize_ms", "copy_ms", "prefill_ms", "decode_ms",
                                                                   "total_ms", "output_tokens")},
        "decode_ms_per_token": sum(q["decode_ms"] for q in queries) / decode_steps if decode_steps else None,
        "capped_answers": cap_count(queries),
        "kv_bytes": _stats([t["kv_bytes"] for t in ts]),
    }
    if any(t["detector"] for t in ts):
        cell["detect_ms"] = _stats([t["detect_ms"] for t in ts])
        cell["fired"] = sum(t["fired"] for t in ts)
        cell["true_triggers"] = sum(t["fired"] for t in ts if t["label"] == 1)
        cell["false_triggers"] = sum(t["fired"] for t in ts if t["label"] == 0)
        cell["positives"] = sum(t["label"] == 1 for t in ts)
    if mine is not base:
        for key in ("resident_ms", "cold_ms", "queries_ms"):
            diff = np.array([mine[k][key] - base[k][key] for k in keys], dtype=float)
            cell[f"{key}_overhead"] = _mean_ci(diff, weights)
        diff = np.array([sum(q["output_tokens"] for q in mine[k]["queries"])
                         - sum(q["output_tokens"] for q in base[k]["queries"]) for k in keys], dtype=float)
        cell["output_tokens_change"] = _mean_ci(diff, weights)
    return cell


def _accuracy(rows: dict[str, list[dict]], base: dict[str, list[dict]], keys: list[str], weights: np.ndarray
              ) -> dict[str, Any]:
    """Per query kind and rule: correct / total with an interval, and the paired change vs keep-all (pp)."""
    out: dict[str, Any] = {}
    for kind in KINDS:
        n = np.array([sum(r["query"] == kind for r in rows[k]) for k in keys], dtype=float)
        if not n.sum():
            continue
        cell: dict[str, Any] = {"n": int(n.sum())}
        for rule in RULES:
            s = np.array([sum(bool(r[rule]) for r in rows[k] if r["query"] == kind) for k in keys], dtype=float)
            b = np.array([sum(bool(r[rule]) for r in base[k] if r["query"] == kind) for k in keys], dtype=float)
            drawn_n = weights @ n
            cell[rule] = {"correct": int(s.sum()), "pct": float(100 * s.sum() / n.sum()),
                          "ci": percentile_interval(100 * (weights @ s) / drawn_n)}
            if rows is not base:
                cell[rule]["change_pp"] = {"mean": float(100 * (s - b).sum() / n.sum()),
                                           "ci": percentile_interval(100 * (weights @ (s - b)) / drawn_n)}
        out[kind] = cell
    return out


class Summary(TypedDict):
    """A repeated-request run's ``summary.json``."""

    #: Per background length: its histories and each policy's accuracy (and, when timed, its time) against
    #: keep-all.
    lengths: list[dict[str, Any]]
    #: Where it ran (the timings are of one process on that machine).
    machine: dict[str, Any]
    draws: int
    seed: int
    rows: int


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> Summary:
    """The run's summary (see the module docstring)."""
    out = Path(out_dir)
    config = json.loads((out / "config.json").read_text())
    conditions = [c for c in CONDITIONS if c in config["study_config"]["condition_set"]]
    rows_by: dict[tuple[int, str], dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for r in read_rows(out):
        rows_by[(r["lines"], r["condition"])][r["group"]].append(r)
    times_by: dict[tuple[int, str], dict[str, dict]] = defaultdict(dict)
    for t in read_timings(out):
        times_by[(t["lines"], t["policy"])][t["group"]] = t
    lengths = []
    for lines in sorted({k[0] for k in rows_by}):
        base_rows = rows_by.get((lines, "keep-all"), {})
        keys = sorted(base_rows)
        if not keys:
            continue
        weights = group_bootstrap_weights(keys, n_draws=draws, seed=seed)
        base_times = times_by.get((lines, "keep-all"), {})
        timed = all(k in base_times for k in keys)
        tokens = [base_rows[k][0]["history_tokens"] for k in keys]
        entry: dict[str, Any] = {"lines": lines, "histories": len(keys), "history_tokens": [min(tokens), max(tokens)],
                                 "policies": {}}
        for condition in conditions:
            mine_rows = rows_by.get((lines, condition), {})
            if not all(k in mine_rows for k in keys):
                continue
            cell: dict[str, Any] = {"accuracy": _accuracy(mine_rows, base_rows, keys, weights),
                                    "fired": sum(mine_rows[k][0]["fired"] for k in keys) if condition in
                                    DETECTOR_CONDITIONS else None}
            mine_times = times_by.get((lines, condition), {})
            if timed and all(k in mine_times for k in keys):
                cell["time"] = _time_cell(mine_times, base_times, keys, weights)
            entry["policies"][condition] = cell
        lengths.append(entry)
    return {"lengths": lengths, "machine": _machine(out, config), "draws": draws, "seed": seed,
            "rows": sum(len(v) for by in rows_by.values() for v in by.values())}


def _machine(out: Path, config: dict[str, Any]) -> dict[str, Any]:
    """Where the timings were taken: the runner's timing.json, else this process's machine."""
    from kvprobe.studies.common.runner import read_timing

    timing = read_timing(out)
    machine = dict(timing["machine"]) if timing else {"platform": platform.platform(), "cpus": os.cpu_count(),
                                                        "processor": platform.processor() or platform.machine()}
    machine["torch"] = config.get("versions", {}).get("torch")
    timings = read_timings(out)
    if timings:
        machine["peak_rss_bytes"] = max(t["peak_rss_bytes"] for t in timings)
    threads = {t["threads"] for t in timings}
    if threads:
        machine["threads"] = sorted(threads) if len(threads) > 1 else threads.pop()
    return machine


def _fmt_ci(d: dict[str, Any] | None, scale: float = 1.0, digits: int = 0) -> str:
    if not d:
        return ""
    lo, hi = d["ci"]
    return estimate(d["mean"] * scale, (lo * scale, hi * scale), f"+.{digits}f")


def _s(stats: dict[str, float] | None, key: str = "mean", scale: float = 1e-3, digits: int = 2) -> str:
    return "" if not stats else f"{stats[key] * scale:.{digits}f}"


def _acc(cell: dict[str, Any], rule: str = "lenient") -> str:
    return " / ".join(f"{cell['accuracy'][k][rule]['pct']:.0f}" if k in cell["accuracy"] else "-" for k in KINDS)


def cost_table(summary: dict[str, Any]) -> list[str]:
    """The compact cost table (markdown lines) for the README."""
    lines = table_head(["lines", "tokens", "policy", "resident s", "cold s", "overhead vs keep-all, ms [95% CI]",
                        "detector ms (fired)", "append / re-encode ms", "C / H / U % (lenient)"])
    for entry in summary["lengths"]:
        lo, hi = entry["history_tokens"]
        for condition, cell in entry["policies"].items():
            t = cell.get("time")
            if t is None:
                continue
            det = f"{t['detect_ms']['mean']:.0f} ({t['fired']}/{t['n']})" if "detect_ms" in t else ""
            edit = f"{_s(t['append_ms'], scale=1, digits=0) or '-'} / {_s(t['reencode_ms'], scale=1, digits=0) or '-'}"
            lines.append(f"| {entry['lines']} | {lo:,}-{hi:,} | {condition} | {_s(t['resident_ms'])} | {_s(t['cold_ms'])} | "
                         f"{_fmt_ci(t.get('resident_ms_overhead'))} | {det} | {edit} | {_acc(cell)} |")
    return lines


def _accuracy_table(summary: dict[str, Any]) -> list[str]:
    lines = table_head(["lines", "policy", "rule",
                        *(col for k in KINDS for col in (f"{k} % [95% CI]", "change pp [95% CI]"))])
    for entry in summary["lengths"]:
        for condition, cell in entry["policies"].items():
            for rule in RULES:
                parts = []
                for k in KINDS:
                    a = cell["accuracy"].get(k)
                    if a is None:
                        parts += ["", ""]
                        continue
                    r = a[rule]
                    parts += [f"{r['pct']:.1f} ({r['correct']}/{a['n']}) {interval(r['ci'], '.1f')}",
                              _fmt_ci(r.get("change_pp"), digits=1)]
                lines.append(f"| {entry['lines']} | {condition} | {rule} | " + " | ".join(parts) + " |")
    return lines


def _components_table(summary: dict[str, Any]) -> list[str]:
    lines = table_head(["lines", "policy", "detect", "update tokenize", "append", "re-encode (n)", "mask",
                        "per request: tokenize", "copy", "suffix prefill", "decode", "decode per token",
                        "output tokens", "capped", "queries change vs keep-all"])
    for entry in summary["lengths"]:
        for condition, cell in entry["policies"].items():
            t = cell.get("time")
            if t is None:
                continue
            rq = t["request"]
            per_token = "" if t["decode_ms_per_token"] is None else f"{t['decode_ms_per_token']:.1f}"
            reenc = f"{_s(t['reencode_ms'], 'median', 1, 0)} ({t['reencodes']})" if t["reencodes"] else "-"
            lines.append(
                f"| {entry['lines']} | {condition} | {_s(t.get('detect_ms'), 'median', 1, 0)} | "
                f"{_s(t['update_tokenize_ms'], 'median', 1, 1)} | {_s(t['append_ms'], 'median', 1, 0) or '-'} | {reenc} | "
                f"{_s(t['mask_ms'], 'median', 1, 2)} | {_s(rq['tokenize_ms'], 'median', 1, 2)} | "
                f"{_s(rq['copy_ms'], 'median', 1, 1)} | {_s(rq['prefill_ms'], 'median', 1, 0)} | "
                f"{_s(rq['decode_ms'], 'median', 1, 0)} | {per_token} | {_s(rq['output_tokens'], 'mean', 1, 1)} | "
                f"{t['capped_answers']} | {_fmt_ci(t.get('queries_ms_overhead'))} |")
    return lines


#: Where this study's items come from (the report's Items line).
ITEMS = Items(HISTORIES.kind, HISTORIES.detail + ", with generated ledger lines as background")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """report.md: the cost table, accuracy with intervals, and the components."""
    sc = config["study_config"]
    m = summary["machine"]
    lengths = ", ".join(f"{e['lines']} lines ({e['history_tokens'][0]:,}-{e['history_tokens'][1]:,} tokens)"
                        for e in summary["lengths"])
    machine = (f"{m.get('platform', '?')}, {m.get('processor', '?')}, {m.get('cpus', '?')} CPUs, "
               f"{m.get('threads', '?')} torch threads, torch {m.get('torch', '?')}")
    lines = [
        *heading("Repeated requests after one update", config, ITEMS),
        f"{summary['lengths'][0]['histories'] if summary['lengths'] else 0} record histories, one relation variant "
        f"each, at {lengths} (keep-all, B appended; background: {sc['background']} lines {sc['background_at']}). "
        f"Ten requests per sequence (C H U C C H U C H U), greedy, EOS or {sc['max_new_tokens']} tokens, answers not "
        f"appended. Policies in a shuffled order per case (seed {sc['order_seed']}). Detector: `{sc['detector']}`"
        f"{' with the lexical filter' if sc['lexical_filter'] else ''} on "
        f"{sc['detector_model'] or 'the generator model'}, serial, at most {sc['detector_max_new_tokens']} tokens. "
        f"Oracle recompute: {'true replacement labels' if sc['oracle'] == 'label' else 'every history'}; "
        f"re-encoding {'reuses the rows before record A' if sc['stored_prefix'] else 'encodes all retained text'}.", "",
        "Resident time starts when B arrives: detection, update tokenization, append or re-encode, mask, and per "
        "request tokenization, cache copy, suffix prefill and decode. Cold time adds the resident history's "
        f"tokenization and prefill ({'repeated per policy' if sc['prefill_per_condition'] else 'one prefill shared by the case policies'}). "
        "Checks are untimed. Overheads are means of per-history differences against keep-all with 95 % intervals "
        f"from {summary['draws']:,} whole-history bootstrap draws (seed {summary['seed']}).", "",
        f"Machine: {machine}; {config['model']['name']} in {config['model']['dtype']}"
        + (f"; peak RSS {m['peak_rss_bytes'] / 2**20:,.0f} MiB." if m.get("peak_rss_bytes") else "."), "",
    ]
    if summary["lengths"]:
        lines += small_sample_note(min(e["histories"] for e in summary["lengths"]), "histories")
    if timing:
        lines += [run_time(timing), ""]
    lines += ["## Cost over ten requests", ""] + cost_table(summary)
    lines += ["", "## Accuracy per query kind", "",
              "lenient = the first value of the history the answer names is the reference; correct = exact JSON "
              "answer field (the paper's rule). Intervals: whole-history bootstrap; change against keep-all in "
              "percentage points.", ""] + _accuracy_table(summary)
    lines += ["", "## Components (medians, ms; per request over all requests)", ""] + _components_table(summary)
    return "\n".join(lines) + "\n"
