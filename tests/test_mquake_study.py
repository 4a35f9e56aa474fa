"""The MQuAKE study on tiny models: every policy per question, hybrids leave compaction out, resume, summary."""

from __future__ import annotations

import json

import pytest

import kvprobe
from kvprobe.studies.mquake.history import source_segments
from kvprobe.studies.mquake.study import POLICIES, MQuAKEStudy
from kvprobe.studies.mquake.summary import write_summary
from kvprobe.studies.runner import run_study


@pytest.fixture(scope="module")
def study():
    return MQuAKEStudy(hops=(2, 4), n_per_hop=1, max_new_tokens=4)


def test_policies_and_masked_spans(study):
    llama = kvprobe.load_model("tiny-llama")
    case = study.cases()[0]
    history, conditions = study.prepare(llama, case)
    assert list(conditions) == list(POLICIES)
    source = conditions["source-mask"].state
    hidden = {p for layer_hidden in source.hidden.values() for p in layer_hidden.nonzero().flatten().tolist()}
    want = {p for name in source_segments(case.case) for p in history.span(name).positions()}
    assert hidden == want
    assert conditions["compact"].state.length == len(history) - len(want)


def test_hybrid_leaves_compaction_out(study):
    hybrid = kvprobe.load_model("tiny-qwen3.5")
    with pytest.warns(UserWarning, match="compact"):
        _, conditions = study.prepare(hybrid, study.cases()[1])
    assert "compact" not in conditions and "rebuild" in conditions


def test_run_resumes_and_summarizes(study, tmp_path):
    llama = kvprobe.load_model("tiny-llama")
    out = tmp_path / "run"
    run_study(study, llama, out, progress=False)
    first = (out / "results.jsonl").read_bytes()
    rows = [json.loads(line) for line in first.decode().splitlines()]
    assert len(rows) == len(study.cases()) * 5 * len(POLICIES)
    (out / "results.jsonl").write_text("".join(first.decode().splitlines(keepends=True)[: 5 * len(POLICIES)]))
    run_study(study, llama, out, progress=False)
    assert (out / "results.jsonl").read_bytes() == first
    summary = write_summary(out)
    kinds = {(c["kind"], c["policy"]) for c in summary["cells"]}
    assert ("historical", "rebuild") in kinds and ("current", "compact") in kinds
    assert "Offline routing" in (out / "report.md").read_text()
