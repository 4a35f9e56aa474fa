"""The value, reversal and mask-vs-control tables of a record-history run (paper app:v7_errors, app:v8_units,
app:v7_bridge), computed from rows that carry the value columns (:func:`.errors.regrade_row`).

* :func:`value_cells`: per (query, condition) the six value categories, the matching values (our reading of
  the paper's "numbers of matching values", seed L5539-5541: answers whose value matches the reference,
  unit or not, i.e. ``correct`` + ``magnitude_only``), the correct-magnitude unit omissions
  (``magnitude_only``), the missing-unit flag on wrong answers (exact rule) and the unquoted
  ``{"answer": UNKNOWN}`` outputs;
* :func:`reversal_cells`: current-query reversals of each condition against a reference condition (exact rule), split
  into missing unit / UNKNOWN / other (:func:`.errors.reversal_kind`) with the value categories of the
  reversed answers;
* :func:`control_cells`: always-mask against always-control (the equal-token control), paired changes of
  exact, matching-value and lenient answers with item-bootstrap intervals, on every query and on the
  replacement histories of the current query (the paper's contrast, Table tab:v7_bridge).

``by_key`` maps ``(query, condition)`` to ``{case_id: row}``; ``weights`` are the report's shared item
bootstrap multiplicities (:func:`kvprobe.readouts.stats.group_bootstrap_weights`) over ``keys``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from kvprobe.readouts.stats import paired_change
from kvprobe.studies.common.report import corrections_reversals, format_change, table_head, table_row
from kvprobe.studies.datasets.values import VALUE_CATEGORIES
from . import strings
from .errors import MATCHING, REVERSAL_KINDS, reversal_kind

Rows = Mapping[tuple[str, str], Mapping[str, Mapping[str, Any]]]
#: The always-mask condition and its equal-token control.
MASK, CONTROL = "always-mask", "always-control"
#: Column labels of the six categories.
CATEGORY_LABELS = {"correct": "correct", "magnitude_only": "magnitude only", "old_value": "old value",
                   "other_value": "other value", "unknown": "UNKNOWN", "invalid_format": "invalid format"}

_OUTCOMES: dict[str, Callable[[Mapping[str, Any]], bool]] = {
    "correct": lambda r: bool(r["correct"]),
    "matching": lambda r: r["value_category"] in MATCHING,
    "lenient": lambda r: bool(r["lenient"]),
}


def value_cells(by_key: Rows, keys: Sequence[str], queries: Sequence[str], conditions: Sequence[str]
                ) -> list[dict[str, Any]]:
    """Per (query, condition): counts of the six value categories and the error flags over ``keys``."""
    cells = []
    for query in queries:
        for condition in conditions:
            mine = by_key.get((query, condition), {})
            rows = [mine[k] for k in keys if k in mine]
            if not rows:
                continue
            counts = Counter(r["value_category"] for r in rows)
            cells.append({"query": query, "policy": condition, "n": len(rows),
                          "categories": {c: counts.get(c, 0) for c in VALUE_CATEGORIES},
                          "matching": sum(counts.get(c, 0) for c in MATCHING),
                          "unit_omissions": counts.get("magnitude_only", 0),
                          "missing_unit_wrong": sum(bool(r["missing_unit"]) and not r["correct"] for r in rows),
                          "unquoted_unknown": sum(bool(r["unquoted_unknown"]) for r in rows)})
    return cells


def reversals(condition: Mapping[str, Mapping[str, Any]], reference: Mapping[str, Mapping[str, Any]],
              keys: Sequence[str]) -> dict[str, Any]:
    """Cases exact-correct under ``reference`` and wrong under ``condition``, split by kind and value category."""
    lost = [condition[k]["value_category"] for k in keys if reference[k]["correct"] and not condition[k]["correct"]]
    kinds = Counter(reversal_kind(c) for c in lost)
    return {"reversals": len(lost), **{kind: kinds.get(kind, 0) for kind in REVERSAL_KINDS},
            "categories": {c: n for c, n in sorted(Counter(lost).items(), key=lambda x: VALUE_CATEGORIES.index(x[0]))}}


def reversal_cells(by_key: Rows, keys: Sequence[str], conditions: Sequence[str], query: str = "current",
                   subset: str = "all") -> list[dict[str, Any]]:
    """Reversals of every condition against keep-all, and of always-mask against always-control, on ``query``."""
    pairs = [(c, "keep-all") for c in conditions if c != "keep-all"]
    if MASK in conditions and CONTROL in conditions:
        pairs.append((MASK, CONTROL))
    cells = []
    for condition, ref in pairs:
        a, r = by_key.get((query, condition), {}), by_key.get((query, ref), {})
        if all(k in a and k in r for k in keys):
            cells.append({"query": query, "subset": subset, "arm": condition, "reference": ref, "n": len(keys),
                          **reversals(a, r, keys)})
    return cells


def control_cells(by_key: Rows, keys: Sequence[str], weights: np.ndarray, query: str, subset: str
                  ) -> dict[str, Any] | None:
    """always-mask against always-control on ``query`` over ``keys`` (None when either condition is missing)."""
    mask, control = by_key.get((query, MASK), {}), by_key.get((query, CONTROL), {})
    if not keys or not all(k in mask and k in control for k in keys):
        return None
    cell: dict[str, Any] = {"query": query, "subset": subset, "n": len(keys)}
    for name, outcome in _OUTCOMES.items():
        masked, ref = [int(outcome(mask[k])) for k in keys], [int(outcome(control[k])) for k in keys]
        cell[name] = {"mask": sum(masked), "control": sum(ref), "change": paired_change(masked, ref, weights)}
    cell["reversals"] = reversals(mask, control, keys)
    return cell


# ----------------------------------------------------------------------------- report sections
def _verdict(change: Mapping[str, Any]) -> str:
    """Whether a paired change's 95 % interval excludes zero."""
    lo, hi = change["ci"]
    if lo > 0:
        return "the mask raises it, interval above 0"
    if hi < 0:
        return "the mask lowers it, interval below 0"
    return "no change shown, interval includes 0"


def format_values(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """The value-category table and the paper's anchors."""
    lines = ["## Values and units", "",
             "Value categories of the exact answer field (quantities compared in hours after converting minutes "
             "and days; a bare number can only match the magnitude). Matching = correct + magnitude only (the "
             "value matches, unit or not); missing unit = bare numbers among wrong answers (exact rule); unquoted "
             "UNKNOWN = outputs writing `" + strings.UNQUOTED_UNKNOWN + "` (invalid JSON).", "",
             *table_head(["query", "policy", "n", *CATEGORY_LABELS.values(), "matching", "missing unit (wrong)",
                          "unquoted UNKNOWN"])]
    for c in cells:
        lines.append(table_row([c["query"], c["policy"], c["n"], *c["categories"].values(), c["matching"],
                                c["missing_unit_wrong"], c["unquoted_unknown"]]))
    totals = Counter()
    for c in cells:
        totals[c["policy"]] += c["unquoted_unknown"]
    lines += ["", "Unquoted UNKNOWN outputs per policy, all queries: "
              + "; ".join(f"{p} {n}" for p, n in totals.items()) + ".", "",
              "Paper (current queries, keep-all / oracle-mask, of 300; seed L5539-5542): matching values "
              + ", ".join(f"{g} {a}/{b}" for g, (a, b), _ in strings.VALUE_ANCHORS) + "; correct-magnitude unit "
              "omissions " + ", ".join(f"{g} {a}/{b}" for g, _, (a, b) in strings.VALUE_ANCHORS) + ". Unquoted "
              f"UNKNOWN (seed L5515-5517): {strings.UNQUOTED_ANCHOR[0]} "
              + ", ".join(f"{p} {n}" for p, n in strings.UNQUOTED_ANCHOR[1].items()) + "."]
    return lines


def format_reversals(cells: Sequence[Mapping[str, Any]]) -> list[str]:
    """The reversal taxonomy table and the paper's anchors."""
    lines = ["## Reversals", "",
             "Answers exact-correct under the reference arm and wrong under the arm (current queries), split as "
             "the paper splits them: missing unit = the right magnitude without its unit; other = any other "
             "wrong answer (its value categories beside).", "",
             *table_head(["subset", "arm", "reference", "n", "reversals", "missing unit", "UNKNOWN", "other",
                          "categories of the reversed answers"])]
    for c in cells:
        cats = ", ".join(f"{CATEGORY_LABELS[k]} {v}" for k, v in c["categories"].items())
        lines.append(table_row([c["subset"], c["arm"], c["reference"], c["n"], c["reversals"], c["missing_unit"],
                                c["unknown"], c["other"], cats]))
    oracle = next((c for c in cells if (c["subset"], c["arm"]) == ("all", "oracle-mask")), None)
    if oracle is not None:
        lines += ["", f"At this size: oracle-mask loses {oracle['reversals']} current answers against keep-all, "
                  f"{oracle['missing_unit']} by a missing unit, {oracle['unknown']} by UNKNOWN, {oracle['other']} "
                  "otherwise."]
    lines += ["", "Paper (oracle-mask vs keep-all, seed L5511-5514): "
              + "; ".join(f"{g} {n} reversals = {u} missing hours + {k} UNKNOWN + {o} other"
                          for g, n, u, k, o in strings.REVERSAL_ANCHORS) + "."]
    return lines


def format_control(cells: Sequence[Mapping[str, Any]], draws: int, seed: int) -> list[str]:
    """The always-mask vs always-control table and the paper's anchors."""
    lines = ["## Old mask vs equal-token control", "",
             "always-mask minus always-control (the same number of tokens hidden from the start of the neutral "
             f"note), paired per history; 95 % intervals from {draws:,} draws of whole items (seed {seed}). "
             "Replacement = the replacement, role-swap and explicit-rejection histories (current differs from "
             "old), the paper's contrast.", "",
             *table_head(["query", "subset", "n", "exact mask / control", "change [95% CI]", "C / R",
                          "matching mask / control", "change [95% CI]", "lenient change [95% CI]",
                          "reversals: missing unit / UNKNOWN / other"])]
    for c in cells:
        ex, ma, le, rv = c["correct"], c["matching"], c["lenient"], c["reversals"]
        lines.append(table_row([c["query"], c["subset"], c["n"], f"{ex['mask']} / {ex['control']}",
                                format_change(ex["change"]), corrections_reversals(ex["change"]),
                                f"{ma['mask']} / {ma['control']}", format_change(ma["change"]),
                                format_change(le["change"]),
                                f"{rv['missing_unit']} / {rv['unknown']} / {rv['other']}"]))
    main = next((c for c in cells if (c["query"], c["subset"]) == ("current", "replacement")), None)
    if main is not None:
        lines += ["", f"At this size (current queries, {main['n']} replacement histories): "
                  + "; ".join(f"{label} {format_change(main[key]['change'])} ({_verdict(main[key]['change'])})"
                              for key, label in (("correct", "exact"), ("matching", "matching values"),
                                                 ("lenient", "lenient"))) + "."]
    lines += ["", "Paper (150 replacement cases, old mask vs control; seed L5545-5549, Table tab:v7_bridge): "
              + "; ".join(f"{g}{' matching ' + m + ',' if m else ''} exact {d} pp, C/R {cr}, reversals omitting "
                          f"hours {u}, UNKNOWN {k}" for g, m, d, cr, u, k in strings.CONTROL_ANCHORS) + "."]
    return lines
