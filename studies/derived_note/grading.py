"""Scoring of derived-note answers (paper app:v5_propagation L5843-5848; spec partD section 0).

Primary score, **exact field** (paper L5841: "exact normalized answer-field equality"; spec partD 0:
"case-folded, whitespace-normalised equality of the JSON ``answer`` field; malformed JSON counts as
wrong"): the response is parsed with the shared answer-field parser, the paper's rules 1-2
(:func:`studies.common.answers.parse_answer_field`: one whole JSON object, extra fields permitted, no
fence) and the field must equal the reference after :func:`studies.common.answers.normalize`. The
strict fenced rule (:func:`studies.common.answers.parse_strict` with one clean outer Markdown fence, one
string field and nothing else, the paper's v35 rule) is kept beside it as ``correct_fenced``. Our choices
(UNCLEAR in the paper):
an output that hit the token cap is never correct (EOS precondition, as in the
quantity study); the parse failure kind is recorded (``parse_reason``).

Categories (precedence ours): ``capped`` > ``format_failure`` > ``unknown`` >
``correct`` > ``other_value`` (the contrasting value: A's route for current
questions, B's zone for historical ones) > ``wrong_value``.

Secondary, **lenient** (ours, for small models that answer in prose): EOS, and of
the two values (reference, other), the first one that occurs word-bounded and
case-folded anywhere in the output is the reference.

Stored rows are regraded from their outputs by :func:`regrade_row` (``python -m
kvprobe.studies.derived_note.grading RUN...`` rewrites a run's results in place; ``tests/test_committed_grading.py``
checks every committed row against the current grading).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvprobe.studies.common.answers import UNKNOWN, exact_equal, normalize, parse_answer_field, parse_strict

CATEGORIES = ("capped", "format_failure", "unknown", "correct", "other_value", "wrong_value")


@dataclass(frozen=True)
class Grade:
    """Grade of one answer (see the module docstring)."""

    correct: bool
    category: str
    parse_reason: str
    answer: str | None
    fenced: bool
    strict_single_field: bool
    lenient_correct: bool
    first_value: str | None  # "reference", "other" or None (neither value occurs)
    correct_fenced: bool  # the strict fenced rule (EOS required too)


def first_value(text: str, reference: str, other: str) -> str | None:
    """Which of the two values occurs first (word-bounded, case-folded) in ``text``."""
    hay = text.casefold()
    found = []
    for label, value in (("reference", reference), ("other", other)):
        m = re.search(rf"(?<![\w-]){re.escape(value.casefold())}(?![\w-])", hay)
        if m:
            found.append((m.start(), -len(value), label))
    return min(found)[2] if found else None


def grade(text: str, stop_reason: str, reference: str, other: str) -> Grade:
    """Grade an answer against its reference and contrasting value; ``stop_reason`` is "eos" or "cap"."""
    if stop_reason not in ("eos", "cap"):
        raise ValueError(f"stop_reason must be 'eos' or 'cap', got {stop_reason!r}")
    eos = stop_reason == "eos"
    parsed = parse_answer_field(text)
    if not eos:
        category = "capped"
    elif not parsed.ok:
        category = "format_failure"
    else:
        a = normalize(parsed.answer or "")
        category = ("unknown" if a == UNKNOWN else "correct" if a == normalize(reference)
                    else "other_value" if a == normalize(other) else "wrong_value")
    first = first_value(text, reference, other)
    return Grade(correct=category == "correct", category=category, parse_reason=parsed.reason,
                 answer=parsed.answer, fenced=parsed.fenced, strict_single_field=parsed.strict_single_field,
                 lenient_correct=eos and first == "reference", first_value=first,
                 correct_fenced=eos and exact_equal(parse_strict(text, allow_fence=True), reference))


#: The row columns :func:`grade` decides (recomputed by :func:`regrade_row`).
GRADE_COLUMNS = ("correct", "category", "parse_reason", "answer", "fenced", "strict_single_field", "lenient_correct",
                 "first_value", "correct_fenced")


def grade_columns(text: str, stop_reason: str, reference: str, other: str) -> dict[str, object]:
    """The row columns of one answer's :class:`Grade` (what :mod:`.study` writes)."""
    g = grade(text, stop_reason, reference, other)
    return {column: getattr(g, column) for column in GRADE_COLUMNS}


def regrade_row(row: dict[str, object]) -> dict[str, object]:
    """``row`` with its grade columns recomputed from its stored output (every other column kept)."""
    return {**row, **grade_columns(str(row["output"]), str(row["stop_reason"]), str(row["reference"]),
                                   str(row["other"]))}


if __name__ == "__main__":  # pragma: no cover - the one-off regrade of committed runs
    import sys
    from kvprobe.studies.common.runner import regrade_results
    for d in sys.argv[1:]:
        print(d, regrade_results(d, regrade_row), "rows changed")
