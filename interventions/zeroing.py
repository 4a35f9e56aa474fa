"""Zero cached K, V or both over token spans (paper partD section 7, L1328, L1239).

The stored rows of the chosen layers (default: all attention layers, all heads;
a layer that reads another layer's rows, as in Gemma 4 KV sharing, zeroes that
layer's rows) are overwritten with 0 on the condition's own cache copy; positions and length
are unchanged. A zero key gives attention logit 0, which *stays in the softmax
normalizer*: this is not a mask (a test and ``kvprobe verify`` show the
difference). On MLA caches (one latent for K and V) only ``"kv"`` is a cache
edit; ``"k"`` and ``"v"`` are refused. Zeroing applies to whatever slots the spans occupy in the incoming
state, so it composes after other operations.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from kvprobe.access import (Condition, as_layers, as_spans, check_layers, check_spans, positions_of, select_layers,
                            set_fields, slots_in_state)
from kvprobe.rows import RowState
from kvprobe.prompts import TokenSpan

from ._base import OperationError


if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model

COMPONENTS = ("k", "v", "kv")


@dataclass(frozen=True)
class Zero(Condition):
    """Overwrite K (``"k"``), V (``"v"``) or both (``"kv"``) with zeros at ``spans`` in ``layers`` and, with
    ``heads``, in those KV heads only (cache heads: with grouped-query attention each serves several query
    heads). Named ``zero-<component>`` unless ``name`` says otherwise.

    Example::

        Zero(h.span("A"), "v", layers=[3], heads=[0])   # A's values in KV head 0 of layer 3
    """

    spans: TokenSpan | tuple[TokenSpan, ...]
    component: str = "kv"
    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None
    name: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if self.component not in COMPONENTS:
            raise ValueError(f"Zero component must be one of {COMPONENTS}, got {self.component!r}")
        heads = as_layers(self.heads)
        if heads is not None and (not heads or heads[0] < 0):
            raise ValueError(f"Zero heads must be KV head indices >= 0, got {self.heads!r}")
        set_fields(self, spans=as_spans(self.spans, "Zero"), layers=as_layers(self.layers), heads=heads,
                   name=self.name or f"zero-{self.component}")

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        check_spans(self.name, self.spans, history_len)
        check_layers(self.name, self.layers, arch)
        if self.component != "kv" and (reason := arch.separate_zero_refusal()):
            raise OperationError(f"{self.name}: {reason}")
        for layer in select_layers(self.layers, arch):
            source = arch.layers[layer].kv_layer
            if self.heads is not None:  # the heads of the rows the layer reads (its own, or a shared layer's)
                rows = arch.layers[source]
                if not rows.separable_kv:
                    raise OperationError(f"{self.name}: layer {source} caches {rows.cache_note}, shared by every "
                                         "head; zeroing some heads' rows is not a cache edit there")
                kv_heads = rows.key_shape[0] if rows.key_shape else 0
                if self.heads[-1] >= kv_heads:
                    raise OperationError(f"{self.name}: KV head {self.heads[-1]} out of range; layer {source} "
                                         f"caches {kv_heads} KV heads (0..{kv_heads - 1})")
            if source != layer and self.layers is not None and source not in self.layers:
                raise OperationError(f"{self.name}: layer {layer} has no rows of its own (it attends to layer "
                                     f"{source}'s K/V); zeroing them would change layer {source} too, so "
                                     f"select layer {source} as well")

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        slots = slots_in_state(state, positions_of(self.spans, len(history), history.device))
        kv = list(state.kv)
        for layer in sorted({model.arch.layers[i].kv_layer for i in select_layers(self.layers, model.arch)}):
            k, v = kv[layer]
            on_layer = slots.to(k.device)  # the layer's own device (models spread over devices)
            heads = [slice(None)] if self.heads is None else list(self.heads)
            if "k" in self.component:
                k = k.clone()
                for head in heads:
                    k[:, head, on_layer] = 0
            if "v" in self.component:
                v = v.clone()
                for head in heads:
                    v[:, head, on_layer] = 0
            kv[layer] = (k, v)
        return replace(state, kv=kv)
