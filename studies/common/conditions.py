"""What every study does with its conditions: keep those the model supports, prove the cache untouched."""

from __future__ import annotations

import functools
import warnings
from typing import Mapping

import kvprobe


def supported(study: str, history: kvprobe.History, candidates: Mapping[str, kvprobe.Condition]
              ) -> dict[str, kvprobe.Condition]:
    """The candidate conditions the model's architecture supports, in order.

    The others (compaction with recurrent layers, K-only zeroing of a latent cache...)
    are left out, with one warning per (study, model, condition) saying why.
    """
    from kvprobe.interventions import refusal

    kept = {}
    for name, condition in candidates.items():
        reason = refusal(condition, history)
        if reason is None:
            kept[name] = condition
        else:
            _warn_once(study, history.model.name, name, reason)
    return kept


@functools.lru_cache(maxsize=None)
def _warn_once(study: str, model: str, condition: str, reason: str) -> None:
    warnings.warn(f"{study} study on {model}: condition {condition!r} left out: {reason}", stacklevel=4)


def check_unchanged(history: kvprobe.History, case_id: str) -> None:
    """Raise if the shared history cache changed while a case ran (every condition works on a copy)."""
    if not history.check_digest():
        raise RuntimeError(f"{case_id}: the shared history cache changed during the case")


#: The query-aware key-selection methods (paper partE E4; ``interventions.quest`` / ``finch`` / ``refreshkv``).
QUERY_AWARE_METHODS = ("recent-pages", "quest", "finch", "refreshkv")


def query_aware_condition(method: str, budget: int) -> kvprobe.Condition:
    """The query-aware condition ``method`` at ``budget`` tokens, with the paper's settings (16-token
    Quest pages, two dense layers; FINCH's observation window; RefreshKV's 10-step check at cosine 0.95).

    Example: ``query_aware_condition("quest", 512)`` is ``Quest(budget=512)``.
    """
    from kvprobe.interventions.finch import Finch
    from kvprobe.interventions.quest import Quest, RecentPages
    from kvprobe.interventions.refreshkv import RefreshKV

    if method == "quest":
        return Quest(budget=budget)
    if method == "recent-pages":
        return RecentPages(budget)
    if method == "finch":
        return Finch(budget=budget)
    if method == "refreshkv":
        return RefreshKV(budget=budget)
    raise ValueError(f"unknown query-aware method {method!r}; choose from {QUERY_AWARE_METHODS}")
