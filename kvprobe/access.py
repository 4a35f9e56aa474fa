"""Conditions: which history positions later tokens may read, and the base class every condition extends.

An access condition never changes the stored K/V. It only decides, for every
token after the history (question, candidate and generated tokens), which
history keys its attention may read. ``Full`` reads everything; ``Mask`` sets
the attention logit of every token in its spans to -inf (the dtype minimum, as
transformers does) in the chosen layers.

Layer selection: by default every attention layer (full and sliding). Sliding
layers keep their native window; a mask only removes further edges. Recurrent
layers of hybrid models have no keys and are never masked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Iterable, Sequence

import torch

from .prompts import SpanError, TokenSpan, merge_spans

if TYPE_CHECKING:
    from .arch import ArchSummary
    from .history import History
    from .model_like import ModelLike
    from .rows import RowState


def as_spans(spans: TokenSpan | Iterable[TokenSpan], what: str) -> tuple[TokenSpan, ...]:
    """Normalize one span or several into a sorted, merged tuple (at least one)."""
    spans = (spans,) if isinstance(spans, TokenSpan) else tuple(spans)
    if not spans:
        raise SpanError(f"{what} needs at least one span")
    for s in spans:
        if not isinstance(s, TokenSpan):
            raise SpanError(f"{what} spans must be TokenSpan objects, got {type(s).__name__}")
    return tuple(merge_spans(spans))


def as_layers(layers: Iterable[int] | None) -> tuple[int, ...] | None:
    """Layer indices as a sorted tuple without repeats (None: every layer the condition applies to)."""
    return None if layers is None else tuple(sorted(set(layers)))


def set_fields(obj: Any, **values: Any) -> None:
    """Set normalized field values on a frozen dataclass (the one place a condition's ``__post_init__``
    writes: spans merged, layers sorted, a name derived from the other fields)."""
    for key, value in values.items():
        object.__setattr__(obj, key, value)


def positions_of(spans: Sequence[TokenSpan], history_len: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Bool[T] marking every position of ``spans``, on ``device`` (torch's default device when None;
    kvprobe passes the history's: ``history.device``)."""
    marked = torch.zeros(history_len, dtype=torch.bool, device=device)
    for s in spans:
        marked[s.start : s.end] = True
    return marked


def check_spans(name: str, spans: Sequence[TokenSpan], history_len: int) -> None:
    """Raise ``SpanError`` if a span lies outside a history of ``history_len`` tokens."""
    for s in spans:
        if s.end > history_len:
            raise SpanError(f"{name}: {s!r} lies outside the history of {history_len} tokens")


def select_layers(layers: Sequence[int] | None, arch: "ArchSummary") -> tuple[int, ...]:
    """The attention layers among ``layers`` (all attention layers when ``None``)."""
    attention = arch.attention_layers
    return attention if layers is None else tuple(i for i in sorted(set(layers)) if i in attention)


class LayerError(ValueError):
    """Layer indices that do not exist in the model, or that name none of its attention layers."""


def check_layers(name: str, layers: Sequence[int] | None, arch: "ArchSummary") -> None:
    """Raise :class:`LayerError` if explicit layer indices do not exist or include no attention layer."""
    if layers is None:
        return
    bad = [i for i in layers if not 0 <= i < arch.num_layers]
    if bad:
        raise LayerError(f"{name}: layers {bad} do not exist (model has {arch.num_layers})")
    if not select_layers(layers, arch):
        raise LayerError(f"{name}: none of layers {list(layers)} is an attention layer")


def slots_in_state(state: "RowState", positions: torch.Tensor) -> torch.Tensor:
    """Bool[S]: the slots of ``state`` holding the history positions marked in Bool[T] ``positions``.

    Positions an operation removed have no slot and are skipped.
    """
    slots = torch.zeros(state.length, dtype=torch.bool, device=state.slot_of.device)
    kept = state.slot_of[positions]
    slots[kept[kept >= 0]] = True
    return slots


@dataclass(frozen=True)
class Condition:
    """Base class of every condition: masks, biases and cache operations (default: full access).

    A condition turns a history into the :class:`RowState` one batch row starts
    from: :meth:`prepare` validates it, then :meth:`apply` edits the unedited
    state. Cache operations (``interventions``) subclass this too, so any of
    them can be batched with, and composed with, the masks here.
    """

    #: The label rows and reports use (keyword-only in every condition).
    name: str = field(default="full", kw_only=True)
    #: Whether the row state depends on the question (e.g. a gated bias); states of
    #: question-independent conditions are computed once per batch.
    question_dependent: ClassVar[bool] = False

    def prepare(self, model: "ModelLike", history: "History", question: str = "") -> "RowState":
        """The row state this condition gives ``question`` on ``history``."""
        self.validate(len(history), model.arch)
        return self.apply(model, history, history.base_state(), question)

    def apply(self, model: "ModelLike", history: "History", state: "RowState", question: str = "") -> "RowState":
        """Edit ``state`` (a row state of ``history``); the base class changes nothing."""
        return state

    def hidden_positions(self, history_len: int, device: torch.device | str | None = None) -> torch.Tensor:
        """Bool[T]: history positions hidden from later tokens (on ``device``; torch's default when None)."""
        return torch.zeros(history_len, dtype=torch.bool, device=device)

    def layers_for(self, arch: "ArchSummary") -> tuple[int, ...]:
        """Layers in which the hidden positions are hidden."""
        return ()

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        """Raise ``SpanError`` if the condition does not fit a history of this length."""


@dataclass(frozen=True, init=False)
class Compose(Condition):
    """Apply several conditions in order (e.g. a cache operation, then a mask)."""

    parts: tuple[Condition, ...] = ()

    def __init__(self, *parts: Condition, name: str | None = None) -> None:
        if not parts:
            raise ValueError("Compose needs at least one condition")
        set_fields(self, parts=tuple(parts), question_dependent=any(p.question_dependent for p in parts),
                   name=name or "+".join(p.name for p in parts))

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        for p in self.parts:
            p.validate(history_len, arch)

    def apply(self, model: "ModelLike", history: "History", state: "RowState", question: str = "") -> "RowState":
        for p in self.parts:
            state = p.apply(model, history, state, question)
        return state


@dataclass(frozen=True, init=False, eq=False)
class Prepared(Condition):
    """A condition whose row state was already prepared (reuse a costly recompute across calls).

    ``Prepared.of(model, history, condition)`` prepares once; every later score or
    generate call with the result reuses that state. Only for question-independent
    conditions.
    """

    state: "RowState | None" = None

    def __init__(self, state: "RowState", name: str) -> None:
        set_fields(self, state=state, name=name)

    @classmethod
    def of(cls, model: "ModelLike", history: "History", condition: "Condition") -> "Prepared":
        if condition.question_dependent:
            raise ValueError(f"{condition.name}: a question-dependent condition cannot be prepared once")
        return cls(condition.prepare(model, history), condition.name)

    def apply(self, model: "ModelLike", history: "History", state: "RowState", question: str = "") -> "RowState":
        return self.state


@dataclass(frozen=True)
class Full(Condition):
    """Full access: every later token may read every history position."""


@dataclass(frozen=True)
class Mask(Condition):
    """Hard mask: hide ``spans`` from every token after the history.

    Args:
        spans: one ``TokenSpan`` or several (history coordinates).
        layers: layer indices to mask; ``None`` means every attention layer.
        name: label used in results and reports.
    """

    spans: TokenSpan | tuple[TokenSpan, ...]
    layers: tuple[int, ...] | None = None
    name: str = field(default="mask", kw_only=True)

    def __post_init__(self) -> None:
        set_fields(self, spans=as_spans(self.spans, "Mask (use Full() for no mask)"), layers=as_layers(self.layers))

    @property
    def n_tokens(self) -> int:
        """Number of hidden history tokens."""
        return sum(len(s) for s in self.spans)

    def hidden_positions(self, history_len: int, device: torch.device | str | None = None) -> torch.Tensor:
        return positions_of(self.spans, history_len, device)

    def layers_for(self, arch: "ArchSummary") -> tuple[int, ...]:
        return select_layers(self.layers, arch)

    def apply(self, model: "ModelLike", history: "History", state: "RowState", question: str = "") -> "RowState":
        hidden = self.hidden_positions(len(history), history.device)
        return state.hide(slots_in_state(state, hidden), self.layers_for(model.arch))

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, self.spans, history_len)
        check_layers(self.name, self.layers, arch)


def matched_control(
    history: "History",
    masked: Mask | TokenSpan,
    segment: str | TokenSpan = "note",
    skip: int = 0,
    name: str | None = None,
) -> Mask:
    """The equal-token control of a mask: as many tokens from the start of a neutral segment.

    Args:
        history: the prefilled history holding both spans.
        masked: the mask (or span) to match in token count.
        segment: the neutral segment (by name, or its token span when the neutral text is
            part of a segment) whose first tokens are hidden instead.
        skip: tokens of the segment to skip before the control starts (the paper's
            Llama control starts one token into the note; default 0).
        name: label, default ``"<mask name>-control"``.

    Raises ``SpanError`` when the control would be longer than the segment or
    would overlap any masked span.
    """
    mask = masked if isinstance(masked, Mask) else Mask(masked)
    seg = segment if isinstance(segment, TokenSpan) else history.span(segment)
    n = mask.n_tokens
    start = seg.start + skip
    if start + n > seg.end:
        raise SpanError(
            f"control of {n} tokens (+{skip} skipped) is longer than segment {seg.label or segment!r} "
            f"({len(seg)} tokens, {seg!r})"
        )
    control = TokenSpan(start, start + n, f"{seg.label or segment}-control")
    for s in mask.spans:
        if control.overlaps(s):
            raise SpanError(f"control {control!r} overlaps the masked span {s!r}")
    return Mask(control, layers=mask.layers, name=name or f"{mask.name}-control")
