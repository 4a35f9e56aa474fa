"""Value categories of record-history answers: correct, unit omitted, old, other, UNKNOWN, invalid.

The paper compares "returned and reference values" in every record-history output
(appendix "Correct Values and Complete Units", seed L5513-5537; spec partD sections 4-5):

* six categories: correct value with its unit, correct magnitude without its unit, old
  value, other value, explicit UNKNOWN, invalid format;
* a separate *missing-unit* flag on incorrect values;
* non-quantity answers need normalized string equality;
* quantity targets are hours; "explicit hour abbreviations, minutes, or days are compared
  after dimensional conversion; incompatible or unrecognized units are not discarded" (ours:
  such an answer is an *other value*, never invalid); "a bare number can match the target's
  numerical magnitude" but "remains unit-incomplete".

The category is a function of the answer string a study's parser read (None when the
response is not valid JSON under that parser), so every study keeps its own parser and
shares these categories.

Example::

    >>> classify_value("6 days", "144 hours", "96 hours").category
    'correct'
    >>> grade = classify_value("96", "144 hours", "96 hours")
    >>> grade.category, grade.missing_unit
    ('old_value', True)
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from fractions import Fraction

from kvprobe.studies.common.answers import UNKNOWN, normalize
from .quantity_task.grading import unit_canonical

#: The paper's six categories, in its order (seed L5527-5530).
VALUE_CATEGORIES = ("correct", "magnitude_only", "old_value", "other_value", "unknown", "invalid_format")
#: Units compared after dimensional conversion, in hours (seed L5521-5522: "Explicit hour abbreviations,
#: minutes, or days"). Unit forms are those of ``quantity_task.grading.UNIT_ALIASES`` plus day/days.
HOURS_PER_UNIT = {"hours": Fraction(1), "minutes": Fraction(1, 60), "days": Fraction(24)}
_DAY_FORMS = ("days", "day", "d")


@dataclass(frozen=True)
class ValueGrade:
    """The value category of one answer.

    Attributes:
        category: one of :data:`VALUE_CATEGORIES`.
        missing_unit: a quantity answer that gives a number without any unit (on any value: the paper's flag
            counts it on incorrect values; ``magnitude_only`` is the correct-magnitude case).
    """

    category: str
    missing_unit: bool


def quantity_hours(text: str) -> tuple[Fraction, bool] | None:
    """(magnitude in hours, whether a unit was given) of ``"<number> [unit]"``, or None.

    None when the text does not start with a number or its unit is neither empty nor an hour, minute or
    day form. A bare number is returned as given (its unit unknown).

    >>> quantity_hours("90 min"), quantity_hours("3"), quantity_hours("3 meters")
    ((Fraction(3, 2), True), (Fraction(3, 1), False), None)
    """
    parts = text.strip().rstrip(".").split(None, 1)
    if not parts:
        return None
    try:
        number = Fraction(Decimal(parts[0].replace(",", "")))
    except InvalidOperation:
        return None
    if len(parts) == 1:
        return number, False
    form = parts[1].strip()
    unit = "days" if normalize(form) in _DAY_FORMS else unit_canonical(form, ("hours", "minutes"))
    if unit is None:
        return None
    return number * HOURS_PER_UNIT[unit], True


def is_quantity(reference: str) -> bool:
    """Whether ``reference`` is a quantity with a convertible unit (``"96 hours"``)."""
    parsed = quantity_hours(reference)
    return parsed is not None and parsed[1]


def classify_value(answer: str | None, reference: str, old: str) -> ValueGrade:
    """The category of an answer string (None: the response failed the study's parser).

    ``reference`` is the requested value, ``old`` the superseded one (equal to ``reference`` when nothing
    was superseded: a matching answer is then correct). Quantity references compare in hours.
    """
    if answer is None:
        return ValueGrade("invalid_format", False)
    if normalize(answer) == UNKNOWN:
        return ValueGrade("unknown", False)
    if not is_quantity(reference):
        if normalize(answer) == normalize(reference):
            return ValueGrade("correct", False)
        return ValueGrade("old_value" if normalize(answer) == normalize(old) else "other_value", False)
    given = quantity_hours(answer)
    if given is None:
        return ValueGrade("other_value", False)
    value, has_unit = given
    ref = quantity_hours(reference)
    old_q = quantity_hours(old)
    assert ref is not None
    if has_unit:
        if value == ref[0]:
            return ValueGrade("correct", False)
        return ValueGrade("old_value" if old_q is not None and value == old_q[0] else "other_value", False)
    # A bare number matches magnitudes as stated (all references are in hours, seed L5523-5525).
    if value == ref[0]:
        return ValueGrade("magnitude_only", True)
    return ValueGrade("old_value" if old_q is not None and value == old_q[0] else "other_value", True)
