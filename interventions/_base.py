"""Shared pieces of cache operations: span handling and the "must come first" rule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Sequence

import torch

from kvprobe.prompts import SpanError, TokenSpan, merge_spans

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.engine import RowState
    from kvprobe.history import History


class OperationError(ValueError):
    """A cache operation that cannot apply to this model, history or composition."""


def as_spans(spans: TokenSpan | Iterable[TokenSpan], what: str) -> tuple[TokenSpan, ...]:
    """Normalize one span or several into a sorted, merged tuple (at least one)."""
    spans = (spans,) if isinstance(spans, TokenSpan) else tuple(spans)
    if not spans:
        raise SpanError(f"{what} needs at least one span")
    for s in spans:
        if not isinstance(s, TokenSpan):
            raise SpanError(f"{what} spans must be TokenSpan objects, got {type(s).__name__}")
    return tuple(merge_spans(spans))


def positions_of(spans: Sequence[TokenSpan], history_len: int) -> torch.Tensor:
    """Bool[T] marking every position of ``spans``."""
    marked = torch.zeros(history_len, dtype=torch.bool)
    for s in spans:
        marked[s.start : s.end] = True
    return marked


def check_spans(name: str, spans: Sequence[TokenSpan], history_len: int) -> None:
    """Raise ``SpanError`` if a span lies outside a history of ``history_len`` tokens."""
    for s in spans:
        if s.end > history_len:
            raise SpanError(f"{name}: {s!r} lies outside the history of {history_len} tokens")


def check_layers(name: str, layers: Sequence[int] | None, arch: "ArchSummary") -> None:
    """Raise if explicit layer indices do not exist or include no attention layer."""
    if layers is None:
        return
    bad = [i for i in layers if not 0 <= i < arch.num_layers]
    if bad:
        raise SpanError(f"{name}: layers {bad} do not exist (model has {arch.num_layers})")
    if not any(i in arch.attention_layers for i in layers):
        raise SpanError(f"{name}: none of layers {list(layers)} is an attention layer")


def select_layers(layers: Sequence[int] | None, arch: "ArchSummary") -> tuple[int, ...]:
    """The attention layers among ``layers`` (all attention layers when ``None``)."""
    attention = arch.attention_layers
    return attention if layers is None else tuple(i for i in sorted(set(layers)) if i in attention)


def require_unedited(name: str, history: "History", state: "RowState") -> None:
    """Operations that recompute or reshape the whole cache must come first in a composition."""
    if state.kv is not history.kv or state.hidden or state.bias:
        raise OperationError(f"{name} rewrites the history cache and must come first in a Compose(...)")


def require_attention_only(name: str, arch: "ArchSummary") -> None:
    """Refuse models with recurrent (non-attention) layers for row-deleting operations."""
    other = sorted({t for t in arch.layer_types} - {"full_attention", "sliding_attention"})
    if other:
        raise OperationError(
            f"{name} deletes cache rows, but layers of type {other} keep recurrent states that cannot "
            "lose rows; use a mask or a recompute instead"
        )
