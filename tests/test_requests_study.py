"""The repeated-request workload: questions, condition table, exact encodes, invariants, detectors, a tiny run."""

from __future__ import annotations

import itertools
import json
from collections import Counter

import pytest
import torch

import kvprobe
from kvprobe.interventions import CONDITIONS, TextRecompute
from kvprobe import decoding
from kvprobe.decoding import question_logits
from kvprobe.studies.datasets.recognition.records import RECORD_VARIANTS
from kvprobe.studies.requests import conditions as cond
from kvprobe.studies.requests.detector import (
    Detection,
    FixedDetector,
    JsonDetector,
    make_detector,
)
from kvprobe.studies.requests.sequence import Settings, condition_order, run_case, run_condition
from kvprobe.studies.requests.serving import edge_rows, encode, same_rows, seal, serve
from kvprobe.studies.requests.study import TIMINGS, RequestsStudy, read_timings
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.requests.data import ORDER, workload_cases
from kvprobe.studies.common.runner import read_rows, run_study


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model() -> kvprobe.Model:
    return kvprobe.load_model("tiny-llama")


@pytest.fixture(scope="module")
def cases():
    return workload_cases(n_groups=6, lengths=(0, 3))


def _case(cases, variant: str, lines: int = 0):
    return next(c for c in cases if c.record.case.variant == variant and c.n_lines == lines)


# --------------------------------------------------------------------------- workload


def test_thirty_histories_cycle_the_variants_over_the_families():
    cases = workload_cases(lengths=(0,))
    assert len(cases) == 30 and len({c.group for c in cases}) == 30
    assert [c.record.case.variant for c in cases[:6]] == list(RECORD_VARIANTS)
    pairs = Counter((c.record.case.family, c.record.case.variant) for c in cases)
    assert len(pairs) == 30 and set(pairs.values()) == {1}
    assert sum(c.label for c in cases) == 15


def test_ten_distinct_questions_in_the_paper_order(cases):
    assert "".join(k[0].upper() for k in ORDER) == "CHUCCHUCHU"
    for case in cases:
        qs = case.questions()
        assert [q.kind for q in qs] == list(ORDER) and [q.index for q in qs] == list(range(10))
        assert len({q.text for q in qs}) == 10
        rec = case.record.case
        current = rec.new_value if case.label else rec.old_value
        expected = {"current": current, "historical": rec.old_value, "unrelated": case.record.other_value}
        assert all(q.reference == expected[q.kind] for q in qs)
        assert all(q.prompt_text.startswith("Question: ") for q in qs)


def test_background_lines_are_nested_neutral_and_seeded():
    long = {c.group: c for c in workload_cases(n_groups=6, lengths=(300,))}
    short = workload_cases(n_groups=6, lengths=(100, 0))
    for c in short:
        assert c.lines == long[c.group].lines[: c.n_lines]
        assert c.n_lines == len(c.lines)
    assert long[short[0].group].lines != long[short[-1].group].lines  # each history has its own lines
    assert workload_cases(n_groups=1, lengths=(5,))[0].lines == workload_cases(n_groups=1, lengths=(5,))[0].lines
    for c in long.values():
        text = "\n".join(c.lines).casefold()
        assert not any(v.casefold() in text for v in c.values())


def test_stages_of_the_history(model, cases):
    case = _case(cases, "replacement", 3)
    resident = case.prompt(True, "resident").render(model.tokenizer).history_text
    updated = case.prompt(True, "updated").render(model.tokenizer)
    edited = case.prompt(True, "edited").render(model.tokenizer).history_text
    assert updated.history_text.startswith(resident)  # B arrives after the resident history
    assert case.record.case.b_text in updated.history_text and case.record.case.b_text not in resident
    assert case.record.case.a_text not in edited and case.record.case.b_text in edited
    assert list(updated.segments) == ["header", "time1", "background", "other", "time2"]
    history = model.prefill(case.prompt(True))
    assert history.token_text(case.a_span(history)).strip() == case.record.case.a_text


# --------------------------------------------------------------------------- conditions


def _expected(condition: str, kind: str, fired: bool, label: int, oracle: str) -> str:
    """Brute-force statement of the five conditions (independent of studies.requests.conditions)."""
    if condition == "keep-all":
        return "full"
    if condition == "detector-mask":
        return "mask" if fired else "full"
    if condition == "query-aware-mask":
        return "mask" if fired and kind == "current" else "full"
    if condition == "detector-recompute":
        return "recompute" if fired else "full"
    if condition == "oracle-recompute":
        return "recompute" if (label == 1 or oracle == "always") else "full"
    raise AssertionError(condition)


def test_condition_table_brute_force():
    for condition, kind, fired, label, oracle in itertools.product(
            cond.CONDITIONS, ("current", "historical", "unrelated"), (False, True), (0, 1), cond.ORACLE_RULES):
        assert cond.operation(condition, kind, fired, label, oracle) == _expected(condition, kind, fired, label, oracle)
    read = {cond.operation(*args) for args in itertools.product(
        cond.CONDITIONS, ("current", "historical", "unrelated"), (False, True), (0, 1), cond.ORACLE_RULES)}
    assert read == {"full", "mask", "recompute"} <= set(CONDITIONS)  # named as the registry of conditions names them
    assert cond.uses_detector("detector-recompute") and not cond.uses_detector("oracle-recompute")
    with pytest.raises(ValueError):
        cond.check_condition_set(("detector-mask",))
    with pytest.raises(ValueError):
        RequestsStudy(condition_set=("keep-all", "latest-record"))


def test_condition_order_is_seeded_and_shuffled():
    orders = {tuple(condition_order(f"case-{i}", cond.CONDITIONS, seed=0)) for i in range(20)}
    assert len(orders) > 1 and all(sorted(o) == sorted(cond.CONDITIONS) for o in orders)
    assert condition_order("case-1", cond.CONDITIONS, 0) == condition_order("case-1", cond.CONDITIONS, 0)


class CountingDetector:
    """A replaceable detector with a fixed verdict that counts its calls."""

    def __init__(self, fires: bool):
        self.fires, self.calls, self.name = fires, 0, f"counting-{fires}"

    def __call__(self, model, pair):
        self.calls += 1
        assert pair.a_text and pair.b_text
        return Detection(self.fires, "fixed")


@pytest.mark.parametrize("fires,variant", [(False, "replacement"), (True, "replacement"), (True, "confirmation")])
def test_fake_detectors_drive_every_question(model, cases, fires, variant):
    case = _case(cases, variant)
    detector = CountingDetector(fires)
    rows, timings = run_case(model, case, detector, Settings(max_new_tokens=2))
    assert detector.calls == len(cond.DETECTOR_CONDITIONS)  # serial, once per detector condition
    assert len(rows) == 10 * len(cond.CONDITIONS) and len(timings) == len(cond.CONDITIONS)
    for r in rows:
        assert r["operation"] == _expected(r["policy"], r["query"], fires, case.label, "label")
        assert r["edit"] == ("reencode" if r["operation"] == "recompute" else "append")
    for t in timings:
        assert t["fired"] == (fires and cond.uses_detector(t["policy"]))
        assert t["edit"] == ("reencode" if _expected(t["policy"], "historical", fires, case.label, "label")
                             == "recompute" else "append")
        if not cond.uses_detector(t["policy"]):
            assert t["detect_ms"] == 0 and t["detector"] is None
    table = {(r["policy"], r["query_index"]): r["output"] for r in rows}
    for i in range(10):
        keep = table[("keep-all", i)]
        if not fires:  # a detector that never fires leaves every detector condition at keep-all
            assert all(table[(c, i)] == keep for c in cond.DETECTOR_CONDITIONS)
            continue
        if case.label:  # re-encoding on detection is the oracle's re-encoding of a replacement
            assert table[("detector-recompute", i)] == table[("oracle-recompute", i)]
        else:  # the oracle appends a non-replacement, as keep-all does
            assert table[("oracle-recompute", i)] == keep
        if ORDER[i] != "current":  # routed-away questions keep full access
            assert table[("query-aware-mask", i)] == keep
        else:
            assert table[("query-aware-mask", i)] == table[("detector-mask", i)]


def test_json_detector_matches_the_detection_study(model, cases):
    from kvprobe.studies.common.detectors.text import run_text_detectors

    for name in ("asserted-value", "direct"):
        detector = JsonDetector(name, max_new_tokens=8)
        for case in cases[:2]:
            got = detector(model, case.pair)
            ref = run_text_detectors(model, [case.pair], [name], max_new_tokens=8)[0][name]
            assert (got.info["output"], got.decision, got.info["parse"]) == \
                (ref["output"], ref["decision"], ref["parse"])
            assert got.fired == (ref["decision"] == "replacement")


def test_bad_parameters_fail_before_a_model_loads():
    for field in ("n_groups", "max_new_tokens", "detector_max_new_tokens", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            RequestsStudy(**{field: 0})
    with pytest.raises(ValueError, match="lengths"):
        RequestsStudy(lengths=(0, -1))
    for field, value in (("oracle", "sometimes"), ("background", "wiki"), ("background_at", "end"),
                         ("condition_set", ("keep-all", "keep-all"))):
        with pytest.raises(ValueError, match=field):
            RequestsStudy(**{field: value})
    assert RequestsStudy(n_groups=None).n_groups == 30  # None: all thirty histories


def test_named_detectors():
    assert make_detector("always")(None, None).fired and not make_detector("never")(None, None).fired
    assert isinstance(make_detector("asserted-value"), JsonDetector)
    with pytest.raises(ValueError):
        RequestsStudy(detector="nope")
    assert RequestsStudy(detector=FixedDetector(True), n_groups=1, lengths=(0,)).config()["detector"] == "always"


# --------------------------------------------------------------------------- exactness and invariants


def _last_logits(model, history, question, access=None):
    out = question_logits(model, history, question, [access or kvprobe.Full()], logits_to_keep=1)
    return out.logits[0, -1].float()


def test_recompute_equals_a_fresh_prefill_of_the_edited_text(model, cases):
    case = _case(cases, "role_swap", 3)
    question = case.questions()[1].prompt_text
    resident = seal(encode(model, case.prompt(True, "resident")).history)
    fresh = model.prefill(case.prompt(True, "edited"))
    reference = _last_logits(model, fresh, question)
    for reuse in (None, resident):  # full re-encode, and reusing the rows before record A
        enc = encode(model, case.prompt(True, "edited"), reuse=reuse)
        assert torch.equal(enc.history.input_ids, fresh.input_ids)
        assert (enc.reused_tokens > 0) == (reuse is not None)
        for (k, v), (fk, fv) in zip(enc.history.kv, fresh.kv):
            torch.testing.assert_close(k, fk, atol=1e-5, rtol=0)
            torch.testing.assert_close(v, fv, atol=1e-5, rtol=0)
        assert float((_last_logits(model, enc.history, question) - reference).abs().max()) <= 1e-5
    # The library's own text recompute of the updated history deletes the same text.
    updated = model.prefill(case.prompt(True, "updated"))
    recomputed = _last_logits(model, updated, question, TextRecompute(["time1"]))
    assert float((recomputed - reference).abs().max()) <= 1e-5
    # Appending B to the resident cache equals prefilling the updated history.
    appended = encode(model, case.prompt(True, "updated"), reuse=resident)
    assert appended.reused_tokens >= len(resident) - 1
    assert appended.computed_tokens == len(appended.history) - appended.reused_tokens
    assert float((_last_logits(model, appended.history, question) - _last_logits(model, updated, question))
                 .abs().max()) <= 1e-5


def test_serve_gives_the_tokens_of_decoding_answer(model, cases):
    case = _case(cases, "explicit_rejection")
    history = model.prefill(case.prompt(True))
    mask = kvprobe.Mask(case.a_span(history), name="mask")
    for access in (kvprobe.Full(), mask):
        for q in case.questions()[:2]:
            served = serve(model, history, q.prompt_text, access, 6)
            ref = decoding.answer(model, [(history, kvprobe.Request(q.prompt_text, access))], max_new_tokens=6)[0]
            assert served.generation.token_ids == ref.generation.token_ids
            assert served.generation.text == ref.generation.text
            assert served.generation.stop_reason == ref.generation.stop_reason
            assert min(served.tokenize_s, served.copy_s, served.prefill_s, served.decode_s) >= 0
    assert history.check_digest()


def test_masked_conditions_leave_the_cache_edges_unchanged(model, cases):
    case = _case(cases, "replacement", 3)
    settings = Settings(max_new_tokens=2)
    resident = seal(encode(model, case.prompt(True, "resident")).history)
    keep = run_condition(model, case, resident, "keep-all", FixedDetector(True), settings)
    masked = run_condition(model, case, resident, "detector-mask", FixedDetector(True), settings)
    assert {op for _, op, _ in masked.answers} == {"mask"}
    assert same_rows(edge_rows(keep.encoded.history), edge_rows(masked.encoded.history))
    assert resident.check_digest()
    edges = edge_rows(masked.encoded.history)
    masked.encoded.history.kv[0][1][:, :, -1] += 1.0  # a changed last V row is caught
    assert not same_rows(edges, edge_rows(masked.encoded.history))


# --------------------------------------------------------------------------- run directory


def test_run_summary_and_resume(model, tmp_path):
    study = RequestsStudy(n_groups=1, lengths=(0, 2), max_new_tokens=3, detector_max_new_tokens=4)
    info = run_study(study, model, tmp_path, progress=False)
    assert info.cases_run == 2 and info.rows_written == 2 * 5 * 10
    rows = list(read_rows(tmp_path))
    assert not any(k.endswith("_ms") for r in rows for k in r)  # rows carry no timings
    assert all("policy" not in r for r in rows)  # the sequence's policy key is the protocol's condition column
    assert {r["condition"] for r in rows} == set(cond.CONDITIONS)
    timings = read_timings(tmp_path)
    assert len(timings) == 2 * 5 and {t["policy"] for t in timings} == set(cond.CONDITIONS)
    for t in timings:
        parts = t["detect_ms"] + t["update_tokenize_ms"] + t["edit_ms"] + t["mask_ms"] + t["queries_ms"]
        assert abs(t["resident_ms"] - parts) < 0.01 and t["cold_ms"] > t["resident_ms"] > 0
        assert len(t["queries"]) == 10 and t["invariants"] == "ok"
        assert t["cold_ms"] - t["resident_ms"] == pytest.approx(t["history_tokenize_ms"] + t["history_prefill_ms"],
                                                                abs=0.01)
    summary = write_summary("requests", tmp_path)
    assert (tmp_path / "summary.json").exists() and (tmp_path / "report.md").exists()
    report = (tmp_path / "report.md").read_text()
    assert "## Cost over ten requests" in report and "torch" in report and "CPUs" in report
    entry = summary["lengths"][0]
    assert set(entry["policies"]) == set(cond.CONDITIONS)
    assert "resident_ms_overhead" in entry["policies"]["detector-mask"]["time"]
    assert entry["policies"]["keep-all"]["accuracy"]["current"]["n"] == 4
    # Resume: nothing to do; then a lost case is redone, giving the same bytes.
    original = (tmp_path / "results.jsonl").read_bytes()
    again = run_study(RequestsStudy(n_groups=1, lengths=(0, 2), max_new_tokens=3, detector_max_new_tokens=4),
                      model, tmp_path, progress=False)
    assert again.cases_run == 0 and again.cases_skipped == 2
    lines = original.decode().splitlines(keepends=True)
    (tmp_path / "results.jsonl").write_text("".join(lines[:50]))
    redo = run_study(RequestsStudy(n_groups=1, lengths=(0, 2), max_new_tokens=3, detector_max_new_tokens=4),
                     model, tmp_path, progress=False)
    assert redo.cases_run == 1 and redo.cases_skipped == 1
    assert (tmp_path / "results.jsonl").read_bytes() == original
    raw = [json.loads(x) for x in (tmp_path / TIMINGS).read_text().splitlines()]
    assert len(raw) == 3 * 5 and len(read_timings(tmp_path)) == 2 * 5  # the redone case's newest lines count
