"""Detection versus action on the quantity set (paper partB section 5, L2829-2870).

Joins the YES/NO scores of a detection run on the quantity pairs with the
generation outcomes of two quantity-study runs (development and test groups).
Acting on a case means answering under a mask scope (``source``: the whole old
record; ``number``: the old number only); its utility is
U = 1{correct under the mask} - 1{correct under full access} on the current query.

* Calibration: thresholds fitted on the development cases for balanced accuracy
  and for current-answer utility (ties to the fewest actions), against fixed 0.5,
  always and never, evaluated on the test cases with conditional (threshold fixed,
  relation-stratified group resamples) and joint (dev and test resampled, threshold
  refit per draw) intervals.
* Coverage curves on the test cases: expected net corrections when acting on the
  top share ranked by the YES/NO score (ties averaged), against random at matched
  coverage; the true replacement label is the informed reference ranking.

Correct answers use a quantity-study grading rule (``complete``: the paper's
complete single-answer JSON with the same unit; ``lenient_complete``: the right
quantity anywhere in the answer, for small models that answer in sentences).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvprobe.files import atomic_write_text
from kvprobe.readouts.stats import DRAWS, PAPER_SEED
from kvprobe.studies.detectors.coverage import coverage_curve, plot_coverage
from kvprobe.studies.detectors.text import YES_NO
from kvprobe.studies.report import COVERAGE_COLUMNS, coverage_rows, interval, table_head, table_row
from kvprobe.studies.runner import read_rows
from .calibration import calibrate

RULES = ("complete", "lenient_complete")
MASKS = ("source", "number")


def quantity_outcomes(run_dir: str | Path, query: str = "current") -> dict[tuple[str, str], dict[str, Any]]:
    """Rows of a quantity run for one query, by (case id, condition)."""
    return {(r["case_id"], r["condition"]): r for r in read_rows(run_dir) if r["query"] == query}


def _join(scores: dict[str, dict[str, Any]], outcomes: dict[tuple[str, str], dict[str, Any]], mask: str,
          rule: str) -> dict[str, list]:
    cases = sorted(c for c, cond in outcomes if cond == "full")
    missing = [c for c in cases if c not in scores or (c, mask) not in outcomes]
    if missing:
        raise ValueError(f"no YES/NO score or no {mask!r} answer for quantity case {missing[0]!r}")
    full = [outcomes[(c, "full")] for c in cases]
    return {"score": [scores[c]["score"] for c in cases], "label": [scores[c]["label"] for c in cases],
            "group": [r["group_id"] for r in full], "relation": [r["relation"] for r in full],
            "utility": [int(outcomes[(c, mask)][rule]) - int(outcomes[(c, "full")][rule]) for c in cases]}


def action_utility(detection_dir: str | Path, dev_dir: str | Path, test_dir: str | Path,
                   rules: tuple[str, ...] = RULES, masks: tuple[str, ...] = MASKS, seed: int = PAPER_SEED,
                   draws: int = DRAWS) -> dict[str, Any]:
    """Calibration and coverage for every (grading rule, mask scope)."""
    scores = {r["case_id"].split("/", 1)[1]: r for r in read_rows(detection_dir)
              if r["dataset"] == "quantity" and r["detector"] == YES_NO}
    if not scores:
        raise ValueError(f"{detection_dir}: no YES/NO scores on the quantity dataset")
    dev_out, test_out = quantity_outcomes(dev_dir), quantity_outcomes(test_dir)
    cells = []
    for rule in rules:
        for mask in masks:
            dev, test = _join(scores, dev_out, mask, rule), _join(scores, test_out, mask, rule)
            cal = calibrate(dev["score"], test["score"], dev_groups=dev["group"], test_groups=test["group"],
                            dev_labels=dev["label"], dev_utility=dev["utility"], test_labels=test["label"],
                            test_utility=test["utility"], dev_strata=dev["relation"], test_strata=test["relation"],
                            n_draws=draws, seed=seed)
            curves = {name: coverage_curve(ranking, test["utility"], groups=test["group"], strata=test["relation"],
                                           n_draws=draws, seed=seed)
                      for name, ranking in (("yes-no score", test["score"]), ("replacement label", test["label"]))}
            cells.append({"rule": rule, "mask": mask, "dev_cases": len(dev["score"]),
                          "test_cases": len(test["score"]), "calibration": cal, "coverage": curves})
    return {"cells": cells, "seed": seed, "draws": draws,
            "sources": {"detection": str(detection_dir), "dev": str(dev_dir), "test": str(test_dir)}}


def _ci(ci: list[float] | None) -> str:
    return interval(ci, "+.0f") if ci else ""


def format_action_report(summary: dict[str, Any], model: str) -> str:
    lines = [f"# Detection vs action on the quantity set: {model}", "",
             "YES/NO scores of the record pairs decide whether to hide the old record (or only its number) before "
             "the current question. Utility of a case = correct under the mask minus correct under full access. "
             "Thresholds are fitted on the development groups (ties to the fewest actions); conditional intervals "
             "keep the threshold fixed, joint ones refit it in each draw "
             f"({summary['draws']:,} relation-stratified group draws, seed {summary['seed']}).", ""]
    for cell in summary["cells"]:
        lines += [f"## {cell['rule']} rule, {cell['mask']} mask ({cell['dev_cases']} dev / {cell['test_cases']} "
                  "test cases)", "",
                  *table_head(["rule", "threshold", "dev actions", "dev net", "test actions", "test net (C / R)",
                               "conditional 95% CI", "joint 95% CI", "notes"])]
        for name, r in cell["calibration"]["rules"].items():
            t = "-inf" if r["threshold"] is None else f"{r['threshold']:.6g}"
            lines.append(f"| {name} | {t} | {r['dev_actions']} | {r['dev_net']:+.0f} | {r['test_actions']} | "
                         f"{r['test_net']:+.0f} ({r['test_corrections']} / {r['test_reversals']}) | "
                         f"{_ci(r['conditional'].get('net'))} | {_ci(r.get('joint', {}).get('net'))} | "
                         f"{'; '.join(r['notes'])} |")
        lines += ["", *table_head(["ranking", *COVERAGE_COLUMNS])]
        for name, cur in cell["coverage"].items():
            lines += [table_row([name, *cells]) for cells in coverage_rows(cur)]
        lines += ["", f"![coverage](coverage-{cell['rule']}-{cell['mask']}.png)", ""]
    return "\n".join(lines)


def write_action_report(out_dir: str | Path, detection_dir: str | Path, dev_dir: str | Path, test_dir: str | Path,
                        seed: int = PAPER_SEED) -> dict[str, Any]:
    """Write ``action.json``, ``action.md`` and one coverage figure per (rule, mask) into ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary = action_utility(detection_dir, dev_dir, test_dir, seed=seed)
    model = json.loads((Path(test_dir) / "config.json").read_text())["model"]["name"]
    for cell in summary["cells"]:
        plot_coverage(cell["coverage"], out / f"coverage-{cell['rule']}-{cell['mask']}.png",
                      title=f"{model}: {cell['mask']} mask, {cell['rule']} rule")
    atomic_write_text(out / "action.json", json.dumps(summary, indent=1) + "\n")
    atomic_write_text(out / "action.md", format_action_report(summary, model))
    return summary
