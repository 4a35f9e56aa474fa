"""Explicit 4-D additive attention masks built from token positions.

The engine never lets transformers guess positions from cache lengths: every
key slot carries its RoPE position and a validity flag (padding slots are
invalid), and every query row carries its position. A key is visible to a
query when it is valid, not later than the query, and (on sliding-window
layers) within the window. Hidden spans are *not* part of these masks: they
are applied on top, per layer, by the access intervention (see
``kvprobe.forward``), which is what ``kvprobe verify`` checks against masks
built here with the hidden columns folded in.
"""

from __future__ import annotations

import torch

from .arch import ATTENTION_LAYER_TYPES, SLIDING_ATTENTION, ArchSummary

#: Type alias documentation: Bool[B, S] tensors index key slots, Long[B, Q] query rows.


def visibility(
    query_pos: torch.Tensor,
    key_pos: torch.Tensor,
    key_valid: torch.Tensor,
    window: int | None = None,
) -> torch.Tensor:
    """Boolean visibility ``[B, Q, S]``: may query row q read key slot s.

    Args:
        query_pos: Long[B, Q] RoPE positions of the query tokens.
        key_pos: Long[B, S] RoPE positions of the key slots.
        key_valid: Bool[B, S] false for padding slots.
        window: sliding window; a key at position k is visible to a query at
            position p only if ``p - k < window`` (transformers' convention).
    """
    diff = query_pos[:, :, None] - key_pos[:, None, :]
    allowed = (diff >= 0) & key_valid[:, None, :]
    if window is not None:
        allowed &= diff < window
    return allowed


def additive(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Turn Bool[B, Q, S] visibility into the additive mask ``[B, 1, Q, S]`` eager attention adds."""
    mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]


def layer_type_masks(
    arch: ArchSummary,
    query_pos: torch.Tensor,
    key_pos: torch.Tensor,
    key_valid: torch.Tensor,
    dtype: torch.dtype,
    hidden: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """One additive mask per attention layer type present in the model.

    ``hidden`` (Bool[B, S]) folds a hard mask into every layer type; the engine
    passes ``None`` here and applies hiding per layer instead.
    """
    masks = {}
    for layer_type in arch.distinct_layer_types:
        if layer_type not in ATTENTION_LAYER_TYPES:
            continue
        window = arch.sliding_window if layer_type == SLIDING_ATTENTION else None
        allowed = visibility(query_pos, key_pos, key_valid, window)
        if hidden is not None:
            allowed &= ~hidden[:, None, :]
        masks[layer_type] = additive(allowed, dtype)
    return masks
