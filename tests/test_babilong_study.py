"""The BABILong study on a tiny model: conditions hide the right tokens, answers match the uncached reference,
runs resume and summarize."""

from __future__ import annotations

import json

import pytest
import torch

import kvprobe
from kvprobe.decoding import suffix_ids
from kvprobe.reference import reference_generate
from kvprobe.studies.babilong import samples
from kvprobe.studies.babilong.study import CONDITIONS, BabilongStudy
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.runner import run_study


@pytest.fixture(scope="module")
def llama():
    return kvprobe.load_model("tiny-llama")


@pytest.fixture(scope="module")
def study():
    return BabilongStudy(tasks=("qa2", "qa3"), lengths=(0, 300), n=2, max_new_tokens=6)


def _token_set(spans) -> set[int]:
    return {p for s in spans for p in s.positions()}


def _prepare(model, study, case):
    """The protocol's parts for one case: the prefilled history, its question text, the conditions."""
    history = model.prefill(study.prompt(model, case))
    (question,) = study.questions(model, case, history)
    return history, question.text, study.conditions(model, case, history)


def test_conditions_hide_the_rule_facts_and_neutral_hides_only_filler(llama, study):
    case = next(c for c in study.cases() if c.sample.task == "qa3" and c.sample.target_tokens == 300)
    history, question, conditions = _prepare(llama, study, case)
    assert list(conditions) == list(CONDITIONS)
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
    assert len(rows) == len(study.cases()) * len(CONDITIONS)
    assert {r["condition"] for r in rows} == set(CONDITIONS)
    assert {r["query"] for r in rows} == {"question"} and all(r["case_id"] and r["group"] for r in rows)
    lines = first.decode().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines[: len(CONDITIONS) * 3]))  # as if killed after 3 cases
    run_study(study, llama, out, progress=False)
    assert (out / "results.jsonl").read_bytes() == first
    summary = write_summary("babilong", out)
    cells = {(c["task"], c["length"], c["policy"]): c for c in summary["cells"]}
    assert cells[("qa2", 300, "naive")]["n"] == 2 and "official_change_vs_full" in cells[("qa2", 300, "naive")]
    assert "| qa3 | 300 | dependency |" in (out / "report.md").read_text()


# --------------------------------------------------------------------------- the published samples

RELEASED = __import__("pathlib").Path(__file__).parent / "fixtures" / "hf" / "RMT-team" / "babilong"  # as published


def test_released_samples_locate_every_fact_and_match_the_babi_release():
    from kvprobe.studies.babilong.data import load_released

    got = load_released(RELEASED, "qa3", "1k")
    built = samples.build_samples("qa3", (400,), 10)
    # records 0 and 1 are the first official questions; record 2 is another question, found by search
    assert [s.sample_index for s in got] == [built[0].sample_index, built[1].sample_index, built[7].sample_index]
    for s, b in zip(got, [built[0], built[1], built[7]]):
        assert (s.story_index, s.question_index, s.question, s.answer) == (b.story_index, b.question_index,
                                                                           b.question, b.answer)
        assert s.facts == b.facts and s.fact_spans == b.fact_spans and s.target_tokens == 1000
        assert all(s.context[a:e] == s.facts[i].text for i, a, e in s.fact_spans)
        # the book text is everything between facts, so the neutral mask never touches a fact
        covered = sorted([(a, e) for _, a, e in s.fact_spans] + list(s.filler_spans))
        assert all(e1 <= a2 for (_, e1), (a2, _) in zip(covered, covered[1:]))
        assert "".join(s.context[a:e] for a, e in covered).replace(" ", "") == s.context.replace(" ", "")


@pytest.mark.parametrize("content, message", [
    ('{"input": "x", "question": "Where is the milk?"}\n', r"qa3.jsonl:1: missing field\(s\) target"),
    ('{"input": "x", "question": "Where is', r"qa3.jsonl:1: not JSON"),
    ('[{"input": 3, "question": "q", "target": "t"}]', r"record #0: field 'input' must be a string"),
    ('{"input": "no facts here", "question": "Where was the football before the kitchen?", "target": "garden"}\n',
     r"qa3.jsonl:1: no qa3 test question"),
])
def test_released_loader_refuses_malformed_files(tmp_path, content, message):
    from kvprobe.studies.babilong.data import BabilongFormatError, load_released

    (tmp_path / "8k").mkdir()
    (tmp_path / "8k" / "qa3.jsonl").write_text(content)
    with pytest.raises(BabilongFormatError, match=message):
        load_released(tmp_path, "qa3", "8k")
    with pytest.raises(ValueError, match="source: .*qa3.jsonl"):  # the study fails before a model loads
        BabilongStudy(tasks=("qa3",), source=str(tmp_path), released_lengths=("8k",))
    with pytest.raises(ValueError, match=r"source: .*no 32k/qa3.jsonl"):
        BabilongStudy(tasks=("qa3",), source=str(tmp_path), released_lengths=("32k",))


def test_released_run_with_query_aware_conditions(llama, tmp_path):
    """All seven conditions on the published-format fixture: Quest/FINCH/RefreshKV at the fixed capacity."""
    study = BabilongStudy(tasks=("qa3",), source=str(RELEASED), released_lengths=("1k",), n=2, capacity=64,
                          max_new_tokens=4)
    run_study(study, llama, tmp_path, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * len(CONDITIONS) and {r["length"] for r in rows} == {1000}
    assert {r["condition"]: r["capacity"] for r in rows} == {p: 64 if p in ("quest", "finch", "refreshkv") else None
                                                             for p in CONDITIONS}
    write_summary("babilong", tmp_path)
    report = (tmp_path / "report.md").read_text()
    assert "published samples at 1k" in report and "| qa3 | 1000 | finch |" in report


def test_a_history_beyond_the_model_positions_is_refused(llama):
    study = BabilongStudy(tasks=("qa2",), lengths=(2100,), n=1, condition_set=("full",), max_new_tokens=4)
    with pytest.raises(ValueError, match=r"lengths: qa2-q\d+-2100: \d+ history tokens .* exceed tiny-llama's 2048"):
        study.run_cases(llama, study.cases())
