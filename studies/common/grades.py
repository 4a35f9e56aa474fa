"""A model grader's labels, merged into a graded study's rows (``kvprobe.studies.common.grades``).

A graded study (``Entry.graded`` in ``studies/registry.py``) reads a ``grades.jsonl``: one JSON line per graded
answer, keyed by the fields that name the answer (case, question, condition...). Its summary takes the grade
of every row it counts, and a row without one is an error (:func:`grade_of`): a summary never mixes the
model grader's labels with the rule grader's for the answers the file forgot.

Example::

    grades = read_grade_lines("runs/session-bias/grades.jsonl", ("case_id", "arm"))
    g = grade_of(grades, ("q1", "full"), "grades.jsonl", ("case", "arm"))   # or ValueError
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["GRADES", "grade_of", "read_grade_lines"]

#: The grades file a study's grader writes in the run folder.
GRADES = "grades.jsonl"

G = TypeVar("G")


def read_grade_lines(path: str | Path, key: Sequence[str],
                     check: Callable[[dict[str, Any], str], None] | None = None) -> dict[tuple, dict[str, Any]]:
    """Every line of a grades file keyed by its ``key`` fields (a later line replaces an earlier one);
    ``check(line, where)`` may refuse a line (``where``: ``"PATH line N"``) before it is kept."""
    out: dict[tuple, dict[str, Any]] = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        g = json.loads(line)
        if check is not None:
            check(g, f"{path} line {lineno}")
        out[tuple(g[k] for k in key)] = g
    return out


def grade_of(grades: Mapping[tuple, G], key: tuple, source: str | Path, names: Sequence[str] | None = None) -> G:
    """The grade of the answer ``key``; a ValueError naming the grades file (``source``) and the answer when the
    file has none (``names``: what each part of the key is, e.g. ``("case", "arm")``; without, the key as is).

    Example: ``grade_of({}, ("q1", "full"), "grades.jsonl", ("case", "arm"))`` raises
    ``grades.jsonl: no grade for case 'q1', arm 'full'``.
    """
    try:
        return grades[key]
    except KeyError:
        what = ", ".join(f"{n} {k!r}" for n, k in zip(names, key)) if names else repr(key)
        raise ValueError(f"{source}: no grade for {what}") from None
