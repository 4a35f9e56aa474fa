"""The MQuAKE summary's contrasts and routing (paper L4216-4330, L4466-4527) on hand-built rows, each against counts
worked out by hand: direct operation-minus-source contrasts, per-stratum changes and their difference, historical
questions answered with the current value, and the offline router against the best single policy and the oracle."""

from __future__ import annotations

import json

import pytest

from kvprobe.readouts.stats import mcnemar_exact
from kvprobe.studies.common.report import INCONCLUSIVE, NOT_TESTABLE, OPPOSITE, REPLICATES
from kvprobe.studies.mquake.summary import current_value_answers, direct_contrasts, direct_verdicts, format_report, \
    recompute_vs_source, routing, routing_verdicts, summarize

DRAWS = 200  # enough for the interval checks below; cheap
INDEX = {"current": 0, "historical": 3}


def _row(case, kind, condition, ok, *, index=None, retained=True, edits=1, output=None, eos=True,
         answers=("Old Town",)):
    return {"case_id": case, "group": case, "query": kind, "condition": condition, "em": bool(ok),
            "em_strict_boxed": False, "contains": bool(ok), "retained_text": retained, "edits": edits,
            "question_index": INDEX[kind] if index is None else index, "answers": list(answers),
            "output": output if output is not None else ("x" if ok else "y"),
            "stop_reason": "eos" if eos else "cap", "hops": 2}


def _by_key(rows):
    out = {}
    for r in rows:
        out.setdefault((r["query"], r["condition"]), {})[(r["case_id"], r["question_index"])] = r
    return out


def test_direct_contrasts_use_the_first_paraphrase_and_pair_cases():
    """rebuild - source: current (first paraphrase) a 1-1, b 1-0, c 1-1 -> +1 (1 correction); the second
    paraphrase (index 1: rebuild right, source wrong everywhere) is left out; historical: every case 0-1 -> -3,
    interval [-3, -3]."""
    rows = []
    for case, (src, reb) in {"a": (1, 1), "b": (0, 1), "c": (1, 1)}.items():
        rows += [_row(case, "current", "source-mask", src), _row(case, "current", "rebuild", reb),
                 _row(case, "current", "source-mask", 0, index=1), _row(case, "current", "rebuild", 1, index=1),
                 _row(case, "historical", "source-mask", 1), _row(case, "historical", "rebuild", 0)]
    out = {(c["question"], c["operation"]): c for c in direct_contrasts(_by_key(rows), seed=1, draws=DRAWS)}
    assert set(out) == {("current", "rebuild"), ("historical", "rebuild")}  # no compact or recompute rows
    current = out[("current", "rebuild")]
    assert current["n"] == 3
    assert {k: current["em"][k] for k in ("operation", "source", "change", "corrections", "reversals")} == \
        {"operation": 3, "source": 2, "change": 1, "corrections": 1, "reversals": 0}
    assert 0 <= current["em"]["ci"][0] <= 1 <= current["em"]["ci"][1] <= 3  # a draw holds b 0 to 3 times
    hist = out[("historical", "rebuild")]["contains"]
    assert (hist["change"], hist["reversals"], hist["ci"]) == (-3, 3, [-3.0, -3.0])


def test_direct_verdicts_read_the_paper_direction_and_the_floor():
    """compact is a no-change claim (within 5 pp): [-1, +1] of 100 replicates, [-8, +1] is inconclusive; rebuild on the
    historical question is a loss: [-9, -2] replicates; a source mask at 5 of 100 is below the 10% floor."""
    def contrast(question, operation, ci, source=50):
        change = {"change": (ci[0] + ci[1]) / 2, "ci": ci, "corrections": 0, "reversals": 0, "operation": 0,
                  "source": source}
        return {"question": question, "operation": operation, "n": 100, "em": change, "contains": change}

    verdicts = [v["verdict"] for v in direct_verdicts({"direct_contrasts": [
        contrast("historical", "compact", [-1, 1]), contrast("historical", "compact", [-8, 1]),
        contrast("historical", "rebuild", [-9, -2]), contrast("historical", "rebuild", [-9, -2], source=5),
        contrast("current", "rebuild", [-9, -2])]}) if v["rule"] == "em"]
    assert verdicts == [REPLICATES, INCONCLUSIVE, REPLICATES, NOT_TESTABLE, OPPOSITE]


def test_strata_changes_resample_within_each_stratum_and_their_difference():
    """Historical: retained r1, r2 lose (source 1, recompute 0): -100 pp, interval [-100, -100]; masked-only m1
    gains, m2 ties: +50 pp; single-edit masked-only (m1 only): +100 pp [100, 100]; difference -150 pp with its
    interval inside [-200, -100] (every draw: -100 minus the masked-only draw, 0 to 100). McNemar: 0 / 2 gives
    p = 2 P(Bin(2, 1/2) = 0) = 0.5."""
    rows = []
    for case, retained, edits, src, rec in (("r1", True, 1, 1, 0), ("r2", True, 2, 1, 0),
                                            ("m1", False, 1, 0, 1), ("m2", False, 2, 0, 0)):
        for condition, ok in (("full", 1), ("source-mask", src), ("online-mask", src), ("recompute", rec)):
            rows.append(_row(case, "historical", condition, ok, retained=retained, edits=edits))
            rows.append(_row(case, "current", condition, 1, retained=retained, edits=edits))
    out = recompute_vs_source(_by_key(rows), seed=3, draws=DRAWS)
    hist = out["em"]["historical"]
    retained, masked, single = (hist["strata"][k] for k in ("retained", "masked_only", "masked_only_single_edit"))
    assert retained["correct"] == {"full": 2, "source-mask": 2, "online-mask": 2, "recompute": 0}
    assert (retained["n"], retained["change"], retained["change_pp"], retained["ci_pp"]) == (2, -2, -100.0,
                                                                                          [-100.0, -100.0])
    assert (retained["arm_only"], retained["reference_only"], retained["mcnemar_p"]) == (0, 2, 0.5)
    assert (masked["n"], masked["change_pp"], masked["mcnemar_p"]) == (2, 50.0, 1.0)
    assert 0 <= masked["ci_pp"][0] <= masked["ci_pp"][1] <= 100
    assert (single["n"], single["change_pp"], single["ci_pp"]) == (1, 100.0, [100.0, 100.0])
    d = hist["difference"]
    assert d["of"] == ["retained", "masked_only"] and d["pp"] == -150.0
    assert -200 <= d["ci_pp"][0] <= d["ci_pp"][1] <= -100
    assert out["em"]["current"]["strata"]["retained"]["change_pp"] == 0.0  # current: every policy right
    # losses {r1, r2}, no current gains: [[0, 2], [0, 2]]
    assert out["em"]["loss_and_current_gain"]["table"] == [[0, 2], [0, 2]]


def test_historical_answers_are_regraded_against_the_current_value():
    """Current value "New York". recompute: a "New York" (EOS), b a sentence holding it (EOS), c "New York" cut at the
    cap; source mask: b "New York" (EOS). Exact match with EOS: recompute 1 (a), source 1 (b), change 0 (1 / 1);
    contains: recompute 3, source 1, change +2, recompute's rate 3/3 with interval [1, 1]."""
    current = ("New York", "NYC")
    outputs = {"recompute": {"a": ("New York", True), "b": ("The answer is New York.", True), "c": ("New York", False)},
               "source-mask": {"a": ("Old Town", True), "b": ("New York", True), "c": ("Old", True)}}
    rows = []
    for condition, answers in outputs.items():
        for case, (text, eos) in answers.items():
            rows.append(_row(case, "historical", condition, 0, output=text, eos=eos))
            rows.append(_row(case, "current", condition, 0, answers=current))
    rows.append(_row("a", "current", "full", 1, answers=current))  # full access states the current value once
    out = current_value_answers(_by_key(rows), seed=5, draws=DRAWS)
    assert out["n"] == 3 and out["policies"] == ["source-mask", "recompute"]
    em = {c["policy"]: c for c in out["em"]["cells"]}
    assert (em["recompute"]["count"], em["source-mask"]["count"]) == (1, 1)
    ch = em["recompute"]["change_vs_source"]
    assert (ch["change"], ch["corrections"], ch["reversals"]) == (0, 1, 1)
    assert (out["em"]["current_full"], out["em"]["current_n"]) == (1, 1)
    contains = {c["policy"]: c for c in out["contains"]["cells"]}
    assert contains["recompute"]["count"] == 3 and contains["recompute"]["ci"] == [1.0, 1.0]
    assert contains["recompute"]["change_vs_source"]["change"] == 2
    assert "change_vs_source" not in contains["source-mask"]


def _routing_rows():
    """Three cases, a current and a historical question each; correct answers (cases x, y, z):

    full: current 0 0 0, historical 1 1 0 (2); recompute: current 1 1 0, historical 0 0 1 (3);
    source mask: current 1 0 0, historical 1 0 0 (2)."""
    table = {"full": ((0, 0, 0), (1, 1, 0)), "recompute": ((1, 1, 0), (0, 0, 1)), "source-mask": ((1, 0, 0), (1, 0, 0))}
    return [_row(case, kind, condition, ok) for condition, kinds in table.items()
            for kind, oks in zip(("current", "historical"), kinds) for case, ok in zip("xyz", oks)]


def test_routing_against_the_best_single_policy_and_the_oracle():
    """Best single policy: recompute (3; value and online masks are not in the run). Routed: current from recompute
    (1 1 0) + historical from full (1 1 0) = 4, +1 against recompute (historical x, y gained, z lost: 2 / 1, McNemar
    p = 2 P(Bin(3, 1/2) <= 1) = 1). Oracle, the better of full and recompute per question: 2 + 3 = 5; the router
    closes (4 - 3) / (5 - 3) = half the gap. Per class: historical -> full, other -> recompute."""
    out = routing(_by_key(_routing_rows()), seed=7, draws=DRAWS)
    assert (out["n"], out["historical"], out["candidates"]) == (6, 3, ["full", "source-mask", "recompute"])
    em = out["em"]
    assert em["policies"] == {"full": 2, "source-mask": 2, "recompute": 3} and em["best"] == "recompute"
    assert (em["routed"], em["oracle"], em["gap_closed"]) == (4, 5, 0.5)
    ch = em["change_vs_best"]
    assert (ch["change"], ch["corrections"], ch["reversals"]) == (1, 2, 1)
    assert em["mcnemar_p"] == mcnemar_exact(2, 1) == 1.0
    assert em["class_best"] == {"historical": "full", "other": "recompute"}
    # ties go to the earlier policy of the list; an oracle no better than the best leaves the gap undefined
    tied = routing(_by_key(_routing_rows()), seed=7, draws=DRAWS, policies=("source-mask", "full"))["em"]
    assert tied["best"] == "source-mask" and tied["gap_closed"] == pytest.approx(2 / 3)


def test_routing_verdicts():
    """Routed - best, a gain in the paper: [+2, +8] of 100 replicates, [-9, -2] is opposite, a best policy at 5 of
    100 is below the floor."""
    def summary(ci, best_correct=50):
        r = {"change_vs_best": {"change": (ci[0] + ci[1]) / 2, "ci": ci}, "policies": {"full": best_correct},
             "best": "full", "routed": best_correct}
        return {"n": 100, "em": r, "contains": r}

    assert [v["verdict"] for v in routing_verdicts(summary([2, 8]))] == [REPLICATES] * 2
    assert routing_verdicts(summary([-9, -2]))[0]["verdict"] == OPPOSITE
    assert routing_verdicts(summary([2, 8], best_correct=5))[0]["verdict"] == NOT_TESTABLE


def test_summary_and_report_hold_the_new_sections(tmp_path):
    """From rows on disk: the historical direct contrast is the cell's change against the source mask (same draws),
    and the report carries the three new sections."""
    rows = _routing_rows()
    rows += [_row(r["case_id"], r["query"], condition, r["em"]) for r in list(rows) if r["condition"] == "source-mask"
             for condition in ("rebuild", "compact")]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = summarize(tmp_path, seed=11, draws=DRAWS)
    cell = next(c for c in summary["cells"] if (c["kind"], c["policy"]) == ("historical", "recompute"))
    direct = next(c for c in summary["direct_contrasts"] if (c["question"], c["operation"]) == ("historical",
                                                                                               "recompute"))
    assert {k: direct["em"][k] for k in cell["em_change_vs_source"]} == cell["em_change_vs_source"]
    assert summary["routing"]["em"]["routed"] == 4
    report = format_report(summary, {"study_config": {"source": "generated"}})
    for heading in ("## Direct contrasts with the source mask", "## Retained text", "## Offline routing"):
        assert heading in report
