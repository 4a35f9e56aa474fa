"""Row state and forking: what each row of a batch starts from, and the batch built from them.

A :class:`RowState` is what one row starts from: a (possibly edited) cache of its history and what
later tokens may read. Access conditions and cache operations produce one from a history;
:func:`fork_rows` stacks several into :class:`Rows`, the per-row state of a batch: the cache, every key
slot's RoPE position and validity, and per layer the key slots that row's condition hides. The cache
either gives every row its own copy of its history (:class:`~kvprobe.slots.SlotLayer`) or, with
``fork_rows(..., share=True)``, lets rows whose K/V are the same tensors (access-only conditions of one
history, or the questions of one edited state) read one shared copy and store only their own new slots
(:class:`~kvprobe.slots.SharedSlotLayer`; see docs/concepts.md, "Memory layout of a batch"). Both
layouts compute the same attention. The forward that runs new tokens on a batch is
:func:`kvprobe.forward.traced_forward`.

Example:
    >>> rows = fork_rows([history.base_state()] * 3, share=True)  # doctest: +SKIP
    >>> ids, valid = pad_suffix_block([[5, 6], [7]], pad_id=0, device="cpu")
    >>> valid.tolist()
    [[True, True], [False, True]]
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Sequence

import torch
from transformers import DynamicCache
from transformers.cache_utils import DummyLayer, LinearAttentionLayer

from .component_edits import HeadEdit, PatchError, ResidualPatch
from .slots import SPARE_SLOTS, SharedSlotLayer, SlotLayer

if TYPE_CHECKING:
    from .forward_context import SelectorLike


@dataclass
class RowState:
    """What one row of a batch starts from: a (possibly edited) cache and what later tokens may read.

    Access conditions and cache operations produce a ``RowState`` from a
    history; :func:`fork_rows` stacks several into a batch. Tensors here are never
    modified by a forward (every batch copies them).

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
    selector: "SelectorLike | None" = None
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
