"""DeepSeek-V2/V3 multi-head latent attention (MLA).

transformers caches MLA compressed: the K slot of a layer holds the normalized
latent ``c_KV`` (1 x ``kv_lora_rank``) from which every head's non-rotary key
*and* its value are expanded by ``kv_b_proj``; the V slot holds the decoupled
RoPE key (1 x ``qk_rope_head_dim``), rotated in the interleaved (complex) layout
and shared by all heads. So:

* masks, soft biases, rebuilds and recomputes work as on any model (they act on
  attention logits or recompute rows);
* compaction re-rotates the V slot (the rope key), interleaved, and keeps the latent;
* zeroing "keys only" or "values only" has no cache equivalent (both come from the
  latent) and is refused; zeroing both zeroes the latent and the rope key, which
  makes every expanded key and value exactly zero (``kv_b_proj`` has no bias).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import torch

from .standard import StandardAdapter
from .summary import INTERLEAVED, OWN_KV, LayerSpec

if TYPE_CHECKING:
    from kvprobe.model_like import ModelLike


class MLAAdapter(StandardAdapter):
    family = "mla"

    def layer_spec(self, config: Any, layer: int, kind: str, rope: dict[str, Any]) -> LayerSpec:
        latent, rope_dim = int(config.kv_lora_rank), int(config.qk_rope_head_dim)
        return LayerSpec(
            kind=kind, cache=OWN_KV, kv_layer=layer,
            key_shape=(1, latent), value_shape=(1, rope_dim),
            rope_tensor=1, rope_dims=rope_dim, rope_layout=INTERLEAVED, separable_kv=False, attends_cache=False,
            cache_note=f"the MLA latent c_KV (1 x {latent}) in the K slot and the decoupled RoPE key "
                       f"(1 x {rope_dim}) in the V slot",
        )

    def key_projection(self, attn: Any) -> Any:
        latent = attn._module.kv_lora_rank
        return attn.kv_a_proj_with_mqa.output[..., latent:]

    def apply_rope(self, model: "ModelLike", layer: int, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        freqs_cis = model.hf.model.rotary_emb(x, positions[None])
        module = sys.modules[type(model.hf.model.layers[layer].self_attn).__module__]
        _, k = module.apply_rotary_emb(x, x, freqs_cis)
        return k
