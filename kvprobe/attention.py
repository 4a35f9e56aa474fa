"""kvprobe's attention: SDPA where it is exact and enough, eager where logits or probabilities are needed.

transformers calls the registered attention function of every attention layer
with the layer's query [B, H, Q, D], the keys and values the cache returned
[B, KVH, S, D] / [B, KVH, S, Dv] and the layer's additive 4-D mask [B, 1, Q, S]
(kvprobe always passes explicit masks, edited per layer by the access
condition). kvprobe registers two implementations:

``kvprobe`` (:data:`KVPROBE_SDPA`, the default) picks per call:

* **shared history** (:class:`kvprobe.slots.SharedSlotLayer`): the rows of a
  batch read one shared copy of their history's K/V plus their own new slots.
  :func:`shared_attention` computes the eager formula in two parts, folding
  every row's queries into one matrix product per shared history, so the
  history is read once per forward instead of once per row;
* **eager** (:func:`grouped_eager_attention`) when the layer's attention
  probabilities were requested (:func:`kvprobe.forward_context.probabilities_for`), when a query-aware
  selector must edit the logits (``kvprobe.selection``), or when the layer caps
  its logits (``softcap``, Gemma 2), which SDPA cannot express;
* otherwise ``torch.nn.functional.scaled_dot_product_attention`` with the
  additive mask and ``enable_gqa`` (keys and values are not copied per query
  head). On CPU torch runs its flash kernel; on CUDA an arbitrary additive
  mask selects the memory-efficient kernel (flash kernels take no mask).

``kvprobe_grouped`` (:data:`GROUPED_EAGER`) never uses SDPA: eager grouped
attention everywhere (and the shared-history path), for comparisons.

Every path computes scaled dot products, the additive mask, a float32 softmax
and the weighted sum of values; they agree to float32 rounding
(tests/test_fast_paths.py and ``kvprobe verify``'s ``sdpa_equals_eager``).
References in ``kvprobe.reference`` always run transformers' own eager
attention, so every check compares two implementations. The eager grouping:

    scores[b, kv, g, q, s] = scaling * <query[b, kv*G + g, q], key[b, kv, s]>

(the head order of transformers' ``repeat_kv``), so keys and values are read in
place, never expanded to every query head.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import eager_mask

from .forward_context import current_context, current_selector
from .masks import additive, visibility
from .slots import PackedSlotLayer, SharedSlotLayer

#: kvprobe's default attention: SDPA, eager where needed, shared-history batches.
KVPROBE_SDPA = "kvprobe"
#: kvprobe's eager-only attention (grouped query heads; shared-history batches too).
GROUPED_EAGER = "kvprobe_grouped"
#: The implementations that run kvprobe's attention function (selectors, shared histories).
KVPROBE_IMPLEMENTATIONS = (KVPROBE_SDPA, GROUPED_EAGER)

#: Largest score block (elements) the shared-history path materializes at once;
#: longer query blocks are split (a 15-row question block over 32k tokens would
#: otherwise hold gigabytes of scores).
SHARED_SCORE_BLOCK = 1 << 26

#: Devices whose SDPA kernels take an explicit mask together with grouped query heads (``enable_gqa``);
#: elsewhere bf16/fp16 keys and values are expanded per query head first (CUDA would run its math kernel).
MASKED_GQA_DEVICES = ("cpu",)


def _cache_layer(module: torch.nn.Module, key: torch.Tensor):
    """The kvprobe cache layer this call reads when it is one kvprobe's attention must read itself (a
    :class:`kvprobe.slots.SharedSlotLayer` or :class:`kvprobe.slots.PackedSlotLayer`), checked to be the
    one that returned ``key``; otherwise ``None``."""
    ctx = current_context()
    layer_idx = getattr(module, "layer_idx", None)
    if ctx.cache is None or layer_idx is None or layer_idx >= len(ctx.kv_source):
        return None
    source = ctx.kv_source[layer_idx]
    layer = None if source is None else ctx.cache.layers[source]
    if not isinstance(layer, (SharedSlotLayer, PackedSlotLayer)):
        return None
    if key is not layer.keys:
        raise RuntimeError(f"layer {layer_idx}: the attention received keys other than its shared-history cache "
                           "returned (the model transforms cached keys before attention; this family cannot "
                           "share histories, see ArchSummary.shared_history_refusal)")
    return layer


def packed_attention(query: torch.Tensor, layer, mask: torch.Tensor, scaling: float
                     ) -> tuple[torch.Tensor, None]:
    """One decode step's attention over a :class:`kvprobe.slots.PackedSlotLayer`, as one SDPA call.

    The queries of all B rows (one token each, [B, H, 1, D]) are folded into one batch row,
    kv-head major like the eager grouping: [1, KVH, B x G, D], query (b, g) of KV head kv being
    query head kv*G + g of row b. They read the packed keys [1, KVH, S, D] (the shared history
    once, then every row's own slots) under ``mask`` [1, 1, B x G, S], which keeps each query to
    the history its row may read and its row's own slots. Returns ([B, 1, H, Dv], None).
    """
    B, H, Q, D = query.shape
    KVH, Dv = layer.keys.shape[1], layer.values.shape[-1]
    G = H // KVH
    folded = query.reshape(B, KVH, G, D).transpose(0, 1).reshape(1, KVH, B * G, D)
    out = torch.nn.functional.scaled_dot_product_attention(folded, layer.keys, layer.values, attn_mask=mask,
                                                           scale=scaling)
    return out.view(KVH, B, G, Dv).transpose(0, 1).reshape(B, Q, H, Dv), None


def _check_supported(name: str, module: torch.nn.Module, dropout: float, kwargs: dict) -> None:
    if kwargs.get("s_aux") is not None:
        raise NotImplementedError(f"{name} does not implement attention sinks (s_aux); "
                                  "load the model with attn_implementation='eager'")
    if dropout and module.training:
        raise NotImplementedError(f"{name} is for inference; training dropout is not implemented")


def grouped_eager_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention over query [B, H, Q, D], key [B, KVH, S, D], value [B, KVH, S, Dv].

    Returns (output [B, Q, H, Dv], probabilities [B, H, Q, S]) like transformers' eager.
    ``softcap`` (Gemma 2 style logit capping) is applied as eager does; attention
    sinks (``s_aux``) are not supported and raise. A shared-history cache layer
    (see the module docstring) is read through :func:`shared_attention`.
    """
    return _attend(GROUPED_EAGER, module, query, key, value, attention_mask, scaling, dropout, softcap, kwargs)


def kvprobe_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """kvprobe's default attention: shared-history, eager or SDPA (see the module docstring).

    Returns (output [B, Q, H, Dv], probabilities [B, H, Q, S] or ``None`` when SDPA ran).

    The parameters follow transformers' attention interface (``sdpa_attention_forward``: ``dropout`` before
    ``scaling``), so a wrapper registered over every attention function that passes ``dropout`` by position, as
    kvpress does when it is imported, calls it correctly.
    """
    return _attend(KVPROBE_SDPA, module, query, key, value, attention_mask, scaling, dropout, softcap, kwargs)


def _attend(impl: str, module, query, key, value, attention_mask, scaling, dropout, softcap, kwargs):
    """The one dispatch of both implementations: shared history, eager, or (``kvprobe`` only) SDPA."""
    _check_supported(impl, module, dropout, kwargs)
    if scaling is None:
        scaling = module.head_dim**-0.5
    causal = current_context().causal
    if causal:
        attention_mask = None
    # the eager implementation always returns probabilities, as transformers' eager does
    wanted = impl == GROUPED_EAGER or getattr(module, "layer_idx", None) in current_context().probabilities

    cached = _cache_layer(module, key)
    if isinstance(cached, PackedSlotLayer):  # a decode step in fixed shapes (kvprobe.static_decode)
        if wanted or softcap is not None or current_selector() is not None:
            raise RuntimeError("a packed decode step (kvprobe.static_decode) computes no probabilities, "
                               "logit caps or key selections")
        return packed_attention(query, cached, attention_mask, scaling)
    if cached is not None:  # a shared-history layer
        if current_selector() is not None:
            raise RuntimeError("query-aware selection runs on per-row caches (fork_rows(share=False))")
        return shared_attention(module, query, cached, attention_mask, scaling, softcap, want_probabilities=wanted)
    # torch's CPU SDPA kernel loses precision in float16 (0.4 nats on tiny-deepseek-v2's logits where the eager
    # formula agrees with transformers' to the bit), so float16 on the CPU takes the eager path.
    cpu_half = query.dtype == torch.float16 and query.device.type == "cpu"
    if wanted or softcap is not None or current_selector() is not None or cpu_half:
        if causal:
            attention_mask = causal_mask(query.shape[2], query.dtype, query.device)
        return _eager(module, query, key, value, attention_mask, scaling, softcap)
    S = key.shape[2]
    mask = None if attention_mask is None else attention_mask[..., :S]
    grouped = query.shape[1] != key.shape[1]
    low_precision = query.dtype != torch.float32
    if grouped and mask is not None and query.device.type not in MASKED_GQA_DEVICES and low_precision:
        # CUDA's memory-efficient kernel takes a mask but not grouped heads (torch would fall back to the
        # math kernel, which materializes every score): expand K/V per query head, as transformers' SDPA does.
        # float32 keeps the math kernel, which computes the eager formula: the memory-efficient kernel's
        # online softmax differs from it by ~1e-4 on the tiny families' logits (H200), above verify's tolerance.
        G = query.shape[1] // key.shape[1]
        key, value = key.repeat_interleave(G, dim=1), value.repeat_interleave(G, dim=1)
        grouped = False
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, is_causal=causal, scale=scaling, enable_gqa=grouped)
    return out.transpose(1, 2).contiguous(), None


def causal_mask(Q: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The additive causal mask [1, 1, Q, Q] of a block of Q queries at positions 0..Q-1 over themselves
    (``kvprobe.masks``, the masks every other forward is given)."""
    pos = torch.arange(Q, device=device)[None]
    return additive(visibility(pos, pos, torch.ones(1, Q, dtype=torch.bool, device=device)), dtype)


def _eager(module, query, key, value, attention_mask, scaling, softcap) -> tuple[torch.Tensor, torch.Tensor]:
    """The grouped eager computation on per-row K/V (a selector, if active, edits the logits)."""
    B, H, Q, D = query.shape
    KVH, S = key.shape[1], key.shape[2]
    G = H // KVH
    # Query heads kv*G .. kv*G+G-1 read KV head kv; fold them into the query axis.
    grouped = query.reshape(B, KVH, G * Q, D)
    scores = (torch.matmul(grouped, key.transpose(2, 3)) * scaling).view(B, KVH, G, Q, S)
    if softcap is not None:
        scores = torch.tanh(scores / softcap) * softcap
    if attention_mask is not None:
        mask = attention_mask[..., :S]
        # [B, 1, Q, S] broadcasts over heads; a per-head mask [B, H, Q, S] is grouped like the queries.
        scores = scores + (mask[:, :, None] if mask.shape[1] == 1 else mask.reshape(B, KVH, G, Q, S))
    selector = current_selector()
    if selector is not None:  # query-aware key selection (kvprobe.selection): Quest, RefreshKV...
        scores = selector.adjust(module.layer_idx, query, key, scores)
    probs = torch.nn.functional.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs.view(B, KVH, G * Q, S), value).view(B, H, Q, value.shape[-1])
    return out.transpose(1, 2).contiguous(), probs.view(B, H, Q, S)


def shared_attention(
    module: torch.nn.Module,
    query: torch.Tensor,
    layer,
    attention_mask: torch.Tensor | None,
    scaling: float,
    softcap: float | None = None,
    want_probabilities: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Eager attention of a batch whose rows read shared histories plus their own new slots.

    ``layer`` (a :class:`kvprobe.slots.SharedSlotLayer`) holds the distinct
    histories ("bases", [1, KVH, T_j, D] each), which base every row reads, and
    every row's own new slots ([B, KVH, F, D], what it returned to the model).
    In the mask's coordinates the first ``layer.base_length`` slots are the base
    (a row whose base is shorter has invalid slots there) and the rest are the
    row's own. For each base, the queries of all rows reading it are folded
    into one [KVH, rows x G x Q, D] product with the base keys, so the base is
    read once; the softmax runs over both parts in float32 (max-subtracted, as
    ``torch.softmax``), and the output adds the two weighted sums of values.
    Long query blocks are split so the scores stay under :data:`SHARED_SCORE_BLOCK` elements.
    """
    B, H, Q, _ = query.shape
    bases = sum(k.shape[2] for k, _, _ in layer.groups)
    rows_per_q = max(1, SHARED_SCORE_BLOCK // max(1, B * H * (max(bases, 1) + layer.keys.shape[2])))
    if Q <= rows_per_q:
        return _shared_block(query, layer, attention_mask, scaling, softcap, want_probabilities)
    outs, probs = [], []
    for q0 in range(0, Q, rows_per_q):
        mask = None if attention_mask is None else attention_mask[:, :, q0 : q0 + rows_per_q]
        o, p = _shared_block(query[:, :, q0 : q0 + rows_per_q], layer, mask, scaling, softcap, want_probabilities)
        outs.append(o)
        probs.append(p)
    return torch.cat(outs, dim=1), torch.cat(probs, dim=2) if want_probabilities else None


def _kv_major(mask: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """A mask [n, 1 or H, Q, S] laid out to broadcast over kv-head-major scores [KVH, n, G, Q, S]."""
    n, heads, Q, S = mask.shape
    if heads == 1:
        return mask.transpose(0, 1)[:, :, None]  # [1, n, 1, Q, S]
    return mask.view(n, kv_heads, heads // kv_heads, Q, S).transpose(0, 1)


def _one_base_block(query, layer, attention_mask, scaling):
    """:func:`_shared_block` when every row reads the one base and no probabilities or softcap are needed.

    The base scores (queries of all rows folded into one product) and the rows' own scores are joined
    along the key axis in the batch's slot coordinates, so the scaling, the mask and one float32
    ``torch.softmax`` run once over both, as eager attention runs them over a row's whole cache:
    about half the kernels of the two-part softmax, which matters when a decode step is launch-bound.
    """
    B, H, Q, D = query.shape
    base_k, base_v, _ = layer.groups[0]
    own_k, own_v = layer.keys, layer.values  # [B, KVH, F, D] / [B, KVH, F, Dv]
    KVH, F, Dv, T = own_k.shape[1], own_k.shape[2], own_v.shape[-1], base_k.shape[2]
    G = H // KVH
    grouped = query.reshape(B, KVH, G * Q, D)
    own = torch.matmul(grouped, own_k.transpose(2, 3)).view(B, KVH, G, Q, F).transpose(0, 1)
    folded = grouped.transpose(0, 1).reshape(KVH, B * G * Q, D)
    base = torch.matmul(folded, base_k[0].transpose(1, 2)).view(KVH, B, G, Q, T)
    scores = torch.cat([base, own], dim=-1).mul_(scaling)  # [KVH, B, G, Q, T + F]
    if attention_mask is not None:
        scores.add_(_kv_major(attention_mask[..., : T + F], KVH))
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    out = torch.matmul(probs[..., T:].transpose(0, 1).reshape(B, KVH, G * Q, F), own_v)  # [B, KVH, G*Q, Dv]
    weighted = torch.matmul(probs[..., :T].reshape(KVH, B * G * Q, T), base_v[0])
    out += weighted.view(KVH, B, G * Q, Dv).transpose(0, 1)
    return out.view(B, H, Q, Dv).transpose(1, 2).contiguous(), None


def _shared_block(query, layer, attention_mask, scaling, softcap, want_probabilities):
    """:func:`shared_attention` on one block of query rows."""
    if (not want_probabilities and softcap is None and len(layer.groups) == 1 and layer.groups[0][2] is None
            and layer.groups[0][0].shape[2] == layer.base_length):
        return _one_base_block(query, layer, attention_mask, scaling)
    B, H, Q, D = query.shape
    own_k, own_v = layer.keys, layer.values  # [B, KVH, F, D] / [B, KVH, F, Dv]
    KVH, F, Dv = own_k.shape[1], own_k.shape[2], own_v.shape[-1]
    G = H // KVH
    T0 = layer.base_length
    grouped = query.reshape(B, KVH, G * Q, D)

    def logits(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Scaled, capped and masked kv-head-major scores [KVH, n, G, Q, S] (as eager, in place)."""
        scores = scores.mul_(scaling)
        if softcap is not None:
            scores = torch.tanh(scores / softcap) * softcap
        return scores if mask is None else scores.add_(_kv_major(mask, KVH))

    def columns(lo: int, hi: int, rows: torch.Tensor | None) -> torch.Tensor | None:
        if attention_mask is None:
            return None
        mask = attention_mask[..., lo:hi]
        return mask if rows is None else mask[rows]

    # The rows' own slots: an ordinary batched product, then kv-head major [KVH, B, G, Q, F].
    own = torch.matmul(grouped, own_k.transpose(2, 3)).view(B, KVH, G, Q, F).transpose(0, 1).contiguous()
    own = logits(own, columns(T0, T0 + F, None))
    peak = own.amax(dim=-1)  # [KVH, B, G, Q]
    # Each base once, for all rows reading it: queries folded to [KVH, n * G * Q, D].
    base_scores = []
    for base_k, _, rows in layer.groups:
        n, T = (B if rows is None else int(rows.shape[0])), base_k.shape[2]
        q_rows = grouped if rows is None else grouped[rows]
        folded = q_rows.transpose(0, 1).reshape(KVH, n * G * Q, D)
        scores = logits(torch.matmul(folded, base_k[0].transpose(1, 2)).view(KVH, n, G, Q, T), columns(0, T, rows))
        base_scores.append(scores)
        if T:
            if rows is None:
                peak = torch.maximum(peak, scores.amax(dim=-1))
            else:
                peak[:, rows] = torch.maximum(peak[:, rows], scores.amax(dim=-1))
    # Float32 softmax over both parts: exp(s - max) / sum, as torch.softmax computes it.
    peak = peak.float()[..., None]
    own_p = (own.float() - peak).exp_()
    total = own_p.sum(dim=-1)
    base_p = []
    for (_, _, rows), scores in zip(layer.groups, base_scores):
        p = (scores.float() - (peak if rows is None else peak[:, rows])).exp_()
        if rows is None:
            total += p.sum(dim=-1)
        else:
            total[:, rows] += p.sum(dim=-1)
        base_p.append(p)
    inv = total.reciprocal_()[..., None]
    own_p = own_p.mul_(inv).to(query.dtype)
    out = torch.matmul(own_p.transpose(0, 1).reshape(B, KVH, G * Q, F), own_v)  # [B, KVH, G*Q, Dv]
    for i, ((base_k, base_v, rows), p) in enumerate(zip(layer.groups, base_p)):
        n, T = (B if rows is None else int(rows.shape[0])), base_k.shape[2]
        p = p.mul_(inv if rows is None else inv[:, rows]).to(query.dtype)
        base_p[i] = p
        weighted = torch.matmul(p.view(KVH, n * G * Q, T), base_v[0]).view(KVH, n, G * Q, Dv).transpose(0, 1)
        if rows is None:
            out += weighted
        else:
            out.index_add_(0, rows, weighted)
    out = out.view(B, H, Q, Dv).transpose(1, 2).contiguous()
    if not want_probabilities:
        return out, None
    probs = query.new_zeros(B, H, Q, T0 + F)
    probs[..., T0:] = own_p.transpose(0, 1).reshape(B, H, Q, F)
    for (base_k, _, rows), p in zip(layer.groups, base_p):
        n, T = (B if rows is None else int(rows.shape[0])), base_k.shape[2]
        block = p.transpose(0, 1).reshape(n, H, Q, T)
        if rows is None:
            probs[..., :T] = block
        else:
            probs[rows, :, :, :T] = block
    return out, probs


AttentionInterface.register(KVPROBE_SDPA, kvprobe_attention)
AttentionMaskInterface.register(KVPROBE_SDPA, eager_mask)
AttentionInterface.register(GROUPED_EAGER, grouped_eager_attention)
AttentionMaskInterface.register(GROUPED_EAGER, eager_mask)
