"""Masked access, scoring and generation against independent uncached references."""

from __future__ import annotations

import pytest

import kvprobe
from kvprobe.access import LayerError
from kvprobe import Full, Mask, SpanError, TokenSpan, matched_control
from kvprobe.decoding import Request, suffix_ids
from kvprobe.reference import reference_generate, reference_score

from conftest import QUESTIONS, make_history

TOL = 1e-4  # fp32 logit / log-prob tolerance
CANDIDATES = ['{"answer": "Room 18"}', '{"answer": "Room 12"}']


def _conditions(h):
    source = Mask(h.span("A"), name="source")
    return {"full": Full(), "source": source, "control": matched_control(h, source, "note"),
            "number": Mask(h.span("A", "12"), name="number")}


def test_scores_match_uncached_explicit_mask_reference(tiny_model):
    h = make_history(tiny_model)
    conds = _conditions(h)
    scores = tiny_model.score(h, QUESTIONS[0], CANDIDATES, access=conds)
    q = suffix_ids(tiny_model, h, QUESTIONS[0])
    cand_ids = [tiny_model.tokenizer(c, add_special_tokens=False)["input_ids"] for c in CANDIDATES]
    for name, access in conds.items():
        hidden = access.hidden_positions(len(h))
        for i, c in enumerate(cand_ids):
            ref = reference_score(tiny_model, h.input_ids.tolist(), q, c, hidden)
            assert abs(scores[name][i] - ref) <= TOL, (name, i, scores[name][i], ref)
    # The mask really changes what the model reads.
    assert abs(scores["source"][0] - scores["full"][0]) > 1e-3
    assert h.check_digest()


def test_generation_matches_uncached_reference(tiny_model):
    h = make_history(tiny_model)
    conds = _conditions(h)
    outs = tiny_model.generate(h, QUESTIONS, access=conds, max_new_tokens=12)
    for name, access in conds.items():
        hidden = access.hidden_positions(len(h))
        for qi, question in enumerate(QUESTIONS):
            ref = reference_generate(tiny_model, h.input_ids.tolist(), suffix_ids(tiny_model, h, question),
                                     hidden, max_new_tokens=12)
            got = outs[name][qi]
            assert list(got.token_ids) == ref, (name, question)
            assert got.n_tokens == len(ref)
            assert got.stop_reason == ("eos" if ref[-1] in tiny_model.eos_ids else "cap")
    assert h.check_digest()


def test_batched_rows_equal_single_rows(llama):
    """Rows of different question lengths (left-padded) compute what each row computes alone."""
    h = make_history(llama)
    conds = _conditions(h)
    batched = llama.generate(h, QUESTIONS, access=conds, max_new_tokens=10)
    for name, access in conds.items():
        for qi, question in enumerate(QUESTIONS):
            alone = llama.generate(h, question, access=access, max_new_tokens=10)
            assert alone.token_ids == batched[name][qi].token_ids


def test_condition_order_does_not_change_scores(llama):
    h = make_history(llama)
    conds = _conditions(h)
    forward = llama.score(h, QUESTIONS[0], CANDIDATES, access=conds)
    backward = llama.score(h, QUESTIONS[0], CANDIDATES, access=dict(reversed(list(conds.items()))))
    for name in conds:
        assert forward[name].logprobs == pytest.approx(backward[name].logprobs, abs=TOL)


def test_layer_selection_masks_only_chosen_layers(llama):
    h = make_history(llama)
    span = h.span("A")
    scores = llama.score(h, QUESTIONS[0], CANDIDATES, access={
        "full": Full(), "all": Mask(span), "first": Mask(span, layers=[0]), "all-explicit": Mask(span, layers=[0, 1, 2, 3]),
    })
    assert scores["all-explicit"].logprobs == scores["all"].logprobs
    assert scores["first"].logprobs != scores["all"].logprobs
    assert scores["first"].logprobs != scores["full"].logprobs


def _layerwise_logits(model, ids, layer_masks):
    """Logits of an uncached forward run decoder layer by decoder layer, each with its own 4-D mask (Llama)."""
    import torch

    from kvprobe.reference import transformers_eager

    inner = model.hf.model
    pos = torch.arange(ids.shape[0])[None]
    with torch.inference_mode(), transformers_eager(model):
        x = inner.embed_tokens(ids[None])
        rope = inner.rotary_emb(x, position_ids=pos)
        for layer, mask in zip(inner.layers, layer_masks):
            x = layer(x, attention_mask=mask, position_ids=pos, position_embeddings=rope)
        return model.hf.lm_head(inner.norm(x))[0]


@pytest.mark.parametrize("layers", [[1], [0, 2]])
def test_layer_restricted_mask_equals_a_per_layer_masked_reference(llama, layers):
    """``Mask(span, layers=L)`` against decoder layers run one by one, the history columns hidden from the question
    rows in L only; the same reference with other layers masked differs (a wrong layer would fail)."""
    import torch

    from kvprobe.decoding import question_logits
    from kvprobe.reference import uncached_mask

    h = make_history(llama)
    span = h.span("A")
    q_ids = suffix_ids(llama, h, QUESTIONS[0])
    ids = torch.cat([h.input_ids, torch.tensor(q_ids)])
    T, N = len(h), ids.shape[0]
    hidden = torch.zeros(T, dtype=torch.bool)
    hidden[span.start:span.end] = True
    causal, masked = uncached_mask(llama, N, T, None), uncached_mask(llama, N, T, hidden)

    def reference(chosen):
        return _layerwise_logits(llama, ids, [masked if i in chosen else causal for i in range(llama.arch.num_layers)])[T:]

    got = question_logits(llama, h, QUESTIONS[0], [Mask(span, layers=layers)]).logits[0]
    assert float((got - reference(layers)).abs().max()) <= 1e-4
    other = [i for i in range(llama.arch.num_layers) if i not in layers][:1]
    assert float((got - reference(other)).abs().max()) > 1e-3


def test_sliding_layers_keep_native_window(gemma):
    """On Gemma3, masking keys already outside every sliding window changes only full layers."""
    h = make_history(gemma)
    span = h.span("A")
    sliding = [i for i, t in enumerate(gemma.arch.layer_types) if t == "sliding_attention"]
    assert gemma.arch.sliding_window < len(h) - span.end  # A is outside the window of the question
    scores = gemma.score(h, QUESTIONS[0], CANDIDATES, access={
        "full": Full(), "sliding-only": Mask(span, layers=sliding), "all": Mask(span)})
    assert scores["sliding-only"].logprobs == pytest.approx(scores["full"].logprobs, abs=1e-6)
    assert abs(scores["all"][0] - scores["full"][0]) > 1e-3


def _plain_margin(model, h, question: str, hidden) -> float:
    """log p(CANDIDATES[0]) - log p(CANDIDATES[1]) from one plain transformers forward per candidate over
    history + question + candidate, its 4-D additive mask written out by hand: causal, and the ``hidden``
    history columns closed to every row after the history. No kvprobe cache, mask or scoring code."""
    import torch

    T = len(h)
    suffix = suffix_ids(model, h, question)
    logp = []
    for text in CANDIDATES:
        cand = model.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = h.input_ids.tolist() + list(suffix) + list(cand)
        S = len(ids)
        allowed = torch.ones(S, S, dtype=torch.bool).tril()
        allowed[T:, :T] &= ~hidden.cpu()[None, :]
        mask = torch.zeros(S, S).masked_fill(~allowed, torch.finfo(torch.float32).min)[None, None]
        with torch.inference_mode():
            logits = model.hf(input_ids=torch.tensor([ids]), attention_mask=mask,
                              position_ids=torch.arange(S)[None]).logits[0].float()
        lp = torch.log_softmax(logits, dim=-1)
        first = T + len(suffix)
        logp.append(sum(float(lp[first - 1 + j, t]) for j, t in enumerate(cand)))
    return logp[0] - logp[1]


def test_margin_and_margin_change(llama):
    """The margin and Delta m equal the ones computed from plain forwards with explicit masks."""
    h = make_history(llama)
    conds = _conditions(h)
    s = llama.score(h, QUESTIONS[0], CANDIDATES, access=conds)
    source = _plain_margin(llama, h, QUESTIONS[0], conds["source"].hidden_positions(len(h)))
    control = _plain_margin(llama, h, QUESTIONS[0], conds["control"].hidden_positions(len(h)))
    assert s["source"].margin() == pytest.approx(source, abs=2 * TOL)
    assert s["control"].margin() == pytest.approx(control, abs=2 * TOL)
    assert kvprobe.margin_change(s["source"], s["control"]) == pytest.approx(source - control, abs=4 * TOL)
    assert abs(source - control) > 1e-3  # the two masks differ, so the check is not 0 == 0


def test_cap_stop_reason(llama):
    h = make_history(llama)
    out = llama.generate(h, QUESTIONS[0], max_new_tokens=1)
    assert out.n_tokens == 1
    assert out.stop_reason == ("eos" if out.token_ids[0] in llama.eos_ids else "cap")


def test_digest_detects_a_changed_prefix(llama):
    h = make_history(llama)
    assert h.check_digest()
    h.kv[0][0][0, 0, 0, 0] += 1.0
    assert not h.check_digest()


def test_span_outside_history_is_refused(llama):
    h = make_history(llama)
    with pytest.raises(SpanError, match="outside the history"):
        llama.score(h, QUESTIONS[0], CANDIDATES, access=Mask(TokenSpan(len(h) - 2, len(h) + 5)))


def test_bad_layers_are_refused(llama):
    h = make_history(llama)
    with pytest.raises(LayerError, match="do not exist"):
        llama.score(h, QUESTIONS[0], CANDIDATES, access=Mask(h.span("A"), layers=[7]))
    with pytest.raises(SpanError, match="at least one span"):
        Mask([])


def test_control_errors(llama):
    h = make_history(llama)
    note = h.span("note")
    with pytest.raises(SpanError, match="longer than segment 'note'"):
        matched_control(h, Mask(TokenSpan(0, len(note) + 1)), "note")
    with pytest.raises(SpanError, match="overlaps the masked span"):
        matched_control(h, Mask(TokenSpan(note.start + 1, note.start + 3)), "note")
    control = matched_control(h, Mask(h.span("A")), "note", skip=1)
    assert control.spans[0].start == note.start + 1 and control.n_tokens == len(h.span("A"))


def test_low_level_requests(llama):
    h = make_history(llama)
    reqs = [Request(QUESTIONS[0], Full()), Request(QUESTIONS[1], Mask(h.span("note")))]
    outs = llama.run(h, reqs, max_new_tokens=5)
    assert [o.access for o in outs] == ["full", "mask"]
    assert outs[0].token_ids == llama.generate(h, QUESTIONS[0], max_new_tokens=5).token_ids


def test_rows_that_stop_early_leave_the_batch_without_changing_others(llama, monkeypatch):
    """Make a token that one row generates early an extra EOS, so rows stop at different steps."""
    h = make_history(llama)
    conds = _conditions(h)
    free = llama.generate(h, QUESTIONS, access=conds, max_new_tokens=10)
    stop_token = free["source"][0].token_ids[2]
    monkeypatch.setattr(llama.hf.generation_config, "eos_token_id", [llama.tokenizer.eos_token_id, stop_token])
    batched = llama.generate(h, QUESTIONS, access=conds, max_new_tokens=10)
    lengths = {g.n_tokens for gs in batched.values() for g in gs}
    assert len(lengths) > 1  # rows really stopped at different steps
    assert batched["source"][0].stop_reason == "eos" and batched["source"][0].n_tokens <= 3
    for name, cond in conds.items():
        for qi, q in enumerate(QUESTIONS):
            alone = llama.generate(h, q, access=cond, max_new_tokens=10)
            assert alone.token_ids == batched[name][qi].token_ids


def test_sdpa_attention_computes_the_same_masked_scores(llama):
    """The mask intervention edits the attention_mask input, so it works under sdpa too."""
    sdpa = kvprobe.load_model("tiny-llama", attn_implementation="sdpa")
    h_e, h_s = make_history(llama), make_history(sdpa)
    conds_e, conds_s = _conditions(h_e), _conditions(h_s)
    e = llama.score(h_e, QUESTIONS[0], CANDIDATES, access=conds_e)
    s = sdpa.score(h_s, QUESTIONS[0], CANDIDATES, access=conds_s)
    for name in conds_e:
        assert s[name].logprobs == pytest.approx(e[name].logprobs, abs=TOL)
    assert abs(s["source"][0] - s["full"][0]) > 1e-3


def test_condition_is_the_one_name_of_the_base_class():
    """``Access``, the name before cache edits, is gone (0.1.0 was never released; CHANGELOG.md)."""
    import kvprobe.access

    assert not hasattr(kvprobe, "Access") and not hasattr(kvprobe.access, "Access")
    assert isinstance(Mask(kvprobe.TokenSpan(0, 1, "x")), kvprobe.Condition)
