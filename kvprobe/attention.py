"""Grouped-query eager attention: the eager computation without copying K/V per query head.

transformers' eager attention expands every cached key and value to all query
heads (``repeat_kv``) on every forward. With a long cache and short queries
(decoding, question suffixes) that copy costs more than the attention itself:
on SmolLM2-135M (9 query heads, 3 KV heads) it was half of a decode step's
time. This module computes the same thing by grouping the query heads that
share a KV head, so keys and values are read in place:

    scores[b, kv, g, q, s] = scaling * <query[b, kv*G + g, q], key[b, kv, s]>

(the head order of ``repeat_kv``), then the additive mask, a float32 softmax and
the weighted sum of values, exactly as eager does. Logits agree with eager to
float32 rounding (tests/test_fast_paths.py checks every tiny family and the
embedded model); the returned attention probabilities have eager's shape
[B, H, Q, S], so attention capture works unchanged.

Registered with transformers under :data:`GROUPED_EAGER` on import; load a model
with ``attn_implementation="kvprobe_grouped"`` (kvprobe's default) or switch with
``model.hf.set_attn_implementation(...)``. References in ``kvprobe.reference``
always run transformers' own eager attention, so every check compares the two.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import eager_mask

from . import selection

#: Name under which the grouped attention is registered with transformers.
GROUPED_EAGER = "kvprobe_grouped"


def grouped_eager_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention over query [B, H, Q, D], key [B, KVH, S, D], value [B, KVH, S, Dv].

    Returns (output [B, Q, H, Dv], probabilities [B, H, Q, S]) like transformers' eager.
    ``softcap`` (Gemma 2 style logit capping) is applied as eager does; attention
    sinks (``s_aux``) are not supported and raise.
    """
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError(f"{GROUPED_EAGER} does not implement attention sinks (s_aux); "
                                  "load the model with attn_implementation='eager'")
    if dropout and module.training:
        raise NotImplementedError(f"{GROUPED_EAGER} is for inference; training dropout is not implemented")
    B, H, Q, D = query.shape
    KVH, S = key.shape[1], key.shape[2]
    G = H // KVH
    if scaling is None:
        scaling = module.head_dim**-0.5
    # Query heads kv*G .. kv*G+G-1 read KV head kv; fold them into the query axis.
    grouped = query.reshape(B, KVH, G * Q, D)
    scores = (torch.matmul(grouped, key.transpose(2, 3)) * scaling).view(B, KVH, G, Q, S)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        mask = attention_mask[..., :S]
        # [B, 1, Q, S] broadcasts over heads; a per-head mask [B, H, Q, S] is grouped like the queries.
        scores = scores + (mask[:, :, None] if mask.shape[1] == 1 else mask.reshape(B, KVH, G, Q, S))
    selector = selection.current()
    if selector is not None:  # query-aware key selection (kvprobe.selection): Quest, RefreshKV...
        scores = selector.adjust(module.layer_idx, query, key, scores)
    probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs.view(B, KVH, G * Q, S), value).view(B, H, Q, value.shape[-1])
    return out.transpose(1, 2).contiguous(), probs.view(B, H, Q, S)


AttentionInterface.register(GROUPED_EAGER, grouped_eager_attention)
AttentionMaskInterface.register(GROUPED_EAGER, eager_mask)
