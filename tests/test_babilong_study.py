"""The BABILong study on a tiny model: policies hide the right tokens, answers match the uncached reference,
runs resume and summarize."""

from __future__ import annotations

import json

import pytest
import torch

import kvprobe
from kvprobe.decoding import suffix_ids
from kvprobe.reference import reference_generate
from kvprobe.studies.babilong import samples
from kvprobe.studies.babilong.study import POLICIES, BabilongStudy
from kvprobe.studies.babilong.summary import write_summary
from kvprobe.studies.runner import run_study


@pytest.fixture(scope="module")
def llama():
    return kvprobe.load_model("tiny-llama")


@pytest.fixture(scope="module")
def study():
    return BabilongStudy(tasks=("qa2", "qa3"), lengths=(0, 300), n=2, max_new_tokens=6)


def _token_set(spans) -> set[int]:
    return {p for s in spans for p in s.positions()}


def _prepare(model, study, case):
    """The protocol's parts for one case: the prefilled history, its question text, the four policies."""
    history = model.prefill(study.prompt(model, case))
    (question,) = study.questions(model, case, history)
    return history, question.text, study.conditions(model, case, history)


def test_policies_hide_the_rule_facts_and_neutral_hides_only_filler(llama, study):
    case = next(c for c in study.cases() if c.sample.task == "qa3" and c.sample.target_tokens == 300)
    history, question, conditions = _prepare(llama, study, case)
    assert list(conditions) == list(POLICIES)
    s = case.sample
    fact_tokens = {i: _token_set([history.span("context", chars=(a, b))]) for i, a, b in s.fact_spans}
    for rule in ("naive", "dependency"):
        hidden = _token_set(conditions[rule].spans)
        assert hidden == set().union(*(fact_tokens[i] for i in samples.hidden_facts(s, rule)))
    assert _token_set(conditions["dependency"].spans) <= _token_set(conditions["naive"].spans)
    neutral = _token_set(conditions["neutral"].spans)
    assert neutral and not neutral & set().union(*fact_tokens.values())


def test_bad_parameters_fail_before_a_model_loads():
    with pytest.raises(ValueError, match="tasks"):
        BabilongStudy(tasks=("qa1",))
    with pytest.raises(ValueError, match="lengths"):
        BabilongStudy(lengths=(-5,))
    for field in ("n", "max_new_tokens", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            BabilongStudy(**{field: 0})


def test_masked_answer_equals_the_uncached_reference(llama, study):
    case = next(c for c in study.cases() if c.sample.task == "qa2" and c.sample.target_tokens == 300)
    history, question, conditions = _prepare(llama, study, case)
    mask = conditions["dependency"]
    hidden = torch.zeros(len(history), dtype=torch.bool)
    for span in mask.spans:
        hidden[span.start : span.end] = True
    want = reference_generate(llama, history.input_ids.tolist(), suffix_ids(llama, history, question), hidden,
                              max_new_tokens=6)
    got = llama.generate(history, question, access=mask, max_new_tokens=6)
    assert list(got.token_ids) == want


def test_run_resumes_and_summarizes(llama, study, tmp_path):
    out = tmp_path / "run"
    run_study(study, llama, out, progress=False)
    first = (out / "results.jsonl").read_bytes()
    rows = [json.loads(line) for line in first.decode().splitlines()]
    assert len(rows) == len(study.cases()) * len(POLICIES)
    assert {r["condition"] for r in rows} == set(POLICIES)
    assert {r["query"] for r in rows} == {"question"} and all(r["case_id"] and r["group"] for r in rows)
    lines = first.decode().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines[: len(POLICIES) * 3]))  # as if killed after 3 cases
    run_study(study, llama, out, progress=False)
    assert (out / "results.jsonl").read_bytes() == first
    summary = write_summary(out)
    cells = {(c["task"], c["length"], c["policy"]): c for c in summary["cells"]}
    assert cells[("qa2", 300, "naive")]["n"] == 2 and "official_change_vs_full" in cells[("qa2", 300, "naive")]
    assert "| qa3 | 300 | dependency |" in (out / "report.md").read_text()
