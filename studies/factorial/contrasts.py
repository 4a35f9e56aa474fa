"""The factorial's contrasts: mask minus matched control per cell, and how one factor changes it.

A *cell* is (information, note, wording); in every cell each mask (``whole`` and the matrix's narrow mask)
is compared with its own equal-token control on the same 3 x N record cases. The paper's factor summary
(seed L5093-5096, tables tab:v35_quantity_factors and tab:v35_endpoint_factors): "Each column changes one
factor, averaging the remaining fixed factor levels within group." Per record case,

* a factor F with levels (a, b) (information: stated -> refers-to-a, "earlier unit needed"; wording:
  original -> complete, "explicit request"; note: notebook -> shelf): the mean, over the other factors'
  levels and over the chosen masks, of ``(mask - control)[F=b] - (mask - control)[F=a]``;
* mask scope ("number minus whole", "endpoint minus whole"): the mean over every cell of
  ``(narrow - narrow control) - (whole - whole control)``.

The estimate is the mean over record cases in percentage points; its interval comes from the group
bootstrap (:func:`kvprobe.readouts.stats.group_bootstrap_weights`: 10,000 draws of the base groups, the
three variants of a group kept together, the paper's seed), the same draws for every statistic of a
matrix. With the paper's Qwen3-32B counts this reproduces its +25.0 (number minus whole), +8.3 (explicit
request) and -16.7 (earlier unit needed): the factor columns average over both masks.

Example::

    >>> table = {("c1", "stated", "notebook", "original", c): v for c, v in
    ...          [("whole", 0), ("whole-control", 1), ("number", 1), ("number-control", 1)]}
    >>> scope_value(table, "c1", "number", [("stated", "notebook", "original")])
    1.0
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import product
from typing import Any

import numpy as np

from kvprobe.readouts.stats import bootstrap_mean, percentile_interval

#: Each factor's two levels, in the order of the contrast (second minus first).
FACTORS: dict[str, tuple[str, str]] = {"information": ("stated", "refers-to-a"),
                                       "wording": ("original", "complete"), "note": ("notebook", "shelf")}
#: How the report names each contrast (the paper's column heads).
CONTRAST_NAMES = {"scope": "{narrow} minus whole", "wording": "explicit request", "information": "earlier unit needed",
                  "note": "shelf minus notebook"}
#: The cell coordinates, in key order.
CELL_FACTORS = ("information", "note", "wording")

#: An outcome table: (record case, information, note, wording, condition) -> outcome (0/1 or a score).
Table = dict[tuple[str, str, str, str, str], float]
Cell = tuple[str, str, str]


def outcome_table(rows: Iterable[dict[str, Any]], column: str) -> Table:
    """The outcome ``column`` of every row, keyed by (record case, information, note, wording, condition)."""
    return {(r["record_case"], r["information"], r["note"], r["query"], r["condition"]): float(r[column])
            for r in rows}


def levels(table: Table) -> dict[str, list[str]]:
    """The levels of each cell factor present in ``table``, in :data:`FACTORS` order."""
    present = {f: {k[1 + i] for k in table} for i, f in enumerate(CELL_FACTORS)}
    return {f: [v for v in FACTORS[f] if v in present[f]] + sorted(present[f] - set(FACTORS[f]))
            for f in CELL_FACTORS}


def cells(table: Table) -> list[Cell]:
    """Every (information, note, wording) cell of the design present in ``table``."""
    lv = levels(table)
    return list(product(*(lv[f] for f in CELL_FACTORS)))


def mask_minus_control(table: Table, record: str, cell: Cell, mask: str) -> float:
    """``mask`` minus its matched control for one record case in one cell (NaN when either is missing)."""
    a, b = table.get((record, *cell, mask)), table.get((record, *cell, f"{mask}-control"))
    return np.nan if a is None or b is None else a - b


def scope_value(table: Table, record: str, narrow: str, cell_list: Sequence[Cell]) -> float:
    """Mean over ``cell_list`` of (narrow - its control) - (whole - its control) for one record case."""
    diffs = [mask_minus_control(table, record, c, narrow) - mask_minus_control(table, record, c, "whole")
             for c in cell_list]
    return float(np.mean(diffs)) if diffs else np.nan


def factor_value(table: Table, record: str, factor: str, masks: Sequence[str], cell_list: Sequence[Cell]) -> float:
    """Mean over the other factors' levels and ``masks`` of the change in (mask - control) when ``factor`` goes
    from its first to its second level, for one record case (NaN when a level is missing)."""
    first, second = FACTORS[factor]
    i = CELL_FACTORS.index(factor)
    diffs = []
    for cell in cell_list:
        if cell[i] != first:
            continue
        changed = cell[:i] + (second,) + cell[i + 1:]
        diffs += [mask_minus_control(table, record, changed, m) - mask_minus_control(table, record, cell, m)
                  for m in masks]
    return float(np.mean(diffs)) if diffs else np.nan


def summarize_values(values: Sequence[float], weights: np.ndarray, scale: float = 100.0) -> dict[str, Any]:
    """Mean of per-record-case values (x ``scale``) with its group-bootstrap 95 % interval.

    ``weights``: [draws, record cases] multiplicities in the order of ``values``. NaN values are left out.
    """
    v = np.asarray(values, dtype=float) * scale
    if np.isnan(v).all():
        return {"estimate": None, "ci": None, "n": 0}
    return {"estimate": float(np.nanmean(v)), "ci": percentile_interval(bootstrap_mean(v, weights)),
            "n": int((~np.isnan(v)).sum())}


def factor_contrasts(table: Table, records: Sequence[str], narrow: str, weights: np.ndarray,
                     scale: float = 100.0) -> dict[str, dict[str, Any]]:
    """Every factor contrast the table allows, with intervals.

    Keys: ``"scope"`` (narrow minus whole, over every cell) and, for each factor with both levels present,
    ``"<factor>/<mask>"`` for ``whole``, the narrow mask and ``both`` (the masks averaged, the paper's
    column). ``records`` fixes the order of ``weights``' columns.
    """
    cell_list = cells(table)
    lv = levels(table)
    out = {"scope": summarize_values([scope_value(table, r, narrow, cell_list) for r in records], weights, scale)}
    for factor in ("wording", "information", "note"):
        if not set(FACTORS[factor]) <= set(lv[factor]):
            continue
        for label, masks in (("whole", ("whole",)), (narrow, (narrow,)), ("both", ("whole", narrow))):
            values = [factor_value(table, r, factor, masks, cell_list) for r in records]
            out[f"{factor}/{label}"] = summarize_values(values, weights, scale)
    return out
