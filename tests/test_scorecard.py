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
from kvprobe.studies.common.claims import (INCONCLUSIVE, LENIENT, NOT_TESTABLE, OPPOSITE, PAPER_RULE, REPLICATES, Claim,
                                           Measurement, Paper, Row, chance_reason, evaluate, floor_reason, judge,
                                           verdict_text)
from kvprobe.studies.detection.claims import detection_json
from kvprobe.studies.fact_map.claims import fact_map_recovery
from kvprobe.studies.matched_scores.claims import MATCHED_QWEN, MATCHED_SMOL, matched_accuracy
from kvprobe.studies.mquake.claims import MQUAKE_NC
from kvprobe.studies.note_controls.claims import NOTES_SMOL
from kvprobe.studies.quantity.claims import QUANTITY, quantity_change, quantity_warning
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
            assert m.not_testable, r.claim.key
        else:
            assert m.ci is not None and m.value is not None and m.ci[0] <= m.value <= m.ci[1], (r.claim.key, m)
        assert r.model != "?", r.test.run


def test_the_issue_cases_read_as_the_data_say(rows):
    """Spot checks against numbers recounted from the reports (issue 31's list)."""
    by = {(r.claim.key, r.test.run, r.test.rule.split(":")[0].split(";")[0]): r for r in rows}

    def row(key, run, rule):
        return by[(key, run, rule)]

    smol = row("matched-scores.replacement-answers", MATCHED_SMOL, LENIENT)
    assert smol.estimate_text == "+8.0 [-4.0, +20.7] pp" and smol.verdict == INCONCLUSIVE
    assert "control - full +36.0 [+25.3, +47.3]" in smol.measurement.note
    qwen = row("matched-scores.replacement-answers", MATCHED_QWEN, PAPER_RULE)
    assert qwen.estimate_text == "+6.7 [-2.7, +16.0] pp" and qwen.verdict == INCONCLUSIVE
    assert row("matched-scores.all-answers", MATCHED_QWEN, PAPER_RULE).verdict == REPLICATES
    assert row("quantity.unit-loss", QUANTITY, PAPER_RULE).verdict == NOT_TESTABLE
    recompute = row("mquake.recompute-current", MQUAKE_NC, LENIENT)
    assert recompute.verdict == OPPOSITE and "94/180" in recompute.measurement.reference
    babi = row("babilong.qa3-naive", BABI_8K, "official location parser with EOS")
    assert babi.verdict == NOT_TESTABLE and "scores 14/64" in babi.measurement.not_testable
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
    ("none", (-1.0, 2.0), REPLICATES), ("none", (0.0, 0.0), REPLICATES), ("none", (-6.0, 2.0), INCONCLUSIVE),
    ("none", (0.5, 2.0), OPPOSITE), ("none", (-2.0, -0.1), OPPOSITE),
])
def test_verdict_of_planted_intervals(direction, ci, expected):
    assert verdict(direction, ci, tolerance=5.0 if direction == "none" else None) == expected


def test_verdict_against_a_nonzero_null():
    assert verdict("up", (0.52, 0.55), null=0.5) == REPLICATES
    assert verdict("down", (0.512, 0.549), null=0.6) == REPLICATES   # below the paper's 0.60 criterion
    assert verdict("down", (0.512, 0.549), null=0.5) == OPPOSITE      # but above chance
    assert verdict("none", (0.49, 0.53), null=0.5, tolerance=0.05) == REPLICATES


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
        return Measurement(value, ci, "pp", "+.1f", "n", not_testable=reason)

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
    assert chance_reason(15, 64, 14, "full access", "the majority answer") is None


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


def test_matched_accuracy_uses_full_access_when_the_control_moves_answers(tmp_path):
    measure = matched_accuracy("all", "lenient")
    inert = measure(_write(tmp_path / "a", _matched([-1.0, 4.0])))
    assert inert.value == -10.0 and inert.reference.startswith("control 60/150") and not inert.note
    moved = measure(_write(tmp_path / "b", _matched([5.0, 20.0])))
    assert moved.value == 3.3 and moved.reference.startswith("full 40/150") and "not neutral" in moved.note
    floor = measure(_write(tmp_path / "c", _matched([-1.0, 4.0], {"full": 1, "control": 2, "mask": 0})))
    assert floor.not_testable == "control at floor: 2/150 correct, below 10%"
    chance = matched_accuracy("all", "lenient", chance=0.5)(_write(tmp_path / "d", _matched([-1.0, 4.0])))
    assert chance.not_testable.startswith("control at or below chance: 60/150")


def test_quantity_change_reads_the_control_or_full_access(tmp_path):
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
    cells[2] = cell("source-control", 30, vs_full=(0.15, [0.05, 0.25]))
    m = quantity_change("unit_from_a", "source", "lenient_complete")(_write(tmp_path / "q", {"cells": cells}))
    assert m.value == pytest.approx(-20.0) and m.reference == "full 20/60" and "source-control is not neutral" in m.note


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
    assert m.not_testable == ("full access at or below chance: 3/10 correct, always answering the most common "
                              "location (garden) scores 4/10")


def test_undefined_estimates_are_not_testable(tmp_path):
    fact = {"all": {"n_cases": 20, "n_groups": 10, "target_effect": {"change": 0.1, "change_ci": [-0.2, 0.4]},
                    "conditions": {"rebuild:..B": {"recovered": 25.9, "recovered_ci": [-23.0, 22.4]}}}}
    m = fact_map_recovery("rebuild:..B")(_write(tmp_path / "f", fact))
    assert m.value is None and "interval including 0" in m.not_testable
    fact["all"]["target_effect"]["change_ci"] = [0.05, 0.4]
    m = fact_map_recovery("rebuild:..B")(_write(tmp_path / "f", fact))
    assert m.value == 25.9 and m.not_testable is None and m.units == 10
    detectors = {"text_detectors": [{"dataset": "records", "split": "test", "detector": "direct", "n": 4,
                                     "decisions": {"unresolved": 4}, "capped": 2}]}
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
    """Every report's verdict cell (studies.common.report.verdict) is the scorecard's rule, not a second copy."""
    from kvprobe.studies import scorecard
    from kvprobe.studies.common import report

    assert scorecard.verdict is report.claim_verdict
    assert report.verdict((-28.7, -15.0), -1) == REPLICATES
    assert report.verdict((2.0, 9.0), -1) == OPPOSITE
    assert report.verdict((-2.7, 16.0), -1) == INCONCLUSIVE
    assert report.verdict((-2.7, 16.0), -1, is_testable=False) == NOT_TESTABLE
    assert report.verdict(None, 1) == NOT_TESTABLE
    assert report.verdict((-1.0, 2.0), 0, tolerance=5.0) == REPLICATES
    assert report.verdict((1.0, 9.0), 0, tolerance=5.0) == OPPOSITE
    assert not report.testable(7, 80) and report.testable(8, 80) and not report.testable(14, 64, chance=14)


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
            paper = [r for r in mine if r.test.rule.startswith(PAPER_RULE)]
            expected = (paper or mine)[0]
            assert (cell["row"], cell["verdict"]) == (expected.index, expected.verdict), key
        assert bool(out["pending"]) == missing, line.claims


def test_answer_level_refuses_a_claim_the_scorecard_lacks(rows, monkeypatch):
    monkeypatch.setattr(al, "LINES", (al.Line("x", (1, 1), ("no-such.claim",)),))
    with pytest.raises(ValueError, match="no-such.claim"):
        al.answer_level(rows)
