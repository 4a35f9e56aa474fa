"""The cells of the cross-model panel (``panel.py``) and its figures (``figure.py``): each panel table's rows are
keyed by (information, query, condition), listed in the report's order.

Example::

    entries = [{"rates": [{"information": "unit_from_a", "query": "current", "condition": "full"},
                          {"information": "unit_stated", "query": "current", "condition": "full"}]}]
    cell_keys(entries, "rates")   # [("unit_stated", "current", "full"), ("unit_from_a", "current", "full")]
"""

from __future__ import annotations

from typing import Any

from kvprobe.studies.common.report import ordered
from .summary import CONDITION_ORDER, QUERY_ORDER

#: Information conditions in the paper's row order (upper rows: B states the unit).
INFO_ORDER = ("unit_stated", "unit_from_a")
INFO_NAMES = {"unit_stated": "B states unit", "unit_from_a": "B refers to A"}


def cell_keys(entries: list[dict[str, Any]], table: str) -> list[tuple[str, str, str]]:
    """Every (information, query, condition) of ``table`` in any model, in report order."""
    found = {(r["information"], r["query"], r["condition"]) for e in entries for r in e[table]}
    infos = ordered({k[0] for k in found}, INFO_ORDER)
    queries = ordered({k[1] for k in found}, QUERY_ORDER)
    conditions = ordered({k[2] for k in found}, CONDITION_ORDER)
    return [(i, q, c) for i in infos for q in queries for c in conditions if (i, q, c) in found]


def by_cell(entry: dict[str, Any], table: str) -> dict[tuple[str, str, str], dict[str, Any]]:
    """One model's rows of ``table`` keyed by (information, query, condition)."""
    return {(r["information"], r["query"], r["condition"]): r for r in entry[table]}
