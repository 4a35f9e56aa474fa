"""kvprobe notices when another library changed its model under it (issue 48 item 3).

A :class:`kvprobe.model.Model` records, when it is made, what its forwards rely on
(:class:`ModelExpectation`): the transformers attention implementation (kvprobe's ``kvprobe`` or
``kvprobe_grouped``, or ``eager``/``sdpa`` when asked for by ``--attn``/``load_model(attn_implementation=)``),
each attention layer's module and the torch hooks already on it. Before every forward
(:func:`kvprobe.forward.traced_forward`, ``Model.trace``) :func:`check_model` compares the model with that
record and refuses (:class:`ModelChangedError`) with a message naming what changed and how to undo it.

Other libraries do change a model in place: TransformerLens's
``TransformerBridge.boot_transformers(hf_model=m.hf)`` switches it to eager attention (and its bridge
components wrap the modules); a forward hook left on an attention module changes what it returns. Without
the check the next traced forward failed with an unrelated error (or computed something else).

Deliberate switches go through :func:`switch_attention` (``Model.set_attn_implementation``, and the
references' ``kvprobe.reference.attention_implementation``), which records the new expectation. The check
runs outside kvprobe's own contexts only: kvprobe's edit hooks (``kvprobe.forward.hooked_edits``) are put
on after it and removed before the next forward; nnsight wraps ``forward`` and registers no torch hooks;
transformers' own output-capturing hooks (:data:`OWN_HOOK_PACKAGES`) are not changes.

Example:
    >>> m.hf.set_attn_implementation("eager")  # behind kvprobe's back  # doctest: +SKIP
    >>> m.score(h, q, candidates)  # doctest: +SKIP
    ModelChangedError: the attention implementation of tiny-llama was changed from 'kvprobe' to 'eager' ...
    >>> m.set_attn_implementation("eager")  # deliberately: forwards run under eager from here  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .model_like import ModelLike


class ModelChangedError(RuntimeError):
    """The model was changed outside kvprobe since the :class:`kvprobe.model.Model` was made (its attention
    implementation switched, an attention module replaced, or a torch hook registered on one)."""


def attention_module(hf: Any, layer: int) -> torch.nn.Module | None:
    """Decoder layer ``layer``'s attention module (``hf.model.layers[layer].self_attn``), or None."""
    layers = getattr(getattr(hf, "model", None), "layers", None)
    if layers is None or layer >= len(layers):
        return None
    return getattr(layers[layer], "self_attn", None)


#: Packages whose torch hooks on an attention module are not a change: transformers' own output-capturing
#: hooks (``transformers.utils.output_capturing``, put on lazily by the first forward that asks for attentions
#: or hidden states, inert otherwise) and kvprobe's (``kvprobe.forward.hooked_edits``, inside ``m.trace``).
OWN_HOOK_PACKAGES = ("transformers", "kvprobe")


def _hook_ids(module: torch.nn.Module) -> frozenset[int]:
    return frozenset(module._forward_hooks) | frozenset(module._forward_pre_hooks)


def _foreign_hooks(module: torch.nn.Module, known: frozenset[int]) -> list[Any]:
    """The forward hooks and pre-hooks on ``module`` that were not there when the Model was made and do not come
    from :data:`OWN_HOOK_PACKAGES`."""
    found = []
    for hooks in (module._forward_pre_hooks, module._forward_hooks):
        for hook_id, hook in hooks.items():
            package = (getattr(hook, "__module__", None) or type(hook).__module__ or "").split(".")[0]
            if hook_id not in known and package not in OWN_HOOK_PACKAGES:
                found.append(hook)
    return found


@dataclass
class ModelExpectation:
    """What a Model's forwards rely on, recorded when it was made (:meth:`of`).

    Attributes:
        attention: the transformers attention implementation (``config._attn_implementation``).
        modules: attention layer -> (its attention module, the ids of the forward hooks and pre-hooks already
            on it then: those are the user's or another kvprobe Model's, not a later change).
    """

    attention: str | None
    modules: dict[int, tuple[torch.nn.Module, frozenset[int]]]

    @classmethod
    def of(cls, hf: Any, attention_layers: tuple[int, ...] | list[int]) -> "ModelExpectation":
        """The expectation of ``hf`` as it is now."""
        modules = {}
        for layer in attention_layers:
            module = attention_module(hf, layer)
            if module is not None:
                modules[layer] = (module, _hook_ids(module))
        return cls(getattr(hf.config, "_attn_implementation", None), modules)

    def changes(self, hf: Any, name: str) -> list[str]:
        """What differs in ``hf`` from this expectation, each as a sentence with its fix (empty: unchanged)."""
        found = []
        now = getattr(hf.config, "_attn_implementation", None)
        if now != self.attention:
            found.append(f"the attention implementation of {name} was changed from {self.attention!r} to {now!r} "
                         "outside kvprobe (TransformerLens's TransformerBridge does this); reload the model or call "
                         f"m.set_attn_implementation({self.attention!r}) (or m.set_attn_implementation({now!r}) "
                         "to run kvprobe under it on purpose)")
        replaced: dict[str, list[int]] = {}  # what replaced them -> layers
        hooked: dict[str, list[int]] = {}  # the hooks' names -> layers
        for layer, (module, hooks) in self.modules.items():
            current = attention_module(hf, layer)
            if current is not module:
                replaced.setdefault(type(current).__name__, []).append(layer)
            elif (module._forward_hooks or module._forward_pre_hooks) and not _hook_ids(module) <= hooks:
                extra = _foreign_hooks(module, hooks)
                if extra:
                    names = ", ".join(getattr(h, "__qualname__", type(h).__name__) for h in extra)
                    hooked.setdefault(names, []).append(layer)
        if replaced:
            found.append(f"the attention modules of {name}'s layers {_by_layer(replaced)} were replaced outside "
                         "kvprobe (a wrapper such as TransformerLens's bridge components); reload the model")
        if hooked:
            found.append(f"torch forward hooks were registered outside kvprobe on the attention modules of {name}'s "
                         f"layers {_by_layer(hooked)}; remove them (handle.remove()) or reload the model, and read "
                         "internals through m.trace or m.run_with_cache instead")
        return found


def _by_layer(found: dict[str, list[int]]) -> str:
    """``{"Wrapper": [0, 1]}`` -> ``0, 1 (Wrapper)``: the layers of each finding, one group per finding."""
    return "; ".join(f"{', '.join(map(str, layers))} ({what})" for what, layers in found.items())


def check_model(model: "ModelLike") -> None:
    """Refuse (:class:`ModelChangedError`) a forward of a model changed outside kvprobe since it was made.

    Objects without an ``expected`` record (test doubles of :class:`~kvprobe.model_like.ModelLike`) pass.
    """
    expected: ModelExpectation | None = getattr(model, "expected", None)
    if expected is None:
        return
    changes = expected.changes(model.hf, model.name or type(model.hf).__name__)
    if changes:
        raise ModelChangedError("; ".join(changes))


def switch_attention(model: "ModelLike", implementation: str) -> None:
    """Switch ``model.hf`` to attention ``implementation`` on purpose and record it as what is expected."""
    model.hf.set_attn_implementation(implementation)
    expected: ModelExpectation | None = getattr(model, "expected", None)
    if expected is not None:
        expected.attention = getattr(model.hf.config, "_attn_implementation", implementation)
