"""Delete cache rows: compact (with RoPE re-rotation) and drop (without).

**Compact rows** (paper L4519-4521, L4540): delete the masked K/V rows in every
layer with rows; a surviving key at original position ``p`` with ``g(p)``
removed rows before it is re-rotated by ``-g(p)`` (``k' = R(-g) k``) and moves
to position ``p - g(p)``; values are unchanged; decoding continues at
``T - n_removed``. The surviving rows keep the content they were computed with
(the source was visible then).

**Drop rows**: the same deletion without re-rotation. ``positions="shortened"``
(default) continues at ``T - n_removed`` with the stored keys still rotated for
their old positions, as a serving cache that simply loses rows would;
``positions="original"`` keeps every surviving slot's original position and
continues at ``T``, which is numerically the same as masking the rows (a check
of ``kvprobe verify``) but frees their memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from kvprobe.access import Condition, as_spans, check_spans, positions_of, set_fields
from kvprobe.rows import RowState
from kvprobe.prompts import SpanError, TokenSpan

from ._base import require_row_deletion, require_unedited
from .rope import inv_freq_for_layer, rotate_keys

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model


def delete_rows(model: "Model", history: "History", removed: torch.Tensor, rerotate: bool,
                shorten_positions: bool) -> RowState:
    """Delete Bool[T] ``removed`` positions from every layer's cache."""
    T = len(history)
    kept = ~removed
    if not bool(kept.any()):
        raise SpanError("the operation would delete every history row")
    gap = torch.cumsum(removed.long(), dim=0) - removed.long()  # removed rows strictly before p
    kv = list(history.kv)  # layers without rows of their own stay (None, None)
    for layer in model.arch.kv_layers:
        spec = model.arch.layers[layer]
        on_layer = kept.to(history.kv[layer][0].device)  # the layer's own device (models spread over devices)
        kept_kv = [t[:, :, on_layer] for t in history.kv[layer]]
        if rerotate:  # the tensor that carries RoPE (keys; MLA's rope key sits in the V slot)
            kept_kv[spec.rope_tensor] = rotate_keys(kept_kv[spec.rope_tensor], -gap[kept],
                                                    inv_freq_for_layer(model, layer), spec.rope_layout)
        kv[layer] = (kept_kv[0], kept_kv[1])
    positions = history.positions[kept] - (gap[kept] if shorten_positions else 0)
    n_kept = int(kept.sum())
    slot_of = torch.full((T,), -1, dtype=torch.long, device=history.device)
    slot_of[kept] = torch.arange(n_kept, device=history.device)
    freed = sum((k.numel() + v.numel()) * k.element_size() for k, v in history.kv if k is not None) - sum(
        (k.numel() + v.numel()) * k.element_size() for k, v in kv if k is not None
    )
    return RowState(
        kv=kv,
        key_pos=positions,
        key_valid=torch.ones(n_kept, dtype=torch.bool, device=history.device),
        input_ids=history.input_ids[kept],
        slot_of=slot_of,
        info={"removed_rows": int(removed.sum()), "freed_bytes": int(freed)},
    )


@dataclass(frozen=True)
class _RowDeletion(Condition):
    spans: TokenSpan | tuple[TokenSpan, ...]

    def __post_init__(self) -> None:
        set_fields(self, spans=as_spans(self.spans, type(self).__name__))

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, self.spans, history_len)
        require_row_deletion(self.name, arch)


@dataclass(frozen=True)
class Compact(_RowDeletion):
    """Delete the spans' rows, re-rotate later keys back by the rows removed before them."""

    name: str = field(default="compact", kw_only=True)

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        require_unedited(self.name, history, state)
        return delete_rows(model, history, positions_of(self.spans, len(history), history.device), True, True)


@dataclass(frozen=True)
class Drop(_RowDeletion):
    """Delete the spans' rows without re-rotating (see module docstring for ``positions``)."""

    positions: str = "shortened"
    name: str = field(default="drop", kw_only=True)

    def __post_init__(self) -> None:
        if self.positions not in ("shortened", "original"):
            raise ValueError(f"Drop positions must be 'shortened' or 'original', got {self.positions!r}")
        super().__post_init__()

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        require_unedited(self.name, history, state)
        removed = positions_of(self.spans, len(history), history.device)
        return delete_rows(model, history, removed, False, self.positions == "shortened")
