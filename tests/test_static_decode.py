"""Fixed-shape decoding (kvprobe.static_decode, the path a GPU replays as a CUDA graph) against the ordinary
decode: run eagerly on the CPU in fp32, every step's logits equal the ordinary shared-history step's, and
``generate`` gives the same tokens with the path switched on as with it off."""

from __future__ import annotations

import pytest
import torch

import kvprobe
from kvprobe import Full, Mask, matched_control
from kvprobe import decoding
from kvprobe.decoding import Request, prepare_states, run_questions, suffix_ids
from kvprobe.forward import traced_forward
from kvprobe.rows import fork_rows
from kvprobe.static_decode import StaticDecoder, static_refusal

from conftest import QUESTIONS, make_history

TOL = 1e-4  # fp32 logits: one SDPA call sums the same products in another order than the two-part softmax
STEPS = 6


def _conditions(h):
    source = Mask(h.span("A"), name="source")
    return {"full": Full(), "source": source, "control": matched_control(h, source, segment="note")}


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-olmo2", "tiny-phi3"])
def test_every_fixed_shape_step_equals_the_ordinary_step(name):
    """Rows of different question lengths (padded slots), hidden records and the full history: the
    packed step's logits equal the ordinary step's at every step, fed the same tokens."""
    model = kvprobe.load_model(name)
    h = make_history(model)
    items = [(h, Request(q, c)) for q in QUESTIONS for c in _conditions(h).values()]
    suffixes = [suffix_ids(model, h, q) for (_, r) in items for q in [r.question]]
    assert len({len(s) for s in suffixes}) > 1, "the rows must be padded differently"
    ordinary, last = run_questions(model, prepare_states(model, items), suffixes)
    packed, last2 = run_questions(model, prepare_states(model, items), suffixes)
    assert torch.equal(last, last2)
    assert static_refusal(model, packed) is None
    decoder = StaticDecoder(model, packed, steps=STEPS)
    nxt = last.argmax(dim=-1)
    for _ in range(STEPS):
        expected = traced_forward(model, ordinary, nxt[:, None], logits_to_keep=1).logits[:, -1]
        got = decoder.step(nxt)
        assert (got - expected).abs().max() < TOL
        nxt = expected.argmax(dim=-1)
    with pytest.raises(RuntimeError, match="room for 6 steps"):
        decoder.step(nxt)


def test_generate_takes_the_fixed_shape_path_and_answers_the_same(llama, monkeypatch):
    h = make_history(llama)
    conditions = _conditions(h)
    before = llama.generate(h, QUESTIONS, access=conditions, max_new_tokens=8)
    built = []
    real = decoding.StaticDecoder
    monkeypatch.setattr(decoding, "StaticDecoder", lambda *a, **k: built.append(k) or real(*a, **k))
    monkeypatch.setattr(decoding, "STATIC_DECODE_DEVICES", ("cuda", "cpu"))
    after = llama.generate(h, QUESTIONS, access=conditions, max_new_tokens=8)
    assert built == [{"graph": False}], "one fixed-shape decoder for the one batch, eager on the CPU"
    assert after == before


def test_batches_the_fixed_shapes_cannot_hold_are_refused_by_name(llama, gemma, hybrid):
    h = make_history(llama)
    layered = Mask(h.span("A"), layers=llama.arch.attention_layers[:1]).prepare(llama, h)
    rows = fork_rows([layered, Full().prepare(llama, h)], share=True)
    assert static_refusal(llama, rows) == "layers hide different slots"
    assert static_refusal(llama, fork_rows([Full().prepare(llama, h)] * 2)) == \
        "the rows do not read a shared history"
    other = make_history(llama, chat=False)
    two = fork_rows([Full().prepare(llama, h), Full().prepare(llama, other)] * 2, share=True)
    assert static_refusal(llama, two) == "the rows read more than one history"
    for model in (gemma, hybrid):
        g = make_history(model)
        reason = static_refusal(model, fork_rows([Full().prepare(model, g)] * 2, share=True))
        assert reason.startswith("only models whose every layer is full attention")
    with pytest.raises(ValueError, match="cannot decode in fixed shapes: layers hide different slots"):
        StaticDecoder(llama, fork_rows([layered, Full().prepare(llama, h)], share=True), steps=2)
