"""Summary and report of a record-history run, recomputed from ``results.jsonl`` alone.

Per (query, condition): exact-field correct answers (the paper's rule), lenient
answers (first-mentioned value, ours), parse failures, and the paired change
against keep-all with a 95 % interval from 10,000 draws of whole items (the six
variants of an item stay together, partD section 0). Current queries are also
split into replacement and non-replacement histories. The detector's decisions
are scored against the labels, and a coverage curve ranks histories by the
detector's decision: acting means hiding A (the ``always-mask`` arm), the
utility of a history is its current-answer change under that mask.

Values, units and errors (:mod:`.value_tables`): per (query, condition) the paper's six
value categories, matching values and unit omissions, unquoted UNKNOWN outputs; the
current-query reversals of every condition against keep-all split into missing unit /
UNKNOWN / other; and, when the run has the neutral note, always-mask against its
equal-token control (always-control). Rows written before the value columns existed
are regraded from their stored outputs (:func:`.errors.regrade_row`).

``summary.json`` is a :class:`Summary` (its cells :class:`Cell`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, Mapping, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, PAPER_SEED, PairedChange, group_bootstrap_weights, paired_change
from kvprobe.studies.common.formatting import eos_count
from kvprobe.studies.common.detectors.coverage import coverage_curve
from kvprobe.studies.common.detectors import strings as note_strings
from kvprobe.studies.common.detectors.text import REPLACEMENT
from kvprobe.studies.common.report import COVERAGE_COLUMNS, corrections_reversals, coverage_rows, exact_rules, \
    format_change, format_exact_rules, heading, run_time, small_sample_note, table_head, table_row
from kvprobe.studies.datasets.record_histories import ITEMS
from kvprobe.studies.common.runner import read_rows
from . import strings, value_tables
from .errors import regrade_row
from .study import ALL_CONDITIONS, CONDITIONS, NOT_RUN

QUERIES = ("current", "historical", "unrelated")
RULES = ("correct", "lenient")


def _conditions(by_key: dict) -> list[str]:
    """The conditions the run has rows of, in report order."""
    present = {condition for _, condition in by_key}
    return [c for c in ALL_CONDITIONS if c in present]


def _cells(by_key: dict, keys: list[str], groups: dict[str, str], seed: int, draws: int,
           subset: str = "all") -> list[Cell]:
    weights = _weights(keys, groups, seed, draws)
    cells = []
    for query in QUERIES:
        full = by_key.get((query, "keep-all"), {})
        if not full:
            continue
        for condition in _conditions(by_key):
            mine = by_key.get((query, condition), {})
            rows = [mine[k] for k in keys if k in mine]
            cell: Cell = {"query": query, "policy": condition, "subset": subset, "n": len(rows),
                                    "parse_ok": sum(r["parse"] == "ok" for r in rows),
                                    "eos": eos_count(rows),
                                    "acted": sum(r["operation"] != "full" for r in rows)}
            for rule in RULES:
                cell[rule] = sum(bool(r[rule]) for r in rows)
                if condition != "keep-all" and len(rows) == len(keys):
                    cell[f"{rule}_change"] = paired_change([mine[k][rule] for k in keys],
                                                           [full[k][rule] for k in keys], weights)
            cells.append(cell)
    return cells


def _weights(keys: list[str], groups: dict[str, str], seed: int, draws: int) -> Any:
    """The item-bootstrap multiplicities over ``keys`` (the same draws :func:`_cells` uses for them)."""
    return group_bootstrap_weights([groups[k] for k in keys], n_draws=draws, seed=seed)


def _detector(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The detector's decisions per variant (one row per history: current query, keep-all)."""
    per_variant: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        per_variant[r["variant"]][r["detector_decision"]] += 1
    positives = [r for r in rows if r["label"] == 1]
    negatives = [r for r in rows if r["label"] == 0]
    fire = [r["detector_decision"] == REPLACEMENT for r in rows]
    return {"per_variant": {v: dict(c) for v, c in per_variant.items()},
            "true_triggers": sum(r["detector_decision"] == REPLACEMENT for r in positives), "positives": len(positives),
            "false_triggers": sum(r["detector_decision"] == REPLACEMENT for r in negatives), "negatives": len(negatives),
            "accuracy": float(np.mean([f == bool(r["label"]) for f, r in zip(fire, rows)])) if rows else None}


class _CellKeys(TypedDict):
    query: str
    policy: str
    #: ``all``, or (current query) ``replacement`` / ``non-replacement`` histories.
    subset: str
    n: int
    parse_ok: int
    eos: int
    #: Histories where the policy changed the cache (any operation but full access).
    acted: int
    correct: int
    lenient: int


class Cell(_CellKeys, total=False):
    """One (query, policy, subset): its answers correct under the exact and lenient rules and how they ended."""

    #: A policy answering every history: each rule's change against keep-all, paired over whole items.
    correct_change: PairedChange
    lenient_change: PairedChange


class _SummaryKeys(TypedDict):
    cells: list[Cell]
    #: The detector's decisions scored against the labels.
    detector: dict[str, Any]
    draws: int
    seed: int
    rows: int
    histories: int
    groups: int
    #: The exact answer-field rule beside the strict fenced rule (``common.report.exact_rules``).
    exact_rules: dict[str, int]
    policies: list[str]
    #: Value categories and reversals (:mod:`.value_tables`).
    values: list[dict[str, Any]]
    reversals: list[dict[str, Any]]


class Summary(_SummaryKeys, total=False):
    """A record-history run's ``summary.json``."""

    #: Runs with the neutral note: always-mask against its equal-token control (``value_tables.control_cells``).
    mask_vs_control: list[dict[str, Any]]
    #: Runs with the always-mask arm: per rule, a coverage curve per ranking (detector, oracle label, readouts).
    coverage: dict[str, dict[str, dict[str, Any]]]


def summarize(out_dir: Path | str, seed: int = PAPER_SEED, draws: int = DRAWS,
              readout_scores: str | Path | None = None,
              rankings: Mapping[str, Mapping[str, float]] | None = None) -> Summary:
    """The run's summary; ``rankings`` adds coverage curves ranked by other scores (e.g. learned
    readouts, ``studies.common.detectors.readout_scores``), ``{name: {case_id: score}}``; ``readout_scores``:
    a ``kvprobe readout`` scores.json (or its folder) whose readouts rank the histories so.

    Example: ``summarize("runs/records", readout_scores="runs/readout/scores.json")["coverage"]["lenient"]``.
    """
    if readout_scores is not None:
        from kvprobe.studies.common.detectors.readout_scores import load_readout_scores

        rankings = {**load_readout_scores(readout_scores), **(rankings or {})}
    rows = [regrade_row(r) for r in read_rows(out_dir)]
    by_key: dict[tuple[str, str], dict[str, dict]] = defaultdict(dict)
    for r in rows:
        by_key[(r["query"], r["condition"])][r["case_id"]] = r
    base = by_key.get(("current", "keep-all"), {})
    keys = sorted(base)
    groups = {k: base[k]["group"] for k in keys}
    cells = _cells(by_key, keys, groups, seed, draws)
    for label, name in ((1, "replacement"), (0, "non-replacement")):
        subset = [k for k in keys if base[k]["label"] == label]
        if subset:
            cells += [c for c in _cells(by_key, subset, groups, seed, draws, name) if c["query"] == "current"]
    summary: Summary = {"cells": cells, "detector": _detector([base[k] for k in keys]), "draws": draws,
                               "seed": seed, "rows": len(rows), "histories": len(keys),
                               "groups": len(set(groups.values()))}
    summary["exact_rules"] = exact_rules(rows)
    conditions = summary["policies"] = _conditions(by_key)
    replacements = [k for k in keys if base[k]["label"] == 1]
    summary["values"] = value_tables.value_cells(by_key, keys, QUERIES, conditions)
    summary["reversals"] = value_tables.reversal_cells(by_key, keys, conditions) + \
        value_tables.reversal_cells(by_key, replacements, conditions, subset="replacement")
    if value_tables.CONTROL in conditions:
        control = [value_tables.control_cells(by_key, keys, _weights(keys, groups, seed, draws), q, "all")
                   for q in QUERIES]
        control.append(value_tables.control_cells(by_key, replacements, _weights(replacements, groups, seed, draws),
                                                  "current", "replacement"))
        summary["mask_vs_control"] = [c for c in control if c is not None]
    masked = by_key.get(("current", "always-mask"), {})
    if keys and all(k in masked for k in keys):
        ranked = {"detector": [float(base[k]["detector_decision"] == REPLACEMENT) for k in keys],
                  "oracle label": [float(base[k]["label"]) for k in keys]}
        for name, by_case in (rankings or {}).items():
            missing = [k for k in keys if k not in by_case]
            if missing:
                raise ValueError(f"ranking {name!r} has no score for {missing[0]}")
            ranked[name] = [float(by_case[k]) for k in keys]
        summary["coverage"] = {}
        for rule in RULES:
            utility = [int(masked[k][rule]) - int(base[k][rule]) for k in keys]
            grp = [groups[k] for k in keys]
            summary["coverage"][rule] = {name: coverage_curve(s, utility, groups=grp, n_draws=draws, seed=seed)
                                         for name, s in ranked.items()}
    return summary


def _table(cells: list[dict[str, Any]]) -> list[str]:
    lines = table_head(["query", "subset", "policy", "n", "acted", "exact correct", "change vs keep-all [95% CI]",
                        "C / R", "lenient", "change vs keep-all [95% CI]", "parse ok", "EOS"])
    for c in cells:
        ch, lch = c.get("correct_change"), c.get("lenient_change")
        lines.append(f"| {c['query']} | {c['subset']} | {c['policy']} | {c['n']} | {c['acted']} | {c['correct']} | "
                     f"{format_change(ch)} | {corrections_reversals(ch)} | {c['lenient']} | {format_change(lch)} | "
                     f"{c['parse_ok']} | {c['eos']} |")
    return lines


def _condition_set(conditions: list[str]) -> str:
    """The report's words for the run's conditions (the paper's "policies", "arms")."""
    if tuple(conditions) == CONDITIONS:
        return "eight arms (the paper's seven policies and an always-mask reference)"
    return f"{len(conditions)} arms ({', '.join(conditions)})"


def _setting(sc: dict[str, Any]) -> str:
    """The history variant: deadline unit and neutral note (configs written before these fields: dates, none)."""
    unit = sc.get("deadline_unit", "date")
    text = ("Deadlines are stated in hours (the paper's quantity family). " if unit == "hours" else
            "Deadlines are stated as dates (the paper states them in hours), so no reference is a quantity. ")
    note = sc.get("note", "none")
    if note != "none":
        text += (f"Every arm has the neutral note ({note_strings.NOTE_REPEATS} x \"{note_strings.NOTE_SENTENCES[note]}\") before "
                 "Time 2. ")
    return text


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    sc = config["study_config"]
    det = summary["detector"]
    source = f"decisions from the detection run `{sc['detections']}`" if sc.get("detections") else \
        "decisions from the generator running the detector inline"
    lines = [*heading("Record histories", config, ITEMS),
             f"{summary['histories']} synthetic record histories ({sc['split']} split), three queries, "
             f"{_condition_set(summary['policies'])}, greedy answers of at most "
             f"{sc['max_new_tokens']} tokens. {_setting(sc)}Detector: `{sc['detector']}`"
             f"{' with the lexical filter' if sc['lexical_filter'] else ''}, {source}. Exact = case-folded, "
             "whitespace-normalized equality of the JSON answer field read by the answer-field parser (malformed "
             "JSON is wrong); lenient (ours) = the "
             "first value of the history the answer mentions is the reference. Changes are paired against keep-all, "
             f"95 % intervals from {summary['draws']:,} draws of whole items (seed {summary['seed']}). "
             "C / R = corrections / reversals of the exact rule.", ""]
    lines += [format_exact_rules(summary["exact_rules"]), ""]
    lines += small_sample_note(summary["groups"], "items (groups of six histories)")
    if timing:
        lines += [run_time(timing, "histories", machine=True), ""]
    if det["per_variant"] and all(set(c) == {NOT_RUN} for c in det["per_variant"].values()):
        lines += ["Detector: not run (no detector policy among the arms).", ""]
    else:
        lines += [f"Detector: {det['true_triggers']}/{det['positives']} true triggers, {det['false_triggers']}/"
                  f"{det['negatives']} false triggers (unresolved counts as no trigger); decisions per variant: "
                  + "; ".join(f"{v}: {dict(sorted(c.items()))}" for v, c in sorted(det["per_variant"].items())), ""]
    lines += _table(summary["cells"])
    lines += ["", *value_tables.format_values(summary["values"])]
    lines += ["", *value_tables.format_reversals(summary["reversals"])]
    if summary.get("mask_vs_control"):
        lines += ["", *value_tables.format_control(summary["mask_vs_control"], summary["draws"], summary["seed"])]
    if "coverage" in summary:
        lines += ["", "## Coverage", "",
                  "Coverage (current queries; acting = hiding A): expected net corrections when acting on the "
                  "top share of histories ranked by the score, ties averaged; excess over random at the same "
                  "coverage in percentage points of all histories.", "",
                  *table_head(["rule", "ranking", *COVERAGE_COLUMNS])]
        for rule, curves in summary["coverage"].items():
            for name, cur in curves.items():
                lines += [table_row([rule, name, *cells]) for cells in coverage_rows(cur)]
        lines += ["", "![coverage](coverage.png)"]
    return "\n".join(lines) + "\n"
