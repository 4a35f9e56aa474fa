"""Natural-text detection (the detection study's oaks dataset): pairs, the question-conditioned prompt,
confusion and bootstrap math, annotation tables, the detection x action join, a tiny end-to-end run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import kvprobe
from kvprobe.studies.datasets import oaks
from kvprobe.studies.detection.natural import NATURAL_DETECTORS, PLAIN, WITH_QUESTION, question_conditioned_prompt
from kvprobe.studies.detection.natural_summary import annotation_cells, confusion_cell, detection_action
from kvprobe.studies.detection.study import DetectionStudy, oaks_cases
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.detectors import strings
from kvprobe.studies.common.runner import read_rows, run_study

FIXTURE = Path(__file__).parent / "fixtures" / "oaks_sample.json"


def test_pairs_on_the_fixture():
    cases = oaks_cases(str(FIXTURE), "all")
    assert len(cases) == 9 and [c.label for c in cases] == [1, 0, 0] * 3
    books = {b.book_id: b for b in oaks.load_books(str(FIXTURE))}
    by_event = {c.columns["event"]: c for c in cases if c.relation == "positive"}
    for c in cases:
        assert c.group == c.columns["question_id"] and c.pair.a_text == by_event[c.columns["event"]].pair.a_text
        if c.relation == "repeated":
            assert c.pair.b_text == c.pair.a_text
        if c.relation == "other_book":
            donor = by_event[c.columns["donor"]]
            assert donor.columns["book"] != c.columns["book"] and c.pair.b_text == donor.pair.b_text
            assert c.pair.b_text not in " ".join(books[c.columns["book"]].chunks)  # really another book's text
    positive = by_event["b0-q1@3"].pair
    assert (positive.a_text, positive.b_text) == ("The clerk had a small room in Valmora.",
                                                  "By spring the clerk had moved to Dunmere.")


def test_different_book_negative_needs_two_books():
    books = oaks.load_books(str(FIXTURE))
    one_book = [(b, c) for b, c in oaks.earliest_changes(books, "all") if b.book_id == "fixture-book-0"]
    with pytest.raises(ValueError, match="two books"):
        from kvprobe.studies.detection.natural import natural_pairs
        natural_pairs(one_book)


@pytest.mark.parametrize("chat", [True, False])
def test_question_conditioned_prompt_prepends_the_prefix_once(chat):
    model = kvprobe.load_model("tiny-llama")
    question = "Where does the clerk live?"
    prompt, later = question_conditioned_prompt("Old record.", "Later record.", question, chat)
    rendered = prompt.render(model.tokenizer)
    full = rendered.history_text + rendered.suffix(later)
    prefix = strings.QUESTION_CONDITIONED.format(question=question)
    assert prefix.startswith("The target entity/attribute is specified by this question: Where does")
    assert prefix.endswith("? Extract the states relevant to that target.")
    filled = strings.fill(strings.ASSERTED_VALUE, "Old record.", "Later record.")
    assert full.count(prefix) == 1 and full.count(prefix + "\n\n" + filled) == 1
    if not chat:
        assert full == prefix + "\n\n" + filled + "\n"


def _row(group, label, decision, relation=None, detector=PLAIN, **extra):
    return {"group": group, "label": label, "decision": decision, "detector": detector,
            "relation": relation or ("positive" if label else "repeated"), "parse": "ok" if decision != "unresolved"
            else "not_json", "stop_reason": "eos", **extra}


def test_confusion_counts_and_question_group_interval():
    rows = [_row("q1", 1, "replacement"), _row("q1", 0, "no_replacement"), _row("q1", 0, "replacement", "other_book"),
            _row("q2", 1, "unresolved"), _row("q2", 0, "no_replacement"), _row("q2", 0, "no_replacement", "other_book")]
    c = confusion_cell(rows, seed=1, draws=2000)
    assert (c["tp"], c["fp"], c["fn"], c["tn"]) == (1, 1, 1, 3)  # the unresolved positive is a miss
    assert c["accuracy"] == pytest.approx(4 / 6) and c["false_triggers_by_negative"] == {"other_book": 1,
                                                                                        "repeated": 0}
    # Whole questions are resampled: q1 has accuracy 2/3, q2 2/3, so every draw gives 2/3.
    assert c["accuracy_ci"] == pytest.approx([4 / 6, 4 / 6])
    rows[4]["decision"] = "replacement"  # q2 now 1/3 correct: draws give 2/3, 1/2 or 1/3
    lo, hi = confusion_cell(rows, seed=1, draws=2000)["accuracy_ci"]
    assert lo == pytest.approx(1 / 3) and hi == pytest.approx(2 / 3)


def _annotated_rows(decision_of):
    """Positive rows of the fixture's questions with their annotation columns and a chosen decision."""
    return [{"group": c.group, "label": 1, "relation": c.relation, "detector": d, "decision": decision_of(c, d),
             **c.columns} for c in oaks_cases(str(FIXTURE), "all") for d in NATURAL_DETECTORS]


def test_annotation_tables_under_both_exclusion_rules():
    # b0-q1: unambiguous change; b1-q1: compatible, description ambiguous; b2-q1: change, change ambiguous.
    cells = {(c["exclusion"], c["detector"]): c for c in annotation_cells(
        _annotated_rows(lambda c, d: "replacement" if d == WITH_QUESTION else "no_replacement"))}
    plain, asked = cells[("none", PLAIN)], cells[("none", WITH_QUESTION)]
    assert (plain["tp"], plain["fn"], plain["fp"], plain["tn"]) == (0, 2, 0, 1)
    assert (asked["tp"], asked["fn"], asked["fp"], asked["tn"]) == (2, 0, 1, 0)
    union = cells[("either", WITH_QUESTION)]
    assert (union["tp"], union["fn"], union["fp"], union["tn"]) == (1, 0, 0, 0)  # only b0-q1 is unambiguous
    change_only = cells[("attribute_change", WITH_QUESTION)]
    assert (change_only["tp"], change_only["fp"]) == (1, 1)  # b1-q1 kept: only its description is ambiguous
    assert annotation_cells([{**r, "attribute_change": None} for r in _annotated_rows(lambda c, d: "x")]) == []


def test_annotation_schema_is_validated():
    bad = json.loads(FIXTURE.read_text())
    bad["books"][0]["questions"][0]["annotation"]["attribute_change"] = "replaced"
    with pytest.raises(oaks.OaksFormatError, match="attribute_change"):
        oaks.parse_oaks(bad)
    assert oaks.annotation({"question_id": "q", "annotation": None}) is None


def _write_run(path: Path, rows: list[dict], model: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "config.json").write_text(json.dumps({"model": {"name": model}}))
    return path


def test_detection_action_join(tmp_path):
    detection = _write_run(tmp_path / "det", [
        {"case_id": f"oaks/{e}/positive", "dataset": "oaks", "relation": "positive", "detector": PLAIN, "event": e,
         "decision": d}
        for e, d in (("q1@2", "replacement"), ("q2@1", "no_replacement"), ("q3@4", "unresolved"),
                     ("q4@1", "replacement"))] + [
        {"case_id": "oaks/q1@2/repeated", "dataset": "oaks", "relation": "repeated", "detector": PLAIN,
         "event": "q1@2", "decision": "replacement"}],
        "det")
    outcomes = {"q1@2": (False, True), "q2@1": (True, False), "q3@4": (False, True)}  # q4 not generated
    gen = _write_run(tmp_path / "gen", [
        {"dataset": "oaks", "case_id": e, "condition": condition, "complete": ok, "exact": True}
        for e, (full, mask) in outcomes.items()
        for condition, ok in (("full", full), ("mask", mask), ("control", False))],
        "gen-model")
    (cell,) = detection_action(detection, [gen])
    assert cell["generator"] == "gen-model" and cell["unmatched"] == 1
    assert cell["detected"] == {"n": 1, "both_correct": 0, "corrections": 1, "reversals": 0, "both_wrong": 0}
    assert cell["missed"] == {"n": 2, "both_correct": 0, "corrections": 1, "reversals": 1, "both_wrong": 0}
    (exact,) = detection_action(detection, gen, rule="exact")
    assert exact["missed"]["both_correct"] == 2


def test_bad_oaks_parameters_fail_before_a_model_loads(tmp_path):
    with pytest.raises(ValueError, match="oaks_source"):
        DetectionStudy(datasets=("oaks",), oaks_source=str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="oaks_detectors"):
        DetectionStudy(oaks_detectors=("direct",))
    with pytest.raises(ValueError, match="oaks_max_new_tokens"):
        DetectionStudy(oaks_max_new_tokens=0)


def test_tiny_oaks_detection_run_and_join(tmp_path):
    model = kvprobe.load_model("tiny-llama")
    study = DetectionStudy(datasets=("oaks",), oaks_source=str(FIXTURE), oaks_split="all", oaks_max_new_tokens=4,
                           cases_per_batch=16)
    run_study(study, model, tmp_path / "det", progress=False)
    rows = list(read_rows(tmp_path / "det"))
    assert len(rows) == 9 * 2 and {r["detector"] for r in rows} == set(NATURAL_DETECTORS)
    assert all(r["output_tokens"] <= 4 and r["decision"] in ("replacement", "no_replacement", "unresolved")
               for r in rows)
    events = sorted({r["event"] for r in rows})
    gen = _write_run(tmp_path / "gen", [{"dataset": "oaks", "case_id": e, "condition": c, "complete": c == "mask"}
                                        for e in events for c in ("full", "mask")], "gen")
    summary = write_summary("detection", tmp_path / "det", matched_scores=str(gen))
    cells = {c["detector"]: c for c in summary["natural"]["confusion"]}
    for c in cells.values():
        assert c["tp"] + c["fn"] == 3 and c["fp"] + c["tn"] == 6 and sum(c["parse"].values()) == 9
    joined = summary["detection_action"]
    assert len(joined) == 2 and all(j["detected"]["n"] + j["missed"]["n"] == 3 for j in joined)
    assert all(j["detected"]["corrections"] + j["missed"]["corrections"] == 3 for j in joined)
    report = (tmp_path / "det" / "report.md").read_text()
    assert "Records + question" in report and "Qwen3-8B (paper)" in report and "Detection and masking" in report
    assert summary["natural"]["annotated_questions"] == 3
    assert np.isfinite(cells[PLAIN]["accuracy"])


def test_question_effect_is_paired_over_the_same_pairs():
    from kvprobe.studies.detection.natural_summary import question_effect

    decisions = {  # (question, relation): (plain, with question)
        ("q1", "positive"): ("no_replacement", "replacement"), ("q1", "repeated"): ("no_replacement", "replacement"),
        ("q2", "positive"): ("unresolved", "replacement"), ("q2", "repeated"): ("replacement", "no_replacement")}
    rows = [{"case_id": f"{q}/{rel}", "group": q, "label": int(rel == "positive"), "relation": rel,
             "detector": d, "decision": pair[i]}
            for (q, rel), pair in decisions.items() for i, d in enumerate((PLAIN, WITH_QUESTION))]
    effect = question_effect(rows, seed=1, draws=500)
    assert effect["true_triggers"]["change"] == 2 and effect["true_triggers"]["ci"] == [2, 2]  # both questions +1
    assert effect["false_triggers"]["change"] == 0 and effect["false_triggers"]["corrections"] == 1
    assert effect["correct"]["change"] == 2
    assert question_effect([r for r in rows if r["detector"] == PLAIN]) is None
