"""``Model.run_with_cache``: what it refuses and how its caches are indexed.

Its exactness is a ``kvprobe verify`` check (``run_with_cache_equals_plain_forward``,
``kvprobe.tools.verify.internals``) that ``tests/test_architectures.py`` runs on every tiny family:
logits, hidden states, attention probabilities and question keys under full access, a mask, a bias
and a compaction against a plain eager forward with explicit 4-D masks.
"""

from __future__ import annotations

import pytest

from conftest import QUESTIONS, make_history

pytestmark = pytest.mark.usefixtures("one_thread")


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


def test_score_and_generate_capture_what_run_with_cache_does(tiny_model):
    """``capture=`` on score and generate: the question's internals equal run_with_cache's; a generation's
    continue over every generated token fed back and equal one plain eager forward of the question plus
    those tokens under the same mask (attention rows padded with zeros on keys not yet written)."""
    import dataclasses

    import torch

    from kvprobe import Full, Mask
    from kvprobe.decoding import suffix_ids
    from kvprobe.reference import cached_explicit_forward

    h = make_history(tiny_model)
    access = {"full": Full(), "mask": Mask(h.span("A"))}
    names = ("hidden", "attention", "logits")
    caches = tiny_model.run_with_cache(h, QUESTIONS[0], access=access, names=names)
    scores = tiny_model.score(h, QUESTIONS[0], ['{"answer": "Room 18"}'], access=access, capture=names)
    outs = tiny_model.generate(h, QUESTIONS[0], access=access, max_new_tokens=4, capture=names, layers=[0, -1])
    arch, Q = tiny_model.arch, len(suffix_ids(tiny_model, h, QUESTIONS[0]))
    for name, condition in access.items():
        got = scores[name].activations
        assert torch.equal(got.logits, caches[name].logits) and torch.equal(got.hidden[1], caches[name].hidden[1])
        generated = outs[name]
        acts = generated.activations
        fed = list(generated.token_ids[:-1])  # the last token is never fed back
        assert set(acts.hidden) == {0, arch.num_layers - 1} and acts.hidden[-1].shape[0] == Q + len(fed)
        state = condition.prepare(tiny_model, h, QUESTIONS[0])
        hidden = next(iter(state.hidden.values())) if state.hidden else None
        ref = cached_explicit_forward(tiny_model, dataclasses.replace(state, hidden={}), suffix_ids(
            tiny_model, h, QUESTIONS[0]) + fed, hidden=hidden, outputs=True)
        assert torch.allclose(acts.hidden[0], ref.hidden_states[1][0], atol=1e-4)
        assert torch.allclose(acts.logits, ref.logits[0], atol=1e-4)
        attention = ref.attentions[0][0]
        assert acts.attention[0].shape == attention.shape and torch.allclose(acts.attention[0], attention, atol=1e-5)
    assert h.check_digest()
