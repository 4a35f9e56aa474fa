"""Soft additive attention-logit bias on history keys, for question and generated tokens only.

``SoftBias`` adds arbitrary per-position values to every attention logit that
addresses those keys, in the chosen layers (default all attention layers), for
tokens after the history; the history itself is prefilled without bias.

``SessionOrderBias`` is the paper's session-order rule (partD section 10,
"guarded validation"): with session index s(j) in 0..S-1 (S > 1),
``r_j = (S-1-s(j)) / (S-1)`` and ``b_j(q) = log(w) * g(q) * r_j`` with
``w = 1/2`` (oldest session x 1/2, newest x 1; the paper's ``-log(2)``).
Tokens outside every session (headers, question, generated tokens) get r = 0.
The gate g(q) is 0 when the question names an earlier time (gate words below),
else 1.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar, Mapping, Sequence

import torch

from kvprobe.access import Condition, as_layers, check_layers, check_spans, select_layers, set_fields
from kvprobe.rows import RowState
from kvprobe.prompts import SpanError, TokenSpan


if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model

# Gate words, paper partD section 10 (matched case-insensitively as whole words).
GATE_WORDS = (
    "before", "previous", "previously", "earlier", "first", "original", "originally", "initial",
    "initially", "ago", "between", "since", "when", "started", "starting", "began", "beginning",
)
MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september",
          "october", "november", "december")
# UNCLEAR in the paper: the exact "how many/long/much days/weeks/months/years" regex.
# We accept "how many|long|much" followed within three words by a time unit.
_HOW_LONG = r"\bhow\s+(?:many|long|much)\b(?:\s+\w+){0,3}?\s+(?:days?|weeks?|months?|years?)\b"
_GATE_RE = re.compile(
    r"\b(?:" + "|".join(GATE_WORDS + MONTHS) + r")\b|" + _HOW_LONG + r"|\b(?:19|20)\d{2}\b",
    re.IGNORECASE,
)


def session_gate(question: str) -> int:
    """g(q): 0 if the question refers to an earlier time (gate words, months, years), else 1."""
    return 0 if _GATE_RE.search(question) else 1


@dataclass(frozen=True)
class SoftBias(Condition):
    """Add ``values[position]`` to the attention logits of later tokens addressing that history key.

    ``values``: a mapping position -> bias, or (span, bias) pairs; kept as sorted (position, bias) pairs.
    """

    values: Mapping[int, float] | Sequence[tuple[TokenSpan, float]] | tuple[tuple[int, float], ...]
    layers: tuple[int, ...] | None = None
    name: str = field(default="bias", kw_only=True)

    def __post_init__(self) -> None:
        items: dict[int, float] = {}
        if isinstance(self.values, Mapping):
            items = {int(p): float(b) for p, b in self.values.items()}
        else:
            for where, b in self.values:
                for p in where.positions() if isinstance(where, TokenSpan) else (where,):
                    items[int(p)] = float(b)
        for p, b in items.items():
            if not math.isfinite(b):
                raise ValueError(f"bias at position {p} is not finite ({b}); use Mask to hide keys")
        set_fields(self, values=tuple(sorted(items.items())), layers=as_layers(self.layers))

    def bias_vector(self, history_len: int, question: str = "") -> torch.Tensor:
        """Float[T] bias over history positions (built on the host; ``apply`` moves it to the model)."""
        b = torch.zeros(history_len, dtype=torch.float32, device="cpu")
        for p, value in self.values:
            b[p] = value
        return b

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        bad = [p for p, _ in self.values if not 0 <= p < history_len]
        if bad:
            raise SpanError(f"{self.name}: positions {bad[:5]} lie outside the history of {history_len} tokens")
        check_layers(self.name, self.layers, arch)

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        per_position = self.bias_vector(len(history), question).to(state.slot_of.device)
        slots = torch.zeros(state.length, dtype=torch.float32, device=state.slot_of.device)
        kept = state.slot_of >= 0
        slots[state.slot_of[kept]] = per_position[kept]
        return state.add_bias(slots, select_layers(self.layers, model.arch))


@dataclass(frozen=True)
class SessionOrderBias(SoftBias):
    """The paper's session-order rule over ordered session spans (oldest first); the bias is a function of
    the question (:meth:`bias_vector`), so ``values`` stays empty."""

    values: tuple[tuple[int, float], ...] = field(default=(), init=False)
    layers: tuple[int, ...] | None = field(default=None, kw_only=True)
    sessions: Sequence[TokenSpan] = ()
    oldest_weight: float = 0.5
    gated: bool = True
    name: str = field(default="session-bias", kw_only=True)
    question_dependent: ClassVar[bool] = True

    def __post_init__(self) -> None:
        sessions = tuple(self.sessions)
        if not 0 < self.oldest_weight <= 1:
            raise ValueError(f"oldest_weight must be in (0, 1], got {self.oldest_weight}")
        for a, b in zip(sessions, sessions[1:]):
            if a.overlaps(b) or b.start < a.start:
                raise SpanError(f"sessions must be ordered and disjoint: {a!r} then {b!r}")
        super().__post_init__()
        set_fields(self, sessions=sessions, oldest_weight=float(self.oldest_weight))

    def bias_vector(self, history_len: int, question: str = "") -> torch.Tensor:
        b = torch.zeros(history_len, dtype=torch.float32, device="cpu")
        S = len(self.sessions)
        gate = session_gate(question) if self.gated else 1
        if S < 2 or gate == 0:
            return b
        for s, span in enumerate(self.sessions):
            r = (S - 1 - s) / (S - 1)
            b[span.start : span.end] = math.log(self.oldest_weight) * gate * r
        return b

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, self.sessions, history_len)
        check_layers(self.name, self.layers, arch)
