"""Quest, the recent-page control, RefreshKV and FINCH against brute-force references.

The references share nothing with the cached path: one uncached transformers
forward over the whole sequence (history, question, generated tokens) with
transformers' own eager attention, through an attention function that applies
a selection computed here by explicit loops over heads, pages and rows from
the query and key tensors transformers hands it. FINCH's reference prefills
history + window without a cache, scores keys from transformers' attention
probabilities, re-applies RoPE at the compact positions to pre-RoPE keys and
decodes the final token on a hand-built DynamicCache.
"""

from __future__ import annotations

import sys

import pytest
import torch
from transformers import AttentionInterface, AttentionMaskInterface, DynamicCache
from transformers.masking_utils import eager_mask

import kvprobe
from kvprobe.interventions.capacity import matched_capacity
from kvprobe.interventions.finch import Finch
from kvprobe.interventions.quest import Quest, RecentPages
from kvprobe.interventions.refreshkv import RefreshKV
from kvprobe.decoding import Request, answer, remaining_suffix, run_questions, suffix_ids
from kvprobe.forward import traced_forward
from kvprobe.selection import SelectionError
from kvprobe.transformers_api import cache_argument, output_cache

from conftest import QUESTIONS, make_history

REFERENCE = "kvprobe_test_selection_reference"
TOL = 1e-4  # fp32 logits: cached grouped attention vs uncached eager
_SELECT = {}  # the brute-force selection the reference attention applies: {"fn": callable}


def _reference_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers' eager attention of the module's own family, with the brute-force selection folded in."""
    allowed = _SELECT["fn"](module.layer_idx, query[0], key[0], attention_mask[0, 0], module)
    if allowed is not None:
        attention_mask = attention_mask.masked_fill(~allowed[None], torch.finfo(attention_mask.dtype).min)
    eager = sys.modules[type(module).__module__].eager_attention_forward
    return eager(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(REFERENCE, _reference_attention)
AttentionMaskInterface.register(REFERENCE, eager_mask)


def reference_logits(model: kvprobe.Model, ids: list[int], select) -> torch.Tensor:
    """Float[N, V]: one uncached forward of ``ids`` with ``select(layer, q [H,N,D], k [KVH,N,D], mask, module)``."""
    impl = model.hf.config._attn_implementation
    _SELECT["fn"] = select
    model.hf.set_attn_implementation(REFERENCE)
    try:
        with torch.inference_mode():
            return model.hf(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()
    finally:
        model.hf.set_attn_implementation(impl)


def engine_logits(model, history, question, access, tokens: list[int]) -> torch.Tensor:
    """Float[1 + len(tokens), V]: logits after the question, then after each teacher-forced token."""
    state = access.prepare(model, history, question)
    rest = remaining_suffix(model, history, question, state)
    selector = access.make_selector(model, [access]) if hasattr(access, "make_selector") else None
    rows, last = run_questions(model, [state], [rest], selector)
    out = [last[0]]
    for t in tokens:
        step = traced_forward(model, rows, torch.tensor([[t]]), logits_to_keep=1)
        out.append(step.logits[0, -1].float())
    return torch.stack(out)


def _greedy(model, history, question, access, n=8) -> list[int]:
    return list(model.generate(history, question, access=access, max_new_tokens=n).token_ids)


# ---------------------------------------------------------------- brute force


def brute_quest(q, k, r, budget, page, recent=False, head_selection="query"):
    """Bool[H, N]: keys query row r of each head reads under Quest (explicit loops)."""
    H, N, _ = q.shape
    G = H // k.shape[0]
    n_pages, current = r // page + 1, r // page
    n_read = max(1, budget // page)
    allowed = torch.zeros(H, N, dtype=torch.bool)
    scores = []
    for h in range(H):
        kk, row = k[h // G].float(), []
        for p in range(n_pages):
            block = kk[p * page: min((p + 1) * page, r + 1)]
            hi, lo = block.max(0).values, block.min(0).values
            row.append(float(torch.maximum(q[h, r].float() * hi, q[h, r].float() * lo).sum()))
        scores.append(row)
    for h in range(H):
        if recent:
            s = list(range(n_pages))
        elif head_selection == "kv":
            group = range((h // G) * G, (h // G) * G + G)
            s = [max(scores[g][p] for g in group) for p in range(n_pages)]
        else:
            s = scores[h]
        order = sorted(range(n_pages), key=lambda p: (p != current, -s[p], p))
        for p in order[:n_read]:
            allowed[h, p * page: min((p + 1) * page, r + 1)] = True
    return allowed


def quest_select(first_row, budget, page=16, dense=2, recent=False, head_selection="query"):
    def select(layer, q, k, mask, module):
        if layer < dense:
            return None
        H, N, _ = q.shape
        allowed = torch.ones(H, N, N, dtype=torch.bool)
        for r in range(first_row, N):
            allowed[:, r] = brute_quest(q, k, r, budget, page, recent, head_selection)
        return allowed
    return select


def brute_refresh(q, k, mask, scaling, first_row, budget, interval=10, threshold=0.95, width=7):
    """Bool[H, N, N]: RefreshKV's partial sets row by row (explicit loops over heads and slots)."""
    H, N, _ = q.shape
    KVH = k.shape[0]
    G = H // KVH
    P = first_row + 1
    allowed = torch.ones(H, N, N, dtype=torch.bool)
    rank, last_q = None, None

    def ranking(r):
        logits = torch.stack([(q[h, r].float() @ k[h // G, : r + 1].float().T) * scaling for h in range(H)])
        probs = torch.softmax(logits + mask[r, : r + 1].float(), dim=-1)[:, :P]
        out = []
        for kv in range(KVH):
            agg = probs[kv * G: kv * G + G].max(0).values
            pooled = [float(agg[max(0, s - width // 2): s + width // 2 + 1].max()) for s in range(P)]
            out.append(sorted(range(P), key=lambda s: (-pooled[s], s)))
        return out, q[:, r].float().clone()

    for r in range(first_row, N):
        t = r - first_row
        if t == 0:
            rank, last_q = ranking(r)
            continue
        if t % interval == 0:
            cos = torch.nn.functional.cosine_similarity(q[:, r].float(), last_q, dim=-1).mean()
            if cos <= threshold:
                rank, last_q = ranking(r)
                continue
        n_gen = r - P
        kept_gen = min(budget, n_gen)
        row = torch.zeros(H, N, dtype=torch.bool)
        for h in range(H):
            for s in rank[h // G][: budget - kept_gen]:
                row[h, s] = True
            row[h, r - kept_gen: r + 1] = True
        allowed[:, r] = row
    return allowed


def refresh_select(first_row, budget, **kw):
    def select(layer, q, k, mask, module):
        return brute_refresh(q, k, mask, module.scaling, first_row, budget, **kw)
    return select


# ---------------------------------------------------------------- Quest


@pytest.mark.parametrize("name,kind", [("tiny-llama", "quest"), ("tiny-qwen3", "quest"), ("tiny-gemma3", "quest"),
                                       ("tiny-qwen3", "quest-kv"), ("tiny-gemma3", "recent")])
def test_quest_matches_brute_force_selection(name, kind):
    model = kvprobe.load_model(name)
    history = make_history(model)
    question = QUESTIONS[0]
    suffix = suffix_ids(model, history, question)
    access = {"quest": Quest(budget=48), "quest-kv": Quest(budget=48, head_selection="kv"),
              "recent": RecentPages(48)}[kind]
    tokens = _greedy(model, history, question, access)
    ours = engine_logits(model, history, question, access, tokens[:-1])
    ids = history.input_ids.tolist() + suffix + tokens[:-1]
    first = len(history) + len(suffix) - 1
    select = quest_select(first, 48, recent=access.recent, head_selection=access.head_selection)
    ref = reference_logits(model, ids, select)[first:]
    assert torch.allclose(ours, ref, atol=TOL), (ours - ref).abs().max()
    assert [int(x) for x in ref.argmax(-1)] == tokens
    # The selection matters: with a budget of three pages the logits differ from full access.
    full = engine_logits(model, history, question, kvprobe.Full(), tokens[:-1])
    assert (full - ours).abs().max() > 1e-3


def test_quest_with_room_for_everything_is_full_access(llama):
    history = make_history(llama)
    big = Quest(budget=10_000)
    assert _greedy(llama, history, QUESTIONS[0], big, 10) == _greedy(llama, history, QUESTIONS[0], kvprobe.Full(), 10)


def test_rows_with_different_budgets_batch_like_single_rows(llama):
    history = make_history(llama)
    conds = [Quest(budget=32), Quest(budget=64), Quest(budget=80)]
    batched = answer(llama, [(history, Request(q, c)) for c in conds for q in QUESTIONS], max_new_tokens=8)
    single = [_greedy(llama, history, q, c) for c in conds for q in QUESTIONS]
    assert [list(a.generation.token_ids) for a in batched] == single


# ---------------------------------------------------------------- RefreshKV


@pytest.mark.parametrize("name,settings", [("tiny-llama", dict(budget=40)),
                                           ("tiny-qwen3", dict(budget=40, interval=2, threshold=0.99)),
                                           ("tiny-llama", dict(budget=6, interval=3, threshold=1.0))])
def test_refreshkv_matches_brute_force(name, settings):
    model = kvprobe.load_model(name)
    history = make_history(model)
    question = QUESTIONS[0]
    suffix = suffix_ids(model, history, question)
    access = RefreshKV(**settings)
    tokens = _greedy(model, history, question, access, 14)
    ours = engine_logits(model, history, question, access, tokens[:-1])
    ids = history.input_ids.tolist() + suffix + tokens[:-1]
    first = len(history) + len(suffix) - 1
    kw = {k: v for k, v in settings.items() if k != "budget"}
    ref = reference_logits(model, ids, refresh_select(first, settings["budget"], **kw))[first:]
    assert torch.allclose(ours, ref, atol=TOL), (ours - ref).abs().max()
    full = engine_logits(model, history, question, kvprobe.Full(), tokens[:-1])
    assert (full - ours).abs().max() > 1e-3


# ---------------------------------------------------------------- FINCH


def brute_finch_keep(attn, T, w, n_kv, n_history):
    """Per KV head, sorted kept slots from uncached attention probabilities [H, N, N] (explicit loops)."""
    H = attn.shape[0]
    G = H // n_kv
    keep = []
    for kv in range(n_kv):
        score = []
        for s in range(T):
            total = 0.0
            for g in range(G):
                for i in range(w):
                    total += float(attn[kv * G + g, T + i, s]) * (T + i)
            score.append(total / (G * w))
        best = sorted(sorted(range(T), key=lambda s: -score[s])[:n_history])
        keep.append(best + list(range(T, T + w)))
    return torch.tensor(keep)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_finch_matches_fresh_prefill_with_rope_at_compact_positions(name):
    model = kvprobe.load_model(name)
    history = make_history(model)
    question = QUESTIONS[0]
    suffix = suffix_ids(model, history, question)
    T, w = len(history), len(suffix) - 1
    budget = w + T - 20  # drop 20 history keys per head
    access = Finch(budget=budget)
    ours = engine_logits(model, history, question, access, [])[0]
    state = access.prepare(model, history, question)
    assert state.length == budget and state.info["consumed_suffix"] == w

    ids = torch.tensor(history.input_ids.tolist() + suffix[:-1])
    impl = model.hf.config._attn_implementation
    model.hf.set_attn_implementation("eager")
    try:
        with torch.inference_mode():
            out = model.hf(input_ids=ids[None], use_cache=True, output_attentions=True)
    finally:
        model.hf.set_attn_implementation(impl)
    prerope = model.adapter.prerope_keys(model, ids)
    cache = DynamicCache()
    for layer in model.arch.kv_layers:
        keep = brute_finch_keep(out.attentions[layer][0], T, w, prerope[layer].shape[1], budget - w)
        pre = torch.stack([prerope[layer][0, h, keep[h]] for h in range(keep.shape[0])])[None]
        values = output_cache(out).layers[layer].values
        v = torch.stack([values[0, h, keep[h]] for h in range(keep.shape[0])])[None]
        k = model.adapter.apply_rope(model, layer, pre, torch.arange(budget))
        assert torch.allclose(state.kv[layer][0], k, atol=1e-4), (layer, (state.kv[layer][0] - k).abs().amax(dim=(0, 2, 3)))
        # the history was prefilled with SDPA, this reference with eager: float32 rounding apart
        assert torch.allclose(state.kv[layer][1], v, atol=1e-4)
        cache.update(k, v, layer)
    with torch.inference_mode():
        ref = model.hf(input_ids=torch.tensor([[suffix[-1]]]), position_ids=torch.tensor([[budget]]),
                       use_cache=True, **cache_argument(model.hf, cache)).logits[0, -1].float()
    assert torch.allclose(ours, ref, atol=TOL), (ours - ref).abs().max()
    assert (engine_logits(model, history, question, kvprobe.Full(), [])[0] - ours).abs().max() > 1e-3


def test_finch_with_room_for_everything_is_full_access(llama):
    history = make_history(llama)
    room = Finch(budget=10_000)
    assert _greedy(llama, history, QUESTIONS[0], room, 10) == _greedy(llama, history, QUESTIONS[0], kvprobe.Full(), 10)


# ---------------------------------------------------------------- capacity and refusals


def test_matched_capacity_is_prefix_plus_observation_minus_masked(llama):
    history = make_history(llama)
    source = kvprobe.Mask(history.span("A"))
    suffix = suffix_ids(llama, history, QUESTIONS[0])
    K = matched_capacity(llama, history, QUESTIONS[0], source)
    assert K == len(history) + len(suffix) - 1 - len(history.span("A"))
    # FINCH at K keeps exactly as many keys as the mask arm can read before the final token.
    state = Finch(budget=K).prepare(llama, history, QUESTIONS[0])
    assert state.length == K


def test_bad_budgets_and_models_are_refused(llama, hybrid):
    with pytest.raises(ValueError, match="budget"):
        Quest(budget=0)
    with pytest.raises(ValueError, match="pool_width"):
        RefreshKV(pool_width=4)
    history = make_history(llama)
    with pytest.raises(kvprobe.SpanError, match="observation window"):
        Finch(budget=3).prepare(llama, history, QUESTIONS[0])
    with pytest.raises(SelectionError, match="recurrent"):
        hybrid.generate(make_history(hybrid), QUESTIONS[0], access=Quest(budget=32), max_new_tokens=2)
    with pytest.raises(SelectionError, match="candidate scoring"):
        llama.score(history, QUESTIONS[0], ["Room 18 on the fifth floor"], access=Quest(budget=32))
