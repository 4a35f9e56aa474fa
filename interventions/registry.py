"""Conditions by name: ``parse_condition("compact:A", history)`` for the CLI and configs.

Grammar: ``NAME`` or ``NAME:ARG``, where ARG names segments of the history
(``A`` or ``A,B``), or for ``online-mask`` the superseded and replacement
segments as ``A>B`` (pairs ``A>B,C>D``: each record hidden after its own replacement), or for
``rebuild-segments`` the source and the later segments to rebuild as ``A>note,B``, or for ``bias`` segment=value pairs (``A=-0.69,B=0``), or for the query-aware methods a capacity in tokens
(``quest:128``, ``finch:128``, ``refreshkv:128``, ``recent-pages:128``), or for ``zero-heads`` segments and
KV heads as ``A#0,1``, or for ``head-ablation`` a layer and query heads as ``3#0,1``, or for ``patch`` the
source condition and the layer as ``full>3``.
Every name, its builder, its reference check and the benchmarks that time it are one line of
:data:`CONDITIONS`; ``kvprobe conditions``, the matrix's columns, the benchmarks' operations and the
contract test (``tests/test_condition_contract.py``) are derived from it.
Masks accept an optional ``@layers`` suffix (``mask:A@0-3,7``); so does ``rebuild-segments``, whose
layers are those in which the rebuilt segments cannot see the source (``rebuild-segments:A>B@8-15``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from kvprobe.access import Condition, Full, Mask, matched_control
from kvprobe.prompts import SpanError

from .bias import SoftBias
from .compaction import Compact, Drop
from .components import HeadAblation, Patch
from .finch import Finch
from .quest import Quest, RecentPages
from .refreshkv import RefreshKV
from .recompute import OnlineMask, Rebuild, SegmentRebuild, SelectiveRefresh
from .text import NoContext, TextRecompute
from .zeroing import Zero

if TYPE_CHECKING:
    from kvprobe.history import History


class ConditionSpecError(ValueError):
    """A condition named by text (``NAME[:ARG][@LAYERS]``) whose name is unknown or whose argument is not of
    its condition's form (a capacity, a layer list, ``LAYER#HEADS``, ``SOURCE>LAYER``). Arguments naming
    segments that the history lacks raise :class:`kvprobe.SpanError`."""


def _spans(h: "History", arg: str):
    if not arg:
        raise SpanError("this condition needs segment names, e.g. NAME:A")
    return [h.span(s.strip()) for s in arg.split(",")]


def _layers(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        try:
            out.extend(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ConditionSpecError(f"{text!r} is not a list of indices; write e.g. 0-3,7") from None
    return out


def _segments(arg: str) -> list[str]:
    if not arg.strip():
        raise SpanError("this condition needs segment names, e.g. recompute:A")
    return [s.strip() for s in arg.split(",")]


def _capacity(arg: str) -> int:
    if not arg.strip().isdigit():
        raise ConditionSpecError(f"query-aware conditions need a capacity in tokens, e.g. quest:128 (got {arg!r})")
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


def _zero_heads(h: "History", arg: str) -> Condition:
    segments, sep, heads = arg.partition("#")
    if not sep or not heads.strip():
        raise SpanError("zero-heads needs SEGMENTS#HEADS, e.g. zero-heads:A#0 or zero-heads:A,B#0,1")
    return Zero(_spans(h, segments), "kv", heads=_layers(heads), name="zero-heads")


def _head_ablation(h: "History", arg: str) -> Condition:
    layer, sep, heads = arg.partition("#")
    if not sep or not layer.strip().lstrip("-").isdigit() or not heads.strip():
        raise ConditionSpecError("head-ablation needs LAYER#HEADS, e.g. head-ablation:3#0,1")
    return HeadAblation(int(layer), tuple(_layers(heads)))


def _patch(h: "History", arg: str) -> Condition:
    source, sep, layer = arg.partition(">")
    if not sep or not source.strip() or not layer.strip().lstrip("-").isdigit():
        raise ConditionSpecError("patch needs SOURCE>LAYER (the condition whose residual stream is copied), e.g. patch:full>3")
    return Patch(source.strip(), int(layer))


def _bias(h: "History", arg: str) -> Condition:
    pairs = []
    for item in arg.split(","):
        seg, sep, value = item.partition("=")
        if not sep:
            raise SpanError("bias needs SEGMENT=VALUE pairs, e.g. bias:A=-0.69")
        pairs.append((h.span(seg.strip()), float(value)))
    return SoftBias(pairs)


@dataclass(frozen=True)
class RegisteredCondition:
    """One named condition: how the command line builds it, and what proves and times it.

    Attributes:
        build: ``build(history, arg) -> Condition`` for ``NAME:ARG`` (see the module docstring).
        help: one line for ``kvprobe conditions`` and ``--help``.
        example: the ARG of a typical use on a history with segments A, note and B (``"A"``, ``"A>B"``,
            ``"48"``; empty for conditions without one). The contract test, the device test and the
            benchmarks build the condition from ``NAME:example``.
        reference: the independent computation it must equal: a ``kvprobe verify`` check name, or a test
            (``tests/<file>.py::<test>``) for conditions that check cannot reach.
        matrix: a column of the family x operation matrix (``kvprobe matrix``): ``kvprobe verify`` checks it
            on every architecture family.
        benches: the benchmarks that time it (``"operations"``: ``kvprobe bench operations``; ``"long"``:
            ``kvprobe bench long``).
    """

    build: Callable[["History", str], Condition]
    help: str
    example: str
    reference: str
    matrix: bool = False
    benches: tuple[str, ...] = ()

    def spec(self, name: str) -> str:
        """The example as the command line writes it: ``NAME:example`` (``NAME`` without one)."""
        return f"{name}:{self.example}" if self.example else name


_C = RegisteredCondition
_ALL = ("operations", "long")
#: Every condition usable by name, in the order ``kvprobe conditions`` lists them (and the matrix's columns).
CONDITIONS: dict[str, RegisteredCondition] = {
    "full": _C(lambda h, a: Full(), "full access", "", "empty_mask_equals_full", benches=("operations",)),
    "mask": _C(lambda h, a: Mask(_spans(h, a), name="mask"), "hard mask on segments (-inf logits)", "A",
               "nnsight_mask_equals_explicit_4d", matrix=True, benches=_ALL),
    "control": _C(lambda h, a: matched_control(h, Mask(_spans(h, a)), "note"),
                  "equal-token control from the start of segment 'note'", "A",
                  "cached_equals_one_pass"),  # the matched control is a mask of the note's first tokens
    "bias": _C(_bias, "additive logit bias per segment (SEG=VALUE,...)", "A=-0.69,B=0.5", "bias_equals_explicit_mask",
               matrix=True),
    "zero-k": _C(lambda h, a: Zero(_spans(h, a), "k"), "zero stored keys", "A", "zero_k_equals_plain_forward",
                 matrix=True),
    "zero-v": _C(lambda h, a: Zero(_spans(h, a), "v"), "zero stored values", "A", "zero_v_equals_plain_forward",
                 matrix=True),
    "zero-kv": _C(lambda h, a: Zero(_spans(h, a), "kv"), "zero stored keys and values", "A",
                  "zero_kv_equals_plain_forward", matrix=True, benches=("operations",)),
    "zero-heads": _C(_zero_heads, "zero stored keys and values of some KV heads only (SEGMENTS#HEADS)", "A#0",
                     "zero_heads_equals_plain_forward", matrix=True),
    "rebuild": _C(lambda h, a: Rebuild(_spans(h, a)), "recompute later states with the segments hidden", "A",
                  "rebuild_equals_one_pass", matrix=True, benches=_ALL),
    "rebuild-segments": _C(_segment_rebuild, "recompute only the later segments with the source hidden (A>note,B)",
                           "A>B", "segment_rebuild_equals_one_pass", matrix=True),
    "refresh": _C(lambda h, a: SelectiveRefresh(_spans(h, a)), "selective refresh after record A", "A",
                  "refresh_equals_one_pass", matrix=True),
    "refresh-full": _C(lambda h, a: SelectiveRefresh(_spans(h, a), full=True), "full-recompute comparator", "A",
                       "tests/test_interventions.py::test_recomputed_states_generate_like_the_uncached_reference"),
    "online-mask": _C(_online, "hide OLD from every token after NEW was read (OLD>NEW, or OLD>NEW,OLD2>NEW2)",
                      "A>B", "online_mask_equals_one_pass", matrix=True),
    "compact": _C(lambda h, a: Compact(_spans(h, a)), "delete rows, re-rotate later keys", "A",
                  "compact_keys_equal_rope_at_new_positions", matrix=True, benches=("operations",)),
    "drop": _C(lambda h, a: Drop(_spans(h, a)), "delete rows without re-rotation", "A",
               "drop_original_positions_equals_mask", matrix=True, benches=("operations",)),
    "recompute": _C(lambda h, a: TextRecompute(_segments(a)), "delete text, prefill again", "A",
                    "text_recompute_equals_one_pass", matrix=True, benches=_ALL),
    "recompute-prefix": _C(lambda h, a: TextRecompute(_segments(a), stored_prefix=True),
                           "delete text, reuse the cached prefix, prefill the rest", "A",
                           "text_recompute_prefix_equals_fresh_prefill", matrix=True, benches=_ALL),
    "head-ablation": _C(_head_ablation, "zero some attention heads' outputs in one layer (LAYER#HEADS)", "1#0,1",
                        "head_ablation_equals_hooked_forward", matrix=True),
    "patch": _C(_patch, "copy the residual stream after a layer from another condition's row (SOURCE>LAYER)",
                "full>1", "patch_equals_patching_by_hand", matrix=True),
    "no-context": _C(lambda h, a: NoContext(), "weights only: the question after the prompt's framing, no history",
                     "", "tests/test_no_context.py::test_no_context_equals_a_plain_forward_of_the_question_alone"),
    "quest": _C(lambda h, a: Quest(budget=_capacity(a)), "Quest: read the K // 16 best 16-token pages per head (K)",
                "48", "tests/test_query_aware.py::test_quest_matches_brute_force_selection"),
    "recent-pages": _C(lambda h, a: RecentPages(_capacity(a)), "read as many pages as Quest, the latest ones (K)",
                       "48", "tests/test_query_aware.py::test_quest_matches_brute_force_selection"),
    "finch": _C(lambda h, a: Finch(budget=_capacity(a)), "FINCH: keep K question-selected keys, re-rotated (K)",
                "48", "tests/test_query_aware.py::test_finch_matches_fresh_prefill_with_rope_at_compact_positions"),
    "refreshkv": _C(lambda h, a: RefreshKV(budget=_capacity(a)), "RefreshKV: K-slot partial set, refreshed (K)",
                    "48", "tests/test_query_aware.py::test_refreshkv_matches_brute_force"),
}


def covered_by(bench: str) -> tuple[str, ...]:
    """The names of the conditions a benchmark times (``"operations"`` or ``"long"``), in registry order."""
    return tuple(name for name, c in CONDITIONS.items() if bench in c.benches)


def matrix_columns() -> tuple[str, ...]:
    """The conditions ``kvprobe verify`` checks on every family: the matrix's columns, in registry order."""
    return tuple(name for name, c in CONDITIONS.items() if c.matrix)


def parse_condition(spec: str, history: "History") -> Condition:
    """Build a condition from ``NAME[:ARG][@LAYERS]`` on ``history`` (see module docstring)."""
    name, _, arg = spec.partition(":")
    arg, _, layers = arg.partition("@")
    if name not in CONDITIONS:
        raise ConditionSpecError(f"unknown condition {name!r}; known: {', '.join(CONDITIONS)}")
    condition = CONDITIONS[name].build(history, arg)
    if layers:
        if not isinstance(condition, (Mask, SegmentRebuild)):
            raise ConditionSpecError(f"@layers is supported for mask and rebuild-segments conditions only, not {name!r}")
        condition = replace(condition, layers=_layers(layers))
    return condition
