"""Shared pieces of cache operations: span handling and the "must come first" rule."""

from __future__ import annotations

from typing import TYPE_CHECKING


if TYPE_CHECKING:
    from kvprobe.access import Condition
    from kvprobe.arch import ArchSummary
    from kvprobe.rows import RowState
    from kvprobe.history import History


class OperationError(ValueError):
    """A cache operation that cannot apply to this model, history or composition."""


def require_unedited(name: str, history: "History", state: "RowState") -> None:
    """Operations that recompute or reshape the whole cache must come first in a composition."""
    if state.kv is not history.kv or state.hidden or state.bias:
        raise OperationError(f"{name} rewrites the history cache and must come first in a Compose(...)")


def require_row_deletion(name: str, arch: "ArchSummary") -> None:
    """Refuse row-deleting operations on models whose cache cannot lose rows (recurrent layers)."""
    reason = arch.row_deletion_refusal()
    if reason:
        raise OperationError(f"{name} deletes cache rows, but {reason}")


def refusal(condition: "Condition", history: "History") -> str | None:
    """Why ``condition`` cannot apply to ``history``'s model and history, or ``None`` if it can."""
    from kvprobe.prompts import SpanError
    from kvprobe.selection import SelectionError

    try:
        condition.validate(len(history), history.model.arch)
    except (OperationError, SpanError, SelectionError) as err:
        return str(err)
    return None
