"""Summary and report of a derived-note run, recomputed from ``results.jsonl`` (paper app:v5_propagation).

Per (note, query, condition) cell: exact-field correct answers, lenient
answers, valid JSON, EOS, UNKNOWN and parse-failure kinds; the change in
correct answers against full access and against the A-only mask (corrections,
reversals, percentage points with a paired 95 % interval); the mean margin
m = log p(right JSON) - log p(other JSON) and its change against full access
and the A-only mask. Intervals: 10,000 paired bootstrap resamples of the base
groups (a group's notes, queries and conditions stay together; spec partD
section 0), percentile 95 %, the same draws for every statistic; seeded with the
registry entry's REPORT_SEED (20260916) by default (``kvprobe.studies.common.summary.write_summary``),
the paper's 20260919 with ``seed=PAPER_SEED``.

Key contrasts (paper L5851-5863, with the Llama anchors in the report):
mask C vs full (current accuracy); the margin gain of masking C beyond the
neutral control, read as the difference in differences
[m(derived, mask C) - m(derived, full)] - [m(neutral, mask C) - m(neutral, full)]
(UNCLEAR which form the paper uses; the direct m(derived, mask C) -
m(neutral, mask C) is reported too); mask A vs full; selective refresh and full
recompute vs mask A (accuracy, margin, margin beyond the neutral note); mask A+C
vs mask A; historical accuracy under the refreshed arms.

Operation cost (not in the rows): ``operation_costs.jsonl`` next to the results,
if present (last entry per case and condition), median seconds per condition
and its ratio to the A-only mask.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Callable, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, bootstrap_mean, group_bootstrap_weights, percentile_interval
from kvprobe.studies.common.formatting import eos_count
from kvprobe.studies.common.report import Items, corrections_reversals, estimate, exact_rules, format_exact_rules, \
    heading, ordered, run_time, small_sample_note, table_head
from kvprobe.studies.common.runner import read_rows
from .data import NOTES, QUERIES
from .grading import regrade_row
from .history import CONDITIONS
from .study import COSTS

Vec = Callable[[str, str, str, str], np.ndarray]

#: (key, label, unit, paper anchor, function of the vector getter) of every key contrast.
CONTRASTS: list[tuple[str, str, str, str, Callable[[Vec], np.ndarray]]] = [
    ("maskC_vs_full_current", "mask C vs full, current accuracy (derived note)", "pp", "Llama +26 [14, 38]",
     lambda v: v("derived", "current", "mask-C", "correct") - v("derived", "current", "full", "correct")),
    ("maskC_vs_full_current_neutral", "mask C vs full, current accuracy (neutral control)", "pp", "",
     lambda v: v("neutral", "current", "mask-C", "correct") - v("neutral", "current", "full", "correct")),
    ("maskC_margin_beyond_neutral", "mask C margin gain vs full, derived minus neutral control (current)", "nats",
     "Llama 1.62 [1.32, 1.92]",
     lambda v: (v("derived", "current", "mask-C", "margin") - v("derived", "current", "full", "margin"))
     - (v("neutral", "current", "mask-C", "margin") - v("neutral", "current", "full", "margin"))),
    ("maskC_margin_derived_minus_neutral", "mask C margin, derived minus neutral (current; direct form)", "nats", "",
     lambda v: v("derived", "current", "mask-C", "margin") - v("neutral", "current", "mask-C", "margin")),
    ("maskA_vs_full_current", "mask A vs full, current accuracy (derived note)", "pp", "Llama -6 [-14, 2]",
     lambda v: v("derived", "current", "mask-A", "correct") - v("derived", "current", "full", "correct")),
    ("refresh_vs_maskA_current", "selective refresh vs mask A, current accuracy (derived note)", "pp",
     "Llama +18 [6, 32]",
     lambda v: v("derived", "current", "refresh", "correct") - v("derived", "current", "mask-A", "correct")),
    ("refresh_vs_maskA_margin", "selective refresh vs mask A, current margin (derived note)", "nats",
     "Qwen -0.43 [-0.66, -0.21], -0.30 [-0.57, -0.03]",
     lambda v: v("derived", "current", "refresh", "margin") - v("derived", "current", "mask-A", "margin")),
    ("refresh_vs_maskA_margin_beyond_neutral", "selective refresh vs mask A margin, derived minus neutral (current)",
     "nats", "Llama 0.44 [-0.07, 0.97]",
     lambda v: (v("derived", "current", "refresh", "margin") - v("derived", "current", "mask-A", "margin"))
     - (v("neutral", "current", "refresh", "margin") - v("neutral", "current", "mask-A", "margin"))),
    ("recompute_vs_maskA_current", "full recompute vs mask A, current accuracy (derived note)", "pp",
     "Llama +16 [4, 30]",
     lambda v: v("derived", "current", "full-recompute", "correct") - v("derived", "current", "mask-A", "correct")),
    ("recompute_vs_maskA_margin", "full recompute vs mask A, current margin (derived note)", "nats", "",
     lambda v: v("derived", "current", "full-recompute", "margin") - v("derived", "current", "mask-A", "margin")),
    ("maskAC_vs_maskA_current", "mask A+C vs mask A, current accuracy (derived note)", "pp",
     "Llama-3.1-70B +8 [2, 16] (256 tokens)",
     lambda v: v("derived", "current", "mask-AC", "correct") - v("derived", "current", "mask-A", "correct")),
    ("refresh_vs_full_historical", "selective refresh vs full, historical accuracy (derived note)", "pp",
     "Gemma 31B 50 -> 8 of 50 (256 tokens)",
     lambda v: v("derived", "historical", "refresh", "correct") - v("derived", "historical", "full", "correct")),
    ("recompute_vs_full_historical", "full recompute vs full, historical accuracy (derived note)", "pp", "",
     lambda v: v("derived", "historical", "full-recompute", "correct")
     - v("derived", "historical", "full", "correct")),
]


def _mean(v: np.ndarray, weights: np.ndarray, scale: float = 1.0) -> dict[str, Any] | None:
    """Mean of the groups present (NaN = group not in the cell) and its interval over the shared draws."""
    present = ~np.isnan(v)
    if not present.any():
        return None
    lo, hi = percentile_interval(bootstrap_mean(v, weights), points="alpha")
    return {"mean": float(np.mean(v[present]) * scale), "n": int(present.sum()), "ci": [lo * scale, hi * scale]}


def _versus(mine: np.ndarray, base: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    both = ~np.isnan(mine) & ~np.isnan(base)
    diff = np.where(both, mine - base, np.nan)
    return {"change": int(np.nansum(diff)), "corrections": int((diff > 0).sum()),
            "reversals": int((diff < 0).sum()), "pp": _mean(diff, weights, 100.0)}


def read_costs(out_dir: Path | str) -> dict[str, Any] | None:
    """Median operation seconds per condition from ``operation_costs.jsonl`` (None if absent)."""
    path = Path(out_dir) / COSTS
    if not path.exists():
        return None
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            entry = json.loads(line)
            last[(entry["case_id"], entry["condition"])] = entry
    by_condition: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for (_, cond), entry in last.items():
        by_condition[cond].append(entry)
    out = {}
    for cond in ordered(by_condition, CONDITIONS):
        seconds = np.array([e["seconds"] for e in by_condition[cond]])
        out[cond] = {"n": len(seconds), "median_seconds": float(np.median(seconds)),
                     "mean_seconds": float(seconds.mean()),
                     "median_recomputed_tokens": float(np.median([e["recomputed_tokens"] for e in by_condition[cond]])),
                     "median_history_tokens": float(np.median([e["history_tokens"] for e in by_condition[cond]]))}
    base = out.get("mask-A", {}).get("median_seconds")
    for entry in out.values():
        entry["ratio_vs_mask_A"] = entry["median_seconds"] / base if base else None
    return out


class Summary(TypedDict):
    """A derived-note run's ``summary.json``."""

    groups: int
    rows: int
    draws: int
    seed: int
    #: Per (note, query, condition): correct answers and their changes against full access and the A-only mask.
    cells: list[dict[str, Any]]
    #: The key contrasts (module docstring) with their paired intervals.
    contrasts: list[dict[str, Any]]
    #: What each operation cost (its side log, ``operation_costs.jsonl``).
    operation_cost: dict[str, Any]
    #: The exact answer-field rule beside the strict fenced rule (``common.report.exact_rules``).
    exact_rules: dict[str, int]


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> Summary:
    """Recompute the summary from the rows on disk (module docstring)."""
    cells: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    n_rows = 0
    every: list[dict[str, Any]] = []
    for row in map(regrade_row, read_rows(out_dir)):
        every.append(row)
        cells[(row["note"], row["query"], row["condition"])][row["group_id"]] = row
        n_rows += 1
    group_ids = sorted({g for cell in cells.values() for g in cell})
    index = {g: i for i, g in enumerate(group_ids)}
    weights = group_bootstrap_weights(group_ids, n_draws=draws, seed=seed).astype(float)  # shared by every cell

    def vec(note: str, query: str, cond: str, key: str) -> np.ndarray:
        v = np.full(len(group_ids), np.nan)
        for g, row in cells.get((note, query, cond), {}).items():
            if row.get(key) is not None:
                v[index[g]] = float(row[key])
        return v

    notes = ordered({k[0] for k in cells}, NOTES)
    queries = ordered({k[1] for k in cells}, QUERIES)
    out_cells = []
    for note in notes:
        for query in queries:
            for cond in ordered([k[2] for k in cells if k[:2] == (note, query)], CONDITIONS):
                rows = list(cells[(note, query, cond)].values())
                cell: dict[str, Any] = {
                    "note": note, "query": query, "condition": cond, "n": len(rows),
                    "correct": sum(r["correct"] for r in rows),
                    "lenient_correct": sum(r["lenient_correct"] for r in rows),
                    "valid_json": sum(r["parse_reason"] == "ok" for r in rows),
                    "eos": eos_count(rows),
                    "unknown": sum(r["category"] == "unknown" for r in rows),
                    "categories": dict(sorted(Counter(r["category"] for r in rows).items())),
                    "parse_failures": dict(sorted(Counter(r["parse_reason"] for r in rows
                                                          if r["parse_reason"] != "ok").items())),
                    "margin": _mean(vec(note, query, cond, "margin"), weights),
                }
                for base in ("full", "mask-A"):
                    if cond == base or (note, query, base) not in cells:
                        continue
                    key = "vs_full" if base == "full" else "vs_mask_A"
                    mine, ref = vec(note, query, cond, "correct"), vec(note, query, base, "correct")
                    cell[key] = {**_versus(mine, ref, weights),
                                 "lenient": _versus(vec(note, query, cond, "lenient_correct"),
                                                    vec(note, query, base, "lenient_correct"), weights),
                                 "margin": _mean(vec(note, query, cond, "margin") - vec(note, query, base, "margin"),
                                                 weights)}
                out_cells.append(cell)
    contrasts = []
    for key, label, unit, paper, fn in CONTRASTS:
        stat = _mean(fn(vec), weights, 100.0 if unit == "pp" else 1.0)
        contrasts.append({"key": key, "label": label, "unit": unit, "paper": paper, "stat": stat})
    return {"groups": len(group_ids), "rows": n_rows, "draws": draws, "seed": seed, "cells": out_cells,
            "contrasts": contrasts, "operation_cost": read_costs(out_dir), "exact_rules": exact_rules(every)}


# ----------------------------------------------------------------------------- report

def _ci(stat: dict[str, Any] | None, fmt: str = "+.2f") -> str:
    return estimate(stat["mean"], stat["ci"], fmt) if stat else ""


def _change(v: dict[str, Any] | None) -> str:
    if not v:
        return ""
    return f"{v['change']:+d} ({corrections_reversals(v, '/')}) {_ci(v['pp'], '+.0f')}"


def _cell_table(cells: list[dict[str, Any]]) -> list[str]:
    lines = table_head(["condition", "correct", "vs full: net (C/R) pp [95% CI]", "vs mask A: net (C/R) pp [95% CI]",
                        "lenient", "valid JSON", "EOS", "UNKNOWN", "mean margin [95% CI]", "margin vs full [95% CI]",
                        "margin vs mask A [95% CI]", "format failures"])
    for c in cells:
        fails = ", ".join(f"{k} {v}" for k, v in sorted(c["parse_failures"].items(), key=lambda kv: -kv[1]))
        lines.append(
            f"| {c['condition']} | {c['correct']}/{c['n']} | {_change(c.get('vs_full'))} "
            f"| {_change(c.get('vs_mask_A'))} | {c['lenient_correct']} | {c['valid_json']} | {c['eos']} "
            f"| {c['unknown']} | {_ci(c['margin'])} | {_ci((c.get('vs_full') or {}).get('margin'))} "
            f"| {_ci((c.get('vs_mask_A') or {}).get('margin'))} | {fails} |")
    return lines


#: Where this study's items come from (the report's Items line).
ITEMS = Items("reconstruction", "record histories with a derived note; our texts for the paper's design")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """Markdown report: key contrasts, one table per note and query, operation cost, run time."""
    study = config.get("study_config", {})
    lines = [
        *heading("Derived note and selective refresh", config, ITEMS),
        f"{summary['groups']} groups (seed {study.get('seed')}), notes {study.get('notes')}, {summary['rows']} rows; "
        f"greedy answers of at most {study.get('max_new_tokens')} tokens, EOS stop. Correct = exact normalized "
        "JSON answer field with EOS, read by the answer-field parser (extra fields permitted, no fence); "
        "lenient = the first of the two values "
        "mentioned is the right one, with EOS. Margin = log p(right JSON) - log p(other JSON), nats. Intervals: "
        f"paired bootstrap of groups, {summary['draws']:,} draws, seed {summary['seed']}, percentile 95 %.", "",
        format_exact_rules(summary["exact_rules"]), "",
        *small_sample_note(summary["groups"], "groups"),
        "## Key contrasts", "",
        *table_head(["contrast", "estimate [95% CI]", "n", "paper anchor"]),
    ]
    for c in summary["contrasts"]:
        s = c["stat"]
        est = f"{_ci(s, '+.1f' if c['unit'] == 'pp' else '+.2f')} {c['unit']}" if s else "n/a"
        lines.append(f"| {c['label']} | {est} | {s['n'] if s else 0} | {c['paper']} |")
    for note in NOTES:
        for query in QUERIES:
            cells = [c for c in summary["cells"] if (c["note"], c["query"]) == (note, query)]
            if cells:
                lines += ["", f"## {query} question, {note} note", "", *_cell_table(cells)]
    lines += ["", "C/R = corrections / reversals against the base condition; net and pp are the change in correct "
              "answers."]
    cost = summary.get("operation_cost")
    if cost:
        lines += ["", "## Operation cost", "",
                  "Seconds to prepare each condition's cache (crop/copy plus recomputation; excludes the shared "
                  "prefill and the question and answer tokens), median over cases.", "",
                  *table_head(["condition", "cases", "median s", "ratio to mask A", "median recomputed tokens",
                               "median history tokens"])]
        for cond, e in cost.items():
            ratio = f"{e['ratio_vs_mask_A']:.1f}x" if e["ratio_vs_mask_A"] else ""
            lines.append(f"| {cond} | {e['n']} | {e['median_seconds']:.4f} | {ratio} | "
                         f"{e['median_recomputed_tokens']:.0f} | {e['median_history_tokens']:.0f} |")
    if timing:
        per = f", {timing['seconds_per_case']:.1f} s per case" if timing.get("seconds_per_case") else ""
        lines += ["", run_time(timing, detail=per)]
    return "\n".join(lines) + "\n"
