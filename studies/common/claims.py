"""Claims of the paper, how a committed run measures them, and the one verdict rule.

Every study folder that tests the paper has a ``claims.py`` with a module-level ``CLAIMS`` (its claims, each
quoting the paper once, and measures of its own runs' files); ``studies/scorecard.py`` gathers them and renders
``docs/scorecard.md``. This module holds what they share: the types, the rule and the small readers.

A study's report judges the same claims: its summary module takes a claim of its ``claims.py`` and a measurement
the claims module builds from the summary dict (``quantity_change_measurement(summary, ...)``; the scorecard's
measures read ``summary.json`` into the same function), and writes :func:`verdict_text` (or :func:`judge`) of
the two, never the rule itself. A report's reference arm or rule may differ from the scorecard's test (a
parameter of the measurement); a finding only a report judges is a claim of the module's ``REPORT_CLAIMS``,
which the scorecard does not list (its tests may be empty). :func:`evaluate_run` measures the claims whose
tests read one run folder (``studies.common.summary.run_claims``).

A claim (:class:`Claim`) is one finding of the paper: its short statement, a verbatim quote with the
lines of the paper's LaTeX source it comes from, the paper's numbers, and the direction the paper found.
Each of its tests (:class:`Test`) reads one committed run under one grading rule and reference arm and
returns a :class:`Measurement`: the estimate with its 95 % interval, the value that means "no effect"
(0 for a change, 0.5 for an AUC, the paper's 0.60 for its recognition criterion), and, when the run
cannot test the claim, the reason.

The verdict rule (:func:`kvprobe.studies.common.report.claim_verdict`, the one rule every report uses too;
also in docs/fidelity.md):

* **not testable here** when the run cannot show the effect: the arm the model must succeed in answers
  fewer than :data:`FLOOR` (10 %) correctly (for a loss, the reference arm; for a gain, full access:
  a model that does not do the task has nothing to lose or to recover), or it answers at or below
  chance (the majority answer or the 1/k rate, defined per study), or the estimate is undefined (an
  AUC with an empty class, a ratio whose denominator's interval includes 0, a detector that never
  decided);
* otherwise, for a direction the paper found (up or down): **replicates** when the 95 % interval
  excludes the null on the paper's side, **opposite** when it excludes it on the other side,
  **inconclusive** when it includes it;
* for a claim that something differs without a sign (``either``): replicates when the interval
  excludes the null, else inconclusive;
* for a claim of no change (``none``): replicates when the whole interval lies within the stated
  tolerance of the null, opposite when it excludes the null (an effect where the paper found none),
  else inconclusive.

Reference arms are the paper's: the equal-token control for a mask, the source mask for recompute,
rebuild and compaction. Where the control itself moves the answers (its own change against full
access has an interval excluding 0), it is not a neutral reference and full access is used instead,
as the paper does ("We also use full access, since control masks can change answers."). A row whose
interval rests on fewer than :data:`FEW_UNITS` resampled units says so.

Example (a study's ``claims.py``)::

    def margin(run: Path) -> Measurement:
        d = read_summary(run)["delta_m"]
        return Measurement(d["value"], tuple(d["ci"]), "nats", "+.2f", f"{d['n']} groups", "control")

    CLAIMS = (Claim("my-study.margin", "my-study", "Hiding A raises the margin",
                    Paper("<the paper's words>", (357, 358), "<its section>", "+7.06 nats"), "up",
                    (Test("my-study/smollm2-135m-instruct", "Delta m; mask vs control", margin),)),)
    rows = evaluate("artifacts", CLAIMS)   # [Row(..., verdict="replicates")]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.readouts.stats import MIN_RESAMPLED_UNITS

from .report import (DIRECTIONS, FLOOR, INCONCLUSIVE, NOT_TESTABLE, OPPOSITE, REPLICATES, claim_verdict, estimate,
                     model_name)

__all__ = ["FEW_UNITS", "FLOOR", "INCONCLUSIVE", "LENIENT", "NOT_TESTABLE", "OPPOSITE", "PAPER_RULE", "REPLICATES",
           "TOLERANCE", "VERDICTS", "Claim", "Measurement", "Paper", "Row", "Test", "chance_reason", "claim_tolerance",
           "claim_verdict", "claims_module", "count_pp", "evaluate", "evaluate_run", "excludes_zero", "find_entry",
           "floor_reason", "is_run", "join_reasons", "judge", "lines_text", "pp_measurement", "read_json",
           "read_summary", "run_model", "share_pp", "verdict_text"]

#: The verdicts, in the order the summary table lists them.
VERDICTS = (REPLICATES, OPPOSITE, INCONCLUSIVE, NOT_TESTABLE)
#: Intervals resting on fewer resampled units than this are flagged (percentile bootstraps are unreliable).
FEW_UNITS = MIN_RESAMPLED_UNITS
#: Default tolerance of a no-change claim, by unit (the interval must lie within null +- tolerance).
TOLERANCE = {"pp": 5.0, "AUC": 0.05}

#: The two grading rules most tests name: the paper's, and the lenient one beside it.
PAPER_RULE = "paper's rule"
LENIENT = "lenient (ours)"


@dataclass(frozen=True)
class Paper:
    """Where a claim is in the paper.

    Attributes:
        quote: a verbatim sentence or clause of the paper (LaTeX markup dropped; ``tests/test_scorecard.py``
            checks it word for word against the paper's source where that is on the machine).
        lines: first and last line of the quote in the paper's LaTeX source.
        section: the title of the section, subsection or subsubsection holding the quote ("Abstract" there).
        numbers: the paper's numbers for the claim, as short text; every number in it occurs in
            ``numbers_lines`` (a table row, often).
        numbers_lines: lines of ``numbers`` (default: ``lines``).
    """

    quote: str
    lines: tuple[int, int]
    section: str
    numbers: str
    numbers_lines: tuple[int, int] | None = None

    @property
    def where(self) -> str:
        """``L357-358`` (or ``L357``) for the quote, with the numbers' lines when they differ."""
        text = lines_text(self.lines)
        if self.numbers_lines and self.numbers_lines != self.lines:
            text += f", numbers {lines_text(self.numbers_lines)}"
        return text


def lines_text(span: tuple[int, int]) -> str:
    """``L357-358`` for lines 357 to 358 (``L357`` for one line)."""
    return f"L{span[0]}" if span[0] == span[1] else f"L{span[0]}-{span[1]}"


@dataclass(frozen=True)
class Measurement:
    """One run's estimate for a claim under one rule.

    Attributes:
        value: the estimate (None when the run cannot give one).
        ci: its 95 % interval (None when not testable).
        unit: ``pp``, ``nats``, ``AUC``, ``AUC difference``, ``recovery``, ``share``.
        fmt: ``format()`` spec of value and bounds (``+.1f``; ``.3f`` for AUCs).
        n: the sample, as text (``150 cases, 50 groups``).
        reference: the reference arm with its count, as text (``control 81/150``).
        null: the value meaning "no effect" (0, 0.5 for AUCs, 0.60 for the paper's recognition criterion).
        units: resampled units behind the interval (flagged below :data:`FEW_UNITS`); None if not known.
        not_testable: why the run cannot test the claim (None when it can).
        note: anything a reader must know to read the row (a switched reference arm, a stand-in arm).
    """

    value: float | None
    ci: tuple[float, float] | None
    unit: str
    fmt: str
    n: str
    reference: str = ""
    null: float = 0.0
    units: int | None = None
    not_testable: str | None = None
    note: str = ""


@dataclass(frozen=True)
class Test:
    """One committed run read under one rule.

    Attributes:
        run: the run directory under ``artifacts/`` (``quantity/smollm2-135m-instruct``).
        rule: the grading rule and the compared arms, as shown in the table.
        measure: reads the run directory and returns the measurement.
    """

    run: str
    rule: str
    measure: Callable[[Path], Measurement]


@dataclass(frozen=True)
class Claim:
    """A finding of the paper and the runs that test it.

    Attributes:
        key: ``study.name``, unique.
        study: the study (``kvprobe run`` name) whose runs test it.
        claim: the finding in a few words.
        paper: where the paper states it.
        direction: ``up``, ``down``, ``either`` or ``none`` (see the module docstring).
        tests: one row per test.
        tolerance: for ``none`` claims, how far from the null the interval may reach (default by unit,
            :data:`TOLERANCE`).
    """

    key: str
    study: str
    claim: str
    paper: Paper
    direction: str
    tests: tuple[Test, ...]
    tolerance: float | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"{self.key}: direction {self.direction!r} is not one of {DIRECTIONS}")


@dataclass(frozen=True)
class Row:
    """A scorecard row: a claim, a test and its measurement, and the verdict."""

    claim: Claim
    test: Test
    model: str
    measurement: Measurement
    verdict: str
    index: int = field(default=0)

    @property
    def estimate_text(self) -> str:
        """``+8.0 [-4.0, +20.7] pp`` (``-`` when there is no estimate)."""
        m = self.measurement
        if m.value is None:
            return "-"
        if m.ci is None:
            return f"{m.value:{m.fmt}} {m.unit}"
        return f"{estimate(m.value, m.ci, m.fmt)} {m.unit}"

    @property
    def n_text(self) -> str:
        """The sample, with the few-units flag."""
        m = self.measurement
        if m.units is not None and m.units < FEW_UNITS and m.ci is not None:
            return f"{m.n} (interval from {m.units} resampled units, fewer than {FEW_UNITS})"
        return m.n


# --------------------------------------------------------------------------- the rule


def floor_reason(correct: int, n: int, condition: str) -> str | None:
    """Why a condition with ``correct`` of ``n`` right is at floor (below :data:`FLOOR`), or None."""
    if n and correct / n >= FLOOR:
        return None
    return f"{condition} at floor: {correct}/{n} correct, below {FLOOR:.0%}"


def chance_reason(correct: int, n: int, chance: float, condition: str, what: str) -> str | None:
    """Why a condition with ``correct`` of ``n`` right is at or below chance (``chance`` correct answers), or None."""
    if correct > chance:
        return None
    return f"{condition} at or below chance: {correct}/{n} correct, {what} scores {chance:g}/{n}"


def join_reasons(*reasons: str | None) -> str | None:
    """Every reason given, joined (None if none)."""
    found = [r for r in reasons if r]
    return "; ".join(found) if found else None


# --------------------------------------------------------------------------- reading runs


def read_json(path: Path) -> Any:
    """The JSON file at ``path``."""
    return json.loads(path.read_text())


def read_summary(run: Path) -> dict[str, Any]:
    """The run's ``summary.json`` (what a study's own measures read)."""
    return read_json(run / "summary.json")


def run_model(run: Path) -> str:
    """The run's model: ``config.json`` of a study run, else the recognition group's ``readouts.json``."""
    if (run / "config.json").exists():
        return model_name(read_json(run / "config.json"))
    if (run / "readouts.json").exists():
        return str(read_json(run / "readouts.json").get("model", "?"))
    return "?"


def find_entry(items: Iterable[dict[str, Any]], **match: Any) -> dict[str, Any]:
    """The one item whose fields equal ``match`` (KeyError naming the fields if none)."""
    for item in items:
        if all(item.get(k) == v for k, v in match.items()):
            return item
    raise KeyError(f"no entry with {match}")


def count_pp(change: dict[str, Any], n: int) -> tuple[float, tuple[float, float] | None]:
    """A paired change in answers (``change``, ``ci`` in counts) as percentage points of ``n``; no interval when
    the summary gives none (too few histories to resample)."""
    ci = change["ci"]
    return 100 * change["change"] / n, None if ci is None else (100 * ci[0] / n, 100 * ci[1] / n)


def share_pp(value: float, ci: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """A change in shares (0.25) as percentage points (25.0)."""
    return 100 * value, (100 * ci[0], 100 * ci[1])


def excludes_zero(ci: Sequence[float]) -> bool:
    """Whether the interval lies wholly above or below 0."""
    return ci[0] > 0 or ci[1] < 0


def pp_measurement(value: float, ci: Sequence[float] | None, n: str, reference: str, reason: str | None = None,
                   units: int | None = None, note: str = "") -> Measurement:
    """A change in percentage points (``+.1f``) with its sample, reference arm, and the reason it is not
    testable (None when it is)."""
    return Measurement(value, None if ci is None else tuple(ci), "pp", "+.1f", n, reference, units=units,
                       not_testable=reason, note=note)


# --------------------------------------------------------------------------- evaluation


def claim_tolerance(claim: Claim, m: Measurement) -> float | None:
    """How far from the null a no-change claim's interval may reach (None for a signed claim): the claim's own
    tolerance, else :data:`TOLERANCE` of the measurement's unit."""
    if claim.direction != "none":
        return None
    if claim.tolerance is not None:
        return claim.tolerance
    if m.unit not in TOLERANCE:
        raise ValueError(f"{claim.key}: no default tolerance for unit {m.unit!r}; give Claim.tolerance")
    return TOLERANCE[m.unit]


def judge(claim: Claim, m: Measurement) -> str:
    """The verdict of ``m`` under ``claim``'s direction and tolerance (the one rule, :func:`claim_verdict`); a
    measurement without an interval and without a reason is not testable either.

    Example: a ``down`` claim measured ``-12.0 [-20.0, -4.0] pp`` is ``"replicates"``.
    """
    reason = m.not_testable or (None if m.ci is not None else "no interval")
    return claim_verdict(claim.direction, m.ci, m.null, claim_tolerance(claim, m), reason)


def verdict_text(claim: Claim, m: Measurement) -> str:
    """:func:`judge` for a report's table cell: an inconclusive estimate whose point lies on the other side of the
    null from the paper's says so (the wording of ``studies.common.report.verdict_cell``)."""
    v = judge(claim, m)
    side = {"up": 1, "down": -1}.get(claim.direction, 0)
    opposite = v == INCONCLUSIVE and m.value is not None and (m.value - m.null) * side < 0
    return v + (" (point estimate opposite in sign)" if opposite else "")


def _row(claim: Claim, test: Test, run: Path, index: int) -> Row:
    """``test`` of ``claim`` measured on the run folder ``run`` and judged (:func:`judge`)."""
    m = test.measure(run)
    return Row(claim, test, run_model(run), m, judge(claim, m), index)


def claims_module(study: str) -> str:
    """The claims module of a registered study's anchor (``"module:name"``, ``Entry.study`` or
    ``CommandStudy.commands``): ``claims`` beside the module (the convention ``kvprobe.studies.scorecard`` gathers
    by).

    Example: ``claims_module("kvprobe.studies.components.relevance:RelevanceStudy")`` is
    ``"kvprobe.studies.components.claims"``.
    """
    return study.partition(":")[0].rpartition(".")[0] + ".claims"


def evaluate(artifacts: Path | str, claims: Sequence[Claim]) -> list[Row]:
    """Measure every test of every claim on the runs under ``artifacts`` and apply the verdict rule
    (:func:`claim_verdict`); rows are numbered from 1 in order."""
    rows = []
    for claim in claims:
        for test in claim.tests:
            run = Path(artifacts) / test.run
            if not run.is_dir():
                raise FileNotFoundError(f"{claim.key}: run {test.run} not found under {artifacts}")
            rows.append(_row(claim, test, run, len(rows) + 1))
    return rows


def is_run(test: Test, out_dir: Path | str) -> bool:
    """Whether ``test`` reads the run folder ``out_dir``: its run (``quantity/smollm2-135m-instruct``) names the
    folder's last parts, wherever the artifacts folder lies."""
    parts = Path(test.run).parts
    return Path(out_dir).resolve().parts[-len(parts):] == parts


def evaluate_run(out_dir: Path | str, claims: Sequence[Claim]) -> list[Row]:
    """:func:`evaluate` of one run folder: every test of ``claims`` that reads ``out_dir`` (:func:`is_run`),
    measured on the files there and judged by the one rule; none when no test reads it (a run elsewhere, a copy
    under another name). Rows are numbered from 1 in order.

    Example: ``evaluate_run("artifacts/factorial/smollm2-135m-instruct", CLAIMS)`` holds the four rows of
    ``docs/scorecard.md``'s factorial section.
    """
    rows: list[Row] = []
    for claim in claims:
        for test in claim.tests:
            if is_run(test, out_dir):
                rows.append(_row(claim, test, Path(out_dir), len(rows) + 1))
    return rows
