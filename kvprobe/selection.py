"""Query-aware key selection inside the attention call (Quest, RefreshKV, recent pages).

A hard mask decides once which history keys later tokens may read. Query-aware
methods decide per query token and per head, from the query itself: Quest
scores 16-token pages against the current query, RefreshKV keeps the keys the
last full-attention step attended to most. Such a decision needs the layer's
post-RoPE query and the cached keys, which only exist inside the attention
computation, so kvprobe's attention function (``kvprobe.attention``) asks the
batch's active :class:`KeySelector` to edit the attention logits of every
attention layer it runs:

    scores[b, kv, g, q, s]   (logits after the additive mask, query head kv*G+g)

A selector returns the same tensor with the key slots a row may not read set
to the dtype minimum. ``traced_forward`` activates ``rows.selector`` around each
forward and tells it which forward it is (:meth:`KeySelector.begin`).

Conditions that select keys per query subclass :class:`SelectionAccess`: the
decoding loop batches rows of one selection kind together (rows may differ in
budget) and builds the selector from their conditions. The history cache is
never changed; selection only masks. Only models loaded with kvprobe's
attention (the default ``attn_implementation``; it runs eager attention while
a selector is active) call selectors; others are refused when the selector is
attached.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import torch

from .access import Condition
from .attention import KVPROBE_IMPLEMENTATIONS, KVPROBE_SDPA

if TYPE_CHECKING:
    from .arch import ArchSummary
    from .model_like import ModelLike
    from .rows import Rows

class SelectionError(ValueError):
    """A query-aware selection cannot run as asked (model, batch or step it does not support)."""


class KeySelector:
    """Edits the attention logits of one batch's rows, layer by layer, forward by forward.

    Subclasses implement :meth:`adjust`; :meth:`begin` records the batch state
    of the forward about to run (``self.rows``, ``self.forward_index``).
    """

    def __init__(self) -> None:
        self.rows: "Rows | None" = None
        self.forward_index = -1  # 0: the question block; 1, 2, ...: decode steps
        self.prompt_length = 0  # slots once the question block ran (history + question)

    def begin(self, rows: "Rows", n_query: int) -> None:
        """Called by the engine before each forward, after the new slots were appended."""
        self.forward_index += 1
        if self.forward_index == 0:
            self.prompt_length = rows.length
        elif n_query != 1:
            raise SelectionError(
                f"{type(self).__name__}: query-aware selection follows one token per forward after the "
                f"question (generation); a {n_query}-token block (multi-token candidate scoring) is not supported")
        self.rows = rows

    def keep_rows(self, keep: torch.Tensor) -> None:
        """Rows ``keep`` (Long[B']) stay in the batch (finished rows left); per-row state follows."""

    def adjust(self, layer: int, query: torch.Tensor, key: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Logits Float[B, KVH, G, Q, S] with unread slots set to the minimum (query [B, H, Q, D], key [B, KVH, S, D])."""
        raise NotImplementedError


def last_query_only(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    """Hide, for the last query column only, the slots not ``allowed`` (Bool broadcastable to [B, KVH, G, S])."""
    out = scores.clone()
    minimum = torch.finfo(scores.dtype).min
    out[..., -1, :] = scores[..., -1, :].masked_fill(~allowed, minimum)
    return out


@dataclass(frozen=True)
class SelectionAccess(Condition):
    """Base of conditions that select keys per query inside attention (the history itself is unchanged).

    Attributes:
        budget: key slots (tokens) each selected query may read besides itself; the
            paper's capacity K.
        dense_layers: the first this many layers read everything.
    """

    name: str = field(default="selection", kw_only=True)
    budget: int = 128
    dense_layers: int = 0

    def __post_init__(self) -> None:
        if self.budget < 1:
            raise ValueError(f"{self.name}: budget must be at least 1 key, got {self.budget}")
        if self.dense_layers < 0:
            raise ValueError(f"{self.name}: dense_layers must be >= 0, got {self.dense_layers}")

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        """Refuse architectures whose caches cannot be selected per query (before anything runs)."""
        check_selectable_arch(arch, self.name)

    def batch_key(self) -> tuple:
        """Rows whose conditions share this key run in one batch (everything but the budget and name)."""
        fields = {k: v for k, v in self.__dict__.items() if k not in ("budget", "name")}
        return (type(self).__name__, tuple(sorted(fields.items())))

    def make_selector(self, model: "ModelLike", conditions: Sequence["SelectionAccess"]) -> KeySelector:
        """The selector of a batch whose rows have ``conditions`` (one per row, same ``batch_key``)."""
        raise NotImplementedError


def check_selectable(model: "ModelLike", name: str) -> None:
    """Refuse models whose attention does not call selectors, or whose caches cannot be rolled per row."""
    impl = getattr(model.hf.config, "_attn_implementation", None)
    if impl not in KVPROBE_IMPLEMENTATIONS:
        raise SelectionError(f"{name}: query-aware selection runs inside kvprobe's attention; model "
                             f"{model.name!r} uses {impl!r} (load it with attn_implementation={KVPROBE_SDPA!r})")
    check_selectable_arch(model.arch, name, model.name)


def check_selectable_arch(arch: "ArchSummary", name: str, model: str = "the model") -> None:
    """Refuse architectures whose layers do not all own an attention cache (recurrent or KV-sharing layers)."""
    where = model if model == "the model" else f"model {model!r}"
    if arch.recurrent_layers:
        raise SelectionError(f"{name}: {where} has recurrent layers; query-aware selection "
                             "is implemented for attention-only models")
    if arch.shared_layers:
        raise SelectionError(f"{name}: {where} has KV-sharing layers; query-aware selection "
                             "is implemented for models whose attention layers own their rows")


def descending_ranks(scores: torch.Tensor) -> torch.Tensor:
    """Long, same shape: rank of each entry along the last dim by descending score (0 = best; ties to the
    earlier index)."""
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    rank.scatter_(-1, order, torch.arange(scores.shape[-1], device=scores.device).expand_as(order).contiguous())
    return rank


def budgets(conditions: Sequence[SelectionAccess], device: torch.device | str | None = None) -> torch.Tensor:
    """Long[B]: each row's budget, on ``device`` (the model's)."""
    return torch.tensor([c.budget for c in conditions], dtype=torch.long, device=device)
