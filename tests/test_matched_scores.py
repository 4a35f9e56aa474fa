"""The matched-scores study (paper app:v7_bridge, app:v35_generation and its generation limits): the note
segment and the equal-token control, canonical candidates, prefix re-scoring against fresh generations,
the OAKS candidate order, the grading views, the reversal counts, tiny end-to-end runs of both datasets
and the panel, and parameter validation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvprobe
from kvprobe.decoding import Generation
from kvprobe.studies.matched_scores import strings
from kvprobe.studies.matched_scores.oaks_items import load_books, oaks_items
from kvprobe.studies.common.detectors import strings as record_strings
from kvprobe.studies.datasets.record_histories import note_text
from kvprobe.studies.common.answers import canonical_answer
from kvprobe.studies.matched_scores.scoring import budget_grades, grade_answer, trace_prefix
from kvprobe.studies.matched_scores.study import CONDITIONS, MatchedScoresStudy
from kvprobe.studies.matched_scores.summary import budget_summary, main_table, subset_summary, write_panel
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.protocol import InvalidParameter
from kvprobe.studies.common.runner import read_rows, run_study
from kvprobe.readouts.stats import group_bootstrap_weights

FIXTURE = Path(__file__).parent / "fixtures" / "oaks_sample.json"

pytestmark = pytest.mark.usefixtures("one_thread")


def _overlapping(history: kvprobe.History, start: int, end: int) -> list[int]:
    """Independent reference: every token whose character offsets overlap [start, end) of the history text."""
    return [i for i, (a, b) in enumerate(history.offsets) if a < end and b > start and b > a]


def _positions(mask: kvprobe.Mask) -> list[int]:
    return [p for s in mask.spans for p in s.positions()]


# ----------------------------------------------------------------------------- records: note, spans, candidates


def test_note_is_in_every_condition_and_the_control_starts_it_with_the_masks_size(llama):
    study = MatchedScoresStudy(n_groups=1)
    cases = study.cases()
    assert len(cases) == 6 and {c.note for c in cases} == {note_text("notebook", 16)}
    assert note_text("notebook", 16).count(record_strings.NOTEBOOK_NOTE) == 16
    for case in cases[:3]:
        h = llama.prefill(study.prompt(llama, case))
        text = h.text
        # The note is its own segment, once, between the other record and Time 2.
        assert text.count(case.note) == 1 and text.index("Other record:") < text.index(case.note) < text.index("Time 2:")
        conditions = study.conditions(llama, case, h)
        mask, control = conditions["mask"], conditions["control"]
        a_start = text.index(case.history.case.a_text)
        assert _positions(mask) == _overlapping(h, a_start, a_start + len(case.history.case.a_text))
        note_start = text.index(case.note)
        first_note_token = _overlapping(h, note_start, note_start + len(case.note))[0]
        assert _positions(control) == list(range(first_note_token, first_note_token + mask.n_tokens))
        for segment in ("time1", "other", "time2"):
            assert not set(_positions(control)) & set(h.span(segment).positions()), segment
        assert max(_positions(control)) < len(h)  # before the question


def test_canonical_candidates_have_no_leading_space_and_coincide_when_nothing_changed(llama):
    study = MatchedScoresStudy(n_groups=1)
    by_variant = {c.history.case.variant: c for c in study.cases()}
    h = llama.prefill(study.prompt(llama, by_variant["replacement"]))
    (q,) = study.questions(llama, by_variant["replacement"], h)
    case = by_variant["replacement"].history.case
    assert q.candidates == (f'{{"answer": "{case.new_value}"}}', f'{{"answer": "{case.old_value}"}}')
    assert all(c.startswith('{"answer": "') for c in q.candidates)
    for variant in ("confirmation", "role_confirmation", "other_entity"):
        (q,) = study.questions(llama, by_variant[variant], h)
        assert q.candidates == (canonical_answer(case.old_value),)
    assert canonical_answer("109 hours") == '{"answer": "109 hours"}'


# ----------------------------------------------------------------------------- generation limits


def test_prefix_rescoring_equals_a_fresh_generation_with_that_budget(llama):
    """Greedy decoding is deterministic: the first 3 tokens of an 8-token trace are the 3-token answer."""
    study = MatchedScoresStudy(n_groups=1)
    case = study.cases()[0]
    h = llama.prefill(study.prompt(llama, case))
    access = {"full": kvprobe.Full(), "mask": study.conditions(llama, case, h)["mask"]}
    long = llama.generate(h, case.question, access, max_new_tokens=8)
    short = llama.generate(h, case.question, access, max_new_tokens=3)
    for name in access:
        assert long[name].n_tokens > 3
        prefix = trace_prefix(long[name], 3, llama.tokenizer.decode, llama.eos_ids)
        assert (prefix.text, prefix.token_ids, prefix.stop_reason) == \
            (short[name].text, short[name].token_ids, short[name].stop_reason) == (short[name].text,
                                                                                  long[name].token_ids[:3], "cap")
        whole = trace_prefix(long[name], 8, llama.tokenizer.decode, llama.eos_ids)
        assert (whole.text, whole.stop_reason) == (long[name].text, long[name].stop_reason)


def test_prefix_of_an_eos_stopped_trace():
    decode = " ".join  # token "ids" are strings here: decode joins them
    trace = Generation(text="a b", token_ids=("a", "b", "<eos>"), stop_reason="eos", n_tokens=3, access="full")
    eos = {"<eos>"}
    assert trace_prefix(trace, 3, decode, eos) == trace_prefix(trace, 40, decode, eos)
    assert (trace_prefix(trace, 3, decode, eos).text, trace_prefix(trace, 3, decode, eos).stop_reason) == ("a b", "eos")
    cut = trace_prefix(trace, 2, decode, eos)
    assert (cut.text, cut.stop_reason, cut.n_tokens) == ("a b", "cap", 2)
    with pytest.raises(ValueError, match="budget"):
        trace_prefix(trace, 0, decode, eos)


def test_budget_grades_cap_a_trace_that_is_still_running():
    decode = "".join
    toks = tuple('{"answer": "109 hours"}') + ("<eos>",)
    trace = Generation(text='{"answer": "109 hours"}', token_ids=toks, stop_reason="eos", n_tokens=len(toks),
                       access="full")
    grades = budget_grades(trace, (5, len(toks) - 1, len(toks)), decode, {"<eos>"}, "109 hours", "107 hours")
    assert grades["5"]["complete_category"] == "capped" and not grades["5"]["exact"]
    # All of the JSON but no EOS yet: the exact field reads it, the complete rule counts it capped.
    assert grades[str(len(toks) - 1)]["exact"] and grades[str(len(toks) - 1)]["complete_category"] == "capped"
    assert grades[str(len(toks))]["complete"] and grades[str(len(toks))]["stop_reason"] == "eos"


# ----------------------------------------------------------------------------- grading views


@pytest.mark.parametrize("text, stop, reference, old, exact, complete, value", [
    ('{"answer": "109 hours"}', "eos", "109 hours", "107 hours", True, "complete", "correct"),
    ('{"answer": "109"}', "eos", "109 hours", "107 hours", False, "missing_unit", "magnitude_only"),
    ('{"answer": "107 hours"}', "eos", "109 hours", "107 hours", False, "old_value", "old_value"),
    ('{"answer": "UNKNOWN"}', "eos", "109 hours", "107 hours", False, "unknown", "unknown"),
    ('```json\n{"answer": "109 hours"}\n```', "eos", "109 hours", "107 hours", False, "complete", "invalid_format"),
    ('{"answer": "109 hours", "unit": "h"}', "eos", "109 hours", "107 hours", True, "format_failure", "correct"),
    ('The answer is 109 hours.', "eos", "109 hours", "107 hours", False, "format_failure", "invalid_format"),
    ('{"answer": "Miami "}', "cap", "Miami", "Tunis", True, "capped", "correct"),
    ('{"answer": "b"}', "eos", "B", "A", True, "complete", "correct"),
    ('{"answer": "A"}', "eos", "B", "A", False, "other_value", "old_value"),
])
def test_three_views_of_one_answer(text, stop, reference, old, exact, complete, value):
    g = grade_answer(text, stop, reference, old)
    assert (g["exact"], g["complete_category"], g["value_category"]) == (exact, complete, value)
    assert g["complete"] == (complete == "complete") and g["lenient"] == exact  # no mentions: lenient = exact


@pytest.mark.parametrize("text, lenient", [
    ("The lead time is 109 hours, no longer 107 hours.", True),
    ("It was 107 hours; now 109 hours.", False),
    ("The notebook contains numbered pages.", False),
    ('{"answer": "109 hours"}', True),
])
def test_lenient_reads_the_first_value_mentioned(text, lenient):
    assert grade_answer(text, "eos", "109 hours", "107 hours", ("109 hours", "107 hours", "80 hours"))["lenient"] \
        == lenient


# ----------------------------------------------------------------------------- OAKS items


def test_oaks_fixture_loads_and_candidate_order_alternates(tmp_path):
    items = oaks_items(load_books(str(FIXTURE)), "all")
    assert [i.current_is_a for i in items] == [True, False, True][:len(items)] and len(items) == 3
    assert [i.reference for i in items] == ["A", "B", "A"] and [i.old for i in items] == ["B", "A", "B"]
    for item in items:
        a, b = item.shown
        current = a if item.current_is_a else b
        assert current == item.change.new_answer and {a, b} == {item.change.new_answer, item.change.old_answer}
        assert f"Candidate A: {a}\nCandidate B: {b}" in item.question
    # The earliest kept change of a question with two changes.
    data = json.loads(FIXTURE.read_text())
    q = data["books"][0]["questions"][0]
    q["answers"] = ["Harwick", "Valmora", "Valmora", "Dunmere"]
    q["sources"] = ["The clerk lived in Harwick.", "The clerk had a small room in Valmora.", "",
                    "By spring the clerk had moved to Dunmere."]
    path = tmp_path / "two.json"
    path.write_text(json.dumps(data))
    chosen = [i for i in oaks_items(load_books(str(path)), "all") if i.group == q["question_id"]]
    assert [i.change.chunk for i in chosen] == [1]


def test_demonstration_questions_are_balanced_between_positions():
    items = oaks_items(load_books("demonstration"), "evaluation")
    n_a = sum(i.current_is_a for i in items)
    assert len(items) > 10 and abs(2 * n_a - len(items)) <= 1
    assert len({i.group for i in items}) == len(items) and len({i.stratum for i in items}) == 5


def test_oaks_spans_are_the_earlier_source_and_the_start_of_the_unrelated_text(llama):
    study = MatchedScoresStudy(dataset="oaks", oaks_source=str(FIXTURE), oaks_split="all")
    item = study.cases()[0]
    h = llama.prefill(study.prompt(llama, item))
    conditions = study.conditions(llama, item, h)
    old = item.change.old_source
    start = h.text.index(old)
    assert _positions(conditions["mask"]) == _overlapping(h, start, start + len(old) + 1)  # + its newline
    assert h.token_text(conditions["mask"].spans[0]) == old + "\n"
    neutral = h.text.index(item.neutral)
    first = _overlapping(h, neutral, neutral + len(item.neutral))[0]
    assert _positions(conditions["control"]) == list(range(first, first + conditions["mask"].n_tokens))
    assert "Unrelated source" not in h.token_text(conditions["control"].spans[0])


# ----------------------------------------------------------------------------- summary rules


def _row(case: str, group: str, condition: str, exact: bool, margin: float, value: str = "correct",
         complete: bool | None = None) -> dict:
    complete = exact if complete is None else complete
    return {"case_id": case, "group": group, "condition": condition, "exact": exact, "lenient": exact, "margin": margin,
            "value_category": value if not exact else "correct", "complete": complete,
            "complete_category": "complete" if complete else "format_failure", "stop_reason": "eos"}


def test_reversals_are_counted_with_their_value_categories_and_margins():
    # c1: reversal, unit omitted, margin rose; c2: reversal, UNKNOWN, margin fell; c3: correction; c4: kept.
    correct = {"full": [True, True, True, True], "control": [True, True, False, True],
               "mask": [False, False, True, True]}
    margins = {"full": [0, 0, 0, 0], "control": [1.0, 2.0, 0.0, 1.0], "mask": [3.0, 1.0, 0.5, 1.0]}
    values = ["magnitude_only", "unknown", "correct", "correct"]
    cases = [f"c{i + 1}" for i in range(4)]
    by = {a: {c: _row(c, f"g{i // 2}", a, correct[a][i], margins[a][i], values[i]) for i, c in enumerate(cases)}
          for a in CONDITIONS}
    weights = group_bootstrap_weights([f"g{i // 2}" for i in range(4)], n_draws=200, seed=1)
    s = subset_summary(cases, by, weights)
    exact = s["rules"]["exact"]
    assert exact["correct"] == {"full": 4, "mask": 2, "control": 3}
    # The report's columns are full, control, mask (the paper's order).
    cells = main_table(s, "exact")[0].split(" | ")
    assert cells[1:4] == ["100.0% (4)", "75.0% (3)", "50.0% (2)"] and cells[5] == "1/2"
    assert (exact["mask_vs_control"]["corrections"], exact["mask_vs_control"]["reversals"]) == (1, 2)
    assert exact["mask_vs_control"]["pp"] == pytest.approx(-25.0)
    rev = exact["reversals_vs_control"]
    assert (rev["n"], rev["unit_omitted"], rev["unknown"], rev["old_value"], rev["margin_rose"]) == (2, 1, 1, 0, 1)
    # Accepting unit omission turns c1 back into a correct answer.
    assert s["rules"]["unit_lenient"]["correct"]["mask"] == 3
    assert s["delta_m"]["value"] == pytest.approx((2.0 - 1.0 + 0.5 + 0.0) / 4)


def test_budget_summary_counts_truncations_and_changed_indicators():
    def row(grades):
        return {"budgets": {str(k): {"exact": e, "complete": c, "lenient": e, "stop_reason": s}
                            for k, (e, c, s) in grades.items()}}

    steady = row({3: (True, False, "cap"), 8: (True, True, "eos")})
    by = {a: {"c1": steady, "c2": row({3: (False, False, "cap"), 8: (False, False, "cap")})} for a in CONDITIONS}
    g = budget_summary(["c1", "c2"], by)
    assert g["budgets"] == [3, 8] and g["table"]["3"]["mask"] == {"exact": 1, "complete": 0, "lenient": 1,
                                                                  "truncated": 2, "outputs": 2}
    assert g["changed_indicators"] == {"exact": 0, "complete": 3, "lenient": 0}
    assert g["identical"] == {"exact": True, "complete": False, "lenient": True}


# ----------------------------------------------------------------------------- end to end


def test_records_run_rows_summary_and_prefix_grades(llama, tmp_path):
    study = MatchedScoresStudy(n_groups=1, max_new_tokens=8, prefix_budgets=(3, 8))
    info = run_study(study, llama, tmp_path / "long", progress=False)
    rows = list(read_rows(tmp_path / "long"))
    assert info.cases_run == 6 and len(rows) == 18
    for case in {r["case_id"] for r in rows}:
        by = {r["condition"]: r for r in rows if r["case_id"] == case}
        assert set(by) == set(CONDITIONS) and len({r["prompt_sha256"] for r in by.values()}) == 1
        assert by["full"]["masked_tokens"] == 0 and by["mask"]["masked_tokens"] == by["control"]["masked_tokens"]
        if not by["full"]["replacement"]:
            assert all(r["margin"] == 0.0 and len(r["candidates"]) == 1 for r in by.values())
    for r in rows:  # the full-length budget grades the trace itself
        assert r["budgets"]["8"]["exact"] == r["exact"] and r["budgets"]["8"]["complete_category"] == \
            r["complete_category"] and r["budgets"]["8"]["n_tokens"] == r["output_tokens"]
    # A 3-token run reproduces the 3-token prefix grades of the 8-token run, row by row.
    run_study(MatchedScoresStudy(n_groups=1, max_new_tokens=3, prefix_budgets=(3,)), llama, tmp_path / "short",
              progress=False)
    short = {(r["case_id"], r["condition"]): r for r in read_rows(tmp_path / "short")}
    for r in rows:
        s = short[(r["case_id"], r["condition"])]
        assert s["output_token_ids"] == r["output_token_ids"][:3] and s["budgets"]["3"] == r["budgets"]["3"]
    summary = write_summary("matched-scores", tmp_path / "long")
    assert set(summary["subsets"]) == {"replacement", "all"} and summary["subsets"]["replacement"]["n"] == 3
    assert summary["generation_limits"]["budgets"] == [3, 8] and summary["seed"] == 20260919
    report = (tmp_path / "long" / "report.md").read_text()
    assert "tab:v7_bridge" in report and "Generation limits" in report and (tmp_path / "long" / "figure.png").exists()


def test_oaks_run_and_panel(llama, tmp_path):
    run_study(MatchedScoresStudy(dataset="oaks", oaks_source=str(FIXTURE), oaks_split="all", max_new_tokens=4,
                                 prefix_budgets=(4,)), llama, tmp_path / "oaks", progress=False)
    rows = list(read_rows(tmp_path / "oaks"))
    assert len(rows) == 9 and {r["candidates"][0] for r in rows} == {'{"answer": "A"}', '{"answer": "B"}'}
    summary = write_summary("matched-scores", tmp_path / "oaks")
    assert summary["dataset"] == "oaks" and set(summary["by_current_position"]) == {"A", "B"}
    assert "OAKS file" in (tmp_path / "oaks" / "report.md").read_text()
    run_study(MatchedScoresStudy(n_groups=1, max_new_tokens=2, prefix_budgets=(2,)), llama, tmp_path / "rec",
              progress=False)
    write_summary("matched-scores", tmp_path / "rec")
    text = write_panel([tmp_path / "rec", tmp_path / "oaks"], tmp_path / "panel")
    assert "## Synthetic records" in text and "## OAKS" in text and "tab:v35_oaks" in text
    assert json.loads((tmp_path / "panel" / "panel.json").read_text())["runs"][0]["model"] == "tiny-llama"


# ----------------------------------------------------------------------------- verdicts: report and scorecard


def _oaks_subset(control: int, mask: int, ci: list[float], n: int = 114) -> dict:
    """A planted OAKS ``all`` subset: one rule (``complete``) with the control's and the mask's counts."""
    def change(pp, interval):
        return {"pp": pp, "ci": interval, "corrections": 0, "reversals": 0}
    rule = {"correct": {"full": control, "control": control, "mask": mask},
            "mask_vs_control": change(100 * (mask - control) / n, ci), "mask_vs_full": change(0.0, [-1.0, 1.0]),
            "control_vs_full": change(0.0, [-1.0, 1.0])}
    return {"n": n, "groups": n, "rules": {"complete": rule, "lenient": rule}}


def test_an_oaks_control_below_two_way_chance_is_not_testable_whatever_the_interval():
    """Issue 46 item 8a: the control at 37/114 lies below a random pick of the two answer texts (57/114) by the
    exact test, so a mask - control change that excludes 0 reads not testable, never opposite; at 75/114 the same
    interval is the paper's opposite."""
    from kvprobe.studies.common.claims import NOT_TESTABLE, OPPOSITE, judge
    from kvprobe.studies.matched_scores.claims import CLAIMS, OAKS_CHANCE, matched_accuracy_measurement

    claim = next(c for c in CLAIMS if c.key == "matched-scores.oaks-choices")
    below = matched_accuracy_measurement(_oaks_subset(37, 31, [-9.6, -0.9]), "complete", OAKS_CHANCE)
    assert judge(claim, below) == NOT_TESTABLE
    assert below.not_testable.startswith("control not above chance: 37/114 correct, exact 95% interval [24.0, 41.9]")
    above = matched_accuracy_measurement(_oaks_subset(75, 69, [-9.6, -0.9]), "complete", OAKS_CHANCE)
    assert above.not_testable is None and judge(claim, above) == OPPOSITE
    # at 66/114 (57.9 %) the point lies above 50 % but the exact interval does not
    assert matched_accuracy_measurement(_oaks_subset(66, 60, [-9.6, -0.9]), "complete", OAKS_CHANCE).not_testable


def test_the_lenient_line_gives_the_secondary_verdict():
    """The report's lenient line judges the lenient rule as the scorecard's secondary rows do (records: the
    replacement claim; OAKS: the choice claim, chance included), with the reason when it is not testable."""
    from kvprobe.studies.matched_scores.summary import lenient_verdict

    assert lenient_verdict({"dataset": "oaks", "subsets": {"all": _oaks_subset(52, 50, [-7.0, 3.5])}}).startswith(
        "not testable here: control not above chance: 52/114 correct")
    assert lenient_verdict({"dataset": "oaks", "subsets": {"all": _oaks_subset(90, 100, [2.0, 15.0])}}) == \
        "replicates"
    records = _oaks_subset(81, 39, [-45.3, -10.7], n=150)
    records["groups"] = 50
    assert lenient_verdict({"dataset": "records", "subsets": {"replacement": records}}) == "replicates"


def test_committed_reports_and_scorecard_rows_give_one_verdict():
    """Every committed matched-scores report's claim verdicts are its primary scorecard rows' (issue 46 items 8a
    and 10): the same rule (complete answers over all 300 cases and on OAKS, the exact field on the 150
    replacements), the same estimate; the Qwen-0.5B OAKS row is not testable (control 37/114)."""
    from kvprobe.studies.common.claims import NOT_TESTABLE, evaluate_run
    from kvprobe.studies.matched_scores.claims import CLAIMS
    from kvprobe.studies.matched_scores.summary import CLAIMS as REPORT_CLAIMS
    from kvprobe.studies.matched_scores.summary import RULES, claim_rows

    artifacts = Path(__file__).resolve().parents[1] / "artifacts" / "matched-scores"
    runs = sorted(p.parent for p in artifacts.glob("*/summary.json") if (p.parent / "config.json").exists())
    assert {r.name for r in runs} >= {"qwen2.5-coder-0.5b-instruct-oaks", "qwen2.5-coder-1.5b-instruct"}
    rule_of = {key: rule for spec in REPORT_CLAIMS.values() for _, rule, key, _, _ in spec}
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        primary = {r.claim.key: r for r in evaluate_run(run, CLAIMS) if r.test.primary}
        report = claim_rows(summary)
        for subset, rule, key, _, _ in REPORT_CLAIMS[summary["dataset"]]:
            row = primary[key]
            assert row.test.rule.startswith(f"paper's rule: {'exact answer field' if rule == 'exact' else rule}")
            assert row.measurement.value == summary["subsets"][subset]["rules"][rule]["mask_vs_control"]["pp"]
            cell = next(c for c in report if c["subset"] == subset and c["claim"].endswith(f"({RULES[rule]} rule, pp)"))
            assert cell["verdict"].split(" (")[0] == row.verdict, (run.name, key)
    assert rule_of["matched-scores.all-answers"] == "complete" and rule_of["matched-scores.oaks-choices"] == "complete"
    oaks = {r.claim.key: r for r in evaluate_run(artifacts / "qwen2.5-coder-0.5b-instruct-oaks", CLAIMS)
            if r.test.primary}["matched-scores.oaks-choices"]
    assert oaks.verdict == NOT_TESTABLE and oaks.estimate_text == "-5.3 [-9.6, -0.9] pp"
    assert "control not above chance: 37/114" in oaks.reason
    qwen15 = {r.claim.key: r for r in evaluate_run(artifacts / "qwen2.5-coder-1.5b-instruct", CLAIMS)
              if r.test.primary}["matched-scores.all-answers"]
    assert qwen15.estimate_text == "-16.3 [-20.0, -13.3] pp"  # the README's complete-answer number


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize("kwargs, field", [
    (dict(dataset="books"), "dataset"),
    (dict(prefix_budgets=(8, 3), max_new_tokens=8), "prefix_budgets"),
    (dict(prefix_budgets=(40, 128)), "prefix_budgets"),
    (dict(prefix_budgets=(0,)), "prefix_budgets"),
    (dict(note_repeats=0), "note_repeats"),
    (dict(deadline_unit="weeks"), "deadline_unit"),
    (dict(oaks_split="test"), "oaks_split"),
    (dict(dataset="oaks", oaks_source="/no/such/oaks.json"), "oaks_source"),
])
def test_bad_parameters_name_the_field(kwargs, field):
    with pytest.raises(InvalidParameter, match=f"^{field}:") as err:
        MatchedScoresStudy(**kwargs)
    assert err.value.field_name == field
