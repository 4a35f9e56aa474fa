"""Re-rotating cached keys with the model's own RoPE frequencies.

Stored keys are post-RoPE (and post QK-norm): ``k_p = R(p) k``. Moving a key
from position ``p`` to ``p - g`` needs ``R(p - g) k = R(-g) R(p) k``, a rotation
of the stored key by ``-g`` with the same frequencies. We read ``inv_freq`` from
the model's rotary embedding module (per layer type when the model has several),
so every RoPE scaling type with position-independent frequencies (default,
linear, llama3, yarn, longrope at fixed length...) is handled by what the model
itself computed. The attention-scaling amplitude (yarn's mscale) is *not*
reapplied: the stored key already carries it once (derived from RoPE algebra;
not stated in the paper). Dynamic NTK scaling changes frequencies with the
sequence length, so re-rotation is refused there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from kvprobe.arch import HALF, INTERLEAVED

from ._base import OperationError

if TYPE_CHECKING:
    from kvprobe.model import Model

#: RoPE types whose frequencies depend on the current sequence length.
LENGTH_DEPENDENT_ROPE = ("dynamic",)


def inv_freq_for_layer(model: "Model", layer: int) -> torch.Tensor:
    """The inverse frequencies (Float[rotary_dim / 2]) RoPE uses in ``layer``."""
    layer_type = model.arch.layer_types[layer]
    rope_type = model.arch.rope.get(layer_type, {}).get("rope_type", "default")
    if rope_type in LENGTH_DEPENDENT_ROPE:
        raise OperationError(f"layer {layer} uses {rope_type!r} RoPE, whose frequencies change with length; "
                             "keys cannot be re-rotated exactly")
    rotary = getattr(model.hf.model, "rotary_emb", None)
    if rotary is None:
        raise OperationError(f"model {model.name!r} has no rotary embedding module; compaction needs RoPE")
    freq = getattr(rotary, f"{layer_type}_inv_freq", None)
    if freq is None:
        freq = getattr(rotary, "inv_freq", None)
    if freq is None:
        raise OperationError(f"cannot find RoPE inverse frequencies for layer {layer} ({layer_type})")
    return freq.float()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """The (-x2, x1) half swap of the transformers RoPE layout (frequencies repeated over halves)."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotate_keys(keys: torch.Tensor, shift: torch.Tensor, inv_freq: torch.Tensor, layout: str = HALF) -> torch.Tensor:
    """Rotate post-RoPE keys [B, H, S, D] by ``shift`` positions: R(shift) k.

    ``shift`` is Long[S] (every head alike) or Long[H, S] (per head, e.g. FINCH's
    per-head selections moving to compact positions).

    Only the first ``2 * len(inv_freq)`` dimensions rotate (partial rotary models).
    ``layout``: ``"half"`` pairs dim i with i + rot/2 (transformers' rotate_half);
    ``"interleaved"`` pairs dims 2i and 2i + 1 (complex view, DeepSeek MLA).
    The computation is done in float64 and cast back.
    """
    rot = 2 * inv_freq.shape[0]
    # A model spread over devices keeps each layer's keys on its own device: compute there.
    angles = shift.to(keys.device).double()[..., None] * inv_freq.to(keys.device).double()
    k = keys.double()
    k_rot, k_pass = k[..., :rot], k[..., rot:]
    if layout == HALF:
        emb = torch.cat((angles, angles), dim=-1)
        rotated = k_rot * emb.cos() + rotate_half(k_rot) * emb.sin()
    elif layout == INTERLEAVED:
        pairs = torch.view_as_complex(k_rot.reshape(*k_rot.shape[:-1], -1, 2).contiguous())
        rotated = torch.view_as_real(pairs * torch.polar(torch.ones_like(angles), angles)).flatten(-2)
    else:
        raise ValueError(f"unknown RoPE layout {layout!r}")
    return torch.cat([rotated, k_pass], dim=-1).to(keys.dtype)
