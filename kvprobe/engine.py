"""The traced forward pass: extend a batch of cached sequences under access conditions.

Every forward in kvprobe goes through :func:`traced_forward`. It gives the
model explicit ``position_ids`` and explicit 4-D masks (one per layer type,
see ``kvprobe.masks``), and, inside an nnsight trace, replaces each selected
attention layer's mask input by the same mask with the condition's hidden key
columns set to the dtype minimum. Nothing persists after the trace: nnsight
removes its hooks when the ``with`` block ends.

A :class:`Rows` object is the per-row state of a batch: the cache (each row is
its own fork of the history), every key slot's RoPE position and validity, and
per layer the key slots that row's condition hides.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache

from .masks import layer_type_masks

if TYPE_CHECKING:
    from .model import Model


@dataclass
class Rows:
    """Per-row state of a batch of sequences extending one history.

    Attributes:
        cache: transformers cache with B rows (each row its own copy).
        key_pos: Long[B, S] RoPE position of every key slot.
        key_valid: Bool[B, S] false for padding slots.
        hidden: layer index -> Bool[B, S] key slots hidden in that layer.
    """

    cache: DynamicCache
    key_pos: torch.Tensor
    key_valid: torch.Tensor
    hidden: dict[int, torch.Tensor] = field(default_factory=dict)

    @property
    def batch_size(self) -> int:
        return self.key_pos.shape[0]

    def next_positions(self) -> torch.Tensor:
        """Long[B]: position of the next token of each row (one past its last valid slot)."""
        masked = torch.where(self.key_valid, self.key_pos, torch.full_like(self.key_pos, -1))
        return masked.max(dim=1).values + 1

    def append_slots(self, query_pos: torch.Tensor, query_valid: torch.Tensor) -> None:
        """Register Q new key slots per row (called before the forward that writes them)."""
        self.key_pos = torch.cat([self.key_pos, query_pos], dim=1)
        self.key_valid = torch.cat([self.key_valid, query_valid], dim=1)
        new = torch.zeros_like(query_valid)
        grown: dict[int, torch.Tensor] = {}
        for layer, h in self.hidden.items():
            key = id(h)
            if key not in grown:  # layers usually share one tensor; grow it once
                grown[key] = torch.cat([h, new], dim=1)
            self.hidden[layer] = grown[key]


def fork_rows(
    kv: list[tuple[torch.Tensor, torch.Tensor]],
    key_pos: torch.Tensor,
    hidden_rows: list[tuple[torch.Tensor, tuple[int, ...]]],
) -> Rows:
    """Make a batch of forks of one history, one row per (hidden positions, layers) pair.

    Args:
        kv: per layer (K, V) of the history, shapes [1, kv_heads, T, head_dim].
        key_pos: Long[T] positions of the history slots.
        hidden_rows: per row, Bool[T] hidden history positions and the layers hiding them.
    """
    n = len(hidden_rows)
    data = [(k.expand(n, -1, -1, -1).clone(), v.expand(n, -1, -1, -1).clone()) for k, v in kv]
    T = key_pos.shape[0]
    hidden: dict[int, torch.Tensor] = {}
    layers = sorted({layer for _, ls in hidden_rows for layer in ls})
    cache_by_selection: dict[tuple[int, ...], torch.Tensor] = {}
    for layer in layers:
        selection = tuple(i for i, (_, ls) in enumerate(hidden_rows) if layer in ls)
        if selection not in cache_by_selection:
            h = torch.zeros(n, T, dtype=torch.bool)
            for i in selection:
                h[i] = hidden_rows[i][0]
            cache_by_selection[selection] = h
        hidden[layer] = cache_by_selection[selection]
    return Rows(
        cache=DynamicCache(ddp_cache_data=data),
        key_pos=key_pos[None].expand(n, -1).clone(),
        key_valid=torch.ones(n, T, dtype=torch.bool),
        hidden={k: v for k, v in hidden.items() if v.any()},
    )


def empty_rows(batch_size: int) -> Rows:
    """Rows with no history (for prefill)."""
    return Rows(
        cache=DynamicCache(),
        key_pos=torch.zeros(batch_size, 0, dtype=torch.long),
        key_valid=torch.zeros(batch_size, 0, dtype=torch.bool),
    )


@dataclass
class ForwardOutput:
    """Logits of one traced forward and any captured attention probabilities."""

    logits: torch.Tensor  # Float[B, Q, V]
    attention: dict[int, torch.Tensor] = field(default_factory=dict)  # layer -> [B, H, Q, S]


def traced_forward(
    model: "Model",
    rows: Rows,
    input_ids: torch.Tensor,
    query_valid: torch.Tensor | None = None,
    query_pos: torch.Tensor | None = None,
    capture_attention: tuple[int, ...] = (),
    logits_to_keep: int = 0,
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
        logits_to_keep: if > 0, only the last that many positions' logits are computed.
    """
    B, Q = input_ids.shape
    if query_valid is None:
        query_valid = torch.ones(B, Q, dtype=torch.bool)
    if query_pos is None:
        start = rows.next_positions() if rows.key_pos.shape[1] else torch.zeros(B, dtype=torch.long)
        offsets = torch.cumsum(query_valid.long(), dim=1) - 1
        query_pos = start[:, None] + offsets.clamp(min=0)
    rows.append_slots(query_pos, query_valid)
    masks = layer_type_masks(model.arch, query_pos, rows.key_pos, rows.key_valid, model.dtype)
    mask_arg = masks if len(masks) > 1 else next(iter(masks.values()))
    kwargs = dict(
        input_ids=input_ids,
        attention_mask=mask_arg,
        position_ids=query_pos,
        past_key_values=rows.cache,
        use_cache=True,
    )
    if logits_to_keep:
        kwargs["logits_to_keep"] = logits_to_keep
    touched = sorted(set(rows.hidden) | set(capture_attention))
    with torch.inference_mode():
        if not touched:
            logits = model.hf(**kwargs).logits
            return ForwardOutput(logits=logits)
        minimum = torch.finfo(model.dtype).min
        captured = {}
        with model.nn.trace(**kwargs):
            for layer in touched:
                attn = model.attention_envoy(layer)
                if layer in rows.hidden:
                    args, kw = attn.inputs
                    hide = rows.hidden[layer][:, None, None, :]
                    kw["attention_mask"] = kw["attention_mask"].masked_fill(hide, minimum)
                    attn.inputs = (args, kw)
                if layer in capture_attention:
                    captured[layer] = attn.output[1].save()
            logits = model.nn.output.logits.save()
    return ForwardOutput(logits=logits, attention=dict(captured))


def pad_suffix_block(
    sequences: list[list[int]], pad_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token lists into one block so every row's last real token is in the last column.

    Padding slots are invalid keys and never read, and positions skip them, so a
    padded row computes exactly what the unpadded row would.
    Returns (input_ids Long[B, L], valid Bool[B, L]).
    """
    L = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), L), pad_id, dtype=torch.long)
    valid = torch.zeros(len(sequences), L, dtype=torch.bool)
    for i, s in enumerate(sequences):
        if s:
            ids[i, L - len(s) :] = torch.tensor(s, dtype=torch.long)
            valid[i, L - len(s) :] = True
    return ids, valid
