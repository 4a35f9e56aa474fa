"""The factorial's masks and their equal-token controls (paper seed L4783-4793, L4859-4860).

* whole: every token overlapping record A (:meth:`RecordHistory.a_span`);
* number (quantity matrix): each occurrence of A's old number that is followed by the unit, excluding
  digits inside an entity identifier (``TEST-107``) and excluding the unit tokens. The span of an
  occurrence is taken strictly (``strict=True``): a token that ran from the digits into the unit would
  raise :class:`kvprobe.SpanError` rather than hide part of the unit;
* endpoint (endpoint matrix): every token overlapping the complete old endpoint string in A;
* each control: as many tokens from the start of the neutral note (:func:`kvprobe.matched_control`),
  disjoint from A and B by construction (the note lies between them).

Example::

    >>> number_ranges("the lead time of Project TEST-107 is 107 hours.", "107 hours")
    [(37, 40)]
"""

from __future__ import annotations

import re

import kvprobe
from kvprobe.studies.common.detectors.strings import TIME_1

from .data import FactorialCase, NARROW


def number_ranges(a_text: str, old_value: str) -> list[tuple[int, int]]:
    """Character ranges in ``a_text`` of the old number where the unit follows it.

    ``old_value`` is ``"<number> <unit>"``. A digit run glued to a preceding letter, digit, period,
    hyphen or underscore (an entity identifier) is not an occurrence, nor is the number followed by
    anything other than whitespace and the unit word.
    """
    number, unit = old_value.split(None, 1)
    pattern = re.compile(rf"(?<![\w.\-]){re.escape(number)}(?=\s+{re.escape(unit)}\b)")
    return [(m.start(), m.end()) for m in pattern.finditer(a_text)]


def endpoint_ranges(a_text: str, old_value: str) -> list[tuple[int, int]]:
    """Character ranges in ``a_text`` of the complete old endpoint string (every occurrence)."""
    return [(m.start(), m.end()) for m in re.finditer(re.escape(old_value), a_text)]


def _a_offset() -> int:
    """Where record A starts inside the Time-1 segment (after ``"Time 1: "``)."""
    return len(TIME_1) + 1


def narrow_spans(history: kvprobe.History, case: FactorialCase) -> list[kvprobe.TokenSpan]:
    """Token spans of the narrow mask of ``case`` (number-only or endpoint), one per occurrence in A."""
    a_text, start = case.record.case.a_text, _a_offset()
    if case.matrix == "quantity":
        ranges, strict = number_ranges(a_text, case.old_value), True
    else:
        ranges, strict = endpoint_ranges(a_text, case.old_value), False
    if not ranges:
        raise kvprobe.SpanError(f"{case.case_id}: no {NARROW[case.matrix]} occurrence of "
                                f"{case.old_value!r} in A ({a_text!r})")
    return [history.span("time1", chars=(start + a, start + b), strict=strict) for a, b in ranges]


def study_conditions(history: kvprobe.History, case: FactorialCase) -> dict[str, kvprobe.Condition]:
    """The five access conditions of a case: full, the whole-A mask, the narrow mask, and their controls."""
    narrow = NARROW[case.matrix]
    whole = kvprobe.Mask(case.record.a_span(history), name="whole")
    number = kvprobe.Mask(narrow_spans(history, case), name=narrow)
    return {"full": kvprobe.Full(), "whole-control": kvprobe.matched_control(history, whole, "note"),
            "whole": whole, f"{narrow}-control": kvprobe.matched_control(history, number, "note"),
            narrow: number}


def span_text(history: kvprobe.History, span: kvprobe.TokenSpan) -> str:
    """The history text the tokens of ``span`` cover (what a mask hides)."""
    return history.text[history.offsets[span.start][0]:history.offsets[span.end - 1][1]]
