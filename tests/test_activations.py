"""``Model.run_with_cache`` equals a plain transformers forward with an explicit 4-D mask.

For each condition of one batch (full access, a mask, a bias, a compaction) the captured logits,
hidden states, attention probabilities and question K/V equal those of an independent forward:
transformers' eager attention on a copy of that condition's cache, the hidden columns at the dtype
minimum and the bias added in every layer's mask, ``output_hidden_states``/``output_attentions``
(``kvprobe.reference.cached_explicit_forward``). Every tiny family, float32.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import kvprobe
from conftest import QUESTIONS, make_history
from kvprobe import Full, Mask
from kvprobe.decoding import suffix_ids
from kvprobe.interventions import Compact, SoftBias, refusal
from kvprobe.reference import cached_explicit_forward
from kvprobe.transformers_api import output_cache
from kvprobe.tiny import TINY_MODELS

#: Relative to the largest magnitude compared (float32; the verify checks' 1e-4 on logits).
TOLERANCE = 1e-4

pytestmark = pytest.mark.usefixtures("one_thread")


def _close(got: torch.Tensor, want: torch.Tensor) -> float:
    """Largest difference relative to the reference's largest magnitude."""
    return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp(min=1.0))


@pytest.mark.parametrize("name", TINY_MODELS)
def test_run_with_cache_equals_a_plain_forward(name):
    model = kvprobe.load_model(name)
    h = make_history(model)
    span = h.span("A")
    conditions = {"full": Full(), "mask": Mask(span), "bias": SoftBias([(span, -0.69), (h.span("B"), 0.5)]),
                  "compact": Compact(span)}
    conditions = {k: c for k, c in conditions.items() if refusal(c, h) is None}
    caches = model.run_with_cache(h, QUESTIONS[0], access=conditions)
    suffix = suffix_ids(model, h, QUESTIONS[0])
    arch = model.arch
    worst = 0.0
    for cname, condition in conditions.items():
        state = condition.prepare(model, h, QUESTIONS[0])
        hidden = next(iter(state.hidden.values())) if state.hidden else None
        bias = next(iter(state.bias.values())) if state.bias else None
        ref = cached_explicit_forward(model, dataclasses.replace(state, hidden={}, bias={}), suffix,
                                      hidden=hidden, bias=bias, outputs=True)
        got = caches[cname]
        worst = max(worst, _close(got.logits, ref.logits[0]))
        for layer in range(arch.num_layers - 1):  # the last entry of output_hidden_states is after the final norm
            worst = max(worst, _close(got.hidden[layer], ref.hidden_states[layer + 1][0]))
        for i, layer in enumerate(arch.attention_layers):
            # hybrid models return attention probabilities of their attention layers only
            probabilities = ref.attentions[layer if len(ref.attentions) == arch.num_layers else i][0]
            assert got.attention[layer].shape == probabilities.shape, (cname, layer)
            worst = max(worst, _close(got.attention[layer], probabilities))
            reference_cache = output_cache(ref)
            k = reference_cache.layers[arch.layers[layer].kv_layer].keys[0, :, -len(suffix):]
            worst = max(worst, _close(got.keys[layer], k))
        assert torch.equal(got.tokens.cpu(), torch.tensor(suffix))
    assert worst <= TOLERANCE, f"{name}: {worst:.2e}"
    assert torch.allclose(caches["full"].hidden[-1], caches["full"].hidden[arch.num_layers - 1])


def test_bad_capture_requests_are_refused_before_the_forward(llama):
    h = make_history(llama)
    with pytest.raises(ValueError, match="unknown capture name"):
        llama.run_with_cache(h, QUESTIONS[0], names=("hiden",))
    with pytest.raises(ValueError, match=r"layer\(s\) \[9\] out of range"):
        llama.run_with_cache(h, QUESTIONS[0], layers=[0, 9])
    one = llama.run_with_cache(h, QUESTIONS[0], names=("hidden",), layers=[-1])["full"]
    assert set(one.hidden) == {llama.arch.num_layers - 1} and one.logits is None and not one.attention
    with pytest.raises(KeyError, match="layer 0 was not captured"):
        one.hidden[0]
