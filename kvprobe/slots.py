"""Cache layers that write new keys and values into preallocated slots.

transformers' ``DynamicLayer`` grows by ``torch.cat`` on every forward, copying
the whole cache of every layer once per generated token. For a batch of forked
rows on a ~300-token history that copy cost as much as the model's matrix
products. :class:`SlotLayer` keeps a buffer with spare capacity, writes the Q
new slots in place and hands the model views of the filled part; when the
buffer is full it grows by a quarter (at least ``GROWTH`` slots).

The values are the same tensors either way; only where they live differs.

:class:`SharedSlotLayer` is the shared-history form: rows that read an
unedited (or identically edited) history point at one copy of its K/V (a
"base", never written) and keep only their own new slots in the buffer.
kvprobe's attention (``kvprobe.attention.shared_attention``) reads the base
once for all its rows. Memory: T + B x (new slots) instead of B x T.
"""

from __future__ import annotations

import copy

import torch
from transformers.cache_utils import DynamicLayer

from .forward_context import current_cache

#: Spare slots a fresh buffer gets (covers a question plus a 40-token answer).
SPARE_SLOTS = 96
#: Minimum number of slots added when a buffer is full.
GROWTH = 64


class SlotLayer(DynamicLayer):
    """A ``DynamicLayer`` whose ``keys``/``values`` are views into preallocated buffers.

    Args:
        keys, values: per-row contents [1, KV heads, S_i, head_dim] (copied). Rows
            shorter than the longest are zero-padded at the end; the caller marks
            those slots invalid (zeros, never uninitialized memory, so a masked slot
            times a zero attention weight stays zero).
        spare: free slots allocated beyond the longest row.
    """

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor], spare: int = SPARE_SLOTS):
        super().__init__()
        self.dtype, self.device = keys[0].dtype, keys[0].device
        self.is_initialized = True
        self.filled = max(k.shape[2] for k in keys)
        self._key_buffer = _stacked(keys, self.filled + spare)
        self._value_buffer = _stacked(values, self.filled + spare)
        self._expose()

    def _expose(self) -> None:
        self.keys = self._key_buffer[:, :, : self.filled]
        self.values = self._value_buffer[:, :, : self.filled]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write Q new slots after the filled ones; return views of all filled slots."""
        q = key_states.shape[2]
        end = self.filled + q
        if end > self._key_buffer.shape[2]:
            capacity = end + max(GROWTH, self.filled // 4)
            self._key_buffer = _buffer(self.keys, capacity)
            self._value_buffer = _buffer(self.values, capacity)
        self._key_buffer[:, :, self.filled : end] = key_states
        self._value_buffer[:, :, self.filled : end] = value_states
        self.filled = end
        self._expose()
        return self.keys, self.values

    def take(self, indices: torch.Tensor) -> "SlotLayer":
        """A new layer holding the rows ``indices`` (repeats allowed), with its own buffers."""
        taken = copy.copy(self)
        taken._key_buffer = self._key_buffer[indices]
        taken._value_buffer = self._value_buffer[indices]
        taken._expose()
        return taken

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows ``indices`` (transformers' cache API)."""
        self._key_buffer = self._key_buffer[indices]
        self._value_buffer = self._value_buffer[indices]
        self._expose()

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.batch_select_indices(torch.arange(self._key_buffer.shape[0], device=self._key_buffer.device)
                                  .repeat_interleave(repeats))

    def truncate(self, length: int) -> None:
        """Forget every slot from ``length`` on (the buffer keeps its capacity)."""
        if not 0 <= length <= self.filled:
            raise ValueError(f"cannot truncate {self.filled} slots to {length}")
        self.filled = length
        self._expose()

    def full_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every row's keys and values [B, heads, S, dim] (views of the buffer)."""
        return self.keys, self.values

    def compact(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values without spare capacity: the buffers themselves when full, else copies."""
        if self.filled == self._key_buffer.shape[2]:
            return self._key_buffer, self._value_buffer
        return self.keys.clone(), self.values.clone()

    def get_seq_length(self) -> int:
        """The layer's length in the batch's slot coordinates (what :meth:`truncate` takes)."""
        return self.filled

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' cache API: ``tokens_to_remove`` < 0 drops that many trailing slots."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of slots to remove")
        self.truncate(self.get_seq_length() + tokens_to_remove)


def _buffer(contents: torch.Tensor, capacity: int) -> torch.Tensor:
    """A [B, H, capacity, d] buffer whose first slots hold ``contents``."""
    B, H, S, d = contents.shape
    buf = contents.new_empty(B, H, capacity, d)
    buf[:, :, :S] = contents
    return buf


def _stacked(rows: list[torch.Tensor], capacity: int) -> torch.Tensor:
    """A [len(rows), H, capacity, d] buffer holding each row's slots, zeros after them."""
    first = rows[0]
    buf = first.new_empty(len(rows), first.shape[1], capacity, first.shape[3])
    for i, r in enumerate(rows):
        n = r.shape[2]
        buf[i, :, :n] = r[0]
        buf[i, :, n:] = 0  # padding and free slots: zeros, never uninitialized memory
    return buf


class SharedSlotLayer(SlotLayer):
    """Rows reading shared histories ("bases", never written) plus their own new slots.

    Args:
        bases: distinct (K, V) base tensors [1, KV heads, T_j, dim]; stored by reference.
        base_of_row: Long[B] which base each row reads.
        base_length: where every row's own slots start in the batch's slot coordinates
            (the longest base; a row with a shorter base has invalid slots in between).
        spare: free own slots allocated per row.

    ``keys``/``values`` (what :meth:`update` returns to the model) hold only the rows'
    own slots; ``base_length + filled`` is the layer's length. :meth:`full_kv` builds
    every row's complete K/V (a copy, for inspection).
    """

    def __init__(self, bases: list[tuple[torch.Tensor, torch.Tensor]], base_of_row: torch.Tensor,
                 base_length: int, spare: int = SPARE_SLOTS):
        DynamicLayer.__init__(self)
        first_k, first_v = bases[0]
        self.dtype, self.device = first_k.dtype, first_k.device
        self.is_initialized = True
        self.bases = bases
        self.base_of_row = base_of_row
        self.base_length = base_length
        self.filled = 0
        B = int(base_of_row.shape[0])
        self._key_buffer = first_k.new_zeros(B, first_k.shape[1], spare, first_k.shape[3])
        self._value_buffer = first_v.new_zeros(B, first_v.shape[1], spare, first_v.shape[3])
        self._group()
        self._expose()

    def _group(self) -> None:
        """``groups``: per base (K, V, Long rows reading it, or None when it is every row in order)."""
        self.groups = []
        for j, (k, v) in enumerate(self.bases):
            rows = torch.nonzero(self.base_of_row == j).flatten()
            if len(rows):
                every = len(self.bases) == 1 or len(rows) == len(self.base_of_row)
                self.groups.append((k, v, None if every else rows))

    def get_seq_length(self) -> int:
        return self.base_length + self.filled

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write the rows' new slots; only kvprobe's attention, inside ``traced_forward``, reads the bases."""
        if current_cache() is None:
            raise RuntimeError("a shared-history cache (fork_rows(share=True)) is only read inside "
                               "kvprobe.forward.traced_forward; a plain forward would miss the shared history")
        return super().update(key_states, value_states, *args, **kwargs)

    def take(self, indices: torch.Tensor) -> "SharedSlotLayer":
        taken = super().take(indices)
        taken.base_of_row = self.base_of_row[indices]
        taken._group()
        return taken

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        super().batch_select_indices(indices)
        self.base_of_row = self.base_of_row[indices]
        self._group()

    def truncate(self, length: int) -> None:
        """Forget every slot from ``length`` on (batch coordinates: bases included)."""
        if length < self.base_length:
            raise ValueError(f"cannot truncate into the shared history ({self.base_length} slots) to {length}")
        super().truncate(length - self.base_length)

    def full_kv(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every row's keys and values [B, heads, base_length + filled, dim]: its base (zeros after a
        shorter base), then its own slots. A copy."""
        out = []
        for which, own in ((0, self.keys), (1, self.values)):
            B, heads, F, dim = own.shape
            full = own.new_zeros(B, heads, self.base_length + F, dim)
            for row, j in enumerate(self.base_of_row.tolist()):
                base = self.bases[j][which]
                full[row, :, : base.shape[2]] = base[0]
            full[:, :, self.base_length :] = own
            out.append(full)
        return out[0], out[1]


class PackedSlotLayer(DynamicLayer):
    """A shared-history batch laid out in fixed shapes for decoding (``kvprobe.static_decode``).

    One buffer per K and V, [1, KV heads, T + steps x B, dim]: the shared history (one copy),
    then every row's slots after it *step-major*: slot f of row b sits at column
    ``T + f * B + b``. Every decode step writes the B new slots at the columns ``index``
    (Long[B], a device tensor the decoder advances by B per step) and returns the whole
    buffer, so a step reads and writes the same memory each time (a CUDA graph can replay
    it). Columns not written yet hold zeros; the decoder's mask hides them until written.

    Args:
        layer: a :class:`SharedSlotLayer` whose rows all read one base of its full length.
        columns: the buffers' length (at least T + B x the slots each row will hold).
        index: Long[B] the columns the next step writes (shared by every layer of the batch).
    """

    def __init__(self, layer: SharedSlotLayer, columns: int, index: torch.Tensor):
        super().__init__()
        base_k, base_v, rows = layer.groups[0]
        if len(layer.groups) != 1 or rows is not None or base_k.shape[2] != layer.base_length:
            raise ValueError("a packed layer needs every row to read one base of the batch's full history length")
        own_k, own_v = layer.keys, layer.values  # [B, KVH, F, D]
        B, KVH, F, _ = own_k.shape
        if columns < layer.base_length + F * B:
            raise ValueError(f"{columns} columns cannot hold the history and the {F} slots each row filled")
        self.dtype, self.device = base_k.dtype, base_k.device
        self.is_initialized = True
        self.base_length, self.rows, self.filled_before = layer.base_length, B, F
        self.index = index
        self.keys = _packed(base_k, own_k, columns)
        self.values = _packed(base_v, own_v, columns)

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        """Write one new slot per row ([B, KVH, 1, dim]) at ``index``; return the whole buffers."""
        if key_states.shape[2] != 1:
            raise ValueError("a packed layer takes one new token per row (decode steps)")
        self.keys.index_copy_(2, self.index, key_states.transpose(0, 2))
        self.values.index_copy_(2, self.index, value_states.transpose(0, 2))
        return self.keys, self.values

    def get_seq_length(self) -> int:
        """The buffer's columns (fixed; the decoder's mask says which are filled)."""
        return int(self.keys.shape[2])


def _packed(base: torch.Tensor, own: torch.Tensor, columns: int) -> torch.Tensor:
    """[1, KVH, columns, d]: ``base`` [1, KVH, T, d], then ``own`` [B, KVH, F, d] step-major, then zeros."""
    B, KVH, F, d = own.shape
    T = base.shape[2]
    buf = base.new_zeros(1, KVH, columns, d)
    buf[:, :, :T] = base
    buf[0, :, T : T + F * B].view(KVH, F, B, d).copy_(own.permute(1, 2, 0, 3))
    return buf
