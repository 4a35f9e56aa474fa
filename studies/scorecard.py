"""The scorecard: every claim of the paper a committed study tests, with a verdict computed by one rule.

``kvprobe report scorecard`` reads the committed runs under ``artifacts/`` (their ``summary.json``; the
recognition groups' ``readouts.json`` and ``scores.json``; BABILong's answer rows for its chance level)
and writes ``docs/scorecard.md`` and ``docs/scorecard.json``. Nothing here is a result: every estimate
and interval is read from the runs, and every verdict is computed by :func:`verdict`.

A claim (:class:`Claim`) is one finding of the paper: its short statement, a verbatim quote with the
lines of the paper's LaTeX source it comes from, the paper's numbers, and the direction the paper found.
Each of its tests (:class:`Test`) reads one committed run under one grading rule and reference arm and
returns a :class:`Measurement`: the estimate with its 95 % interval, the value that means "no effect"
(0 for a change, 0.5 for an AUC, the paper's 0.60 for its recognition criterion), and, when the run
cannot test the claim, the reason.

The verdict rule (also in docs/fidelity.md):

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
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.readouts.stats import MIN_HISTORIES, MIN_RESAMPLED_UNITS, clopper_pearson
from kvprobe.studies.common.report import (DIRECTIONS, FLOOR, INCONCLUSIVE, NOT_TESTABLE, OPPOSITE, REPLICATES, claim_verdict,
                                   estimate, model_name, table_head, table_row)

__all__ = ["CLAIMS", "FEW_UNITS", "FLOOR", "INCONCLUSIVE", "NOT_TESTABLE", "OPPOSITE", "REPLICATES", "VERDICTS",
           "Claim", "Measurement", "Paper", "Row", "Test", "evaluate", "format_markdown", "scorecard_json",
           "verdict", "write_scorecard"]

#: The verdicts, in the order the summary table lists them.
VERDICTS = (REPLICATES, OPPOSITE, INCONCLUSIVE, NOT_TESTABLE)
#: Intervals resting on fewer resampled units than this are flagged (percentile bootstraps are unreliable).
FEW_UNITS = MIN_RESAMPLED_UNITS
#: Default tolerance of a no-change claim, by unit (the interval must lie within null +- tolerance).
TOLERANCE = {"pp": 5.0, "AUC": 0.05}

#: The paper, cited by title (docs never point at a local copy).
PAPER_TITLE = "Positions Are Not Facts: The Mismatch Between KV Caches and Memory"


# --------------------------------------------------------------------------- data


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
        text = _lines(self.lines)
        if self.numbers_lines and self.numbers_lines != self.lines:
            text += f", numbers {_lines(self.numbers_lines)}"
        return text


def _lines(span: tuple[int, int]) -> str:
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


#: The rule itself lives once, in ``kvprobe.studies.common.report`` (every report uses it too).
verdict = claim_verdict


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


def _reasons(*reasons: str | None) -> str | None:
    """Every reason given, joined (None if none)."""
    found = [r for r in reasons if r]
    return "; ".join(found) if found else None


# --------------------------------------------------------------------------- reading runs


def _json(path: Path) -> Any:
    return json.loads(path.read_text())


def _summary(run: Path) -> dict[str, Any]:
    return _json(run / "summary.json")


def _model(run: Path) -> str:
    """The run's model: ``config.json`` of a study run, else the recognition group's ``readouts.json``."""
    if (run / "config.json").exists():
        return model_name(_json(run / "config.json"))
    if (run / "readouts.json").exists():
        return str(_json(run / "readouts.json").get("model", "?"))
    return "?"


def _find(items: Iterable[dict[str, Any]], **match: Any) -> dict[str, Any]:
    """The one item whose fields equal ``match`` (KeyError naming the fields if none)."""
    for item in items:
        if all(item.get(k) == v for k, v in match.items()):
            return item
    raise KeyError(f"no entry with {match}")


def _count_pp(change: dict[str, Any], n: int) -> tuple[float, tuple[float, float] | None]:
    """A paired change in answers (``change``, ``ci`` in counts) as percentage points of ``n``; no interval when
    the summary gives none (too few histories to resample)."""
    ci = change["ci"]
    return 100 * change["change"] / n, None if ci is None else (100 * ci[0] / n, 100 * ci[1] / n)


def _frac_pp(value: float, ci: Sequence[float]) -> tuple[float, tuple[float, float]]:
    """A change in shares (0.25) as percentage points (25.0)."""
    return 100 * value, (100 * ci[0], 100 * ci[1])


def _excludes_zero(ci: Sequence[float]) -> bool:
    return ci[0] > 0 or ci[1] < 0


def _pp(value: float, ci: Sequence[float] | None, n: str, reference: str, reason: str | None = None,
        units: int | None = None, note: str = "") -> Measurement:
    return Measurement(value, None if ci is None else tuple(ci), "pp", "+.1f", n, reference, units=units,
                       not_testable=reason, note=note)


# --------------------------------------------------------------------------- quantity


def _quantity_cell(s: dict[str, Any], information: str, condition: str, relation: str = "replacement",
                   query: str = "current") -> dict[str, Any]:
    return _find(s["cells"], relation=relation, information=information, query=query, condition=condition)


def quantity_margin(information: str) -> Callable[[Path], Measurement]:
    """Margin change of the whole-source mask against its equal-token control (replacements, current question)."""
    def measure(run: Path) -> Measurement:
        cell = _quantity_cell(_summary(run), information, "source")
        m = cell["margin_change_vs_control"]
        return Measurement(m["mean"], tuple(m["ci"]), "nats", "+.2f", f"{cell['n']} groups", "source-control",
                           units=cell["n"])
    return measure


def quantity_margin_follows_old(information: str) -> Callable[[Path], Measurement]:
    """Spearman(Delta m, D_o) over the replacements' current question (source mask vs its control; the summary's
    ``candidate_decomposition``)."""
    def measure(run: Path) -> Measurement:
        e = _summary(run)["candidate_decomposition"]["per_information"][information]
        return Measurement(e["spearman_delta_m_d_o"], tuple(e["spearman_ci"]), "Spearman", ".2f", f"{e['n']} groups",
                           "source-control", units=e["n"])
    return measure


def quantity_change(information: str, condition: str, rule: str) -> Callable[[Path], Measurement]:
    """Answer change of a mask against its control (full access if the control is not inert), under ``rule``.

    ``rule`` is a summary column: ``complete`` (the paper's complete answer) or ``lenient_complete`` (ours).
    """
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        cell = _quantity_cell(s, information, condition)
        control_name = f"{condition}-control"
        control = _quantity_cell(s, information, control_name)
        full = _quantity_cell(s, information, "full")
        note = ""
        reference, change = control, cell[f"{rule}_vs_control"]
        ref_name = control_name
        own = control[f"{rule}_vs_full"]
        if _excludes_zero(own["net_ci"]):
            reference, change, ref_name = full, cell[f"{rule}_vs_full"], "full"
            note = (f"{control_name} is not neutral (its own change against full access: "
                    f"{estimate(*_frac_pp(own['net'], own['net_ci']), '+.1f')} pp), so full access is the reference")
        value, ci = _frac_pp(change["net"], change["net_ci"])
        return _pp(value, ci, f"{cell['n']} groups", f"{ref_name} {reference[rule]}/{reference['n']}",
                   floor_reason(reference[rule], reference["n"], ref_name), units=cell["n"], note=note)
    return measure


def quantity_recompute(information: str, rule: str) -> Callable[[Path], Measurement]:
    """Text recompute against the source mask (the paper's comparison) under ``rule``."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        recompute, source = _quantity_cell(s, information, "recompute"), _quantity_cell(s, information, "source")
        reason = floor_reason(source[rule], source["n"], "source mask")
        reference = f"source mask {source[rule]}/{source['n']}; recompute {recompute[rule]}/{recompute['n']}"
        change = recompute[f"{rule}_vs_source"]
        value, ci = _frac_pp(change["net"], change["net_ci"])
        return _pp(value, ci, f"{recompute['n']} groups", reference, reason, units=recompute["n"])
    return measure


def quantity_warning(rule: str, information: str) -> Callable[[Path], Measurement]:
    """AUC of the current answer's probability drop D_c ranking lost above kept answers."""
    def measure(run: Path) -> Measurement:
        w = _summary(run)["warning_signal"][rule][information]
        n = f"{w['lost']} lost, {w['kept']} kept"
        if w["auc"] is None:
            return Measurement(None, None, "AUC", ".3f", n, null=0.5,
                               not_testable=f"AUC undefined: {w['lost']} lost and {w['kept']} kept answers "
                               "(a class is empty)")
        return Measurement(w["auc"], tuple(w["auc_ci"]), "AUC", ".3f", n, null=0.5)
    return measure


# --------------------------------------------------------------------------- matched scores


def matched_margin(subset: str) -> Callable[[Path], Measurement]:
    """Delta m = m(mask) - m(control), nats."""
    def measure(run: Path) -> Measurement:
        sub = _summary(run)["subsets"][subset]
        d = sub["delta_m"]
        return Measurement(d["value"], tuple(d["ci"]), "nats", "+.2f", f"{sub['n']} cases, {sub['groups']} groups",
                           "control", units=sub["groups"])
    return measure


def matched_accuracy(subset: str, rule: str, chance: float | None = None) -> Callable[[Path], Measurement]:
    """Mask minus control accuracy (pp), or mask minus full access when the control is not inert;
    ``chance``: the share a random pick gets right (OAKS: one of two answer texts), checked on the reference."""
    def measure(run: Path) -> Measurement:
        sub = _summary(run)["subsets"][subset]
        r = sub["rules"][rule]
        change, ref_name, note = r["mask_vs_control"], "control", ""
        own, masked = r["control_vs_full"], r["mask_vs_control"]
        if _excludes_zero(own["ci"]):
            change, ref_name = r["mask_vs_full"], "full"
            note = (f"the control is not neutral: control - full {estimate(own['pp'], own['ci'], '+.1f')} pp, so full "
                    f"access is the reference (mask - control: {estimate(masked['pp'], masked['ci'], '+.1f')} pp)")
        correct = r["correct"][ref_name]
        reason = _reasons(floor_reason(correct, sub["n"], ref_name),
                          None if chance is None else chance_reason(correct, sub["n"], chance * sub["n"], ref_name,
                                                                    "a random pick of the two answer texts"))
        return _pp(change["pp"], change["ci"], f"{sub['n']} cases, {sub['groups']} groups",
                   f"{ref_name} {correct}/{sub['n']}; mask {r['correct']['mask']}/{sub['n']}", reason,
                   units=sub["groups"], note=note)
    return measure


# --------------------------------------------------------------------------- MQuAKE


def mquake_vs_full(kind: str, condition: str, rule: str) -> Callable[[Path], Measurement]:
    """A condition's change in correct answers against full access (the run's paired case bootstrap)."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        cell, full = _find(s["cells"], kind=kind, policy=condition), _find(s["cells"], kind=kind, policy="full")
        cases = _find(s["any_paraphrase"], policy="full")["cases"]
        value, ci = _count_pp(cell[f"{rule}_change_vs_full"], cell["n"])
        return _pp(value, ci, f"{cell['n']} questions, {cases} cases",
                   f"full {full[rule]}/{full['n']}; {condition} {cell[rule]}/{cell['n']}",
                   floor_reason(full[rule], full["n"], "full access"), units=cases)
    return measure


def mquake_vs_source(kind: str, condition: str, rule: str, gain: bool) -> Callable[[Path], Measurement]:
    """A condition against the source mask, from the no-context run's tables (their subset must be every question).

    ``gain``: the paper's effect is a gain (the floor is checked on full access, else on the source mask).
    """
    def measure(run: Path) -> Measurement:
        table = _find(_summary(run)["no_context"], rule=rule, query=kind)
        if table["subset"] != table["units"]:
            raise ValueError(f"{run}: the no-context subset ({table['subset']}) is not every question "
                             f"({table['units']}); it is not the whole-sample comparison")
        cell = _find(table["conditions"], condition=condition)
        source = _find(table["conditions"], condition="source-mask")
        full = _find(table["conditions"], condition="full")
        ch = cell["change_vs_reference"]
        value, ci = _frac_pp(ch["change"], ch["ci"])
        floor = (floor_reason(full["correct"], full["n"], "full access") if gain
                 else floor_reason(source["correct"], source["n"], "source mask"))
        return _pp(value, ci, f"{cell['n']} questions, {table['groups']} cases",
                   f"source mask {source['correct']}/{source['n']}; {condition} {cell['correct']}/{cell['n']}",
                   floor, units=table["groups"])
    return measure


def mquake_routing(rule: str) -> Callable[[Path], Measurement]:
    """The offline router (historical prefix -> full access, every other question -> text recompute) minus the
    best single policy, over every question (paper L4309-4316); the best policy is chosen after the results."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        routing = s["routing"]
        r = routing[rule]
        cases = _find(s["any_paraphrase"], policy="full")["cases"]
        value, ci = _count_pp(r["change_vs_best"], routing["n"])
        best = r["policies"][r["best"]]
        return _pp(value, ci, f"{routing['n']} questions, {cases} cases",
                   f"best single policy {r['best']} {best}/{routing['n']}; routed {r['routed']}/{routing['n']}",
                   floor_reason(best, routing["n"], f"best single policy ({r['best']})"), units=cases)
    return measure


def mquake_current_value(rule: str) -> Callable[[Path], Measurement]:
    """Historical questions answered with the current value: text recompute minus the source mask (L4246-4252)."""
    def measure(run: Path) -> Measurement:
        cv = _summary(run)["current_value"]
        cells = {c["policy"]: c for c in cv[rule]["cells"]}
        source, recompute = cells["source-mask"], cells["recompute"]
        value, ci = _count_pp(recompute["change_vs_source"], cv["n"])
        reason = (None if source["count"] + recompute["count"] else
                  "no historical answer gives the current value under either arm (0 and 0)")
        return _pp(value, ci, f"{cv['n']} historical questions, {cv['n']} cases",
                   f"source mask {source['count']}/{cv['n']}; recompute {recompute['count']}/{cv['n']}", reason,
                   units=cv["n"])
    return measure


def mquake_strata(rule: str) -> Callable[[Path], Measurement]:
    """Recompute-minus-source change on historical questions, retained-text stratum minus masked-only stratum
    (paper L4231-4238); the floor is full access in the retained stratum."""
    def measure(run: Path) -> Measurement:
        hist = _summary(run)["recompute_vs_source"][rule]["historical"]
        retained, masked = hist["strata"]["retained"], hist["strata"]["masked_only"]
        d = hist["difference"]
        return _pp(d["pp"], d["ci_pp"], f"{retained['n']} retained + {masked['n']} masked-only cases",
                   f"recompute - source: retained {retained['change']:+d}, masked-only {masked['change']:+d}",
                   floor_reason(retained["correct"]["full"], retained["n"], "full access (retained stratum)"),
                   units=retained["cases"] + masked["cases"])
    return measure


# --------------------------------------------------------------------------- BABILong


def _majority(run: Path, task: str, length: int) -> tuple[int, int, str]:
    """(count, n, answer) of the most common gold answer among the full-access rows of (task, length)."""
    from kvprobe.studies.common.runner import read_rows

    answers = Counter(r["answer"] for r in read_rows(run)
                      if r["task"] == task and r["length"] == length and r["condition"] == "full")
    answer, count = sorted(answers.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    return count, sum(answers.values()), answer


def babilong_change(task: str, length: int, condition: str, gain: bool) -> Callable[[Path], Measurement]:
    """A condition's change in official-parser answers against full access; chance = the majority answer."""
    def measure(run: Path) -> Measurement:
        cells = _summary(run)["cells"]
        cell, full = (_find(cells, task=task, length=length, policy=condition),
                      _find(cells, task=task, length=length, policy="full"))
        count, n, answer = _majority(run, task, length)
        value, ci = _count_pp(cell["official_change_vs_full"], cell["n"])
        reason = _reasons(floor_reason(full["official"], full["n"], "full access"),
                        chance_reason(full["official"], full["n"], count, "full access",
                                      f"always answering the most common location ({answer})"))
        return _pp(value, ci, f"{cell['n']} inputs", f"full {full['official']}/{full['n']}; "
                   f"{condition} {cell['official']}/{cell['n']}; majority answer {count}/{n}", reason)
    return measure


# --------------------------------------------------------------------------- note controls


def _note_config(s: dict[str, Any], name: str) -> dict[str, Any]:
    return _find(s["configurations"], configuration=name)


def _configuration_label(name: str) -> str:
    return {"full": "full access", "varied-full": "full access under the varied note"}.get(name, name)


def note_early(rule: str) -> Callable[[Path], Measurement]:
    """Early-note control minus full access (pp) on the label question."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        early, full = _note_config(s, "early"), _note_config(s, "full")
        ch = early["vs_full"][rule]
        return _pp(ch["pp"], ch["pp_ci"], f"{s['units']} histories, {s['groups']} groups",
                   f"full {full['correct'][rule]}/{full['n']}; early {early['correct'][rule]}/{early['n']}",
                   floor_reason(full["correct"][rule], full["n"], "full access"), units=s["groups"])
    return measure


def note_by_rule(contrast: Sequence[str], baselines: Sequence[str]) -> Callable[[str], Callable[[Path], Measurement]]:
    """A ``by_rule`` contrast, by its key path (``("near_far",)``, ``("note_profiles", "loss_difference")``);
    the floor is checked on the ``baselines`` configurations."""
    def for_rule(rule: str) -> Callable[[Path], Measurement]:
        def measure(run: Path) -> Measurement:
            s = _summary(run)
            ch = s["by_rule"][rule]
            for key in contrast:
                ch = ch[key]
            rows = [_note_config(s, b) for b in baselines]
            counts = "; ".join(f"{_configuration_label(a['configuration'])} {a['correct'][rule]}/{a['n']}" for a in rows)
            reason = _reasons(*(floor_reason(a["correct"][rule], a["n"], _configuration_label(a["configuration"]))
                                for a in rows))
            return _pp(ch["pp"], ch["pp_ci"], f"{s['units']} histories, {s['groups']} groups", counts, reason,
                       units=s["groups"])
        return measure
    return for_rule


def note_margin(run: Path) -> Measurement:
    """Change of the label-vs-UNKNOWN first-token margin under the early-note control (nats)."""
    s = _summary(run)
    m = _note_config(s, "early")["margin_vs_full"]
    return Measurement(m["mean"], tuple(m["ci"]), "nats", "+.2f", f"{s['units']} histories, {s['groups']} groups",
                       "full", units=s["groups"])


# --------------------------------------------------------------------------- detection and recognition


def detection_yes_no(dataset: str) -> Callable[[Path], Measurement]:
    """AUC of the paper's YES/NO score on the test pairs (replacements above non-replacements)."""
    def measure(run: Path) -> Measurement:
        e = _find(_summary(run)["yes_no"], dataset=dataset, split="test")
        a = e["auc"]
        return Measurement(a["auc"], (a["lo"], a["hi"]), "AUC", ".3f", f"{e['n']} pairs", "chance 0.5", null=0.5)
    return measure


def detection_json(detector: str) -> Callable[[Path], Measurement]:
    """Accuracy of a JSON detector on the record test pairs; not testable when it never decides."""
    def measure(run: Path) -> Measurement:
        e = _find(_summary(run)["text_detectors"], dataset="records", split="test", detector=detector)
        unresolved = e["decisions"].get("unresolved", 0)
        if unresolved == e["n"]:
            return Measurement(None, None, "share", ".3f", f"{e['n']} pairs", null=0.5,
                               not_testable=f"no decision: {unresolved} of {e['n']} outputs unresolved "
                               f"({e['capped']} at the token cap)")
        return Measurement(e["accuracy"], tuple(e["accuracy_ci"]), "share", ".3f", f"{e['n']} pairs",
                           "chance 0.5", null=0.5)
    return measure


def _readouts(run: Path) -> dict[str, Any]:
    return _json(run / "readouts.json")


def recognition_auc(table: str, readout: str, null: float) -> Callable[[Path], Measurement]:
    """An AUC of a recognition group: ``role_auc`` (records: role swaps vs role confirmations),
    ``replacement_macro_auc`` or ``matching_macro_auc`` (role pairs), against ``null``."""
    def measure(run: Path) -> Measurement:
        r = _readouts(run)
        a = r[table]["auc"][readout]
        n = (f"{r['n_cases']['test_role']} cases, {r['n_cases']['test_groups']} groups" if table == "role_auc"
             else f"{r['n_cases']['pairs']} pairs, {r['n_cases']['groups']} groups")
        ref = "criterion 0.60" if null != 0.5 else "chance 0.5"
        return Measurement(a["auc"], (a["lo"], a["hi"]), "AUC", ".3f", n, ref, null=null)
    return measure


def recognition_difference(readout: str, baseline: str) -> Callable[[Path], Measurement]:
    """Role AUC of ``readout`` minus ``baseline`` on the same group draws."""
    def measure(run: Path) -> Measurement:
        r = _readouts(run)
        d = r["role_auc"]["diff"][readout][baseline]
        return Measurement(d["diff"], (d["lo"], d["hi"]), "AUC difference", "+.3f",
                           f"{r['n_cases']['test_role']} cases, {r['n_cases']['test_groups']} groups", baseline)
    return measure


def recognition_wins(readout: str) -> Callable[[Path], Measurement]:
    """Share of matched test items whose role swap scores above its role confirmation (exact binomial
    interval; per-case scores from ``scores.json``)."""
    def measure(run: Path) -> Measurement:
        s = _json(run / "scores.json")
        pairs: dict[str, dict[str, float]] = {}
        for case, score, split in zip(s["case_id"], s["scores"][readout], s["split"]):
            if split == "test":
                item, variant = case.rsplit("-", 1)
                pairs.setdefault(item, {})[variant] = score
        complete = [p for p in pairs.values() if "role_swap" in p and "role_confirmation" in p]
        wins = sum(p["role_swap"] > p["role_confirmation"] for p in complete)
        ties = sum(p["role_swap"] == p["role_confirmation"] for p in complete)
        k, n = wins + 0.5 * ties, len(complete)
        lo, hi = clopper_pearson(int(round(k)), n)
        return Measurement(k / n, (lo, hi), "share", ".3f", f"{n} matched pairs: {k:g} wins", "chance 0.5",
                           null=0.5, note=f"{k:g}/{n} items rank the role swap above its confirmation "
                           "(exact binomial interval)")
    return measure


def native_pairs(claim: str) -> Callable[[Path], Measurement]:
    """A native record-pair claim: ``matching`` or ``relation`` (weaker-panel AUC against the paper's 0.60) or
    ``surface`` (the smaller panel's relation-minus-surface difference against 0). The interval is the pair of
    one-sided 95 % bounds (5th and 95th percentiles of the component-bootstrap draws), as the paper's criterion."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        c = s["counts"]
        n = (f"{c['all']['distinct_pairs']} distinct pairs, {c['all']['comparisons']} comparisons, "
             f"{c['intrinsic']['components']} + {c['history']['components']} components")
        units = min(c["intrinsic"]["components"], c["history"]["components"])
        if claim == "surface":
            m = s["min_delta"]
            return Measurement(m["diff"], (m["lower"], m["upper"]), "AUC difference", "+.3f", n,
                               "surface baseline", units=units,
                               note=f"smaller difference: the {m['panel']} panel's; interval = one-sided 95% bounds")
        w = s["weaker"][claim]
        return Measurement(w["auc"], (w["lower"], w["upper"]), "AUC", ".3f", n, "criterion 0.60",
                           null=s["criterion"], units=units,
                           note=f"weaker panel: {w['panel']}; interval = one-sided 95% bounds")
    return measure


# --------------------------------------------------------------------------- fact map, components, derived note


def _fact_scope(run: Path, variant: str | None) -> dict[str, Any]:
    s = _summary(run)
    return s["all"] if variant is None else s["by_variant"][variant]


def fact_map_target(variant: str | None = None) -> Callable[[Path], Measurement]:
    """Recompute minus mask margin change (nats): what states formed with A visible still carry."""
    def measure(run: Path) -> Measurement:
        scope = _fact_scope(run, variant)
        t = scope["target_effect"]
        return Measurement(t["change"], tuple(t["change_ci"]), "nats", "+.3f",
                           f"{scope['n_cases']} histories, {scope['n_groups']} groups", "source mask",
                           units=scope["n_groups"])
    return measure


def fact_map_recovery(condition: str, variant: str | None = None) -> Callable[[Path], Measurement]:
    """Share of the recompute effect a rebuild at fixed positions recovers; undefined when the recompute
    effect's interval includes 0."""
    def measure(run: Path) -> Measurement:
        scope = _fact_scope(run, variant)
        t, c = scope["target_effect"], scope["conditions"][condition]
        n = f"{scope['n_cases']} histories, {scope['n_groups']} groups"
        if not _excludes_zero(t["change_ci"]):
            return Measurement(None, None, "recovery", "+.2f", n, "recompute",
                               not_testable="recovery undefined: the recompute effect "
                               f"{estimate(t['change'], t['change_ci'], '+.3f')} nats has an interval including 0")
        return Measurement(c["recovered"], tuple(c["recovered_ci"]), "recovery", "+.2f", n, "recompute",
                           units=scope["n_groups"])
    return measure


def component_delta(component: str) -> Callable[[Path], Measurement]:
    """Delta_c of zeroing a component at the old span beyond the matched span, with the Bonferroni interval."""
    def measure(run: Path) -> Measurement:
        e = _summary(run)["effects"][component]
        return Measurement(e["delta"], tuple(e["ci_bonferroni"]), "nats", "+.2f", f"{e['n_clusters']} clusters",
                           "matched span", units=e["n_clusters"])
    return measure


def derived_contrast(key: str) -> Callable[[Path], Measurement]:
    """A margin contrast of the derived-note summary (nats)."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        st = _find(s["contrasts"], key=key)["stat"]
        return Measurement(st["mean"], tuple(st["ci"]), "nats", "+.2f", f"{st['n']} groups", "neutral note",
                           units=s["groups"])
    return measure


def derived_accuracy(note: str, query: str, condition: str, rule: str) -> Callable[[Path], Measurement]:
    """A condition's accuracy change against full access (pp) in one note condition; ``rule``: ``strict``
    (the paper's exact JSON field) or ``lenient``."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        cell = _find(s["cells"], note=note, query=query, condition=condition)
        full = _find(s["cells"], note=note, query=query, condition="full")
        ch = cell["vs_full"] if rule == "strict" else cell["vs_full"]["lenient"]
        column = "correct" if rule == "strict" else "lenient_correct"
        reason = floor_reason(full[column], full["n"], "full access")
        return _pp(ch["pp"]["mean"], ch["pp"]["ci"], f"{cell['n']} groups",
                   f"full {full[column]}/{full['n']}; {condition} {cell[column]}/{cell['n']}", reason,
                   units=s["groups"])
    return measure


# --------------------------------------------------------------------------- the remaining studies


def factconsolidation_source(run: Path) -> Measurement:
    """Source mask minus full access, complete answers with EOS (pp of the source-answerable questions)."""
    s = _summary(run)
    cell, full = _find(s["cells"], policy="source"), _find(s["cells"], policy="full")
    n = cell.get("answerable", cell["n"])
    value, ci = _count_pp(cell["complete_change_vs_full"], n)
    histories = len(s["histories"])
    return _pp(value, ci, f"{n} questions, {histories} histories",
               f"full {full['complete_eos']}/{n}; source {cell['complete_eos']}/{n}",
               _reasons(floor_reason(full["complete_eos"], n, "full access"),
                        None if ci is not None else f"no interval: {histories} histories, fewer than {MIN_HISTORIES} "
                        "to resample"), units=histories)


def factconsolidation_fallback(run: Path) -> Measurement:
    """The re-answer fallback (source mask; recompute after a capped answer) minus recompute alone, complete
    answers with EOS (pp of the source-answerable questions)."""
    f = _summary(run)["fallback"]
    value, ci = _count_pp(f["change"], f["n"])
    return _pp(value, ci, f"{f['n']} questions, {f['histories']} histories",
               f"recompute {f['recompute']}/{f['n']}; fallback {f['fallback']}/{f['n']} ({f['fallbacks']} fallbacks)",
               _reasons(floor_reason(f["recompute"], f["n"], "recompute"),
                        None if ci is not None else f"no interval: {f['histories']} histories, fewer than "
                        f"{MIN_HISTORIES} to resample"), units=f["histories"])


def factorial_factor(factor: str, rule: str) -> Callable[[Path], Measurement]:
    """A factor contrast of the quantity matrix (pp): the change of the mask-minus-control contrast."""
    def measure(run: Path) -> Measurement:
        q = _summary(run)["matrices"]["quantity"]
        f = q["factors"][rule][factor]
        full = [c for k, c in q["counts"].items() if k.endswith("/full")]
        correct, n = sum(c[rule] for c in full), sum(c["n"] for c in full)
        return _pp(f["estimate"], f["ci"], f"{f['n']} cases per cell, {q['groups']} groups", f"full {correct}/{n}",
                   floor_reason(correct, n, "full access"), units=q["groups"])
    return measure


def minteval_source(run: Path) -> Measurement:
    """Source mask minus full access, exact match with EOS, all questions (component bootstrap)."""
    s = _summary(run)
    cell, full = _find(s["cells"], scope="all", policy="source"), _find(s["cells"], scope="all", policy="full")
    ch = cell["change_component"]
    return _pp(ch["pp"], ch["ci"], f"{cell['n']} questions, {s['components']} components",
               f"full {full['em']}/{full['n']}", floor_reason(full["em"], full["n"], "full access"),
               units=s["components"])


#: The committed open-OAKS runs (one set of answers) by their grader: artifact suffix, how a test names it.
OAKS_OPEN_GRADERS = (("rule", "rule grader"), ("judged", "Qwen2.5-Coder-0.5B judge, 38 questions"),
                     ("judged-1.5b", "Qwen2.5-Coder-1.5B judge, 38 questions"))


def oaks_open(quantity: str) -> Callable[[Path], Measurement]:
    """Open OAKS answers on the answerable questions: ``mask_vs_full`` (source complete, mask minus full) or
    ``agreement_minus_complete`` (reference agreement minus source completeness, same grader), pp over
    reused-source components. The rule grader has one protocol, so the difference is not testable there; under a
    model grader both need source-complete answers under full access (the floor, as the study's own report)."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        panel = s["panels"]["answerable"]
        counts = panel["protocols"]["complete"]["counts"]
        graded = ", ".join(s["graders"])
        if quantity == "mask_vs_full":
            d = panel["protocols"]["complete"]["mask_vs_full"]
            return _pp(d["pp"], d["ci"], f"{panel['n']} answerable questions, {panel['components']} components",
                       f"full {counts['full']}/{panel['n']}; mask {counts['mask']}/{panel['n']} ({graded})",
                       floor_reason(counts["full"], panel["n"], "full access"), units=panel["components"])
        d = panel["agreement_minus_complete"]
        rule_only = all(g.startswith("rule") for g in s["graders"])
        return _pp(d["pp"], d["ci"], f"{panel['n']} answerable questions, {panel['components']} components",
                   f"source complete, full access {counts['full']}/{panel['n']} ({graded})",
                   "the rule grader has one protocol: agreement and completeness coincide" if rule_only
                   else floor_reason(counts["full"], panel["n"], "full access"), units=panel["components"])
    return measure


def query_aware(condition: str, rule: str, reference: str) -> Callable[[Path], Measurement]:
    """A condition's change (pp) against ``reference`` (``full`` or ``source-mask``) on the current question,
    all histories; ``rule``: ``correct`` (the paper's exact field) or ``lenient``. The floor is checked on
    full access."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        cell = _find(s["cells"], query="current", subset="all", arm=condition)
        full = _find(s["cells"], query="current", subset="all", arm="full")
        ref = _find(s["cells"], query="current", subset="all", arm=reference)
        value, ci = _count_pp(cell[f"{rule}_vs_{reference}"], cell["n"])
        return _pp(value, ci, f"{cell['n']} histories", f"{reference} {ref[rule]}/{ref['n']}; {condition} {cell[rule]}/"
                   f"{cell['n']}", floor_reason(full[rule], full["n"], "full access"))
    return measure


def records_change(query: str, condition: str, rule: str) -> Callable[[Path], Measurement]:
    """A condition's change (pp) against keep-all; ``rule``: ``correct`` (exact field) or ``lenient``."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        cell = _find(s["cells"], query=query, policy=condition, subset="all")
        keep = _find(s["cells"], query=query, policy="keep-all", subset="all")
        value, ci = _count_pp(cell[f"{rule}_change"], cell["n"])
        return _pp(value, ci, f"{cell['n']} histories", f"keep-all {keep[rule]}/{keep['n']}; {condition} "
                   f"{cell[rule]}/{cell['n']}", floor_reason(keep[rule], keep["n"], "keep-all"))
    return measure


def requests_historical(condition: str, rule: str, lines: int = 0) -> Callable[[Path], Measurement]:
    """Historical-request accuracy change (pp) of a condition against keep-all; ``rule``: ``correct`` or
    ``lenient``. A detector condition whose detector never fired is not testable."""
    def measure(run: Path) -> Measurement:
        length = _find(_summary(run)["lengths"], lines=lines)
        p, keep = length["policies"][condition], length["policies"]["keep-all"]
        a, k = p["accuracy"]["historical"], keep["accuracy"]["historical"]
        ch = a[rule]["change_pp"]
        fired = p.get("fired")
        reason = None
        if fired == 0:
            reason = f"the detector never fired (0 of {length['histories']} histories)"
        reason = reason or floor_reason(k[rule]["correct"], k["n"], "keep-all")
        return _pp(ch["mean"], ch["ci"], f"{a['n']} requests, {length['histories']} histories",
                   f"keep-all {k[rule]['correct']}/{k['n']}; {condition} {a[rule]['correct']}/{a['n']}", reason,
                   units=length["histories"])
    return measure


def revisions_change(operation: str) -> Callable[[Path], Measurement]:
    """An operation's change in complete answers against full access (pp; article bootstrap)."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        cell, full = _find(s["cells"], operation=operation), _find(s["cells"], operation="full")
        ch = cell["change_vs_full"]
        return _pp(ch["pp"], ch["pp_ci"], f"{cell['n']} questions, {s['articles']} articles",
                   f"full {full['complete']}/{full['n']}", floor_reason(full["complete"], full["n"], "full access"),
                   units=s["articles"])
    return measure


#: The public-arm session-bias run's protocol, as its tests name it.
PUBLIC_ARMS = ("official LongMemEval prompts, Qwen2.5-Coder-1.5B judge; capacity 512; questions without groups "
               "crossing the split")


def public_arm_tests(arm: str, label: str) -> tuple[Test, ...]:
    """The public-arm run's tests of one arm against full access: judged, then EOS-restricted."""
    return tuple(Test("session-bias/smollm2-val", f"{PUBLIC_ARMS}; {'EOS-restricted; ' * eos}{label} vs full",
                      session_bias("without_crossing_groups", arm, eos=eos)) for eos in (False, True))


def session_bias(subset: str, condition: str, eos: bool = False) -> Callable[[Path], Measurement]:
    """A condition's change against full access (pp) on a question subset; ``eos``: the EOS-restricted counts
    (correct and ended by EOS), the paper's termination sensitivity."""
    def measure(run: Path) -> Measurement:
        sub = _find(_summary(run)["subsets"], key=subset)
        a, full = sub["arms"][condition], sub["arms"]["full"]
        ch, correct = (a["eos_vs_full"], full["eos_correct"]) if eos else (a["vs_full"], full["correct"])
        return _pp(ch["pp"], ch["ci"], f"{sub['questions']} questions, {sub['groups']} groups",
                   f"full {correct}/{full['n']}", floor_reason(correct, full["n"], "full access"),
                   units=sub["groups"])
    return measure


def source_estimate(name: str, unit: str, fmt: str, fmt_name: str = "segments",
                    chance_accuracy: bool = False) -> Callable[[Path], Measurement]:
    """An estimate of the role-matched (or OAKS) protocol; ``chance_accuracy``: the control's two-way
    choice accuracy at or below 50 % makes it not testable."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        e = s["formats"][fmt_name]["estimates"]
        v = e[name]
        reason, reference = None, "control"
        if chance_accuracy:
            acc = e["accuracy_control"]["value"]
            reference = f"control accuracy {acc:.1f}%"
            if acc <= 50:
                reason = f"control at or below chance: {acc:.1f}% of two-way choices right"
        return Measurement(v["value"], tuple(v["ci"]), unit, fmt, f"{s['events']} events", reference,
                           units=s["groups"], not_testable=reason)
    return measure


def prompt_format(run: Path) -> Measurement:
    """Native minus raw Delta_m (nats), same draws for both formats."""
    s = _summary(run)
    d = s["native_minus_raw"]["delta_m"]
    return Measurement(d["value"], tuple(d["ci"]), "nats", "+.2f", f"{s['events']} events", "raw format",
                       units=s["groups"])


def question_relevance(table: str, signal: str) -> Callable[[Path], Measurement]:
    """``replacement_auc`` or ``question_relevance`` of one signal (null 0.5)."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        e = s[table][signal]
        value, ci = (e["auc"], (e["lo"], e["hi"])) if table == "replacement_auc" else (e["value"], tuple(e["ci"]))
        return Measurement(value, ci, "AUC" if table == "replacement_auc" else "share", ".3f",
                           f"{s['clusters']} clusters", "chance 0.5", null=0.5, units=s["clusters"])
    return measure


def cross_reading(rule: str, reader: str = "main") -> Callable[[Path], Measurement]:
    """Cross minus own read, current question, full access (pp); ``rule``: ``complete`` or
    ``lenient_complete``."""
    def measure(run: Path) -> Measurement:
        s = _summary(run)
        r = s["readers"][reader]["current"]
        ch = r[f"{rule}_cross_minus_own"]["full"]
        own = r["arms"]["own/full"][rule]
        return _pp(ch["pp"], ch["pp_ci"], f"{r['n']} cases, {s['groups']} groups", f"own cache {own}/{r['n']}",
                   floor_reason(own, r["n"], "own cache"), units=s["groups"])
    return measure


# --------------------------------------------------------------------------- the claims

QUANTITY = "quantity/smollm2-135m-instruct"
QUANTITY_QWEN = "quantity/qwen2.5-coder-1.5b-instruct"
#: The committed quantity runs, one per model (the first writes no JSON answer, the second does).
QUANTITY_RUNS = (QUANTITY, QUANTITY_QWEN)
MATCHED_SMOL, MATCHED_QWEN = "matched-scores/smollm2-135m-instruct", "matched-scores/qwen2.5-coder-0.5b-instruct"
MATCHED_QWEN_15 = "matched-scores/qwen2.5-coder-1.5b-instruct"
MATCHED_SMOL_OAKS = "matched-scores/smollm2-135m-instruct-oaks"
MQUAKE, MQUAKE_NC = "mquake/smollm2-135m-instruct", "mquake/smollm2-135m-instruct-no-context"
BABI_8K, BABI_SHORT = "babilong/smollm2-135m-instruct-8k", "babilong/smollm2-135m-instruct"
NOTES_SMOL, NOTES_QWEN = "note-controls/smollm2-135m-instruct", "note-controls/qwen2.5-coder-0.5b-instruct"
REC_SMOL, REC_GEMMA = "recognition/smollm2-135m-instruct", "recognition/gemma3-270m"
#: The committed native record-pair runs.
NATIVE_PAIR_MODELS = ("smollm2-135m-instruct", "gemma3-270m")
SOURCE_MODELS = ("smollm2-135m-instruct", "gemma3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")

PAPER_RULE = "paper's rule"
LENIENT = "lenient (ours)"

def _mquake_tests(condition: str, kind: str, gain: bool = False) -> tuple[Test, ...]:
    """The paper's exact match and our contains rule for ``policy`` on ``kind``: the source mask against full
    access (the main run), every other policy against the source mask (the no-context run's tables)."""
    if condition == "source-mask":
        run, against = MQUAKE, "full"

        def make(rule: str) -> Callable[[Path], Measurement]:
            return mquake_vs_full(kind, condition, rule)
    else:
        run, against = MQUAKE_NC, "source mask"

        def make(rule: str) -> Callable[[Path], Measurement]:
            return mquake_vs_source(kind, condition, rule, gain)
    where = f"{condition} vs {against}; " + ("current paraphrases" if kind == "current" else "historical question")
    return (Test(run, f"{PAPER_RULE}: normalized exact match with EOS; {where}", make("em")),
            Test(run, f"{LENIENT}: answer or alias contained; {where}", make("contains")))


def _mquake_rules(what: str, measure: Callable[[str], Callable[[Path], Measurement]]) -> tuple[Test, ...]:
    """The main MQuAKE run read by ``measure(rule)`` under the paper's exact match and our contains rule."""
    return (Test(MQUAKE, f"{PAPER_RULE}: normalized exact match with EOS; {what}", measure("em")),
            Test(MQUAKE, f"{LENIENT}: answer or alias contained; {what}", measure("contains")))


def _babilong_tests(task: str, condition: str, gain: bool = False) -> tuple[Test, ...]:
    """``policy`` against full access on ``task`` in the 8k run and at both short lengths."""
    name = {"naive": "naive mask", "dependency": "dependency rule"}[condition]
    rule = f"official location parser with EOS; {name} vs full; {task}"
    return (Test(BABI_8K, f"{rule}, 7.5k tokens", babilong_change(task, 7500, condition, gain)),
            *(Test(BABI_SHORT, f"{rule}, {length} filler tokens", babilong_change(task, length, condition, gain))
              for length in (0, 1000)))


def _note_tests(compared: str, make: Callable[[str], Callable[[Path], Measurement]]) -> tuple[Test, ...]:
    """SmolLM2 under the paper's label rule and the lenient rule, Qwen2.5-Coder under the paper's rule."""
    paper = f"{PAPER_RULE}: label in the JSON answer field, EOS; {compared}"
    return (Test(NOTES_SMOL, paper, make("label_correct")),
            Test(NOTES_SMOL, f"{LENIENT}: label mentioned first; {compared}", make("lenient_correct")),
            Test(NOTES_QWEN, paper, make("label_correct")))


def _role_tests(readout: str) -> tuple[Test, ...]:
    """A readout's pooled role AUC on both models (vs chance) and SmolLM2's matched-pair wins."""
    pooled = f"pooled AUC of {readout}, role swaps vs role confirmations; vs chance 0.5"
    return (Test(f"{REC_SMOL}/records", pooled, recognition_auc("role_auc", readout, 0.5)),
            Test(f"{REC_SMOL}/records", f"matched pairs: role swap above its own role confirmation ({readout}); "
                 "vs 0.5", recognition_wins(readout)),
            Test(f"{REC_GEMMA}/records", pooled, recognition_auc("role_auc", readout, 0.5)))


def _both_recognition_models(group: str, rule: str,
                             measure: Callable[[Path], Measurement]) -> tuple[Test, ...]:
    """The same readout test on SmolLM2's and Gemma 3's recognition group ``group``."""
    return tuple(Test(f"{model}/{group}", rule, measure) for model in (REC_SMOL, REC_GEMMA))


_near_far = note_by_rule(("near_far",), ("full",))
_varied = note_by_rule(("note_profiles", "loss_difference"), ("full", "varied-full"))

CLAIMS: tuple[Claim, ...] = (
    # ---------------------------------------------------------------- quantity
    Claim("quantity.margin", "quantity",
          "Hiding record A raises the current-minus-old margin beyond the equal-token control",
          Paper("Whole-source masking raises the current-versus-old margin in all eight generators, by "
                "7.06--22.81 nats relative to the control", (357, 358),
                "Preferring the New Value Does Not Ensure a Complete Answer", "+7.06 to +22.81 nats, eight models"),
          "up",
          tuple(Test(run, "candidate margin; source mask vs source-control; 60 replacements, B refers to A's unit",
                     quantity_margin("unit_from_a")) for run in QUANTITY_RUNS)),
    Claim("quantity.margin-follows-old", "quantity",
          "The margin gain follows the old answer's drop D_o",
          Paper("The margin gain accordingly follows the old answer", (4129, 4129),
                "Candidate Margin and Answer Likelihood",
                "Spearman 0.91-0.99 in seven models, 0.67 in Qwen3-4B", (4129, 4131)),
          "up",
          tuple(Test(run, "Spearman(Delta m, D_o); source mask vs source-control; 60 replacements, B refers to A's "
                     "unit", quantity_margin_follows_old("unit_from_a")) for run in QUANTITY_RUNS)),
    Claim("quantity.unit-loss", "quantity",
          "When only A states the unit, hiding A loses complete current answers",
          Paper("Full access and source-mask controls both give 98.3--100% (59--60) complete answers per model; "
                "the same six lose answers against either.", (350, 352),
                "Preferring the New Value Does Not Ensure a Complete Answer",
                "full access and controls 98.3-100% (59-60 of 60); six of eight models lose answers"),
          "down",
          tuple(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: complete answer (one JSON answer field, unit, EOS); source mask vs "
                   "source-control; 60 replacements, B refers to A's unit",
                   quantity_change("unit_from_a", "source", "complete")),
              Test(run, f"{LENIENT}: right number and unit anywhere, no EOS needed; source mask vs source-control",
                   quantity_change("unit_from_a", "source", "lenient_complete"))))),
    Claim("quantity.number-only", "quantity",
          "Hiding only the old number keeps every current answer",
          Paper("Number-only masking leaves the unit visible and preserves 60/60 current answers in every model",
                (384, 385), "Preferring the New Value Does Not Ensure a Complete Answer", "60/60 in all eight models"),
          "none",
          tuple(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: complete answer; number-only mask vs number-control; B refers to A's unit",
                   quantity_change("unit_from_a", "number", "complete")),
              Test(run, f"{LENIENT}; number-only mask vs number-control",
                   quantity_change("unit_from_a", "number", "lenient_complete"))))),
    Claim("quantity.warning", "quantity",
          "The current answer's probability drop ranks lost above kept answers",
          Paper("It ranks lost above kept answers with AUC 0.89--0.98 in the four Qwen and Llama models that lose "
                "answers.", (375, 376), "Preferring the New Value Does Not Ensure a Complete Answer",
                "AUC 0.89-0.98, four models"),
          "up",
          tuple(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: lost/kept complete answers, B refers to A's unit",
                   quantity_warning("complete", "unit_from_a")),
              Test(run, f"{LENIENT}: lost/kept lenient answers, B refers to A's unit",
                   quantity_warning("lenient_complete", "unit_from_a"))))),
    Claim("quantity.recompute-unit", "quantity",
          "Deleting A's text and recomputing loses the unit-dependent answers the source mask keeps",
          Paper("Deleting old text can also remove a needed unit: on the 60 unit-dependent Qwen3-32B cases, it gives "
                "5.0% (3) complete answers, compared with 60.0% (36) under source masking", (551, 553),
                "Later Cache States Can Preserve Earlier Relations", "3/60 vs 36/60 (Qwen3-32B)"),
          "down",
          tuple(t for run in QUANTITY_RUNS for t in (
              Test(run, f"{PAPER_RULE}: complete answer; recompute vs source mask",
                   quantity_recompute("unit_from_a", "complete")),
              Test(run, f"{LENIENT}; recompute vs source mask", quantity_recompute("unit_from_a", "lenient_complete"))))),

    # ---------------------------------------------------------------- matched scores
    Claim("matched-scores.margin", "matched-scores",
          "On replacements, hiding A raises the candidate margin beyond the equal-token control",
          Paper("The margin increase is positive for every model as a point estimate, but its interval crosses "
                "zero for Llama-3.1-70B.", (4948, 4949),
                "Candidate Preference and Generated Answers on Synthetic Records",
                "Qwen3-4B +1.38 [1.16, 1.62], Qwen3-8B +1.72 [1.41, 2.05] nats", (4968, 4968)),
          "up",
          (Test(MATCHED_SMOL, "Delta m = m(mask) - m(control); 150 replacement cases", matched_margin("replacement")),
           *(Test(run, "Delta m = m(mask) - m(control); 150 replacement cases", matched_margin("replacement"))
             for run in (MATCHED_QWEN, MATCHED_QWEN_15)))),
    Claim("matched-scores.replacement-answers", "matched-scores",
          "On replacements, hiding A loses exact-field answers against the control",
          Paper("Qwen3-4B and Qwen3-8B lose eight and 17 correct answers relative to their controls.", (4950, 4951),
                "Candidate Preference and Generated Answers on Synthetic Records",
                "Qwen3-4B -5.3 [-8.7, -2.0], Qwen3-8B -11.3 [-18.7, -4.7] pp", (4968, 4968)),
          "down",
          (Test(MATCHED_SMOL, f"{PAPER_RULE}: exact answer field; mask vs control; 150 replacement cases",
                matched_accuracy("replacement", "exact")),
           Test(MATCHED_SMOL, f"{LENIENT}: first value mentioned; mask vs control; 150 replacement cases",
                matched_accuracy("replacement", "lenient")),
           *(Test(run, f"{PAPER_RULE}: exact answer field; mask vs control; 150 replacement cases",
                  matched_accuracy("replacement", "exact")) for run in (MATCHED_QWEN, MATCHED_QWEN_15)))),
    Claim("matched-scores.all-answers", "matched-scores",
          "Over all 300 cases (A still needed in confirmations and other-entity updates), hiding A loses answers",
          Paper("Qwen3.8 and both Gemma models score 300/300 with full or control access but 250/300 after masking "
                "A.", (4982, 4984), "Candidate Preference and Generated Answers on Synthetic Records",
                "Qwen3-4B -19.3 [-21.7, -17.3], Qwen3-8B -24.3 [-29.0, -20.0], Qwen3-32B -16.0 [-17.7, -14.3] pp",
                (5002, 5002)),
          "down",
          (Test(MATCHED_SMOL, f"{PAPER_RULE}: exact answer field; mask vs control; all 300 cases",
                matched_accuracy("all", "exact")),
           Test(MATCHED_SMOL, f"{LENIENT}: first value mentioned; mask vs control; all 300 cases",
                matched_accuracy("all", "lenient")),
           *(Test(run, f"{PAPER_RULE}: exact answer field; mask vs control; all 300 cases",
                  matched_accuracy("all", "exact")) for run in (MATCHED_QWEN, MATCHED_QWEN_15)))),
    Claim("matched-scores.oaks-choices", "matched-scores", "On natural text (OAKS), hiding the earlier source "
          "improves the choice between the supplied answers",
          Paper("Masking improves selection among supplied OAKS narrative answers in many models", (400, 401),
                "Preferring the New Value Does Not Ensure a Complete Answer", "Qwen3-32B -16.77 [-21.16, -12.78] pp "
                "obsolete choices", (2118, 2118)),
          "up",
          (Test(MATCHED_SMOL_OAKS, f"{PAPER_RULE}: exact JSON choice; mask vs control; generated demonstration "
                "set, all books", matched_accuracy("all", "exact", chance=0.5)),
           Test(MATCHED_SMOL_OAKS, f"{LENIENT}: first answer text mentioned; mask vs control; generated "
                "demonstration set", matched_accuracy("all", "lenient", chance=0.5)))),
    # ---------------------------------------------------------------- MQuAKE
    Claim("mquake.source-current", "mquake", "Hiding the superseded records raises current multi-hop answers",
          Paper("Source masking increases current reference matches in all three models", (501, 501),
                "Later Cache States Can Preserve Earlier Relations",
                "Qwen3-4B 81.2 -> 84.2, Llama-3.2-3B 44.2 -> 63.9, Qwen3-32B 81.8 -> 83.2 (%)", (436, 436)),
          "up",
          _mquake_tests("source-mask", "current")),
    Claim("mquake.recompute-current", "mquake", "Recomputing without the old records raises current answers "
          "beyond the source mask",
          Paper("Recomputing the history after deleting the same records improves current matches by a further "
                "4.2--9.6 percentage points", (504, 505), "Later Cache States Can Preserve Earlier Relations",
                "+4.2 to +9.6 pp"),
          "up",
          _mquake_tests("recompute", "current", gain=True)),
    Claim("mquake.recompute-historical", "mquake", "Recomputing loses historical answers against the source mask",
          Paper("while losing 20.2--41.0 historical points", (505, 506),
                "Later Cache States Can Preserve Earlier Relations", "-20.2 to -41.0 pp"),
          "down",
          _mquake_tests("recompute", "historical")),
    Claim("mquake.rebuild", "mquake", "Rebuilding later states at fixed positions loses historical answers",
          Paper("Rebuilding states at the original positions lowers historical accuracy by 19.8--41.3 points.",
                (539, 540), "Later Cache States Can Preserve Earlier Relations", "-19.8 to -41.3 pp"),
          "down",
          _mquake_tests("rebuild", "historical")),
    Claim("mquake.compact", "mquake", "Compacting the rows (states kept, positions moved) changes historical "
          "answers little",
          Paper("Compacting the existing states changes it by only -0.2 to +1.2 points, with all three intervals "
                "including zero", (540, 541), "Later Cache States Can Preserve Earlier Relations",
                "-0.2 to +1.2 pp"),
          "none",
          _mquake_tests("compact", "historical")),
    Claim("mquake.strata", "mquake", "Recomputing loses historical answers only where the retained text holds them",
          Paper("Relative to source masking, recomputation's historical loss is confined to the retained stratum",
                (4232, 4233), "Retained Text and Routing on Contextual MQuAKE",
                "stratum difference -52.5 [-60.3, -45.2], -48.8 [-56.8, -41.0], -24.7 [-33.8, -15.7] pp",
                (4236, 4238)),
          "down",
          _mquake_rules("recompute - source mask, retained minus masked-only stratum, historical", mquake_strata)),
    Claim("mquake.current-value", "mquake", "Recomputing answers historical questions with the current value",
          Paper("Recomputation instead often answers the historical question with the current value", (4247, 4248),
                "Retained Text and Routing on Contextual MQuAKE",
                "recompute - source +30.5 [26.7, 34.5], +25.2 [21.3, 29.0], +5.8 [3.5, 8.3] pp", (4251, 4252)),
          "up",
          _mquake_rules("answers the current value; recompute vs source mask, historical questions",
                        mquake_current_value)),
    Claim("mquake.routing", "mquake", "Routing by question type (historical -> full, others -> recompute) beats "
          "the best single cache",
          Paper("Because the two operations serve different question types, an offline router over existing "
                "answers recovers both.", (4309, 4310), "Retained Text and Routing on Contextual MQuAKE",
                "routed - best +4.6 [3.1, 6.1], +6.6 [5.3, 7.9], +4.5 [2.9, 6.0] pp", (4314, 4315)),
          "up",
          _mquake_rules("routed vs best single policy, all questions", mquake_routing)),
    # ---------------------------------------------------------------- BABILong
    Claim("babilong.qa3-naive", "babilong", "Hiding all but each person's last movement loses qa3 "
          "(earlier location) answers",
          Paper("For qa3 at 32k, full/source/conservative-rule counts are 33/16/31 for Qwen3-4B, 25/6/22 for "
                "Llama-3.2-3B, and 40/15/39 for Qwen3-32B.", (1495, 1497), "Long-Context Object Dependencies",
                "full -> naive 33 -> 16, 25 -> 6, 40 -> 15 (counts at 32k)"),
          "down",
          _babilong_tests("qa3", "naive")),
    Claim("babilong.qa3-dependency", "babilong", "Keeping the object-dependency facts keeps qa3 near full access",
          Paper("For qa3 at 32k, full/source/conservative-rule counts are 33/16/31 for Qwen3-4B, 25/6/22 for "
                "Llama-3.2-3B, and 40/15/39 for Qwen3-32B.", (1495, 1497), "Long-Context Object Dependencies",
                "full -> conservative 33 -> 31, 25 -> 22, 40 -> 39 (counts at 32k)"),
          "none",
          _babilong_tests("qa3", "dependency")),
    Claim("babilong.qa2-naive", "babilong", "The naive mask does not hurt qa2 (current location); it gains a "
          "little",
          Paper("On qa2 at the same length, naive masking improves the point counts from 36 to 43, 16 to 20, and "
                "46 to 47.", (1497, 1499), "Long-Context Object Dependencies", "36 -> 43, 16 -> 20, 46 -> 47 (counts)"),
          "up",
          _babilong_tests("qa2", "naive", gain=True)),
    # ---------------------------------------------------------------- note controls
    Claim("note-controls.early", "note-controls", "Hiding the note's first tokens (the early control) loses "
          "correct labels",
          Paper("Masking the first 31 note tokens gives 8/240 correct answers, versus 146/240 with full access.",
                (3842, 3843), "Effects of control location and prompt wording on abstention",
                "146/240 -> 8/240"),
          "down",
          _note_tests("early control vs full", note_early)),
    Claim("note-controls.occurrence", "note-controls", "Which copy of a repeated note window is hidden matters "
          "(far minus near)",
          Paper("Blocking the earlier copy gives 8/240 correct answers; blocking the later copy gives 146/240, with "
                "138 corrections and no reversals", (3850, 3851),
                "Effects of control location and prompt wording on abstention", "+57.5 pp [49.58, 65.42]",
                (3852, 3853)),
          "up",
          _note_tests("far copy vs near copy", _near_far)),
    Claim("note-controls.varied", "note-controls", "A varied (non-repeated) note loses less under the early "
          "control",
          Paper("The early-mask loss is -57.50 points [-65.42,-50.00] under repeated text and -13.33 [-17.92,-9.17] "
                "under varied text.", (5417, 5418), "Varied Background Text and Early Note Access",
                "-57.50 (repeated) vs -13.33 (varied) pp"),
          "up",
          _note_tests("early-control loss, varied minus repeated note", _varied)),
    Claim("note-controls.margin", "note-controls", "The early control lowers the label-vs-UNKNOWN first-token "
          "margin",
          Paper("The mean log-probability difference changes from +0.205 to -3.050 nats under the original control.",
                (3896, 3897), "Effects of control location and prompt wording on abstention",
                "+0.205 -> -3.050 nats"),
          "down",
          (Test(NOTES_SMOL, "first-value margin (label vs UNKNOWN); early control vs full", note_margin),
           Test(NOTES_QWEN, "first-value margin (label vs UNKNOWN); early control vs full", note_margin))),

    # ---------------------------------------------------------------- detection
    Claim("detection.yes-no", "detection", "A detector reading A and B recognizes replacements",
          Paper("the detector in each Qwen model selects all 120 strict-replacement current-query conditions",
                (3476, 3477), "Answering Quantity Questions and Selecting Masks",
                "all 120 strict replacements selected (Qwen)"),
          "up",
          (Test("detection/smollm2-135m-instruct", "AUC of the paper's YES/NO score; quantity test pairs",
                detection_yes_no("quantity")),
           Test("detection/smollm2-135m-instruct", "AUC of the paper's YES/NO score; record test pairs",
                detection_yes_no("records")),
           Test("detection/smollm2-135m-instruct", "accuracy of the asserted-value JSON detector; record test pairs",
                detection_json("asserted-value")))),
    # ---------------------------------------------------------------- recognition
    Claim("recognition.fixed-v-criterion", "recognition", "Fixed value distance fails the 0.60 recognition "
          "criterion",
          Paper("Replacement recognition using the fixed V distance ranges from 0.454 to 0.493. None meets the 0.60 "
                "criterion or exceeds surface similarity.", (2200, 2201), "Fixed Scores on Role-Matched Record Pairs",
                "0.454-0.493"),
          "down",
          (*_both_recognition_models("role-pairs", "replacement macro-AUC of fixed d_V; role-matched pairs; vs 0.60",
                                     recognition_auc("replacement_macro_auc", "value distance d_V", 0.6)),
           *_both_recognition_models("records", "role swaps vs role confirmations AUC of fixed d_V; vs 0.60",
                                     recognition_auc("role_auc", "fixed d_V", 0.6)))),
    Claim("recognition.fixed-v-direction", "recognition", "Fixed d_V ranks role swaps below role confirmations",
          Paper("Its predefined direction gives AUC for role swaps versus role confirmations 0.336--0.463 across "
                "eight models", (2621, 2622), "Recognition Results on Held-Out Examples",
                "0.336-0.463 across eight models"),
          "down",
          _role_tests("fixed d_V")),
    Claim("recognition.k-matching", "recognition", "Key similarity matches records about the same entity and "
          "attribute (criterion 0.60)",
          Paper("Across 22 checkpoints, K-based entity--attribute matching AUC ranges from 0.558 to 0.879; 20 meet "
                "its specified lower-bound criterion", (2198, 2199), "Fixed Scores on Role-Matched Record Pairs",
                "0.558-0.879, 20 of 22 pass"),
          "up",
          _both_recognition_models("role-pairs", "matching macro-AUC of key similarity s_K; vs 0.60",
                                   recognition_auc("matching_macro_auc", "key similarity s_K", 0.6))),
    Claim("recognition.joint-probe", "recognition", "A probe on jointly encoded K/V recognizes role swaps",
          Paper("Probes using jointly encoded KV representations obtain 0.508--0.862", (2625, 2626),
                "Recognition Results on Held-Out Examples", "0.508-0.862"),
          "up",
          _role_tests("joint K/V probe")),
    Claim("recognition.probe-vs-fixed", "recognition", "Jointly encoded representations improve on the fixed "
          "distance",
          Paper("Heads selected on development data and representations from jointly encoded records improve on "
                "the fixed distance.", (2620, 2621), "Recognition Results on Held-Out Examples",
                "fixed 0.336-0.463 vs joint K/V 0.508-0.862", (2622, 2626)),
          "up",
          _both_recognition_models("records", "role AUC, joint K/V probe minus fixed d_V (same group draws)",
                                   recognition_difference("joint K/V probe", "fixed d_V"))),
    # ---------------------------------------------------------------- fact map
    Claim("fact-map.later-states", "fact-map", "Later states keep information from the hidden record: recompute "
          "differs from the mask",
          Paper("Later states also retain useful information from earlier records", (163, 163), "Abstract",
                "historical -20.2 to -41.0 pp under recompute (MQuAKE)", (505, 506)),
          "either",
          (Test("fact-map/smollm2-135m-instruct-quantity", "candidate margin; recompute vs source mask; quantity",
                fact_map_target()),
           Test("fact-map/smollm2-135m-instruct-records", "candidate margin; recompute vs source mask; records",
                fact_map_target()),
           Test("fact-map/qwen2.5-coder-0.5b-instruct-quantity", "candidate margin; recompute vs source mask; "
                "quantity", fact_map_target()),
           Test("fact-map/qwen2.5-coder-0.5b-instruct-quantity", "candidate margin; recompute vs source mask; "
                "quantity, B refers to A's unit", fact_map_target("unit_from_a")))),
    Claim("fact-map.fixed-positions", "fact-map", "Rebuilding the later states at fixed positions reproduces the "
          "recompute effect",
          Paper("Thus historical loss persists at fixed positions.", (543, 543),
                "Later Cache States Can Preserve Earlier Relations", "rebuild -19.8 to -41.3 pp vs recompute "
                "-20.2 to -41.0 pp", (505, 540)),
          "up",
          (Test("fact-map/smollm2-135m-instruct-quantity", "share of the recompute effect recovered by rebuilding "
                "every later row (rebuild:..end); quantity", fact_map_recovery("rebuild:..end")),
           Test("fact-map/smollm2-135m-instruct-records", "share recovered by rebuild:..end; records",
                fact_map_recovery("rebuild:..end")),
           Test("fact-map/qwen2.5-coder-0.5b-instruct-quantity", "share recovered by rebuild:..B (all later rows); "
                "quantity", fact_map_recovery("rebuild:..B")),
           Test("fact-map/qwen2.5-coder-0.5b-instruct-quantity", "share recovered by rebuild:..B; quantity, B refers "
                "to A's unit", fact_map_recovery("rebuild:..B", "unit_from_a")))),
    # ---------------------------------------------------------------- components
    Claim("components.effects", "components", "Zeroing K, V or K+V at the old span moves the margin toward the "
          "current value",
          Paper("Seven of nine models have positive effects for each of K, V, and K + V.", (5772, 5772),
                "Component Effects Do Not Establish Answer Preservation",
                "Qwen3-4B K 2.60 [2.25, 2.93], V 1.79 [1.41, 2.15], K+V 2.25 [1.90, 2.59] nats", (5789, 5789)),
          "up",
          tuple(Test(f"components/{model}", f"Delta_c of zeroing {comp} beyond the matched span; Bonferroni "
                     "interval (3 comparisons)", component_delta(comp))
                for model in ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct") for comp in ("K", "V", "K+V"))),
    # ---------------------------------------------------------------- derived note
    Claim("derived-note.margin", "derived-note", "Hiding the derived note C raises the current margin beyond the "
          "neutral control",
          Paper("For Llama, masking C gives a 26-point current-accuracy gain [14,38] over full access and a margin "
                "gain beyond the neutral control of 1.62 [1.32,1.92].", (5847, 5849),
                "Recomputing States After a Derived Note", "1.62 [1.32, 1.92] nats (Llama)"),
          "up",
          (Test("derived-note/smollm2-135m-instruct", "mask-C margin gain vs full, derived minus neutral note",
                derived_contrast("maskC_margin_beyond_neutral")),
           Test("derived-note/qwen2.5-coder-0.5b-instruct", "mask-C margin gain vs full, derived minus neutral note",
                derived_contrast("maskC_margin_beyond_neutral")))),
    Claim("derived-note.accuracy", "derived-note", "Hiding the derived note C raises current accuracy",
          Paper("For Llama, masking C gives a 26-point current-accuracy gain [14,38] over full access and a margin "
                "gain beyond the neutral control of 1.62 [1.32,1.92].", (5847, 5849),
                "Recomputing States After a Derived Note", "+26 [14, 38] pp (Llama)"),
          "up",
          (Test("derived-note/smollm2-135m-instruct", f"{PAPER_RULE}: exact JSON field; mask C vs full; derived "
                "note, current question", derived_accuracy("derived", "current", "mask-C", "strict")),
           Test("derived-note/smollm2-135m-instruct", f"{LENIENT}; mask C vs full; derived note, current question",
                derived_accuracy("derived", "current", "mask-C", "lenient")),
           Test("derived-note/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact JSON field; mask C vs full; "
                "derived note, current question", derived_accuracy("derived", "current", "mask-C", "strict")))),
    Claim("derived-note.refresh-historical", "derived-note", "With a neutral note, refreshing later states with A "
          "hidden loses historical answers",
          Paper("With a neutral note, Gemma 4 31B's historical answers fall from 50/50 to 8/50 when later states "
                "are refreshed with A hidden", (5883, 5885), "Later States and Recomputing the History",
                "50/50 -> 8/50 (Gemma 4 31B)"),
          "down",
          (Test("derived-note/smollm2-135m-instruct", f"{PAPER_RULE}: exact JSON field; refresh vs full; neutral "
                "note, historical question", derived_accuracy("neutral", "historical", "refresh", "strict")),
           Test("derived-note/smollm2-135m-instruct", f"{LENIENT}; refresh vs full; neutral note, historical "
                "question", derived_accuracy("neutral", "historical", "refresh", "lenient")),
           Test("derived-note/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact JSON field; refresh vs full; "
                "neutral note, historical question", derived_accuracy("neutral", "historical", "refresh",
                                                                      "strict")))),
    # ---------------------------------------------------------------- FactConsolidation
    Claim("factconsolidation.source", "factconsolidation", "Hiding superseded facts changes complete answers "
          "(down for Qwen, up for Gemma)",
          Paper("Qwen's complete-answer rate falls from 90.1% (336) to 80.4% (300) under source masking.",
                (1670, 1671), "Why Net Accuracy Changes Differ between the Two Models",
                "Qwen net -9.7 pp; Gemma +20.1 pp", (1672, 1675)),
          "either",
          (Test("factconsolidation/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer with EOS (rule grader); "
                "source mask vs full", factconsolidation_source),)),
    Claim("factconsolidation.fallback", "factconsolidation", "Re-answering from the recomputed cache after a "
          "capped source-masked answer does not beat recompute alone",
          Paper("a fallback that re-answers from the recomputed cache after a capped source-masked answer does not "
                "exceed recomputation alone", (4317, 4319), "Retained Text and Routing on Contextual MQuAKE",
                "Qwen 349 vs 355 (5 gains, 11 losses, p = 0.21); Gemma 265 vs 266 (13 and 14, p = 1.0)",
                (4319, 4322)),
          "none",
          (Test("factconsolidation/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer with EOS (rule grader); "
                "fallback vs recompute", factconsolidation_fallback),)),
    # ---------------------------------------------------------------- factorial
    Claim("factorial.scope", "factorial", "Hiding only the old number loses fewer answers than hiding the whole "
          "record",
          Paper("The number-only versus whole-source contrast is positive for every model except Gemma 4 31B, whose "
                "cells are all correct.", (5197, 5198), "Information, Question Wording, and Mask Scope",
                "Qwen3-4B +23.8 [20.4, 27.1], Qwen3-32B +25.0 [23.3, 27.1] pp", (5183, 5185)),
          "up",
          (Test("factorial/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer; number-minus-whole change of "
                "mask minus control", factorial_factor("scope", "complete")),
           Test("factorial/smollm2-135m-instruct", f"{LENIENT}; number-minus-whole change of mask minus control",
                factorial_factor("scope", "lenient")))),
    Claim("factorial.explicit-request", "factorial", "Asking explicitly for the complete value (unit) repairs "
          "answers under the masks",
          Paper("In separate quantity constructions, explicitly requesting a unit repairs many omissions", (392, 393),
                "Preferring the New Value Does Not Ensure a Complete Answer",
                "Qwen3-4B +11.2 [6.2, 15.8], Qwen3-32B +8.3 [4.2, 12.5] pp", (5183, 5185)),
          "up",
          (Test("factorial/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer; explicit-request change of mask "
                "minus control, masks averaged", factorial_factor("wording/both", "complete")),
           Test("factorial/smollm2-135m-instruct", f"{LENIENT}; explicit-request change, masks averaged",
                factorial_factor("wording/both", "lenient")))),
    # ---------------------------------------------------------------- MINTEval
    Claim("minteval.source", "minteval", "Hiding every superseded movement lowers all-question accuracy",
          Paper("Under this resampling, whole-source masking lowers all-question accuracy in all three models",
                (1361, 1362), "Repeated Updates and Contextual Multi-Hop Questions",
                "-6.79 [-8.35, -5.31], -5.80 [-7.04, -4.62], -10.68 [-12.89, -8.61] pp", (1362, 1364)),
          "down",
          (Test("minteval/smollm2-135m-instruct", f"{PAPER_RULE}: normalized exact match with EOS; source mask vs "
                "full; all questions", minteval_source),)),
    # ---------------------------------------------------------------- query-aware
    Claim("query-aware.source", "query-aware", "Hiding A on all 300 record histories loses answers against full "
          "access",
          Paper("On 300 controlled conditions, Qwen3-32B answers 98.3% (295) with full access, 83.0% (249) with "
                "source masking, 98.3% (295) with FINCH and 98.7% (296) with RefreshKV", (782, 785),
                "Other Access Choices Can Avoid Some Losses", "295 -> 249 of 300 (Qwen3-32B)"),
          "down",
          (Test("query-aware/smollm2", f"{PAPER_RULE}: exact answer field; source mask vs full",
                query_aware("source-mask", "correct", "full")),
           Test("query-aware/smollm2", f"{LENIENT}; source mask vs full",
                query_aware("source-mask", "lenient", "full")),
           Test("query-aware/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; source mask vs full",
                query_aware("source-mask", "correct", "full")))),
    Claim("query-aware.finch", "query-aware", "FINCH at the source mask's budget recovers answers the mask loses",
          Paper("On 300 controlled conditions, Qwen3-32B answers 98.3% (295) with full access, 83.0% (249) with "
                "source masking, 98.3% (295) with FINCH and 98.7% (296) with RefreshKV", (782, 785),
                "Other Access Choices Can Avoid Some Losses", "249 -> 295 of 300 (Qwen3-32B)"),
          "up",
          (Test("query-aware/smollm2", f"{LENIENT}; FINCH at matched K vs source mask",
                query_aware("finch@matched", "lenient", "source-mask")),
           Test("query-aware/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; FINCH at matched K vs "
                "source mask", query_aware("finch@matched", "correct", "source-mask")))),
    Claim("query-aware.refreshkv", "query-aware", "RefreshKV at the source mask's budget recovers answers the mask "
          "loses",
          Paper("On 300 controlled conditions, Qwen3-32B answers 98.3% (295) with full access, 83.0% (249) with "
                "source masking, 98.3% (295) with FINCH and 98.7% (296) with RefreshKV", (782, 785),
                "Other Access Choices Can Avoid Some Losses", "249 -> 296 of 300 (Qwen3-32B)"),
          "up",
          (Test("query-aware/smollm2", f"{LENIENT}; RefreshKV at matched K vs source mask",
                query_aware("refreshkv@matched", "lenient", "source-mask")),
           Test("query-aware/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; RefreshKV at matched K "
                "vs source mask", query_aware("refreshkv@matched", "correct", "source-mask")))),
    # ---------------------------------------------------------------- records
    Claim("records.oracle-current", "records", "Masking true replacements still loses current exact-field answers",
          Paper("Their masking losses therefore concern answer-field mismatches, including unit omission, not "
                "necessarily wrong semantic values.", (5509, 5511), "Query Preservation and Generation Errors",
                "Qwen3-4B: 26 oracle-mask reversals against keep-all", (5511, 5512)),
          "down",
          (Test("records/smollm2-135m-instruct", f"{PAPER_RULE}: exact answer field; oracle mask vs keep-all; "
                "current question; deadlines as dates (the paper's: hours)",
                records_change("current", "oracle-mask", "correct")),
           Test("records/smollm2-135m-instruct", f"{LENIENT}; oracle mask vs keep-all; current question; deadlines "
                "as dates",
                records_change("current", "oracle-mask", "lenient")),
           Test("records/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; oracle mask vs keep-all; "
                "current question; deadlines as dates", records_change("current", "oracle-mask", "correct")))),
    Claim("records.oracle-historical", "records", "Hiding the old record loses historical answers",
          Paper("Hiding the old record is cheap, but it may still contain needed details or answer questions about "
                "the past.", (156, 158), "Abstract", "MQuAKE historical 88.2 -> 74 (Qwen3-4B, %)", (436, 436)),
          "down",
          (Test("records/smollm2-135m-instruct", f"{PAPER_RULE}: exact answer field; oracle mask vs keep-all; "
                "historical question", records_change("historical", "oracle-mask", "correct")),
           Test("records/smollm2-135m-instruct", f"{LENIENT}; oracle mask vs keep-all; historical question",
                records_change("historical", "oracle-mask", "lenient")),
           Test("records/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; oracle mask vs keep-all; "
                "historical question", records_change("historical", "oracle-mask", "correct")))),
    # ---------------------------------------------------------------- requests
    Claim("requests.recompute-historical", "requests", "Recomputing on detection lowers historical-request "
          "accuracy",
          Paper("lowers historical accuracy by 41.1, 38.9 and 28.9 points", (6472, 6473),
                "Detector Cost in a 40-Token Ten-Query Workload", "-41.1, -38.9, -28.9 pp"),
          "down",
          (Test("requests/smollm2", f"{PAPER_RULE}: exact answer field; detector recompute vs keep-all; "
                "historical requests, short histories", requests_historical("detector-recompute", "correct")),
           Test("requests/smollm2", f"{LENIENT}; detector recompute vs keep-all; historical requests",
                requests_historical("detector-recompute", "lenient")),
           Test("requests/smollm2", f"{LENIENT}; oracle recompute (true labels, our stand-in) vs keep-all; "
                "historical requests", requests_historical("oracle-recompute", "lenient")))),
    # ---------------------------------------------------------------- revisions
    Claim("revisions.whole-source", "revisions", "Hiding every non-final revision body loses complete answers",
          Paper("Whole-source masking reduces complete answers by 54.3 percentage points for Qwen and 44.4 for Gemma",
                (660, 661), "Questions about Wikipedia Revision Histories", "-54.3 and -44.4 pp"),
          "down",
          (Test("revisions/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer with EOS (rule grader); "
                "whole-source mask vs full", revisions_change("whole-source")),)),
    Claim("revisions.changed-text", "revisions", "Hiding only the changed passages loses few complete answers",
          Paper("changed-text masking reduces them by 2.1 and 2.8 points", (661, 662),
                "Questions about Wikipedia Revision Histories", "-2.1 and -2.8 pp"),
          "down",
          (Test("revisions/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer with EOS (rule grader); "
                "changed-text mask vs full", revisions_change("changed-text")),)),
    # ---------------------------------------------------------------- session bias
    Claim("session-bias.soft-updates", "session-bias", "A soft bias against earlier sessions gains answers on "
          "knowledge updates",
          Paper("For all 38 questions labeled as knowledge updates, the pooled correct count changes from 165/228 to "
                "178/228.", (6002, 6003), "Reducing Attention to Earlier Sessions",
                "answerable updates +5.88 [+2.45, +9.80] pp", (6111, 6111)),
          "up",
          (Test("session-bias/smollm2-150", "rule grader; soft bias vs full; answerable updates",
                session_bias("answerable_updates", "soft")),)),
    Claim("session-bias.public-source-mask", "session-bias", "The session guard's source mask loses public answers",
          Paper("Source masking still lowers the point counts in all three models.", (6384, 6384),
                "Query-Aware Cache Comparisons and Capacity Accounting",
                "full/source 193/182, 181/166, 268/226 of 368", (6380, 6383)),
          "down",
          public_arm_tests("hard", "source mask")),
    Claim("session-bias.finch-small", "session-bias", "FINCH at a 512-token capacity falls below full access in "
          "smaller models",
          Paper("At 512-token capacity on LongMemEval-Oracle, FINCH raises Qwen3-32B's official-rubric accuracy from "
                "73.2% (278/380) to 76.1% (289/380), but falls below full access in the two smaller models",
                (793, 795), "Other Access Choices Can Avoid Some Losses",
                "full/FINCH 193/169 (Qwen3-4B), 181/174 (Llama-3.2-3B) of 368", (6380, 6382)),
          "down",
          public_arm_tests("finch", "FINCH")),
    Claim("session-bias.quest-public", "session-bias", "Quest at a 512-token capacity loses public answers",
          Paper("Full/source/Quest/FINCH/RefreshKV counts are 193/182/136/169/179 for Qwen3-4B, 181/166/148/174/165 "
                "for Llama-3.2-3B, and 268/226/191/279/266 for Qwen3-32B", (6381, 6383),
                "Query-Aware Cache Comparisons and Capacity Accounting",
                "full/Quest 193/136, 181/148, 268/191 of 368", (6380, 6383)),
          "down",
          public_arm_tests("quest", "Quest")),
    # ---------------------------------------------------------------- source influence, OAKS, prompt format
    Claim("source-influence.margin", "source-influence", "Hiding the earlier source raises the margin beyond the "
          "equal-token control",
          Paper("All 22 source-minus-control candidate-margin intervals are above zero; point estimates span "
                "0.539--2.985 nats.", (1918, 1919), "Candidate-Margin Changes Across Models",
                "+0.539 to +2.985 nats, 22 checkpoints"),
          "up",
          tuple(Test(f"source-influence/{model}", "Delta_m = m(source) - m(control); 320 held-out events, "
                     "segment-wise prompt", source_estimate("delta_m", "nats", "+.2f")) for model in SOURCE_MODELS)),
    Claim("oaks-open.source-complete", "oaks-open", "Hiding the earlier source loses complete open answers on "
          "natural text",
          Paper("On the 92 answerable questions, Qwen3-32B's source-complete count falls from 51 to 42 under masking",
                (4615, 4616), "Open Answers on Natural Source Excerpts", "Qwen3-32B -9.8 [-18.5, -1.1] pp",
                (4609, 4609)),
          "down",
          tuple(Test(f"oaks-open/smollm2-135m-instruct-{grader}", f"source complete, mask minus full; {label}; "
                     "generated demonstration set", oaks_open("mask_vs_full"))
                for grader, label in OAKS_OPEN_GRADERS)),
    Claim("oaks-open.protocols", "oaks-open", "Reference agreement credits more masked answers than source "
          "completeness (same grader)",
          Paper("The paired difference between the two protocols using the same grader is itself resolved",
                (4679, 4680), "Open Answers on Natural Source Excerpts", "Qwen3-32B +12.0 [+2.1, +22.1] pp",
                (4675, 4680)),
          "up",
          tuple(Test(f"oaks-open/smollm2-135m-instruct-{grader}", f"agreement minus completeness, mask minus full; "
                     f"{label}; generated demonstration set", oaks_open("agreement_minus_complete"))
                for grader, label in OAKS_OPEN_GRADERS)),
    Claim("oaks.obsolete-choices", "oaks", "Hiding the earlier source reduces obsolete answer choices on natural "
          "text",
          Paper("Twenty-one of 22 checkpoints meet the specified requirements of fewer obsolete choices, preserved "
                "control accuracy, and improvement across the required number of books.", (2098, 2100),
                "Natural-Source Candidate Decisions and the Gemma 4 31B Exception",
                "Qwen3-32B -16.77 [-21.16, -12.78] pp", (2118, 2118)),
          "down",
          tuple(Test(f"oaks/{model}", "old-choice change, source mask minus control; generated demonstration set",
                     source_estimate("old_choice_change_pp", "pp", "+.1f", chance_accuracy=True))
                for model in SOURCE_MODELS)),
    Claim("prompt-format.native", "prompt-format", "The native chat format shrinks the margin effect against raw "
          "text",
          Paper("Native-minus-raw contrasts are -1.302, -1.011, and -0.098; their paired 95% intervals are "
                "[-1.804,-0.780], [-1.182,-0.833], and [-0.264,0.068].", (1883, 1885),
                "Paired Prompt-Format Sensitivity", "-1.302, -1.011, -0.098 nats"),
          "down",
          tuple(Test(f"prompt-format/{model}", "Delta_m native minus raw (same draws)", prompt_format)
                for model in ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"))),
    # ---------------------------------------------------------------- question relevance
    Claim("question-relevance.lexical-replacement", "question-relevance", "Lexical overlap recognizes replacement "
          "only at chance",
          Paper("Lexical overlap identifies which question requires the target information in this construction, "
                "but recognizes replacement at chance.", (2294, 2294), "Attention, Lexical Relevance, and "
                "Leave-One-Out Signals", "replacement AUC 0.500", (2284, 2284)),
          "none",
          (Test("question-relevance/smollm2-135m-instruct-budget8", "replacement AUC of lexical overlap; vs 0.5",
                question_relevance("replacement_auc", "lexical")),)),
    Claim("question-relevance.lexical-relevance", "question-relevance", "Lexical overlap tells the relevant "
          "question apart",
          Paper("Lexical overlap identifies which question requires the target information in this construction, "
                "but recognizes replacement at chance.", (2294, 2294), "Attention, Lexical Relevance, and "
                "Leave-One-Out Signals", "question relevance 1.000", (2284, 2284)),
          "up",
          (Test("question-relevance/smollm2-135m-instruct-budget8", "question relevance of lexical overlap; vs 0.5",
                question_relevance("question_relevance", "lexical")),)),
    # ---------------------------------------------------------------- native record pairs
    Claim("native-pairs.matching", "native-pairs", "Key similarity matches entity and attribute on both "
          "record-pair panels",
          Paper("The matching lower bound exceeds 0.60 in all nine models", (2349, 2349),
                "Text Similarity Perfectly Separates the Controlled-History Pairs",
                "weaker panel Qwen3-4B 0.974 [0.968]", (2331, 2331)),
          "up",
          tuple(Test(f"native-pairs/{model}", "weaker-panel macro-AUC of s_K, native forward paths; lower bound vs "
                     "0.60", native_pairs("matching")) for model in NATIVE_PAIR_MODELS)),
    Claim("native-pairs.relation", "native-pairs", "Fixed V distance recognizes replacement on both record-pair "
          "panels",
          Paper("the relation lower bound exceeds 0.60 in all nine models", (2349, 2350),
                "Text Similarity Perfectly Separates the Controlled-History Pairs",
                "weaker panel Qwen3-4B 0.696 [0.682]", (2331, 2331)),
          "up",
          tuple(Test(f"native-pairs/{model}", "weaker-panel macro-AUC of d_V among matching pairs; lower bound vs "
                     "0.60", native_pairs("relation")) for model in NATIVE_PAIR_MODELS)),
    Claim("native-pairs.surface", "native-pairs", "No native relation advantage over the surface baseline on "
          "both panels",
          Paper("No model satisfies this requirement, including Qwen3-8B with its zero controlled-history "
                "difference.", (2183, 2184), "Recognizing Replacement from Record Representations",
                "lower bound of min Delta, Qwen3-8B 0.000", (2332, 2332)),
          "down",
          tuple(Test(f"native-pairs/{model}", "min(Delta intrinsic, Delta history), relation AUC minus the stronger "
                     "surface (same draws); vs 0", native_pairs("surface")) for model in NATIVE_PAIR_MODELS)),
    # ---------------------------------------------------------------- cross-checkpoint
    Claim("cross-checkpoint.answers", "cross-checkpoint", "Reading a sibling checkpoint's cache changes current "
          "answers",
          Paper("Qwen3-8B's complete current answers fall from 84.2% to 76.2% on its base sibling's cache (cross "
                "minus own -7.9 points, [-12.5,-3.8])", (6669, 6671), "Reading a Cache Written by Another Checkpoint",
                "-7.9 [-12.5, -3.8] pp (Qwen3-8B)"),
          "either",
          (Test("cross-checkpoint/smollm2-int8", f"{PAPER_RULE}: complete answer; int8 sibling's cache vs own; "
                "full access", cross_reading("complete")),
           Test("cross-checkpoint/smollm2-int8", f"{LENIENT}; int8 sibling's cache vs own; full access",
                cross_reading("lenient_complete")))),
)


# --------------------------------------------------------------------------- evaluation and output


def _tolerance(claim: Claim, m: Measurement) -> float | None:
    if claim.direction != "none":
        return None
    if claim.tolerance is not None:
        return claim.tolerance
    if m.unit not in TOLERANCE:
        raise ValueError(f"{claim.key}: no default tolerance for unit {m.unit!r}; give Claim.tolerance")
    return TOLERANCE[m.unit]


def evaluate(artifacts: Path | str, claims: Sequence[Claim] = CLAIMS) -> list[Row]:
    """Measure every test of every claim on the runs under ``artifacts`` and apply :func:`verdict`."""
    rows = []
    for claim in claims:
        for test in claim.tests:
            run = Path(artifacts) / test.run
            if not run.is_dir():
                raise FileNotFoundError(f"{claim.key}: run {test.run} not found under {artifacts}")
            m = test.measure(run)
            v = verdict(claim.direction, m.ci, m.null, _tolerance(claim, m), m.not_testable)
            rows.append(Row(claim, test, _model(run), m, v, len(rows) + 1))
    return rows


def _counts(rows: Sequence[Row]) -> dict[str, int]:
    found = Counter(r.verdict for r in rows)
    return {v: found.get(v, 0) for v in VERDICTS}


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "/").replace("\n", " ")


def _run_link(row: Row, artifacts_link: str) -> str:
    target = f"{artifacts_link}/{row.test.run}/report.md"
    return f"[{row.model}]({target}) (`{row.test.run}`)"


RULE_TEXT = f"""\
- **replicates**: the 95 % interval excludes the null on the side the paper found;
- **opposite**: it excludes the null on the other side;
- **inconclusive**: it includes the null;
- **not testable here**: the run cannot show the effect: the arm the effect needs (the reference arm of a loss,
  full access of a gain) answers fewer than {FLOOR:.0%} correctly (floor), or at or below chance (BABILong: always
  answering the most common gold location; two-way choices: 50 %), or the estimate is undefined (an AUC with an
  empty class, a recovery ratio whose recompute effect has an interval including 0, a detector that never decided).

Claims without a sign ("either") replicate when the interval excludes the null. Claims of no change ("none")
replicate when the whole interval lies within the null +- {TOLERANCE['pp']:g} pp ({TOLERANCE['AUC']:g} for AUCs),
are opposite when it excludes the null, else inconclusive. The null is 0 for changes, 0.5 for AUCs and
shares against chance, and 0.60 for the paper's recognition criterion. Reference arms are the paper's: a mask
against its equal-token control, recompute, rebuild and compaction against the source mask; where the
control itself moves the answers (its change against full access has an interval excluding 0) full access
is the reference, as the paper does ("We also use full access, since control masks can change answers.").
A row whose interval rests on fewer than {FEW_UNITS} resampled units says so in its n."""


def _against_paper(row: Row) -> str:
    """For an inconclusive row of a signed claim whose point estimate lies on the other side of the null."""
    m, direction = row.measurement, row.claim.direction
    if row.verdict != INCONCLUSIVE or direction not in ("up", "down") or m.value is None:
        return ""
    if (m.value - m.null) * (1 if direction == "up" else -1) < 0:
        return "the point estimate lies on the other side of the paper's"
    return ""


def format_markdown(rows: Sequence[Row], artifacts_link: str = "../artifacts") -> str:
    """The scorecard as markdown (``docs/scorecard.md``); links to runs are relative to ``artifacts_link``."""
    lines = ["# Scorecard: the paper's claims against the committed runs", "",
             "<!-- generated by `kvprobe report scorecard` (studies/scorecard.py); do not edit: "
             "tests/test_scorecard.py regenerates it from the committed runs and fails on any difference -->", "",
             f'Each row tests one claim of the paper ("{PAPER_TITLE}") on one committed run, under one grading rule '
             "and reference arm. Every estimate is read from the run's `summary.json` (recognition: `readouts.json` "
             "and `scores.json`); every verdict is computed by the rule below "
             "(`kvprobe.studies.scorecard.verdict`), never written by hand. `L357-358` are lines of the paper's "
             "LaTeX source. Our models have 135M-1.5B parameters, the paper's 3B-70B; a verdict says what these "
             "runs show, not whether the paper is right.", "",
             "## Verdict rule", "", RULE_TEXT, "", "## Summary", ""]
    lines += table_head(["study", "rows", *VERDICTS])
    studies = list(dict.fromkeys(r.claim.study for r in rows))
    for study in studies:
        counts = _counts([r for r in rows if r.claim.study == study])
        lines.append(table_row([study, sum(counts.values()), *counts.values()]))
    total = _counts(rows)
    lines.append(table_row(["**all**", len(rows), *total.values()]))
    for study in studies:
        mine = [r for r in rows if r.claim.study == study]
        lines += ["", f"## {study}", ""]
        lines += table_head(["#", "claim", "model (run)", "rule; reference arm", "ours [95% CI]", "n", "verdict",
                             "why / note"])
        shown: set[str] = set()
        for r in mine:
            c, m = r.claim, r.measurement
            first = c.key not in shown
            shown.add(c.key)
            claim = (f"**{c.key}**: {c.claim} (paper: {c.paper.numbers}; {c.paper.where})" if first
                     else f"{c.key} (cont.)")
            rule = r.test.rule + (f"; {m.reference}" if m.reference else "")
            why = "; ".join(x for x in (m.not_testable, m.note, _against_paper(r)) if x)
            lines.append(table_row([r.index, _cell(claim), _run_link(r, artifacts_link), _cell(rule),
                                    r.estimate_text, _cell(r.n_text), f"**{r.verdict}**", _cell(why)]))
        lines += ["", "The paper, verbatim:", ""]
        for c in dict.fromkeys(r.claim for r in mine):
            lines.append(f'- **{c.key}** ({c.paper.section}, {_lines(c.paper.lines)}; the paper\'s direction: '
                         f'{c.direction}): "{c.paper.quote}"')
    return "\n".join(lines) + "\n"


def scorecard_json(rows: Sequence[Row]) -> dict[str, Any]:
    """The scorecard as JSON (``docs/scorecard.json``): the rule's constants, the counts and every row."""
    return {
        "paper": PAPER_TITLE,
        "rule": {"floor": FLOOR, "few_units": FEW_UNITS, "tolerance": TOLERANCE, "verdicts": list(VERDICTS)},
        "counts": _counts(rows),
        "rows": [{
            "index": r.index, "claim": r.claim.key, "study": r.claim.study, "statement": r.claim.claim,
            "direction": r.claim.direction, "paper": {"quote": r.claim.paper.quote, "lines": list(r.claim.paper.lines),
                                                      "section": r.claim.paper.section,
                                                      "numbers": r.claim.paper.numbers},
            "run": r.test.run, "model": r.model, "rule": r.test.rule, "reference": r.measurement.reference,
            "value": r.measurement.value, "ci": list(r.measurement.ci) if r.measurement.ci else None,
            "null": r.measurement.null, "unit": r.measurement.unit, "n": r.measurement.n,
            "resampled_units": r.measurement.units, "verdict": r.verdict,
            "not_testable": r.measurement.not_testable, "note": r.measurement.note or None,
        } for r in rows],
    }


def write_scorecard(artifacts: Path | str = "artifacts", out: Path | str = "docs/scorecard.md") -> list[Row]:
    """Evaluate every claim on ``artifacts`` and write ``out`` (markdown) and the JSON beside it.

    Links in the markdown point from ``out``'s folder to ``artifacts``.
    """
    import os

    out = Path(out)
    rows = evaluate(artifacts)
    link = Path(os.path.relpath(Path(artifacts).resolve(), out.parent.resolve())).as_posix()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(format_markdown(rows, link))
    out.with_suffix(".json").write_text(json.dumps(scorecard_json(rows), indent=1) + "\n")
    return rows
