"""``kvprobe verify`` checks of what a researcher reads and edits inside the forward.

Each against a plain transformers forward that shares no code with kvprobe's engine: transformers'
eager attention on a copy of the row's cache under an explicit 4-D mask
(:func:`kvprobe.reference.cached_explicit_forward`), with torch hooks written here:

* ``run_with_cache_equals_plain_forward`` (capture): ``Model.run_with_cache`` under full access, a
  mask, a bias and a compaction gives the reference's logits, every layer's hidden states
  (``output_hidden_states``), attention probabilities (``output_attentions``) and question keys.
* ``trace_equals_kvprobe_forward`` (capture): ``Model.trace`` without edits gives kvprobe's own
  question logits for the same conditions (kvprobe's edits run as hooks there; the same functions).
* ``head_ablation_equals_hooked_forward`` / ``head_mean_ablation_equals_hooked_forward``
  (head-ablation): two heads of the last attention layer set to zero (or to their mean output over the
  history) equal a forward pre-hook doing so on the layer's output projection.
* ``patch_equals_patching_by_hand`` (patch): the row masking the replacement record (nearest the question,
  so no sliding window hides it) with the residual stream after the middle layer patched from full access, at the question's first and last tokens, equals saving that output
  in a full-access reference run and writing it into the masked reference run with a forward hook.

Tolerances: logits as every operation check (``scaled_tolerance``, with the dtype's precision floor;
twice that for the patch in bf16/fp16, whose patched values carry two forwards' rounding);
keys the K/V tolerance; hidden states scaled to their own largest magnitude (at least the K/V tolerance); attention probabilities 1e-4 in float32 (the dtype's own
rounding, 2 x its epsilon x 64, in bf16/fp16).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Iterable

import torch

from kvprobe.access import Compose, Condition, Full, Mask
from kvprobe.decoding import question_logits
from kvprobe.interventions import Compact, HeadAblation, OperationError, Patch, SoftBias, refusal
from kvprobe.interventions.components import head_means, output_projection
from kvprobe.reference import cached_explicit_forward
from kvprobe.transformers_api import output_cache

from .access import scaled_tolerance

if TYPE_CHECKING:
    from .context import CheckContext

#: Attention-probability tolerance in float32.
ATTENTION_TOLERANCE = 1e-4
#: Heads and positions the component checks use (first and last of each).
FIRST_AND_LAST = (0, -1)


def _attention_tolerance(dtype: torch.dtype) -> float:
    return ATTENTION_TOLERANCE if dtype == torch.float32 else 2 * torch.finfo(dtype).eps * 64


def plain_forward(checks: "CheckContext", condition: Condition,
                  hooks: Iterable[tuple[str, torch.nn.Module, Callable[..., Any]]] = (), outputs: bool = False):
    """The reference forward of the check's question under ``condition``'s cache and mask, with torch hooks
    (``("pre", module, fn)`` forward pre-hooks, ``("out", module, fn)`` forward hooks) installed."""
    model, h = checks.model, checks.history
    state = condition.prepare(model, h, checks.question)
    hidden = next(iter(state.hidden.values())) if state.hidden else None
    bias = next(iter(state.bias.values())) if state.bias else None
    handles = [module.register_forward_hook(fn) if kind == "out" else module.register_forward_pre_hook(fn)
               for kind, module, fn in hooks]
    try:
        return cached_explicit_forward(model, replace(state, hidden={}, bias={}), checks.q_ids, hidden=hidden,
                                       bias=bias, outputs=outputs)
    finally:
        for handle in handles:
            handle.remove()


def capture(checks: "CheckContext") -> None:
    """``run_with_cache`` and ``trace`` against the references (module docstring)."""
    model, h, arch = checks.model, checks.history, checks.model.arch
    candidates = {"full": Full(), "mask": Mask(checks.span), "bias": SoftBias([(checks.span, -0.69)]),
                  "compact": Compact(checks.span)}
    conditions = {name: c for name, c in candidates.items() if refusal(c, h) is None}
    caches = model.run_with_cache(h, checks.question, access=conditions)
    attention_tol = _attention_tolerance(model.dtype)
    worst = (0.0, 1.0)  # (difference, its tolerance) with the largest ratio

    def compare(got: torch.Tensor, want: torch.Tensor, tolerance: float) -> None:
        nonlocal worst
        diff = float((got.float() - want.float()).abs().max())
        if diff / tolerance > worst[0] / worst[1]:
            worst = (diff, tolerance)

    for name, condition in conditions.items():
        ref = plain_forward(checks, condition, outputs=True)
        got = caches[name]
        compare(got.logits, ref.logits[0], checks.logit_tol)
        layers = range(arch.num_layers - 1)  # the last hidden state there has the final norm applied
        hidden_tol = scaled_tolerance(*(ref.hidden_states[layer + 1] for layer in layers),
                                      floor=max(checks.kv_tol, checks.hidden_floor))
        for layer in layers:
            compare(got.hidden[layer], ref.hidden_states[layer + 1][0], hidden_tol)
        for i, layer in enumerate(arch.attention_layers):
            # hybrid models return the attention probabilities of their attention layers only
            probabilities = ref.attentions[layer if len(ref.attentions) == arch.num_layers else i][0]
            if got.attention[layer].shape != probabilities.shape:
                worst = (float("inf"), 1.0)
                continue
            compare(got.attention[layer], probabilities, attention_tol)
            keys = output_cache(ref).layers[arch.layers[layer].kv_layer].keys[0, :, -len(checks.q_ids):]
            compare(got.keys[layer], keys, checks.kv_tol)
    checks.record("capture", "run_with_cache_equals_plain_forward", worst[0], worst[1])

    with model.trace(h, checks.question, access=conditions) as t:
        pass
    want = question_logits(model, h, checks.question, list(conditions.values())).logits
    diff = max(float((t.logits[name].float() - want[row].float()).abs().max())
               for row, name in enumerate(conditions))
    checks.record("capture", "trace_equals_kvprobe_forward", diff, checks.logit_tol)


def head_ablation(checks: "CheckContext") -> None:
    """Zero and mean ablation of two heads of the last attention layer against a hooked plain forward."""
    model, h = checks.model, checks.history
    layer = model.arch.attention_layers[-1]
    heads = tuple(sorted({head % model.arch.num_heads for head in FIRST_AND_LAST}))
    for value, check in (("zero", "head_ablation_equals_hooked_forward"),
                         ("mean", "head_mean_ablation_equals_hooked_forward")):
        condition = HeadAblation(layer, heads, value)
        try:
            projection = output_projection(model, layer)
        except OperationError:  # a family without an o_proj output projection refuses by name
            checks.expect_refusal("head-ablation", check, lambda: condition.prepare(model, h, checks.question))
            continue
        size = projection.in_features // model.arch.num_heads
        replacement = None if value == "zero" else head_means(model, h, layer, heads)

        def ablate(_module, args, replacement=replacement):
            x = args[0].clone()
            for i, head in enumerate(heads):
                x[..., head * size:(head + 1) * size] = 0 if replacement is None else replacement[i]
            return (x,)

        got, full = question_logits(model, h, checks.question, [condition, Full()]).logits
        want = plain_forward(checks, Full(), [("pre", projection, ablate)]).logits[0]
        diff, effect = float((got - want).abs().max()), float((got - full).abs().max())
        checks.record("head-ablation", check, diff, checks.logit_tol,
                      passed=diff <= checks.logit_tol and effect >= 1e-4)


def patch(checks: "CheckContext") -> None:
    """The masked row patched from full access at one layer against patching by hand."""
    model, h = checks.model, checks.history
    layer = model.arch.num_layers // 2
    decoder = model.hf.model.layers[layer]
    saved: dict[str, torch.Tensor] = {}

    def save(_module, _args, output):
        saved["x"] = (output[0] if isinstance(output, tuple) else output).clone()

    def write(_module, _args, output):
        x = output[0] if isinstance(output, tuple) else output
        for p in FIRST_AND_LAST:
            x[:, p % x.shape[1]] = saved["x"][:, p % x.shape[1]]
        return output

    masked = Mask(checks.replacement)  # the segment nearest the question: no sliding window hides it
    plain_forward(checks, Full(), [("out", decoder, save)])
    want = plain_forward(checks, masked, [("out", decoder, write)]).logits[0]
    patched = Patch("full", layer, FIRST_AND_LAST)
    got = question_logits(model, h, checks.question, [Full(), masked, Compose(masked, patched)]).logits
    diff, effect = float((got[2] - want).abs().max()), float((got[2] - got[1]).abs().max())
    # in bf16/fp16 the patched values carry the rounding of two forwards (the source's and the row's own)
    tolerance = checks.logit_tol if model.dtype == torch.float32 else 2 * checks.logit_tol
    checks.record("patch", "patch_equals_patching_by_hand", diff, tolerance,
                  passed=diff <= tolerance and effect >= 1e-5)
