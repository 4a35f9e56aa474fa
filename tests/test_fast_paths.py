"""The fast paths against the plain ones: grouped attention vs transformers' eager,
preallocated cache slots vs concatenation, and one batch over several histories
vs each history alone. (Whole-model SDPA / grouped vs transformers' eager on every
family, and shared-history batches: tests/test_shared_history.py.)"""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

import kvprobe
from kvprobe import Full, Mask, matched_control
from kvprobe.attention import GROUPED_EAGER, KVPROBE_SDPA, grouped_eager_attention
from kvprobe.decoding import Request, answer, suffix_ids
from kvprobe.forward import traced_forward
from kvprobe.rows import fork_rows, pad_suffix_block
from kvprobe.reference import reference_score
from kvprobe.slots import SPARE_SLOTS, SlotLayer
from kvprobe.tiny import TINY_MODELS
from kvprobe.transformers_api import cache_argument
from transformers.models.llama.modeling_llama import eager_attention_forward

from conftest import QUESTIONS, SEGMENTS, make_history

TOL = 1e-5  # fp32: grouping the heads only reorders float additions
CANDIDATES = ['{"answer": "Room 18"}', '{"answer": "Room 12"}']


def test_grouped_attention_function_matches_eager_with_softcap_and_head_masks(llama):
    """The function itself, on random inputs: probabilities, outputs, softcap, a per-head mask."""
    torch.manual_seed(0)
    module = llama.hf.model.layers[0].self_attn
    B, H, KVH, Q, S, D = 2, module.config.num_attention_heads, module.config.num_key_value_heads, 3, 7, 16
    module.num_key_value_groups = H // KVH
    q, k, v = torch.randn(B, H, Q, D), torch.randn(B, KVH, S, D), torch.randn(B, KVH, S, D)
    for mask in (torch.randn(B, 1, Q, S), torch.randn(B, H, Q, S)):
        out, probs = grouped_eager_attention(module, q, k, v, mask, scaling=0.25)
        ref_out, ref_probs = eager_attention_forward(module, q, k, v, mask, scaling=0.25)
        assert torch.allclose(out, ref_out, atol=TOL) and torch.allclose(probs, ref_probs, atol=TOL)
    from transformers.models.gemma3.modeling_gemma3 import eager_attention_forward as gemma_eager

    out, probs = grouped_eager_attention(module, q, k, v, None, scaling=0.25, softcap=2.0)
    ref_out, ref_probs = gemma_eager(module, q, k, v, None, scaling=0.25, softcap=2.0)
    assert torch.allclose(out, ref_out, atol=TOL) and torch.allclose(probs, ref_probs, atol=TOL)
    with pytest.raises(NotImplementedError, match="attention sinks"):
        grouped_eager_attention(module, q, k, v, None, scaling=0.25, s_aux=torch.zeros(H))


def test_slot_cache_equals_concatenating_cache_beyond_its_capacity(llama):
    """Writing into preallocated slots (growing past the spare capacity) computes what torch.cat does."""
    h = make_history(llama)
    state = h.base_state()
    rows = fork_rows([state])
    plain = DynamicCache(ddp_cache_data=[(k.clone(), v.clone()) for k, v in state.kv])
    n = SPARE_SLOTS + 40  # forces the buffers to grow
    ids = torch.randint(5, 900, (1, n))
    got = []
    llama.set_attn_implementation(GROUPED_EAGER)  # one kernel for both (SDPA rounds per block shape)
    try:
        with torch.inference_mode():
            for t in range(0, n, 17):  # uneven blocks
                block = ids[:, t : t + 17]
                got.append(traced_forward(llama, rows, block).logits)
            ref = llama.hf(input_ids=ids, position_ids=torch.arange(len(h), len(h) + n)[None],
                           use_cache=True, **cache_argument(llama.hf, plain)).logits
    finally:
        llama.set_attn_implementation(KVPROBE_SDPA)
    assert torch.allclose(torch.cat(got, dim=1), ref, atol=TOL)
    layer = rows.cache.layers[0]
    assert isinstance(layer, SlotLayer) and layer.keys.shape[2] == len(h) + n
    assert torch.equal(layer.keys, plain.layers[0].keys)


def test_truncate_rolls_back_and_take_copies(llama):
    h = make_history(llama)
    rows = fork_rows([h.base_state(), h.base_state()])
    q = torch.tensor([suffix_ids(llama, h, QUESTIONS[0])] * 2)
    first = traced_forward(llama, rows, q).logits
    copy = rows.take(torch.tensor([1, 1, 0]))
    end = rows.length
    traced_forward(llama, rows, torch.randint(5, 900, (2, 9)))
    rows.truncate(end)
    assert rows.length == end and rows.cache.layers[0].keys.shape[2] == end
    step = torch.tensor([[42], [42]])
    again = traced_forward(llama, rows, step).logits
    from_copy = traced_forward(llama, copy, torch.tensor([[42], [42], [42]])).logits
    assert torch.allclose(again, from_copy[[2, 0]], atol=TOL)  # the copy was not touched by the rollback
    assert first.shape[0] == 2
    with pytest.raises(ValueError, match="truncate"):
        rows.cache.layers[0].truncate(rows.length + 5)


def test_one_batch_over_several_histories_equals_each_alone(llama):
    """Rows of different histories (different lengths, padded caches) in one batch."""
    short = make_history(llama)
    long = llama.prefill(kvprobe.Prompt(SEGMENTS + [("extra", "The archive room is locked on Sundays.")],
                                        system="Answer from the records."))
    assert len(long) > len(short)
    items, cands = [], []
    for h in (long, short):
        source = Mask(h.span("A"), name="source")
        for cond in (Full(), source, matched_control(h, source, "note")):
            for question in QUESTIONS:
                items.append((h, Request(question, cond)))
                cands.append(CANDIDATES)
    together = answer(llama, items, cands, max_new_tokens=8)
    for (h, req), got in zip(items, together):
        alone = answer(llama, [(h, req)], [CANDIDATES], max_new_tokens=8)[0]
        assert got.generation.token_ids == alone.generation.token_ids
        assert got.scores.logprobs == pytest.approx(alone.scores.logprobs, abs=1e-4)
        q = suffix_ids(llama, h, req.question)
        c = llama.tokenizer(CANDIDATES[1], add_special_tokens=False)["input_ids"]
        ref = reference_score(llama, h.input_ids.tolist(), q, c, req.access.hidden_positions(len(h)))
        assert got.scores[1] == pytest.approx(ref, abs=1e-4)
    assert short.check_digest() and long.check_digest()


def test_hybrid_candidates_are_scored_on_copies(hybrid):
    """Recurrent states cannot roll back: candidates of different lengths run on copies."""
    h = make_history(hybrid)
    cands = ['{"answer": "Room 18"}', "12"]
    scores = hybrid.score(h, QUESTIONS[0], cands, access={"full": Full(), "mask": Mask(h.span("A"))})
    q = suffix_ids(hybrid, h, QUESTIONS[0])
    hidden = {"full": None, "mask": Mask(h.span("A")).hidden_positions(len(h))}
    for name in ("full", "mask"):
        for i, cand in enumerate(cands):
            c = hybrid.tokenizer(cand, add_special_tokens=False)["input_ids"]
            ref = reference_score(hybrid, h.input_ids.tolist(), q, c, hidden[name])
            # 1e-3: transformers' chunked vs recurrent Gated DeltaNet kernels differ (see test_hybrid.py)
            assert scores[name][i] == pytest.approx(ref, abs=1e-3)
    assert abs(scores["mask"][0] - scores["full"][0]) > 1e-2
    assert h.check_digest()


def test_answer_refuses_bad_requests(llama):
    h = make_history(llama)
    item = [(h, Request(QUESTIONS[0], Full()))]
    with pytest.raises(ValueError, match="nothing to do"):
        answer(llama, item)
    with pytest.raises(ValueError, match="candidate lists"):
        answer(llama, item, [CANDIDATES, CANDIDATES])
    with pytest.raises(ValueError, match="non-empty"):
        answer(llama, item, [["", "x"]])
    ids, valid = pad_suffix_block([[1, 2], []], llama.pad_id, llama.device)
    assert valid.sum() == 2


def test_prefill_reusing_a_shared_prefix_equals_a_fresh_prefill(tiny_model):
    first = make_history(tiny_model)
    other = SEGMENTS[:2] + [("B", "Record B, Friday: the weekly planning meeting moves to Room 31 downstairs.")]
    prompt = kvprobe.Prompt(other, system="Answer from the records.")
    fresh = tiny_model.prefill(prompt)
    reused = tiny_model.prefill(prompt, reuse=first)
    assert torch.equal(reused.input_ids, fresh.input_ids)
    shared = int((fresh.input_ids[: len(first)] == first.input_ids[: len(fresh)]).cumprod(0).sum())
    assert 0 < shared < len(fresh)
    for (k, v), (k2, v2), (k1, _) in zip(reused.kv, fresh.kv, first.kv):
        assert torch.equal(k[:, :, :shared], k1[:, :, :shared])  # copied, not recomputed
        # fp32 rounding of different matmul shapes, relative to the K/V scale
        assert (k - k2).abs().max() <= TOL * k2.abs().max() and (v - v2).abs().max() <= TOL * v2.abs().max()
    q = QUESTIONS[0]
    assert tiny_model.score(reused, q, CANDIDATES)[0] == pytest.approx(tiny_model.score(fresh, q, CANDIDATES)[0],
                                                                       abs=1e-4)
    with pytest.raises(ValueError, match="same model"):
        kvprobe.load_model("tiny-llama" if tiny_model.name != "tiny-llama" else "tiny-qwen3").prefill(
            prompt, reuse=first)


def test_hybrid_prefill_reuse_starts_afresh_unless_the_whole_history_is_shared(hybrid):
    first = make_history(hybrid)
    prompt = kvprobe.Prompt(SEGMENTS[:2] + [("B", "Record B moves to Room 31.")], system="Answer from the records.")
    reused = hybrid.prefill(prompt, reuse=first)
    fresh = hybrid.prefill(prompt)
    for (c, r), (c2, r2) in zip(reused.recurrent.values(), fresh.recurrent.values()):
        assert torch.equal(c, c2) and torch.equal(r, r2)  # recomputed from token 0, identically


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-qwen3.5"])
def test_folded_masks_equal_the_traced_per_layer_edit_bit_for_bit(name, monkeypatch):
    """A hidden set shared by every attention layer is folded into the model's masks (no trace); the
    per-layer nnsight edit must give the same scores, answers and rebuilt K/V exactly."""
    from kvprobe import forward
    from kvprobe.interventions import OnlineMask, Rebuild

    model = kvprobe.load_model(name)
    h = make_history(model)
    source = Mask(h.span("A"), name="source")
    access = {"full": Full(), "source": source, "control": matched_control(h, source, segment="note"),
              "rebuild": Rebuild(h.span("A")), "online": OnlineMask(h.span("A"), h.span("B"))}

    def run():
        scores = model.score(h, QUESTIONS[0], CANDIDATES, access=access)
        answers = model.generate(h, QUESTIONS, access=access, max_new_tokens=6)
        rebuilt = Rebuild(h.span("A")).prepare(model, h).kv
        return scores, answers, rebuilt

    folded = run()
    monkeypatch.setattr(forward, "FOLD_UNIFORM_MASKS", False)
    traced = run()
    assert folded[0] == traced[0] and folded[1] == traced[1]
    for (k1, v1), (k2, v2) in zip(folded[2], traced[2]):
        assert (k1 is None and k2 is None) or (torch.equal(k1, k2) and torch.equal(v1, v2))
    # the folded run really took the fast path: the source mask's rows fold, a per-layer mask does not
    rows = fork_rows([source.prepare(model, h)])
    assert forward.uniform_hidden(model, rows) is None  # switched off here
    monkeypatch.setattr(forward, "FOLD_UNIFORM_MASKS", True)
    assert forward.uniform_hidden(model, rows) is not None
    layered = Mask(h.span("A"), layers=model.arch.attention_layers[:1]).prepare(model, h)
    assert forward.uniform_hidden(model, fork_rows([layered])) is None


@pytest.mark.parametrize("name,attn", [("tiny-llama", KVPROBE_SDPA), ("tiny-qwen3", KVPROBE_SDPA),
                                       ("tiny-llama", GROUPED_EAGER)])
def test_causal_kernel_prefill_equals_the_chunked_masked_prefill(name, attn, monkeypatch):
    """On an accelerator a prefill from nothing runs as one block through SDPA's causal kernel (the eager
    path builds the causal mask itself); forced on the CPU here, its K/V and question logits equal the
    chunked prefill under explicit masks (fp32)."""
    from kvprobe import forward

    model = kvprobe.load_model(name, attn_implementation=attn)
    prompt = kvprobe.Prompt(SEGMENTS, chat=True)
    chunked = model.prefill(prompt, chunk_size=16)
    calls = []
    real = forward.traced_forward
    monkeypatch.setattr(forward, "traced_forward", lambda *a, **k: calls.append(k.get("causal_block")) or real(*a, **k))
    monkeypatch.setattr(forward, "CAUSAL_KERNEL_DEVICES", ("cuda", "cpu"))
    one_block = model.prefill(prompt)
    assert calls == [True], "one causal block when the chunk size is left to the device"
    calls.clear()
    model.prefill(prompt, chunk_size=16)
    assert calls and not any(calls), "a chunk size the caller asks for is honoured"
    for (k1, v1), (k2, v2) in zip(chunked.kv, one_block.kv):
        if k1 is not None:
            assert torch.allclose(k1, k2, atol=TOL) and torch.allclose(v1, v2, atol=TOL)
    for c1, c2 in zip(chunked.recurrent.values(), one_block.recurrent.values()):
        assert torch.allclose(c1[1], c2[1], atol=TOL)
    q = QUESTIONS[0]
    a = model.score(chunked, q, CANDIDATES, access={"full": Full(), "source": Mask(chunked.span("A"))})
    b = model.score(one_block, q, CANDIDATES, access={"full": Full(), "source": Mask(one_block.span("A"))})
    for k in a:
        assert max(abs(x - y) for x, y in zip(a[k].logprobs, b[k].logprobs)) < 1e-4
