"""The standard adapter: decoder layers with q/k/v projections and RoPE on the cached keys.

Covers Llama, Mistral, Qwen2, Qwen3 (QK-norm), Qwen3-MoE, OLMo2 (QK-norm over
the whole projection), Gemma 2/3 (sliding and full layers with their own RoPE
bases) and the hybrids Qwen3.5 / Qwen3-Next (Gated DeltaNet layers beside full
attention), plus any other model written in the same shape. Families that
differ override one method each (``phi3``, ``mla``, ``gemma4``).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import torch

from .summary import (
    ATTENTION_LAYER_TYPES,
    FULL_ATTENTION,
    OWN_KV,
    RECURRENT,
    SLIDING_ATTENTION,
    ArchSummary,
    LayerSpec,
)

if TYPE_CHECKING:
    from kvprobe.model_like import ModelLike

#: model types whose attention normalizes keys before RoPE.
QK_NORM_TYPES = ("qwen3", "qwen3_moe", "qwen3_5_text", "qwen3_5", "qwen3_next", "gemma3_text", "gemma3",
                 "gemma4_text", "gemma4", "olmo2", "olmo3")


class StandardAdapter:
    """Reads standard configs; knows where pre-RoPE keys live and how the model rotates them."""

    family = "standard"

    # -- config -> summary ----------------------------------------------------
    def summary(self, config: Any) -> ArchSummary:
        config = text_config(config)
        n_layers = int(config.num_hidden_layers)
        kinds = self.layer_kinds(config)
        rope = rope_by_layer_type(config, kinds)
        layers = tuple(self.layer_spec(config, i, kind, rope.get(kind, {})) for i, kind in enumerate(kinds))
        return ArchSummary(
            model_type=str(config.model_type),
            family=self.family,
            num_layers=n_layers,
            num_heads=int(config.num_attention_heads),
            layers=layers,
            rope=rope,
            qk_norm=str(config.model_type) in QK_NORM_TYPES,
        )

    def layer_kinds(self, config: Any) -> tuple[str, ...]:
        """Each layer's type; configs without ``layer_types`` are all full (or all sliding) attention."""
        n_layers = int(config.num_hidden_layers)
        kinds = getattr(config, "layer_types", None)
        if kinds is None:
            window = getattr(config, "sliding_window", None)
            kinds = [SLIDING_ATTENTION if window else FULL_ATTENTION] * n_layers
        return tuple(kinds)[:n_layers]

    def head_shape(self, config: Any, layer: int) -> tuple[int, int]:
        """(KV heads, head dim) of ``layer``."""
        n_heads = int(config.num_attention_heads)
        n_kv = int(getattr(config, "num_key_value_heads", None) or n_heads)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
        return n_kv, int(head_dim)

    def layer_spec(self, config: Any, layer: int, kind: str, rope: dict[str, Any]) -> LayerSpec:
        if kind not in ATTENTION_LAYER_TYPES:
            return LayerSpec(kind=kind, cache=RECURRENT, cache_note="conv and recurrent states (no rows)")
        shape = self.head_shape(config, layer)
        window = getattr(config, "sliding_window", None) if kind == SLIDING_ATTENTION else None
        return LayerSpec(kind=kind, window=int(window) if window else None, cache=OWN_KV, kv_layer=layer,
                         key_shape=shape, value_shape=shape, rope_tensor=0,
                         rope_dims=rotary_dims(shape[1], rope))

    # -- model code the verification checks call --------------------------------
    def key_projection(self, attn: Any) -> Any:
        """The nnsight proxy of a layer's keys just before RoPE (after any QK-norm)."""
        return attn.k_norm.output if hasattr(attn, "k_norm") else attn.k_proj.output

    def prerope_keys(self, model: "ModelLike", ids: torch.Tensor) -> dict[int, torch.Tensor]:
        """Per layer with its own rows: the RoPE-carrying cached tensor *before* RoPE, [1, heads, T, dim],
        from one uncached forward over ``ids`` (Long[T])."""
        T = int(ids.shape[0])
        saved = {}
        with torch.inference_mode(), model.nn.trace(input_ids=ids[None], use_cache=False):
            for layer in model.arch.kv_layers:
                saved[layer] = self.key_projection(model.attention_envoy(layer)).save()
        out = {}
        for layer, k in saved.items():
            spec = model.arch.layers[layer]
            heads = (spec.key_shape, spec.value_shape)[spec.rope_tensor][0]
            out[layer] = as_heads(k.detach(), T, heads)
        return out

    def apply_rope(self, model: "ModelLike", layer: int, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate pre-RoPE ``x`` [1, heads, S, dim] to ``positions`` with the model's own rotary code."""
        cos, sin = self.cos_sin(model, layer, x, positions)
        module = sys.modules[type(model.hf.model.layers[layer].self_attn).__module__]
        _, k = module.apply_rotary_pos_emb(x, x, cos, sin)
        return k

    def cos_sin(self, model: "ModelLike", layer: int, x: torch.Tensor, positions: torch.Tensor):
        rotary = model.hf.model.rotary_emb
        try:
            return rotary(x, positions[None], layer_type=model.arch.layers[layer].kind)
        except TypeError:  # a rotary module with one set of frequencies
            return rotary(x, positions[None])


# ----------------------------------------------------------------------------- helpers


def text_config(config: Any) -> Any:
    """The text part of a (possibly multimodal) config."""
    return getattr(config, "text_config", None) or config


def rope_by_layer_type(config: Any, kinds: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """RoPE parameters per layer type, whether the config states one set or one per type."""
    params = getattr(config, "rope_parameters", None) or {}
    if params and not all(isinstance(v, dict) for v in params.values()):
        return {t: dict(params) for t in dict.fromkeys(kinds)}
    return {k: dict(v) for k, v in params.items()}


def rotary_dims(head_dim: int, rope: dict[str, Any]) -> int:
    """Leading dims of a key that RoPE rotates (``partial_rotary_factor``; proportional RoPE rotates
    the whole head with zero frequencies beyond its fraction)."""
    if rope.get("rope_type") == "proportional":
        return head_dim
    return int(head_dim * float(rope.get("partial_rotary_factor", 1.0)))


def as_heads(k: torch.Tensor, T: int, heads: int) -> torch.Tensor:
    """A captured key tensor ([1, T, heads*d], [1, T, heads, d] or [1, heads, T, d]) as [1, heads, T, d]."""
    if k.dim() == 3:
        k = k.reshape(1, T, heads, -1)
    if k.shape[1] == T and k.shape[2] == heads:
        k = k.transpose(1, 2)
    return k
