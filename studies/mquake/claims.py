"""The paper's claims the mquake study tests, with measures of the mquake runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, count_pp, find_entry,
                                           floor_reason, pp_measurement, read_summary, share_pp)

__all__ = ["CLAIMS", "MQUAKE", "MQUAKE_NC", "MQUAKE_QWEN", "PAPER_MODELS", "RUNS", "TABLE", "TABLE_LINES", "mquake_current_value",
           "mquake_routing", "mquake_strata", "mquake_vs_full", "mquake_vs_source"]


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


def mquake_vs_full(kind: str, condition: str, rule: str) -> Callable[[Path], Measurement]:
    """A condition's change in correct answers against full access (the run's paired case bootstrap)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        cell = find_entry(s["cells"], kind=kind, policy=condition)
        full = find_entry(s["cells"], kind=kind, policy="full")
        cases = find_entry(s["any_paraphrase"], policy="full")["cases"]
        value, ci = count_pp(cell[f"{rule}_change_vs_full"], cell["n"])
        return pp_measurement(value, ci, f"{cell['n']} questions, {cases} cases",
                              f"full {full[rule]}/{full['n']}; {condition} {cell[rule]}/{cell['n']}",
                              floor_reason(full[rule], full["n"], "full access"), units=cases)
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
                              floor, units=table["groups"])
    return measure


def mquake_routing(rule: str) -> Callable[[Path], Measurement]:
    """The offline router (historical prefix -> full access, every other question -> text recompute) minus the
    best single policy, over every question (paper L4309-4316); the best policy is chosen after the results."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        routing = s["routing"]
        r = routing[rule]
        cases = find_entry(s["any_paraphrase"], policy="full")["cases"]
        value, ci = count_pp(r["change_vs_best"], routing["n"])
        best = r["policies"][r["best"]]
        return pp_measurement(value, ci, f"{routing['n']} questions, {cases} cases",
                              f"best single policy {r['best']} {best}/{routing['n']}; "
                              f"routed {r['routed']}/{routing['n']}",
                              floor_reason(best, routing["n"], f"best single policy ({r['best']})"), units=cases)
    return measure


def mquake_current_value(rule: str) -> Callable[[Path], Measurement]:
    """Historical questions answered with the current value: text recompute minus the source mask (L4246-4252)."""
    def measure(run: Path) -> Measurement:
        cv = read_summary(run)["current_value"]
        cells = {c["policy"]: c for c in cv[rule]["cells"]}
        source, recompute = cells["source-mask"], cells["recompute"]
        value, ci = count_pp(recompute["change_vs_source"], cv["n"])
        reason = (None if source["count"] + recompute["count"] else
                  "no historical answer gives the current value under either arm (0 and 0)")
        return pp_measurement(value, ci, f"{cv['n']} historical questions, {cv['n']} cases",
                              f"source mask {source['count']}/{cv['n']}; "
                              f"recompute {recompute['count']}/{cv['n']}", reason,
                              units=cv["n"])
    return measure


def mquake_strata(rule: str) -> Callable[[Path], Measurement]:
    """Recompute-minus-source change on historical questions, retained-text stratum minus masked-only stratum
    (paper L4231-4238); the floor is full access in the retained stratum."""
    def measure(run: Path) -> Measurement:
        hist = read_summary(run)["recompute_vs_source"][rule]["historical"]
        retained, masked = hist["strata"]["retained"], hist["strata"]["masked_only"]
        d = hist["difference"]
        return pp_measurement(d["pp"], d["ci_pp"], f"{retained['n']} retained + {masked['n']} masked-only cases",
                              f"recompute - source: retained {retained['change']:+d}, "
                              f"masked-only {masked['change']:+d}",
                              floor_reason(retained["correct"]["full"], retained["n"], "full access (retained stratum)"),
                              units=retained["cases"] + masked["cases"])
    return measure


def _mquake_tests(condition: str, kind: str, gain: bool = False) -> tuple[Test, ...]:
    """The paper's exact match and our contains rule for ``policy`` on ``kind`` in each model's runs
    (:data:`RUNS`): the source mask against full access (the main run), every other policy against the source
    mask (the no-context run's tables)."""
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
                              Test(run, f"{LENIENT}: answer or alias contained; {where}", make("contains"))))


def _mquake_rules(what: str, measure: Callable[[str], Callable[[Path], Measurement]]) -> tuple[Test, ...]:
    """Each model's main MQuAKE run read by ``measure(rule)`` under the paper's exact match and our contains
    rule."""
    return tuple(test for main, _ in RUNS
                 for test in (Test(main, f"{PAPER_RULE}: normalized exact match with EOS; {what}", measure("em")),
                              Test(main, f"{LENIENT}: answer or alias contained; {what}", measure("contains"))))


CLAIMS: tuple[Claim, ...] = (
    Claim("mquake.source-current", "mquake", "Hiding the superseded records raises current multi-hop answers",
          Paper("Source masking increases current reference matches in all three models", (501, 501),
                "Later Cache States Can Preserve Earlier Relations",
                ", ".join(f"{model} {full:.1f} -> {masked:.1f}" for model, full, masked in
                          zip(PAPER_MODELS, TABLE["current"]["full"], TABLE["current"]["source-mask"])) + " (%)",
                TABLE_LINES),
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
)
