"""Forward planning and execution: extend a batch of cached sequences under access conditions.

Every forward in kvprobe goes through :func:`traced_forward`. It gives the
model explicit ``position_ids`` and explicit 4-D masks (one per layer type,
see ``kvprobe.masks``), and, inside an nnsight trace, replaces each selected
attention layer's mask input by the same mask with the condition's hidden key
columns set to the dtype minimum. Nothing persists after the trace: nnsight
removes its hooks when the ``with`` block ends. :func:`plan_forward` works out
everything a forward needs before it runs (:class:`ForwardPlan`, from the
batch's :class:`~kvprobe.rows.Rows` and the forward's :class:`ForwardInputs`);
:func:`hooked_edits` applies a plan's edits as torch hooks instead, for a trace
the user runs (``Model.trace``). :func:`extend_state` grows a row state by
history tokens, in chunks.

Query-aware methods (Quest, RefreshKV: ``kvprobe.selection``) cannot be
expressed as a fixed hidden set; a batch may carry a ``selector`` that kvprobe's
attention function consults inside every attention call of the forward
(:func:`kvprobe.forward_context.active_selector`).

The batch itself (row states, forking) lives in ``kvprobe.rows``; the component
edits (head outputs, residual patches) in ``kvprobe.component_edits``.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterator

import torch

from .arch import ATTENTION_LAYER_TYPES, FULL_ATTENTION
from .attention import KVPROBE_IMPLEMENTATIONS
from .component_edits import HeadEdit, edit_heads, patch_columns, patch_rows
from .forward_context import ForwardContext, active_selector, forward_context
from .masks import layer_type_masks
from .model_guard import check_model
from .rows import Rows, RowState, fork_rows, recurrent_states
from .slots import SlotLayer
from .transformers_api import cache_argument

if TYPE_CHECKING:
    from .arch import ArchSummary
    from .model_like import ModelLike


#: Default number of history tokens per forward when prefilling or recomputing on a CPU
#: (bounds eager attention memory; the paper used 512-token prefill chunks).
CHUNK_SIZE = 512
#: The same on an accelerator, where few large forwards are faster (a chunk's mask is
#: [chunk, history] in the model's dtype: 256 MiB at 32k tokens in bf16).
ACCELERATOR_CHUNK_SIZE = 4096
#: Devices on which a prefill from an empty cache (nothing hidden, full-attention layers only) runs as
#: one block through SDPA's causal kernel (flash attention) instead of chunks under explicit masks:
#: the same attention, computed by the kernel plain transformers uses. The CPU keeps the chunked,
#: explicit path (its results are bit-identical to the committed runs).
CAUSAL_KERNEL_DEVICES = ("cuda",)


def default_chunk_size(device: torch.device | str) -> int:
    """History tokens per forward for a model on ``device``: :data:`CHUNK_SIZE` on a CPU,
    :data:`ACCELERATOR_CHUNK_SIZE` elsewhere."""
    return CHUNK_SIZE if torch.device(device).type == "cpu" else ACCELERATOR_CHUNK_SIZE


def causal_block_allowed(model: "ModelLike") -> bool:
    """Whether :data:`CAUSAL_KERNEL_DEVICES` covers ``model`` and every attention layer is full attention."""
    return (model.device.type in CAUSAL_KERNEL_DEVICES
            and getattr(model.hf.config, "_attn_implementation", None) in KVPROBE_IMPLEMENTATIONS
            and all(t == FULL_ATTENTION for t in model.arch.distinct_layer_types if t in ATTENTION_LAYER_TYPES))


def shares_history(model: "ModelLike") -> bool:
    """Whether batches of ``model`` can read shared history copies (:func:`~kvprobe.rows.fork_rows` ``share=True``).

    Needs ``model.share_history`` (default True), kvprobe's attention (it reads the shared
    copies) and a family whose attention reads the cached tensors as stored
    (``ArchSummary.shared_history_refusal``).
    """
    impl = getattr(model.hf.config, "_attn_implementation", None)
    return (getattr(model, "share_history", True) and impl in KVPROBE_IMPLEMENTATIONS
            and model.arch.shared_history_refusal is None)


def mask_argument(arch: "ArchSummary", masks: dict[str, torch.Tensor]) -> "torch.Tensor | dict[str, torch.Tensor | None]":
    """What transformers takes as ``attention_mask``: one 4-D mask, or a dict per layer type.

    Recurrent layer types get ``None`` (they read no mask; batches never pad inside them).
    """
    if len(arch.distinct_layer_types) == 1:
        return next(iter(masks.values()))
    return {t: masks.get(t) for t in arch.distinct_layer_types}


@dataclass(frozen=True)
class ForwardInputs:
    """What one forward of Q new tokens per row is given (:func:`traced_forward`'s arguments after the rows).

    Attributes:
        input_ids: Long[B, Q]; padding tokens must be marked invalid in ``query_valid``.
        query_valid: Bool[B, Q], default all valid.
        query_pos: Long[B, Q] RoPE positions; default continues each row contiguously
            over its valid tokens.
        capture_attention: layers whose attention probabilities to return.
        logits_to_keep: if > 0, only the last that many positions' logits are computed.
        affected_rows: Bool[B, Q] query tokens the hidden slots and biases apply to
            (default all; rebuilding states exempts the hidden record's own tokens).
        new_hidden: Bool[B, Q] new slots to hide from later tokens in every hiding layer.
        capture_hidden: layers whose output hidden states (the residual stream after
            the layer) to return.
        causal_block: the caller guarantees one row, an empty cache, positions 0..Q-1, every token
            valid and nothing hidden (a prefill's only chunk): attention runs SDPA's causal kernel
            without building a [Q, Q] mask (:func:`causal_block_allowed` must hold).
    """

    input_ids: torch.Tensor
    query_valid: torch.Tensor | None = None
    query_pos: torch.Tensor | None = None
    capture_attention: tuple[int, ...] = ()
    logits_to_keep: int = 0
    affected_rows: torch.Tensor | None = None
    new_hidden: torch.Tensor | None = None
    capture_hidden: tuple[int, ...] = ()
    causal_block: bool = False


@dataclass
class ForwardOutput:
    """Logits of one traced forward and any captured attention probabilities."""

    logits: torch.Tensor  # Float[B, Q, V]
    attention: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [B, H, Q, S]
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [B, Q, d_model] (layer output)


def traced_forward(
    model: "ModelLike",
    rows: Rows,
    input_ids: torch.Tensor,
    query_valid: torch.Tensor | None = None,
    query_pos: torch.Tensor | None = None,
    capture_attention: tuple[int, ...] = (),
    logits_to_keep: int = 0,
    affected_rows: torch.Tensor | None = None,
    new_hidden: torch.Tensor | None = None,
    capture_hidden: tuple[int, ...] = (),
    causal_block: bool = False,
) -> ForwardOutput:
    """Run Q new tokens per row through the model, appending them to ``rows`` (updated in place: the cache
    grows by Q slots).

    The arguments after ``rows`` are the fields of :class:`ForwardInputs` (documented there), which
    :func:`plan_forward` takes as one value.

    Example:
        >>> out = traced_forward(model, rows, ids, valid, logits_to_keep=1)  # doctest: +SKIP
        >>> out.logits.shape  # [B, 1, vocabulary]  # doctest: +SKIP
    """
    check_model(model)  # another library may have changed the model since it was loaded (before rows change)
    inputs = ForwardInputs(input_ids, query_valid, query_pos, capture_attention, logits_to_keep, affected_rows,
                           new_hidden, capture_hidden, causal_block)
    plan = plan_forward(model, rows, inputs)
    hidden, bias = plan.hidden, plan.bias
    with torch.inference_mode(), active_selector(rows.selector), forward_context(plan.context):
        if not plan.touched:
            logits = model.hf(**plan.kwargs).logits
            return ForwardOutput(logits=logits)
        captured, hidden_states = {}, {}
        with model.nn.trace(**plan.kwargs):
            for layer in plan.touched:  # in execution order: attention mask, head outputs, attention, layer output
                if layer in hidden or layer in bias or layer in capture_attention or layer in plan.head_edits:
                    attn = model.attention_envoy(layer)
                if layer in hidden or layer in bias:
                    args, kw = attn.inputs
                    kw["attention_mask"] = plan.edit_mask(layer, kw["attention_mask"])
                    attn.inputs = (args, kw)
                if layer in plan.head_edits:
                    edit_heads(attn.o_proj.input, plan.head_edits[layer], model.arch.num_heads)
                if layer in capture_attention:
                    captured[layer] = attn.output[1].save()
                if layer in plan.patches:
                    patch_rows(model.layer_envoy(layer).output, plan.patches[layer])
                if layer in capture_hidden:
                    hidden_states[layer] = model.layer_envoy(layer).output.save()
            logits = model.nn.output.logits.save()
    return ForwardOutput(logits=logits, attention=dict(captured), hidden=dict(hidden_states))


@dataclass
class ForwardPlan:
    """Everything one forward of new tokens needs, worked out before it runs (:func:`plan_forward`).

    Attributes:
        kwargs: what the transformers model is called with (ids, 4-D masks, positions, the batch's cache).
        hidden: layer -> Bool[B, S] slots each layer still hides inside the forward (empty when the
            hidden set was folded into the masks).
        bias: layer -> Float[B, S] logit bias added inside the forward.
        affected_rows: Bool[B, Q] tokens the hidden slots and biases apply to, or None for all.
        minimum: the dtype's minimum (a hidden slot's logit).
        head_edits: layer -> [(row, HeadEdit)].
        patches: layer -> [((target row, its block columns), (source row, its block columns))].
        context: what kvprobe's attention reads during the forward.
        touched: layers whose forward something edits or captures (ascending).
    """

    kwargs: dict[str, Any]
    hidden: dict[int, torch.Tensor]
    bias: dict[int, torch.Tensor]
    affected_rows: torch.Tensor | None
    minimum: float
    head_edits: dict[int, list[tuple[int, HeadEdit]]]
    patches: dict[int, list[tuple[tuple[int, torch.Tensor], tuple[int, torch.Tensor]]]]
    context: ForwardContext
    touched: list[int]

    def edit_mask(self, layer: int, mask: torch.Tensor) -> torch.Tensor:
        """Layer ``layer``'s additive mask with its bias added and its hidden slots hidden."""
        return _edit_mask(mask, self.hidden.get(layer), self.bias.get(layer), self.affected_rows, self.minimum)


def plan_forward(model: "ModelLike", rows: Rows, inputs: ForwardInputs) -> ForwardPlan:
    """Register the new slots in ``rows`` and plan the forward of ``inputs``.

    Bad patches (a source row whose question differs in length, positions out of range) are refused
    here, before anything runs.
    """
    input_ids, query_valid, query_pos = inputs.input_ids, inputs.query_valid, inputs.query_pos
    affected_rows, capture_attention, causal_block = inputs.affected_rows, inputs.capture_attention, inputs.causal_block
    B, Q = input_ids.shape
    if query_valid is None:
        query_valid = torch.ones(B, Q, dtype=torch.bool, device=input_ids.device)
    if query_pos is None:
        start = (rows.next_positions() if rows.key_pos.shape[1]
                 else torch.zeros(B, dtype=torch.long, device=input_ids.device))
        offsets = torch.cumsum(query_valid.long(), dim=1) - 1
        query_pos = start[:, None] + offsets.clamp(min=0)
    patches = patch_columns(rows.patches, query_valid)
    rows.patches = {}  # a patch acts in the question's forward only
    rows.append_slots(query_pos, query_valid, inputs.new_hidden)
    minimum = torch.finfo(model.dtype).min
    if causal_block:  # a placeholder the attention ignores (ForwardContext.causal); no [Q, Q] tensor is made
        placeholder = torch.zeros((), dtype=model.dtype, device=input_ids.device).expand(B, 1, Q, Q)
        masks = {t: placeholder for t in model.arch.distinct_layer_types if t in ATTENTION_LAYER_TYPES}
    else:
        masks = layer_type_masks(model.arch, query_pos, rows.key_pos, rows.key_valid, model.dtype)
    hidden = rows.hidden
    folded = uniform_hidden(model, rows)
    if folded is not None:
        # Every attention layer hides the same slots: hide them in the masks the model is given (the
        # same masked_fill the per-layer intervention would apply to each layer's mask input, so the
        # same logits, bit for bit) and run without a trace. Decode steps are launch-bound on a GPU.
        masks = {t: _edit_mask(m, folded, None, affected_rows, minimum) for t, m in masks.items()}
        hidden = {}
    kwargs = dict(
        input_ids=input_ids,
        attention_mask=mask_argument(model.arch, masks),
        position_ids=query_pos,
        use_cache=True,
        **cache_argument(model.hf, rows.cache),
    )
    if inputs.logits_to_keep:
        kwargs["logits_to_keep"] = inputs.logits_to_keep
    touched = sorted(set(hidden) | set(rows.bias) | set(capture_attention) | set(inputs.capture_hidden)
                     | set(rows.head_edits) | set(patches))
    if rows.selector is not None:
        rows.selector.begin(rows, Q)
    context = ForwardContext(cache=rows.cache, kv_source=model.arch.kv_sources,
                             probabilities=frozenset(capture_attention), causal=causal_block)
    return ForwardPlan(kwargs, hidden, rows.bias, affected_rows, minimum, rows.head_edits, patches, context, touched)


@contextmanager
def hooked_edits(model: "ModelLike", plan: ForwardPlan) -> Iterator[None]:
    """The plan's edits (hidden slots and biases, head outputs, residual patches) as torch hooks on the
    model's modules, for a forward kvprobe does not trace itself (``Model.trace``: the user's nnsight
    trace). The edits are the ones :func:`traced_forward` applies through nnsight, through the same
    functions."""
    handles = []
    try:
        for layer in plan.touched:
            attention = model.hf.model.layers[layer].self_attn
            if layer in plan.hidden or layer in plan.bias:
                def edit_mask(_module, args, kwargs, layer=layer):
                    kwargs["attention_mask"] = plan.edit_mask(layer, kwargs["attention_mask"])
                    return args, kwargs
                handles.append(attention.register_forward_pre_hook(edit_mask, with_kwargs=True))
            if layer in plan.head_edits:
                def edit_head_outputs(_module, args, edits=plan.head_edits[layer]):
                    edit_heads(args[0], edits, model.arch.num_heads)
                handles.append(attention.o_proj.register_forward_pre_hook(edit_head_outputs))
            if layer in plan.patches:
                def patch(_module, _args, output, entries=plan.patches[layer]):
                    patch_rows(output, entries)
                handles.append(model.hf.model.layers[layer].register_forward_hook(patch))
        yield
    finally:
        for handle in handles:
            handle.remove()


#: Fold a hidden set that every attention layer shares into the model's masks (:func:`uniform_hidden`)
#: instead of editing each layer's mask inside an nnsight trace. Both give the same logits bit for bit
#: (tests/test_fast_paths.py); False forces the traced edit everywhere.
FOLD_UNIFORM_MASKS = True


def uniform_hidden(model: "ModelLike", rows: Rows) -> torch.Tensor | None:
    """The one Bool[B, S] hidden table every attention layer of ``rows`` uses, or None.

    None when layers hide different slots (``Mask(..., layers=...)``), when a logit bias is
    present (it is added before hiding, per layer), when the model has layers that read another
    layer's rows or see only some query rows (KV sharing), or when :data:`FOLD_UNIFORM_MASKS` is off.
    """
    if not FOLD_UNIFORM_MASKS or not rows.hidden or rows.bias or model.arch.shared_layers:
        return None
    tables = {id(t): t for t in rows.hidden.values()}
    if len(tables) != 1 or set(rows.hidden) != set(model.arch.attention_layers):
        return None
    return next(iter(tables.values()))


def _edit_mask(
    mask: torch.Tensor,
    hidden: torch.Tensor | None,
    bias: torch.Tensor | None,
    affected_rows: torch.Tensor | None,
    minimum: float,
) -> torch.Tensor:
    """Add the logit bias to, then hide slots from, a layer's [B, 1, Q, S] additive mask.

    A layer may see only the last query rows (Gemma 4's KV-sharing layers compute
    just the positions whose logits are kept); ``affected_rows`` is cut to match.
    """
    if mask.device != (hidden if hidden is not None else bias).device:  # a layer on another device (device="auto")
        hidden = None if hidden is None else hidden.to(mask.device)
        bias = None if bias is None else bias.to(mask.device)
        affected_rows = None if affected_rows is None else affected_rows.to(mask.device)
    rows = None if affected_rows is None else affected_rows[:, None, -mask.shape[2]:, None]
    if bias is not None:
        b = bias[:, None, None, :].to(mask.dtype)
        mask = mask + (b if rows is None else b * rows)
    if hidden is not None:
        hide = hidden[:, None, None, :]
        mask = mask.masked_fill(hide if rows is None else hide & rows, minimum)
    return mask


def extend_state(
    model: "ModelLike",
    prefix: RowState,
    ids: torch.Tensor,
    positions: torch.Tensor,
    chunk_size: int | None = None,
    hidden: torch.Tensor | None = None,
    affected: torch.Tensor | None = None,
    layers: tuple[int, ...] | None = None,
) -> RowState:
    """Run history tokens ``ids`` (at ``positions``) after ``prefix``, in chunks; return the grown state.

    Args:
        hidden: Bool[prefix + n] slots (prefix and new) hidden from the ``affected`` new tokens.
        affected: Bool[n] new tokens that cannot see ``hidden`` (default: those not hidden).
        layers: attention layers in which ``hidden`` applies (default: every attention layer).
    The returned state hides nothing; callers decide what later tokens may read.
    """
    n = int(ids.shape[0])
    P = prefix.length
    chosen = chunk_size is not None  # a chunk size the caller asked for is honoured everywhere
    if chunk_size is None:
        chunk_size = default_chunk_size(ids.device)
    # room for every new row (no regrowth); the history's own tokens run without the row's component edits
    rows = fork_rows([replace(prefix, hidden={}, bias={}, head_edits={}, patches={})], spare=n)
    # A prefill from nothing on an accelerator, chunk size left to the device: one block through the causal
    # kernel (CAUSAL_KERNEL_DEVICES).
    causal = (not chosen and P == 0 and hidden is None and layers is None and n > 0 and not prefix.recurrent
              and causal_block_allowed(model) and int(positions[0]) == 0 and int(positions[-1]) == n - 1)
    if causal:
        chunk_size = n
    if hidden is not None:
        shared = hidden[None, :P].clone()  # one tensor for all layers, grown once per chunk
        rows.hidden = {layer: shared for layer in (model.arch.attention_layers if layers is None else layers)}
        if affected is None:
            affected = ~hidden[P:]
    for lo in range(0, n, chunk_size):
        hi = min(lo + chunk_size, n)
        traced_forward(
            model,
            rows,
            ids[lo:hi][None],
            query_pos=positions[lo:hi][None],
            affected_rows=None if hidden is None else affected[lo:hi][None],
            new_hidden=None if hidden is None else hidden[P + lo : P + hi][None],
            logits_to_keep=1,
            causal_block=causal,
        )
    # Compact tensors: a history keeps no spare capacity of the batch's buffers.
    kv = [cache_layer.compact() if isinstance(cache_layer, SlotLayer) else (None, None)
          for cache_layer in rows.cache.layers]
    return RowState(
        kv=kv,
        key_pos=torch.cat([prefix.key_pos, positions]),
        key_valid=torch.ones(P + n, dtype=torch.bool, device=ids.device),
        input_ids=torch.cat([prefix.input_ids, ids]),
        slot_of=torch.arange(P + n, device=ids.device),
        recurrent=recurrent_states(rows, prefix.recurrent),
    )
