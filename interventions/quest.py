"""Quest: query-aware page selection at a token budget, and its recent-page control.

Quest (Tang et al., 2024; paper partE section E4) keeps the whole cache and,
for each query token and head, reads only the pages whose keys could matter:

* the keys are grouped into pages of ``page_size`` (16) consecutive positions;
* each page keeps the element-wise maximum and minimum of its post-RoPE keys;
* page score for query q: ``sum_i max(q_i * kmax_i, q_i * kmin_i)``, an upper
  bound of ``q . k`` over the page's keys;
* the ``budget // page_size`` highest-scoring pages are read; the page holding
  the current token is always one of them;
* the first ``dense_layers`` (2) layers read everything. Nothing is discarded.

Our choices where the paper (and Quest's MHA-only kernels) are silent:

* pages are position blocks ``[16 j, 16 j + 16)`` over every cached slot
  (history, question, generated tokens); the current token's page may be partial;
* selection applies to the question's final token and every generated token; the
  rest of the question reads everything (Quest prefills densely);
* grouped-query models: each *query* head selects its own pages against its KV
  head's keys (``head_selection="query"``, the per-head rule of MHA Quest);
  ``"kv"`` selects once per KV head from the maximum score over its query heads;
* ties between page scores go to the earlier page (a stable sort).

:class:`RecentPages` is the paper's recent-page control: as many pages as Quest
reads, but always the latest ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import torch

from kvprobe.selection import (KeySelector, SelectionAccess, budgets, check_selectable, descending_ranks,
                               last_query_only)

if TYPE_CHECKING:
    from kvprobe.model import Model

#: Quest's page size and dense leading layers (paper E4).
PAGE_SIZE = 16
DENSE_LAYERS = 2
HEAD_SELECTIONS = ("query", "kv")


def page_bounds(key: torch.Tensor, page: torch.Tensor, readable: torch.Tensor,
                n_pages: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Element-wise key max and min per page.

    Args:
        key: Float[B, KVH, S, D] cached keys (post-RoPE).
        page: Long[B, S] page index of every slot.
        readable: Bool[B, S] slots that exist for the current query (valid, not later).
        n_pages: number of pages (``page.max() + 1`` over readable slots).

    Returns:
        (kmax, kmin) Float[B, KVH, n_pages, D] (0 for empty pages) and Bool[B, n_pages]
        pages holding at least one readable slot.
    """
    B, KVH, S, D = key.shape
    k = key.float()
    idx = torch.where(readable, page, torch.zeros_like(page))[:, None, :, None].expand(B, KVH, S, D)
    inf = float("inf")
    hi = torch.where(readable[:, None, :, None], k, -inf)
    lo = torch.where(readable[:, None, :, None], k, inf)
    kmax = torch.full((B, KVH, n_pages, D), -inf, device=k.device).scatter_reduce(2, idx, hi, "amax")
    kmin = torch.full((B, KVH, n_pages, D), inf, device=k.device).scatter_reduce(2, idx, lo, "amin")
    trash = torch.where(readable, page, torch.full_like(page, n_pages))  # unreadable slots: an extra page
    filled = torch.zeros(B, n_pages + 1, dtype=torch.bool, device=page.device).scatter_(1, trash, True)[:, :n_pages]
    kmax = torch.where(filled[:, None, :, None], kmax, torch.zeros_like(kmax))
    kmin = torch.where(filled[:, None, :, None], kmin, torch.zeros_like(kmin))
    return kmax, kmin, filled


def quest_page_scores(query: torch.Tensor, kmax: torch.Tensor, kmin: torch.Tensor) -> torch.Tensor:
    """Float[B, KVH, G, P]: ``sum_i max(q_i kmax_i, q_i kmin_i)`` for query [B, KVH, G, D] and bounds [B, KVH, P, D]."""
    q = query.float()[:, :, :, None, :]
    return torch.maximum(q * kmax[:, :, None], q * kmin[:, :, None]).sum(-1)


def top_pages(page_scores: torch.Tensor, filled: torch.Tensor, current: torch.Tensor,
              n_read: torch.Tensor) -> torch.Tensor:
    """Bool[B, KVH, G, P]: the ``n_read[b]`` best filled pages of each head, the current page forced in.

    ``current``: Long[B] page of the current token. Ties go to the earlier page.
    """
    B, P = filled.shape
    s = page_scores.masked_fill(~filled[:, None, None, :], float("-inf"))
    s = s.clone()
    s[torch.arange(B, device=s.device), :, :, current] = float("inf")
    rank = descending_ranks(s)
    limit = torch.minimum(n_read, filled.sum(1))[:, None, None, None]
    return (rank < limit) & filled[:, None, None, :]


class PageSelector(KeySelector):
    """Reads, for the selected query tokens, only the chosen pages of each head."""

    def __init__(self, model: "Model", conditions: Sequence["Quest"]) -> None:
        super().__init__()
        first = conditions[0]
        self.page_size, self.dense_layers = first.page_size, first.dense_layers
        self.recent, self.head_selection = first.recent, first.head_selection
        self.n_read = (budgets(conditions, model.device) // self.page_size).clamp(min=1)
        #: tokens each row read in the first selecting layer, per selecting forward (mean over heads)
        self.tokens_read: list[torch.Tensor] = []

    def keep_rows(self, keep: torch.Tensor) -> None:
        self.n_read = self.n_read[keep]

    def adjust(self, layer: int, query: torch.Tensor, key: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if layer < self.dense_layers:
            return scores
        rows = self.rows
        B, KVH, S, D = key.shape
        G = query.shape[1] // KVH
        device = key.device  # the layer's (a model spread over devices keeps the row tables on the first)
        key_pos, key_valid = rows.key_pos[:, :S].to(device), rows.key_valid[:, :S].to(device)
        now = key_pos[:, -1]  # the current (last) token's slot is the last one
        readable = key_valid & (key_pos <= now[:, None])
        page = key_pos // self.page_size
        n_pages = int(page[readable].max()) + 1
        kmax, kmin, filled = page_bounds(key, page, readable, n_pages)
        if self.recent:  # recent-page control: later pages first
            page_scores = torch.arange(n_pages, dtype=torch.float32, device=key.device).expand(B, KVH, G, n_pages)
        else:
            page_scores = quest_page_scores(query[:, :, -1].reshape(B, KVH, G, D), kmax, kmin)
            if self.head_selection == "kv":
                page_scores = page_scores.amax(dim=2, keepdim=True).expand(B, KVH, G, n_pages)
        chosen = top_pages(page_scores, filled, now // self.page_size, self.n_read.to(device))
        allowed = chosen.gather(-1, torch.where(readable, page, 0)[:, None, None, :].expand(B, KVH, G, S))
        allowed &= readable[:, None, None, :]
        if layer == self.dense_layers:
            self.tokens_read.append(allowed.float().sum(-1).mean(dim=(1, 2)))
        return last_query_only(scores, allowed)


@dataclass(frozen=True)
class Quest(SelectionAccess):
    """Quest page selection at ``budget`` tokens (``budget // page_size`` pages incl. the current one).

    Args:
        budget: capacity K in tokens (the paper: 128 fixed, or matched to the mask).
        page_size: tokens per page (16).
        dense_layers: leading layers that read everything (2).
        head_selection: ``"query"`` (each query head selects) or ``"kv"`` (one selection per KV head).
    """

    name: str = field(default="quest", kw_only=True)
    budget: int = 128
    dense_layers: int = DENSE_LAYERS
    page_size: int = PAGE_SIZE
    head_selection: str = "query"
    recent: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.page_size < 1:
            raise ValueError(f"{self.name}: page_size must be at least 1, got {self.page_size}")
        if self.head_selection not in HEAD_SELECTIONS:
            raise ValueError(f"{self.name}: head_selection must be one of {HEAD_SELECTIONS}, got {self.head_selection!r}")

    def make_selector(self, model: "Model", conditions: Sequence[SelectionAccess]) -> PageSelector:
        check_selectable(model, self.name)
        return PageSelector(model, conditions)  # type: ignore[arg-type]


def RecentPages(budget: int = 128, page_size: int = PAGE_SIZE, dense_layers: int = DENSE_LAYERS,
                name: str = "recent-pages") -> Quest:
    """The recent-page control: as many pages as Quest reads at ``budget``, always the latest ones."""
    return Quest(name=name, budget=budget, dense_layers=dense_layers, page_size=page_size, recent=True)
