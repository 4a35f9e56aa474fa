"""The paper's claims the mquake study tests, with measures of the mquake runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`). The run's report (``summary.py``) judges the
same claims, and those of :data:`REPORT_CLAIMS`, on measurements built here from the summary dict
(:func:`cell_change_measurement`, :func:`direct_contrast_measurement`, :func:`strata_measurement`,
:func:`current_value_measurement`, :func:`routing_measurement`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, count_pp, find_entry,
                                           floor_reason, pp_measurement, read_summary, share_pp)

__all__ = ["CLAIMS", "DIRECT_LINES", "MQUAKE", "MQUAKE_NC", "MQUAKE_QWEN", "PAPER_MODELS", "REPORT_CLAIMS", "RUNS",
           "TABLE", "TABLE_LINES", "cell_change_measurement", "current_value_measurement", "direct_contrast_measurement",
           "mquake_current_value", "mquake_routing", "mquake_strata", "mquake_vs_full", "mquake_vs_source",
           "routing_measurement", "strata_measurement"]


MQUAKE, MQUAKE_NC = "mquake/smollm2-135m-instruct", "mquake/smollm2-135m-instruct-no-context"
#: Qwen2.5-Coder-1.5B-Instruct (bfloat16): one run with the no-context baseline, so it is both runs above.
MQUAKE_QWEN = "mquake/qwen2.5-coder-1.5b-instruct"
#: (main run, run with the no-context tables) per model, in the scorecard's order.
RUNS = ((MQUAKE, MQUAKE_NC), (MQUAKE_QWEN, MQUAKE_QWEN))

#: The paper's models of its MQuAKE table, in the order of the rates below.
PAPER_MODELS = ("Qwen3-4B", "Llama-3.2-3B", "Qwen3-32B")
#: The paper's MQuAKE table (:data:`TABLE_LINES`): % correct under full access and the source mask per model, and
#: the questions behind each rate (current paraphrases, historical questions).
TABLE = {"current": {"full": (81.2, 44.2, 81.8), "source-mask": (84.2, 63.9, 83.2), "n": 1800},
         "historical": {"full": (88.2, 85.8, 97.0), "source-mask": (74.0, 80.2, 82.3), "n": 600}}
TABLE_LINES = (436, 436)


#: What the measurements call each reference arm: in the counts (``full 45/90``) and in a floor's reason.
_ARM = {"full": ("full", "full access"), "source-mask": ("source mask", "source mask")}


def _cases(s: dict[str, Any]) -> int | None:
    """The run's cases (full access's row of ``any_paraphrase``), None when the summary has none."""
    return next((a["cases"] for a in s.get("any_paraphrase") or () if a["policy"] == "full"), None)


def cell_change_measurement(s: dict[str, Any], kind: str, condition: str, reference: str, rule: str) -> Measurement:
    """A condition's change in correct answers on ``kind`` against ``reference`` (``full`` or ``source-mask``) in a
    summary ``s``: the summary's cell change (every question, the run's paired case bootstrap), in pp of the
    questions; not testable when the reference arm is at the floor under ``rule``.

    The run's report (``summary.claim_verdicts``) and the scorecard (:func:`mquake_vs_full`) both judge this
    measurement.
    """
    cell = find_entry(s["cells"], kind=kind, policy=condition)
    ref = find_entry(s["cells"], kind=kind, policy=reference)
    label, floor = _ARM[reference]
    versus = "full" if reference == "full" else "source"
    cases = _cases(s)
    value, ci = count_pp(cell[f"{rule}_change_vs_{versus}"], cell["n"])
    return pp_measurement(value, ci, f"{cell['n']} questions, {cases} cases",
                          f"{label} {ref[rule]}/{ref['n']}; {condition} {cell[rule]}/{cell['n']}",
                          floor_reason(ref[rule], ref["n"], floor), units=cases, answers=cell["n"])


def mquake_vs_full(kind: str, condition: str, rule: str) -> Callable[[Path], Measurement]:
    """A condition's change in correct answers against full access (the run's paired case bootstrap):
    :func:`cell_change_measurement` of a committed run."""
    def measure(run: Path) -> Measurement:
        return cell_change_measurement(read_summary(run), kind, condition, "full", rule)
    return measure


def mquake_vs_source(kind: str, condition: str, rule: str, gain: bool) -> Callable[[Path], Measurement]:
    """A condition against the source mask, from the no-context run's tables (their subset must be every question).

    ``gain``: the paper's effect is a gain (the floor is checked on full access, else on the source mask).
    """
    def measure(run: Path) -> Measurement:
        table = find_entry(read_summary(run)["no_context"], rule=rule, query=kind)
        if table["subset"] != table["units"]:
            raise ValueError(f"{run}: the no-context subset ({table['subset']}) is not every question "
                             f"({table['units']}); it is not the whole-sample comparison")
        cell = find_entry(table["conditions"], condition=condition)
        source = find_entry(table["conditions"], condition="source-mask")
        full = find_entry(table["conditions"], condition="full")
        ch = cell["change_vs_reference"]
        value, ci = share_pp(ch["change"], ch["ci"])
        floor = (floor_reason(full["correct"], full["n"], "full access") if gain
                 else floor_reason(source["correct"], source["n"], "source mask"))
        return pp_measurement(value, ci, f"{cell['n']} questions, {table['groups']} cases",
                              f"source mask {source['correct']}/{source['n']}; "
                              f"{condition} {cell['correct']}/{cell['n']}",
                              floor, units=table["groups"], answers=cell["n"])
    return measure


def direct_contrast_measurement(contrast: dict[str, Any], rule: str) -> Measurement:
    """One direct contrast of the summary (an entry of ``direct_contrasts``: an operation minus the source mask on
    the first current paraphrase or the historical question) under ``rule``, in pp of the cases; not testable when
    the source mask, the reference arm, is at the floor.

    The run's report (``summary.direct_verdicts``) judges it by the claims of :data:`CLAIMS` and
    :data:`REPORT_CLAIMS`.
    """
    ch, n = contrast[rule], contrast["n"]
    value, ci = count_pp(ch, n)
    return pp_measurement(value, ci, f"{n} cases", f"source mask {ch['source']}/{n}; "
                          f"{contrast['operation']} {ch['operation']}/{n}",
                          floor_reason(ch["source"], n, "source mask"), units=n, answers=n)


def routing_measurement(routing: dict[str, Any], rule: str, cases: int | None = None) -> Measurement:
    """The summary's offline router (``routing``: historical prefix -> full access, every other question -> text
    recompute) minus the best single policy under ``rule``, in pp of every question (paper L4309-4316; the best
    policy is chosen after the results); not testable when the best policy is at the floor. ``cases``: the run's
    cases, the resampled units (None: not known).

    The run's report (``summary.routing_verdicts``) and the scorecard (:func:`mquake_routing`) both judge this
    measurement.
    """
    r, n = routing[rule], routing["n"]
    value, ci = count_pp(r["change_vs_best"], n)
    best = r["policies"][r["best"]]
    return pp_measurement(value, ci, f"{n} questions" if cases is None else f"{n} questions, {cases} cases",
                          f"best single policy {r['best']} {best}/{n}; routed {r['routed']}/{n}",
                          floor_reason(best, n, f"best single policy ({r['best']})"), units=cases, answers=n)


def mquake_routing(rule: str) -> Callable[[Path], Measurement]:
    """:func:`routing_measurement` of a committed run."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        return routing_measurement(s["routing"], rule, _cases(s))
    return measure


def current_value_measurement(current: dict[str, Any], rule: str, full_floor: bool = False) -> Measurement:
    """Historical questions answered with the current value (the summary's ``current_value``), text recompute
    minus the source mask under ``rule`` (L4246-4252), in pp of the historical questions. Not testable when no
    historical answer gives the current value under either arm; with ``full_floor`` (the run's report) instead
    when full access states the current value (first current paraphrase) below the floor, since then no policy
    can be expected to give it.

    The run's report (``summary.current_value_verdicts``, ``full_floor=True``) and the scorecard
    (:func:`mquake_current_value`) both judge this measurement.
    """
    t, n = current[rule], current["n"]
    cells = {c["policy"]: c for c in t["cells"]}
    source, recompute = cells["source-mask"], cells["recompute"]
    value, ci = count_pp(recompute["change_vs_source"], n)
    if full_floor:
        reason = floor_reason(t["current_full"], t["current_n"], "full access stating the current value")
    else:
        reason = (None if source["count"] + recompute["count"] else
                  "no historical answer gives the current value under either arm (0 and 0)")
    return pp_measurement(value, ci, f"{n} historical questions, {n} cases",
                          f"source mask {source['count']}/{n}; recompute {recompute['count']}/{n}", reason,
                          units=n, answers=n)


def mquake_current_value(rule: str) -> Callable[[Path], Measurement]:
    """Historical questions answered with the current value: text recompute minus the source mask (L4246-4252),
    :func:`current_value_measurement` of a committed run."""
    def measure(run: Path) -> Measurement:
        return current_value_measurement(read_summary(run)["current_value"], rule)
    return measure


def strata_measurement(historical: dict[str, Any], stratum: str | None = None,
                       floor: str = "source-mask") -> Measurement:
    """Recompute minus the source mask on historical questions by retained-text stratum (the summary's
    ``recompute_vs_source[rule]["historical"]``): the retained-text stratum minus the masked-only stratum
    (``stratum`` None; paper L4231-4238) or one stratum's own change (``retained``). Not testable when the ``floor``
    arm (default: the source mask, the claim's reference arm; ``full``: full access) is at the floor in the
    retained stratum.

    The run's report (``summary.retained_verdicts``) and the scorecard (:func:`mquake_strata`) both judge this
    measurement.
    """
    retained, masked = historical["strata"]["retained"], historical["strata"]["masked_only"]
    if stratum is None:
        d = historical["difference"]
        value, ci = d["pp"], d["ci_pp"]
    else:
        value, ci = historical["strata"][stratum]["change_pp"], historical["strata"][stratum]["ci_pp"]
    return pp_measurement(value, ci, f"{retained['n']} retained + {masked['n']} masked-only cases",
                          f"recompute - source: retained {retained['change']:+d}, "
                          f"masked-only {masked['change']:+d}",
                          floor_reason(retained["correct"].get(floor, 0), retained["n"],
                                       f"{_ARM[floor][1]} (retained stratum)"),
                          units=retained["cases"] + masked["cases"])


def mquake_strata(rule: str) -> Callable[[Path], Measurement]:
    """Recompute-minus-source change on historical questions, retained-text stratum minus masked-only stratum
    (paper L4231-4238); the floor is the source mask in the retained stratum: :func:`strata_measurement` of a
    committed run."""
    def measure(run: Path) -> Measurement:
        return strata_measurement(read_summary(run)["recompute_vs_source"][rule]["historical"])
    return measure


def _mquake_tests(condition: str, kind: str, gain: bool = False) -> tuple[Test, ...]:
    """The paper's exact match (primary) and our contains rule (secondary) for ``policy`` on ``kind`` in each
    model's runs (:data:`RUNS`): the source mask against full access (the main run), every other policy against the
    source mask (the no-context run's tables)."""
    if condition == "source-mask":
        against = "full"

        def make(rule: str) -> Callable[[Path], Measurement]:
            return mquake_vs_full(kind, condition, rule)
    else:
        against = "source mask"

        def make(rule: str) -> Callable[[Path], Measurement]:
            return mquake_vs_source(kind, condition, rule, gain)
    where = f"{condition} vs {against}; " + ("current paraphrases" if kind == "current" else "historical question")
    return tuple(test for main, no_context in RUNS
                 for run in [main if condition == "source-mask" else no_context]
                 for test in (Test(run, f"{PAPER_RULE}: normalized exact match with EOS; {where}", make("em")),
                              Test(run, f"{LENIENT}: answer or alias contained; {where}", make("contains"),
                                   primary=False)))


def _mquake_rules(what: str, measure: Callable[[str], Callable[[Path], Measurement]]) -> tuple[Test, ...]:
    """Each model's main MQuAKE run read by ``measure(rule)`` under the paper's exact match (primary) and our
    contains rule (secondary)."""
    return tuple(test for main, _ in RUNS
                 for test in (Test(main, f"{PAPER_RULE}: normalized exact match with EOS; {what}", measure("em")),
                              Test(main, f"{LENIENT}: answer or alias contained; {what}", measure("contains"),
                                   primary=False)))


CLAIMS: tuple[Claim, ...] = (
    Claim("mquake.source-current", "mquake", "Hiding the superseded records raises current multi-hop answers",
          Paper("Source masking increases current reference matches in all three models", (501, 501),
                "Later Cache States Can Preserve Earlier Relations",
                ", ".join(f"{model} {full:.1f} -> {masked:.1f}" for model, full, masked in
                          zip(PAPER_MODELS, TABLE["current"]["full"], TABLE["current"]["source-mask"])) + " (%)",
                TABLE_LINES),
          "up",
          _mquake_tests("source-mask", "current"), reference="full access", units="cases"),
    Claim("mquake.recompute-current", "mquake", "Recomputing without the old records raises current answers "
          "beyond the source mask",
          Paper("Recomputing the history after deleting the same records improves current matches by a further "
                "4.2--9.6 percentage points", (504, 505), "Later Cache States Can Preserve Earlier Relations",
                "+4.2 to +9.6 pp"),
          "up",
          _mquake_tests("recompute", "current", gain=True), reference="source mask", units="cases"),
    Claim("mquake.recompute-historical", "mquake", "Recomputing loses historical answers against the source mask",
          Paper("while losing 20.2--41.0 historical points", (505, 506),
                "Later Cache States Can Preserve Earlier Relations", "-20.2 to -41.0 pp"),
          "down",
          _mquake_tests("recompute", "historical"), reference="source mask", units="cases"),
    Claim("mquake.rebuild", "mquake", "Rebuilding later states at fixed positions loses historical answers",
          Paper("Rebuilding states at the original positions lowers historical accuracy by 19.8--41.3 points.",
                (539, 540), "Later Cache States Can Preserve Earlier Relations", "-19.8 to -41.3 pp"),
          "down",
          _mquake_tests("rebuild", "historical"), reference="source mask", units="cases"),
    Claim("mquake.compact", "mquake", "Compacting the rows (states kept, positions moved) changes historical "
          "answers little",
          Paper("Compacting the existing states changes it by only -0.2 to +1.2 points, with all three intervals "
                "including zero", (540, 541), "Later Cache States Can Preserve Earlier Relations",
                "-0.2 to +1.2 pp"),
          "none",
          _mquake_tests("compact", "historical"), reference="source mask", units="cases"),
    Claim("mquake.strata", "mquake", "Recomputing loses historical answers only where the retained text holds them",
          Paper("Relative to source masking, recomputation's historical loss is confined to the retained stratum",
                (4232, 4233), "Retained Text and Routing on Contextual MQuAKE",
                "stratum difference -52.5 [-60.3, -45.2], -48.8 [-56.8, -41.0], -24.7 [-33.8, -15.7] pp",
                (4236, 4238)),
          "down",
          _mquake_rules("recompute - source mask, retained minus masked-only stratum, historical", mquake_strata), reference="source mask", units="cases"),
    Claim("mquake.current-value", "mquake", "Recomputing answers historical questions with the current value",
          Paper("Recomputation instead often answers the historical question with the current value", (4247, 4248),
                "Retained Text and Routing on Contextual MQuAKE",
                "recompute - source +30.5 [26.7, 34.5], +25.2 [21.3, 29.0], +5.8 [3.5, 8.3] pp", (4251, 4252)),
          "up",
          _mquake_rules("answers the current value; recompute vs source mask, historical questions",
                        mquake_current_value), reference="source mask", units="cases"),
    Claim("mquake.routing", "mquake", "Routing by question type (historical -> full, others -> recompute) beats "
          "the best single cache",
          Paper("Because the two operations serve different question types, an offline router over existing "
                "answers recovers both.", (4309, 4310), "Retained Text and Routing on Contextual MQuAKE",
                "routed - best +4.6 [3.1, 6.1], +6.6 [5.3, 7.9], +4.5 [2.9, 6.0] pp", (4314, 4315)),
          "up",
          _mquake_rules("routed vs best single policy, all questions", mquake_routing), reference="best single policy", units="cases"),
)

#: The paper's direct-contrast table (tab:mquake_direct_contrasts): per model (:data:`PAPER_MODELS` order Qwen3-4B,
#: Llama-3.2-3B, Qwen3-32B) each operation minus the source mask, pp [95% CI].
DIRECT_LINES = (4505, 4516)

#: Claims only the run's report judges (the scorecard lists :data:`CLAIMS`): the source mask's historical loss
#: against full access, the direct contrasts on the current question (first paraphrase), and recompute's loss in
#: the retained-text stratum.
REPORT_CLAIMS: tuple[Claim, ...] = (
    Claim("mquake.source-historical", "mquake", "Hiding the superseded records loses historical multi-hop answers",
          Paper("Masking the old creator record hides the first link in the historical chain.", (495, 496),
                "Later Cache States Can Preserve Earlier Relations",
                ", ".join(f"{model} {full:g} -> {masked:g}" for model, full, masked in
                          zip(PAPER_MODELS, TABLE["historical"]["full"], TABLE["historical"]["source-mask"])) + " (%)",
                TABLE_LINES),
          "down", ()),
    Claim("mquake.rebuild-current", "mquake", "Rebuilding later states at fixed positions raises current answers "
          "against the source mask",
          Paper("Rebuilding also improves current answers in both Qwen models", (543, 544),
                "Later Cache States Can Preserve Earlier Relations",
                "+7.3 [+4.7, +10.2], +3.3 [-0.2, +6.8], +11.5 [+8.5, +14.5] pp", DIRECT_LINES),
          "up", ()),
    Claim("mquake.compact-current", "mquake", "Compacting the rows changes current answers little",
          Paper("whereas compacting existing states has little effect.", (240, 240), "Introduction",
                "-1.5 [-3.3, +0.3], +0.5 [-1.0, +2.0], -1.7 [-3.8, +0.5] pp", DIRECT_LINES),
          "none", ()),
    Claim("mquake.retained-loss", "mquake", "Recomputing loses historical answers against the source mask where the "
          "retained text holds the answer",
          Paper("Almost all of recomputation's net historical loss occurs in this subset, where it scores "
                "23.5--47.5 points below source masking.", (519, 521),
                "Later Cache States Can Preserve Earlier Relations", "-23.5 to -47.5 pp"),
          "down", ()),
)
