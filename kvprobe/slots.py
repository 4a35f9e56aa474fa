"""A cache layer that writes new keys and values into preallocated slots.

transformers' ``DynamicLayer`` grows by ``torch.cat`` on every forward, copying
the whole cache of every layer once per generated token. For a batch of forked
rows on a ~300-token history that copy cost as much as the model's matrix
products. :class:`SlotLayer` keeps a buffer with spare capacity, writes the Q
new slots in place and hands the model views of the filled part; when the
buffer is full it grows by a quarter (at least ``GROWTH`` slots).

The values are the same tensors either way; only where they live differs.
"""

from __future__ import annotations

import copy

import torch
from transformers.cache_utils import DynamicLayer

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
        self.batch_select_indices(torch.arange(self._key_buffer.shape[0]).repeat_interleave(repeats))

    def truncate(self, length: int) -> None:
        """Forget every slot from ``length`` on (the buffer keeps its capacity)."""
        if not 0 <= length <= self.filled:
            raise ValueError(f"cannot truncate {self.filled} slots to {length}")
        self.filled = length
        self._expose()

    def crop(self, tokens_to_remove: int) -> None:
        """transformers' cache API: ``tokens_to_remove`` < 0 drops that many trailing slots."""
        if tokens_to_remove > 0:
            raise ValueError("crop takes a negative number of slots to remove")
        self.truncate(self.filled + tokens_to_remove)


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
