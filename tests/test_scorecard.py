"""The scorecard (``kvprobe report scorecard``, ``studies/scorecard.py`` over every study's ``claims.py``): the
committed docs/scorecard.md and
docs/scorecard.json are exactly what the committed runs give; the verdict rule reaches every verdict from
planted intervals and refuses malformed input; the measurements apply their floor, chance, reference-arm and
undefined-estimate rules on planted summaries; every quote is the paper's, at the lines and under the section
the scorecard cites. No model is loaded."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from kvprobe.cli import main
from kvprobe.studies import answer_level as al
from kvprobe.studies import scorecard as sc
from kvprobe.studies.babilong.claims import BABI_8K, babilong_change
from kvprobe.studies.common.claims import (DOES_NOT_HOLD, HOLDS, INCONCLUSIVE, LENIENT, NO_EFFECT, NOT_TESTABLE,
                                           OPPOSITE, PAPER_RULE, REPLICATES, Claim, Measurement, Paper, Row,
                                           chance_interval_reason, chance_reason, claim_results, evaluate,
                                           floor_reason, judge, judge_reason, reason, verdict_text)
from kvprobe.studies.common.claims import Test as ClaimTest
from kvprobe.studies.detection.claims import detection_json
from kvprobe.studies.fact_map.claims import fact_map_recovery
from kvprobe.studies.matched_scores.claims import MATCHED_QWEN, MATCHED_SMOL, matched_accuracy
from kvprobe.studies.mquake.claims import MQUAKE_NC
from kvprobe.studies.note_controls.claims import NOTES_SMOL
from kvprobe.studies.quantity.claims import QUANTITY, QUANTITY_QWEN, quantity_change, quantity_warning
from kvprobe.studies.recognition.claims import recognition_wins
from kvprobe.studies.scorecard import format_markdown, scorecard_json, verdict
from paper_text import PAPER, _plain

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
DOC = ROOT / "docs" / "scorecard.md"
#: Every study's claims, in the scorecard's order.
CLAIMS = sc.claims()


@pytest.fixture(scope="module")
def rows() -> list[Row]:
    return evaluate(ARTIFACTS, CLAIMS)


# --------------------------------------------------------------------------- the committed files


def test_committed_scorecard_is_regenerated_byte_for_byte(rows):
    assert DOC.read_text() == format_markdown(rows, "../artifacts"), \
        "docs/scorecard.md is stale: run `kvprobe report scorecard` and commit it"
    assert DOC.with_suffix(".json").read_text() == json.dumps(scorecard_json(rows), indent=1) + "\n", \
        "docs/scorecard.json is stale: run `kvprobe report scorecard` and commit it"


def test_cli_writes_the_same_files(tmp_path, capsys):
    out = tmp_path / "docs" / "scorecard.md"
    assert main(["report", "scorecard", str(ARTIFACTS), "--out", str(out)]) == 0
    assert "rows (" in capsys.readouterr().out
    # the links differ (they point from tmp_path to the artifacts); everything else is the committed text
    text = out.read_text()
    link = re.search(r"\]\(([^)]*)/quantity/", text).group(1)
    assert text.replace(f"]({link}/", "](../artifacts/") == DOC.read_text()
    assert json.loads(out.with_suffix(".json").read_text()) == json.loads(DOC.with_suffix(".json").read_text())


def test_every_study_with_a_committed_summary_has_a_claim(rows):
    studies = {p.parent.parent.name for p in ARTIFACTS.glob("*/*/summary.json")}
    covered = {r.test.run.split("/")[0] for r in rows}
    assert studies - covered == set(), f"studies with committed runs but no scorecard row: {studies - covered}"
    assert {r.claim.key for r in rows} == {c.key for c in CLAIMS}
    assert len({c.key for c in CLAIMS}) == len(CLAIMS), "claim keys must be unique"


def test_rows_carry_what_the_rule_needs(rows):
    for r in rows:
        m = r.measurement
        if r.verdict == NOT_TESTABLE:
            assert r.reason, r.claim.key
        else:
            assert m.ci is not None and m.value is not None and m.ci[0] <= m.value <= m.ci[1], (r.claim.key, m)
        assert r.model != "?", r.test.run
        assert m.units is not None, (r.claim.key, r.test.run)  # every row states its resampled units
        if m.units < sc.FEW_UNITS:
            assert f"fewer than {sc.FEW_UNITS}" in r.n_text, (r.claim.key, r.n_text)


def test_every_claim_declares_its_arm_units_and_one_primary_test_per_model(rows):
    for claim in CLAIMS:
        assert claim.reference and claim.units, claim.key
        mine = [r for r in rows if r.claim.key == claim.key]
        for model in {r.model for r in mine}:
            assert sum(r.test.primary for r in mine if r.model == model) == 1, (claim.key, model)


def test_no_measure_chooses_its_reference_arm_from_the_results():
    """The reference arm is the claim's (issue 46): no measurement switches to full access when the control moves."""
    import inspect

    from kvprobe.studies.matched_scores import claims as matched
    from kvprobe.studies.quantity import claims as quantity

    for fn in (quantity.quantity_change_measurement, matched.matched_accuracy_measurement):
        assert "switch" not in inspect.signature(fn).parameters


def test_the_issue_cases_read_as_the_data_say(rows):
    """Spot checks against numbers recounted from the reports (issue 31's list)."""
    by: dict[tuple[str, str, str], Row] = {}
    for r in rows:  # the first row of a (claim, run, rule): the primary one where a secondary shares its rule
        by.setdefault((r.claim.key, r.test.run, r.test.rule.split(":")[0].split(";")[0]), r)

    def row(key, run, rule):
        return by[(key, run, rule)]

    smol = row("matched-scores.replacement-answers", MATCHED_SMOL, LENIENT)
    # the control is the reference, fixed; its own change against full access is shown, flagged
    assert smol.measurement.reference.startswith("control ") and not smol.test.primary
    assert "control - full +36.0 [+25.3, +47.3] pp (not neutral)" in smol.measurement.note
    qwen = row("matched-scores.replacement-answers", MATCHED_QWEN, PAPER_RULE)
    assert qwen.estimate_text == "+6.7 [-2.7, +16.0] pp" and qwen.verdict == INCONCLUSIVE
    assert row("matched-scores.all-answers", MATCHED_QWEN, PAPER_RULE).verdict == REPLICATES
    assert row("quantity.unit-loss", QUANTITY, PAPER_RULE).verdict == NOT_TESTABLE
    recompute = row("mquake.recompute-current", MQUAKE_NC, LENIENT)
    assert recompute.verdict == OPPOSITE and "94/180" in recompute.measurement.reference
    babi = row("babilong.qa3-naive", BABI_8K, "official location parser with EOS")
    assert babi.verdict == NOT_TESTABLE and "scores 14/64" in babi.measurement.not_testable and babi.test.primary
    # 15/50 against a majority answer's 12/50 is above chance as a point, not by the exact test (issue 46)
    short = [r for r in rows if r.claim.key == "babilong.qa3-naive" and "0 filler" in r.test.rule][0]
    assert short.verdict == NOT_TESTABLE and "not above chance: 15/50" in short.reason
    number_only = [r for r in rows if r.claim.key == "quantity.number-only" and r.test.run == QUANTITY_QWEN]
    assert {r.estimate_text for r in number_only} == {"+0.0 [-5.0, +5.0] pp"}
    assert {r.verdict for r in number_only} == {INCONCLUSIVE}  # an interval at the band's edge
    explicit = [r for r in rows if r.claim.key == "factorial.explicit-request"]
    assert [r.verdict for r in explicit] == [NOT_TESTABLE, REPLICATES, INCONCLUSIVE]
    assert "controls - full +14.2 [+8.3, +20.4] pp (not neutral)" in explicit[1].measurement.note
    assert "mask minus full access" in explicit[2].test.rule
    by_key = {c.claim.key: c for c in claim_results(rows)}
    assert by_key["factorial.explicit-request"].verdict == NOT_TESTABLE  # a secondary row never decides
    assert by_key["recognition.fixed-v-criterion"].verdict == NO_EFFECT
    assert by_key["native-pairs.surface"].verdict == NO_EFFECT
    assert all(c.verdict != REPLICATES for c in by_key.values() if c.claim.kind != "effect")
    judged = [r for r in rows if r.claim.key == "oaks-open.source-complete" and r.test.primary]
    assert [r.verdict for r in judged] == [NOT_TESTABLE] and "judge not validated" in judged[0].reason
    assert row("note-controls.early", NOTES_SMOL, PAPER_RULE).verdict == NOT_TESTABLE
    yes_no = [r for r in rows if r.claim.key == "detection.yes-no" and "record test pairs" in r.test.rule
              and "YES/NO" in r.test.rule][0]
    assert yes_no.estimate_text == "0.435 [0.408, 0.459] AUC" and yes_no.verdict == OPPOSITE
    wins = {r.claim.key: r.measurement.note for r in rows if "matched pairs" in r.test.rule}
    assert wins["recognition.fixed-v-direction"].startswith("40/50")
    assert wins["recognition.joint-probe"].startswith("46/50")
    undefined = [r for r in rows if r.claim.key == "fact-map.fixed-positions" and "unit" in r.test.rule][0]
    assert undefined.verdict == NOT_TESTABLE and "including 0" in undefined.measurement.not_testable


# --------------------------------------------------------------------------- the verdict rule


@pytest.mark.parametrize("direction, ci, expected", [
    ("up", (0.5, 2.0), REPLICATES), ("up", (-2.0, -0.5), OPPOSITE), ("up", (-1.0, 1.0), INCONCLUSIVE),
    ("down", (-2.0, -0.5), REPLICATES), ("down", (0.5, 2.0), OPPOSITE), ("down", (-1.0, 1.0), INCONCLUSIVE),
    ("up", (0.0, 3.0), INCONCLUSIVE), ("down", (-3.0, 0.0), INCONCLUSIVE),  # a bound on the null includes it
    ("either", (0.5, 2.0), REPLICATES), ("either", (-2.0, -0.5), REPLICATES), ("either", (-1.0, 1.0), INCONCLUSIVE),
    ("none", (-1.0, 2.0), REPLICATES), ("none", (-6.0, 2.0), INCONCLUSIVE),
    ("none", (0.5, 2.0), OPPOSITE), ("none", (-2.0, -0.1), OPPOSITE),
    ("none", (-5.0, 5.0), INCONCLUSIVE), ("none", (-4.99, 4.99), REPLICATES),  # strictly inside the band only
    ("none", (0.0, 0.0), NOT_TESTABLE), ("up", (0.0, 0.0), NOT_TESTABLE),  # nothing differs: nothing measured
    ("down", (-3.0, -3.0), REPLICATES),  # zero width away from the null is an effect in every unit
])
def test_verdict_of_planted_intervals(direction, ci, expected):
    assert verdict(direction, ci, tolerance=5.0 if direction == "none" else None) == expected


def test_verdict_against_a_nonzero_null():
    assert verdict("up", (0.52, 0.55), null=0.5) == REPLICATES
    assert verdict("down", (0.512, 0.549), null=0.6) == REPLICATES   # below the paper's 0.60 criterion
    assert verdict("down", (0.512, 0.549), null=0.5) == OPPOSITE      # but above chance
    assert verdict("none", (0.49, 0.53), null=0.5, tolerance=0.05) == REPLICATES


@pytest.mark.parametrize("kind, ci, expected", [
    ("no-effect", (0.51, 0.53), NO_EFFECT), ("no-effect", (0.55, 0.65), INCONCLUSIVE),
    ("no-effect", (0.61, 0.70), OPPOSITE),
    ("construction", (0.5, 0.5), HOLDS), ("construction", (0.6, 0.6), DOES_NOT_HOLD),
    ("construction", (0.55, 0.65), DOES_NOT_HOLD), ("construction", (0.61, 0.7), DOES_NOT_HOLD),
])
def test_no_effect_and_construction_verdicts(kind, ci, expected):
    """A claim that something fails (below the 0.60 criterion) reads "no effect found" on the paper's side, never
    replicates; a construction check holds or does not, a zero-width interval included."""
    assert verdict("down", ci, null=0.6, kind=kind) == expected
    assert verdict("up", (1.0, 1.0), null=0.5, kind="construction") == HOLDS


def test_not_testable_overrides_any_interval():
    assert verdict("up", (1.0, 2.0), not_testable="reference arm at floor") == NOT_TESTABLE
    assert verdict("none", None, not_testable="no decision") == NOT_TESTABLE


@pytest.mark.parametrize("kwargs, message", [
    ({"direction": "sideways", "ci": (0, 1)}, "direction"),
    ({"direction": "up", "ci": None}, "needs an interval"),
    ({"direction": "up", "ci": (1.0, -1.0)}, "reversed"),
    ({"direction": "none", "ci": (-1.0, 1.0)}, "tolerance"),
])
def test_verdict_refuses_malformed_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        verdict(**kwargs)


def test_a_report_judges_a_claims_measurement_by_the_same_rule():
    """``judge`` (the scorecard's verdict of a row) and ``verdict_text`` (a report's cell, e.g. BABILong's) apply the
    claim's direction and tolerance to a measurement; no interval and no reason is not testable."""
    claim = Claim("x.loss", "x", "a loss", Paper("q", (1, 1), "s", "1"), "down", ())

    def measured(value, ci, reason=None):
        return Measurement(value, ci, "pp", "+.1f", "n", not_testable=reason, units=30)

    assert judge(claim, measured(-12.0, (-20.0, -4.0))) == REPLICATES
    assert verdict_text(claim, measured(3.0, (-2.0, 8.0))) == f"{INCONCLUSIVE} (point estimate opposite in sign)"
    assert verdict_text(claim, measured(-3.0, (-8.0, 2.0))) == INCONCLUSIVE
    assert judge(claim, measured(3.0, None)) == NOT_TESTABLE
    assert judge(claim, measured(-12.0, (-20.0, -4.0), "full access at floor")) == NOT_TESTABLE


def test_floor_and_chance():
    assert floor_reason(5, 64, "full access") == "full access at floor: 5/64 correct, below 10%"
    assert floor_reason(0, 0, "control")  # an empty arm is at floor
    assert floor_reason(6, 60, "full access") is None  # exactly 10 % is not below it
    assert chance_reason(10, 64, 14, "full access", "the majority answer") is not None
    assert chance_reason(14, 64, 14, "full access", "the majority answer") is not None  # at chance
    # above chance as a point is not enough: the exact 95 % interval must lie above it (issue 46: 15/50 vs 12/50)
    assert chance_reason(15, 64, 14, "full access", "the majority answer") is not None
    assert chance_reason(15, 50, 12, "full access", "the majority answer") == (
        "full access not above chance: 15/50 correct, exact 95% interval [17.9, 44.6] %, the majority answer "
        "scores 12/50 (24.0 %)")
    assert chance_reason(26, 64, 14, "full access", "the majority answer") is None  # [28.6, 53.4] % above 21.9 %
    assert chance_reason(66, 114, 57, "control", "a random pick") is not None  # 57.9 % of a two-way choice
    assert chance_reason(75, 114, 57, "control", "a random pick") is None
    # a rate without counts: the run's bootstrap interval must lie above chance
    assert chance_interval_reason(60.8, (45.8, 76.7), 50.0, "control accuracy", "a random pick") is not None
    assert chance_interval_reason(76.7, (65.0, 88.3), 50.0, "control accuracy", "a random pick") is None


# --------------------------------------------------------------------------- the engine's checks (issue 46)


def _claim(direction="down", tests=(), **kw):
    return Claim("x.claim", "x", "a claim", Paper("q", (1, 1), "s", "1"), direction, tests,
                 **{"reference": "control", "units": "groups", **kw})


def _planted(tmp_path, *measurements, primary=(True, False), model="m"):
    """A claim whose tests read one planted run (config naming ``model``) and return ``measurements``."""
    run = _write(tmp_path / "x" / "run", {}, config__json={"model": {"name": model}})
    tests = tuple(ClaimTest("x/run", f"rule {i}", (lambda m: lambda _: m)(m), primary[i])
                  for i, m in enumerate(measurements))
    return run.parent.parent, tests


def _pp(ci, units=30, step=None, reason=None):
    return Measurement(None if ci is None else (ci[0] + ci[1]) / 2, ci, "pp", "+.1f", "n", "control", units=units,
                       step=step, not_testable=reason)


def test_a_measurement_without_units_is_an_error(tmp_path):
    artifacts, tests = _planted(tmp_path, _pp((-9.0, -1.0), units=None), primary=(True,))
    with pytest.raises(ValueError, match="states no resampled units"):
        evaluate(artifacts, [_claim(tests=tests)])


def test_every_model_has_exactly_one_primary_test(tmp_path):
    artifacts, tests = _planted(tmp_path, _pp((-9.0, -1.0)), _pp((-9.0, -1.0)), primary=(True, True))
    with pytest.raises(ValueError, match="2 primary tests"):
        evaluate(artifacts, [_claim(tests=tests)])
    with pytest.raises(ValueError, match="declares its reference arm"):
        Claim("x.claim", "x", "a claim", Paper("q", (1, 1), "s", "1"), "down", tests)


def test_a_secondary_row_never_makes_a_claim_replicate(tmp_path):
    artifacts, tests = _planted(tmp_path, _pp((-9.0, 2.0)), _pp((-9.0, -1.0)))  # primary inconclusive
    rows = evaluate(artifacts, [_claim(tests=tests)])
    assert [r.verdict for r in rows] == [INCONCLUSIVE, REPLICATES]
    (result,) = claim_results(rows)
    assert (result.verdict, result.models, [r.index for r in result.rows]) == (INCONCLUSIVE, ("m",), [1])


def test_a_claim_replicates_when_its_primary_row_does_on_one_model(tmp_path):
    first, tests_a = _planted(tmp_path / "a", _pp((-9.0, 2.0)), primary=(True,), model="small")
    second, tests_b = _planted(tmp_path / "b", _pp((-9.0, -1.0)), primary=(True,), model="large")
    rows = evaluate(first, [_claim(tests=tests_a)]) + evaluate(second, [_claim(tests=tests_b)])
    (result,) = claim_results(rows)
    assert (result.verdict, result.models) == (REPLICATES, ("large",))


def test_a_degenerate_interval_is_not_testable(tmp_path):
    """Identical answers in every arm give [0, 0]: nothing was measured, never a replication of no change."""
    none = _claim("none")
    assert reason(none, _pp((0.0, 0.0), step=1.0)) == "no answer differs between the arms (the interval is [+0.0, +0.0])"
    assert judge(none, _pp((0.0, 0.0), step=1.0)) == NOT_TESTABLE
    assert judge(_claim("either"), _pp((0.0, 0.0))) == NOT_TESTABLE


def test_the_band_edge_and_one_answer_as_wide_as_the_band(tmp_path):
    none = _claim("none")
    assert judge(none, _pp((-5.0, 5.0), step=100 / 60)) == INCONCLUSIVE  # at the edge: not strictly inside
    assert judge(none, _pp((-3.3, 3.3), step=100 / 60)) == REPLICATES
    twenty = _pp((-5.0, 0.0), step=100 / 20)  # one answer is 5 pp: nothing but [0, 0] fits strictly inside
    assert judge(none, twenty) == NOT_TESTABLE and "one answer is 5.0 pp" in reason(none, twenty)
    assert judge(none, _pp((-4.2, 4.2), step=100 / 24)) == REPLICATES  # 24 answers: within one answer of 0
    assert judge(none, _pp((-8.3, 4.2), step=100 / 24)) == INCONCLUSIVE
    artifacts, tests = _planted(tmp_path, _pp((-1.0, 1.0)), primary=(True,))
    with pytest.raises(ValueError, match="size of one answer"):
        evaluate(artifacts, [_claim("none", tests=tests)])


def test_a_no_effect_claim_is_reported_apart_with_its_positive_control(tmp_path, monkeypatch):
    monkeypatch.setattr(al, "LINES", ())
    artifacts, tests = _planted(tmp_path, Measurement(0.52, (0.51, 0.53), "AUC", ".3f", "n", "criterion 0.60",
                                                      null=0.6, units=50), primary=(True,))
    control_tests = tuple(ClaimTest(t.run, "control", lambda _: Measurement(0.7, (0.65, 0.75), "AUC", ".3f", "n",
                                                                       "criterion 0.60", null=0.6, units=50))
                          for t in tests)
    fails = _claim("down", tests, kind="no-effect", control="x.control", reference="criterion 0.60")
    control = Claim("x.control", "x", "works", Paper("q", (1, 1), "s", "1"), "up", control_tests,
                    reference="criterion 0.60", units="groups")
    rows = evaluate(artifacts, [fails, control])
    assert [r.verdict for r in rows] == [NO_EFFECT, REPLICATES]
    assert [c.verdict for c in claim_results(rows)] == [NO_EFFECT, REPLICATES]
    text = sc.format_markdown(rows)
    assert "positive control x.control (row 2): replicates, 0.700 [0.650, 0.750] AUC" in text
    assert "| **all** | 2 | 1 | 1 | 0 | 0 | 0 |" in text  # claims: one replicates, one no effect found
    with pytest.raises(ValueError, match="positive control"):
        _claim("up", tests, control="x.control")


def test_a_construction_check_is_listed_outside_the_tally(tmp_path, monkeypatch):
    monkeypatch.setattr(al, "LINES", ())
    artifacts, tests = _planted(tmp_path, Measurement(0.5, (0.5, 0.5), "AUC", ".3f", "n", "chance 0.5", null=0.5,
                                                      units=100), primary=(True,))
    check = _claim("none", tests, kind="construction", reference="chance 0.5")
    rows = evaluate(artifacts, [check])
    assert [r.verdict for r in rows] == [HOLDS]
    text = sc.format_markdown(rows)
    assert "0 claims (0 rows; 1 construction-check rows apart)" in text
    assert "## Construction checks (outside the tally)" in text
    data = sc.scorecard_json(rows)
    assert sum(data["counts"]["claims"].values()) == 0 and data["counts"]["construction_checks"][HOLDS] == 1


def test_a_judge_that_fails_its_audit_makes_its_rows_not_testable():
    graders = json.loads((ARTIFACTS / "session-bias" / "smollm2-val" / "summary.json").read_text())["graders"]
    found = judge_reason(ARTIFACTS / "session-bias" / "smollm2-val", "session-bias", graders)
    assert found.startswith("judge not validated: qwen2.5-coder-1.5b-instruct/bfloat16 agrees with 28/38")
    assert judge_reason(ARTIFACTS / "session-bias" / "smollm2-150", "session-bias", ["rule-v1"]) is None
    assert "has no audit" in judge_reason(ARTIFACTS / "session-bias" / "smollm2-val", "session-bias",
                                          ["x:some-model/bfloat16/000000000000"])


# --------------------------------------------------------------------------- measurements on planted runs


def _write(run: Path, summary: dict | None = None, name: str = "summary.json", **extra) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    if summary is not None:
        (run / name).write_text(json.dumps(summary))
    for fname, content in extra.items():
        (run / fname.replace("__", ".")).write_text(json.dumps(content))
    return run


def _matched(control_vs_full_ci, correct=None):
    def change(pp, ci):
        return {"pp": pp, "ci": ci, "corrections": 0, "reversals": 0}
    rule = {"correct": correct or {"full": 40, "control": 60, "mask": 45},
            "mask_vs_control": change(-10.0, [-15.0, -5.0]), "mask_vs_full": change(3.3, [-2.0, 8.0]),
            "control_vs_full": change(13.3, control_vs_full_ci)}
    return {"subsets": {"all": {"n": 150, "groups": 50, "rules": {"lenient": rule}}}}


def test_matched_accuracy_keeps_the_claims_reference_and_shows_a_moving_control(tmp_path):
    measure = matched_accuracy("all", "lenient")
    inert = measure(_write(tmp_path / "a", _matched([-1.0, 4.0])))
    assert inert.value == -10.0 and inert.reference.startswith("control 60/150")
    assert inert.note == "control - full +13.3 [-1.0, +4.0] pp"
    moved = measure(_write(tmp_path / "b", _matched([5.0, 20.0])))  # the control moves answers: still the reference
    assert moved.value == -10.0 and moved.reference.startswith("control 60/150")
    assert moved.note == "control - full +13.3 [+5.0, +20.0] pp (not neutral)"
    full = matched_accuracy("all", "lenient", reference="full")(_write(tmp_path / "b2", _matched([5.0, 20.0])))
    assert full.value == 3.3 and full.reference.startswith("full 40/150") and not full.note
    floor = measure(_write(tmp_path / "c", _matched([-1.0, 4.0], {"full": 1, "control": 2, "mask": 0})))
    assert floor.not_testable == "control at floor: 2/150 correct, below 10%"
    chance = matched_accuracy("all", "lenient", chance=0.5)(_write(tmp_path / "d", _matched([-1.0, 4.0])))
    assert chance.not_testable.startswith("control not above chance: 60/150")
    with pytest.raises(ValueError, match="reference"):
        matched_accuracy("all", "lenient", reference="best")(_write(tmp_path / "e", _matched([-1.0, 4.0])))


def test_quantity_change_reads_the_claims_reference_arm(tmp_path):
    def cell(condition, lenient, vs_control=None, vs_full=(0.0, [0.0, 0.0])):
        c = {"relation": "replacement", "information": "unit_from_a", "query": "current", "condition": condition,
             "n": 60, "lenient_complete": lenient,
             "lenient_complete_vs_full": {"net": vs_full[0], "net_ci": vs_full[1]}}
        if vs_control:
            c["lenient_complete_vs_control"] = {"net": vs_control[0], "net_ci": vs_control[1]}
        return c
    cells = [cell("full", 20), cell("source", 5, (-0.25, [-0.4, -0.1]), (-0.2, [-0.3, -0.1])),
             cell("source-control", 20)]
    m = quantity_change("unit_from_a", "source", "lenient_complete")(_write(tmp_path / "q", {"cells": cells}))
    assert (m.value, m.ci) == (-25.0, (-40.0, -10.0)) and m.reference == "source-control 20/60"
    assert m.step == pytest.approx(100 / 60) and m.units == 60
    cells[2] = cell("source-control", 30, vs_full=(0.15, [0.05, 0.25]))  # a control that is not neutral
    m = quantity_change("unit_from_a", "source", "lenient_complete")(_write(tmp_path / "q", {"cells": cells}))
    assert m.value == pytest.approx(-25.0) and m.reference == "source-control 30/60"
    assert m.note == "source-control against full access: +15.0 [+5.0, +25.0] pp (not neutral)"
    m = quantity_change("unit_from_a", "source", "lenient_complete", "full")(_write(tmp_path / "q", {"cells": cells}))
    assert m.value == pytest.approx(-20.0) and m.reference == "full 20/60" and not m.note


def test_babilong_chance_is_the_majority_answer(tmp_path):
    run = _write(tmp_path / "b", {"cells": [
        {"task": "qa3", "length": 0, "policy": "full", "n": 10, "official": 3},
        {"task": "qa3", "length": 0, "policy": "naive", "n": 10, "official": 1,
         "official_change_vs_full": {"change": -2, "ci": [-4.0, -1.0]}}]})
    answers = ["garden"] * 4 + ["kitchen"] * 3 + ["office"] * 3
    with gzip.open(run / "results.jsonl.gz", "wt") as f:
        for i, a in enumerate(answers):
            row = {"task": "qa3", "length": 0, "condition": "full", "answer": a, "case_id": f"c{i}"}
            f.write(json.dumps(row) + "\n")
    m = babilong_change("qa3", 0, "naive", gain=False)(run)
    assert (m.value, m.ci) == (-20.0, (-40.0, -10.0))
    assert m.not_testable == ("full access not above chance: 3/10 correct, exact 95% interval [6.7, 65.2] %, always "
                              "answering the most common location (garden) scores 4/10 (40.0 %)")
    assert m.units == 10 and m.step == 10.0


def test_undefined_estimates_are_not_testable(tmp_path):
    fact = {"all": {"n_cases": 20, "n_groups": 10, "target_effect": {"change": 0.1, "change_ci": [-0.2, 0.4]},
                    "conditions": {"rebuild:..B": {"recovered": 25.9, "recovered_ci": [-23.0, 22.4]}}}}
    m = fact_map_recovery("rebuild:..B")(_write(tmp_path / "f", fact))
    assert m.value is None and "interval including 0" in m.not_testable
    fact["all"]["target_effect"]["change_ci"] = [0.05, 0.4]
    m = fact_map_recovery("rebuild:..B")(_write(tmp_path / "f", fact))
    assert m.value == 25.9 and m.not_testable is None and m.units == 10
    detectors = {"text_detectors": [{"dataset": "records", "split": "test", "detector": "direct", "n": 4,
                                     "decisions": {"unresolved": 4}, "capped": 2}],
                 "yes_no": [{"dataset": "records", "split": "test", "groups": 2}]}
    m = detection_json("direct")(_write(tmp_path / "d", detectors))
    assert m.not_testable == "no decision: 4 of 4 outputs unresolved (2 at the token cap)"
    warning = {"warning_signal": {"complete": {"unit_from_a": {"lost": 3, "kept": 0, "auc": None}}}}
    undefined_auc = quantity_warning("complete", "unit_from_a")(_write(tmp_path / "w", warning))
    assert "a class is empty" in undefined_auc.not_testable


def test_matched_pair_wins_count_within_items(tmp_path):
    ids, scores, split = [], [], []
    for item, (swap, confirm) in enumerate([(2, 1), (3, 1), (1, 2), (1, 1)]):
        for variant, score in (("role_swap", swap), ("role_confirmation", confirm), ("replacement", 9)):
            ids.append(f"rec-x-{item:03d}-{variant}")
            scores.append(score)
            split.append("test")
    ids.append("rec-x-999-role_swap"), scores.append(5), split.append("dev")  # a dev case is never counted
    run = _write(tmp_path / "r", None, scores__json={"case_id": ids, "scores": {"d": scores}, "split": split})
    m = recognition_wins("d")(run)
    assert m.value == pytest.approx(2.5 / 4) and m.n == "4 matched pairs: 2.5 wins" and m.null == 0.5
    assert 0 <= m.ci[0] < m.value < m.ci[1] <= 1


# --------------------------------------------------------------------------- the paper


def _paper_lines() -> list[str]:
    if not PAPER.exists():
        pytest.skip(f"the paper's source is not on this machine ({PAPER})")
    return [_plain(line, latex=True).replace(" %", "%") for line in PAPER.read_text().split("\n")]


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.key)
def test_quotes_are_verbatim_at_the_cited_lines_and_section(claim):
    lines = _paper_lines()
    quote = _plain(claim.paper.quote, latex=False).replace(" %", "%")
    first, last = claim.paper.lines
    span = " ".join(lines[first - 1:last])
    assert quote in span, f"{claim.key}: quote not in L{first}-{last}"
    assert quote not in " ".join(lines[first:last]), f"{claim.key}: the quote starts after L{first}"
    assert quote not in " ".join(lines[first - 1:last - 1]) or first == last, f"{claim.key}: it ends before L{last}"
    raw = PAPER.read_text().split("\n")[:first]
    heads = [m.group(1) for line in raw if (m := re.match(r"\\(?:sub){0,2}section\*?\{(.*)\}", line.strip()))]
    assert (heads[-1] if first > 256 else "Abstract") == claim.paper.section, claim.key


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda c: c.key)
def test_paper_numbers_occur_at_their_lines(claim):
    lines = _paper_lines()
    first, last = claim.paper.numbers_lines or claim.paper.lines
    text = " ".join(lines[first - 1:last])
    for number in re.findall(r"\d+(?:\.\d+)?", claim.paper.numbers):
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?!\d)", text), f"{claim.key}: {number} not in L{first}-{last}"


def test_the_doc_cites_the_paper_by_title_and_is_linked_from_the_readme():
    text = DOC.read_text()
    assert "../shared" not in text and sc.PAPER_TITLE in text
    readme = (ROOT / "README.md").read_text().split("## Quick start")[0]
    assert "(docs/scorecard.md)" in readme, "README.md must link the scorecard before its Quick start"


def test_reports_and_scorecard_share_one_rule():
    """Every report's verdict (studies.common.claims.verdict_text) is the scorecard's rule, not a second copy."""
    from kvprobe.studies import scorecard
    from kvprobe.studies.common import report

    assert scorecard.verdict is report.claim_verdict
    assert report.claim_verdict("down", (-28.7, -15.0)) == REPLICATES
    assert report.claim_verdict("down", (2.0, 9.0)) == OPPOSITE
    assert report.claim_verdict("down", (-2.7, 16.0)) == INCONCLUSIVE
    assert report.claim_verdict("down", (-2.7, 16.0), not_testable="floor") == NOT_TESTABLE
    assert report.claim_verdict("none", (-1.0, 2.0), tolerance=5.0) == REPLICATES
    assert report.claim_verdict("none", (1.0, 9.0), tolerance=5.0) == OPPOSITE
    assert not hasattr(report, "verdict") and not hasattr(report, "testable")  # one rule, no second entry point
    assert report.above_chance(20, 50, 12) and not report.above_chance(15, 50, 12)


# --------------------------------------------------------------------------- the answer-level table


@pytest.mark.parametrize("line", [x for x in al.LINES if x.quote is not None], ids=lambda x: x.claims[0])
def test_answer_level_quotes_are_verbatim_at_their_lines(line):
    lines = _paper_lines()
    first, last = line.lines
    quote = _plain(line.quote, latex=False).replace(" %", "%")
    assert quote in " ".join(lines[first - 1:last]), f"{line.claims[0]}: quote not in L{first}-{last}"
    assert quote not in " ".join(lines[first:last]), f"{line.claims[0]}: the quote starts after L{first}"


def test_answer_level_reads_each_claims_primary_row_on_the_best_model(rows):
    table = al.answer_level(rows)
    assert [x["quote"] for x in table][:3] == [x.quote for x in al.LINES[:3]]
    for line, out in zip(al.LINES, table):
        missing = False
        for key, cell in zip(line.claims, out["claims"]):
            mine = [r for r in rows if r.claim.key == key and r.model == al.BEST_MODEL]
            if not mine:
                missing = True
                assert cell["row"] is None and cell["other_models"], key
                continue
            expected = next(r for r in mine if r.test.primary)
            assert (cell["row"], cell["verdict"]) == (expected.index, expected.verdict), key
        assert bool(out["pending"]) == missing, line.claims


def test_answer_level_refuses_a_claim_the_scorecard_lacks(rows, monkeypatch):
    monkeypatch.setattr(al, "LINES", (al.Line("x", (1, 1), ("no-such.claim",)),))
    with pytest.raises(ValueError, match="no-such.claim"):
        al.answer_level(rows)


# --------------------------------------------------------------------------- the rule grader beside a failing judge


def _plant_audit(root: Path, task: str, judge: str, agree: int, n: int, planted_accepted: int) -> None:
    """An audit of ``judge`` on ``task`` under ``root`` with these numbers (19 planted wrong answers)."""
    from kvprobe.studies.common.judge_audit import AuditResult, passes, write_audit

    accepted = [f"p{i}" for i in range(planted_accepted)]
    write_audit(AuditResult(task, judge, "audit.jsonl", "0" * 64, "yes", n, agree, agree, 19, accepted, accepted,
                            [], {}, {}, {}, [], passed=passes(agree, n, planted_accepted)), root)


def _session_subset(key: str, full: int, soft: int, n: int = 40) -> dict:
    change = {"pp": 100 * (soft - full) / n, "ci": [-20.0, -1.0], "change": soft - full, "corrections": 0,
              "reversals": full - soft}
    arm = {"n": n, "eos_correct": soft, "cap": 0, "pct": None, "mean_tokens": None}
    return {"key": key, "label": key, "questions": n, "groups": 27,
            "arms": {"full": {**arm, "correct": full, "eos_correct": full},
                     "soft": {**arm, "correct": soft, "vs_full": change, "eos_vs_full": change}}}


def test_a_failing_judge_gates_its_rows_and_the_rule_grader_stands_beside_it(tmp_path):
    """Planted: a judge failing its audit (28/38, 6 planted wrongs accepted) makes the judged row not testable;
    the rule grader's row of the same answers (``rule_subsets``) is judged by the rule and notes its own failing
    audit; a judge that passes is not gated."""
    from kvprobe.studies.session_bias.claims import session_bias

    run = _write(tmp_path / "session-bias" / "run", {
        "graders": ["longmemeval-anscheck", "longmemeval-anscheck:m/bfloat16/000000000000"],
        "subsets": [_session_subset("without_crossing_groups", 31, 26)],
        "rule_subsets": [_session_subset("without_crossing_groups", 12, 5)]})
    _plant_audit(tmp_path / "judge-audit", "session-bias", "m/bfloat16/000000000000", 28, 38, 6)
    _plant_audit(tmp_path / "judge-audit", "session-bias", "rule-v1", 30, 38, 4)
    judged = session_bias("without_crossing_groups", "soft")(run)
    assert judged.not_testable.startswith("judge not validated: m/bfloat16 agrees with 28/38 hand labels (73.7 %) "
                                          "and accepts 6 of 19 planted wrong answers") and judged.note == ""
    rule = session_bias("without_crossing_groups", "soft", rule=True)(run)
    assert rule.not_testable is None and rule.value == -17.5 and rule.reference == "full 12/40"
    assert rule.note == ("rule-v1 fails its own audit: it agrees with 30/38 hand labels (78.9 %) and accepts 4 of 19 "
                         "planted wrong answers")
    claim = _claim("down", ())
    assert judge(claim, judged) == NOT_TESTABLE and judge(claim, rule) == REPLICATES
    _plant_audit(tmp_path / "judge-audit", "session-bias", "m/bfloat16/000000000000", 36, 38, 0)  # now it passes
    assert session_bias("without_crossing_groups", "soft")(run).not_testable is None


def test_a_summary_records_its_graders_audits_wherever_it_is_summarized(tmp_path):
    """grader_validity reads a given audit folder (a copy of a run summarized elsewhere finds the same audits); a
    rule grader without an audit, or one that passes, has no note."""
    from kvprobe.studies.common.claims import grader_validity, rule_audit_note

    root = tmp_path / "audits"
    _plant_audit(root, "oaks-open", "m/bfloat16/000000000000", 15, 40, 17)
    got = grader_validity(tmp_path / "elsewhere" / "run", "oaks-open", ["source-aware:m/bfloat16/000000000000"],
                          "rule-v1", root)
    assert "agrees with 15/40 hand labels (37.5 %) and accepts 17 of 19" in got["judge_validation"]
    assert got["rule_audit"] == ""  # no rule audit planted
    _plant_audit(root, "oaks-open", "rule-v1", 38, 40, 0)
    assert rule_audit_note(tmp_path / "x" / "run", "oaks-open", "rule-v1", root) == ""  # passes: nothing to say
    assert grader_validity(tmp_path / "run", "oaks-open", ["rule-v1"], "rule-v1", root)["judge_validation"] is None


def _open_panel(full: int, mask: int, n: int = 38) -> dict:
    change = {"pp": 100 * (mask - full) / n, "ci": [-23.7, -2.6], "change": mask - full, "corrections": 0,
              "reversals": full - mask}
    protocol = {"counts": {"full": full, "mask": mask, "control": full}, "mask_vs_full": change,
                "mask_vs_control": change}
    return {"n": n, "components": n, "protocols": {"complete": protocol, "agreement": protocol,
                                                   "reference_only": protocol},
            "agreement_minus_complete": {**change, "pp": -5.3, "ci": [-18.4, 7.9]}}


def test_the_oaks_open_report_gates_a_failing_judge_and_gives_the_rule_graders_verdict_beside_it():
    """Planted: a judged summary whose judge fails its audit reads not testable in the report (as its scorecard
    row), with the rule grader's row on the same answers beside it; without the gate the same numbers replicate."""
    from kvprobe.studies.matched_scores.open_answers.summary import claim_rows

    summary = {"graders": ["source-aware:m/bfloat16/000000000000"], "panels": {"answerable": _open_panel(35, 30)},
               "judge_validation": "judge not validated: m/bfloat16 agrees with 15/40 hand labels",
               "rule_grader": {"graders": ["rule-v1"], "panels": {"answerable": _open_panel(14, 9, 36)}}}
    rows = claim_rows(summary)
    assert [r["grader"] for r in rows] == ["source-aware:m/bfloat16/000000000000", "rule-v1 (same answers)"] * 2
    assert rows[0]["verdict"] == "not testable here (judge not validated: m/bfloat16 agrees with 15/40 hand labels)"
    assert rows[1]["verdict"] == "replicates" and rows[1]["reference"] == "full 14 of 36"
    assert rows[3]["verdict"].startswith("not testable here (the rule grader has one protocol")
    ungated = claim_rows({**summary, "judge_validation": None})
    assert ungated[0]["verdict"] == "replicates"


def test_the_validation_soft_bias_is_a_no_change_claim_judged_on_the_held_out_questions():
    """session-bias.validation-overall: the paper's overall change on validation questions without the ones linked
    to development (-0.46 [-1.25, 0.32]) is a no-change claim; its primary row is the judged run's split exclusion,
    the rule grader's beside it."""
    from kvprobe.studies.session_bias.claims import CLAIMS as SESSION

    claim = next(c for c in SESSION if c.key == "session-bias.validation-overall")
    assert claim.direction == "none" and claim.reference == "full access"
    assert [t.primary for t in claim.tests] == [True, False] and "rule grader" in claim.tests[1].rule
    from kvprobe.studies.common.claims import pp_measurement

    step = pp_measurement(-1.0, (-4.0, 2.0), "40 questions", "full 31/40", units=27, answers=40)
    assert judge(claim, step) == REPLICATES  # strictly inside +-5 pp, one answer 2.5 pp
    assert judge(claim, pp_measurement(-12.5, (-26.3, 2.0), "n", "r", units=27, answers=40)) == INCONCLUSIVE


def test_fact_map_later_states_has_the_papers_recompute_current_direction(tmp_path):
    """fact-map.later-states: the paper's recompute raises current answers beyond the source mask (up), so a
    recompute that lowers the current-minus-old margin reads opposite, not a directionless 'replicates'."""
    from kvprobe.studies.fact_map.claims import CLAIMS as FACT, fact_map_target

    claim = next(c for c in FACT if c.key == "fact-map.later-states")
    assert claim.direction == "up" and claim.paper.lines == (504, 505)
    scope = {"n_cases": 40, "n_groups": 20, "conditions": {}}
    lower = fact_map_target()(_write(tmp_path / "a", {"all": {**scope, "target_effect": {
        "change": -0.447, "change_ci": [-0.712, -0.218]}}}))
    higher = fact_map_target()(_write(tmp_path / "b", {"all": {**scope, "target_effect": {
        "change": 0.4, "change_ci": [0.1, 0.7]}}}))
    assert judge(claim, lower) == OPPOSITE and judge(claim, higher) == REPLICATES


# --------------------------------------------------------------------------- issue 46 item 8: the missing results


def test_the_missing_results_have_rows_at_the_rule(rows):
    """Item 8a, 8c, 8d: the Qwen-0.5B OAKS choice row (control below two-way chance: not testable, as its report),
    the native-pairs different-alias stratum, the Qwen-1.5B rebuild and compaction against the source mask; and
    item 9's unit-cluster and within-unit rows are secondary, never deciding their claims."""
    primary = {(r.claim.key, r.test.run): r for r in rows if r.test.primary}
    oaks = primary[("matched-scores.oaks-choices", "matched-scores/qwen2.5-coder-0.5b-instruct-oaks")]
    assert oaks.verdict == NOT_TESTABLE and "control not above chance: 37/114" in oaks.reason
    report = (ARTIFACTS / "matched-scores" / "qwen2.5-coder-0.5b-instruct-oaks" / "report.md").read_text()
    assert "| -5.3 [-9.6, -0.9] | control 37 of 114 | not testable here |" in report
    alias = {run: primary[("native-pairs.different-alias", run)].verdict
             for run in ("native-pairs/smollm2-135m-instruct", "native-pairs/gemma3-270m")}
    assert alias == {"native-pairs/smollm2-135m-instruct": INCONCLUSIVE, "native-pairs/gemma3-270m": OPPOSITE}
    assert primary[("quantity.rebuild", QUANTITY_QWEN)].verdict == REPLICATES
    assert primary[("quantity.compact", QUANTITY_QWEN)].verdict == INCONCLUSIVE
    assert primary[("matched-scores.all-answers", "matched-scores/qwen2.5-coder-1.5b-instruct")].estimate_text == \
        "-16.3 [-20.0, -13.3] pp"  # complete answers, the paper's table's rule
    by_unit = [r for r in rows if "unit-cluster" in r.test.rule or "within unit" in r.test.rule]
    assert [r.verdict for r in by_unit] == [REPLICATES, INCONCLUSIVE] and not any(r.test.primary for r in by_unit)
    assert all("fewer than" in r.n_text for r in by_unit)  # 6 units, 10 answers of one unit
