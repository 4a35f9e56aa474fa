"""Zero cached K, V or both over token spans (paper partD section 7, L1328, L1239).

The stored rows of the chosen layers (default: all attention layers, all heads)
are overwritten with 0 on the condition's own cache copy; positions and length
are unchanged. A zero key gives attention logit 0, which *stays in the softmax
normalizer*: this is not a mask (a test and ``kvprobe verify`` show the
difference). Zeroing applies to whatever slots the spans occupy in the incoming
state, so it composes after other operations.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Iterable, Sequence

from kvprobe.access import Access, as_spans, check_layers, check_spans, positions_of, select_layers, slots_in_state
from kvprobe.engine import RowState
from kvprobe.prompts import TokenSpan


if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model

COMPONENTS = ("k", "v", "kv")


@dataclass(frozen=True, init=False)
class Zero(Access):
    """Overwrite K (``"k"``), V (``"v"``) or both (``"kv"``) with zeros at ``spans`` in ``layers``."""

    spans: tuple[TokenSpan, ...] = ()
    component: str = "kv"
    layers: tuple[int, ...] | None = None

    def __init__(self, spans: TokenSpan | Iterable[TokenSpan], component: str = "kv",
                 layers: Sequence[int] | None = None, name: str | None = None):
        if component not in COMPONENTS:
            raise ValueError(f"Zero component must be one of {COMPONENTS}, got {component!r}")
        object.__setattr__(self, "spans", as_spans(spans, "Zero"))
        object.__setattr__(self, "component", component)
        object.__setattr__(self, "layers", None if layers is None else tuple(sorted(set(layers))))
        object.__setattr__(self, "name", name or f"zero-{component}")

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, self.spans, history_len)
        check_layers(self.name, self.layers, arch)

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        slots = slots_in_state(state, positions_of(self.spans, len(history)))
        kv = list(state.kv)
        for layer in select_layers(self.layers, model.arch):
            k, v = kv[layer]
            if "k" in self.component:
                k = k.clone()
                k[:, :, slots] = 0
            if "v" in self.component:
                v = v.clone()
                v[:, :, slots] = 0
            kv[layer] = (k, v)
        return replace(state, kv=kv)
