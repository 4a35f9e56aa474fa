"""The derived-note / selective-refresh study: generator, neutral interval, conditions, grading, run, summary."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

import kvprobe
from kvprobe.access import positions_of
from kvprobe.decoding import question_logits, suffix_ids
from kvprobe.reference import reference_logits
from kvprobe.tiny import tiny_tokenizer
from kvprobe.studies.derived_note import grading, data, history
from kvprobe.studies.derived_note.study import COSTS, DerivedNoteStudy
from kvprobe.studies.derived_note.summary import format_report, summarize
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.protocol import CaseRun
from kvprobe.studies.common.runner import run_study

TOL = 1e-4


# --------------------------------------------------------------------------- generator

def test_generator_is_deterministic_and_seeded():
    a, b = data.generate_groups(), data.generate_groups()
    assert a == b and len(a) == 50
    assert data.dataset_hash(a) == data.dataset_hash(b)
    other = data.generate_groups(seed=1)
    assert other != a and data.dataset_hash(other) != data.dataset_hash(a)
    assert [g.group_id for g in data.generate_groups(7)] == [f"dn-{i:03d}" for i in range(7)]
    assert data.generate_groups(7) == a[:7]
    cases = data.generate_cases(3)
    assert [c.case_id for c in cases] == [f"dn-00{i}/{n}" for i in range(3) for n in ("derived", "neutral")]
    assert len({g.entity for g in a}) == 50


def test_values_and_order_are_counterbalanced():
    gs = data.generate_groups()
    assert Counter(g.swapped for g in gs) == {False: 25, True: 25}
    assert Counter(g.old_listed_first for g in gs) == {False: 25, True: 25}
    assert Counter((g.swapped, g.old_listed_first) for g in gs) == {(False, True): 13, (False, False): 12,
                                                                    (True, False): 13, (True, True): 12}
    for first, second in zip(gs[::2], gs[1::2]):
        # A pair shares its values with the old and new roles exchanged (and the same rule text).
        assert (first.old_zone, first.old_route) == (second.new_zone, second.new_route)
        assert (first.new_zone, first.new_route) == (second.old_zone, second.old_route)
        assert first.rule == second.rule
    # Every value is the old value as often as the new one.
    assert Counter(g.old_zone for g in gs) == Counter(g.new_zone for g in gs)
    assert Counter(g.old_route for g in gs) == Counter(g.new_route for g in gs)


def test_texts_and_answers_follow_the_rule():
    for g in data.generate_groups():
        assert g.old_zone != g.new_zone and g.old_route != g.new_route
        assert g.old_zone not in g.new_zone and g.new_zone not in g.old_zone
        first = g.rule.index(g.old_zone) < g.rule.index(g.new_zone)
        assert first == g.old_listed_first
        assert f"zone {g.old_zone} use route {g.old_route}" in g.rule
        assert f"zone {g.new_zone} use route {g.new_route}" in g.rule
        assert g.old_zone in g.record_a and g.new_zone in g.record_b and g.old_route in g.derived_note
        assert g.new_route not in g.derived_note and g.new_zone not in g.record_a
        current, historical = data.queries(g)
        assert (current.kind, current.reference, current.other) == ("current", g.new_route, g.old_route)
        assert (historical.kind, historical.reference, historical.other) == ("historical", g.old_zone, g.new_zone)
        assert current.candidates == (json.dumps({"answer": g.new_route}), json.dumps({"answer": g.old_route}))
        for q in (current, historical):
            assert q.reference not in q.question and q.other not in q.question


# --------------------------------------------------------------------------- grading

@pytest.mark.parametrize("text, stop, category, lenient", [
    ('{"answer": "R-45"}', "eos", "correct", True),
    ('  {"answer":  "r-45 "}\n', "eos", "correct", True),
    ('```json\n{"answer": "R-45"}\n```', "eos", "format_failure", True),  # the answer-field parser: no fence
    ('{"answer": "R-45"}', "cap", "capped", False),
    ('{"answer": "R-81"}', "eos", "other_value", False),
    ('{"answer": "R-99"}', "eos", "wrong_value", False),
    ('{"answer": "UNKNOWN"}', "eos", "unknown", False),
    ('The route is R-45, not R-81.', "eos", "format_failure", True),
    ('It used R-81, now R-45.', "eos", "format_failure", False),
    ('{"answer": R-45}', "eos", "format_failure", True),
    ('{"answer": "R-45", "zone": "X"}', "eos", "correct", True),  # extra fields permitted (rules 1-2)
    ('Route R-450.', "eos", "format_failure", False),
])
def test_grade(text, stop, category, lenient):
    g = grading.grade(text, stop, "R-45", "R-81")
    assert g.category == category and g.correct == (category == "correct") and g.lenient_correct == lenient
    assert (g.parse_reason == "ok") == (category != "format_failure")


def test_grade_records_parse_failure_kind():
    assert grading.grade('{"answer": "R-45"} and more', "eos", "R-45", "R-81").parse_reason == "text_outside"
    assert grading.grade('{"answer": null}', "eos", "R-45", "R-81").parse_reason == "non_string"
    assert grading.grade('```{"answer": "R-45"}```', "eos", "R-45", "R-81").parse_reason == "fenced"
    with pytest.raises(ValueError):
        grading.grade("x", "length", "R-45", "R-81")


# --------------------------------------------------------------------------- neutral interval

def _check_neutral(tokenizer, gs):
    for g in gs:
        neutral = history.neutral_interval(tokenizer, g)
        ref_ids, ref_spans = history.tokenize(tokenizer, history.build_prompt(g, chat=history.use_chat(tokenizer, None)))
        ids, spans = history.tokenize(tokenizer, history.build_prompt(g, neutral.text,
                                                                      chat=history.use_chat(tokenizer, None)))
        c, iv = ref_spans["C"], neutral.interval
        assert (iv.start, iv.end) == (c.start, c.end) and neutral.n_tokens == len(c)
        assert len(ids) == len(ref_ids)
        assert ids[: c.start] == ref_ids[: c.start] and ids[c.end:] == ref_ids[c.end:]
        assert ids[c.start: c.end] != ref_ids[c.start: c.end]
        assert c.start <= spans["C"].start and spans["C"].end <= c.end
        assert neutral.text and g.old_route not in neutral.text and g.old_zone not in neutral.text
        assert neutral.offset == 0  # the note's first tokens fit for these tokenizers


def test_neutral_interval_matches_c_token_count_tiny_tokenizer():
    _check_neutral(tiny_tokenizer(), data.generate_groups())


@pytest.mark.embedded
def test_neutral_interval_matches_c_token_count_embedded_tokenizer():
    model = kvprobe.load_model("smollm2-135m-instruct")
    _check_neutral(model.tokenizer, data.generate_groups())
    # The neutral note's first tokens, cut mid-sentence where the count ends.
    assert history.neutral_interval(model.tokenizer, data.generate_groups(1)[0]).text.startswith("The break room")


def test_neutral_interval_raises_a_clear_error(monkeypatch):
    monkeypatch.setattr(history.strings, "neutral_note", lambda: "short")
    with pytest.raises(history.NeutralMatchError, match="dn-000"):
        history.neutral_interval(tiny_tokenizer(), data.generate_groups(1)[0])


# --------------------------------------------------------------------------- conditions

@pytest.fixture(scope="module")
def llama() -> kvprobe.Model:
    return kvprobe.load_model("tiny-llama")


def _prepare(model, study, case, reuse=None):
    """What the protocol does for one case: prefill (reusing ``reuse``), then the study's ``setup``
    prepares and times every condition. Returns the history, the prepared conditions, the span
    facts of the rows and the costs."""
    h = model.prefill(study.prompt(model, case), reuse=reuse)
    run = CaseRun(case, h, dict(study.conditions(model, case, h)), study.questions(model, case, h))
    study.setup(model, run)
    return h, run.conditions, run.extra["facts"], run.extra["costs"]


def _hidden(prepared: kvprobe.Condition) -> set[int]:
    state = prepared.state
    return {int(state.key_pos[s]) for layer in state.hidden.values() for s in layer.nonzero().flatten().tolist()}


def test_conditions_hide_a_c_and_the_neutral_interval(llama):
    study = DerivedNoteStudy(n_groups=1)
    derived, neutral = study.cases()
    hd, cd, facts_d, costs = _prepare(llama, study, derived)
    hn, cn, facts_n, _ = _prepare(llama, study, neutral, reuse=hd)
    assert list(cd) == list(cn) == list(history.CONDITIONS) and set(costs) == set(cd)
    assert facts_d["span_C"] == facts_n["span_C"] and len(hd) == len(hn)
    assert torch.equal(hd.input_ids[: facts_d["span_C"][0]], hn.input_ids[: facts_n["span_C"][0]])
    for h, conds, facts in ((hd, cd, facts_d), (hn, cn, facts_n)):
        a, c = set(range(*facts["span_A"])), set(range(*facts["span_C"]))
        assert _hidden(conds["full"]) == set()
        assert _hidden(conds["mask-A"]) == a and _hidden(conds["mask-C"]) == c
        assert _hidden(conds["mask-AC"]) == a | c
        assert _hidden(conds["refresh"]) == a and _hidden(conds["full-recompute"]) == a
        assert conds["refresh"].state.info == {"recomputed_tokens": len(h) - max(a) - 1,
                                               "reused_tokens": max(a) + 1}
        assert conds["full-recompute"].state.info == {"recomputed_tokens": len(h), "reused_tokens": 0}
        assert h.check_digest()


def test_refresh_conditions_equal_an_uncached_reference_with_a_hidden(llama):
    """The study's refreshed conditions (states after A rebuilt, queries hiding A) against one plain forward
    over the same ids whose explicit 4-D mask hides A from every position after A (fp32)."""
    study = DerivedNoteStudy(n_groups=1)
    h, conds, facts, _ = _prepare(llama, study, study.cases()[0])
    hidden = positions_of([h.span("A")], len(h))
    for q in data.queries(study.cases()[0].group):
        suffix = suffix_ids(llama, h, q.question)
        ref = reference_logits(llama, h.input_ids.tolist(), suffix, hidden, hidden_from=h.span("A").end)
        got = question_logits(llama, h, q.question, [conds["refresh"], conds["full-recompute"],
                                                     conds["mask-A"]]).logits
        assert float((got[0] - ref).abs().max()) <= TOL
        assert float((got[1] - ref).abs().max()) <= TOL
        assert float((got[2] - ref).abs().max()) > 1e-3  # the mask alone keeps A's traces in later states
    assert h.check_digest()


# --------------------------------------------------------------------------- end to end

def test_run_resumes_byte_identically_and_summarizes(llama, tmp_path):
    study = DerivedNoteStudy(n_groups=2, max_new_tokens=4)
    out = tmp_path / "run"
    info = run_study(study, llama, out, progress=False)
    assert info.cases_run == 4 and info.rows_written == 4 * 2 * 6
    first = (out / "results.jsonl").read_bytes()
    rows = [json.loads(line) for line in first.decode().splitlines()]
    assert Counter((r["note"], r["query"], r["condition"]) for r in rows) == {
        (n, q, c): 2 for n in data.NOTES for q in data.QUERIES for c in history.CONDITIONS}
    assert not any("second" in k or "time" in k for k in rows[0])
    assert all(r["group"] == r["group_id"] for r in rows)
    costs = [json.loads(line) for line in (out / COSTS).read_text().splitlines()]
    assert len(costs) == 4 * 6 and all(c["seconds"] >= 0 for c in costs)
    assert "cost_log" not in json.loads((out / "config.json").read_text())["study_config"]
    # Drop the last two cases; the rerun redoes the second batch only and reproduces the file.
    (out / "results.jsonl").write_text("".join(first.decode().splitlines(keepends=True)[: 2 * 12]))
    assert run_study(DerivedNoteStudy(n_groups=2, max_new_tokens=4), llama, out, progress=False).cases_run == 2
    assert (out / "results.jsonl").read_bytes() == first
    summary = write_summary("derived-note", out)
    assert summary["groups"] == 2 and summary["rows"] == 48 and summary["seed"] == 20260916  # the registry entry's
    assert {c["key"] for c in summary["contrasts"]} >= {"maskC_vs_full_current", "refresh_vs_maskA_current"}
    report = (out / "report.md").read_text()
    assert "## Key contrasts" in report and "## Operation cost" in report and "| refresh |" in report


def test_bad_parameters_fail_before_a_model_loads():
    with pytest.raises(ValueError, match="notes"):
        DerivedNoteStudy(notes=("derived", "empty"))
    with pytest.raises(ValueError, match="notes"):
        DerivedNoteStudy(notes=())
    for field in ("n_groups", "max_new_tokens", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            DerivedNoteStudy(**{field: 0})


# --------------------------------------------------------------------------- summary math

def _row(group: str, note: str, query: str, condition: str, correct: int, margin: float) -> dict:
    return {"case_id": f"{group}/{note}", "group_id": group, "note": note, "query": query, "condition": condition,
            "correct": bool(correct), "lenient_correct": bool(correct), "margin": margin,
            "parse_reason": "ok" if correct else "not_json", "stop_reason": "eos",
            "category": "correct" if correct else "format_failure", "reference": "R-45", "other": "R-81",
            "output": '{"answer": "R-45"}' if correct else "no"}


def test_summary_math_on_hand_made_rows(tmp_path):
    g = ["g0", "g1", "g2", "g3"]
    table = {  # (note, query, condition): (correct per group, margin per group)
        ("derived", "current", "full"): ([0, 0, 1, 0], [-1.0, -2.0, 0.5, -1.0]),
        ("derived", "current", "mask-A"): ([0, 1, 1, 0], [-1.0, -1.0, 1.0, -1.0]),
        ("derived", "current", "mask-C"): ([1, 1, 1, 0], [1.0, 0.0, 1.5, -0.5]),
        ("derived", "current", "refresh"): ([1, 1, 1, 1], [0.0, 0.0, 2.0, 0.0]),
        ("neutral", "current", "full"): ([0, 0, 0, 0], [-1.0] * 4),
        ("neutral", "current", "mask-A"): ([0, 0, 0, 0], [-1.0] * 4),
        ("neutral", "current", "mask-C"): ([0, 0, 0, 1], [-0.5] * 4),
        ("neutral", "current", "refresh"): ([0, 0, 0, 0], [-0.5] * 4),
    }
    with open(tmp_path / "results.jsonl", "w") as f:
        for (note, query, cond), (correct, margin) in table.items():
            for i, group in enumerate(g):
                f.write(json.dumps(_row(group, note, query, cond, correct[i], margin[i])) + "\n")
    s = summarize(tmp_path, seed=3, draws=500)
    assert s["groups"] == 4 and s["rows"] == 32 and s["operation_cost"] is None
    cell = next(c for c in s["cells"] if (c["note"], c["query"], c["condition"]) == ("derived", "current", "mask-C"))
    assert (cell["n"], cell["correct"], cell["valid_json"], cell["parse_failures"]) == (4, 3, 3, {"not_json": 1})
    assert cell["margin"]["mean"] == pytest.approx(0.5)
    vs = cell["vs_full"]
    assert (vs["change"], vs["corrections"], vs["reversals"]) == (2, 2, 0)
    assert vs["pp"]["mean"] == pytest.approx(50.0) and 0.0 <= vs["pp"]["ci"][0] <= 50.0 <= vs["pp"]["ci"][1] <= 100.0
    assert vs["margin"]["mean"] == pytest.approx(np.mean([2.0, 2.0, 1.0, 0.5]))
    assert cell["vs_mask_A"]["change"] == 1
    contrasts = {c["key"]: c["stat"] for c in s["contrasts"]}
    assert contrasts["maskC_vs_full_current"]["mean"] == pytest.approx(50.0)
    assert contrasts["maskC_margin_beyond_neutral"]["mean"] == pytest.approx(1.375 - 0.5)
    assert contrasts["maskC_margin_derived_minus_neutral"]["mean"] == pytest.approx(np.mean([1.5, 0.5, 2.0, 0.0]))
    assert contrasts["refresh_vs_maskA_current"]["mean"] == pytest.approx(50.0)
    # A constant paired difference has a degenerate interval.
    assert contrasts["refresh_vs_maskA_margin_beyond_neutral"]["mean"] == pytest.approx(np.mean([1.0, 1.0, 1.0, 1.0]) - 0.5)
    assert contrasts["refresh_vs_maskA_margin_beyond_neutral"]["ci"] == pytest.approx([0.5, 0.5])
    assert contrasts["recompute_vs_maskA_current"] is None  # no full-recompute rows
    # The same seed gives the same intervals; the report lists every contrast.
    assert summarize(tmp_path, seed=3, draws=500) == s
    report = format_report(s, {"model": {"name": "hand"}, "study_config": {"seed": 1, "notes": ["derived"]}})
    assert "mask C vs full, current accuracy (derived note) | +50.0" in report and "n/a" in report
