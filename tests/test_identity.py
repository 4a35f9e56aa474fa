"""A history is read only by the model that wrote it, unless the call asks for a cross-checkpoint read."""

from __future__ import annotations

import pytest

import kvprobe
from conftest import QUESTIONS, make_history
from kvprobe.history import ModelMismatchError, tokenizer_fingerprint, weights_fingerprint

CANDIDATES = ['{"answer": "Room 18"}', '{"answer": "Room 12"}']


def test_another_load_of_the_same_weights_may_read(llama):
    again = kvprobe.load_model("tiny-llama")
    assert again.hf is not llama.hf and again.fingerprint == llama.fingerprint
    h = make_history(llama)
    assert again.score(h, QUESTIONS[0], CANDIDATES).logprobs == llama.score(h, QUESTIONS[0], CANDIDATES).logprobs


def test_another_checkpoint_is_refused_unless_the_read_is_cross_checkpoint(llama):
    from kvprobe.siblings import perturbed_sibling

    sibling = perturbed_sibling(llama, scale=1e-3, seed=1)
    assert sibling.fingerprint != llama.fingerprint
    h = make_history(llama)
    for call in (lambda **kw: sibling.score(h, QUESTIONS[0], CANDIDATES, **kw),
                 lambda **kw: sibling.generate(h, QUESTIONS[0], max_new_tokens=2, **kw),
                 lambda **kw: sibling.run_with_cache(h, QUESTIONS[0], names=("logits",), **kw)):
        with pytest.raises(ModelMismatchError, match="prefilled by 'tiny-llama'.*cross_checkpoint=True"):
            call()
        call(cross_checkpoint=True)
    assert h.check_digest()


def test_cross_checkpoint_reads_need_the_same_tokenizer_and_cache_shapes(llama):
    other = kvprobe.load_model("tiny-gemma3")  # sliding and full layers, the same byte-level tokenizer
    h = make_history(llama)
    assert tokenizer_fingerprint(other.tokenizer) == tokenizer_fingerprint(llama.tokenizer)
    with pytest.raises(ModelMismatchError, match="different layer types or K/V shapes"):
        other.score(h, QUESTIONS[0], CANDIDATES, cross_checkpoint=True)


def test_a_tokenizer_larger_than_the_embedding_is_refused(llama):
    from kvprobe.tiny import tiny_tokenizer

    tokenizer = tiny_tokenizer()  # a fresh copy, grown past the embedding
    rows = llama.hf.get_input_embeddings().num_embeddings
    tokenizer.add_tokens([f"<extra-{i}>" for i in range(rows - len(tokenizer) + 1)])
    with pytest.raises(ValueError, match=rf"{len(tokenizer)} token ids but the embedding has {rows} rows"):
        kvprobe.Model(llama.hf, tokenizer, name="mismatched")


def test_the_fingerprint_sees_one_changed_weight(llama):
    import torch

    model = kvprobe.load_model("tiny-llama")
    before = weights_fingerprint(model.hf)
    with torch.no_grad():
        model.hf.lm_head.weight[0, 0] += 1.0
    assert weights_fingerprint(model.hf) == before  # kept per model object ...
    assert weights_fingerprint(model.hf, refresh=True) != before  # ... until asked again
