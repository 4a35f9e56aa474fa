"""kvprobe beside the libraries its users already have (kvpress, TransformerLens, nnsight).

* kvprobe's attention functions take transformers' calling convention, so a wrapper that another library
  registers over every attention function after kvprobe is imported (kvpress does this on import, passing
  ``dropout`` by position) leaves every result unchanged.
"""

from __future__ import annotations

import pytest
import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import kvprobe
from kvprobe import Full, Mask, matched_control
from kvprobe.attention import GROUPED_EAGER, KVPROBE_SDPA
from kvprobe.interventions import Zero

from conftest import QUESTIONS, make_history

CANDIDATES = ['{"answer": "Room 18"}', '{"answer": "Room 12"}']


@pytest.fixture(scope="module")
def llama(one_thread):
    return kvprobe.load_model("tiny-llama")


def _kvpress_style_wrapper(func, calls: list[str]):
    """What kvpress's ``attention_patch`` does to every registered attention function on import: a wrapper whose
    sixth parameter is ``dropout``, passed on by position, everything else by keyword."""

    def wrapper(module, query, key, value, attention_mask, dropout, **kwargs):
        calls.append(func.__name__)
        return func(module, query, key, value, attention_mask, dropout, **kwargs)

    return wrapper


def _results(model: kvprobe.Model) -> dict:
    h = make_history(model)
    source = Mask(h.span("A"), name="source")
    access = {"full": Full(), "source": source, "control": matched_control(h, source, "note"),
              "zero-heads": Zero(h.span("A"), layers=[0], heads=[0])}
    scores = model.score(h, QUESTIONS[0], CANDIDATES, access=access)
    answers = model.generate(h, QUESTIONS[0], access=access, max_new_tokens=5)
    return {name: (scores[name].logprobs, answers[name].token_ids) for name in access}


@pytest.mark.parametrize("impl", [KVPROBE_SDPA, GROUPED_EAGER])
def test_a_wrapper_registered_after_import_like_kvpress_changes_nothing(llama, impl):
    before = llama.hf.config._attn_implementation
    llama.hf.set_attn_implementation(impl)
    original = ALL_ATTENTION_FUNCTIONS[impl]
    try:
        plain = _results(llama)
        calls: list[str] = []
        ALL_ATTENTION_FUNCTIONS[impl] = _kvpress_style_wrapper(original, calls)
        wrapped = _results(llama)
    finally:
        ALL_ATTENTION_FUNCTIONS[impl] = original
        llama.hf.set_attn_implementation(before)
    assert calls, "the wrapper was never called: the test did not go through the registered function"
    for name, (logprobs, tokens) in plain.items():
        assert wrapped[name][1] == tokens, name
        assert wrapped[name][0] == pytest.approx(logprobs, abs=0.0), name
