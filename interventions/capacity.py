"""Capacity accounting for comparing query-aware methods with a mask at matched budgets.

Paper partE section E4: "Matched: K = prefix + common observation length -
masked tokens, measured before the final query-token forward." Before its final
token, a question under a source mask can read the T history tokens minus the
masked ones plus the question's own first tokens; that count is the budget K
every query-aware method gets. Equal K is not equal resources: FINCH's window
counts in K, Quest rounds K down to pages and keeps its dense layers, RefreshKV
also runs full and refresh passes, and Quest/RefreshKV keep the whole cache
resident (:func:`resident_tokens`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvprobe.decoding import suffix_ids

if TYPE_CHECKING:
    from kvprobe.access import Mask
    from kvprobe.history import History
    from kvprobe.model import Model


def observation_length(model: "Model", history: "History", question: str) -> int:
    """Tokens of the question's suffix before its final token (FINCH's window)."""
    return len(suffix_ids(model, history, question)) - 1


def matched_capacity(model: "Model", history: "History", question: str, mask: "Mask") -> int:
    """K = history length + observation length - tokens ``mask`` hides."""
    return len(history) + observation_length(model, history, question) - mask.n_tokens


def resident_tokens(method: str, history_len: int, observation: int, budget: int) -> int:
    """Key slots each method keeps in memory before the final question token.

    Masks, Quest and RefreshKV keep every row (``history + observation``); FINCH
    keeps ``budget`` per KV head.
    """
    return min(budget, history_len + observation) if method == "finch" else history_len + observation
