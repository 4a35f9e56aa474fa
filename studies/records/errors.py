"""Value categories and generation errors of record-history answers (paper app:v7_errors, app:v8_units).

Every row gets three columns from its generated output (:func:`value_columns`):

* ``value_category``: :func:`kvprobe.studies.datasets.values.classify_value` of the answer string the study's
  exact rule reads (:func:`kvprobe.studies.common.answers.parse_answer_field`, the paper's rules 1-2: one JSON
  object, extra fields permitted, no fence; None when the response is not such an object with an ``answer``,
  which is ``invalid_format``);
* ``missing_unit``: a quantity answer given as a bare number (the paper's flag, counted on wrong answers);
* ``unquoted_unknown``: the output holds ``{"answer": UNKNOWN}`` with the value unquoted (invalid JSON;
  seed L5515-5517 counts these per policy).

Reference and old value: ``reference`` is the query's reference; ``old`` is record A's value for every
query. For current queries that is the superseded value (replacements, role swaps, rejections) or the
reference itself when nothing was superseded (confirmations, other-entity updates: an answer with A's
value is then correct). For historical queries A's value *is* the reference, so ``old_value`` cannot
occur there (B's value counts as ``other_value``). For unrelated queries ``old_value`` means record A's
value leaked into another entity's answer.

Exact grade (:data:`GRADE_COLUMNS`, from :func:`kvprobe.studies.common.answers.grade` with
``rule="answer-field"``): ``correct`` is answer-field equality (paper L5453-5454), ``parse`` that parse's
reason, and ``correct_fenced`` the strict fenced rule beside it (one string field, one outer fence allowed).

Generation does not depend on grading, so every stored row is regraded from its stored output
(:func:`regrade_row`: the exact grade and value columns recomputed, whatever the row holds) and equals
the columns a new run writes; ``python -m kvprobe.studies.records.errors RUN_DIR...`` rewrites a run's
results in place (:func:`kvprobe.studies.common.runner.regrade_results`).

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

from kvprobe.studies.common.answers import grade, parse_answer_field
from kvprobe.studies.datasets.values import VALUE_CATEGORIES, classify_value

#: The value columns every row carries.
VALUE_COLUMNS = ("value_category", "missing_unit", "unquoted_unknown")
#: The exact-grade columns that depend on the answer parser (recomputed by :func:`regrade_row`).
GRADE_COLUMNS = ("correct", "parse", "correct_fenced")
#: The exact rule the study grades by (:func:`kvprobe.studies.common.answers.grade`).
RULE = "answer-field"
#: Categories whose value matches the reference, unit or not (the paper's "matching values", seed L5539-5541).
MATCHING = ("correct", "magnitude_only")
#: The paper's split of reversals (seed L5511-5514): omitted unit, UNKNOWN, everything else.
REVERSAL_KINDS = ("missing_unit", "unknown", "other")
#: An unquoted UNKNOWN as the answer field's value (any case; ``"UNKNOWN"`` in quotes does not match).
_UNQUOTED_UNKNOWN = re.compile(r'"answer"\s*:\s*unknown\b', re.IGNORECASE)

__all__ = ["GRADE_COLUMNS", "MATCHING", "REVERSAL_KINDS", "RULE", "VALUE_CATEGORIES", "VALUE_COLUMNS", "exact_answer",
           "exact_columns", "regrade_row", "reversal_kind", "unquoted_unknown", "value_columns"]


def exact_answer(output: str) -> str | None:
    """The answer string the study's exact rule reads: the answer-field parser's ``answer`` (extra fields
    permitted, no fence), or None when the output is not such an object.

    >>> exact_answer('{"answer": "Miami", "why": "B"}'), exact_answer("Miami"), exact_answer('```{"answer": "M"}```')
    ('Miami', None, None)
    """
    parsed = parse_answer_field(output)
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


def exact_columns(output: str, reference: str) -> dict[str, Any]:
    """The :data:`GRADE_COLUMNS` of one answer (:func:`kvprobe.studies.common.answers.grade`, :data:`RULE`)."""
    g = grade(output, reference, [], rule=RULE)
    return {c: g[c] for c in GRADE_COLUMNS}


def regrade_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """``row`` with its exact grade and value columns recomputed from its stored output (the other columns,
    ``contains`` and ``lenient`` included, do not depend on the parser and are kept).

    >>> regrade_row({"output": '{"answer": "UNKNOWN"}', "reference": "Miami", "old_value": "Tunis"})["value_category"]
    'unknown'
    """
    return {**row, **exact_columns(row["output"], row["reference"]),
            **value_columns(row["output"], row["reference"], row["old_value"])}


def reversal_kind(category: str) -> str:
    """Which of :data:`REVERSAL_KINDS` a reversed answer of value ``category`` is."""
    if category not in VALUE_CATEGORIES:
        raise ValueError(f"{category!r} is not one of {', '.join(VALUE_CATEGORIES)}")
    return {"magnitude_only": "missing_unit", "unknown": "unknown"}.get(category, "other")


if __name__ == "__main__":  # pragma: no cover - the one-off regrade of committed runs
    import sys
    from kvprobe.studies.common.runner import regrade_results
    for d in sys.argv[1:]:
        print(d, regrade_results(d, regrade_row), "rows changed")
