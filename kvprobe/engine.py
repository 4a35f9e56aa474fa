"""The traced forward pass: extend a batch of cached sequences under access conditions.

Every forward in kvprobe goes through :func:`traced_forward`. It gives the
model explicit ``position_ids`` and explicit 4-D masks (one per layer type,
see ``kvprobe.masks``), and, inside an nnsight trace, replaces each selected
attention layer's mask input by the same mask with the condition's hidden key
columns set to the dtype minimum. Nothing persists after the trace: nnsight
removes its hooks when the ``with`` block ends.

Query-aware methods (Quest, RefreshKV: ``kvprobe.selection``) cannot be
expressed as a fixed hidden set; a batch may carry a ``selector`` that kvprobe's
attention function consults inside every attention call of the forward.

A :class:`Rows` object is the per-row state of a batch: the cache, every key
slot's RoPE position and validity, and per layer the key slots that row's
condition hides. The cache either gives every row its own copy of its history
(:class:`~kvprobe.slots.SlotLayer`) or, with ``fork_rows(..., share=True)``, lets
rows whose K/V are the same tensors (access-only conditions of one history, or
the questions of one edited state) read one shared copy and store only their own
new slots (:class:`~kvprobe.slots.SharedSlotLayer`; see docs/concepts.md, "Memory
layout of a batch"). Both layouts compute the same attention.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DummyLayer, LinearAttentionLayer

from . import selection
from .attention import KVPROBE_IMPLEMENTATIONS, ForwardContext, forward_context
from .arch import ATTENTION_LAYER_TYPES, FULL_ATTENTION
from .masks import layer_type_masks
from .slots import SPARE_SLOTS, SharedSlotLayer, SlotLayer
from .transformers_api import cache_argument

if TYPE_CHECKING:
    from .arch import ArchSummary
    from .model import Model
    from .selection import KeySelector


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


def causal_block_allowed(model: "Model") -> bool:
    """Whether :data:`CAUSAL_KERNEL_DEVICES` covers ``model`` and every attention layer is full attention."""
    return (model.device.type in CAUSAL_KERNEL_DEVICES
            and getattr(model.hf.config, "_attn_implementation", None) in KVPROBE_IMPLEMENTATIONS
            and all(t == FULL_ATTENTION for t in model.arch.distinct_layer_types if t in ATTENTION_LAYER_TYPES))


@dataclass(frozen=True)
class HeadEdit:
    """Replace some attention heads' outputs (the input of the layer's output projection) for every token a
    row runs after its history: zeros, or one fixed vector per head.

    Attributes:
        heads: query-head indices.
        values: Float[len(heads), head_dim] each head's replacement, or None for zeros.
    """

    heads: tuple[int, ...]
    values: torch.Tensor | None = None


@dataclass(frozen=True)
class ResidualPatch:
    """Copy the residual stream after a layer from another row of the same batch, at question positions.

    Attributes:
        source: the name of the condition whose row is copied (it must be in the batch).
        positions: indices into the question's tokens (0 = its first), or None for every question token.
    """

    source: str
    positions: tuple[int, ...] | None = None


class PatchError(ValueError):
    """A residual patch names a source that is not in the batch, or rows whose questions differ in length."""


@dataclass
class RowState:
    """What one row of a batch starts from: a (possibly edited) cache and what later tokens may read.

    Access conditions and cache operations produce a ``RowState`` from a
    history; the engine stacks several into a batch. Tensors here are never
    modified by the engine (every batch copies them).

    Attributes:
        kv: per layer (K, V) as cached, shapes [1, heads, S, dim] (``LayerSpec.key_shape`` /
            ``value_shape``; K after RoPE); ``(None, None)`` for layers without rows of
            their own (recurrent layers, layers reading another layer's K/V).
        key_pos: Long[S] RoPE position of every slot.
        key_valid: Bool[S] false for slots that must never be read.
        hidden: layer -> Bool[S] slots hidden from every later token in that layer.
        bias: layer -> Float[S] additive attention-logit bias for later tokens in that layer.
        slot_of: Long[T] for each position of the *original* history, its slot here
            (-1 if the operation removed it); lets access conditions written in history
            coordinates apply after a cache operation.
        input_ids: Long[S] the token in each slot (for inspection and references).
        recurrent: layer -> (conv state, recurrent state) of recurrent (linear-attention)
            layers of hybrid models, batch 1, ``None`` before any token; their ``kv``
            entries are ``(None, None)``. Masks never touch these layers; rows carry
            their own copies.
        info: free-form facts an operation reports (rows freed, prefix reused...).
        head_edits: layer -> :class:`HeadEdit` applied to every token after the history (head ablation).
        patches: layer -> :class:`ResidualPatch` applied once, in the question's forward.
    """

    kv: list[tuple[torch.Tensor, torch.Tensor]]
    key_pos: torch.Tensor
    key_valid: torch.Tensor
    input_ids: torch.Tensor
    slot_of: torch.Tensor
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)
    bias: dict[int, torch.Tensor] = field(default_factory=dict)
    recurrent: dict[int, tuple[torch.Tensor | None, torch.Tensor | None]] = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    head_edits: dict[int, HeadEdit] = field(default_factory=dict)
    patches: dict[int, ResidualPatch] = field(default_factory=dict)

    @property
    def length(self) -> int:
        """Number of slots."""
        return int(self.key_pos.shape[0])

    def hide(self, slots: torch.Tensor, layers: tuple[int, ...]) -> "RowState":
        """A copy with Bool[S] ``slots`` also hidden in ``layers``."""
        hidden = dict(self.hidden)
        shared = slots.clone()  # one tensor for every layer that hid nothing before (batched once)
        for layer in layers:
            hidden[layer] = hidden[layer] | slots if layer in hidden else shared
        return replace(self, hidden=hidden)

    def add_bias(self, values: torch.Tensor, layers: tuple[int, ...]) -> "RowState":
        """A copy with Float[S] ``values`` added to the logit bias of ``layers``."""
        bias = dict(self.bias)
        shared = values.clone()
        for layer in layers:
            bias[layer] = bias[layer] + values if layer in bias else shared
        return replace(self, bias=bias)

    def kv_bytes(self) -> int:
        """Bytes of stored K and V (recurrent states not included)."""
        return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in self.kv if k is not None)


@dataclass
class Rows:
    """Per-row state of a batch of sequences.

    Attributes:
        cache: transformers cache with B rows (each row its own copy).
        key_pos: Long[B, S] RoPE position of every key slot.
        key_valid: Bool[B, S] false for padding slots.
        hidden: layer index -> Bool[B, S] key slots hidden in that layer.
        bias: layer index -> Float[B, S] additive logit bias in that layer.
        selector: query-aware key selection consulted inside every attention call
            (``kvprobe.selection``), or None.
        head_edits: layer -> [(row, :class:`HeadEdit`)] applied in every forward.
        patches: layer -> [(target row, source row, question positions or None)], applied in the next
            forward only (the question's), then cleared.
    """

    cache: DynamicCache
    key_pos: torch.Tensor
    key_valid: torch.Tensor
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)
    bias: dict[int, torch.Tensor] = field(default_factory=dict)
    selector: "KeySelector | None" = None
    head_edits: dict[int, list[tuple[int, HeadEdit]]] = field(default_factory=dict)
    patches: dict[int, list[tuple[int, int, tuple[int, ...] | None]]] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return self.key_pos.shape[0]

    def next_positions(self) -> torch.Tensor:
        """Long[B]: position of the next token of each row (one past its last valid slot)."""
        masked = torch.where(self.key_valid, self.key_pos, torch.full_like(self.key_pos, -1))
        return masked.max(dim=1).values + 1

    def take(self, indices: torch.Tensor) -> "Rows":
        """A new batch of the rows ``indices`` (Long[B'], repeats allowed), each with its own cache copy."""
        cache = DynamicCache()
        cache.layers = [_take_layer(layer, indices) for layer in self.cache.layers]
        tables = []
        for table in (self.hidden, self.bias):
            picked: dict[int, torch.Tensor] = {}  # layers sharing one tensor keep sharing it
            tables.append({layer: picked.setdefault(id(t), t[indices]) for layer, t in table.items()})
        new_of_old: dict[int, list[int]] = {}
        for new, old in enumerate(indices.tolist()):
            new_of_old.setdefault(old, []).append(new)
        head_edits = {layer: [(new, e) for row, e in edits for new in new_of_old.get(row, [])]
                      for layer, edits in self.head_edits.items()}
        # patches act in the question's forward only, which has run by the time rows are taken
        return Rows(cache, self.key_pos[indices], self.key_valid[indices], tables[0], tables[1],
                    head_edits={layer: e for layer, e in head_edits.items() if e})

    @property
    def length(self) -> int:
        """Number of key slots (the same for every row)."""
        return int(self.key_pos.shape[1])

    @property
    def can_truncate(self) -> bool:
        """Whether :meth:`truncate` works (recurrent states cannot be rolled back)."""
        return all(isinstance(layer, (SlotLayer, DummyLayer)) for layer in self.cache.layers)

    def truncate(self, length: int) -> None:
        """Forget every slot from ``length`` on (undo forwards run since the batch had ``length`` slots).

        Attention-only batches; recurrent layers keep no history to roll back to.
        """
        if not self.can_truncate:
            raise ValueError("a batch with recurrent layers cannot be truncated; take a copy of its rows instead")
        for layer in self.cache.layers:
            if isinstance(layer, SlotLayer):
                layer.truncate(length)
        self.key_pos, self.key_valid = self.key_pos[:, :length], self.key_valid[:, :length]
        for table in (self.hidden, self.bias):
            cut: dict[int, torch.Tensor] = {}
            for layer, t in table.items():
                table[layer] = cut.setdefault(id(t), t[:, :length])

    def select(self, keep: torch.Tensor) -> None:
        """Keep only the rows ``keep`` (Long[B']) of the batch, in that order (e.g. drop finished rows)."""
        taken = self.take(keep)
        self.cache, self.key_pos, self.key_valid = taken.cache, taken.key_pos, taken.key_valid
        self.hidden, self.bias, self.head_edits = taken.hidden, taken.bias, taken.head_edits
        if self.selector is not None:
            self.selector.keep_rows(keep)

    def append_slots(
        self, query_pos: torch.Tensor, query_valid: torch.Tensor, new_hidden: torch.Tensor | None = None
    ) -> None:
        """Register Q new key slots per row (called before the forward that writes them).

        ``new_hidden`` (Bool[B, Q]) marks new slots hidden in every layer that already
        hides something (used when history states are rebuilt with a record hidden).
        """
        self.key_pos = torch.cat([self.key_pos, query_pos], dim=1)
        self.key_valid = torch.cat([self.key_valid, query_valid], dim=1)
        for table, new in ((self.hidden, new_hidden), (self.bias, None)):
            grown: dict[int, torch.Tensor] = {}
            for layer, t in table.items():
                if id(t) not in grown:  # layers usually share one tensor; grow it once
                    extra = new if new is not None else t.new_zeros(t.shape[0], query_pos.shape[1])
                    grown[id(t)] = torch.cat([t, extra.to(t.dtype)], dim=1)
                table[layer] = grown[id(t)]


def mask_argument(arch: "ArchSummary", masks: dict[str, torch.Tensor]) -> "torch.Tensor | dict[str, torch.Tensor | None]":
    """What transformers takes as ``attention_mask``: one 4-D mask, or a dict per layer type.

    Recurrent layer types get ``None`` (they read no mask; batches never pad inside them).
    """
    if len(arch.distinct_layer_types) == 1:
        return next(iter(masks.values()))
    return {t: masks.get(t) for t in arch.distinct_layer_types}


def shares_history(model: "Model") -> bool:
    """Whether batches of ``model`` can read shared history copies (:func:`fork_rows` ``share=True``).

    Needs ``model.share_history`` (default True), kvprobe's attention (it reads the shared
    copies) and a family whose attention reads the cached tensors as stored
    (``ArchSummary.shared_history_refusal``).
    """
    impl = getattr(model.hf.config, "_attn_implementation", None)
    return (getattr(model, "share_history", True) and impl in KVPROBE_IMPLEMENTATIONS
            and model.arch.shared_history_refusal is None)


def fork_rows(states: list[RowState], share: bool = False, spare: int = SPARE_SLOTS,
              names: Sequence[str] | None = None) -> Rows:
    """Stack row states into one batch.

    Rows with fewer slots are padded at the end with invalid slots, which no
    token ever reads. By default every row gets its own copy of its cache. With
    ``share=True`` (only for models where :func:`shares_history` holds), a layer
    whose rows read one K/V tensor pair, or at least two rows per distinct pair,
    keeps one reference to each distinct pair and gives rows storage only for
    their new slots: B access-only rows over a T-token history then hold
    T + B x (new slots) instead of B x T (one row: no copy of its history). ``spare``: new slots allocated per row
    before a buffer has to grow (a prefill passes its length). ``names``: each row's condition name, which
    residual patches (:class:`ResidualPatch`) name their source row by.
    """
    n, S = len(states), max(s.length for s in states)
    patches = _resolve_patches(states, names)
    cache = DynamicCache()
    cache.layers = []
    for layer in range(len(states[0].kv)):
        if layer in states[0].recurrent:
            cache.layers.append(LinearAttentionLayer())  # recurrent layer: filled below
        elif states[0].kv[layer][0] is None:
            cache.layers.append(DummyLayer())  # reads another layer's rows
        else:
            cache.layers.append(_attention_layer([s.kv[layer] for s in states], S, share, spare))
    device = states[0].key_pos.device  # the model's device (``Model.device``): positions, masks, tables
    key_pos = torch.zeros(n, S, dtype=torch.long, device=device)
    key_valid = torch.zeros(n, S, dtype=torch.bool, device=device)
    for i, s in enumerate(states):
        key_pos[i, : s.length] = s.key_pos
        key_valid[i, : s.length] = s.key_valid
    for layer in states[0].recurrent:
        cache.layers[layer] = _recurrent_layer([s.recurrent[layer] for s in states])
    return Rows(
        cache=cache,
        key_pos=key_pos,
        key_valid=key_valid,
        hidden=_stack_per_layer([s.hidden for s in states], n, S, torch.bool, device),
        bias=_stack_per_layer([s.bias for s in states], n, S, torch.float32, device),
        head_edits=_by_layer([(row, layer, e) for row, s in enumerate(states) for layer, e in s.head_edits.items()]),
        patches=patches,
    )


def _by_layer(entries: list[tuple[int, int, Any]]) -> dict[int, list[tuple[int, Any]]]:
    out: dict[int, list[tuple[int, Any]]] = {}
    for row, layer, value in entries:
        out.setdefault(layer, []).append((row, value))
    return out


def _resolve_patches(states: list[RowState], names: Sequence[str] | None
                     ) -> dict[int, list[tuple[int, int, tuple[int, ...] | None]]]:
    """layer -> [(target row, source row, positions)] for the rows' residual patches.

    The source row is named by its condition; where a condition has several rows (several questions),
    the k-th row of the target reads the k-th row of the source (callers order each condition's rows alike).
    """
    out: dict[int, list[tuple[int, int, tuple[int, ...] | None]]] = {}
    if not any(s.patches for s in states):
        return out
    rows_of: dict[str, list[int]] = {}
    for row, name in enumerate(names or ()):
        rows_of.setdefault(name, []).append(row)
    for row, s in enumerate(states):
        for layer, patch in s.patches.items():
            if names is None or patch.source not in rows_of:
                known = "no names were given" if names is None else f"the batch holds {sorted(rows_of)}"
                raise PatchError(f"patch from {patch.source!r} at layer {layer}: that condition is not in the "
                                 f"batch ({known}); run the source condition in the same call")
            own, source = rows_of[names[row]], rows_of[patch.source]
            if len(own) != len(source):
                raise PatchError(f"patch from {patch.source!r}: {len(source)} rows for {len(own)} rows of "
                                 f"{names[row]!r}; give both conditions the same questions")
            out.setdefault(layer, []).append((row, source[own.index(row)], patch.positions))
    return out


def _attention_layer(kv: list[tuple[torch.Tensor, torch.Tensor]], length: int, share: bool, spare: int) -> SlotLayer:
    """One attention layer's cache for rows with these (K, V): shared bases or per-row copies.

    Shared when every row reads one base (a single row then reads the history in place, with
    no copy) or the rows average at least two per base; many distinct bases with a row each
    batch better as copies.
    """
    if share:
        index: dict[int, int] = {}
        bases: list[tuple[torch.Tensor, torch.Tensor]] = []
        of_row = []
        for k, v in kv:
            key = (id(k), id(v))  # an edit may replace only one of the two (zero-v)
            if key not in index:
                index[key] = len(bases)
                bases.append((k, v))
            of_row.append(index[key])
        if (len(bases) == 1 or 2 * len(bases) <= len(kv)) and length > 0:
            return SharedSlotLayer(bases, torch.tensor(of_row, dtype=torch.long, device=bases[0][0].device),
                                   length, spare)
    return SlotLayer([k for k, _ in kv], [v for _, v in kv], spare)


def _take_layer(layer, indices: torch.Tensor):
    """A copy of one cache layer holding the rows ``indices``."""
    if isinstance(layer, SlotLayer):
        return layer.take(indices)
    if isinstance(layer, DummyLayer):
        return DummyLayer()
    if isinstance(layer, LinearAttentionLayer):
        if layer.conv_states.get(0) is None:  # nothing read yet
            return LinearAttentionLayer()
        conv, rec = layer.conv_states[0], layer.recurrent_states[0]
        return _recurrent_layer([(conv[i : i + 1], rec[i : i + 1]) for i in indices.tolist()])
    raise TypeError(f"unexpected cache layer {type(layer).__name__}")


def _recurrent_layer(per_row: list[tuple[torch.Tensor | None, torch.Tensor | None]]) -> LinearAttentionLayer:
    """A transformers linear-attention cache layer holding every row's own copy of its states."""
    layer = LinearAttentionLayer()
    conv, rec = per_row[0]
    if conv is None:  # nothing read yet: the model initializes the layer on its first forward
        return layer
    layer.conv_states[0] = torch.cat([c for c, _ in per_row])
    layer.recurrent_states[0] = torch.cat([r for _, r in per_row])
    layer.conv_kernel_size[0] = conv.shape[-1]
    layer.is_conv_states_initialized[0] = layer.is_recurrent_states_initialized[0] = True
    layer.has_previous_state[0] = True
    layer.dtype, layer.device = conv.dtype, conv.device
    return layer


def recurrent_states(rows: "Rows", layers) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    """The conv and recurrent states a batch holds now, per recurrent layer (all rows)."""
    return {i: (rows.cache.layers[i].conv_states[0], rows.cache.layers[i].recurrent_states[0]) for i in layers}


def _stack_per_layer(tables: list[dict[int, torch.Tensor]], n: int, S: int, dtype,
                     device: torch.device) -> dict[int, torch.Tensor]:
    """Stack per-row ``layer -> [S_i]`` tables into ``layer -> [n, S]``, sharing identical stacks."""
    out: dict[int, torch.Tensor] = {}
    by_content: dict[tuple, torch.Tensor] = {}
    for layer in sorted({layer for t in tables for layer in t}):
        key = tuple(id(t.get(layer)) if layer in t else None for t in tables)
        if key not in by_content:
            stacked = torch.zeros(n, S, dtype=dtype, device=device)
            for i, t in enumerate(tables):
                if layer in t:
                    stacked[i, : t[layer].shape[0]] = t[layer]
            by_content[key] = stacked
        # All-false hidden tables are dropped; bias tables are kept even when zero so
        # that a zero bias really runs through the intervention.
        if dtype != torch.bool or by_content[key].any():
            out[layer] = by_content[key]
    return out


@dataclass
class ForwardOutput:
    """Logits of one traced forward and any captured attention probabilities."""

    logits: torch.Tensor  # Float[B, Q, V]
    attention: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [B, H, Q, S]
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [B, Q, d_model] (layer output)


def traced_forward(
    model: "Model",
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
    """Run Q new tokens per row through the model, appending them to ``rows``.

    Args:
        model: the loaded model.
        rows: batch state; updated in place (cache grows by Q slots).
        input_ids: Long[B, Q]; padding tokens must be marked invalid in ``query_valid``.
        query_valid: Bool[B, Q], default all valid.
        query_pos: Long[B, Q] RoPE positions; default continues each row contiguously
            over its valid tokens.
        capture_attention: layers whose attention probabilities to return.
        capture_hidden: layers whose output hidden states (the residual stream after
            the layer) to return.
        logits_to_keep: if > 0, only the last that many positions' logits are computed.
        affected_rows: Bool[B, Q] query tokens the hidden slots and biases apply to
            (default all; rebuilding states exempts the hidden record's own tokens).
        new_hidden: Bool[B, Q] new slots to hide from later tokens in every hiding layer.
        causal_block: the caller guarantees one row, an empty cache, positions 0..Q-1, every token
            valid and nothing hidden (a prefill's only chunk): attention runs SDPA's causal kernel
            without building a [Q, Q] mask (:func:`causal_block_allowed` must hold).
    """
    plan = plan_forward(model, rows, input_ids, query_valid, query_pos, capture_attention, logits_to_keep,
                        affected_rows, new_hidden, capture_hidden, causal_block)
    hidden, bias = plan.hidden, plan.bias
    with torch.inference_mode(), selection.active(rows.selector), forward_context(plan.context):
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
                    _edit_heads(attn.o_proj.input, plan.head_edits[layer], model.arch.num_heads)
                if layer in capture_attention:
                    captured[layer] = attn.output[1].save()
                if layer in plan.patches:
                    _patch_rows(model.layer_envoy(layer).output, plan.patches[layer])
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


def plan_forward(
    model: "Model",
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
) -> ForwardPlan:
    """Register the new slots in ``rows`` and plan the forward (arguments as :func:`traced_forward`'s).

    Bad patches (a source row whose question differs in length, positions out of range) are refused
    here, before anything runs.
    """
    B, Q = input_ids.shape
    if query_valid is None:
        query_valid = torch.ones(B, Q, dtype=torch.bool, device=input_ids.device)
    if query_pos is None:
        start = (rows.next_positions() if rows.key_pos.shape[1]
                 else torch.zeros(B, dtype=torch.long, device=input_ids.device))
        offsets = torch.cumsum(query_valid.long(), dim=1) - 1
        query_pos = start[:, None] + offsets.clamp(min=0)
    patches = _patch_columns(rows.patches, query_valid)
    rows.patches = {}  # a patch acts in the question's forward only
    rows.append_slots(query_pos, query_valid, new_hidden)
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
    if logits_to_keep:
        kwargs["logits_to_keep"] = logits_to_keep
    touched = sorted(set(hidden) | set(rows.bias) | set(capture_attention) | set(capture_hidden)
                     | set(rows.head_edits) | set(patches))
    if rows.selector is not None:
        rows.selector.begin(rows, Q)
    context = ForwardContext(cache=rows.cache, kv_source=model.arch.kv_sources,
                             probabilities=frozenset(capture_attention), causal=causal_block)
    return ForwardPlan(kwargs, hidden, rows.bias, affected_rows, minimum, rows.head_edits, patches, context, touched)


@contextmanager
def hooked_edits(model: "Model", plan: ForwardPlan) -> Iterator[None]:
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
                def edit_heads(_module, args, edits=plan.head_edits[layer]):
                    _edit_heads(args[0], edits, model.arch.num_heads)
                handles.append(attention.o_proj.register_forward_pre_hook(edit_heads))
            if layer in plan.patches:
                def patch(_module, _args, output, entries=plan.patches[layer]):
                    _patch_rows(output, entries)
                handles.append(model.hf.model.layers[layer].register_forward_hook(patch))
        yield
    finally:
        for handle in handles:
            handle.remove()


def _patch_rows(output: Any, entries: list[tuple[tuple[int, torch.Tensor], tuple[int, torch.Tensor]]]) -> None:
    """Copy source rows' columns of a decoder layer's output (a tensor, or a tuple starting with one) in place."""
    x = output[0] if isinstance(output, tuple) else output
    for (target, columns), (source, from_columns) in entries:
        x[target, columns] = x[source, from_columns]


def _edit_heads(projected: torch.Tensor, edits: list[tuple[int, HeadEdit]], num_heads: int) -> None:
    """Set heads of rows of an output projection's input [B, Q, heads * head_dim] in place."""
    size = projected.shape[-1] // num_heads
    for row, edit in edits:
        for i, head in enumerate(edit.heads):
            columns = slice(head * size, (head + 1) * size)
            projected[row, :, columns] = 0 if edit.values is None else edit.values[i].to(projected)


def _patch_columns(patches: dict[int, list[tuple[int, int, tuple[int, ...] | None]]], query_valid: torch.Tensor
                   ) -> dict[int, list[tuple[tuple[int, torch.Tensor], tuple[int, torch.Tensor]]]]:
    """layer -> [((target row, its block columns), (source row, its block columns))]: question positions
    as columns of the (left-padded) block, checked before the forward."""
    out = {}
    for layer, entries in patches.items():
        for target, source, positions in entries:
            own, theirs = (torch.nonzero(query_valid[r]).flatten() for r in (target, source))
            if len(own) != len(theirs):
                raise PatchError(f"patch at layer {layer}: the source row's question has {len(theirs)} tokens, "
                                 f"the patched row's {len(own)}; patch between rows of the same question")
            if positions is not None:
                bad = [p for p in positions if not -len(own) <= p < len(own)]
                if bad:
                    raise PatchError(f"patch at layer {layer}: question positions {bad} out of range "
                                     f"(the question has {len(own)} tokens)")
                index = torch.tensor(positions, dtype=torch.long, device=own.device)
                own, theirs = own[index], theirs[index]
            out.setdefault(layer, []).append(((target, own), (source, theirs)))
    return out


#: Fold a hidden set that every attention layer shares into the model's masks (:func:`uniform_hidden`)
#: instead of editing each layer's mask inside an nnsight trace. Both give the same logits bit for bit
#: (tests/test_fast_paths.py); False forces the traced edit everywhere.
FOLD_UNIFORM_MASKS = True


def uniform_hidden(model: "Model", rows: Rows) -> torch.Tensor | None:
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


def extend_state(
    model: "Model",
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


def pad_suffix_block(
    sequences: list[list[int]], pad_id: int, device: torch.device | str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into one block so every row's last real token is in the last column.

    Padding slots are invalid keys and never read, and positions skip them, so a
    padded row computes exactly what the unpadded row would.
    Returns (input_ids Long[B, L], valid Bool[B, L]) on ``device`` (the model's: ``Model.device``).
    """
    L = max(len(s) for s in sequences)
    # Built on the host as one list, then moved in one copy (no per-row device writes).
    padded = [[pad_id] * (L - len(s)) + list(s) for s in sequences]
    ids = torch.tensor(padded, dtype=torch.long, device=device)
    valid = torch.tensor([[False] * (L - len(s)) + [True] * len(s) for s in sequences], dtype=torch.bool,
                         device=device)
    return ids, valid
