"""What every study does with its conditions: keep those the model supports, prove the cache untouched."""

from __future__ import annotations

import functools
import warnings
from typing import Mapping

import kvprobe


def supported(study: str, history: kvprobe.History, candidates: Mapping[str, kvprobe.Access]
              ) -> dict[str, kvprobe.Access]:
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
