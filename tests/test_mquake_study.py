"""The MQuAKE study on tiny models: every policy per question, hybrids leave compaction out, resume, summary."""

from __future__ import annotations

import json

import pytest

import kvprobe
from kvprobe.studies.common.conditions import supported
from kvprobe.studies.mquake.history import source_segments
from kvprobe.studies.mquake.study import CONDITIONS, MQuAKEStudy
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.protocol import prepared
from kvprobe.studies.common.runner import run_study


@pytest.fixture(scope="module")
def study():
    return MQuAKEStudy(hops=(2, 4), n_per_hop=1, max_new_tokens=4)


def _prepare(model, study, case):
    """What the protocol does for one case: prefill, keep the supported policies, prepare each once."""
    history = model.prefill(study.prompt(model, case))
    candidates = supported(study.name, history, study.conditions(model, case, history))
    return history, {name: prepared(model, history, c) for name, c in candidates.items()}


def test_conditions_and_masked_spans(study):
    llama = kvprobe.load_model("tiny-llama")
    case = study.cases()[0]
    history, conditions = _prepare(llama, study, case)
    assert list(conditions) == list(CONDITIONS)
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


def test_online_mask_hides_record_k_only_after_update_k():
    """A three-update case: record k is hidden from the tokens after update k and before it is not
    (checked against one uncached forward with an explicit 4-D mask), unlike hiding every
    superseded record from the first update on."""
    import torch

    from kvprobe.access import positions_of
    from kvprobe.tools.verify.operations import _max_kv_diff
    from kvprobe.tools.verify import LOGIT_TOLERANCE
    from kvprobe.reference import reference_hidden_kv
    from kvprobe.studies.mquake.history import online_pairs

    study = MQuAKEStudy(hops=(4,), n_per_hop=40)
    case = next(c for c in study.cases() if len(c.case.requested_rewrite) == 3)
    pairs = online_pairs(case.case)
    assert [new for _, new in pairs] == ["update:0", "update:1", "update:2"]
    llama = kvprobe.load_model("tiny-llama")
    history = llama.prefill(study.prompt(llama, case))
    online = prepared(llama, history, study.conditions(llama, case, history)["online-mask"]).state
    T = len(history)
    first = torch.full((T,), T, dtype=torch.long)
    for old, new in pairs:
        span = history.span(old)
        first[span.start:span.end] = history.span(new).end
    hidden = positions_of([history.span(old) for old, _ in pairs], T)
    exact = _max_kv_diff(online.kv, reference_hidden_kv(llama, history.input_ids, hidden, first), llama.arch.kv_layers)
    assert exact <= LOGIT_TOLERANCE
    from_first = reference_hidden_kv(llama, history.input_ids, hidden, history.span("update:0").end)
    assert _max_kv_diff(online.kv, from_first, llama.arch.kv_layers) > 100 * LOGIT_TOLERANCE


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
    assert len(rows) == len(study.cases()) * 5 * len(CONDITIONS)
    assert {r["query"] for r in rows} == {"current", "historical", "single_hop"}
    assert all(r["group"] == r["case_id"] for r in rows)
    (out / "results.jsonl").write_text("".join(first.decode().splitlines(keepends=True)[: 5 * len(CONDITIONS)]))
    run_study(study, llama, out, progress=False)
    assert (out / "results.jsonl").read_bytes() == first
    summary = write_summary("mquake", out)
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
    out = recompute_vs_source(by_key, draws=200)["em"]
    retained, masked = out["historical"]["strata"]["retained"], out["historical"]["strata"]["masked_only"]
    assert {k: retained[k] for k in ("n", "correct", "arm_only", "reference_only")} == {
        "n": 3, "correct": {"source-mask": 1, "recompute": 1}, "arm_only": 1, "reference_only": 1}
    assert masked["reference_only"] == 1 and masked["n"] == 1
    # losses {a, c}, current gains {a, d}: [[a], [c]], [[d], [b]]
    assert out["loss_and_current_gain"]["table"] == [[1, 1], [1, 1]]
    assert recompute_vs_source({("historical", "full"): {}}) is None


FIXTURE = __import__("pathlib").Path(__file__).parent / "fixtures" / "mquake_sample.json"


def test_released_file_sample_is_seeded_per_hop_count_and_in_file_order():
    from kvprobe.studies.mquake.data import sample_released
    from kvprobe.studies.datasets.mquake.schema import load_mquake

    ids = [c.case_id for c in sample_released(FIXTURE, (2, 3), 1)]
    assert len(ids) == 2 and ids == [c.case_id for c in sample_released(FIXTURE, (2, 3), 1)]
    both = [c.case_id for c in sample_released(FIXTURE, (2,), 2)]
    assert both == [c.case_id for c in load_mquake(FIXTURE) if c.hops == 2]  # file order, whatever the draw
    seeds = {tuple(c.case_id for c in sample_released(FIXTURE, (2,), 1, seed=s)) for s in range(20)}
    assert len(seeds) == 2  # the seed decides which of the two 2-hop cases is drawn


def test_source_file_errors_name_the_file_before_a_model_loads(tmp_path):
    from kvprobe.studies.common.protocol import InvalidParameter

    with pytest.raises(InvalidParameter, match=r"source: .*missing\.json"):
        MQuAKEStudy(source=str(tmp_path / "missing.json"))
    with pytest.raises(InvalidParameter, match=r"source: .*mquake_sample\.json: 1 cases of 3 hops, fewer than the 2"):
        MQuAKEStudy(source=str(FIXTURE), hops=(3,), n_per_hop=2)
    bad = tmp_path / "bad.json"
    bad.write_text('[{"case_id": 7}]')
    with pytest.raises(InvalidParameter, match=r"bad\.json case #0 \(case_id=7\): missing field"):
        MQuAKEStudy(source=str(bad))


def test_released_file_runs_with_boxed_questions_and_strata(tmp_path):
    study = MQuAKEStudy(source=str(FIXTURE), hops=(2, 3), n_per_hop=1, max_new_tokens=3)
    cfg = study.config()
    assert cfg["source"] == str(FIXTURE) and cfg["boxed_instruction"].endswith("\\boxed{}.")
    llama = kvprobe.load_model("tiny-llama")
    out = tmp_path / "run"
    run_study(study, llama, out, progress=False)
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert {r["hops"] for r in rows} == {2, 3} and all(r["question"].endswith(cfg["boxed_instruction"]) for r in rows)
    assert {"em_strict_boxed", "edits"} <= set(rows[0])
    summary = write_summary("mquake", out)
    assert {s["hops"] for s in summary["strata"]["hops"]} == {2, 3}
    assert [a["policy"] for a in summary["any_paraphrase"]][0] == "full"
    report = (out / "report.md").read_text()
    assert "mquake_sample.json" in report and "By hop count" in report and "By edit count" in report
