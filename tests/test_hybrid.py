"""Hybrid models (Gated DeltaNet + full attention): masks and operations act on attention layers only,
recurrent states are carried per row and recomputed by rebuild and text recompute."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from kvprobe import Full, Mask, SpanError
from kvprobe.access import LayerError
from kvprobe.tools.verify import verify_model
from kvprobe.interventions import Compact, Drop, OperationError, Rebuild, TextRecompute, Zero
from kvprobe.transformers_api import cache_argument

from conftest import QUESTIONS, make_history


def test_architecture_summary(hybrid):
    a = hybrid.arch
    assert a.layer_types == ("linear_attention", "full_attention", "linear_attention", "full_attention")
    assert a.attention_layers == (1, 3) and a.recurrent_layers == (0, 2)


def test_history_carries_recurrent_states(hybrid):
    h = make_history(hybrid)
    assert set(h.recurrent) == {0, 2}
    assert h.kv[0] == (None, None) and h.kv[1][0].shape[2] == len(h)
    conv, rec = h.recurrent[0]
    assert conv.shape[-1] == hybrid.hf.config.linear_conv_kernel_dim and rec.abs().sum() > 0


def test_masks_apply_to_attention_layers_only(hybrid):
    h = make_history(hybrid)
    with pytest.raises(LayerError, match="not an attention layer|is an attention layer"):
        hybrid.score(h, QUESTIONS[0], ["Room 18"], access=Mask(h.span("A"), layers=[0, 2]))
    state = Mask(h.span("A")).prepare(hybrid, h)
    assert set(state.hidden) == {1, 3}


def test_batched_rows_equal_single_rows_and_prefix_unchanged(hybrid):
    h = make_history(hybrid)
    span = h.span("A")
    conds = {"full": Full(), "mask": Mask(span), "rebuild": Rebuild(span), "zero": Zero(span, "kv"),
             "recompute": TextRecompute("A")}
    batched = hybrid.generate(h, QUESTIONS, access=conds, max_new_tokens=6)
    for name, cond in conds.items():
        for qi, q in enumerate(QUESTIONS):
            assert hybrid.generate(h, q, access=cond, max_new_tokens=6).token_ids == batched[name][qi].token_ids
    assert h.check_digest()


def test_rebuild_recomputes_recurrent_states(hybrid):
    h = make_history(hybrid)
    state = Rebuild(h.span("A")).prepare(hybrid, h)
    assert state.info["reused_tokens"] == 0  # recurrent states exist only after the whole history
    # Layer 0 reads only embeddings, so its state cannot change; layer 2 reads attention layer 1's output.
    assert torch.equal(state.recurrent[0][1], h.recurrent[0][1])
    assert float((state.recurrent[2][1] - h.recurrent[2][1]).abs().max()) > 1e-4
    a = h.span("A")
    for layer in hybrid.arch.attention_layers:  # rows before A come out unchanged
        assert float((state.kv[layer][0][:, :, : a.start] - h.kv[layer][0][:, :, : a.start]).abs().max()) <= 1e-5


def test_row_deleting_operations_refuse_recurrent_layers(hybrid):
    h = make_history(hybrid)
    for op in (Compact(h.span("A")), Drop(h.span("A"))):
        with pytest.raises(OperationError, match="recurrent states"):
            op.prepare(hybrid, h)
    with pytest.raises(SpanError, match="stored-prefix"):
        TextRecompute("A", stored_prefix=True).prepare(hybrid, h)


def test_verify_passes_on_hybrid(hybrid):
    results = verify_model(hybrid)
    assert all(r.passed for r in results), [r for r in results if not r.passed]
    assert {r.operation for r in results if r.refused} == {"compact", "drop", "recompute-prefix", "rebuild-segments",
                                                          "fixed-shape-decode"}  # recurrent layers decode step by step


def test_gated_deltanet_rounding_depends_only_on_chunk_boundaries(hybrid):
    """transformers' torch Gated DeltaNet kernel works in fp32 chunks of 64 tokens: a cached
    continuation equals one pass exactly when the history ends on a chunk boundary, and
    differs by rounding (not by an error in the states) when it does not."""
    torch.manual_seed(0)
    ids = torch.randint(5, 900, (1, 150))
    diffs = {}
    with torch.inference_mode():
        for T in (128, 100):
            one = hybrid.hf(input_ids=ids).logits[0, T:]
            cache = DynamicCache(config=hybrid.hf.config)
            hybrid.hf(input_ids=ids[:, :T], use_cache=True, **cache_argument(hybrid.hf, cache))
            two = hybrid.hf(input_ids=ids[:, T:], use_cache=True, **cache_argument(hybrid.hf, cache)).logits[0]
            diffs[T] = float((two - one).abs().max())
    assert diffs[128] == 0.0
    assert 0.0 < diffs[100] <= 1e-4


def test_early_stopping_rows_keep_recurrent_states_aligned(hybrid, monkeypatch):
    h = make_history(hybrid)
    conds = {"full": Full(), "mask": Mask(h.span("A")), "zero": Zero(h.span("A"), "v")}
    free = hybrid.generate(h, QUESTIONS[0], access=conds, max_new_tokens=8)
    stop_token = free["mask"].token_ids[1]
    monkeypatch.setattr(hybrid.hf.generation_config, "eos_token_id", [hybrid.tokenizer.eos_token_id, stop_token])
    batched = hybrid.generate(h, QUESTIONS[0], access=conds, max_new_tokens=8)
    assert batched["mask"].n_tokens <= 2
    for name, cond in conds.items():
        assert hybrid.generate(h, QUESTIONS[0], access=cond, max_new_tokens=8).token_ids == batched[name].token_ids
