"""The timing benchmarks of the paper (issue 37 item 5): ``kvprobe bench latency`` (soft/hard session arms,
phase by phase) and the summary of ``kvprobe bench operations`` (five positions, the sign test), run on a
tiny model under the device guard (a tensor made without the model's device fails as on CUDA)."""

from __future__ import annotations

import json

import pytest

import kvprobe
from conftest import tensors_made_on_meta
from kvprobe.decoding import Request, answer
from kvprobe.readouts.stats import sign_test
from kvprobe.studies.session_bias import history as sessions
from kvprobe.studies.session_bias.study import SessionBiasStudy
from kvprobe.tools.bench.latency import paired_overheads, percentile, run_latency_bench
from kvprobe.tools.bench.operations import run_operations_bench, summarize
from kvprobe.tools.bench.timed_answer import answer_timed


def test_answer_timed_is_answer_split_into_phases(llama):
    study = SessionBiasStudy(split="all")
    case = next(c for c in study.cases() if len(c.question.sessions) > 1)
    prompt, layout = sessions.build_prompt(case.question, chat=False)
    h = llama.prefill(prompt)
    asked = sessions.question_text(case.question)
    conds = sessions.session_conditions(h, layout, asked).conditions
    for name, condition in conds.items():
        with tensors_made_on_meta():
            gen, t = answer_timed(llama, h, Request(asked, condition), 5)
        plain = answer(llama, [(h, Request(asked, condition))], max_new_tokens=5)[0].generation
        assert gen.token_ids == plain.token_ids, name
        assert t.condition_s >= 0 and t.query_s > 0 and t.decode_s > 0
        assert t.complete_s == pytest.approx(t.condition_s + t.query_s + t.decode_s)
        assert t.decode_path.startswith("ordinary")  # a CPU has no fixed-shape decode
    assert h.check_digest()


def test_latency_bench_rows_and_summary(llama, tmp_path):
    with tensors_made_on_meta():
        result = run_latency_bench(llama, tmp_path, SessionBiasStudy(split="all"), questions=3, max_new_tokens=3,
                                   warmups=0, progress=False)
    rows = result["rows"]
    assert len(rows) == 9 and {r["arm"] for r in rows} == {"full", "soft", "hard"}
    for r in rows:
        assert r["complete_ms"] == pytest.approx(r["policy_ms"] + r["query_ms"] + r["decode_ms"])
        assert r["ttft_cold_ms"] == pytest.approx(r["tokenize_ms"] + r["prefill_ms"] + r["ttft_resident_ms"])
        assert r["policy_ms"] >= 0 and 1 <= r["tokens"] <= 3
    s = result["summary"]
    assert s["per_arm"]["full"]["questions"] == 3
    assert s["overheads"]["soft"]["all"]["complete_ms"]["n"] == 3
    assert s["inactive_identical"] == s["inactive_questions"]
    saved = json.loads((tmp_path / "latency.json").read_text())
    assert saved["summary"] == json.loads(json.dumps(s))
    md = (tmp_path / "latency.md").read_text()
    assert "| soft | 3 |" in md and "Paired overhead against full access, active questions" in md


def test_paired_overheads_by_hand():
    rows = [{"question_id": q, "arm": arm, "active": q != "c", "ms": ms}
            for q, arm, ms in [("a", "full", 100.0), ("a", "hard", 150.0), ("b", "full", 200.0), ("b", "hard", 180.0),
                               ("c", "full", 50.0), ("c", "hard", 50.0), ("d", "full", 0.0), ("d", "hard", 5.0)]]
    assert paired_overheads(rows, "hard", "ms") == pytest.approx([50.0, -10.0, 0.0])  # d: no base, left out
    assert paired_overheads(rows, "hard", "ms", active_only=True) == pytest.approx([50.0, -10.0])
    assert percentile([50.0, -10.0, 0.0], 50) == 0.0
    assert percentile([50.0, -10.0, 0.0], 95) == pytest.approx(0.0 + 0.9 * 50.0)
    assert percentile([], 50) is None


def test_operation_summary_sign_test_by_hand():
    # 18 of 20 above: 2 P(Bin(20, 1/2) <= 2) = 2 (1 + 20 + 190) / 2**20
    assert sign_test(18, 2) == pytest.approx(2 * 211 / 2**20)
    assert sign_test(0, 0) == 1.0

    def cell(full, mask, prefix):
        return {"operations": {"full": {"total_ms": full, "total_over_mask": full / mask},
                               "mask": {"total_ms": mask, "total_over_mask": 1.0},
                               "recompute-prefix": {"total_ms": prefix, "total_over_mask": prefix / mask}}}

    s = summarize([cell(1.0, 2.0, 5.0), cell(3.0, 2.0, 40.0), cell(2.0, 2.0, 4.0)])
    assert (s["mask_above_full"], s["mask_below_full"], s["ties"], s["cells"]) == (1, 1, 1, 3)
    assert s["sign_test_p"] == 1.0
    assert s["ratio_to_mask"]["recompute-prefix"] == {"min": 2.0, "max": 20.0}


def test_operations_bench_five_positions(llama, tmp_path):
    with tensors_made_on_meta():
        result = run_operations_bench(llama, tmp_path, None, lengths=(160,), warmups=0, repeats=1, progress=False)
    assert [c["fraction"] for c in result["cells"]] == [0.1, 0.3, 0.5, 0.7, 0.9]
    s = result["summary"]
    assert s["cells"] == 5 and s["mask_above_full"] + s["mask_below_full"] + s["ties"] == 5
    assert s["ratio_to_mask"]["mask"] == {"min": 1.0, "max": 1.0}
    assert "exact two-sided sign test" in (tmp_path / "operations.md").read_text()


def test_answer_timed_static_flag_reaches_the_decoder(llama, monkeypatch):
    """``static=True`` must let the fixed-shape decoder run (a shadowed flag once silently disabled it)."""
    from kvprobe import decoding
    from kvprobe.tools.bench import timed_answer

    h = llama.prefill(kvprobe.Prompt([("A", "Record A: the office is in Room 12.")], system="Answer."))
    built = []
    real = decoding.StaticDecoder
    monkeypatch.setattr(decoding, "StaticDecoder", lambda *a, **k: built.append(k) or real(*a, **k))
    for module in (decoding, timed_answer):  # the decoder's choice and the path the timing reports
        monkeypatch.setattr(module, "STATIC_DECODE_DEVICES", ("cuda", "cpu"))
    gen_static, t = answer_timed(llama, h, Request("Where?", kvprobe.Full()), 4, static=True)
    assert built == [{"graph": False}] and t.decode_path == "static"
    gen_plain, t = answer_timed(llama, h, Request("Where?", kvprobe.Full()), 4, static=False)
    assert len(built) == 1 and t.decode_path.startswith("ordinary")
    assert gen_static.token_ids == gen_plain.token_ids
