"""Head ablation and activation patching equal hand-written hooks on plain transformers forwards.

The references share no code with kvprobe's engine: transformers' eager attention on a copy of the
row's cache under an explicit 4-D mask (``kvprobe.reference.cached_explicit_forward``), with a torch
forward pre-hook on the layer's output projection (head ablation) or a forward hook on the decoder
layer that writes the source run's saved output (patching). Every attention-only tiny family
(the conftest's three) and the MLA family, float32.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import kvprobe
from conftest import QUESTIONS, make_history
from kvprobe import Compose, Full, Mask
from kvprobe.decoding import question_logits, suffix_ids
from kvprobe.engine import PatchError
from kvprobe.interventions import HeadAblation, OperationError, Patch
from kvprobe.interventions.components import head_means, output_projection
from kvprobe.reference import cached_explicit_forward

#: Logit agreement, float32 (the verify checks' 1e-4, relative to the largest logit when above 1).
TOLERANCE = 1e-4
MODELS = ("tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-deepseek-v2")

pytestmark = pytest.mark.usefixtures("one_thread")


def _diff(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp(min=1.0))


def _plain(model, h, condition, hooks=()):
    """A plain forward of the first question under ``condition``'s mask, with torch hooks installed."""
    state = condition.prepare(model, h, QUESTIONS[0])
    hidden = next(iter(state.hidden.values())) if state.hidden else None
    handles = [module.register_forward_hook(fn) if kind == "out" else module.register_forward_pre_hook(fn)
               for kind, module, fn in hooks]
    try:
        return cached_explicit_forward(model, dataclasses.replace(state, hidden={}, bias={}),
                                       suffix_ids(model, h, QUESTIONS[0]), hidden=hidden).logits[0]
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("value", ["zero", "mean"])
def test_head_ablation_equals_a_hook_on_a_plain_forward(name, value):
    model = kvprobe.load_model(name)
    h = make_history(model)
    layer, heads = model.arch.attention_layers[-1], (0, model.arch.num_heads - 1)
    ablation = HeadAblation(layer, heads, value)
    size = output_projection(model, layer).in_features // model.arch.num_heads
    replacement = None if value == "zero" else head_means(model, h, layer, heads)

    def ablate(_module, args):
        x = args[0].clone()
        for i, head in enumerate(heads):
            x[..., head * size:(head + 1) * size] = 0 if replacement is None else replacement[i]
        return (x,)

    got = question_logits(model, h, QUESTIONS[0], [ablation, Full()]).logits
    want = _plain(model, h, Full(), [("pre", output_projection(model, layer), ablate)])
    assert _diff(got[0], want) <= TOLERANCE
    assert float((got[0] - got[1]).abs().max()) > 1e-3  # the ablation changes something
    masked = Compose(Mask(h.span("A")), HeadAblation(layer, heads, value))  # composes with a mask
    want_masked = _plain(model, h, Mask(h.span("A")), [("pre", output_projection(model, layer), ablate)])
    assert _diff(question_logits(model, h, QUESTIONS[0], [masked]).logits[0], want_masked) <= TOLERANCE
    assert h.check_digest()


@pytest.mark.parametrize("name", MODELS)
def test_patch_equals_patching_by_hand(name):
    model = kvprobe.load_model(name)
    h = make_history(model)
    layer = model.arch.num_layers // 2
    decoder = model.hf.model.layers[layer]
    positions = (0, -1)
    saved = {}

    def save(_module, _args, output):
        saved["x"] = (output[0] if isinstance(output, tuple) else output).clone()

    def write(_module, _args, output):
        x = output[0] if isinstance(output, tuple) else output
        n = x.shape[1]
        for p in positions:
            x[:, p % n] = saved["x"][:, p % n]
        return output

    _plain(model, h, Full(), [("out", decoder, save)])  # the clean run, saved
    want = _plain(model, h, Mask(h.span("A")), [("out", decoder, write)])  # the masked run, patched
    restored = Compose(Mask(h.span("A")), Patch("full", layer, positions), name="restored")
    out = question_logits(model, h, QUESTIONS[0], [Full(), Mask(h.span("A")), restored]).logits
    assert _diff(out[2], want) <= TOLERANCE
    assert float((out[2] - out[1]).abs().max()) > 1e-4  # the patch changed the masked row
    # patching every position of the last layer from full access gives full access's logits
    everything = Compose(Mask(h.span("A")), Patch("full", model.arch.num_layers - 1))
    both = question_logits(model, h, QUESTIONS[0], [Full(), everything]).logits
    assert _diff(both[1], both[0]) <= TOLERANCE


def test_patches_and_ablations_batch_with_everything_and_leave_the_history(llama):
    h = make_history(llama)
    access = {"full": Full(), "mask": Mask(h.span("A")), "patched": Compose(Mask(h.span("A")), Patch("full", 2)),
              "no-heads": HeadAblation(3, [0, 1])}
    scores = llama.score(h, QUESTIONS[0], ['{"answer": "Room 18"}', '{"answer": "Room 12"}'], access=access)
    outs = llama.generate(h, QUESTIONS, access=access, max_new_tokens=3)  # two questions: row k reads row k
    caches = llama.run_with_cache(h, QUESTIONS[0], access=access, names=("hidden",), layers=[2])
    assert torch.equal(caches["patched"].hidden[2], caches["full"].hidden[2])
    assert set(scores) == set(outs) == set(access) and h.check_digest()


def test_bad_component_input_is_refused_by_name(llama):
    h = make_history(llama)
    with pytest.raises(ValueError, match="value must be one of"):
        HeadAblation(1, [0], "median")
    with pytest.raises(OperationError, match="head 9 out of range"):
        llama.score(h, QUESTIONS[0], ["x"], access=HeadAblation(1, [9]))
    with pytest.raises(OperationError, match="layer 7 is not an attention layer"):
        llama.score(h, QUESTIONS[0], ["x"], access=HeadAblation(7, [0]))
    with pytest.raises(PatchError, match="'clean' at layer 1: that condition is not in the batch"):
        llama.score(h, QUESTIONS[0], ["x"], access={"full": Full(), "p": Patch("clean", 1)})
    with pytest.raises(PatchError, match=r"positions \[40\] out of range"):
        llama.score(h, QUESTIONS[0], ["x"], access={"full": Full(), "p": Patch("full", 1, (40,))})
