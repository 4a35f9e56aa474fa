"""FINCH: question-conditioned selection of history keys, compacted with RoPE re-rotation.

FINCH (Corallo & Papotti, 2024) as in KVPress's non-chunked ``FinchPress``,
which the paper ran (partE section E4), with the history/question boundary
passed explicitly instead of a delimiter token so the prompt is unchanged:

1. the question's suffix except its final token (the *observation window*, w
   tokens) runs after the history with full access;
2. every layer scores each history key by the attention the window's queries
   give it: probabilities of window row i (which reads T + i + 1 keys) are
   multiplied by ``T + i`` (KVPress's normalization by the number of non-zero
   weights), averaged over the window rows, then over the query heads sharing
   the KV head;
3. per KV head, the ``budget - w`` best history keys and the whole window are
   kept (the window counts in the budget K, as in the paper);
4. kept keys are re-rotated to compact positions ``0 .. K-1`` (per head: each
   head keeps different slots); values are unchanged; the question's final token
   then continues at position K.

The returned row state already holds the window, so decoding runs only the
final token (``info["consumed_suffix"]``). Cache slots of different heads hold
different history tokens, so history-coordinate masks cannot be composed after
FINCH (``slot_of`` maps nothing) and ``input_ids`` holds KV head 0's tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

import torch

from kvprobe.access import Condition
from kvprobe.decoding import suffix_ids
from kvprobe.forward import traced_forward
from kvprobe.rows import RowState, fork_rows
from kvprobe.prompts import SpanError
from kvprobe.slots import SlotLayer

from ._base import require_row_deletion, require_unedited
from .rope import inv_freq_for_layer, rotate_keys

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model


def finch_scores(probs: torch.Tensor, history_len: int, n_kv_heads: int, normalize: bool = True) -> torch.Tensor:
    """Float[KVH, T]: FINCH scores of the T history keys from the window's probabilities Float[H, w, S]."""
    H, w, _ = probs.shape
    a = probs[:, :, :history_len].float()
    if normalize:
        a = a * torch.arange(history_len, history_len + w, dtype=torch.float32, device=a.device)[None, :, None]
    return a.mean(dim=1).reshape(n_kv_heads, H // n_kv_heads, history_len).mean(dim=1)


def finch_keep(scores: torch.Tensor, n_history: int, history_len: int, window: int) -> torch.Tensor:
    """Long[KVH, n_history + window]: sorted slots each KV head keeps (best history keys, then the window)."""
    KVH = scores.shape[0]
    best = torch.topk(scores, n_history, dim=-1).indices if n_history < history_len else \
        torch.arange(history_len, device=scores.device).expand(KVH, history_len)
    tail = torch.arange(history_len, history_len + window, device=scores.device).expand(KVH, window)
    return torch.cat([torch.sort(best, dim=-1).values, tail], dim=-1)


@dataclass(frozen=True)
class Finch(Condition):
    """Keep ``budget`` slots per KV head (best history keys for the question + the question window).

    Args:
        budget: capacity K: kept history keys plus the window (the question's
            suffix but its final token) per KV head.
        normalize: KVPress's normalization of each window row (default on).
    """

    name: str = field(default="finch", kw_only=True)
    budget: int = 128
    normalize: bool = True
    question_dependent: ClassVar[bool] = True

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError(f"{self.name}: budget must be at least 1, got {self.budget}")

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        require_row_deletion(self.name, arch)
        if arch.shared_layers:
            raise SpanError(f"{self.name}: KV-sharing layers read another layer's rows; per-layer "
                            "selection would break the sharing")

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        require_unedited(self.name, history, state)
        ids = suffix_ids(model, history, question)
        window = ids[:-1]
        w, T = len(window), len(history)
        if w < 1:
            raise SpanError(f"{self.name}: the question suffix has one token; FINCH needs an observation window")
        if self.budget < w:
            raise SpanError(f"{self.name}: budget {self.budget} is smaller than the observation window ({w} tokens)")
        n_history = min(self.budget - w, T)
        rows = fork_rows([state])
        layers = model.arch.kv_layers
        window_ids = torch.tensor([window], dtype=torch.long, device=history.device)
        out = traced_forward(model, rows, window_ids, capture_attention=layers, logits_to_keep=1)
        kept_total = n_history + w
        new_pos = torch.arange(kept_total, device=history.device)
        kv = list(history.kv)
        head0 = None
        for layer in layers:
            cache: SlotLayer = rows.cache.layers[layer]
            spec = model.arch.layers[layer]
            n_kv = cache.keys.shape[1]
            scores = finch_scores(out.attention[layer][0], T, n_kv, self.normalize)
            keep = finch_keep(scores, n_history, T, w)  # [KVH, K]
            gathered = [t[0].gather(1, keep[:, :, None].expand(-1, -1, t.shape[-1]))[None]
                        for t in (cache.keys, cache.values)]
            old_pos = rows.key_pos[0][keep.to(history.device)]  # [KVH, K]
            gathered[spec.rope_tensor] = rotate_keys(gathered[spec.rope_tensor], new_pos[None, :] - old_pos,
                                                     inv_freq_for_layer(model, layer), spec.rope_layout)
            kv[layer] = (gathered[0].contiguous(), gathered[1].contiguous())
            if head0 is None:
                head0 = keep[0].to(history.device)
        all_ids = torch.cat([history.input_ids, window_ids[0]])
        return RowState(
            kv=kv,
            key_pos=new_pos,
            key_valid=torch.ones(kept_total, dtype=torch.bool, device=history.device),
            input_ids=all_ids[head0],
            slot_of=torch.full((T,), -1, dtype=torch.long, device=history.device),
            info={"consumed_suffix": w, "consumed_ids": list(window), "kept_history": n_history,
                  "removed_rows": T - n_history},
        )
