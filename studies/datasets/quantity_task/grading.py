"""Answer classification for the quantity task (paper section "Answer classification").

Source: the study spec (partC) section 2 (paper L3419-3429,
L4023-4052, L4420-4442, L4817-4825). The model is asked for exactly one JSON
string field ``{"answer": "<value>"}`` (system string in
:mod:`studies.datasets.quantity_task.strings`, spec section 1.2). References are complete
quantities ``"{num} {plural unit}"`` (e.g. ``"233 hours"``) or a color label.

Rules implemented here
----------------------
The paper reports three scoring rules on the same texts (L4029-4037, L4817-4821);
:data:`RULES` names them, :func:`grade_quantity` and :func:`grade_label` take one.

* **EOS precondition** (every rule). An output whose ``stop_reason`` is ``"cap"``
  is never complete, even when its prefix holds a correct JSON answer
  (L4035-4038). It gets the category ``"capped"`` plus the capped-output
  diagnostics.
* **Answer-field parser** (rules 1-2; :func:`studies.common.answers.parse_answer_field`).
  After stripping surrounding whitespace (our choice: whitespace is not "text"),
  the whole response must be one JSON object with an ``answer`` field; the paper's
  parser "permits additional fields" (L4819-4821), so they are accepted. A numeric
  ``answer`` is read as its number text (valid under this parser, L4822-4825; a
  bare number is ``missing_unit``). Rejected: a code fence (the paper counts
  correct fenced responses as format failures under these rules, L4080-4081),
  invalid JSON (incl. unquoted ``{"answer": UNKNOWN}``), several objects, any text
  outside, duplicate keys (our choice; the paper names them only for rule 3).
* **Strict single-field parse** (rule 3; :func:`studies.common.answers.parse_strict`). The
  entire response must hold exactly one string-valued ``answer`` field: extra
  fields, a non-string value (``{"answer": 628}``), duplicate keys, several objects
  or fences and any text outside are rejected; exactly one outer Markdown code
  fence (```` ``` ```` or ```` ```json ````) around the object is allowed
  (L4031-4035). ``strict_single_field`` records single-field validity without any
  fence allowance (L4820-4825), whatever the rule.
* **Rule 1, exact** (``"exact"``, pre-specified primary): answer-field parser; the
  answer equals the reference after :func:`studies.common.answers.normalize` (casefold,
  collapse whitespace). ``261 liter``, ``628 min`` and ``181 V`` are not complete
  under it.
* **Rule 2, equivalent units** (``"equivalent"``, post hoc): answer-field parser;
  the answer is ``<number> <unit form>`` with the number numerically equal to the
  reference number (compared as :class:`decimal.Decimal`, thousands commas removed)
  and the unit form in :data:`UNIT_ALIASES` of the reference unit. No conversion
  ever: ``kg`` for grams is a wrong unit. One trailing period (``628 min.``) is
  tolerated.
* **Rule 3, fenced complete** (``"fenced"``): strict single-field parse with one
  outer fence allowed, and the equivalent-unit comparison (the same list of accepted
  unit forms, L4039-4040). This is the paper's "complete correct response" (L4916-4917):
  the quantity study's ``complete`` column and its categories.
* **Lenient criterion** (:func:`lenient_quantity`, ours): the first complete quantity
  (number + unit form of one of the six task units) anywhere in the output
  after stripping JSON syntax; digits inside IDs such as ``TEST-011`` or ``T2``
  never count as a number. ``lenient_complete`` requires that quantity to match
  the reference under the *equivalent* rule **and** EOS (our decision: capped
  outputs are not lenient-complete either, keeping the EOS precondition).

Category precedence (the paper does not give one, spec says UNCLEAR; ours)::

    capped > format_failure > unknown > complete > missing_unit > generic_unit
           > wrong_unit > old_value > auxiliary_value > other_value

* ``missing_unit``: the answer is a bare number (any magnitude).
* ``generic_unit``: number followed by ``unit``/``units``.
* ``wrong_unit``: number followed by any other unit text that is not an
  accepted form of the reference unit under the active rule (``628 days`` for
  hours, ``628 kg`` for grams; under the exact rule also ``628 min``).
* ``old_value``/``auxiliary_value``/``other_value``: accepted unit form but
  wrong magnitude, split by matching the old number, then the auxiliary
  number; an answer string that does not start with a number is also
  ``other_value``. Magnitudes compare as number strings under the exact rule
  (``628.0`` is not ``628``) and numerically under the equivalent rule.

Labels (unrelated questions) use exact normalized label match under every rule,
with the rule's parser and the EOS precondition; categories capped >
format_failure > unknown > complete > other_value.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Callable, Iterable

from kvprobe.studies.datasets.quantity_task import strings
from kvprobe.studies.common.answers import (FENCE, UNKNOWN, ParseResult, find_answers, first_answer, normalize,
                                    parse_answer_field, parse_strict)

__all__ = [
    "RULES",
    "UNIT_ALIASES",
    "CASE_SENSITIVE_FORMS",
    "GENERIC_UNITS",
    "CATEGORIES",
    "LABEL_CATEGORIES",
    "Grade",
    "unit_canonical",
    "lenient_quantity",
    "classify_answer",
    "grade_quantity",
    "grade_label",
]

# --------------------------------------------------------------------------
# Unit aliases
# --------------------------------------------------------------------------

#: Accepted equivalent forms per canonical plural unit (equivalent rule).
#: OUR CHOICE: the paper says "a fixed list of standard symbols plus singular
#: and plural names, following NIST SP 811" but does not publish it (UNCLEAR).
#: Symbols are the NIST SP 811 ones (min, h, m, L/l, g, V) plus the common
#: non-SI abbreviations hr/hrs/mins; names include British spellings.
UNIT_ALIASES: dict[str, tuple[str, ...]] = {
    "minutes": ("minutes", "minute", "min", "mins"),
    "hours": ("hours", "hour", "h", "hr", "hrs"),
    "meters": ("meters", "meter", "metres", "metre", "m"),
    "liters": ("liters", "liter", "litres", "litre", "L", "l"),
    "grams": ("grams", "gram", "g"),
    "volts": ("volts", "volt", "V"),
}

#: Single-letter symbols are matched case-sensitively (``H`` is henry, ``G``
#: and ``M`` are prefixes, ``v`` is not a NIST symbol). Every other form
#: (names and multi-letter abbreviations) matches case-insensitively.
CASE_SENSITIVE_FORMS: frozenset[str] = frozenset({"h", "m", "L", "l", "g", "V"})

#: Generic unit words: a number followed by one of these is ``generic_unit``.
GENERIC_UNITS: frozenset[str] = frozenset({"unit", "units"})

CATEGORIES: tuple[str, ...] = (
    "capped",
    "format_failure",
    "unknown",
    "complete",
    "missing_unit",
    "generic_unit",
    "wrong_unit",
    "old_value",
    "auxiliary_value",
    "other_value",
)
LABEL_CATEGORIES: tuple[str, ...] = ("capped", "format_failure", "unknown", "complete", "other_value")

#: The paper's three scoring rules (module docstring): rule 1, rule 2, rule 3.
RULES: tuple[str, ...] = ("exact", "equivalent", "fenced")
#: How each rule compares units (:func:`classify_answer`).
_UNIT_RULE = {"exact": "exact", "equivalent": "equivalent", "fenced": "equivalent"}

STOP_EOS = "eos"
STOP_CAP = "cap"

_NUMBER = r"[-+]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_LEADING_NUMBER_RE = re.compile(rf"\A\s*(?P<num>{_NUMBER})(?P<rest>.*)\Z", re.DOTALL)


def phrase_pattern(phrases: Iterable[str], case_sensitive: bool = strings.PHRASES_CASE_SENSITIVE) -> re.Pattern:
    """A pattern finding any of ``phrases`` as whole words (no letter, digit or underscore on either side).

    Example: ``phrase_pattern(("re-read",)).search("Let me re-read.")`` matches; ``"reread"`` does not.
    """
    alternatives = "|".join(re.escape(p) for p in phrases)
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", 0 if case_sensitive else re.IGNORECASE)


#: The capped-output phrases of the paper (``strings.RECHECK_PHRASES``, ``strings.MISSING_REFERENT_PHRASES``).
_RECHECK_RE = phrase_pattern(strings.RECHECK_PHRASES)
_MISSING_REFERENT_RE = phrase_pattern(strings.MISSING_REFERENT_PHRASES)


def _number(s: str) -> Decimal | None:
    """Numeric value of a number string (thousands commas removed), or None."""
    try:
        return Decimal(s.replace(",", ""))
    except InvalidOperation:
        return None


def unit_canonical(form: str, units: Iterable[str] | None = None) -> str | None:
    """Canonical plural unit for a unit form (see :data:`UNIT_ALIASES`), or None.

    Single-letter symbols match case-sensitively, everything else
    case-insensitively. ``units`` restricts the candidate canonical units
    (default: all six). A canonical unit outside the table accepts only its own
    name, case-insensitively.
    """
    form = form.strip()
    for canon in units if units is not None else UNIT_ALIASES:
        for alias in UNIT_ALIASES.get(canon, (canon,)):
            if alias in CASE_SENSITIVE_FORMS:
                if form == alias:
                    return canon
            elif normalize(form) == normalize(alias):
                return canon
    return None


def _split_quantity(q: str) -> tuple[str | None, str]:
    """Split ``"628 minutes"`` into (``"628"``, ``"minutes"``); (None, q) if no leading number."""
    m = _LEADING_NUMBER_RE.match(q)
    if not m:
        return None, q.strip()
    return m.group("num"), " ".join(m.group("rest").split())


# --------------------------------------------------------------------------
# Lenient quantity
# --------------------------------------------------------------------------


def _unit_pattern(units: Iterable[str]) -> str:
    forms: list[str] = []
    for canon in units:
        forms.extend(UNIT_ALIASES.get(canon, (canon,)))
    forms.sort(key=len, reverse=True)  # longest first: "minutes" before "min" before "m"
    alts = [re.escape(f) if f in CASE_SENSITIVE_FORMS else f"(?i:{re.escape(f)})" for f in forms]
    return "|".join(alts)


def _strip_json_syntax(text: str) -> str:
    """Drop code fences, the ``"answer":`` key and JSON punctuation from ``text``."""
    s = text.replace(FENCE, " ")
    s = re.sub(r'"answer"\s*:', " ", s)
    return re.sub(r'[{}\[\]"`]', " ", s)


def lenient_quantity(text: str, units: Iterable[str] | None = None) -> tuple[str, str] | None:
    """First complete quantity stated anywhere in ``text`` (lenient criterion).

    A quantity is a number followed (after optional whitespace or one hyphen)
    by a unit form of one of ``units`` (canonical names; default all six), not
    followed by a letter. A number glued to a preceding letter, digit, period,
    hyphen or underscore (``TEST-011``, ``T2``) is not a number. JSON syntax is
    stripped first. Returns ``(number_string, canonical_unit)`` or None.
    """
    units = tuple(units) if units is not None else tuple(UNIT_ALIASES)
    pattern = re.compile(rf"(?<![\w.\-])(?P<num>{_NUMBER})(?![\d])(?:\s*|-)(?P<unit>{_unit_pattern(units)})(?![A-Za-z])")
    m = pattern.search(_strip_json_syntax(text))
    if m is None:
        return None
    canon = unit_canonical(m.group("unit"), units)
    assert canon is not None
    return m.group("num"), canon


# --------------------------------------------------------------------------
# Grading
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Grade:
    """Classification of one output.

    Attributes:
        category: one of :data:`CATEGORIES` (labels: :data:`LABEL_CATEGORIES`).
        complete: the rule's parse succeeded, category complete, EOS.
        lenient_complete: EOS and the first lenient quantity (labels: first
            answer field, else the label as a whole word) matches the
            reference under the equivalent rule.
        answer: the answer string the rule's parser read, or None.
        strict_single_field: valid single string field without fence allowance.
        fenced: the response had one outer code fence.
        parse_reason: :attr:`studies.common.answers.ParseResult.reason` of the rule's parse.
        rule: one of :data:`RULES`.
        magnitude: for quantity answers with a leading number: ``"reference"``,
            ``"old"``, ``"auxiliary"`` or ``"other"``; else None.
        lenient_quantity: result of :func:`lenient_quantity` (quantities only).
        first_answer: :func:`first_answer` of the text.
        first_answer_end: character offset where the first answer object ends.
        first_answer_correct: the first answer is right (number + accepted
            unit under the equivalent rule; labels: normalized match).
        recheck_phrase: one of ``strings.RECHECK_PHRASES`` (``Wait``, ``re-read``,
            ``misread``) occurs (:func:`phrase_pattern`: whole words, case-insensitive).
        missing_referent_phrase: one of ``strings.MISSING_REFERENT_PHRASES``
            (``not specified``, ``does not mention``, ``missing``) occurs.
        second_different_answer: a later answer object differs (normalized)
            from the first.
    """

    category: str
    complete: bool
    lenient_complete: bool
    answer: str | None
    strict_single_field: bool
    fenced: bool
    parse_reason: str
    rule: str
    magnitude: str | None
    lenient_quantity: tuple[str, str] | None
    first_answer: str | None
    first_answer_end: int | None
    first_answer_correct: bool
    recheck_phrase: bool
    missing_referent_phrase: bool
    second_different_answer: bool


def _check_stop(stop_reason: str) -> bool:
    """True if the output ended with EOS; ValueError for unknown stop reasons."""
    if stop_reason not in (STOP_EOS, STOP_CAP):
        raise ValueError(f"stop_reason must be {STOP_EOS!r} or {STOP_CAP!r}, got {stop_reason!r}")
    return stop_reason == STOP_EOS


def classify_answer(
    answer: str,
    reference: str,
    old: str | None = None,
    auxiliary: str | None = None,
    rule: str = "equivalent",
) -> tuple[str, str | None]:
    """Category of a parsed answer string against a reference quantity.

    Returns ``(category, magnitude)`` where category is one of ``unknown``,
    ``complete``, ``missing_unit``, ``generic_unit``, ``wrong_unit``,
    ``old_value``, ``auxiliary_value``, ``other_value`` (precedence in that
    order) and magnitude is described on :class:`Grade`.
    """
    if rule not in ("exact", "equivalent"):
        raise ValueError(f"rule must be 'exact' or 'equivalent', got {rule!r}")
    if normalize(answer) == UNKNOWN:
        return "unknown", None
    ref_num, ref_unit = _split_quantity(reference)
    if ref_num is None or not ref_unit:
        raise ValueError(f"reference must be '<number> <unit>', got {reference!r}")
    ref_canon = unit_canonical(ref_unit) or ref_unit

    num, unit = _split_quantity(answer)
    if num is None:
        return ("complete", "reference") if normalize(answer) == normalize(reference) else ("other_value", None)

    def same(a: str, b: str | None) -> bool:
        if b is None:
            return False
        if rule == "exact":
            return a == b
        va, vb = _number(a), _number(b)
        return va is not None and va == vb

    def magnitude() -> str:
        if same(num, ref_num):
            return "reference"
        if old is not None and same(num, _split_quantity(old)[0]):
            return "old"
        if auxiliary is not None and same(num, _split_quantity(auxiliary)[0]):
            return "auxiliary"
        return "other"

    mag = magnitude()
    if normalize(answer) == normalize(reference):
        return "complete", "reference"
    if not unit:
        return "missing_unit", mag
    if normalize(unit) in GENERIC_UNITS:
        return "generic_unit", mag
    if rule == "exact":
        unit_ok = normalize(unit) == normalize(ref_unit)
    else:
        unit_ok = unit_canonical(unit, (ref_canon,)) is not None or (
            unit.endswith(".") and unit_canonical(unit[:-1], (ref_canon,)) is not None
        )
    if not unit_ok:
        return "wrong_unit", mag
    if mag == "reference":
        return "complete", mag
    return f"{mag}_value", mag


def _diagnostics(text: str, correct: Callable[[str], bool]) -> dict[str, Any]:
    """Capped-output diagnostics (paper L4425-4457), computed for every output."""
    answers = find_answers(text)
    first = answers[0] if answers else None
    return {
        "first_answer": first[0] if first else None,
        "first_answer_end": first[2] if first else None,
        "first_answer_correct": bool(first and correct(first[0])),
        "recheck_phrase": bool(_RECHECK_RE.search(text)),
        "missing_referent_phrase": bool(_MISSING_REFERENT_RE.search(text)),
        "second_different_answer": bool(first and any(normalize(a) != normalize(first[0]) for a, _, _ in answers[1:])),
    }


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def _parse(text: str, rule: str) -> ParseResult:
    """The rule's parser: the answer-field parser (rules 1-2) or the strict fenced parse (rule 3)."""
    return parse_strict(text, allow_fence=True) if rule == "fenced" else parse_answer_field(text)


def grade_quantity(
    text: str,
    stop_reason: str,
    reference: str,
    old: str | None = None,
    auxiliary: str | None = None,
    rule: str = "fenced",
) -> Grade:
    """Grade a quantity answer (current or historical question) under one of :data:`RULES`.

    ``reference``/``old``/``auxiliary`` are quantities like ``"628 minutes"``;
    ``stop_reason`` is ``"eos"`` or ``"cap"``; ``rule``: ``"exact"`` (rule 1),
    ``"equivalent"`` (rule 2) or ``"fenced"`` (rule 3, the default: the paper's
    complete answer). Precedence: capped > format_failure > unknown > complete
    > missing_unit > generic_unit > wrong_unit > old_value > auxiliary_value >
    other_value (module docstring).
    """
    _check_rule(rule)
    eos = _check_stop(stop_reason)
    parsed = _parse(text, rule)
    if parsed.ok:
        assert parsed.answer is not None
        category, mag = classify_answer(parsed.answer, reference, old, auxiliary, _UNIT_RULE[rule])
    else:
        category, mag = "format_failure", None
    if not eos:
        category = "capped"

    ref_num, ref_unit = _split_quantity(reference)
    ref_canon = unit_canonical(ref_unit) or ref_unit
    units = tuple(dict.fromkeys((*UNIT_ALIASES, ref_canon)))
    lq = lenient_quantity(text, units)
    lenient_ok = eos and lq is not None and lq[1] == ref_canon and _number(lq[0]) == _number(ref_num or "")

    def correct(a: str) -> bool:
        return classify_answer(a, reference, old, auxiliary, "equivalent")[0] == "complete"

    return _grade(text, parsed, category, bool(lenient_ok), rule, correct, magnitude=mag, lenient=lq)


def _grade(text: str, parsed: ParseResult, category: str, lenient_complete: bool, rule: str,
           correct: Callable[[str], bool], magnitude: Any = None, lenient: Any = None) -> Grade:
    """The :class:`Grade` of a graded output: its category, the parse it came from, the diagnostics."""
    return Grade(
        category=category,
        complete=category == "complete",
        lenient_complete=lenient_complete,
        answer=parsed.answer,
        strict_single_field=parsed.strict_single_field,
        fenced=parsed.fenced,
        parse_reason=parsed.reason,
        rule=rule,
        magnitude=magnitude,
        lenient_quantity=lenient,
        **_diagnostics(text, correct),
    )


def grade_label(text: str, stop_reason: str, reference_label: str, rule: str = "fenced") -> Grade:
    """Grade an unrelated-question answer: exact label match after :func:`normalize`.

    ``rule`` (one of :data:`RULES`) chooses the parser as in :func:`grade_quantity`; the
    label comparison is the same under all three. Categories: capped >
    format_failure > unknown > complete > other_value. ``lenient_complete``
    (our choice): EOS and the first answer field anywhere matches the label, or,
    when there is no answer object, the label occurs as a whole word.
    """
    _check_rule(rule)
    eos = _check_stop(stop_reason)
    ref = normalize(reference_label)
    parsed = _parse(text, rule)
    if not parsed.ok:
        category = "format_failure"
    else:
        assert parsed.answer is not None
        a = normalize(parsed.answer)
        category = "unknown" if a == UNKNOWN else "complete" if a == ref else "other_value"
    if not eos:
        category = "capped"

    fa = first_answer(text)
    if fa is not None:
        lenient_ok = normalize(fa) == ref
    else:
        lenient_ok = bool(re.search(rf"(?<![\w-]){re.escape(ref)}(?![\w-])", normalize(text)))

    return _grade(text, parsed, category, eos and lenient_ok, rule, lambda a: normalize(a) == ref)
