"""Gemma 4: per-layer head sizes, and KV sharing between layers.

* Global (full-attention) layers may have their own head size and KV-head count
  (``per_layer_config``), and with ``attention_k_eq_v`` their values come from the
  key projection (before the key's norm and RoPE), so K and V stay separate tensors.
* With ``num_kv_shared_layers`` the last layers keep no cache: each attends to the
  rows of the last earlier layer of its type (``kv_sharing_modes``: ``store`` /
  ``reuse``). Cache edits on the storing layer reach them; masks apply per layer.
* RoPE is applied by a one-tensor ``apply_rotary_pos_emb(x, cos, sin)``; global
  layers use "proportional" RoPE (zero frequencies beyond ``partial_rotary_factor``).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import torch

from .standard import StandardAdapter
from .summary import SHARED_KV, LayerSpec

if TYPE_CHECKING:
    from kvprobe.model_like import ModelLike


class Gemma4Adapter(StandardAdapter):
    family = "gemma4"

    def head_shape(self, config: Any, layer: int) -> tuple[int, int]:
        view = config.per_layer_config[layer]
        return int(view.num_key_value_heads), int(view.head_dim)

    def layer_spec(self, config: Any, layer: int, kind: str, rope: dict[str, Any]) -> LayerSpec:
        spec = super().layer_spec(config, layer, kind, rope)
        modes = list(config.kv_sharing_modes)
        if modes[layer] != "reuse":
            return spec
        first_shared = modes.index("reuse")
        source = max(i for i in range(first_shared) if config.layer_types[i] == kind)
        return replace(spec, cache=SHARED_KV, kv_layer=source, key_shape=None, value_shape=None,
                       cache_note=f"no rows of its own: attends to layer {source}'s K/V")

    def apply_rope(self, model: "ModelLike", layer: int, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self.cos_sin(model, layer, x, positions)
        module = sys.modules[type(model.hf.model.layers[layer].self_attn).__module__]
        return module.apply_rotary_pos_emb(x, cos, sin, unsqueeze_dim=1)
