"""Cache operations and access changes beyond hard masks, each a validated condition object.

Every class here is a ``kvprobe.Condition``: pass it wherever a mask goes
(``model.score``, ``model.generate``, ``Request``), batch it with other
conditions, or chain it with ``kvprobe.Compose(op, mask)``. Each works on the
condition's own copy of the cache; the shared history is never modified.

| operation | what changes |
|---|---|
| ``Zero(spans, "k"/"v"/"kv", layers)`` | stored rows overwritten with 0; positions and length kept |
| ``SoftBias`` / ``SessionOrderBias`` | additive logit bias for question and generated tokens |
| ``Rebuild(spans)`` | rows after the first masked position recomputed with the spans hidden |
| ``SelectiveRefresh(span, full=False)`` | rows after record A recomputed with A hidden (``full``: from 0) |
| ``OnlineMask(old, replacement)`` | rows after the replacement recomputed with the old record hidden |
| ``SegmentRebuild(source, segments, layers)`` | only the chosen later segments recomputed with the source hidden |
| ``Compact(spans)`` | rows deleted, later keys re-rotated, positions shortened |
| ``Drop(spans, positions=...)`` | rows deleted without re-rotation |
| ``TextRecompute(segments, stored_prefix=False)`` | text deleted, retokenized, prefilled again |
| ``Quest(budget)`` / ``RecentPages(budget)`` | per query and head, only the chosen 16-token pages are read |
| ``Finch(budget)`` | question-selected keys kept per head, re-rotated to compact positions |
| ``RefreshKV(budget)`` | decoding reads a partial set, refreshed by occasional full steps |
| ``HeadAblation(layer, heads, value)`` | chosen heads' outputs zeroed (or set to their history mean) after the history |
| ``Patch(source, layer, positions)`` | the residual stream after a layer copied from another condition's row |

``capacity.matched_capacity`` gives the paper's matched budget K for a mask.

``parse_condition`` builds any of them (and masks) from a short string, for the CLI; ``CONDITIONS``
is the one registry of named conditions (builder, help, reference check, matrix and benchmark coverage).

What checks these operations (``kvprobe verify``) and times them (``kvprobe bench``) lives in
``kvprobe.tools`` (``tools.verify``, ``tools.bench``), which this package never loads.
"""

from ._base import OperationError, refusal
from .bias import SessionOrderBias, SoftBias, session_gate
from .capacity import matched_capacity
from .compaction import Compact, Drop
from .components import HeadAblation, Patch
from .finch import Finch
from .quest import Quest, RecentPages
from .refreshkv import RefreshKV
from .recompute import OnlineMask, Rebuild, SegmentRebuild, SelectiveRefresh, rebuild_segments, recompute_hidden
from .registry import CONDITIONS, ConditionSpecError, RegisteredCondition, parse_condition
from .rope import rotate_keys
from .text import NoContext, TextRecompute
from .zeroing import Zero

__all__ = [
    "CONDITIONS",
    "ConditionSpecError",
    "NoContext",
    "Compact",
    "Drop",
    "HeadAblation",
    "Finch",
    "OnlineMask",
    "OperationError",
    "Patch",
    "Quest",
    "RecentPages",
    "RefreshKV",
    "RegisteredCondition",
    "Rebuild",
    "SegmentRebuild",
    "SelectiveRefresh",
    "SessionOrderBias",
    "SoftBias",
    "TextRecompute",
    "Zero",
    "matched_capacity",
    "parse_condition",
    "refusal",
    "rebuild_segments",
    "recompute_hidden",
    "rotate_keys",
    "session_gate",
]
