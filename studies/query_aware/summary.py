"""Summary and report of a query-aware run, recomputed from ``results.jsonl`` alone.

Per (query, subset, condition): exact-field and lenient correct answers, parse
failures, answers mentioning the old value, and the paired change against full
access and against the source mask, with 95 % intervals from draws of whole
items (the six variants of an item stay together). Subsets: all histories and
the changed-value ones (replacement, role swap, explicit rejection; paper E4's
150 of 300). A capacity table gives K (min / median / max) per capacity kind and
the key slots each method keeps resident, because equal K is not equal
resources.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, PAPER_SEED, group_bootstrap_weights, paired_change
from kvprobe.studies.common.formatting import eos_count
from kvprobe.studies.common.report import format_change, heading, run_time, small_sample_note, table_head
from kvprobe.studies.datasets.record_histories import ITEMS
from kvprobe.studies.common.runner import read_rows

RULES = ("correct", "lenient")
REFERENCES = ("full", "source-mask")


def _condition_order(conditions: set[str]) -> list[str]:
    """The references first (full, source mask), then the query-aware conditions alphabetically."""
    fixed = [c for c in REFERENCES if c in conditions]
    return fixed + sorted(c for c in conditions if c not in REFERENCES)


class Summary(TypedDict):
    """A query-aware run's ``summary.json``."""

    #: Per (query, subset, arm): its answers under each rule and their paired changes against full access and the
    #: source mask.
    cells: list[dict[str, Any]]
    #: Per (query, arm) with a budget: the capacity, the budget K (min, median, max) and the resident tokens.
    capacity: list[dict[str, Any]]
    rows: int
    draws: int
    seed: int
    histories: int
    groups: int


def summarize(out_dir: Path | str, seed: int = PAPER_SEED, draws: int = DRAWS) -> Summary:
    rows = list(read_rows(out_dir))
    by_key: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)
    for r in rows:
        by_key[(r["query"], r["condition"])][r["case_id"]] = r
    cells, capacity = [], []
    queries = sorted({r["query"] for r in rows})
    conditions = _condition_order({r["condition"] for r in rows})
    for query in queries:
        base = by_key.get((query, "full"), {})
        for subset in ("all", "changed-value"):
            keys = sorted(k for k in base if subset == "all" or base[k]["changed_value"])
            if not keys:
                continue
            weights = group_bootstrap_weights([base[k]["group"] for k in keys], n_draws=draws, seed=seed)
            for condition in conditions:
                mine = by_key.get((query, condition), {})
                got = [mine[k] for k in keys if k in mine]
                cell: dict[str, Any] = {"query": query, "subset": subset, "arm": condition, "n": len(got),
                                        "parse_ok": sum(r["parse"] == "ok" for r in got),
                                        "mentions_old": sum(bool(r["mentions_old"]) for r in got),
                                        "eos": eos_count(got)}
                for rule in RULES:
                    cell[rule] = sum(bool(r[rule]) for r in got)
                    for ref in REFERENCES:
                        other = by_key.get((query, ref), {})
                        if condition != ref and len(got) == len(keys) and all(k in other for k in keys):
                            cell[f"{rule}_vs_{ref}"] = paired_change([mine[k][rule] for k in keys],
                                                                     [other[k][rule] for k in keys], weights)
                cells.append(cell)
        for condition in conditions:
            got = list(by_key.get((query, condition), {}).values())
            if not got or got[0]["budget"] is None:
                continue
            K = np.array([r["budget"] for r in got])
            resident = np.array([r["resident_tokens"] for r in got])
            capacity.append({"query": query, "arm": condition, "capacity": got[0]["capacity"],
                             "K": [int(K.min()), float(np.median(K)), int(K.max())],
                             "resident_median": float(np.median(resident)),
                             "history_median": float(np.median([r["history_tokens"] for r in got])),
                             "masked_median": float(np.median([r["masked_tokens"] for r in got]))})
    return {"cells": cells, "capacity": capacity, "rows": len(rows), "draws": draws, "seed": seed,
            "histories": len({r["case_id"] for r in rows}), "groups": len({r["group"] for r in rows})}


def _table(cells: list[dict[str, Any]]) -> list[str]:
    lines = table_head(["query", "subset", "arm", "n", "exact", "vs full [95% CI]", "lenient", "vs full [95% CI]",
                        "vs source mask [95% CI]", "mentions old", "parse ok"])
    for c in cells:
        lines.append(f"| {c['query']} | {c['subset']} | {c['arm']} | {c['n']} | {c['correct']} | "
                     f"{format_change(c.get('correct_vs_full'))} | {c['lenient']} | "
                     f"{format_change(c.get('lenient_vs_full'))} | {format_change(c.get('lenient_vs_source-mask'))} | "
                     f"{c['mentions_old']} | {c['parse_ok']} |")
    return lines


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    sc = config["study_config"]
    lines = [*heading("Query-aware selection vs a source mask", config, ITEMS),
             f"{summary['histories']} record histories ({sc['split']} split), queries {', '.join(sc['queries'])}; "
             "arms: full access, a source mask hiding record A in every history, and Quest (16-token pages, first "
             "2 layers dense), FINCH (question-window attention, per-head selection, keys re-rotated to compact "
             "positions), RefreshKV (partial set, refresh check every 10 steps at cosine <= 0.95, width-7 pool) and "
             "the recent-page control, each at matched capacity K = history + observation - masked"
             + (f" and at a fixed K = {sc['fixed_budget']}" if sc.get("fixed_budget") else "") +
             f". Greedy answers of at most {sc['max_new_tokens']} tokens. Exact = the JSON answer field equals the "
             "reference; lenient (ours) = the first history value the answer mentions is the reference. Changes are "
             f"paired, 95 % intervals from {summary['draws']:,} draws of whole items (seed {summary['seed']}).", ""]
    lines += small_sample_note(summary["groups"], "items (groups of six histories)")
    if timing:
        lines += [run_time(timing, "histories"), ""]
    lines += _table(summary["cells"])
    if summary["capacity"]:
        lines += ["", "Capacity: K per question (min / median / max) and key slots kept resident before the final "
                  "question token (medians). Quest reads `K // 16` pages (the current page included); FINCH keeps K "
                  "slots per KV head, its window included; Quest, RefreshKV and the recent-page control keep every "
                  "slot resident and only read fewer.", "",
                  *table_head(["query", "arm", "K min / median / max", "resident (median)", "history (median)",
                               "masked (median)"])]
        for c in summary["capacity"]:
            k = c["K"]
            lines.append(f"| {c['query']} | {c['arm']} | {k[0]} / {k[1]:g} / {k[2]} | {c['resident_median']:g} | "
                         f"{c['history_median']:g} | {c['masked_median']:g} |")
    return "\n".join(lines) + "\n"
