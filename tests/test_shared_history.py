"""Long-history engine: SDPA attention and shared-history batches against the plain paths.

* kvprobe's default attention (SDPA where no logits are needed) equals eager;
* a batch whose rows read one shared copy of their history equals the same batch
  with a copy per row (scores, tokens, attention probabilities), for access-only
  rows, editing operations, several histories in one batch, finished rows leaving
  and candidate blocks rolled back;
* the shared layout holds T + B x (new slots), not B x T;
* families that cannot share say why.
"""

from __future__ import annotations

import pytest
import torch

import kvprobe
from kvprobe import Full, Mask, matched_control
from kvprobe.attention import GROUPED_EAGER, KVPROBE_SDPA, grouped_eager_attention, kvprobe_attention, shared_attention
from kvprobe.decoding import Request, answer, question_logits, suffix_ids
from kvprobe.forward import shares_history, traced_forward
from kvprobe.forward_context import forward_context, probabilities_for
from kvprobe.rows import fork_rows, pad_suffix_block
from kvprobe.interventions import Compact, Rebuild, Zero
from kvprobe.slots import SharedSlotLayer, SlotLayer
from kvprobe.tiny import TINY_MODELS
from kvprobe.transformers_api import cache_argument

from conftest import QUESTIONS, SEGMENTS, make_history

#: Shared vs per-row copies, on candidate log-probabilities summed over ~10 tokens
#: (about -100 nats): the two layouts sum the same products in another order
#: (folded rows, two partial sums), float32 rounding of 1e-5 to 3e-5 (relative 3e-7)
#: on every family, with the same attention or not; generated tokens are identical.
SHARED_TOL = 1e-4
#: The same on single-token logits (magnitude ~5).
LOGIT_TOL = 5e-5
#: SDPA vs eager, one attention call on the same inputs (fp32: 5e-7 seen).
CALL_TOL = 1e-5
#: SDPA vs eager logits of a whole uncached forward: the per-call rounding grows through the
#: layers (largest seen 1.25e-4 on tiny-gemma4, whose residual stream grows to 17; kvprobe
#: verify's cached batches stay within 1e-4 on every family). A wrong mask changes logits by O(1).
SDPA_TOL = 2e-4
CANDIDATES = ['{"answer": "Room 18"}', '{"answer": "Room 12"}']
SHARING = [n for n in TINY_MODELS if n != "tiny-deepseek-v2"]


def _conditions(h):
    source = Mask(h.span("A"), name="source")
    return [Full(), source, matched_control(h, source, "note")]


def _answers(model, items, share: bool, impl: str = KVPROBE_SDPA, max_new_tokens: int = 6):
    model.share_history = share
    before = model.hf.config._attn_implementation
    model.set_attn_implementation(impl)  # deliberately (kvprobe.model_guard refuses m.hf's own switch)
    try:
        return answer(model, items, [CANDIDATES] * len(items), max_new_tokens=max_new_tokens)
    finally:
        model.share_history = True
        model.set_attn_implementation(before)


def _assert_same(shared, per_row, tol):
    for a, b in zip(shared, per_row):
        assert a.generation.token_ids == b.generation.token_ids
        assert a.scores.logprobs == pytest.approx(b.scores.logprobs, abs=tol)


@pytest.mark.parametrize("name", TINY_MODELS)
def test_sdpa_and_grouped_attention_equal_transformers_eager(name):
    """Masked logits of a whole uncached forward: kvprobe's two attentions vs transformers' eager."""
    from kvprobe.reference import transformers_eager, uncached_mask

    import kvprobe.attention as attention

    model = kvprobe.load_model(name)
    assert model.hf.config._attn_implementation == KVPROBE_SDPA  # kvprobe's default
    h = make_history(model)
    ids = torch.tensor([h.input_ids.tolist() + suffix_ids(model, h, QUESTIONS[0])])
    hidden = Mask(h.span("A")).hidden_positions(len(h))
    mask = uncached_mask(model, ids.shape[1], len(h), hidden)
    calls = []

    def both(module, q, k, v, m, dropout=0.0, scaling=None, softcap=None, **kw):
        out, _ = kvprobe_attention(module, q, k, v, m, dropout, scaling, softcap, **kw)
        ref, _ = grouped_eager_attention(module, q, k, v, m, dropout, scaling, softcap, **kw)
        calls.append(float((out - ref).abs().max()))
        return out, None

    from transformers import AttentionInterface

    AttentionInterface.register("kvprobe-both", both)
    with torch.inference_mode():
        model.hf.set_attn_implementation("kvprobe-both")
        model.hf(input_ids=ids, attention_mask=mask, use_cache=False)
        model.hf.set_attn_implementation(KVPROBE_SDPA)
    assert len(calls) == len(model.arch.attention_layers) and max(calls) <= CALL_TOL
    with torch.inference_mode():
        with transformers_eager(model):
            eager = model.hf(input_ids=ids, attention_mask=mask, use_cache=False).logits
        sdpa = model.hf(input_ids=ids, attention_mask=mask, use_cache=False).logits
        model.hf.set_attn_implementation(GROUPED_EAGER)
        grouped = model.hf(input_ids=ids, attention_mask=mask, use_cache=False).logits
        model.hf.set_attn_implementation(KVPROBE_SDPA)
    assert (grouped - eager).abs().max().item() <= 1e-5  # only the head grouping differs
    assert (sdpa - eager).abs().max().item() <= SDPA_TOL
    # the tolerance is far below what masking changes
    assert (sdpa - eager).abs().max().item() < (sdpa[0, -1] - sdpa[0, -2]).abs().max().item()


def test_kvprobe_attention_dispatch_on_random_inputs(llama):
    """The function itself: SDPA = eager (GQA, per-head masks, Dv != D); probabilities and softcap go eager."""
    torch.manual_seed(0)
    module = llama.hf.model.layers[0].self_attn
    B, H, KVH, Q, S, D = 2, 4, 2, 3, 9, 16
    q, k = torch.randn(B, H, Q, D), torch.randn(B, KVH, S, D)
    for v in (torch.randn(B, KVH, S, D), torch.randn(B, KVH, S, 8)):
        for mask in (torch.randn(B, 1, Q, S), torch.randn(B, H, Q, S), None):
            out, probs = kvprobe_attention(module, q, k, v, mask, scaling=0.25)
            ref, ref_probs = grouped_eager_attention(module, q, k, v, mask, scaling=0.25)
            assert probs is None and torch.allclose(out, ref, atol=1e-6)
    with forward_context(probabilities_for({module.layer_idx})):
        out, probs = kvprobe_attention(module, q, k, v, None, scaling=0.25)
    assert torch.allclose(probs, ref_probs, atol=1e-6)
    out, probs = kvprobe_attention(module, q, k, v, None, scaling=0.25, softcap=2.0)
    ref, ref_probs = grouped_eager_attention(module, q, k, v, None, scaling=0.25, softcap=2.0)
    assert probs is not None and torch.allclose(out, ref, atol=1e-6)


def test_shared_attention_function_with_several_bases_and_per_head_masks(llama):
    """Rows of two histories of different lengths (and a row reading a third), per-head masks, softcap,
    query blocks split into pieces: equal to eager over each row's concatenated K/V."""
    import kvprobe.attention as attention

    torch.manual_seed(1)
    module = llama.hf.model.layers[0].self_attn
    H, KVH, D, Q, F = 4, 2, 16, 3, 5
    bases = [(torch.randn(1, KVH, T, D), torch.randn(1, KVH, T, D)) for T in (7, 11, 4)]
    of_row = torch.tensor([1, 0, 1, 2, 1])
    B, T0 = len(of_row), 11
    layer = SharedSlotLayer(bases, of_row, T0, spare=8)
    from transformers import DynamicCache
    from kvprobe.forward_context import ForwardContext

    with forward_context(ForwardContext(cache=DynamicCache())):  # updates happen inside traced forwards
        layer.update(torch.randn(B, KVH, F, D), torch.randn(B, KVH, F, D))
    full_k, full_v = layer.full_kv()
    q = torch.randn(B, H, Q, D)
    for mask in (torch.randn(B, 1, Q, T0 + F), torch.randn(B, H, Q, T0 + F)):
        for softcap in (None, 3.0):
            valid = torch.zeros(B, 1, 1, T0 + F, dtype=torch.bool)
            for r, j in enumerate(of_row.tolist()):
                valid[r, ..., : bases[j][0].shape[2]] = True
            valid[..., T0:] = True
            eager_mask = mask.masked_fill(~valid, torch.finfo(torch.float32).min)
            ref, ref_probs = grouped_eager_attention(module, q, full_k, full_v, eager_mask, scaling=0.3, softcap=softcap)
            for block in (attention.SHARED_SCORE_BLOCK, B * H * (sum(b[0].shape[2] for b in bases) + F)):
                old, attention.SHARED_SCORE_BLOCK = attention.SHARED_SCORE_BLOCK, block  # 1 query row per block
                try:
                    out, probs = shared_attention(module, q, layer, eager_mask, 0.3, softcap, want_probabilities=True)
                finally:
                    attention.SHARED_SCORE_BLOCK = old
                assert torch.allclose(out, ref, atol=1e-6)
                assert torch.allclose(probs, ref_probs, atol=1e-6)


@pytest.mark.parametrize("name", SHARING)
def test_shared_batches_equal_per_row_copies(name):
    """Access-only rows of one history: same scores and tokens as a copy per row."""
    model = kvprobe.load_model(name)
    h = make_history(model)
    items = [(h, Request(q, c)) for c in _conditions(h) for q in QUESTIONS]
    _assert_same(_answers(model, items, True), _answers(model, items, False), SHARED_TOL)
    assert h.check_digest()


def test_shared_layout_holds_one_history_copy(llama):
    """The shared layer references the history's own tensors and stores only new slots per row."""
    h = make_history(llama)
    states = [c.prepare(llama, h) for c in _conditions(h)] * 5  # 15 access-only rows
    rows = fork_rows(states, share=True)
    layer = rows.cache.layers[0]
    assert isinstance(layer, SharedSlotLayer) and len(layer.bases) == 1
    assert layer.bases[0][0] is h.kv[0][0] and layer.bases[0][1] is h.kv[0][1]  # no copy at all
    per_row = fork_rows(states)
    assert isinstance(per_row.cache.layers[0], SlotLayer)
    shared_bytes = layer._key_buffer.numel() * 4
    copies_bytes = per_row.cache.layers[0]._key_buffer.numel() * 4
    T = len(h)
    assert layer._key_buffer.shape[2] < T  # new slots only
    assert copies_bytes >= 15 * T * layer._key_buffer.shape[1] * layer._key_buffer.shape[3] * 4 > shared_bytes
    # question block, then rows leave and are rolled back: still the shared layout, same logits as copies
    q = suffix_ids(llama, h, QUESTIONS[0])
    ids, valid = pad_suffix_block([q] * 15, llama.pad_id, llama.device)
    a = traced_forward(llama, rows, ids, valid).logits
    b = traced_forward(llama, per_row, ids, valid).logits
    assert torch.allclose(a, b, atol=LOGIT_TOL)
    keep = torch.tensor([0, 4, 7, 14])
    rows.select(keep)
    per_row.select(keep)
    end = rows.length
    step = torch.full((4, 1), 42)
    traced_forward(llama, rows, torch.full((4, 3), 7))
    rows.truncate(end)
    assert isinstance(rows.cache.layers[0], SharedSlotLayer) and rows.cache.layers[0].get_seq_length() == end
    assert torch.allclose(traced_forward(llama, rows, step).logits, traced_forward(llama, per_row, step).logits,
                          atol=LOGIT_TOL)
    with pytest.raises(ValueError, match="shared history"):
        rows.cache.layers[0].truncate(3)


def test_distinct_histories_keep_per_row_layout(llama):
    """A layer whose rows all read different tensors gains nothing from sharing: per-row copies."""
    h = make_history(llama)
    states = [Zero(h.span("A"), "kv").prepare(llama, h), h.base_state()]
    rows = fork_rows(states, share=True)
    assert all(type(layer) is SlotLayer for layer in rows.cache.layers)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3", "tiny-gemma4", "tiny-qwen3.5", "tiny-qwen3-moe"])
def test_mixed_batches_of_access_only_and_editing_rows(name):
    """Access-only rows share the history; zero, compact and rebuild rows share their own edited copy
    across questions; two histories of different lengths in one batch; all as per-row copies."""
    model = kvprobe.load_model(name)
    short = make_history(model)
    long = model.prefill(kvprobe.Prompt(SEGMENTS + [("extra", "The archive room is locked on Sundays.")],
                                        system="Answer from the records."))
    items = []
    for h in (short, long):
        conds = _conditions(h)
        A = h.span("A")
        conds += [Zero(A, "kv")] if not model.arch.recurrent_layers else []
        conds += [Compact(A)] if model.arch.row_deletion_refusal is None else []
        conds += [Rebuild(A)]
        items += [(h, Request(q, c)) for c in conds for q in QUESTIONS]
    # MoE: each batch's tokens are routed together, so identical batches are compared
    _assert_same(_answers(model, items, True, max_new_tokens=10), _answers(model, items, False, max_new_tokens=10),
                 SHARED_TOL)
    assert short.check_digest() and long.check_digest()


def test_attention_capture_through_shared_rows(llama):
    """Captured attention probabilities of shared rows equal those of per-row copies."""
    h = make_history(llama)
    conds = _conditions(h)
    layers = llama.arch.attention_layers
    shared = question_logits(llama, h, QUESTIONS[0], conds * 2, capture_attention=layers)
    llama.share_history = False
    try:
        per_row = question_logits(llama, h, QUESTIONS[0], conds * 2, capture_attention=layers)
    finally:
        llama.share_history = True
    for layer in layers:
        assert torch.allclose(shared.attention[layer], per_row.attention[layer], atol=1e-6)
    assert torch.allclose(shared.logits, per_row.logits, atol=LOGIT_TOL)


def test_mla_cannot_share_and_says_why():
    model = kvprobe.load_model("tiny-deepseek-v2")
    assert not shares_history(model)
    assert "expands the cached tensors" in model.arch.shared_history_refusal
    h = make_history(model)
    states = [h.base_state()] * 3
    rows = fork_rows(states, share=True)  # forced: the attention refuses rather than compute wrongly
    ids, valid = pad_suffix_block([suffix_ids(model, h, QUESTIONS[0])] * 3, model.pad_id, model.device)
    with pytest.raises(RuntimeError, match="cannot share histories"):
        traced_forward(model, rows, ids, valid)
    from kvprobe.tools.verify import verify_model

    refused = [r for r in verify_model(model) if r.check == "shared_history_equals_per_row"]
    assert refused and refused[0].passed and "latent" in refused[0].refused


def test_a_plain_forward_on_a_shared_cache_is_refused(llama):
    """Outside traced_forward nothing would read the shared history: refused, not silently wrong."""
    h = make_history(llama)
    rows = fork_rows([h.base_state()] * 2, share=True)
    with pytest.raises(RuntimeError, match="only read inside"):
        with torch.inference_mode():
            llama.hf(input_ids=torch.tensor([[5], [6]]), position_ids=torch.full((2, 1), len(h)),
                     use_cache=True, **cache_argument(llama.hf, rows.cache))
