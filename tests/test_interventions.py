"""Cache operations against independent references on every tiny family."""

from __future__ import annotations

import warnings

import pytest
import torch
from transformers import DynamicCache

import kvprobe
from kvprobe.access import LayerError
from kvprobe.interventions import ConditionSpecError
from kvprobe import Compose, Full, Mask, SpanError
from kvprobe.access import positions_of
from kvprobe.decoding import question_logits, suffix_ids
from kvprobe.reference import reference_generate, reference_hidden_kv
from kvprobe.interventions import (
    Compact, Drop, OnlineMask, OperationError, Rebuild, SelectiveRefresh, SessionOrderBias, SoftBias,
    TextRecompute, Zero, parse_condition, rotate_keys, session_gate,
)
from kvprobe.tools.verify.operations import _max_kv_diff, prerope_keys, rope_with_model
from kvprobe.tools.verify import LOGIT_TOLERANCE
from kvprobe.transformers_api import cache_argument

from conftest import QUESTIONS, make_history

TOL = 1e-4
STEPS = 10


def _hidden(h, span):
    return positions_of([span], len(h))


def _logits(model, h, conditions, question=QUESTIONS[0]):
    return question_logits(model, h, question, conditions).logits


# --------------------------------------------------------------------------- zeroing

def test_zero_overwrites_rows_and_keeps_positions(tiny_model):
    h = make_history(tiny_model)
    span = h.span("A")
    state = Zero(span, "k").prepare(tiny_model, h)
    for layer in tiny_model.arch.attention_layers:
        k, v = state.kv[layer]
        assert float(k[:, :, span.start : span.end].abs().max()) == 0.0
        assert torch.equal(v, h.kv[layer][1])
        assert torch.equal(k[:, :, span.end :], h.kv[layer][0][:, :, span.end :])
    assert state.length == len(h) and torch.equal(state.key_pos, h.positions)
    assert h.check_digest()


def test_zeroed_keys_stay_in_the_normalizer_unlike_masked_keys(tiny_model):
    """Attention probability on zero-K rows is positive; on masked rows it is exactly 0.

    Full-attention layers only: on Gemma's sliding layers A lies outside the question's window.
    """
    h = make_history(tiny_model)
    span = h.span("A")
    layers = tuple(i for i, t in enumerate(tiny_model.arch.layer_types) if t == "full_attention")
    out = question_logits(tiny_model, h, QUESTIONS[0], [Zero(span, "k"), Mask(span)], capture_attention=layers)
    zero_mass = min(float(out.attention[l][0][..., span.start : span.end].sum(-1).min()) for l in layers)
    mask_mass = max(float(out.attention[l][1][..., span.start : span.end].max()) for l in layers)
    assert zero_mass > 0.0
    assert mask_mass == 0.0


def test_zero_layer_selection(llama):
    h = make_history(llama)
    state = Zero(h.span("A"), "kv", layers=[1]).prepare(llama, h)
    assert torch.equal(state.kv[0][0], h.kv[0][0])
    assert not torch.equal(state.kv[1][0], h.kv[1][0])
    with pytest.raises(LayerError, match="do not exist"):
        Zero(h.span("A"), layers=[9]).prepare(llama, h)
    with pytest.raises(ValueError, match="component"):
        Zero(h.span("A"), "q")


def test_zero_then_mask_equals_mask(llama):
    """Masked rows are never read, so zeroing them first changes nothing (composition works)."""
    h = make_history(llama)
    span = h.span("A")
    logits = _logits(llama, h, [Mask(span), Compose(Zero(span, "kv"), Mask(span))])
    assert torch.equal(logits[0], logits[1])


# --------------------------------------------------------------------------- bias

def test_zero_bias_is_full_and_large_negative_bias_is_a_mask(tiny_model):
    h = make_history(tiny_model)
    span = h.span("A")
    logits = _logits(tiny_model, h, [Full(), SoftBias([(span, 0.0)]), Mask(span), SoftBias([(span, -1e4)]),
                                      SoftBias([(span, -0.7)])])
    assert torch.equal(logits[0], logits[1])
    assert float((logits[3] - logits[2]).abs().max()) <= TOL
    assert torch.isfinite(logits[4]).all()
    assert float((logits[4] - logits[0]).abs().max()) > 1e-3


def test_bias_rejects_infinite_values_and_bad_positions(llama):
    h = make_history(llama)
    with pytest.raises(ValueError, match="not finite"):
        SoftBias({3: float("-inf")})
    with pytest.raises(SpanError, match="outside the history"):
        SoftBias({len(h) + 3: -1.0}).prepare(llama, h)


def test_session_gate_words():
    assert session_gate("What was my previous address?") == 0
    assert session_gate("Where did I live in March?") == 0
    assert session_gate("What did I buy in 2021?") == 0
    assert session_gate("How many days ago did I start?") == 0
    assert session_gate("How many weeks did the course take?") == 0
    assert session_gate("What is my current address?") == 1
    assert session_gate("Where is the firstborn?") == 1  # whole words only


def test_session_order_bias_values(llama):
    h = make_history(llama)
    sessions = [h.span("A"), h.span("note"), h.span("B")]
    bias = SessionOrderBias(sessions)
    vec = bias.bias_vector(len(h), "What is the room now?")
    assert vec[sessions[0].start].item() == pytest.approx(-0.6931471805599453)
    assert vec[sessions[1].start].item() == pytest.approx(-0.6931471805599453 / 2)
    assert vec[sessions[2].start].item() == 0.0
    assert vec[: sessions[0].start].abs().sum() == 0
    assert bias.bias_vector(len(h), "What was the room before?").abs().sum() == 0
    # Gated questions get full access exactly, in a batch with ungated ones.
    outs = llama.generate(h, ["What was the room before?", QUESTIONS[0]], access={"bias": bias, "full": Full()},
                          max_new_tokens=6)
    assert outs["bias"][0].token_ids == outs["full"][0].token_ids


# --------------------------------------------------------------------------- recompute family

@pytest.mark.parametrize("kind", ["rebuild", "refresh", "refresh-full", "online"])
def test_recomputed_states_generate_like_the_uncached_reference(tiny_model, kind):
    h = make_history(tiny_model)
    span, replacement = h.span("A"), h.span("B")
    op, start = {
        "rebuild": (Rebuild(span), span.start),
        "refresh": (SelectiveRefresh(span), span.end),
        "refresh-full": (SelectiveRefresh(span, full=True), 0),
        "online": (OnlineMask(span, replacement), replacement.end),
    }[kind]
    got = tiny_model.generate(h, QUESTIONS[0], access=op, max_new_tokens=STEPS)
    ref = reference_generate(tiny_model, h.input_ids.tolist(), suffix_ids(tiny_model, h, QUESTIONS[0]),
                             _hidden(h, span), max_new_tokens=STEPS, hidden_from=start)
    assert list(got.token_ids) == ref
    assert h.check_digest()


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-gemma3", "tiny-qwen3.5"])
def test_online_mask_hides_each_record_only_after_its_own_replacement(family):
    """Two records, two replacements (A replaced by the note, the note by B): the states equal one
    uncached forward whose explicit 4-D mask hides A from rows after the note and the note from rows
    after B, and differ from hiding both after the first replacement."""
    model = kvprobe.load_model(family)
    h = make_history(model)
    a, note, b = h.span("A"), h.span("note"), h.span("B")
    online = OnlineMask([a, note], [note, b])
    first = torch.full((len(h),), len(h), dtype=torch.long)
    first[a.start:a.end], first[note.start:note.end] = note.end, b.end
    assert torch.equal(online.hidden_from(len(h)), first)
    hidden = positions_of([a, note], len(h))
    state = online.prepare(model, h)
    ref = reference_hidden_kv(model, h.input_ids, hidden, first)
    assert _max_kv_diff(state.kv, ref, model.arch.kv_layers) <= LOGIT_TOLERANCE
    early = reference_hidden_kv(model, h.input_ids, hidden, note.end)  # both hidden after the first update
    assert _max_kv_diff(state.kv, early, model.arch.kv_layers) > 100 * LOGIT_TOLERANCE
    got = model.generate(h, QUESTIONS[0], access=online, max_new_tokens=STEPS)
    want = reference_generate(model, h.input_ids.tolist(), suffix_ids(model, h, QUESTIONS[0]), hidden,
                              max_new_tokens=STEPS, hidden_from=first)
    assert list(got.token_ids) == want
    assert h.check_digest()


def test_online_mask_needs_one_replacement_per_record(llama):
    h = make_history(llama)
    with pytest.raises(SpanError, match="2 superseded spans but 1 replacements"):
        OnlineMask([h.span("A"), h.span("note")], [h.span("B")])
    with pytest.raises(SpanError, match="must end before its replacement"):
        OnlineMask([h.span("A"), h.span("B")], [h.span("note"), h.span("note")])


def test_rebuild_changes_later_states_but_not_earlier_rows(llama):
    h = make_history(llama)
    span = h.span("A")
    state = Rebuild(span).prepare(llama, h)
    for layer in llama.arch.attention_layers:
        assert torch.equal(state.kv[layer][0][:, :, : span.start], h.kv[layer][0][:, :, : span.start])
    later = max(float((state.kv[l][0][:, :, span.end :] - h.kv[l][0][:, :, span.end :]).abs().max())
                for l in llama.arch.attention_layers[1:])
    assert later > 1e-3
    refresh = SelectiveRefresh(span).prepare(llama, h)
    for layer in llama.arch.attention_layers:
        assert float((refresh.kv[layer][0] - state.kv[layer][0]).abs().max()) <= 1e-5


def test_online_mask_requires_order(llama):
    h = make_history(llama)
    with pytest.raises(SpanError, match="must end before"):
        OnlineMask(h.span("B"), h.span("A"))


def test_rebuild_in_small_chunks_equals_one_chunk(gemma):
    h = make_history(gemma)
    one = Rebuild(h.span("A")).prepare(gemma, h)
    small = Rebuild(h.span("A"), chunk_size=7).prepare(gemma, h)
    for layer in gemma.arch.attention_layers:
        assert float((one.kv[layer][0] - small.kv[layer][0]).abs().max()) <= TOL


# --------------------------------------------------------------------------- compaction

def test_rerotation_algebra_in_float64(llama):
    """R(-g) R(p) k == R(p - g) k with the model's own apply_rotary_pos_emb and float64 angles."""
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    from kvprobe.interventions.rope import inv_freq_for_layer

    torch.manual_seed(0)
    k = torch.randn(1, 2, 50, llama.arch.layers[0].key_shape[1], dtype=torch.float64)
    p = torch.arange(50) + 37
    g = torch.randint(0, 30, (50,))
    inv = inv_freq_for_layer(llama, 0).double()

    def rope(positions):
        angles = positions.double()[:, None] * inv[None, :]
        emb = torch.cat((angles, angles), dim=-1)
        return apply_rotary_pos_emb(k, k, emb.cos()[None], emb.sin()[None])[1]

    moved = rotate_keys(rope(p), -g, inv)
    assert float((moved - rope(p - g)).abs().max()) <= 1e-12


def test_compacted_cache_generates_like_a_rebuilt_transformers_cache(tiny_model):
    """Reference: pre-RoPE keys rotated by the model's own rotary code at new positions, plain HF decoding."""
    h = make_history(tiny_model)
    span = h.span("A")
    got = tiny_model.generate(h, QUESTIONS[0], access=Compact(span), max_new_tokens=STEPS)
    kept = ~_hidden(h, span)
    n = int(kept.sum())
    pre = prerope_keys(tiny_model, h.input_ids)
    data = [(rope_with_model(tiny_model, layer, pre[layer][:, :, kept], torch.arange(n)), h.kv[layer][1][:, :, kept])
            for layer in range(tiny_model.arch.num_layers)]
    cache = DynamicCache(ddp_cache_data=data)
    ids = suffix_ids(tiny_model, h, QUESTIONS[0])
    pos, out = n, []
    with torch.inference_mode():
        step = torch.tensor([ids])
        for _ in range(STEPS):
            logits = tiny_model.hf(input_ids=step, position_ids=torch.arange(pos, pos + step.shape[1])[None],
                                   use_cache=True, **cache_argument(tiny_model.hf, cache)).logits
            pos += step.shape[1]
            tok = int(logits[0, -1].argmax())
            out.append(tok)
            if tok in tiny_model.eos_ids:
                break
            step = torch.tensor([[tok]])
    assert list(got.token_ids) == out


def test_compact_and_drop_bookkeeping(llama):
    h = make_history(llama)
    span = h.span("A")
    T, n = len(h), len(span)
    compact = Compact(span).prepare(llama, h)
    drop = Drop(span).prepare(llama, h)
    drop_orig = Drop(span, positions="original").prepare(llama, h)
    per_token = llama.arch.kv_bytes_per_token(llama.dtype)
    for state in (compact, drop, drop_orig):
        assert state.length == T - n
        assert state.info == {"removed_rows": n, "freed_bytes": n * per_token}
        assert state.slot_of[span.start : span.end].eq(-1).all()
        assert state.slot_of[span.end] == span.start
    assert torch.equal(compact.key_pos, torch.arange(T - n))
    assert torch.equal(drop.key_pos, torch.arange(T - n))
    assert int(drop_orig.key_pos.max()) == T - 1
    # drop keeps stored keys as they were; compact re-rotates the ones after the span
    assert torch.equal(drop.kv[0][0][:, :, span.start :], h.kv[0][0][:, :, span.end :])
    assert not torch.equal(compact.kv[0][0][:, :, span.start :], h.kv[0][0][:, :, span.end :])
    assert torch.equal(compact.kv[0][0][:, :, : span.start], h.kv[0][0][:, :, : span.start])


def test_mask_after_compact_maps_through_slots(llama):
    """A mask written in history coordinates applies to the shifted slots after compaction."""
    h = make_history(llama)
    note = h.span("note")
    state = Compose(Compact(h.span("A")), Mask(note)).prepare(llama, h)
    hidden = state.hidden[0]
    assert int(hidden.sum()) == len(note)
    assert hidden[int(state.slot_of[note.start])] and hidden[int(state.slot_of[note.end - 1])]


def test_operation_order_and_refusals(llama):
    h = make_history(llama)
    with pytest.raises(OperationError, match="must come first"):
        Compose(Mask(h.span("note")), Compact(h.span("A"))).prepare(llama, h)
    with pytest.raises(SpanError, match="every history row"):
        Drop(kvprobe.TokenSpan(0, len(h))).prepare(llama, h)
    with pytest.raises(SpanError, match="outside the history"):
        Compact(kvprobe.TokenSpan(len(h) - 1, len(h) + 2)).prepare(llama, h)


def test_compaction_refuses_dynamic_rope():
    from transformers import LlamaConfig, LlamaForCausalLM

    from kvprobe.tiny import tiny_tokenizer

    tok = tiny_tokenizer()
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                      rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
                      attn_implementation="eager", eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model = kvprobe.Model(LlamaForCausalLM(cfg), tok, name="tiny-dynamic")
    h = make_history(model)
    with pytest.raises(OperationError, match="dynamic"):
        Compact(h.span("A")).prepare(model, h)


# --------------------------------------------------------------------------- text recompute

def test_text_recompute_equals_fresh_prefill(tiny_model):
    h = make_history(tiny_model)
    full_op, prefix_op = TextRecompute("A"), TextRecompute("A", stored_prefix=True)
    fresh = tiny_model.prefill(full_op.edited_prompt(h))
    assert "Record A" not in fresh.text
    full, prefix = full_op.prepare(tiny_model, h), prefix_op.prepare(tiny_model, h)
    assert torch.equal(full.input_ids, fresh.input_ids) and torch.equal(prefix.input_ids, fresh.input_ids)
    assert prefix.info["prefix_identical"] and prefix.info["reused_tokens"] == h.span("A").start
    for layer in tiny_model.arch.attention_layers:
        assert torch.equal(full.kv[layer][0], fresh.kv[layer][0])
        assert float((prefix.kv[layer][0] - fresh.kv[layer][0]).abs().max()) <= TOL
    got = tiny_model.generate(h, QUESTIONS, access={"full": full_op, "prefix": prefix_op}, max_new_tokens=STEPS)
    want = tiny_model.generate(fresh, QUESTIONS, max_new_tokens=STEPS)["full"]
    assert [g.token_ids for g in got["full"]] == [g.token_ids for g in want]
    assert [g.token_ids for g in got["prefix"]] == [g.token_ids for g in want]
    # original positions after the deleted segment map to their new slots
    b = h.span("B")
    assert full.slot_of[b.start] == fresh.span("B").start
    assert full.slot_of[h.span("A").start] == -1


def test_text_recompute_of_token_spans_equals_fresh_prefill(tiny_model):
    """The operation-matched control of a recompute (paper L4535-4537): deleting the characters of as many
    note tokens as record A has equals a fresh prefill of the edited text; positions map through."""
    h = make_history(tiny_model)
    control = kvprobe.matched_control(h, Mask(h.span("A")), "note")
    op = TextRecompute(spans=control.spans, name="recompute-control")
    edited = op.edited_prompt(h)
    (lo, hi), = op.deleted(h)
    assert dict(edited.segments)["note"] == h.text[h.rendered.segments["note"][0]:lo] + h.text[hi:h.rendered.segments["note"][1]]
    assert dict(edited.segments)["A"] == dict(h.prompt.segments)["A"]
    fresh = tiny_model.prefill(edited)
    state = op.prepare(tiny_model, h)
    assert torch.equal(state.input_ids, fresh.input_ids)
    for layer in tiny_model.arch.attention_layers:
        assert torch.equal(state.kv[layer][0], fresh.kv[layer][0])
    assert state.slot_of[h.span("A").start] == fresh.span("A").start
    assert all(state.slot_of[i] == -1 for i in range(control.spans[0].start, control.spans[0].end))
    got = tiny_model.generate(h, QUESTIONS, access={"control": op}, max_new_tokens=STEPS)["control"]
    want = tiny_model.generate(fresh, QUESTIONS, max_new_tokens=STEPS)["full"]
    assert [g.token_ids for g in got] == [g.token_ids for g in want]


def test_text_recompute_span_errors(llama):
    h = make_history(llama)
    with pytest.raises(SpanError, match="one of the two"):
        TextRecompute()
    with pytest.raises(SpanError, match="one of the two"):
        TextRecompute("A", spans=(h.span("note"),))
    across = kvprobe.TokenSpan(h.span("A").end - 1, h.span("note").start + 1)
    with pytest.raises(SpanError, match="not inside one segment"):
        TextRecompute(spans=(across,)).prepare(llama, h)
    with pytest.raises(SpanError, match="outside the history"):
        TextRecompute(spans=(kvprobe.TokenSpan(len(h) - 1, len(h) + 3),)).prepare(llama, h)


def test_stored_prefix_reports_a_retokenized_boundary(llama):
    h = llama.prefill(kvprobe.Prompt([("X", "re"), ("A", "cordrecord"), ("B", " end")], chat=False, sep=""))
    op = TextRecompute("A", stored_prefix=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        state = op.prepare(llama, h)
    assert state.info["prefix_identical"] is False
    assert any("retokenized differently" in str(w.message) for w in caught)
    fresh = llama.prefill(op.edited_prompt(h))
    assert torch.equal(state.input_ids, fresh.input_ids)
    for layer in llama.arch.attention_layers:
        assert float((state.kv[layer][0] - fresh.kv[layer][0]).abs().max()) <= TOL


def test_text_recompute_errors(llama):
    h = make_history(llama)
    with pytest.raises(SpanError, match="no segment 'Z'"):
        TextRecompute("Z").prepare(llama, h)
    with pytest.raises(SpanError, match="every segment"):
        TextRecompute(["A", "note", "B"]).prepare(llama, h)


# --------------------------------------------------------------------------- batching and names

def test_operations_of_different_lengths_batch_like_single_rows(gemma):
    h = make_history(gemma)
    span = h.span("A")
    conds = {"full": Full(), "mask": Mask(span), "compact": Compact(span), "drop": Drop(span),
             "recompute": TextRecompute("A"), "rebuild": Rebuild(span), "zero": Zero(span, "v"),
             "bias": SoftBias([(span, -1.0)])}
    batched = gemma.generate(h, QUESTIONS, access=conds, max_new_tokens=8)
    for name, cond in conds.items():
        for qi, q in enumerate(QUESTIONS):
            alone = gemma.generate(h, q, access=cond, max_new_tokens=8)
            assert alone.token_ids == batched[name][qi].token_ids, name
    assert h.check_digest()


def test_parse_condition(llama):
    h = make_history(llama)
    assert isinstance(parse_condition("compact:A", h), Compact)
    online = parse_condition("online-mask:A>B", h)
    assert isinstance(online, OnlineMask) and online.replacements == (h.span("B"),)
    masked = parse_condition("mask:A@0-1,3", h)
    assert masked.layers == (0, 1, 3)
    assert isinstance(parse_condition("recompute-prefix:A", h), TextRecompute)
    assert parse_condition("bias:A=-0.5", h).values[0] == (h.span("A").start, -0.5)
    with pytest.raises(ConditionSpecError, match="unknown condition 'squash'"):
        parse_condition("squash:A", h)
    with pytest.raises(SpanError, match="OLD>NEW"):
        parse_condition("online-mask:A", h)


def test_prepared_condition_reuses_the_same_state(llama):
    h = make_history(llama)
    op = Rebuild(h.span("A"))
    prepared = kvprobe.Prepared.of(llama, h, op)
    direct = llama.score(h, QUESTIONS[0], ["Room 18", "Room 12"], access=op)
    reused = llama.score(h, QUESTIONS[0], ["Room 18", "Room 12"], access=prepared)
    assert direct.logprobs == reused.logprobs and reused.access == "rebuild"
    with pytest.raises(ValueError, match="question-dependent"):
        kvprobe.Prepared.of(llama, h, SessionOrderBias([h.span("A"), h.span("B")]))
