"""``kvprobe verify`` checks for the cache operations, each against an independent reference.

Each check names the operation it covers (the column of the family x
operation matrix). References are plain transformers forwards (no nnsight, no
kvprobe engine, transformers' own eager attention) or the model's own RoPE code:

* ``bias_equals_explicit_mask`` (bias): a soft bias (-0.69 on the record, +0.5 on
  the replacement) equals a plain cached forward whose 4-D additive mask carries
  the same values; ``zero_bias_equals_full``: a bias of zero equals full access exactly.
* ``zero_heads_equals_plain_forward`` (zero-heads): the same for KV head 0's rows only (``Zero(..., heads=)``).
* ``zero_{k,v,kv}_equals_plain_forward`` (zero-k, zero-v, zero-kv): zeroing the
  replacement's cached rows equals a plain forward on a cache copy with those rows
  zeroed, changes the logits by at least ``MIN_EFFECT`` and keeps length and
  positions. (The replacement, the segment nearest the question, is used so that
  sliding windows cannot hide the effect.) Zeroed keys stay in the softmax
  normalizer, unlike masked ones; the tests show it through attention probabilities.
* ``rebuild_equals_one_pass`` / ``refresh_equals_one_pass`` /
  ``online_mask_equals_one_pass``: the recomputed K/V equal one uncached forward
  over the whole history whose 4-D mask hides the record from every non-record row
  from the operation's start on. At most 1e-4.
* ``compact_keys_equal_rope_at_new_positions`` (compact): the RoPE-carrying cached
  tensor after compaction equals the same pre-RoPE tensor (captured with nnsight
  from an uncached forward, after any QK-norm) rotated by the model's own rotary
  code at the new positions; the other cached tensor equals the kept rows exactly.
  Relative to the layer's largest magnitude, at most 1e-5 (the model's rotary
  module rounds p * inv_freq in fp32; the re-rotation algebra itself is tested in
  float64 to 1e-12 in tests/test_interventions.py).
* ``drop_original_positions_equals_mask`` (drop): deleting rows but keeping
  positions equals masking them. At most 1e-4.
* ``text_recompute_equals_one_pass`` (recompute): deleting the record's text and
  prefilling again equals one uncached forward over the edited text + question.
* ``text_recompute_prefix_equals_fresh_prefill`` (recompute-prefix): reusing the
  cached prefix equals a fresh prefill of the edited text (K/V and logits).

Where the model's architecture summary says an operation cannot apply (row
deletion with recurrent layers, zeroing K or V alone on an MLA latent cache,
stored-prefix recompute with recurrent states), the check instead requires the
operation to refuse with an error, and records the message.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import torch

from kvprobe.access import Condition, Full, Mask
from kvprobe.decoding import question_logits, suffix_ids
from kvprobe.reference import cached_explicit_logits, reference_hidden_kv, reference_logits
from . import internals
from .access import PRECISION_FACTOR, CheckResult, verify_access
from .context import CheckContext

from kvprobe.interventions.bias import SoftBias
from kvprobe.interventions.compaction import Compact, Drop
from kvprobe.interventions.recompute import OnlineMask, Rebuild, SegmentRebuild, SelectiveRefresh
from kvprobe.interventions.text import TextRecompute
from kvprobe.interventions.zeroing import Zero

if TYPE_CHECKING:
    from kvprobe.history import History
    from kvprobe.model import Model

MIN_EFFECT = 1e-3
#: Bias values of the bias check (record, replacement): ln(0.5) and a positive boost.
CHECK_BIAS = (-0.69, 0.5)


def prerope_keys(model: "Model", ids: torch.Tensor) -> dict[int, torch.Tensor]:
    """Per layer with rows: the RoPE-carrying cached tensor before RoPE, [1, heads, T, dim] (the adapter's)."""
    return model.adapter.prerope_keys(model, ids)


def rope_with_model(model: "Model", layer: int, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Apply the model's own rotary code to pre-RoPE ``x`` at ``positions`` (the adapter's)."""
    return model.adapter.apply_rope(model, layer, x, positions)


def _max_kv_diff(a, b, layers) -> float:
    return max(max(float((a[i][0] - b[i][0]).abs().max()), float((a[i][1] - b[i][1]).abs().max())) for i in layers)


def _logits(model: "Model", history: "History", question: str, conditions: list[Condition]) -> torch.Tensor:
    """Question logits of each condition run alone (a batch of one row, like the references)."""
    return torch.stack([question_logits(model, history, question, [c]).logits[0] for c in conditions])


class _Checks(CheckContext):
    """The operation checks for one model, history and question (results in ``self.results``)."""

    # -- the checks ---------------------------------------------------------------
    def bias(self) -> None:
        h = self.history
        bias = SoftBias([(self.span, CHECK_BIAS[0]), (self.replacement, CHECK_BIAS[1])])
        zero = SoftBias({p: 0.0 for p in self.span.positions()})
        got = _logits(self.model, h, self.question, [bias, zero, Full()])
        ref = cached_explicit_logits(self.model, h.base_state(), self.q_ids, bias=bias.bias_vector(len(h)))
        self.record("bias", "bias_equals_explicit_mask", float((got[0] - ref).abs().max()), self.logit_tol)
        self.record("bias", "zero_bias_equals_full", float((got[1] - got[2]).abs().max()), 0.0)

    def zero(self, component: str, heads: tuple[int, ...] | None = None) -> None:
        operation = f"zero-{component}" if heads is None else "zero-heads"
        check = f"zero_{component}_equals_plain_forward" if heads is None else "zero_heads_equals_plain_forward"
        op = Zero(self.replacement, component, heads=heads)
        if (component != "kv" or heads is not None) and self.arch.separate_zero_refusal():
            self.expect_refusal(operation, check, lambda: op.prepare(self.model, self.history))
            return
        h = self.history
        state = op.prepare(self.model, h)
        base = h.base_state()
        kv = list(base.kv)
        rows = slice(self.replacement.start, self.replacement.end)
        chosen = slice(None) if heads is None else list(heads)
        for layer in self.arch.kv_layers:  # the reference zeroes the rows by hand
            k, v = (t.clone() for t in kv[layer])
            if "k" in component:
                k[:, chosen, rows] = 0
            if "v" in component:
                v[:, chosen, rows] = 0
            kv[layer] = (k, v)
        ref = cached_explicit_logits(self.model, replace(base, kv=kv), self.q_ids)
        got, full = _logits(self.model, h, self.question, [op, Full()])
        diff = float((got - ref).abs().max())
        effect = float((got - full).abs().max())
        same_shape = state.length == len(h) and bool((state.key_pos == h.positions).all())
        self.record(operation, check, diff, self.logit_tol,
                    passed=diff <= self.logit_tol and effect >= MIN_EFFECT and same_shape)

    def recomputes(self) -> None:
        for operation, check, op, start in [
            ("rebuild", "rebuild_equals_one_pass", Rebuild(self.span), self.span.start),
            ("refresh", "refresh_equals_one_pass", SelectiveRefresh(self.span), self.span.end),
            ("online-mask", "online_mask_equals_one_pass", OnlineMask(self.span, self.replacement),
             self.replacement.end),
        ]:
            state = op.prepare(self.model, self.history)
            ref = reference_hidden_kv(self.model, self.history.input_ids, self.hidden, start)
            self.record(operation, check, _max_kv_diff(state.kv, ref, self.arch.kv_layers), self.kv_tol)
        self.segment_rebuild()

    def segment_rebuild(self) -> None:
        """The replacement segment rebuilt with the record hidden, every other row as cached: its rows equal an
        uncached forward up to the segment's end hiding the record from the segment's tokens only."""
        operation, check = "rebuild-segments", "segment_rebuild_equals_one_pass"
        h, seg = self.history, self.replacement
        op = SegmentRebuild(self.span, [seg])
        if self.arch.recurrent_layers:
            self.expect_refusal(operation, check, lambda: op.prepare(self.model, h))
            return
        state = op.prepare(self.model, h)
        rows = reference_hidden_kv(self.model, h.input_ids[: seg.end], self.hidden[: seg.end], seg.start)
        ref = [(None, None) if k is None else
               (torch.cat([k, hk[:, :, seg.end:]], 2), torch.cat([v, hv[:, :, seg.end:]], 2))
               for (k, v), (hk, hv) in zip(rows, h.kv)]
        self.record(operation, check, _max_kv_diff(state.kv, ref, self.arch.kv_layers), self.kv_tol)

    def compact(self) -> None:
        check = "compact_keys_equal_rope_at_new_positions"
        if self.arch.row_deletion_refusal():
            self.expect_refusal("compact", check, lambda: Compact(self.span).prepare(self.model, self.history))
            return
        h, model = self.history, self.model
        state = Compact(self.span).prepare(model, h)
        pre = prerope_keys(model, h.input_ids)
        kept = ~self.hidden
        new_pos = torch.arange(int(kept.sum()), device=h.device)
        exact = model.dtype != torch.float32  # bf16/fp16: against RoPE computed in float32
        worst, tolerance = 0.0, self.rope_tol
        for layer in self.arch.kv_layers:
            r = self.arch.layers[layer].rope_tensor
            keys = pre[layer].float() if exact else pre[layer]
            ref = rope_with_model(model, layer, keys[:, :, kept], new_pos)
            scale = float(ref.abs().max()) or 1.0
            rope_diff = float((state.kv[layer][r].float() - ref).abs().max()) / scale
            other_diff = float((state.kv[layer][1 - r] - h.kv[layer][1 - r][:, :, kept]).abs().max())
            worst = max(worst, rope_diff, other_diff)
            if exact:  # the model's own low-precision RoPE error on its cached keys, at their positions
                own = rope_with_model(model, layer, keys, h.positions)
                own_error = float((h.kv[layer][r].float() - own).abs().max()) / (float(own.abs().max()) or 1.0)
                tolerance = max(tolerance, PRECISION_FACTOR * own_error)
        self.record("compact", check, worst, tolerance)

    def drop(self) -> None:
        check = "drop_original_positions_equals_mask"
        op = Drop(self.span, positions="original")
        if self.arch.row_deletion_refusal():
            self.expect_refusal("drop", check, lambda: op.prepare(self.model, self.history))
            return
        dropped, masked = _logits(self.model, self.history, self.question, [op, Mask(self.span)])
        self.record("drop", check, float((dropped - masked).abs().max()), self.logit_tol)

    def text_recompute(self) -> None:
        model, h = self.model, self.history
        op = TextRecompute(self.record_segment)
        fresh = model.prefill(op.edited_prompt(h))
        got = _logits(model, h, self.question, [op])[0]
        ref = reference_logits(model, fresh.input_ids.tolist(), suffix_ids(model, fresh, self.question), None,
                               explicit_mask=False)
        self.record("recompute", "text_recompute_equals_one_pass", float((got - ref).abs().max()), self.logit_tol)

        check = "text_recompute_prefix_equals_fresh_prefill"
        prefix_op = TextRecompute(self.record_segment, stored_prefix=True)
        if self.arch.recurrent_layers:
            self.expect_refusal("recompute-prefix", check, lambda: prefix_op.prepare(model, h))
            return
        state = prefix_op.prepare(model, h)
        diff = (_max_kv_diff(state.kv, fresh.kv, self.arch.kv_layers) if state.length == len(fresh)
                else float("inf"))
        got = _logits(model, h, self.question, [prefix_op])[0]
        want = _logits(model, fresh, self.question, [Full()])[0]
        diff = max(diff, float((got - want).abs().max()))
        self.record("recompute-prefix", check, diff, max(self.kv_tol, self.logit_tol))


def verify_operations(model: "Model", history: "History", question: str,
                      record_segment: str = "A", replacement_segment: str = "B") -> list[CheckResult]:
    """Run the operation checks on a history with a record segment and a later replacement."""
    checks = _Checks(model, history, question, record_segment, replacement_segment)
    checks.bias()
    for component in ("k", "v", "kv"):
        checks.zero(component)
    checks.zero("kv", heads=(0,))  # one KV head's rows only
    checks.recomputes()
    checks.compact()
    checks.drop()
    checks.text_recompute()
    internals.capture(checks)
    internals.head_ablation(checks)
    internals.patch(checks)
    return checks.results


def verify_model(model: "Model", history: "History | None" = None, operations: bool = True) -> list[CheckResult]:
    """Everything ``kvprobe verify`` checks: the access checks (a)-(g) of :mod:`kvprobe.tools.verify.access`, then
    (with ``operations``) every cache-operation check of this module on the same history.

    Example::

        import kvprobe
        from kvprobe.tools.verify import verify_model
        assert all(r.passed for r in verify_model(kvprobe.load_model("tiny-llama")))
    """
    return verify_access(model, history, extra=verify_operations if operations else None)
