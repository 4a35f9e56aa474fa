"""Component interventions: head ablation and activation patching, as conditions.

TransformerLens's head ablation and activation patching for kvprobe's batches. Each is a
``kvprobe.Condition``: it batches with masks and cache operations over one shared history and
composes with them (``kvprobe.Compose(Mask(A), HeadAblation(3, [0]))``). Neither touches the
cache of the history: they act on the tokens a row runs after it.

* :class:`HeadAblation`: in one layer, the chosen attention heads' outputs (the input of the
  output projection, per head) are replaced by zeros or by the head's mean output over the
  history's tokens, for every question and answer token of the row.
* :class:`Patch`: the residual stream after one layer, at chosen question positions, is copied
  from the row of another condition of the same batch (the *source*), as activation patching
  does between a clean and a corrupted run. Layers up to the patched one are computed per row,
  so this equals running the source, saving its activations and patching them in by hand
  (``tests/test_components.py``).

Example::

    m.score(h, q, cands, access={"full": Full(), "masked": Mask(h.span("A")),
                                 "restored": Compose(Mask(h.span("A")), Patch("full", layer=12)),
                                 "no-head": HeadAblation(10, [3])})
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

import torch

from kvprobe.access import Condition, as_layers, set_fields
from kvprobe.component_edits import HeadEdit, ResidualPatch
from kvprobe.rows import RowState

from ._base import OperationError

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model

#: What an ablated head's output becomes.
VALUES = ("zero", "mean")


def layer_index(name: str, layer: int, arch: "ArchSummary") -> int:
    """``layer`` as a decoder layer index (negative counts from the last, as everywhere in kvprobe); an
    :class:`OperationError` naming ``name`` when it is out of range."""
    n = arch.num_layers
    if not -n <= layer < n:
        raise OperationError(f"{name}: layer {layer} out of range (0..{n - 1}, or -{n}..-1 from the last)")
    return layer % n


def _check_attention_layer(name: str, layer: int, arch: "ArchSummary") -> None:
    if -arch.num_layers <= layer < 0:
        layer %= arch.num_layers
    if layer not in arch.attention_layers:
        raise OperationError(f"{name}: layer {layer} is not an attention layer of this model (attention layers: "
                             f"{list(arch.attention_layers)})")


def output_projection(model: "Model", layer: int) -> torch.nn.Module:
    """The attention output projection of ``layer`` (its input holds the heads' outputs side by side)."""
    attention = model.hf.model.layers[layer].self_attn
    projection = getattr(attention, "o_proj", None)
    if not isinstance(projection, torch.nn.Linear):
        raise OperationError(f"{model.name!r} layer {layer}: no o_proj output projection to ablate heads at "
                             f"({type(attention).__name__})")
    return projection


def head_means(model: "Model", history: "History", layer: int, heads: tuple[int, ...]) -> torch.Tensor:
    """Float[len(heads), head_dim]: each head's mean output over the history's tokens (one plain forward of
    the history with a hook on the output projection's input)."""
    projection = output_projection(model, layer)
    seen = {}

    def keep(_module, args):
        seen["x"] = args[0].detach()

    hook = projection.register_forward_pre_hook(keep)
    try:
        with torch.inference_mode():
            model.hf(input_ids=history.input_ids[None].to(model.device), use_cache=False)
    finally:
        hook.remove()
    per_head = seen["x"][0].mean(dim=0).view(model.arch.num_heads, -1)  # [heads, head_dim]
    return per_head[list(heads)].clone()


@dataclass(frozen=True)
class HeadAblation(Condition):
    """Replace attention heads' outputs in one layer for every token after the history.

    Args:
        layer: an attention layer (negative counts from the last).
        heads: query-head indices.
        value: ``"zero"`` (zero ablation) or ``"mean"`` (each head's mean output over the history's tokens).
    """

    layer: int
    heads: tuple[int, ...]
    value: str = "zero"
    name: str = field(default="head-ablation", kw_only=True)

    def __post_init__(self) -> None:
        if self.value not in VALUES:
            raise ValueError(f"HeadAblation value must be one of {VALUES}, got {self.value!r}")
        heads = as_layers(self.heads)
        if not heads or heads[0] < 0:
            raise ValueError(f"HeadAblation heads must be query-head indices >= 0, got {self.heads!r}")
        set_fields(self, heads=heads)

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        _check_attention_layer(self.name, self.layer, arch)
        if self.heads[-1] >= arch.num_heads:
            raise OperationError(f"{self.name}: head {self.heads[-1]} out of range; layer {self.layer} has "
                                 f"{arch.num_heads} query heads (0..{arch.num_heads - 1})")

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        layer = layer_index(self.name, self.layer, model.arch)
        output_projection(model, layer)
        if layer in state.head_edits:
            raise OperationError(f"{self.name}: layer {layer} already has ablated heads in this condition; "
                                 "ablate them with one HeadAblation")
        values = None if self.value == "zero" else head_means(model, history, layer, self.heads)
        return replace(state, head_edits={**state.head_edits, layer: HeadEdit(self.heads, values)})


@dataclass(frozen=True)
class Patch(Condition):
    """Copy the residual stream after ``layer`` from the row of condition ``source`` (same batch, same question).

    Args:
        source: the name of another condition of the same call (e.g. ``"full"``).
        layer: the decoder layer whose output is patched (negative counts from the last).
        positions: indices into the question's tokens (negative from its end), or None for all of them.
    """

    source: str
    layer: int
    positions: tuple[int, ...] | None = None
    name: str = field(default="patch", kw_only=True)

    def __post_init__(self) -> None:
        if not self.source:
            raise ValueError("Patch needs the name of its source condition")
        if self.positions is not None:
            set_fields(self, positions=tuple(int(p) for p in self.positions))

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        layer_index(self.name, self.layer, arch)

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        layer = layer_index(self.name, self.layer, model.arch)
        if layer in state.patches:
            raise OperationError(f"{self.name}: layer {layer} is already patched in this condition")
        return replace(state, patches={**state.patches, layer: ResidualPatch(self.source, self.positions)})
