"""``Model.trace``: an nnsight trace over kvprobe's masked and edited batch.

Without edits it gives the rows' logits and scores exactly as kvprobe's own forward does; envoy
rows are the conditions (a saved layer output equals ``run_with_cache``'s); an assignment inside the
block changes the logits exactly as the equivalent registered condition (``Patch``) does; and
``m.nn.trace("text")`` traces a plain forward of the text.
"""

from __future__ import annotations

import pytest
import torch

from conftest import QUESTIONS, make_history
from kvprobe import Compose, Full, Mask
from kvprobe.decoding import question_logits
from kvprobe.interventions import Compact, HeadAblation, Patch, Quest, SoftBias

CANDIDATES = ['{"answer": "Room 18"}', '{"answer": "Room 12"}']

pytestmark = pytest.mark.usefixtures("one_thread")


def _conditions(h) -> dict:
    span = h.span("A")
    return {"full": Full(), "mask": Mask(span), "first-layer": Mask(span, layers=[0]),
            "bias": SoftBias([(span, -0.69)]), "compact": Compact(span), "heads": HeadAblation(1, [0]),
            "patched": Compose(Mask(span), Patch("full", 2))}


def test_a_trace_without_edits_is_kvprobes_forward(tiny_model):
    h = make_history(tiny_model)
    access = _conditions(h)
    with tiny_model.trace(h, QUESTIONS[0], access=access, candidates=CANDIDATES) as t:
        pass
    want = question_logits(tiny_model, h, QUESTIONS[0], list(access.values())).logits
    for row, name in enumerate(access):
        assert torch.allclose(t.logits[name], want[row], atol=1e-5, rtol=0), name
    scores = tiny_model.score(h, QUESTIONS[0], CANDIDATES, access=access)
    for name in access:
        assert t.scores[name].logprobs == pytest.approx(scores[name].logprobs, abs=1e-4), name
    assert h.check_digest()


def test_envoy_rows_are_the_conditions_and_edits_change_the_logits(llama):
    h = make_history(llama)
    access = {"full": Full(), "mask": Mask(h.span("A"))}
    layer = 2
    with llama.trace(h, QUESTIONS[0], access=access) as t:
        saved = llama.nn.model.layers[layer].output[t.row("mask")].clone().save()  # a copy: the edit is in place
        llama.nn.model.layers[layer].output[t.row("mask"), t.positions] = \
            llama.nn.model.layers[layer].output[t.row("full"), t.positions]
    caches = llama.run_with_cache(h, QUESTIONS[0], access=access, names=("hidden",), layers=[layer])
    assert torch.equal(saved, caches["mask"].hidden[layer])  # saved before the assignment
    patched = question_logits(llama, h, QUESTIONS[0],
                              [Full(), Mask(h.span("A")), Compose(Mask(h.span("A")), Patch("full", layer))])
    assert torch.allclose(t.logits["mask"], patched.logits[2], atol=1e-5, rtol=0)
    assert not torch.allclose(t.logits["mask"], patched.logits[1], atol=1e-3)  # the edit changed the logits
    assert h.check_digest()


def test_plain_text_traces_and_bad_trace_input(llama):
    with llama.nn.trace("The box is red.") as tracer:
        logits = llama.nn.output.logits.save()
    ids = llama.tokenizer("The box is red.", return_tensors="pt")["input_ids"]
    assert torch.allclose(logits, llama.hf(input_ids=ids).logits)
    h = make_history(llama)
    trace = llama.trace(h, QUESTIONS[0], access={"full": Full()})
    with pytest.raises(KeyError, match="no condition 'mask' in this trace"):
        trace.row("mask")
    with pytest.raises(ValueError, match="query-aware selections"):
        llama.trace(h, QUESTIONS[0], access={"quest": Quest(budget=32)})
