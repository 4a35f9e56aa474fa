"""The MQuAKE study on tiny models: every policy per question, hybrids leave compaction out, resume, summary."""

from __future__ import annotations

import json

import pytest

import kvprobe
from kvprobe.studies.conditions import supported
from kvprobe.studies.mquake.history import source_segments
from kvprobe.studies.mquake.study import POLICIES, MQuAKEStudy
from kvprobe.studies.mquake.summary import write_summary
from kvprobe.studies.protocol import prepared
from kvprobe.studies.runner import run_study


@pytest.fixture(scope="module")
def study():
    return MQuAKEStudy(hops=(2, 4), n_per_hop=1, max_new_tokens=4)


def _prepare(model, study, case):
    """What the protocol does for one case: prefill, keep the supported policies, prepare each once."""
    history = model.prefill(study.prompt(model, case))
    candidates = supported(study.name, history, study.conditions(model, case, history))
    return history, {name: prepared(model, history, c) for name, c in candidates.items()}


def test_policies_and_masked_spans(study):
    llama = kvprobe.load_model("tiny-llama")
    case = study.cases()[0]
    history, conditions = _prepare(llama, study, case)
    assert list(conditions) == list(POLICIES)
    source = conditions["source-mask"].state
    hidden = {p for layer_hidden in source.hidden.values() for p in layer_hidden.nonzero().flatten().tolist()}
    want = {p for name in source_segments(case.case) for p in history.span(name).positions()}
    assert hidden == want
    assert conditions["compact"].state.length == len(history) - len(want)


def test_hybrid_leaves_compaction_out(study):
    hybrid = kvprobe.load_model("tiny-qwen3.5")
    with pytest.warns(UserWarning, match="compact"):
        _, conditions = _prepare(hybrid, study, study.cases()[1])
    assert "compact" not in conditions and "rebuild" in conditions


def test_bad_parameters_fail_before_a_model_loads():
    with pytest.raises(ValueError, match="hops"):
        MQuAKEStudy(hops=(0, 2))
    for field in ("n_per_hop", "max_new_tokens", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            MQuAKEStudy(**{field: 0})


def test_run_resumes_and_summarizes(study, tmp_path):
    llama = kvprobe.load_model("tiny-llama")
    out = tmp_path / "run"
    run_study(study, llama, out, progress=False)
    first = (out / "results.jsonl").read_bytes()
    rows = [json.loads(line) for line in first.decode().splitlines()]
    assert len(rows) == len(study.cases()) * 5 * len(POLICIES)
    assert {r["query"] for r in rows} == {"current", "historical", "single_hop"}
    assert all(r["group"] == r["case_id"] for r in rows)
    (out / "results.jsonl").write_text("".join(first.decode().splitlines(keepends=True)[: 5 * len(POLICIES)]))
    run_study(study, llama, out, progress=False)
    assert (out / "results.jsonl").read_bytes() == first
    summary = write_summary(out)
    kinds = {(c["kind"], c["policy"]) for c in summary["cells"]}
    assert ("historical", "rebuild") in kinds and ("current", "compact") in kinds
    assert "Offline routing" in (out / "report.md").read_text()


def test_recompute_vs_source_counts_discordant_cases_by_stratum():
    """Hand-built rows: the stratified McNemar counts and the loss x gain table of the paper's analysis."""
    from kvprobe.studies.mquake.summary import recompute_vs_source

    def row(em, retained=True):
        return {"em": em, "contains": em, "retained_text": retained}

    by_key = {
        ("historical", "recompute"): {("a", 3): row(0), ("b", 3): row(1), ("c", 3): row(0, False), ("d", 3): row(0)},
        ("historical", "source-mask"): {("a", 3): row(1), ("b", 3): row(0), ("c", 3): row(1, False),
                                        ("d", 3): row(0)},
        ("current", "recompute"): {("a", 0): row(1), ("b", 0): row(0), ("d", 0): row(1)},
        ("current", "source-mask"): {("a", 0): row(0), ("b", 0): row(0), ("d", 0): row(0)},
    }
    out = recompute_vs_source(by_key)["em"]
    assert out["strata"]["retained"] | {"mcnemar_p": 0} == {"n": 3, "arm_correct": 1, "reference_correct": 1,
                                                            "arm_only": 1, "reference_only": 1, "mcnemar_p": 0}
    assert out["strata"]["masked_only"]["reference_only"] == 1 and out["strata"]["masked_only"]["n"] == 1
    # losses {a, c}, current gains {a, d}: [[a], [c]], [[d], [b]]
    assert out["loss_and_current_gain"]["table"] == [[1, 1], [1, 1]]
    assert recompute_vs_source({("historical", "full"): {}}) is None
