"""``kvprobe verify`` checks for the cache operations, each against an independent reference.

* ``compact_keys_equal_rope_at_new_positions``: compacted keys equal the same
  pre-RoPE keys (captured with nnsight from an uncached forward, after any
  QK-norm) rotated by the model's own rotary code at the new positions; values
  equal the kept rows exactly. The value is the largest absolute difference
  divided by the layer's largest key magnitude, at most 1e-5. (In fp32 the
  absolute difference is ~1e-5 for keys of magnitude 10-20 at positions ~100,
  because the model's own rotary module rounds the angle p*inv_freq in fp32 at p
  and at p - g, even for float64 weights. The re-rotation algebra itself is
  tested in float64 to 1e-12 in tests/test_interventions.py.)
* ``rebuild_equals_one_pass`` / ``refresh_equals_one_pass`` /
  ``online_mask_equals_one_pass``: the recomputed K/V equal one uncached
  forward over the whole history whose 4-D mask hides the record from every
  non-record row from the operation's start on. At most 1e-4.
* ``text_recompute_equals_fresh_prefill``: stored-prefix recompute equals a
  fresh prefill of the edited text (K/V and question logits). At most 1e-4.
* ``drop_original_positions_equals_mask``: deleting rows but keeping positions
  equals masking them. At most 1e-4.
* ``zero_bias_equals_full``: a soft bias of zero equals full access exactly.
* ``zero_k_changes_logits_keeps_positions``: zeroing K keeps length and
  positions and changes the logits by *at least* the tolerance (the value is the
  largest logit change). That zeroed keys stay in the softmax normalizer, unlike
  masked ones, is shown by the tests through their attention probabilities.
"""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING

import torch

from kvprobe.access import Full, Mask
from kvprobe.decoding import question_logits
from kvprobe.reference import reference_hidden_kv
from kvprobe.verify import LOGIT_TOLERANCE, CheckResult

from .bias import SoftBias
from .compaction import Compact, Drop
from .recompute import OnlineMask, Rebuild, SelectiveRefresh
from .text import TextRecompute
from .zeroing import Zero

if TYPE_CHECKING:
    from kvprobe.access import Access
    from kvprobe.history import History
    from kvprobe.model import Model

ROPE_TOLERANCE = 1e-5
MIN_EFFECT = 1e-3


def prerope_keys(model: "Model", ids: torch.Tensor) -> dict[int, torch.Tensor]:
    """Per attention layer, keys before RoPE (after QK-norm) of one uncached forward: [1, kv_heads, T, d]."""
    T = int(ids.shape[0])
    saved = {}
    with torch.inference_mode(), model.nn.trace(input_ids=ids[None], use_cache=False):
        for layer in model.arch.attention_layers:
            attn = model.attention_envoy(layer)
            saved[layer] = (attn.k_norm.output if hasattr(attn, "k_norm") else attn.k_proj.output).save()
    out = {}
    for layer, k in saved.items():
        k = k.detach()
        if k.dim() == 3:  # [1, T, kv_heads * d]
            k = k.view(1, T, model.arch.num_kv_heads, -1)
        if k.shape[1] == T and k.shape[2] == model.arch.num_kv_heads:  # [1, T, H, d]
            k = k.transpose(1, 2)
        out[layer] = k
    return out


def rope_with_model(model: "Model", layer: int, keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Apply the model's own rotary embedding and ``apply_rotary_pos_emb`` at ``positions``."""
    rotary = model.hf.model.rotary_emb
    kwargs = {}
    if "layer_type" in inspect.signature(rotary.forward).parameters:
        kwargs["layer_type"] = model.arch.layer_types[layer]
    cos, sin = rotary(keys, positions[None], **kwargs)
    module = sys.modules[type(model.hf.model.layers[layer].self_attn).__module__]
    _, k = module.apply_rotary_pos_emb(keys, keys, cos, sin)
    return k


def _max_kv_diff(a, b, layers) -> float:
    return max(max(float((a[i][0] - b[i][0]).abs().max()), float((a[i][1] - b[i][1]).abs().max())) for i in layers)


def _logits(model: "Model", history: "History", question: str, conditions: list["Access"]) -> torch.Tensor:
    return question_logits(model, history, question, conditions).logits


def verify_operations(model: "Model", history: "History", question: str,
                      record_segment: str = "A", replacement_segment: str = "B") -> list[CheckResult]:
    """Run the operation checks on a history with a record segment and a later replacement."""
    name = model.name
    results: list[CheckResult] = []

    def record(check: str, value: float, tolerance: float, passed: bool | None = None) -> None:
        ok = value <= tolerance if passed is None else passed
        results.append(CheckResult(check, name, bool(ok), float(value), tolerance))

    T = len(history)
    span = history.span(record_segment)
    hidden = torch.zeros(T, dtype=torch.bool)
    hidden[span.start : span.end] = True
    layers = model.arch.attention_layers
    rowdelete_ok = set(model.arch.layer_types) <= {"full_attention", "sliding_attention"}

    if rowdelete_ok:
        state = Compact(span).prepare(model, history)
        pre = prerope_keys(model, history.input_ids)
        kept = ~hidden
        new_pos = torch.arange(int(kept.sum()))
        worst = 0.0
        for layer in layers:
            ref_k = rope_with_model(model, layer, pre[layer][:, :, kept], new_pos)
            scale = float(ref_k.abs().max()) or 1.0
            v_diff = float((state.kv[layer][1] - history.kv[layer][1][:, :, kept]).abs().max())
            worst = max(worst, float((state.kv[layer][0] - ref_k).abs().max()) / scale, v_diff)
        record("compact_keys_equal_rope_at_new_positions", worst, ROPE_TOLERANCE)

    replacement = history.span(replacement_segment)
    for check, op, start in [
        ("rebuild_equals_one_pass", Rebuild(span), span.start),
        ("refresh_equals_one_pass", SelectiveRefresh(span), span.end),
        ("online_mask_equals_one_pass", OnlineMask(span, replacement), replacement.end),
    ]:
        state = op.prepare(model, history)
        ref = reference_hidden_kv(model, history.input_ids, hidden, start)
        record(check, _max_kv_diff(state.kv, ref, layers), LOGIT_TOLERANCE)

    if not set(model.arch.layer_types) - {"full_attention", "sliding_attention"}:
        op = TextRecompute(record_segment, stored_prefix=True)
        state = op.prepare(model, history)
        fresh = model.prefill(op.edited_prompt(history))
        diff = _max_kv_diff(state.kv, fresh.kv, layers) if state.length == len(fresh) else float("inf")
        got = _logits(model, history, question, [op])[0]
        want = _logits(model, fresh, question, [Full()])[0]
        diff = max(diff, float((got - want).abs().max()))
        record("text_recompute_equals_fresh_prefill", diff, LOGIT_TOLERANCE)

    base = _logits(model, history, question, [Full(), Mask(span), SoftBias({p: 0.0 for p in span.positions()}),
                                               Zero(span, "k")] + ([Drop(span, positions="original")]
                                                                   if rowdelete_ok else []))
    full, masked, zero_bias, zero_k = base[0], base[1], base[2], base[3]
    if rowdelete_ok:
        record("drop_original_positions_equals_mask", float((base[4] - masked).abs().max()), LOGIT_TOLERANCE)
    record("zero_bias_equals_full", float((zero_bias - full).abs().max()), 0.0)
    zstate = Zero(span, "k").prepare(model, history)
    same_shape = zstate.length == T and bool((zstate.key_pos == history.positions).all())
    effect = float((zero_k - full).abs().max())
    record("zero_k_changes_logits_keeps_positions", effect, MIN_EFFECT, passed=same_shape and effect >= MIN_EFFECT)
    return results
