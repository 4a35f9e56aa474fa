"""Phi-3: one fused ``qkv_proj``; the keys before RoPE are its middle slice."""

from __future__ import annotations

from typing import Any

from .standard import StandardAdapter


class Phi3Adapter(StandardAdapter):
    family = "fused-qkv"

    def key_projection(self, attn: Any) -> Any:
        module = attn._module
        q = module.config.num_attention_heads * module.head_dim
        k = module.num_key_value_heads * module.head_dim
        return attn.qkv_proj.output[..., q : q + k]
