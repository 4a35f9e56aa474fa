"""Claims of the paper, how a committed run measures them, and the one verdict rule.

Every study folder that tests the paper has a ``claims.py`` with a module-level ``CLAIMS`` (its claims, each
quoting the paper once, and measures of its own runs' files); ``studies/scorecard.py`` gathers them and renders
``docs/scorecard.md``. This module holds what they share: the types, the rule and the small readers.

A study's report judges the same claims: its summary module takes a claim of its ``claims.py`` and a measurement
the claims module builds from the summary dict (``quantity_change_measurement(summary, ...)``; the scorecard's
measures read ``summary.json`` into the same function), and writes :func:`verdict_text` (or :func:`judge`) of
the two, never the rule itself. A report reads the claim's own reference arm (a property of the claim, not a
choice of the report); a report's rule may be one of the claim's secondary tests; a finding only a report judges is a claim of the module's ``REPORT_CLAIMS``,
which the scorecard does not list (its tests may be empty). :func:`evaluate_run` measures the claims whose
tests read one run folder (``studies.common.summary.run_claims``).

A claim (:class:`Claim`) is one finding of the paper: its short statement, a verbatim quote with the
lines of the paper's LaTeX source it comes from, the paper's numbers, and the direction the paper found. It is
declared before the data: its reference arm (the paper's; a finding the paper states against two arms is two
claims), its resampled unit, its kind (an effect, a claim that something fails or carries no signal, or a
construction check) and, per model, one **primary** test (:attr:`Test.primary`: the paper's grading rule, arm and
setting); other tests are secondary, shown beside it, and never make the claim replicate. Each test reads one
committed run under one grading rule and returns a :class:`Measurement`: the estimate with its 95 % interval, the
value that means "no effect" (0 for a change, 0.5 for an AUC, the paper's 0.60 for its recognition criterion), its
resampled units (required), the size of one answer for a no-change claim in pp, and, when the run cannot test the
claim, the reason.

The verdict rule (:func:`kvprobe.studies.common.report.claim_verdict`, the one rule every report uses too, with
:func:`reason` and :func:`judge`; also in docs/fidelity.md and docs/scorecard.md):

* **not testable here** when the run cannot show the effect: the arm the model must succeed in answers
  fewer than :data:`FLOOR` (10 %) correctly (for a loss, the reference arm; for a gain, full access:
  a model that does not do the task has nothing to lose or to recover), or not above chance by a test (the arm's
  exact Clopper-Pearson interval, or the run's bootstrap interval of a rate, must lie above the majority answer's
  or the 1/k share, defined per study: :func:`chance_reason`, :func:`chance_interval_reason`), or no answer
  differs between the arms (an interval of zero width at the null), or its model judge is not validated
  (:func:`judge_reason`), or the estimate is undefined (an AUC with an empty class, a ratio whose denominator's
  interval includes 0, a detector that never decided, a positive control that does not show);
* otherwise, for a direction the paper found (up or down): **replicates** when the 95 % interval
  excludes the null on the paper's side, **opposite** when it excludes it on the other side,
  **inconclusive** when it includes it; a claim that something fails (``kind="no-effect"``) reads **no effect
  found** on the paper's side (a signal-free score gives it too), never replicates;
* for a claim that something differs without a sign (``either``): replicates when the interval
  excludes the null, else inconclusive;
* for a claim of no change (``none``): replicates when the whole interval lies strictly within the stated
  tolerance of the null (not at its edge), opposite when it excludes the null, else inconclusive; not testable
  when one answer is as wide as the tolerance (n <= 20 at 5 pp).

Reference arms are fixed in the claim, never chosen from the results: against an equal-token control, the row's
note gives the control's own change against full access ("not neutral" when its interval excludes 0). A row
whose interval rests on fewer than :data:`FEW_UNITS` resampled units says so. :func:`claim_results` judges a
claim over models: it replicates when its primary row replicates on at least one model.

Example (a study's ``claims.py``)::

    def margin(run: Path) -> Measurement:
        d = read_summary(run)["delta_m"]
        return Measurement(d["value"], tuple(d["ci"]), "nats", "+.2f", f"{d['n']} groups", "control",
                           units=d["n"])

    CLAIMS = (Claim("my-study.margin", "my-study", "Hiding A raises the margin",
                    Paper("<the paper's words>", (357, 358), "<its section>", "+7.06 nats"), "up",
                    (Test("my-study/smollm2-135m-instruct", "Delta m; mask vs control", margin),),
                    reference="control", units="groups"),)
    rows = evaluate("artifacts", CLAIMS)   # [Row(..., verdict="replicates")]
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.readouts.stats import MIN_RESAMPLED_UNITS

from kvprobe.readouts.stats import clopper_pearson

from .report import (DIRECTIONS, DOES_NOT_HOLD, FLOOR, HOLDS, INCONCLUSIVE, KINDS, NO_EFFECT, NOT_TESTABLE, OPPOSITE,
                     REPLICATES, above_chance, claim_verdict, estimate, model_name)

__all__ = ["CHECK_VERDICTS", "DOES_NOT_HOLD", "FEW_UNITS", "FLOOR", "HOLDS", "INCONCLUSIVE", "KINDS", "LENIENT",
           "NOT_TESTABLE", "NO_EFFECT", "OPPOSITE", "PAPER_RULE", "REPLICATES", "TOLERANCE", "VERDICTS", "Claim",
           "ClaimResult", "Measurement", "Paper", "Row", "Test", "chance_interval_reason", "chance_reason",
           "claim_results", "claim_tolerance", "claim_verdict", "claims_module", "count_pp", "evaluate",
           "evaluate_run", "excludes_zero", "find_entry", "floor_reason", "grader_validity", "is_run", "join_reasons",
           "judge", "judge_reason", "lines_text", "pp_measurement", "read_json", "read_summary", "reason",
           "rule_audit_note", "run_model", "share_pp", "verdict_text"]

#: The verdicts of a claim's rows, in the order the summary table lists them.
VERDICTS = (REPLICATES, NO_EFFECT, OPPOSITE, INCONCLUSIVE, NOT_TESTABLE)
#: The verdicts of a construction check's rows (listed apart, never tallied).
CHECK_VERDICTS = (HOLDS, DOES_NOT_HOLD, NOT_TESTABLE)
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
        units: resampled units behind the interval (flagged below :data:`FEW_UNITS`); every measurement
            :func:`evaluate` reads must state them (None is an error there).
        not_testable: why the run cannot test the claim (None when it can).
        note: anything a reader must know to read the row (the control's own effect, a stand-in arm).
        step: the change one answer makes, in ``unit`` (``100 / n`` pp): a no-change claim whose band is no
            wider than one answer cannot be shown (:func:`reason`); required there for a ``pp`` measurement.
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
    step: float | None = None


@dataclass(frozen=True)
class Test:
    """One committed run read under one rule.

    Attributes:
        run: the run directory under ``artifacts/`` (``quantity/smollm2-135m-instruct``).
        rule: the grading rule and the compared arms, as shown in the table.
        measure: reads the run directory and returns the measurement.
        primary: whether this is the claim's primary test on the run's model (the paper's grading rule, reference
            arm and setting, fixed here before any result): only a primary row makes a claim replicate; a
            secondary row (another rule, arm, length or grader) is shown beside it. Every model a claim is
            tested on has exactly one primary row (:func:`evaluate` checks).
    """

    run: str
    rule: str
    measure: Callable[[Path], Measurement]
    primary: bool = True


@dataclass(frozen=True)
class Claim:
    """A finding of the paper and the runs that test it.

    Attributes:
        key: ``study.name``, unique.
        study: the study (``kvprobe run`` name) whose runs test it.
        claim: the finding in a few words.
        paper: where the paper states it.
        direction: ``up``, ``down``, ``either`` or ``none`` (see the module docstring).
        tests: one row per test (:attr:`Test.primary` marks the primary one per model).
        tolerance: for ``none`` claims, how far from the null the interval may reach (default by unit,
            :data:`TOLERANCE`).
        reference: the reference arm, the paper's, fixed before the data (``source-control``, ``full access``,
            ``criterion 0.60``); a claim the paper states against two arms is two claims. Required with tests.
        units: what the primary measure's interval resamples (``groups``, ``histories``); required with tests.
        kind: ``effect`` (default), ``no-effect`` (the paper says something fails or carries no signal: the
            paper's side reads "no effect found", never a replication) or ``construction`` (a property of our
            templates, listed apart); see :data:`KINDS`.
        control: for a ``no-effect`` claim, the key of the claim that is its positive control (the same runs
            showing a signal where one exists), shown beside it.
    """

    key: str
    study: str
    claim: str
    paper: Paper
    direction: str
    tests: tuple[Test, ...]
    tolerance: float | None = None
    reference: str = ""
    units: str = ""
    kind: str = "effect"
    control: str | None = None

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"{self.key}: direction {self.direction!r} is not one of {DIRECTIONS}")
        if self.kind not in KINDS:
            raise ValueError(f"{self.key}: kind {self.kind!r} is not one of {KINDS}")
        if self.tests and not (self.reference and self.units):
            raise ValueError(f"{self.key}: a claim with tests declares its reference arm and resampled units")
        if self.control and self.kind != "no-effect":
            raise ValueError(f"{self.key}: only a no-effect claim names a positive control")


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
        """The sample, with the few-units flag on every row under :data:`FEW_UNITS` resampled units."""
        m = self.measurement
        if m.units is not None and m.units < FEW_UNITS:
            what = "interval from " if m.ci is not None else ""
            return f"{m.n} ({what}{m.units} resampled units, fewer than {FEW_UNITS})"
        return m.n

    @property
    def reason(self) -> str | None:
        """Why the row is not testable (:func:`reason`), or None."""
        return reason(self.claim, self.measurement)


# --------------------------------------------------------------------------- the rule


def floor_reason(correct: int, n: int, condition: str) -> str | None:
    """Why a condition with ``correct`` of ``n`` right is at floor (below :data:`FLOOR`), or None."""
    if n and correct / n >= FLOOR:
        return None
    return f"{condition} at floor: {correct}/{n} correct, below {FLOOR:.0%}"


def chance_reason(correct: int, n: int, chance: float, condition: str, what: str) -> str | None:
    """Why a condition with ``correct`` of ``n`` right is not above chance (``chance`` correct answers: the majority
    answer's or a random pick's) by an exact test (``report.above_chance``: the Clopper-Pearson 95 % interval
    must lie above ``chance / n``), or None."""
    if above_chance(correct, n, chance):
        return None
    lo, hi = clopper_pearson(correct, n) or (0.0, 1.0)
    return (f"{condition} not above chance: {correct}/{n} correct, exact 95% interval [{100 * lo:.1f}, "
            f"{100 * hi:.1f}] %, {what} scores {chance:g}/{n} ({100 * chance / n:.1f} %)")


def chance_interval_reason(value: float, ci: Sequence[float], chance: float, condition: str, what: str) -> str | None:
    """:func:`chance_reason` of a rate without counts (percent ``value`` with the run's bootstrap 95 % interval
    ``ci``): not above ``chance`` percent unless the whole interval lies above it, or None."""
    if ci[0] > chance:
        return None
    return (f"{condition} not above chance: {value:.1f} % [{ci[0]:.1f}, {ci[1]:.1f}] (bootstrap 95% interval), "
            f"{what} scores {chance:g} %")


def judge_reason(run: Path | str, task: str, graders: Sequence[str], root: Path | str | None = None) -> str | None:
    """Why a run graded by a model judge cannot test a claim (None when every model judge of ``graders``, a
    summary's graders, passed its audit on ``task``): a judge with no audit, or one that fails the audit's bar
    (``studies.common.judge_audit``: the audits beside the run's study folder, or in ``root``). Rule graders are
    not gated here (:func:`rule_audit_note` says how theirs went)."""
    from .judge_audit import judges_of_run

    reasons = []
    for grader, audit in judges_of_run(run, task, graders, root).items():
        name = "/".join(grader.split(":", 1)[-1].split("/")[:2])
        if audit is None:
            reasons.append(f"judge not validated: {name} has no audit on the {task} set")
        elif not audit.passed:
            reasons.append(f"judge not validated: {_audit_numbers(name, audit)} (bar: {audit.rule})")
    return join_reasons(*reasons)


def _audit_numbers(name: str, audit: Any) -> str:
    """``NAME agrees with 15/40 hand labels (37.5 %) and accepts 17 of 19 planted wrong answers``."""
    return (f"{name} agrees with {audit.agree}/{audit.n} hand labels ({100 * audit.agree / audit.n:.1f} %) and "
            f"accepts {len(audit.planted_accepted)} of {audit.planted} planted wrong answers")


def rule_audit_note(run: Path | str, task: str, rule: str, root: Path | str | None = None) -> str:
    """A rule grader's own audit on ``task`` as a row note (empty when it has none or passes): rule graders are
    shown beside a failing judge, never gated, so a reader needs to know how far their labels go. ``root``: the
    audit folder (default: ``judge-audit`` beside the run's study folder).

    Example: ``"rule-v1 fails its own audit: it agrees with 24/40 hand labels (60.0 %) and accepts 4 of 19 planted
    wrong answers"``.
    """
    from .judge_audit import audit_for_grader

    audit = audit_for_grader(task, rule, Path(run).parent.parent / "judge-audit" if root is None else root)
    if audit is None or audit.passed:
        return ""
    return f"{rule} fails its own audit: {_audit_numbers('it', audit)}"


def grader_validity(run: Path | str, task: str, graders: Sequence[str], rule: str,
                    root: Path | str | None = None) -> dict[str, str | None]:
    """A summary's record of its graders' audits: ``judge_validation`` (:func:`judge_reason`: why its model judge
    cannot test a claim, None for a rule grader or a judge that passes) and ``rule_audit`` (:func:`rule_audit_note`
    of the study's rule grader ``rule``). A summary passes ``root=judge_audit.AUDIT_DIR`` (where ``kvprobe report
    judge-audit`` writes), so a copy of the run summarized elsewhere reproduces it."""
    return {"judge_validation": judge_reason(run, task, graders, root),
            "rule_audit": rule_audit_note(run, task, rule, root)}


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
                   units: int | None = None, note: str = "", answers: int | None = None) -> Measurement:
    """A change in percentage points (``+.1f``) with its sample, reference arm, the reason it is not testable (None
    when it is), its resampled units and ``answers``, the answers a percentage point is counted over (one answer
    is ``100 / answers`` pp, :attr:`Measurement.step`)."""
    return Measurement(value, None if ci is None else tuple(ci), "pp", "+.1f", n, reference, units=units,
                       not_testable=reason, note=note, step=100 / answers if answers else None)


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


def reason(claim: Claim, m: Measurement) -> str | None:
    """Why ``m`` cannot test ``claim`` (None when it can): the measurement's own reason (floor, chance, an undefined
    estimate); no interval; an interval of zero width at the null (no answer differs between the arms: nothing
    was measured, never a replication; a construction check excepted); for a no-change claim, one answer
    (:attr:`Measurement.step`) as wide as the band or wider, so no interval but the degenerate one fits strictly
    inside it (with ``+-5`` pp: 20 answers or fewer; with 21-24 answers, one answer is 4.2-4.8 pp and the
    interval must stay within one answer of the null)."""
    if m.not_testable:
        return m.not_testable
    if m.ci is None:
        return "no interval"
    if m.ci[0] == m.ci[1] == m.null and claim.kind != "construction":
        what = "answer" if m.unit == "pp" else "unit"
        return f"no {what} differs between the arms (the interval is [{m.ci[0]:{m.fmt}}, {m.ci[1]:{m.fmt}}])"
    tolerance = claim_tolerance(claim, m)
    if tolerance is not None and m.step is not None and m.step >= tolerance:
        return (f"one answer is {m.step:.1f} {m.unit}, not less than the +-{tolerance:g} {m.unit} band: too few "
                "answers to show no change")
    return None


def judge(claim: Claim, m: Measurement) -> str:
    """The verdict of ``m`` under ``claim``'s direction, tolerance and kind (the one rule, :func:`claim_verdict`),
    not testable when :func:`reason` gives a reason.

    Example: a ``down`` claim measured ``-12.0 [-20.0, -4.0] pp`` is ``"replicates"``.
    """
    return claim_verdict(claim.direction, m.ci, m.null, claim_tolerance(claim, m), reason(claim, m), claim.kind)


def verdict_text(claim: Claim, m: Measurement) -> str:
    """:func:`judge` for a report's table cell: an inconclusive estimate whose point lies on the other side of the
    null from the paper's says so (``"inconclusive (point estimate opposite in sign)"``)."""
    v = judge(claim, m)
    side = {"up": 1, "down": -1}.get(claim.direction, 0)
    opposite = v == INCONCLUSIVE and m.value is not None and (m.value - m.null) * side < 0
    return v + (" (point estimate opposite in sign)" if opposite else "")


def _row(claim: Claim, test: Test, run: Path, index: int) -> Row:
    """``test`` of ``claim`` measured on the run folder ``run`` and judged (:func:`judge`); a measurement that
    states no resampled units (or, for a no-change claim in pp, no answer size) is an error."""
    m = test.measure(run)
    if m.units is None:
        raise ValueError(f"{claim.key} ({test.run}, {test.rule}): the measurement states no resampled units "
                         "(Measurement.units)")
    if claim.direction == "none" and m.unit == "pp" and m.step is None:
        raise ValueError(f"{claim.key} ({test.run}): a no-change claim in pp states the size of one answer "
                         "(Measurement.step)")
    return Row(claim, test, run_model(run), m, judge(claim, m), index)


def _check_primaries(claim: Claim, rows: Sequence[Row]) -> None:
    """Every model ``claim`` is tested on has exactly one primary row."""
    for model in dict.fromkeys(r.model for r in rows):
        primary = [r for r in rows if r.model == model and r.test.primary]
        if len(primary) != 1:
            raise ValueError(f"{claim.key}: {len(primary)} primary tests on {model}; every model has exactly one")


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
    (:func:`claim_verdict`); rows are numbered from 1 in order. Every measurement states its resampled units and
    every model of a claim has one primary test (else ValueError)."""
    rows: list[Row] = []
    for claim in claims:
        mine = []
        for test in claim.tests:
            run = Path(artifacts) / test.run
            if not run.is_dir():
                raise FileNotFoundError(f"{claim.key}: run {test.run} not found under {artifacts}")
            mine.append(_row(claim, test, run, len(rows) + len(mine) + 1))
        _check_primaries(claim, mine)
        rows += mine
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


# --------------------------------------------------------------------------- claims, not rows


@dataclass(frozen=True)
class ClaimResult:
    """A claim's verdict over models: its primary row on each model and what they give together.

    Attributes:
        claim: the claim.
        rows: its primary row on each model, in row order.
        verdict: replicates (or, for a no-effect claim, no effect found; a construction check: holds) when the
            primary row does on at least one model; else opposite when one is, else inconclusive when one is, else
            not testable here (does not hold, for a check that does not).
        models: the models whose primary row gives ``verdict``.
    """

    claim: Claim
    rows: tuple[Row, ...]
    verdict: str
    models: tuple[str, ...]


#: The order in which a claim's primary rows decide its verdict (the first present wins).
_CLAIM_ORDER = (REPLICATES, NO_EFFECT, HOLDS, OPPOSITE, DOES_NOT_HOLD, INCONCLUSIVE, NOT_TESTABLE)


def claim_results(rows: Sequence[Row]) -> list[ClaimResult]:
    """Each claim of ``rows`` (in order) judged on its primary rows (:attr:`Test.primary`): a claim replicates when
    its primary row replicates on at least one model; secondary rows never decide it.

    Example: a claim whose primary rows are inconclusive on SmolLM2 and replicate on Qwen replicates, with
    ``models == ("qwen...",)``; one whose only replicating row is a lenient-rule secondary is inconclusive.
    """
    out = []
    for key in dict.fromkeys(r.claim.key for r in rows):
        primary = tuple(r for r in rows if r.claim.key == key and r.test.primary)
        verdict = next(v for v in _CLAIM_ORDER if any(r.verdict == v for r in primary))
        out.append(ClaimResult(primary[0].claim, primary, verdict,
                               tuple(dict.fromkeys(r.model for r in primary if r.verdict == verdict))))
    return out
