"""Detection versus action on the quantity set (paper partB section 5, L2829-2870).

Joins the YES/NO scores of a detection run on the quantity pairs with the
generation outcomes of two quantity-study runs (development and test groups).
Acting on a case means answering under a mask scope (``source``: the whole old
record; ``number``: the old number only); its utility on one query is
U_q = 1{correct under the mask} - 1{correct under full access}.

* Calibration: thresholds fitted on the development cases for balanced accuracy
  and for *current*-answer utility U_current (ties to the fewest actions; paper
  L2840-2842), against fixed 0.5, always and never. On the test cases the
  record-pair decision is applied to the current, historical and unrelated
  queries (paper L2847-2849: "without an assumed historical guard"): the primary
  test utility of a case is U_current + U_historical + U_unrelated, with each
  query's net beside it. The current-query-only test utility (this module's
  earlier endpoint) is kept as the named sensitivity ``current_only``. Intervals:
  conditional (threshold fixed, relation-stratified group resamples) and joint
  (dev and test resampled, threshold refit per draw).
* Selection decomposition (paper L3474-3488, tab:v28_selection_decomposition, fig:v33_selection): at the
  predeclared threshold 0.5 (L3465-3466), on the current query, per relation: full-access correct, cases
  selected, corrections / reversals, net and actions on non-replacements; the net over all test cases split
  into the strict replacements' contribution and the other relations', each with a relation-stratified
  group-bootstrap interval (contributions share one denominator, so they add up to the total).
* Coverage curves on the test cases: expected net corrections when acting on the
  top share ranked by the YES/NO score (ties averaged), against random at matched
  coverage; the true replacement label is the informed reference ranking (for the
  primary utility, and for the current query only).

Correct answers use a quantity-study grading rule (``complete``: the paper's
complete single-answer JSON with the same unit; ``lenient_complete``: the right
quantity anywhere in the answer, for small models that answer in sentences).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kvprobe.files import atomic_write_text
from kvprobe.readouts.stats import DRAWS, PAPER_SEED, percentile_interval
from kvprobe.studies.common.detectors.coverage import coverage_curve
from kvprobe.studies.common.detectors.text import YES_NO
from kvprobe.studies.common.report import COVERAGE_COLUMNS, coverage_rows, interval, table_head, table_row
from kvprobe.studies.datasets.quantity_task.tasks import ITEMS as QUANTITY_ITEMS, RELATION_COUNTS
from kvprobe.studies.common.runner import read_rows
from .calibration import apply_threshold, calibrate, conditional_bootstrap_weights, summarize

RULES = ("complete", "lenient_complete")
MASKS = ("source", "number")
#: The queries a record-pair decision applies to (paper L2847-2849); thresholds are fitted on the first.
QUERIES = ("current", "historical", "unrelated")
#: The predeclared action threshold of the YES/NO pair score (paper L3465-3466: "predeclared as 0.5").
FIXED_THRESHOLD = 0.5
#: The relation whose actions are the intended ones (the strict replacements); every other relation's
#: actions are false ones (paper tab:v28_selection_decomposition, "False: actions on annotated non-replacements").
REPLACEMENT = "replacement"


def quantity_outcomes(run_dir: str | Path, queries: tuple[str, ...] = QUERIES
                      ) -> dict[str, dict[tuple[str, str], dict[str, Any]]]:
    """Rows of a quantity run by query, then by (case id, condition); the file is read once."""
    out: dict[str, dict[tuple[str, str], dict[str, Any]]] = {q: {} for q in queries}
    for r in read_rows(run_dir):
        if r["query"] in out:
            out[r["query"]][(r["case_id"], r["condition"])] = r
    return out


def _join(scores: dict[str, dict[str, Any]], outcomes: dict[str, dict[tuple[str, str], dict[str, Any]]],
          mask: str, rule: str) -> dict[str, list]:
    """Scores, labels, groups, relations and the utility of acting on each query, case by case."""
    current = outcomes[QUERIES[0]]
    cases = sorted(c for c, cond in current if cond == "full")
    for query, rows in outcomes.items():
        missing = [c for c in cases if c not in scores or (c, mask) not in rows or (c, "full") not in rows]
        if missing:
            raise ValueError(f"no YES/NO score or no {query} {mask!r} answer for quantity case {missing[0]!r}")
    full = [current[(c, "full")] for c in cases]
    utility = {q: [int(rows[(c, mask)][rule]) - int(rows[(c, "full")][rule]) for c in cases]
               for q, rows in outcomes.items()}
    return {"score": [scores[c]["score"] for c in cases], "label": [scores[c]["label"] for c in cases],
            "group": [r["group_id"] for r in full], "relation": [r["relation"] for r in full],
            "full_correct": [int(r[rule]) for r in full],
            "utility": utility, "all_queries": [sum(u) for u in zip(*utility.values())]}


def selection_decomposition(scores: list[float], relations: list[str], groups: list[Any], full_correct: list[int],
                            utility: list[int], threshold: float = FIXED_THRESHOLD, draws: int = DRAWS,
                            seed: int = PAPER_SEED) -> dict[str, Any]:
    """Acting at a fixed threshold, split by relation (paper L3474-3488; fig:v33_selection).

    Per relation: ``n``, ``full_correct``, ``selected`` (score >= threshold), ``corrections`` /
    ``reversals`` among the selected (utility +1 / -1), ``net`` and ``false`` (selected non-replacements).
    ``contributions``: the net over all cases from the replacements, from every other relation and in
    total, each in percentage points of *all* cases (one denominator, so the parts add up to the total)
    with a 95% interval over relation-stratified group draws (the same draws for the three).

    Example: scores ``[0.9, 0.2, 0.7]``, relations ``["replacement", "replacement", "confirmation"]``,
    utility ``[1, -1, -1]`` selects cases 0 and 2: the replacements contribute +1 (+33.3 pp), the
    confirmation -1 (one false action), the total 0.
    """
    act = apply_threshold(scores, threshold)
    util, full = np.asarray(utility, dtype=float), np.asarray(full_correct, dtype=int)
    rel = np.asarray(relations)
    rows = []
    known = list(RELATION_COUNTS)
    for relation in sorted(set(relations), key=lambda r: (known.index(r) if r in known else len(known), r)):
        here = rel == relation
        sel = act & here
        rows.append({"relation": relation, "n": int(here.sum()), "full_correct": int(full[here].sum()),
                     "selected": int(sel.sum()), "corrections": int((sel & (util > 0)).sum()),
                     "reversals": int((sel & (util < 0)).sum()), "net": int(util[sel].sum()),
                     "false": 0 if relation == REPLACEMENT else int(sel.sum())})
    n = len(scores)
    parts = {"replacement": rel == REPLACEMENT, "other": rel != REPLACEMENT, "total": np.ones(n, dtype=bool)}
    # One set of relation-stratified draws for all three parts (conditional_bootstrap's, threshold fixed).
    weights = conditional_bootstrap_weights(groups, n, draws, seed, relations) if n and draws else None
    contributions = {}
    for name, part in parts.items():
        per_draw = None if weights is None else weights @ ((act & part) * util)
        net = int(util[act & part].sum())
        contributions[name] = {"net": net, "pp": 100 * net / n if n else None,
                               "ci": None if per_draw is None else percentile_interval(100 * per_draw / n)}
    return {"threshold": threshold, "n": n, "relations": rows, "contributions": contributions}


def _curves(test: dict[str, list], utility: list[int], draws: int, seed: int) -> dict[str, Any]:
    return {name: coverage_curve(ranking, utility, groups=test["group"], strata=test["relation"], n_draws=draws,
                                 seed=seed)
            for name, ranking in (("yes-no score", test["score"]), ("replacement label", test["label"]))}


def action_utility(detection_dir: str | Path, dev_dir: str | Path, test_dir: str | Path,
                   rules: tuple[str, ...] = RULES, masks: tuple[str, ...] = MASKS, seed: int = PAPER_SEED,
                   draws: int = DRAWS) -> dict[str, Any]:
    """Calibration and coverage for every (grading rule, mask scope): thresholds fitted on the current
    query's utility, evaluated on all three queries (primary) and on the current one (``current_only``)."""
    scores = {r["case_id"].split("/", 1)[1]: r for r in read_rows(detection_dir)
              if r["dataset"] == "quantity" and r["detector"] == YES_NO}
    if not scores:
        raise ValueError(f"{detection_dir}: no YES/NO scores on the quantity dataset")
    dev_out, test_out = quantity_outcomes(dev_dir), quantity_outcomes(test_dir)
    cells = []
    for rule in rules:
        for mask in masks:
            dev, test = _join(scores, dev_out, mask, rule), _join(scores, test_out, mask, rule)

            def evaluate(test_utility: list[int]) -> dict[str, Any]:
                return calibrate(dev["score"], test["score"], dev_groups=dev["group"], test_groups=test["group"],
                                 dev_labels=dev["label"], dev_utility=dev["utility"][QUERIES[0]],
                                 test_labels=test["label"], test_utility=test_utility, dev_strata=dev["relation"],
                                 test_strata=test["relation"], n_draws=draws, seed=seed)

            cal = evaluate(test["all_queries"])
            for r in cal["rules"].values():
                t = -np.inf if r["threshold"] is None else r["threshold"]
                r["test_net_by_query"] = {q: int(summarize(test["score"], t, test["utility"][q])["net"])
                                          for q in QUERIES}
            decomposition = selection_decomposition(test["score"], test["relation"], test["group"],
                                                    test["full_correct"], test["utility"][QUERIES[0]],
                                                    draws=draws, seed=seed)
            cells.append({"rule": rule, "mask": mask, "dev_cases": len(dev["score"]),
                          "test_cases": len(test["score"]), "queries": list(QUERIES), "calibration": cal,
                          "coverage": _curves(test, test["all_queries"], draws, seed),
                          "selection_decomposition": decomposition,
                          "current_only": {"calibration": evaluate(test["utility"][QUERIES[0]]),
                                           "coverage": _curves(test, test["utility"][QUERIES[0]], draws, seed)}})
    return {"cells": cells, "seed": seed, "draws": draws,
            "sources": {"detection": str(detection_dir), "dev": str(dev_dir), "test": str(test_dir)}}


def _ci(ci: list[float] | None) -> str:
    return interval(ci, "+.0f") if ci else ""


def _rules_table(calibration: dict[str, Any], by_query: bool) -> list[str]:
    head = ["rule", "threshold", "dev actions", "dev net (current)" if by_query else "dev net", "test actions",
            "test net (C / R)", "conditional 95% CI", "joint 95% CI"]
    lines = list(table_head([*head, *(["test net by query (cur / hist / unrel)"] if by_query else []), "notes"]))
    for name, r in calibration["rules"].items():
        t = "-inf" if r["threshold"] is None else f"{r['threshold']:.6g}"
        per_query = ([" / ".join(f"{v:+d}" for v in r["test_net_by_query"].values())] if by_query else [])
        lines.append(table_row([name, t, r["dev_actions"], f"{r['dev_net']:+.0f}", r["test_actions"],
                                f"{r['test_net']:+.0f} ({r['test_corrections']} / {r['test_reversals']})",
                                _ci(r["conditional"].get("net")), _ci(r.get("joint", {}).get("net")), *per_query,
                                "; ".join(r["notes"])]))
    return lines


def _coverage_table(coverage: dict[str, Any]) -> list[str]:
    lines = list(table_head(["ranking", *COVERAGE_COLUMNS]))
    for name, cur in coverage.items():
        lines += [table_row([name, *cells]) for cells in coverage_rows(cur)]
    return lines


#: The paper's pooled selection at s >= 0.5 (tab:v28_selection_decomposition, L3620-3650; eight models x two
#: support conditions, complete-response rule): net change in pp (count) of each relation's population.
PAPER_SELECTION = {"source": {"replacement": "-20 (-192 of 960)", "confirmation": "-0.9 (-3 of 320)",
                              "other_attribute": "-11.9 (-38 of 320)", "other_entity": "-36.6 (-117 of 320)"},
                   "number": {"replacement": "+0.2 (+2 of 960)", "confirmation": "0 (+0 of 320)",
                              "other_attribute": "-11.9 (-38 of 320)", "other_entity": "-35.3 (-113 of 320)"}}


def _decomposition_lines(dec: dict[str, Any], mask: str) -> list[str]:
    """The fixed-threshold selection by relation and the replacement / other contributions."""
    paper = PAPER_SELECTION.get(mask, {})
    lines = [f"Selection at the fixed threshold {dec['threshold']:g}, current query, by relation (paper "
             "L3474-3488; the paper's column pools eight models and both support conditions):", "",
             *table_head(["relation", "full / n", "selected", "C / R", "net", "false actions",
                          "paper net pp (count)"])]
    for r in dec["relations"]:
        lines.append(table_row([r["relation"], f"{r['full_correct']}/{r['n']}", r["selected"],
                                f"{r['corrections']} / {r['reversals']}", f"{r['net']:+d}", r["false"],
                                paper.get(r["relation"], "")]))
    c = dec["contributions"]
    parts = "; ".join(f"{name} {v['net']:+d} ({v['pp']:+.1f} pp {interval(v['ci'], '+.1f')})"
                      for name, v in c.items() if v["pp"] is not None)
    return [*lines, "", f"Net change over all {dec['n']} test cases, by where the actions fall: {parts}.", ""]


def format_action_report(summary: dict[str, Any], model: str) -> str:
    lines = [f"# Detection vs action on the quantity set: {model}", "", QUANTITY_ITEMS.line(), "",
             "YES/NO scores of the record pairs decide whether to hide the old record (or only its number). "
             "Utility of a case on one query = correct under the mask minus correct under full access. "
             "Thresholds are fitted on the development groups' current-query utility (ties to the fewest actions); "
             "on the test groups the decision applies to the current, historical and unrelated queries (paper "
             "L2847-2849), so a case's test utility is the sum over the three (its net per query beside it); the "
             "current query alone is the sensitivity below each table. Conditional intervals keep the threshold "
             "fixed, joint ones refit it in each draw "
             f"({summary['draws']:,} relation-stratified group draws, seed {summary['seed']}).", ""]
    for cell in summary["cells"]:
        lines += [f"## {cell['rule']} rule, {cell['mask']} mask ({cell['dev_cases']} dev / {cell['test_cases']} "
                  "test cases)", "", "Test utility over the current, historical and unrelated queries:", "",
                  *_rules_table(cell["calibration"], by_query=True), "",
                  *_decomposition_lines(cell["selection_decomposition"], cell["mask"]),
                  *_coverage_table(cell["coverage"]), "",
                  f"![coverage](coverage-{cell['rule']}-{cell['mask']}.png)", "",
                  "Sensitivity, current query only:", "",
                  *_rules_table(cell["current_only"]["calibration"], by_query=False), "",
                  *_coverage_table(cell["current_only"]["coverage"]), ""]
    return "\n".join(lines)


def write_action_report(out_dir: str | Path, detection_dir: str | Path, dev_dir: str | Path, test_dir: str | Path,
                        seed: int = PAPER_SEED) -> dict[str, Any]:
    """Write ``action.json``, ``action.md`` and one coverage figure per (rule, mask) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = action_utility(detection_dir, dev_dir, test_dir, seed=seed)
    model = json.loads((Path(test_dir) / "config.json").read_text())["model"]["name"]
    from .figure import draw_calibration

    for cell in summary["cells"]:
        draw_calibration(cell, out / f"coverage-{cell['rule']}-{cell['mask']}.png", model)
    atomic_write_text(out / "action.json", json.dumps(summary, indent=1) + "\n")
    atomic_write_text(out / "action.md", format_action_report(summary, model))
    return summary
