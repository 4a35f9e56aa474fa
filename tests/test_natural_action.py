"""Natural-text detection against masking outcomes (studies/detection/natural_action.py), on hand-computed cases:
equal-coverage random expectation and paired excess (also the paper's own table cells), coverage curves with
the reference-margin ranking, outcomes by source relation, leave-one-book-out, placebo labels, the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies.datasets import oaks
from kvprobe.studies.detection.natural import PLAIN, WITH_QUESTION
from kvprobe.studies.detection.natural_action import (detection_leave_one_out, equal_coverage_excess, natural_action,
                                                      placebo_labels, side)
from kvprobe.studies.common.summary import write_summary

FIXTURE = Path(__file__).parent / "fixtures" / "oaks_sample.json"


def test_equal_coverage_excess_by_hand():
    e = equal_coverage_excess([1, 1, 0, 0, 1], [1, 0, 1, -1, 0], groups=list("abcde"), n_draws=0)
    # k = 3 of N = 5; net = 1 + 0 + 0; random = 3/5 * (1 + 0 + 1 - 1 + 0) = 0.6; excess = 100 * 0.4 / 5.
    assert (e["selected"], e["net"], e["total"]) == (3, 1, 1)
    assert e["random"] == pytest.approx(0.6) and e["excess_pp"] == pytest.approx(8.0)
    assert (e["corrections"], e["reversals"]) == (1, 0) and e["ci"] is None
    # Every group its own stratum: each draw is the sample itself, so both intervals collapse on the estimate.
    e = equal_coverage_excess([1, 1, 0, 0, 1], [1, 0, 1, -1, 0], groups=list("abcde"), strata=list("abcde"),
                              n_draws=50, seed=3)
    assert e["ci"] == pytest.approx([8.0, 8.0]) and e["ci_fixed_coverage"] == pytest.approx([8.0, 8.0])


@pytest.mark.parametrize("k, net, excess", [(35, 9, 1.00), (71, 10, -5.10)])
def test_equal_coverage_excess_reproduces_the_papers_cells(k, net, excess):
    # tab:v18_binary_selection, Qwen3-4B: 116 questions, sum U = 26 (random 35/116 * 26 = 7.84).
    utility = [1] * 26 + [0] * 90
    selected = [1] * net + [0] * (26 - net) + [1] * (k - net) + [0] * (90 - k + net)
    e = equal_coverage_excess(selected, utility, groups=range(116), n_draws=0)
    assert e["selected"] == k and e["net"] == net and round(e["excess_pp"], 2) == excess
    assert round(e["random"], 2) == round(k / 116 * 26, 2)


def test_bootstrap_recomputes_the_selected_count():
    # Two questions: q1 selected with U = +1, q2 not with U = 0. A draw of (q1, q1) has k = 2 = N, so random =
    # net and the excess is 0; (q2, q2) has nothing selected: 0; (q1, q2) is the sample: 100 (1 - 0.5) / 2 = 25.
    e = equal_coverage_excess([1, 0], [1, 0], groups=["q1", "q2"], n_draws=400, seed=1)
    assert e["excess_pp"] == pytest.approx(25.0) and e["ci"] == pytest.approx([0.0, 25.0])
    assert side(e["ci"]) == "includes 0" and side([0.5, 1]) == "above 0" and side([-2, -1]) == "below 0"


#: (question, book, plain fires, with-question fires, full correct, mask correct, margin full, margin mask,
#: attribute change, rubric)
QUESTIONS = [("q1", "b1", 1, 1, 0, 1, -1.0, 2.0, "change", "strict"),
             ("q2", "b1", 0, 1, 1, 0, 1.0, 0.5, "compatible", "additive"),
             ("q3", "b2", 0, 0, 0, 1, -2.0, -0.5, "change", "progression"),
             ("q4", "b2", 1, 1, 1, 1, 0.5, 1.0, "insufficient", "insufficient"),
             ("q5", "b2", 0, 0, 0, 0, -0.2, -0.4, "compatible", "additive")]


def _write(path: Path, rows: list[dict], config: dict) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "config.json").write_text(json.dumps(config))
    return path


def _runs(tmp_path: Path, source: str = "file.json", annotated: bool = True) -> tuple[Path, Path]:
    det_rows = []
    for q, book, plain, asked, *_, change, rubric in QUESTIONS:
        for d, f in ((PLAIN, plain), (WITH_QUESTION, asked)):
            det_rows.append({"case_id": f"oaks/{q}@1/positive", "dataset": "oaks", "relation": "positive", "label": 1,
                             "group": q, "book": book, "event": f"{q}@1", "donor": None, "detector": d,
                             "decision": "replacement" if f else "no_replacement", "parse": "ok",
                             "stop_reason": "eos", "split": "all",
                             "attribute_change": change if annotated else None,
                             "attribute_change_alternative": "compatible" if q == "q3" and annotated else None,
                             "description": "x" if annotated else None, "description_alternative": None,
                             "rubric": rubric if annotated else None, "rubric_alternative": None})
    config = {"model": {"name": "gen"}, "study": "detection",
              "study_config": {"datasets": ["oaks"], "oaks_source": source, "oaks_split": "all",
                               "oaks_max_new_tokens": 4, "max_new_tokens": 4, "splits": ["test"]}}
    det = _write(tmp_path / "det", det_rows, config)
    gen_rows = [{"dataset": "oaks", "case_id": f"{q}@1", "condition": cond, "complete": bool(ok),
                 "lenient": True, "margin": m}
                for q, _, _, _, full, mask, mf, mm, *_ in QUESTIONS
                for cond, ok, m in (("full", full, mf), ("mask", mask, mm), ("control", 0, 0.0))]
    gen = _write(tmp_path / "gen", gen_rows, {"model": {"name": "gen"}})
    return det, gen


def test_natural_action_by_hand(tmp_path):
    det, gen = _runs(tmp_path)
    na = natural_action(det, [str(gen)], "complete", seed=1, draws=200)
    (g,) = na["generators"]
    assert g["matched"] and g["n"] == 5 and na["labels"] == "annotation" and na["rules"] == ["complete", "lenient"]
    block = g["rules"]["complete"]
    # U = (+1, -1, +1, 0, 0), sum 1. Plain selects q1, q4: net 1, random 2/5, excess 100 * 0.6 / 5 = +12.
    plain, asked = block["excess"][PLAIN], block["excess"][WITH_QUESTION]
    assert (plain["selected"], plain["net"], plain["excess_pp"]) == (2, 1, pytest.approx(12.0))
    # With the question: q1, q2, q4: net 0, random 3/5, excess -12.
    assert (asked["selected"], asked["net"], asked["excess_pp"]) == (3, 0, pytest.approx(-12.0))
    curves = block["curves"]
    # Margin change (mask - full): q1 3, q3 1.5, q4 0.5, q5 -0.2, q2 -0.5 -> nets 1, 2, 2, 2, 1 at 20-100 %.
    change = curves["margin change (mask - full)"]
    assert [change["net"][i] for i in (2, 4, 6, 8, 10)] == pytest.approx([1, 2, 2, 2, 1])
    # Lowest full-access margin first: q3, q1, q5, q4, q2.
    assert curves["full-access margin (lowest first)"]["net"][2] == pytest.approx(1)
    # The plain detector at 20 % (k = 1): half of the top tie group {q1, q4} (sum 1); at 60 % (k = 3): 1 + 1/3 of
    # the rest (q2, q3, q5: sum 0) = 1. Uniform: 0.2 * 1.
    assert curves[PLAIN]["net"][2] == pytest.approx(0.5) and curves[PLAIN]["net"][6] == pytest.approx(1.0)
    assert curves[PLAIN]["random"][2] == pytest.approx(0.2)
    # Outcomes by attribute change: change = q1 (correction), q3 (correction).
    by_class = {c["class"]: c for c in block["attribute_change"]}
    assert by_class["change"]["n"] == 2 and by_class["change"]["corrections"] == 2
    assert by_class["change"]["detected"][PLAIN]["n"] == 1 and by_class["compatible"]["reversals"] == 1
    unambiguous = {c["class"]: c for c in block["attribute_change_unambiguous"]}
    assert unambiguous["change"]["n"] == 1  # q3's attribute change is ambiguous
    rubric = {c["class"]: c for c in block["rubric"]}
    assert (rubric["strict"]["n"], rubric["additive"]["n"], rubric["additive"]["reversals"]) == (1, 2, 1)
    # Leave one book out: without b1 (q3, q4, q5; sum U 1) plain selects q4: 100 (0 - 1/3) / 3 = -11.1;
    # without b2 (q1, q2; sum U 0) it selects q1: 100 * 1 / 2 = +50.
    loo = block["leave_one_book_out"]
    assert loo["omitted"]["b1"][f"excess {PLAIN}"] == pytest.approx(-100 / 9)
    assert loo["omitted"]["b2"][f"excess {PLAIN}"] == pytest.approx(50.0)
    assert loo["range"][f"excess {PLAIN}"] == pytest.approx([-100 / 9, 50.0])
    # Margin ranking at 20 %: without b1, k = 1 of 3 is q3 (U +1); without b2, k = round(0.4) = 0.
    assert loo["omitted"]["b1"]["net@20% margin change (mask - full)"] == pytest.approx(1)
    assert loo["omitted"]["b2"]["net@20% margin change (mask - full)"] == 0
    # The lenient sensitivity: everything correct in both arms, so U = 0 and every excess is 0.
    assert g["rules"]["lenient"]["excess"][PLAIN]["excess_pp"] == 0


def test_report_sections_and_placebo_labels(tmp_path):
    det, gen = _runs(tmp_path, source=oaks.DEMONSTRATION, annotated=False)
    summary = write_summary("detection", det, matched_scores=str(gen))
    na = summary["natural_action"]
    assert na["labels"] == "placebo" and na["sources"] == [str(gen)]
    report = (det / "report.md").read_text()
    for text in ("equal coverage", "Coverage curves", "PLACEBO", "Leave-one-book-out", "Qwen3-4B 18.2 vs 5.2"):
        assert text in report
    # A detection run without a join has no natural-action section.
    assert "natural_action" not in write_summary("detection", det)


def test_placebo_labels_copy_the_papers_proportions():
    labels = placebo_labels([f"q{i}" for i in range(116)])
    counts = lambda key: {k: sum(v[key] == k for v in labels.values()) for k in {v[key] for v in labels.values()}}
    assert counts("attribute_change") == {"change": 22, "compatible": 53, "insufficient": 41}
    assert counts("rubric") == {"strict": 29, "progression": 32, "additive": 40, "insufficient": 15}
    # Largest remainder on 10: 1.90 / 4.57 / 3.53 -> 2 / 5 / 3; order-free and seeded.
    small = placebo_labels([f"q{i}" for i in range(10)])
    assert sorted(v["attribute_change"] for v in small.values()).count("change") == 2
    assert placebo_labels([f"q{i}" for i in reversed(range(10))]) == small


def test_detection_leave_one_out_by_hand():
    def row(q, book, relation, label, fires, donor=None):
        return {"dataset": "oaks", "event": f"{q}@1", "book": book, "relation": relation, "label": label,
                "detector": PLAIN, "decision": "replacement" if fires else "no_replacement", "donor": donor}

    rows = [row("q1", "b1", "positive", 1, True), row("q1", "b1", "repeated", 0, False),
            row("q1", "b1", "other_book", 0, True, donor="q2@1"),
            row("q2", "b2", "positive", 1, False), row("q2", "b2", "repeated", 0, False),
            row("q2", "b2", "other_book", 0, False, donor="q1@1")]
    d = detection_leave_one_out(rows)[PLAIN]
    assert d["all"] == pytest.approx(4 / 6)
    assert d["omit_book"] == pytest.approx({"b1": 2 / 3, "b2": 2 / 3})
    # Omitting donor book b2 drops q1's different-book negative (a false trigger): 4 / 5 correct.
    assert d["omit_donor_book"] == pytest.approx({"b1": 3 / 5, "b2": 4 / 5})


def test_rubric_annotation_is_validated():
    data = json.loads(FIXTURE.read_text())
    ann = data["books"][0]["questions"][0]["annotation"]
    ann.update(rubric="progression", rubric_alternative="strict")
    book = oaks.parse_oaks(data)[0]
    a = oaks.annotation(book.questions[0])
    assert (a.rubric, a.rubric_alternative) == ("progression", "strict")
    ann.update(rubric="replacement")
    with pytest.raises(oaks.OaksFormatError, match="rubric"):
        oaks.parse_oaks(data)
    ann.update(rubric=None, rubric_alternative="strict")
    with pytest.raises(oaks.OaksFormatError, match="rubric"):
        oaks.parse_oaks(data)


def test_schema_echoes_are_counted():
    from kvprobe.studies.detection.natural_action import schema_echoes

    echo = '{"same_slot": true, "old_current": "value affirmed by A", "later_current": "value affirmed by B, or null"}'
    rows = [{"dataset": "oaks", "detector": PLAIN, "output": echo, "decision": "replacement"},
            {"dataset": "oaks", "detector": PLAIN, "output": '{"old_current": "Kent"}', "decision": "replacement"},
            {"dataset": "oaks", "detector": WITH_QUESTION, "output": echo[:60], "decision": "unresolved"}]
    assert schema_echoes(rows) == {PLAIN: {"rows": 1, "fired": 1}, WITH_QUESTION: {"rows": 1, "fired": 0}}
