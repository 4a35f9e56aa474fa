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

:func:`rebuild_segments` / ``SegmentRebuild(source, segments)`` recompute only the
rows of chosen later segments with the source hidden (optionally in some layers
only) and keep every other row as cached: the building block of the fact map
(``kvprobe.studies.fact_map.analysis``), which asks how much of the source's effect
each later segment carries. Rebuilding every later segment in order is
``SelectiveRefresh``.

UNCLEAR in the paper: whether masked rows themselves are recomputed; they are
never read afterwards, so it does not change any output. We recompute them with
ordinary causal attention (they see everything before them, themselves included).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import torch

from kvprobe.access import Condition, as_layers, as_spans, check_layers, check_spans, positions_of, select_layers, set_fields
from kvprobe.forward import extend_state
from kvprobe.rows import RowState
from kvprobe.prompts import SpanError, TokenSpan

from ._base import OperationError, require_unedited

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model



def recompute_hidden(
    model: "Model",
    history: "History",
    hidden: torch.Tensor,
    start: int,
    chunk_size: int | None = None,
) -> RowState:
    """Keep rows ``[0, start)``, recompute ``[start, T)`` with Bool[T] ``hidden`` positions invisible.

    Hidden positions are invisible to every recomputed token at or after ``start``
    that is not itself hidden, in every attention layer; the returned state hides
    them from later tokens too. Positions and length are unchanged.
    """
    return recompute_in_stages(model, history, [(start, hidden)], chunk_size)


def recompute_in_stages(
    model: "Model",
    history: "History",
    stages: Sequence[tuple[int, torch.Tensor]],
    chunk_size: int | None = None,
) -> RowState:
    """Recompute the history in stages, each hiding more: ``[(start_k, Bool[T] hidden_k), ...]``.

    Rows before the first start are kept. Tokens in ``[start_k, start_k+1)`` (the last
    stage runs to the end) are recomputed with the ``hidden_k`` positions invisible,
    unless they are themselves hidden; starts must increase and each ``hidden_k``
    must contain the previous one. The returned state hides the last stage's
    positions from every later token. One stage is :func:`recompute_hidden`; the
    online mask of several records uses one stage per replacement.

    Example: records at ``a`` and ``b`` replaced by records ending at ``e_a < e_b``
    give ``[(e_a, {a}), (e_b, {a, b})]``.
    """
    T = len(history)
    if not stages:
        raise SpanError("recompute_in_stages needs at least one stage")
    starts = [start for start, _ in stages]
    if not all(0 <= a <= T for a in starts) or any(b < a for a, b in zip(starts, starts[1:])):
        raise SpanError(f"recompute starts {starts} must increase within the history of {T} tokens")
    for (_, before), (_, after) in zip(stages, stages[1:]):
        if bool((before & ~after).any()):
            raise SpanError("each recompute stage must keep hiding what the previous stage hid")
    layers = model.arch.attention_layers
    # Recurrent layers keep their state only after the whole history, so hybrid
    # models recompute from position 0; rows before the first start come out unchanged.
    first, hidden = stages[0]
    begin = 0 if model.arch.recurrent_layers else first
    ends = [*starts[1:], T]
    state = history.prefix_state(begin)
    for k, ((start, hidden), end) in enumerate(zip(stages, ends)):
        lo = begin if k == 0 else start
        if k > 0 and end <= lo:
            continue
        affected = (history.positions[lo:end] >= start) & ~hidden[lo:end]
        state = extend_state(model, state, history.input_ids[lo:end], history.positions[lo:end], chunk_size,
                             hidden=hidden[:end], affected=affected)
    state.info = {"recomputed_tokens": T - begin, "reused_tokens": begin}
    return state.hide(hidden, layers)


@dataclass(frozen=True)
class _HiddenRecompute(Condition):
    """Common validation of the recompute family (``chunk_size``: tokens per recompute forward, keyword-only)."""

    spans: TokenSpan | tuple[TokenSpan, ...]
    chunk_size: int | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        set_fields(self, spans=as_spans(self.spans, type(self).__name__))

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, self.spans, history_len)

    def _start(self, history_len: int) -> int:
        raise NotImplementedError

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        require_unedited(self.name, history, state)
        hidden = positions_of(self.spans, len(history), history.device)
        return recompute_hidden(model, history, hidden, self._start(len(history)), self.chunk_size)


@dataclass(frozen=True)
class Rebuild(_HiddenRecompute):
    """Rebuild states: keep rows before the first masked position, recompute the rest with the spans hidden."""

    name: str = field(default="rebuild", kw_only=True)

    def _start(self, history_len: int) -> int:
        return self.spans[0].start


@dataclass(frozen=True)
class SelectiveRefresh(_HiddenRecompute):
    """Reuse the cache through the end of record A; recompute every later token with A hidden.

    ``full=True`` is the comparator that recomputes the whole history (from position 0)
    under the same rule (named ``refresh-full``, else ``refresh``, unless ``name`` says otherwise).
    """

    full: bool = False
    name: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        set_fields(self, name=self.name or ("refresh-full" if self.full else "refresh"))

    def _start(self, history_len: int) -> int:
        return 0 if self.full else self.spans[-1].end


def _span_list(spans: TokenSpan | Sequence[TokenSpan], what: str) -> tuple[TokenSpan, ...]:
    """One span or several as a tuple, in the order given (not merged: each pairs with a replacement)."""
    spans = (spans,) if isinstance(spans, TokenSpan) else tuple(spans)
    if not spans or not all(isinstance(x, TokenSpan) for x in spans):
        raise SpanError(f"{what} needs one or more TokenSpan objects, got {spans!r}")
    return spans


@dataclass(frozen=True)
class OnlineMask(_HiddenRecompute):
    """Hide each superseded record from every token after its own replacement has been read.

    Records are read in order (paper L1404-1407): superseded record ``k`` stays
    visible until the end of ``replacements[k]`` and is hidden from every later
    token, history and question alike. One replacement for several records hides
    them all from the end of that replacement on.

    Example::

        OnlineMask([h.span("old:0"), h.span("old:1")], [h.span("update:0"), h.span("update:1")])
    """

    #: The superseded records, in order (``spans`` is their merged set, derived).
    superseded: TokenSpan | tuple[TokenSpan, ...]
    #: Each superseded record's replacement (one span: the replacement of every record).
    replacements: TokenSpan | tuple[TokenSpan, ...]
    spans: tuple[TokenSpan, ...] = field(default=(), init=False)
    name: str = field(default="online-mask", kw_only=True)

    def __post_init__(self) -> None:
        olds = _span_list(self.superseded, "OnlineMask superseded")
        news = (self.replacements,) * len(olds) if isinstance(self.replacements, TokenSpan) else _span_list(
            self.replacements, "OnlineMask replacement")
        if len(news) != len(olds):
            raise SpanError(f"OnlineMask: {len(olds)} superseded spans but {len(news)} replacements")
        for old, new in zip(olds, news):
            if old.end > new.start:
                raise SpanError(f"OnlineMask: superseded {old!r} must end before its replacement {new!r}")
        set_fields(self, spans=as_spans(olds, "OnlineMask"), superseded=olds, replacements=news)

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, (*self.spans, *self.replacements), history_len)

    def hidden_from(self, history_len: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Long[T]: for each superseded position, the first token that cannot see it (T elsewhere)."""
        first = [history_len] * history_len
        for old, new in zip(self.superseded, self.replacements):
            first[old.start:old.end] = [min(f, new.end) for f in first[old.start:old.end]]
        return torch.tensor(first, dtype=torch.long, device=device)

    def stages(self, history_len: int, device: torch.device | str | None = None) -> list[tuple[int, torch.Tensor]]:
        """``[(start, Bool[T] hidden), ...]``: one stage per distinct replacement end, in order."""
        first = self.hidden_from(history_len, device)
        superseded = positions_of(self.spans, history_len, device)
        return [(end, superseded & (first <= end)) for end in sorted({new.end for new in self.replacements})]

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        require_unedited(self.name, history, state)
        return recompute_in_stages(model, history, self.stages(len(history), history.device), self.chunk_size)


def with_cached_rows(state: RowState, history: "History", lo: int, hi: int) -> RowState:
    """``state`` (covering history positions ``[0, lo)``) followed by the history's own cached rows ``[lo, hi)``."""
    if state.length != lo:
        raise SpanError(f"a state of {state.length} slots cannot continue with history rows from {lo}")
    if hi <= lo:
        return state
    kv = [(None, None) if k is None else
          (torch.cat([k, hk[:, :, lo:hi]], dim=2), torch.cat([v, hv[:, :, lo:hi]], dim=2))
          for (k, v), (hk, hv) in zip(state.kv, history.kv)]
    return RowState(
        kv=kv,
        key_pos=torch.cat([state.key_pos, history.positions[lo:hi]]),
        key_valid=torch.ones(hi, dtype=torch.bool, device=history.device),
        input_ids=torch.cat([state.input_ids, history.input_ids[lo:hi]]),
        slot_of=torch.arange(hi, device=history.device),
    )


def rebuild_segments(
    model: "Model",
    history: "History",
    hidden: torch.Tensor,
    segments: Sequence[TokenSpan],
    layers: tuple[int, ...] | None = None,
    chunk_size: int | None = None,
) -> RowState:
    """Recompute only the rows of ``segments`` with Bool[T] ``hidden`` invisible; keep every other row as cached.

    Segments are recomputed in order at their original positions: each reads the
    cached rows before it, and the rows of segments rebuilt before it. ``hidden``
    positions are invisible to the rebuilt tokens in ``layers`` only (default: every
    attention layer). The returned state hides ``hidden`` from every later token in
    every attention layer. Attention-only models: a recurrent state depends on every
    token, so later rows cannot be kept (``SegmentRebuild`` refuses hybrids).

    Example: ``rebuild_segments(m, h, positions_of([h.span("A")], len(h)), [h.span("B")])``
    is "B read without A, everything else as cached".
    """
    T = len(history)
    state = history.prefix_state(segments[0].start)
    ends = [s.start for s in segments[1:]] + [T]
    for seg, next_start in zip(segments, ends):
        state = extend_state(model, state, history.input_ids[seg.start:seg.end], history.positions[seg.start:seg.end],
                             chunk_size, hidden=hidden[:seg.end], affected=~hidden[seg.start:seg.end], layers=layers)
        state = with_cached_rows(state, history, seg.end, next_start)
    recomputed = sum(s.end - s.start for s in segments)
    state.info = {"recomputed_tokens": recomputed, "reused_tokens": T - recomputed}
    return state.hide(hidden, model.arch.attention_layers)


@dataclass(frozen=True)
class SegmentRebuild(Condition):
    """Hide the source from the question; recompute only ``segments`` with the source hidden.

    Every row outside ``segments`` keeps its cached K/V (rows after a rebuilt
    segment were computed reading the source, and still hold what they read);
    the rebuilt tokens cannot see the source in ``layers`` (default: every
    attention layer). Rebuilding every later segment is ``SelectiveRefresh(source)``.

    Example::

        SegmentRebuild(h.span("A"), [h.span("B")])                 # B read without A
        SegmentRebuild(h.span("A"), [h.span("B")], layers=range(8, 16))  # ... in layers 8-15 only
    """

    #: The source: hidden from the question and from the rebuilt segments.
    spans: TokenSpan | tuple[TokenSpan, ...]
    #: The later segments to rebuild, in order and disjoint.
    segments: TokenSpan | tuple[TokenSpan, ...]
    layers: tuple[int, ...] | None = None
    chunk_size: int | None = field(default=None, kw_only=True)
    name: str = field(default="rebuild-segments", kw_only=True)

    def __post_init__(self) -> None:
        spans = as_spans(self.spans, "SegmentRebuild")
        segs = (self.segments,) if isinstance(self.segments, TokenSpan) else tuple(self.segments)
        if not segs or not all(isinstance(x, TokenSpan) for x in segs):
            raise SpanError(f"SegmentRebuild needs one or more later segments as TokenSpans, got {self.segments!r}")
        for a, b in zip(segs, segs[1:]):
            if b.start < a.end:
                raise SpanError(f"SegmentRebuild: segments must be in order and disjoint; {b!r} starts before "
                                f"{a!r} ends")
        if segs[0].start < spans[-1].end:
            raise SpanError(f"SegmentRebuild: segment {segs[0]!r} starts before the source {spans[-1]!r} ends "
                            "(only later segments read the source)")
        set_fields(self, spans=spans, segments=segs, layers=as_layers(self.layers))

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, (*self.spans, *self.segments), history_len)
        check_layers(self.name, self.layers, arch)
        if arch.recurrent_layers:
            raise OperationError(f"{self.name} keeps cached rows after a rebuilt segment, but recurrent "
                                 "(linear-attention) layers carry one state through every token; use "
                                 "SelectiveRefresh or TextRecompute on hybrid models")

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        require_unedited(self.name, history, state)
        layers = None if self.layers is None else select_layers(self.layers, model.arch)
        hidden = positions_of(self.spans, len(history), history.device)
        return rebuild_segments(model, history, hidden, self.segments, layers,
                                self.chunk_size)
