"""Cross-checkpoint cache reading on tiny models: real forwards, no mocks (spec E8)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

import kvprobe
from kvprobe.studies.cross_checkpoint.checks import CompatibilityError, check_compatible
from kvprobe.studies.cross_checkpoint.reading import (LOGIT_TOLERANCE, answer_content, cross_read, full_forward_first_token,
                                              is_invalid, read_caches, reference_cross_generate, verify_cross_read)
from kvprobe.siblings import fake_int8, int8_sibling, perturbed_sibling, rounded_sibling
from kvprobe.studies.cross_checkpoint.siblings import SiblingPair, make_sibling
from kvprobe.studies.cross_checkpoint.similarity import cache_similarity, recurrent_similarity
from kvprobe.studies.cross_checkpoint.study import CrossCheckpointStudy
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.cross_checkpoint.transfer import readout_transfer, select_items, write_transfer
from kvprobe.studies.datasets.recognition.records import generate_records
from kvprobe.studies.common.protocol import RunState
from kvprobe.studies.common.runner import read_rows, run_study

from conftest import QUESTIONS, SEGMENTS

PROMPT = kvprobe.Prompt(SEGMENTS, system="Answer from the records.")


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def pair(llama) -> SiblingPair:
    return make_sibling(llama, "noise")


@pytest.fixture(scope="module")
def histories(pair):
    return pair.main.prefill(PROMPT), pair.sibling.prefill(PROMPT)


def _conditions(history: kvprobe.History) -> dict[str, kvprobe.Condition]:
    return {"full": kvprobe.Full(), "source": kvprobe.Mask(history.span("A"), name="source")}


def test_reading_its_own_cache_is_normal_generation(llama, histories):
    h, _ = histories
    conds = _conditions(h)
    mine = cross_read(h, llama, QUESTIONS, access=conds, max_new_tokens=10)
    normal = llama.generate(h, QUESTIONS, access=conds, max_new_tokens=10)
    assert mine == normal
    assert cross_read(h, llama, QUESTIONS[0], max_new_tokens=10) == llama.generate(h, QUESTIONS[0], max_new_tokens=10)
    assert h.check_digest()


def test_cross_read_equals_plain_transformers_on_the_rebuilt_cache(pair, histories):
    h_main, h_sib = histories
    for writer, reader in ((h_sib, pair.main), (h_main, pair.sibling)):
        for name, access in _conditions(writer).items():
            got = cross_read(writer, reader, QUESTIONS[0], access=access, max_new_tokens=12)
            ref = reference_cross_generate(writer, reader, QUESTIONS[0], access=access, max_new_tokens=12)
            assert got.token_ids == tuple(ref), name
            assert verify_cross_read(writer, reader, QUESTIONS[0], access) <= LOGIT_TOLERANCE
        assert writer.check_digest()
    # The sibling really differs: its own reads and the cross reads are not all identical.
    own = cross_read(h_main, pair.main, QUESTIONS, max_new_tokens=12)["full"]
    cross = cross_read(h_sib, pair.main, QUESTIONS, max_new_tokens=12)["full"]
    assert [g.token_ids for g in own] != [g.token_ids for g in cross]


@pytest.mark.parametrize("name", ["tiny-gemma3", "tiny-qwen3.5"])
def test_cross_read_on_sliding_and_hybrid_siblings(name):
    """Sliding + full layers (brute-force reference) and Gated DeltaNet hybrids (carried recurrent states)."""
    model = kvprobe.load_model(name)
    sibling = make_sibling(model, "noise").sibling
    h_main, h_sib = model.prefill(PROMPT), sibling.prefill(PROMPT)
    conds = _conditions(h_sib)
    got = cross_read(h_sib, model, QUESTIONS[0], access=conds, max_new_tokens=6)
    assert cross_read(h_main, model, QUESTIONS, access=conds, max_new_tokens=6) == \
        model.generate(h_main, QUESTIONS, access=conds, max_new_tokens=6)
    for cond_name, access in conds.items():
        assert verify_cross_read(h_sib, model, QUESTIONS[0], access) <= LOGIT_TOLERANCE
        if not model.arch.recurrent_layers:
            ref = reference_cross_generate(h_sib, model, QUESTIONS[0], access=access, max_new_tokens=6)
            assert got[cond_name].token_ids == tuple(ref)
    rec = recurrent_similarity(h_main.recurrent, h_sib.recurrent)
    assert (rec is None) == (not model.arch.recurrent_layers)
    if rec is not None:
        assert rec["layers"] == list(model.arch.recurrent_layers) and 0.5 < rec["recurrent_cos_mean"] < 1
    assert h_sib.check_digest() and h_main.check_digest()


def test_writer_cache_unchanged_and_tampering_detected(pair, histories):
    _, h_sib = histories
    read_caches(pair.main, [(h_sib, kvprobe.Request(q, a)) for q in QUESTIONS for a in _conditions(h_sib).values()],
                max_new_tokens=4)
    assert h_sib.check_digest()
    tampered = copy.copy(h_sib)
    tampered.digest = "0" * 64
    with pytest.raises(RuntimeError, match="changed during a read"):
        read_caches(pair.main, [(tampered, kvprobe.Request(QUESTIONS[0], kvprobe.Full()))], max_new_tokens=2)


def test_first_token_of_own_cache_matches_an_uncached_forward(llama, histories):
    h, _ = histories
    for access in _conditions(h).values():
        for q in QUESTIONS:
            cached = cross_read(h, llama, q, access=access, max_new_tokens=1)
            assert cached.token_ids[0] == full_forward_first_token(llama, h, q, access).token


def test_union_of_eos_sets_stops_both_readers(llama, histories):
    h, _ = histories
    first = llama.generate(h, QUESTIONS[0], max_new_tokens=6).token_ids[0]
    assert first not in llama.eos_ids
    stopped = cross_read(h, llama, QUESTIONS[0], max_new_tokens=6, stop_ids=llama.eos_ids | {first})
    assert stopped.token_ids == (first,) and stopped.stop_reason == "eos" and stopped.text == ""
    sibling = rounded_sibling(llama)
    sibling.hf.generation_config.eos_token_id = [*llama.eos_ids, first]
    pair = SiblingPair(llama, sibling, "bf16")
    assert pair.stop_ids == llama.eos_ids | {first}
    assert llama.hf.generation_config.eos_token_id != sibling.hf.generation_config.eos_token_id  # a deep copy


def _wrapped(model: kvprobe.Model, tokenizer, name: str) -> kvprobe.Model:
    """``model``'s weights with ``tokenizer`` (a copy with the embedding grown to the tokenizer's ids, as a
    checkpoint trained with the extra tokens would have: kvprobe.Model refuses ids the embedding lacks)."""
    hf = model.hf
    if len(tokenizer) > hf.get_input_embeddings().num_embeddings:
        hf = copy.deepcopy(hf)
        hf.resize_token_embeddings(len(tokenizer))
    return kvprobe.Model(hf, tokenizer, name=name, weight_hash="x")


class _EmptyOffsetAt:
    """The same tokenizer, whose offset mapping gives one token no characters (ids unchanged)."""

    def __init__(self, tok, position: int):
        self.tok, self.position = tok, position

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def __call__(self, text, **kw):
        enc = dict(self.tok(text, **kw))
        if "offset_mapping" in enc and len(enc["offset_mapping"]) > self.position:
            enc["offset_mapping"] = list(enc["offset_mapping"])
            enc["offset_mapping"][self.position] = (0, 0)
        return enc


def test_mismatches_raise_clear_errors(llama, pair, histories):
    assert check_compatible(pair.sibling, llama, [PROMPT], QUESTIONS)["prompts"] == 1
    # Token ids: a tokenizer with one more token splits "seal" differently.
    other = copy.deepcopy(llama.tokenizer)
    other.add_tokens(["seal"])
    with pytest.raises(CompatibilityError, match=r"history: token ids differ at position \d+"):
        check_compatible(_wrapped(pair.sibling, other, "other-tok"), llama, [PROMPT])
    with pytest.raises(CompatibilityError, match="token ids differ"):
        SiblingPair(llama, pair.sibling, "x", sibling_tokenizer=other).check([PROMPT])
    # The question suffix is checked too.
    with pytest.raises(CompatibilityError, match="question 'Is the seal gray"):
        check_compatible(llama, llama, [kvprobe.Prompt([("A", "Room 12 is on the third floor.")])],
                         ["Is the seal gray?"], writer_tokenizer=other, reader_tokenizer=llama.tokenizer)
    # Chat template: a writer rendering another history.
    templated = copy.deepcopy(llama.tokenizer)
    templated.chat_template = "PREFIX " + llama.tokenizer.chat_template
    with pytest.raises(CompatibilityError, match="renders a different history"):
        check_compatible(_wrapped(pair.sibling, templated, "other-template"), llama, [PROMPT])
    # Boundaries / mask spans with identical ids: record A loses its last token's characters.
    a_end = histories[0].span("A").end
    with pytest.raises(CompatibilityError, match="mask span of segment 'A' differs"):
        check_compatible(llama, llama, [PROMPT], mask_segments=["A"],
                         writer_tokenizer=_EmptyOffsetAt(llama.tokenizer, a_end - 1), reader_tokenizer=llama.tokenizer)
    # Architecture: another family, and the same family with other KV shapes.
    with pytest.raises(CompatibilityError, match="architecture mismatch in model_type"):
        check_compatible(kvprobe.load_model("tiny-gemma3"), llama, [PROMPT])
    from transformers import AutoModelForCausalLM

    from kvprobe.tiny import tiny_config

    cfg = tiny_config("tiny-llama", llama.tokenizer)
    cfg.num_key_value_heads = 4
    wide = kvprobe.Model(AutoModelForCausalLM.from_config(cfg), llama.tokenizer, name="tiny-llama-4kv")
    with pytest.raises(CompatibilityError, match="layer 0 in key_shape"):
        check_compatible(wide, llama, [PROMPT])
    with pytest.raises(CompatibilityError, match="key_shape"):
        cross_read(wide.prefill(PROMPT), llama, QUESTIONS[0], max_new_tokens=2)


def test_similarity_equals_a_hand_computation(pair, histories):
    gen = torch.Generator().manual_seed(3)
    kv_a = [(torch.randn(1, 2, 5, 3, generator=gen), torch.randn(1, 2, 5, 3, generator=gen)), (None, None)]
    kv_b = [(torch.randn(1, 2, 5, 3, generator=gen), torch.randn(1, 2, 5, 3, generator=gen)), (None, None)]
    got = cache_similarity(kv_a, kv_b)
    sub = cache_similarity(kv_a, kv_b, span=(1, 4))
    for j, name in enumerate(("k", "v")):
        a, b = kv_a[0][j][0].numpy(), kv_b[0][j][0].numpy()
        cos, rel = [], []
        for t in range(5):
            x, y = a[:, t, :].reshape(-1), b[:, t, :].reshape(-1)
            cos.append(float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)))
            rel.append(float(np.linalg.norm(x - y) / np.linalg.norm(x)))
        assert got[f"{name}_cos"][0] == pytest.approx(np.mean(cos), abs=1e-6)
        assert got[f"{name}_rel_l2"][0] == pytest.approx(np.mean(rel), abs=1e-6)
        assert sub[f"{name}_cos"][0] == pytest.approx(np.mean(cos[1:4]), abs=1e-6)
    assert got["layers"] == [0] and got["mean"]["k_cos"] == got["k_cos"][0]
    h_main, h_sib = histories
    same = cache_similarity(h_main.kv, h_main.kv)
    assert same["mean"]["k_cos"] == pytest.approx(1.0) and same["mean"]["v_rel_l2"] == 0.0
    real = cache_similarity(h_main.kv, h_sib.kv)
    assert 0.5 < real["mean"]["k_cos"] < 0.999 and len(real["layers"]) == 4


def test_answer_content_and_invalid():
    assert answer_content('{"answer": "5 h"}') == answer_content('```json\n{ "answer":"5 h" }\n```')
    assert answer_content('{"answer": "5 h"}') != answer_content('{"answer": "6 h"}')
    assert answer_content(" The answer is 5 h. ") == "The answer is 5 h."
    assert not is_invalid('```json\n{"answer": "5 hours"}\n```', "eos")
    assert is_invalid('{"answer": "5 hours"}', "cap")
    assert is_invalid("5 hours", "eos") and is_invalid('{"answer": 5}', "eos")


def test_precision_and_noise_siblings(llama):
    bf16 = rounded_sibling(llama)
    w, w16 = llama.hf.model.layers[0].self_attn.q_proj.weight, bf16.hf.model.layers[0].self_attn.q_proj.weight
    assert w16.dtype == torch.float32 and torch.equal(w16, w.to(torch.bfloat16).float()) and not torch.equal(w, w16)
    assert bf16.name == "tiny-llama~bf16" and bf16.weight_hash != llama.weight_hash
    q = fake_int8(w)
    steps = q / (w.abs().amax(dim=1, keepdim=True) / 127)
    assert torch.allclose(steps, steps.round(), atol=1e-3) and (q - w).abs().max() <= w.abs().max() / 254 + 1e-6
    int8 = int8_sibling(llama)
    assert torch.equal(int8.hf.model.layers[0].self_attn.q_proj.weight, q)
    assert torch.equal(int8.hf.model.norm.weight, llama.hf.model.norm.weight)  # vectors kept
    a, b, c = perturbed_sibling(llama, seed=1), perturbed_sibling(llama, seed=1), perturbed_sibling(llama, seed=2)
    assert a.weight_hash == b.weight_hash != c.weight_hash != llama.weight_hash
    assert make_sibling(llama, "noise:0.1").recipe == "noise:0.1:seed0"


def test_study_end_to_end_with_summary_and_transfer(llama, tmp_path):
    study = CrossCheckpointStudy(sibling="noise", n_groups=1, max_new_tokens=6, queries=("current", "unrelated"))
    info = run_study(study, llama, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    answers = [r for r in rows if r["kind"] == "answer"]
    states = [r for r in rows if r["kind"] == "state"]
    assert info.cases_run == 2 and len(answers) == 2 * 2 * 2 * 2 * 2 and len(states) == 2
    assert {r["first_token_check"] for r in answers if r["cache"] == "own" and r["query"] == "current"} == {"pass"}
    assert all(r["changed"] is None for r in answers if r["cache"] == "own")
    assert max(states[0]["verify_max_abs_diff"].values()) <= LOGIT_TOLERANCE
    # The main reader's own full-access reads are plain generation on a fresh prefill.
    from kvprobe.studies.datasets.quantity_task import tasks

    case = study.cases()[0]
    h = llama.prefill(tasks.build_prompt(case))
    for q in tasks.queries(case):
        if q.role in study.queries:
            row = next(r for r in answers if (r["case_id"], r["reader"], r["cache"], r["access"], r["query"]) ==
                       (case.case_id, "main", "own", "full", q.role))
            assert tuple(row["token_ids"]) == llama.generate(h, q.question, max_new_tokens=6).token_ids
    assert run_study(study, llama, tmp_path, progress=False).cases_run == 0  # resumable

    cases = select_items(generate_records(), {"train": 3, "dev": 2, "test": 2})
    result = readout_transfer(llama, study.sibling_pair(llama, RunState()).sibling, cases, draws=200)
    assert {"own", "transfer", "transfer_main_dev_C"} <= set(result) and 0 <= result["transfer"]["role_auc"] <= 1
    write_transfer(tmp_path, result)
    summary = write_summary("cross-checkpoint", tmp_path)
    assert (tmp_path / "report.md").exists() and json.loads((tmp_path / "summary.json").read_text())["cases"] == 2
    cur = summary["readers"]["main"]["current"]
    own = [r for r in answers if (r["reader"], r["query"], r["access"]) == ("main", "current", "full")]
    assert cur["arms"]["cross/full"]["changed"] == sum(bool(r["changed"]) for r in own if r["cache"] == "cross")
    change = cur["lenient_complete_cross_minus_own"]["full"]
    assert change["change"] == (cur["arms"]["cross/full"]["lenient_complete"] - cur["arms"]["own/full"]["lenient_complete"])
    assert summary["similarity"]["history"]["layers"] == [0, 1, 2, 3] and "transfer" in summary
    report = (tmp_path / "report.md").read_text()
    assert "Readout transfer" in report and "State similarity" in report


def test_bad_parameters_fail_before_a_model_loads():
    for field in ("n_groups", "max_new_tokens", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            CrossCheckpointStudy(**{field: 0})
    for field, value in (("queries", ("current", "future")), ("readers", ("writer",)), ("readers", ()),
                         ("first_token_queries", ("nope",))):
        with pytest.raises(ValueError, match=field):
            CrossCheckpointStudy(**{field: value})


def test_study_refuses_an_incompatible_sibling(llama):
    study = CrossCheckpointStudy(sibling="tiny-qwen3", n_groups=1, max_new_tokens=2)
    with pytest.raises(CompatibilityError, match="model_type"):
        study.run_cases(llama, study.cases()[:1])


def test_cli_cross_checkpoint_with_transfer(tmp_path):
    """`kvprobe run cross-checkpoint --transfer` in a real subprocess: answers, transfer.json and its report section."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "kvprobe.cli", "run", "cross-checkpoint", "--model", "tiny-llama",
                           "--sibling", "noise", "--n-groups", "1", "--max-new-tokens", "2", "--queries", "current",
                           "--transfer", "--out", str(out), "--quiet"], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr
    transfer = json.loads((out / "transfer.json").read_text())
    assert {"own", "transfer"} <= set(transfer)
    assert "Readout transfer" in (out / "report.md").read_text()
    assert json.loads((out / "config.json").read_text())["study_config"]["sibling"] == "noise"
