"""RefreshKV: decode from a partial key set, refreshed by occasional full-attention steps.

The paper's own reproduction (partE section E4) of RefreshKV (Xu et al.):

* the question runs with full attention; its final token's attention picks the
  partial set: per KV head, the maximum attention probability over the head's
  query heads, max-pooled over positions with width 7, top ``budget`` slots;
* a decode step reads only the partial set plus itself; the full cache stays
  resident;
* every ``interval`` (10) decode steps the current query is compared with the
  query of the last full step; if their cosine is <= ``threshold`` (0.95) the
  step runs with full attention and its attention picks a new partial set;
* generated tokens have priority in the budget: the partial set holds every
  generated token (the most recent ones if they exceed the budget) and fills the
  rest with the best-ranked prompt slots.

UNCLEAR in the paper, our choices (parameters): which vectors are compared is
not stated; we compare each layer's own query (the current token's query heads
against those of that layer's last full step, cosine per head, mean over
heads), so each layer decides its own refresh. All layers select
(``dense_layers=0``). Ties in the pooled scores go to the earlier slot.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import torch
import torch.nn.functional as F

from kvprobe.selection import KeySelector, SelectionAccess, budgets, check_selectable, descending_ranks

if TYPE_CHECKING:
    from kvprobe.model import Model

#: Paper E4 constants.
REFRESH_INTERVAL = 10
COSINE_THRESHOLD = 0.95
POOL_WIDTH = 7


def pooled_scores(probs: torch.Tensor, readable: torch.Tensor, width: int = POOL_WIDTH) -> torch.Tensor:
    """Float[B, KVH, S]: max over query heads of Float[B, KVH, G, S] probabilities, max-pooled over slots.

    Slots that are not ``readable`` (Bool[B, S]) get -inf after pooling.
    """
    agg = probs.float().amax(dim=2)
    B, KVH, S = agg.shape
    pooled = F.max_pool1d(agg.reshape(B * KVH, 1, S), kernel_size=width, stride=1, padding=width // 2)
    pooled = pooled.reshape(B, KVH, S)
    return pooled.masked_fill(~readable[:, None, :], float("-inf"))


def mean_head_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Float[B]: cosine of query heads [B, H, D] with [B, H, D], averaged over heads."""
    return F.cosine_similarity(a.float(), b.float(), dim=-1).mean(-1)


class RefreshSelector(KeySelector):
    """Keeps, per layer, the prompt-slot ranking of the last full-attention step."""

    def __init__(self, model: "Model", conditions: Sequence["RefreshKV"]) -> None:
        super().__init__()
        first = conditions[0]
        self.interval, self.threshold = first.interval, first.threshold
        self.pool_width, self.dense_layers = first.pool_width, first.dense_layers
        self.budget = budgets(conditions, model.device)
        self.ranks: dict[int, torch.Tensor] = {}  # layer -> Long[B, KVH, prompt_length]
        self.last_query: dict[int, torch.Tensor] = {}  # layer -> Float[B, H, D]
        self.refreshes = torch.zeros(len(conditions), dtype=torch.long, device=model.device)  # full steps after the question, summed over layers

    def keep_rows(self, keep: torch.Tensor) -> None:
        self.budget, self.refreshes = self.budget[keep], self.refreshes[keep]
        self.ranks = {k: v[keep] for k, v in self.ranks.items()}
        self.last_query = {k: v[keep] for k, v in self.last_query.items()}

    def _select(self, layer: int, query: torch.Tensor, scores: torch.Tensor, rows_mask: torch.Tensor) -> None:
        """Re-rank prompt slots of the rows ``rows_mask`` from this full step's attention."""
        P = self.prompt_length
        probs = torch.softmax(scores[..., -1, :].float(), dim=-1)[..., :P]
        readable = self.rows.key_valid[:, :P].to(probs.device)
        new_rank = descending_ranks(pooled_scores(probs, readable, self.pool_width))
        q = query[:, :, -1].float()
        if layer not in self.ranks:
            self.ranks[layer], self.last_query[layer] = new_rank, q
            return
        m = rows_mask[:, None, None]
        self.ranks[layer] = torch.where(m, new_rank, self.ranks[layer])
        self.last_query[layer] = torch.where(m, q, self.last_query[layer])

    def adjust(self, layer: int, query: torch.Tensor, key: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if layer < self.dense_layers:
            return scores
        B, S = scores.shape[0], scores.shape[-1]
        everyone = torch.ones(B, dtype=torch.bool, device=scores.device)
        if self.forward_index == 0:  # the question: full attention, its final token picks the set
            self._select(layer, query, scores, everyone)
            return scores
        refresh = torch.zeros(B, dtype=torch.bool, device=scores.device)
        if self.forward_index % self.interval == 0:
            refresh = mean_head_cosine(query[:, :, -1], self.last_query[layer]) <= self.threshold
            if bool(refresh.any()):
                self._select(layer, query, scores, refresh)
                self.refreshes += refresh.long().to(self.refreshes.device)
        P = self.prompt_length
        n_generated = S - 1 - P  # generated slots before the current token
        budget = self.budget.to(scores.device)
        kept_generated = torch.clamp(budget, max=n_generated)  # Long[B]
        kept_prompt = budget - kept_generated
        slot = torch.arange(S, device=scores.device)
        allowed = torch.zeros(B, scores.shape[1], S, dtype=torch.bool, device=scores.device)
        allowed[..., :P] = self.ranks[layer] < kept_prompt[:, None, None]
        recent = (slot[None, :] >= (S - 1 - kept_generated)[:, None]) & (slot[None, :] >= P)  # incl. the current slot
        allowed |= recent[:, None, :]
        allowed |= refresh[:, None, None]  # refreshing rows read everything this step
        minimum = torch.finfo(scores.dtype).min
        return scores.masked_fill(~allowed[:, :, None, None, :], minimum)


@dataclass(frozen=True)
class RefreshKV(SelectionAccess):
    """RefreshKV at ``budget`` partial-set slots (see module docstring).

    Args:
        budget: partial-set capacity K (generated tokens count in it).
        interval: decode steps between similarity checks (10).
        threshold: refresh when the query cosine is at most this (0.95).
        pool_width: max-pool width over slots (7).
        dense_layers: leading layers that always read everything (0).
    """

    name: str = field(default="refreshkv", kw_only=True)
    budget: int = 128
    dense_layers: int = 0
    interval: int = REFRESH_INTERVAL
    threshold: float = COSINE_THRESHOLD
    pool_width: int = POOL_WIDTH

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.interval < 1:
            raise ValueError(f"{self.name}: interval must be at least 1, got {self.interval}")
        if self.pool_width < 1 or self.pool_width % 2 == 0:
            raise ValueError(f"{self.name}: pool_width must be odd and positive, got {self.pool_width}")

    def make_selector(self, model: "Model", conditions: Sequence[SelectionAccess]) -> RefreshSelector:
        check_selectable(model, self.name)
        return RefreshSelector(model, conditions)  # type: ignore[arg-type]
