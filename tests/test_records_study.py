"""The record-history study: histories, the paper's user message, condition table, shared answers, a tiny run."""

from __future__ import annotations

import json

import pytest

import kvprobe
from kvprobe.studies.common.answers import first_value, grade
from kvprobe.studies.common.detectors import strings
from kvprobe.studies.common.detectors.readout_scores import load_readout_scores
from kvprobe.studies.datasets.record_histories import question_text, record_histories
from kvprobe.studies.records.study import ALL_CONDITIONS, APPLIED, CONDITIONS, RecordsStudy, condition_operation
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.runner import read_rows, run_study


@pytest.fixture(scope="module")
def histories():
    return record_histories()


def test_three_hundred_histories_with_a_distinct_other_record(histories):
    assert len(histories) == 300
    for h in histories:
        c = h.case
        assert h.other_value not in (c.old_value, c.new_value)
        assert h.other_entity != c.entity and h.other_entity not in c.b_text
        kinds = [k for k, _, _ in h.queries()]
        assert kinds == ["current", "historical", "unrelated"]
    by_variant = {h.case.variant: h for h in histories[:6]}
    assert by_variant["replacement"].queries()[0][2] == by_variant["replacement"].case.new_value
    assert by_variant["role_confirmation"].queries()[0][2] == by_variant["role_confirmation"].case.old_value
    assert by_variant["other_entity"].queries()[0][2] == by_variant["other_entity"].case.old_value
    assert not by_variant["other_entity"].same_slot and by_variant["confirmation"].same_slot


def test_user_message_follows_the_paper(histories):
    model = kvprobe.load_model("tiny-llama")
    h = histories[0]
    rendered = h.prompt(chat=True).render(model.tokenizer)
    question = h.queries()[0][1]
    text = rendered.history_text + rendered.suffix(question_text(question))
    user = (f"Ordered records:\nTime 1: {h.case.a_text}\nOther record: {h.other_text}\nTime 2: {h.case.b_text}"
            f"\n\nQuestion: {question}")
    messages = [{"role": "system", "content": strings.RECORDS_SYSTEM}, {"role": "user", "content": user}]
    assert text == model.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    history = model.prefill(h.prompt(chat=True))
    assert history.token_text(h.a_span(history)).strip() == h.case.a_text


def test_condition_table():
    assert condition_operation("keep-all", "current", 1, True, True) == "full"
    assert condition_operation("detector-mask", "historical", 0, True, True) == "mask"
    assert condition_operation("detector-recompute", "current", 1, False, True) == "full"
    assert condition_operation("oracle-recompute", "unrelated", 1, False, True) == "recompute"
    assert condition_operation("latest-record", "current", 0, False, True) == "mask"  # confirmations included
    assert condition_operation("latest-record", "current", 0, False, False) == "full"
    assert condition_operation("query-aware-mask", "current", 0, True, True) == "mask"
    assert condition_operation("query-aware-mask", "historical", 1, True, True) == "full"
    assert condition_operation("always-mask", "unrelated", 0, False, False) == "mask"
    # Every policy applies one of the study's applied conditions, the protocol's conditions.
    applied = {condition_operation(c, q, label, detected, same) for c in ALL_CONDITIONS
               for q in ("current", "historical", "unrelated") for label in (0, 1)
               for detected in (False, True) for same in (False, True)}
    assert applied == set(APPLIED)


def test_bad_parameters_fail_before_a_model_loads():
    for field in ("n_groups", "max_new_tokens", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            RecordsStudy(**{field: 0})
    with pytest.raises(ValueError, match="split"):
        RecordsStudy(split="validation")
    with pytest.raises(ValueError, match="detector"):
        RecordsStudy(detector="yes-no")  # a score, not a JSON decision


def test_grading():
    assert grade('{"answer": " miami "}', "Miami", ["Tunis", "Miami"])["correct"]
    g = grade("The office is in Miami, no longer Tunis.", "Miami", ["Tunis", "Miami", "Zagreb"])
    assert not g["correct"] and g["parse"] == "not_json" and g["contains"] and g["lenient"]
    assert first_value("It was Tunis, now Miami", ["Miami", "Tunis"]) == "Tunis"
    assert first_value("nothing here", ["Miami"]) is None


def test_tiny_run_shares_answers_and_keeps_the_history(tmp_path):
    model = kvprobe.load_model("tiny-llama")
    study = RecordsStudy(n_groups=1, max_new_tokens=4)
    run_study(study, model, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    assert len(rows) == 6 * 3 * len(CONDITIONS)
    by = {(r["case_id"], r["query"], r["condition"]): r for r in rows}
    for (case, query, _), r in by.items():
        same = by[(case, query, "keep-all")] if r["operation"] == "full" else by[(case, query, "always-mask")] \
            if r["operation"] == "mask" else None
        if same is not None:
            assert r["output"] == same["output"]  # equivalent conditions share one generated answer
    masked = [r for r in rows if r["condition"] == "oracle-mask" and r["operation"] == "mask"]
    assert {r["variant"] for r in masked} == {"replacement", "role_swap", "explicit_rejection"}
    summary = write_summary("records", tmp_path)
    assert summary["histories"] == 6 and "coverage" in summary
    assert (tmp_path / "coverage.png").exists()
    json.loads((tmp_path / "summary.json").read_text())
    # A readout's per-case scores (kvprobe readout's scores.json) rank the histories too.
    ids = sorted({r["case_id"] for r in rows})
    scores = {"case_id": ids + ["rec-other"], "split": ["test"] * len(ids) + ["dev"],
              "scores": {"joint K/V probe": [float(i) for i in range(len(ids))] + [0.0]}}
    (tmp_path / "scores.json").write_text(json.dumps(scores))
    ranked = write_summary("records", tmp_path, readout_scores=tmp_path / "scores.json")
    assert set(ranked["coverage"]["lenient"]) == {"detector", "oracle label", "joint K/V probe"}
    with pytest.raises(ValueError, match="no readout 'nope'"):
        load_readout_scores(tmp_path, ["nope"])
    # Resuming reruns nothing and leaves the rows unchanged.
    before = (tmp_path / "results.jsonl").read_bytes()
    info = run_study(study, model, tmp_path, progress=False)
    assert info.cases_run == 0 and (tmp_path / "results.jsonl").read_bytes() == before


def test_mask_hides_record_a_from_the_answer(histories):
    """Under the mask the answer equals a fresh prefill's answer with an explicit mask hiding A (fp32)."""
    from kvprobe.reference import reference_generate

    model = kvprobe.load_model("tiny-llama")
    h = histories[0]
    history = model.prefill(h.prompt(chat=True))
    span = h.a_span(history)
    question = question_text(h.queries()[0][1])
    got = model.generate(history, question, access=kvprobe.Mask(span), max_new_tokens=6)
    suffix = model.tokenizer(history.rendered.suffix(question), add_special_tokens=False)["input_ids"]
    import torch
    hidden = torch.zeros(len(history), dtype=torch.bool)
    hidden[span.start:span.end] = True
    want = reference_generate(model, history.input_ids.tolist(), suffix, hidden=hidden, max_new_tokens=6)
    assert list(got.token_ids) == want
    full = model.generate(history, question, max_new_tokens=6)
    assert history.check_digest() and full.token_ids  # the shared cache is untouched
