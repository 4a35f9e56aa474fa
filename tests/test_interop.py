"""kvprobe beside the libraries its users already have (kvpress, TransformerLens, nnsight).

* kvprobe's attention functions take transformers' calling convention, so a wrapper that another library
  registers over every attention function after kvprobe is imported (kvpress does this on import, passing
  ``dropout`` by position) leaves every result unchanged;
* a trace that fails on entry (nnsight cannot read the block's source, as in code run by ``exec``: a
  notebook-like runner) leaves no forward context and no hook behind: later batches equal a fresh model's.
"""

from __future__ import annotations

import pytest
import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import kvprobe
from kvprobe import Compose, Full, Mask, matched_control
from kvprobe.attention import GROUPED_EAGER, KVPROBE_SDPA
from kvprobe.forward_context import current_context
from kvprobe.interventions import HeadAblation, Patch, Zero

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


def _component_results(model: kvprobe.Model) -> dict:
    h = make_history(model)
    source = Mask(h.span("A"), name="source")
    access = {"full": Full(), "source": source, "zero-heads": Zero(h.span("A"), layers=[0], heads=[0]),
              "no-heads": HeadAblation(1, [0, 1]), "restored": Compose(source, Patch("full", layer=1))}
    return {name: s.logprobs for name, s in model.score(h, QUESTIONS[0], CANDIDATES, access=access).items()}


def test_a_trace_that_fails_on_entry_leaves_nothing_behind(llama):
    fresh = _component_results(kvprobe.load_model("tiny-llama"))
    h = make_history(llama)
    code = "with m.trace(h, q, access={'full': Full(), 'z': Zero(h.span('A'), heads=[0])}) as t:\n    t.row('z')\n"
    with pytest.raises(Exception, match="source"):  # nnsight: no source for <string>
        exec(code, {"m": llama, "h": h, "q": QUESTIONS[0], "Full": Full, "Zero": Zero})
    assert current_context().cache is None and not current_context().kv_source
    assert not llama.hf._forward_hooks, "the trace's logits hook stayed on the model"
    after = _component_results(llama)
    assert after.keys() == fresh.keys()
    for name in fresh:
        assert after[name] == pytest.approx(fresh[name], abs=1e-6), name
