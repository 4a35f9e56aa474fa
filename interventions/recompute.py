"""Recompute history states with a record hidden: rebuild states, selective refresh, online mask.

All three are one primitive, :func:`recompute_hidden`: keep the cached rows
before position ``start``, and run the history tokens ``[start, T)`` again at
their *original* positions through the traced forward, with the hidden record's
positions invisible to every recomputed token outside the record. Questions and
decoding keep the record hidden afterwards.

* ``Rebuild(spans)``: start at the first masked position (paper L4472, L4519).
* ``SelectiveRefresh(span)``: reuse the cache through the end of record A and
  recompute every later token with A hidden; ``full=True`` is its
  full-recompute comparator, which recomputes from position 0 (paper partD 8).
* ``OnlineMask(superseded, replacement)``: records are read in order and the
  superseded record is hidden from every token after its replacement has been
  read, i.e. start at the end of the replacement (paper L1404-1407).

UNCLEAR in the paper: whether masked rows themselves are recomputed; they are
never read afterwards, so it does not change any output. We recompute them with
ordinary causal attention (they see everything before them, themselves included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, Sequence

import torch

from kvprobe.access import Access, as_spans, check_spans, positions_of
from kvprobe.engine import CHUNK_SIZE, RowState, extend_state
from kvprobe.prompts import SpanError, TokenSpan

from ._base import require_unedited

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model



def recompute_hidden(
    model: "Model",
    history: "History",
    hidden: torch.Tensor,
    start: int,
    chunk_size: int = CHUNK_SIZE,
) -> RowState:
    """Keep rows ``[0, start)``, recompute ``[start, T)`` with Bool[T] ``hidden`` positions invisible.

    Hidden positions are invisible to every recomputed token at or after ``start``
    that is not itself hidden, in every attention layer; the returned state hides
    them from later tokens too. Positions and length are unchanged.
    """
    T = len(history)
    if not 0 <= start <= T:
        raise SpanError(f"recompute start {start} outside the history of {T} tokens")
    layers = model.arch.attention_layers
    # Recurrent layers keep their state only after the whole history, so hybrid
    # models recompute from position 0; rows before ``start`` come out unchanged.
    begin = 0 if model.arch.recurrent_layers else start
    affected = (history.positions[begin:] >= start) & ~hidden[begin:]
    state = extend_state(model, history.prefix_state(begin), history.input_ids[begin:],
                         history.positions[begin:], chunk_size, hidden=hidden, affected=affected)
    state.info = {"recomputed_tokens": T - begin, "reused_tokens": begin}
    return state.hide(hidden, layers)


@dataclass(frozen=True, init=False)
class _HiddenRecompute(Access):
    """Common validation of the recompute family."""

    spans: tuple[TokenSpan, ...] = ()
    chunk_size: int = CHUNK_SIZE

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, self.spans, history_len)

    def _start(self, history_len: int) -> int:
        raise NotImplementedError

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        require_unedited(self.name, history, state)
        hidden = positions_of(self.spans, len(history))
        return recompute_hidden(model, history, hidden, self._start(len(history)), self.chunk_size)


@dataclass(frozen=True, init=False)
class Rebuild(_HiddenRecompute):
    """Rebuild states: keep rows before the first masked position, recompute the rest with the spans hidden."""

    def __init__(self, spans: TokenSpan | Iterable[TokenSpan], name: str = "rebuild", chunk_size: int = CHUNK_SIZE):
        object.__setattr__(self, "spans", as_spans(spans, "Rebuild"))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "chunk_size", chunk_size)

    def _start(self, history_len: int) -> int:
        return self.spans[0].start


@dataclass(frozen=True, init=False)
class SelectiveRefresh(_HiddenRecompute):
    """Reuse the cache through the end of record A; recompute every later token with A hidden.

    ``full=True`` is the comparator that recomputes the whole history (from position 0)
    under the same rule.
    """

    full: bool = False

    def __init__(self, span: TokenSpan | Iterable[TokenSpan], full: bool = False, name: str | None = None,
                 chunk_size: int = CHUNK_SIZE):
        object.__setattr__(self, "spans", as_spans(span, "SelectiveRefresh"))
        object.__setattr__(self, "full", full)
        object.__setattr__(self, "name", name or ("refresh-full" if full else "refresh"))
        object.__setattr__(self, "chunk_size", chunk_size)

    def _start(self, history_len: int) -> int:
        return 0 if self.full else self.spans[-1].end


@dataclass(frozen=True, init=False)
class OnlineMask(_HiddenRecompute):
    """Hide a superseded record from every token after its replacement has been read."""

    replacement: TokenSpan = TokenSpan(0, 1)

    def __init__(self, superseded: TokenSpan | Sequence[TokenSpan], replacement: TokenSpan,
                 name: str = "online-mask", chunk_size: int = CHUNK_SIZE):
        spans = as_spans(superseded, "OnlineMask")
        if not isinstance(replacement, TokenSpan):
            raise SpanError("OnlineMask replacement must be a TokenSpan")
        if any(s.end > replacement.start for s in spans):
            raise SpanError(f"OnlineMask: superseded {spans} must end before the replacement {replacement!r}")
        object.__setattr__(self, "spans", spans)
        object.__setattr__(self, "replacement", replacement)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "chunk_size", chunk_size)

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, (*self.spans, self.replacement), history_len)

    def _start(self, history_len: int) -> int:
        return self.replacement.end
