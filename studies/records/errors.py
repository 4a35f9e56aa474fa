"""Value categories and generation errors of record-history answers (paper app:v7_errors, app:v8_units).

Every row gets three columns from its generated output (:func:`value_columns`):

* ``value_category``: :func:`kvprobe.studies.datasets.values.classify_value` of the answer string the study's
  exact rule reads (:func:`kvprobe.studies.common.answers.parse_strict`, one outer fence allowed; None when the
  response is not one ``{"answer": "..."}`` object, which is ``invalid_format``);
* ``missing_unit``: a quantity answer given as a bare number (the paper's flag, counted on wrong answers);
* ``unquoted_unknown``: the output holds ``{"answer": UNKNOWN}`` with the value unquoted (invalid JSON;
  seed L5515-5517 counts these per policy).

Reference and old value: ``reference`` is the query's reference; ``old`` is record A's value for every
query. For current queries that is the superseded value (replacements, role swaps, rejections) or the
reference itself when nothing was superseded (confirmations, other-entity updates: an answer with A's
value is then correct). For historical queries A's value *is* the reference, so ``old_value`` cannot
occur there (B's value counts as ``other_value``). For unrelated queries ``old_value`` means record A's
value leaked into another entity's answer.

Generation does not depend on grading, so rows written before these columns existed are regraded from
their stored output (:func:`regrade_row`), and equal the columns a new run writes.

Reversal taxonomy (seed L5511-5514): a reversal (the reference arm exact-correct, the arm not) is a
``missing_unit`` when the arm's answer is the right magnitude without its unit (``magnitude_only``),
``unknown`` for an explicit UNKNOWN, ``other`` otherwise (old or other values, invalid format, a right
value in another accepted unit).

Example::

    >>> value_columns('{"answer": "107"}', "107 hours", "98 hours")
    {'value_category': 'magnitude_only', 'missing_unit': True, 'unquoted_unknown': False}
    >>> reversal_kind("magnitude_only"), reversal_kind("old_value")
    ('missing_unit', 'other')
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from kvprobe.studies.common.answers import parse_strict
from kvprobe.studies.datasets.values import VALUE_CATEGORIES, classify_value

#: The value columns every row carries.
VALUE_COLUMNS = ("value_category", "missing_unit", "unquoted_unknown")
#: Categories whose value matches the reference, unit or not (the paper's "matching values", seed L5539-5541).
MATCHING = ("correct", "magnitude_only")
#: The paper's split of reversals (seed L5511-5514): omitted unit, UNKNOWN, everything else.
REVERSAL_KINDS = ("missing_unit", "unknown", "other")
#: An unquoted UNKNOWN as the answer field's value (any case; ``"UNKNOWN"`` in quotes does not match).
_UNQUOTED_UNKNOWN = re.compile(r'"answer"\s*:\s*unknown\b', re.IGNORECASE)

__all__ = ["MATCHING", "REVERSAL_KINDS", "VALUE_CATEGORIES", "VALUE_COLUMNS", "exact_answer", "regrade_row",
           "reversal_kind", "unquoted_unknown", "value_columns"]


def exact_answer(output: str) -> str | None:
    """The answer string the study's exact rule reads: the strict single ``answer`` field (one outer fence
    allowed, as :func:`kvprobe.studies.common.answers.grade`), or None when the output is not such an object.

    >>> exact_answer('{"answer": "Miami"}'), exact_answer("Miami")
    ('Miami', None)
    """
    parsed = parse_strict(output, allow_fence=True)
    return parsed.answer if parsed.ok else None


def unquoted_unknown(output: str) -> bool:
    """Whether ``output`` gives UNKNOWN unquoted as the answer value (``{"answer": UNKNOWN}``, invalid JSON).

    >>> unquoted_unknown('{"answer": UNKNOWN}'), unquoted_unknown('{"answer": "UNKNOWN"}')
    (True, False)
    """
    return bool(_UNQUOTED_UNKNOWN.search(output))


def value_columns(output: str, reference: str, old: str) -> dict[str, Any]:
    """The value columns of one answer (``old``: record A's value; see the module docstring)."""
    grade = classify_value(exact_answer(output), reference, old)
    return {"value_category": grade.category, "missing_unit": grade.missing_unit,
            "unquoted_unknown": unquoted_unknown(output)}


def regrade_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with its value columns, computed from its stored output when the row predates them.

    >>> regrade_row({"output": '{"answer": "UNKNOWN"}', "reference": "Miami", "old_value": "Tunis"})["value_category"]
    'unknown'
    """
    if all(c in row for c in VALUE_COLUMNS):
        return dict(row)
    return {**row, **value_columns(row["output"], row["reference"], row["old_value"])}


def reversal_kind(category: str) -> str:
    """Which of :data:`REVERSAL_KINDS` a reversed answer of value ``category`` is."""
    if category not in VALUE_CATEGORIES:
        raise ValueError(f"{category!r} is not one of {', '.join(VALUE_CATEGORIES)}")
    return {"magnitude_only": "missing_unit", "unknown": "unknown"}.get(category, "other")
