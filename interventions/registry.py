"""Conditions by name: ``parse_condition("compact:A", history)`` for the CLI and configs.

Grammar: ``NAME`` or ``NAME:ARG``, where ARG names segments of the history
(``A`` or ``A,B``), or for ``online-mask`` the superseded and replacement
segments as ``A>B`` (pairs ``A>B,C>D``: each record hidden after its own replacement), or for
``rebuild-segments`` the source and the later segments to rebuild as ``A>note,B``, or for ``bias`` segment=value pairs (``A=-0.69,B=0``), or for the query-aware methods a capacity in tokens
(``quest:128``, ``finch:128``, ``refreshkv:128``, ``recent-pages:128``).
Masks accept an optional ``@layers`` suffix (``mask:A@0-3,7``); so does ``rebuild-segments``, whose
layers are those in which the rebuilt segments cannot see the source (``rebuild-segments:A>B@8-15``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from kvprobe.access import Condition, Full, Mask, matched_control
from kvprobe.prompts import SpanError

from .bias import SoftBias
from .compaction import Compact, Drop
from .finch import Finch
from .quest import Quest, RecentPages
from .refreshkv import RefreshKV
from .recompute import OnlineMask, Rebuild, SegmentRebuild, SelectiveRefresh
from .text import NoContext, TextRecompute
from .zeroing import Zero

if TYPE_CHECKING:
    from kvprobe.history import History


def _spans(h: "History", arg: str):
    if not arg:
        raise SpanError("this condition needs segment names, e.g. NAME:A")
    return [h.span(s.strip()) for s in arg.split(",")]


def _layers(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _capacity(arg: str) -> int:
    if not arg.strip().isdigit():
        raise SpanError(f"query-aware conditions need a capacity in tokens, e.g. quest:128 (got {arg!r})")
    return int(arg)


def _online(h: "History", arg: str) -> Condition:
    olds, news = [], []
    for pair in arg.split(","):
        old, sep, new = pair.partition(">")
        if not sep:
            raise SpanError("online-mask needs OLD>NEW segment names, e.g. online-mask:A>B or A>B,C>D")
        olds.append(h.span(old.strip()))
        news.append(h.span(new.strip()))
    return OnlineMask(olds, news)


def _segment_rebuild(h: "History", arg: str) -> Condition:
    source, sep, later = arg.partition(">")
    if not sep or not later.strip():
        raise SpanError("rebuild-segments needs SOURCE>SEGMENTS, e.g. rebuild-segments:A>note,B")
    return SegmentRebuild(_spans(h, source), _spans(h, later))


def _bias(h: "History", arg: str) -> Condition:
    pairs = []
    for item in arg.split(","):
        seg, sep, value = item.partition("=")
        if not sep:
            raise SpanError("bias needs SEGMENT=VALUE pairs, e.g. bias:A=-0.69")
        pairs.append((h.span(seg.strip()), float(value)))
    return SoftBias(pairs)


#: name -> (builder(history, arg) -> Condition, one-line description)
OPERATIONS: dict[str, tuple[Callable[["History", str], Condition], str]] = {
    "full": (lambda h, a: Full(), "full access"),
    "mask": (lambda h, a: Mask(_spans(h, a), name="mask"), "hard mask on segments (-inf logits)"),
    "control": (lambda h, a: matched_control(h, Mask(_spans(h, a)), "note"),
                "equal-token control from the start of segment 'note'"),
    "zero-k": (lambda h, a: Zero(_spans(h, a), "k"), "zero stored keys"),
    "zero-v": (lambda h, a: Zero(_spans(h, a), "v"), "zero stored values"),
    "zero-kv": (lambda h, a: Zero(_spans(h, a), "kv"), "zero stored keys and values"),
    "bias": (_bias, "additive logit bias per segment (SEG=VALUE,...)"),
    "rebuild": (lambda h, a: Rebuild(_spans(h, a)), "recompute later states with the segments hidden"),
    "refresh": (lambda h, a: SelectiveRefresh(_spans(h, a)), "selective refresh after record A"),
    "refresh-full": (lambda h, a: SelectiveRefresh(_spans(h, a), full=True), "full-recompute comparator"),
    "online-mask": (_online, "hide OLD from every token after NEW was read (OLD>NEW, or OLD>NEW,OLD2>NEW2)"),
    "rebuild-segments": (_segment_rebuild, "recompute only the later segments with the source hidden (A>note,B)"),
    "compact": (lambda h, a: Compact(_spans(h, a)), "delete rows, re-rotate later keys"),
    "drop": (lambda h, a: Drop(_spans(h, a)), "delete rows without re-rotation"),
    "recompute": (lambda h, a: TextRecompute([s.strip() for s in a.split(",")]), "delete text, prefill again"),
    "no-context": (lambda h, a: NoContext(), "weights only: the question after the prompt's framing, no history"),
    "recompute-prefix": (lambda h, a: TextRecompute([s.strip() for s in a.split(",")], stored_prefix=True),
                         "delete text, reuse the cached prefix, prefill the rest"),
    "quest": (lambda h, a: Quest(budget=_capacity(a)), "Quest: read the K // 16 best 16-token pages per head (K)"),
    "recent-pages": (lambda h, a: RecentPages(_capacity(a)), "read as many pages as Quest, the latest ones (K)"),
    "finch": (lambda h, a: Finch(budget=_capacity(a)), "FINCH: keep K question-selected keys, re-rotated (K)"),
    "refreshkv": (lambda h, a: RefreshKV(budget=_capacity(a)), "RefreshKV: K-slot partial set, refreshed (K)"),
}


def parse_condition(spec: str, history: "History") -> Condition:
    """Build a condition from ``NAME[:ARG][@LAYERS]`` on ``history`` (see module docstring)."""
    name, _, arg = spec.partition(":")
    arg, _, layers = arg.partition("@")
    if name not in OPERATIONS:
        raise SpanError(f"unknown condition {name!r}; known: {', '.join(OPERATIONS)}")
    access = OPERATIONS[name][0](history, arg)
    if layers:
        if isinstance(access, SegmentRebuild):
            return SegmentRebuild(access.spans, access.segments, layers=_layers(layers), name=access.name)
        if not isinstance(access, Mask):
            raise SpanError(f"@layers is supported for mask and rebuild-segments conditions only, not {name!r}")
        access = Mask(access.spans, layers=_layers(layers), name=access.name)
    return access
