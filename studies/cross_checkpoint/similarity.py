"""How similar are two checkpoints' caches of the same tokens? Per-layer K/V cosine and relative L2 (spec E8).

The paper reports cosine similarity "on identical token IDs, averaged over KV
layers and cases" and relative L2 differences; the granularity is UNCLEAR. Our
choice (a parameter of nothing, stated here and in every report):

* the unit is one token's cached tensor of one layer, all KV heads flattened
  (``[heads * dim]``; K after RoPE, exactly as cached);
* cosine(a, b) = a.b / (|a| |b|); relative L2 = |a - b| / |a| with ``a`` the
  *first* cache given (the main model's in the study);
* per layer: the mean over the tokens (of the whole history, or of a span such as
  record A); overall: the mean over the layers that store rows (recurrent and
  KV-sharing layers have none).

Computed in float64. A token whose reference vector has zero norm contributes
cosine 0 and relative L2 ``inf`` (never happens with real caches).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from kvprobe.prompts import TokenSpan

KV = Sequence[tuple[torch.Tensor | None, torch.Tensor | None]]


def token_cosine_and_rel_l2(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token cosine and relative L2 of two cached tensors ``[1, heads, T, dim]`` -> (Float[T], Float[T])."""
    if a.shape != b.shape:
        raise ValueError(f"cached tensors differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    x = a.detach().double()[0].transpose(0, 1).reshape(a.shape[2], -1)  # [T, heads * dim]
    y = b.detach().double()[0].transpose(0, 1).reshape(b.shape[2], -1)
    nx, ny = x.norm(dim=1), y.norm(dim=1)
    dot = (x * y).sum(dim=1)
    denom = nx * ny
    cos = torch.where(denom > 0, dot / torch.where(denom > 0, denom, torch.ones_like(denom)), torch.zeros_like(dot))
    rel = (x - y).norm(dim=1) / nx
    return cos, rel


def cache_similarity(kv_a: KV, kv_b: KV, span: TokenSpan | tuple[int, int] | None = None) -> dict[str, Any]:
    """Per-layer mean-over-tokens K/V cosine and relative L2 between two caches of the same tokens.

    Args:
        kv_a, kv_b: per layer (K, V) ``[1, heads, T, dim]`` (``History.kv``); ``(None, None)``
            layers are skipped. ``kv_a`` is the reference of the relative L2.
        span: restrict to tokens ``[start, end)`` (e.g. record A's span); default all tokens.

    Returns:
        ``{"layers": [...], "k_cos": [...], "v_cos": [...], "k_rel_l2": [...], "v_rel_l2": [...],
        "mean": {"k_cos", "v_cos", "k_rel_l2", "v_rel_l2"}, "tokens": n}`` (lists per layer).
    """
    if len(kv_a) != len(kv_b):
        raise ValueError(f"caches have {len(kv_a)} and {len(kv_b)} layers")
    out: dict[str, Any] = {"layers": [], "k_cos": [], "v_cos": [], "k_rel_l2": [], "v_rel_l2": []}
    tokens = None
    for layer, ((ka, va), (kb, vb)) in enumerate(zip(kv_a, kv_b)):
        if ka is None or kb is None:
            if (ka is None) != (kb is None):
                raise ValueError(f"layer {layer} stores rows in one cache only")
            continue
        if span is not None:
            lo, hi = (span.start, span.end) if isinstance(span, TokenSpan) else span
            ka, va, kb, vb = (t[:, :, lo:hi] for t in (ka, va, kb, vb))
        out["layers"].append(layer)
        for name, (x, y) in (("k", (ka, kb)), ("v", (va, vb))):
            cos, rel = token_cosine_and_rel_l2(x, y)
            out[f"{name}_cos"].append(float(cos.mean()))
            out[f"{name}_rel_l2"].append(float(rel.mean()))
        tokens = int(ka.shape[2])
    if not out["layers"]:
        raise ValueError("no layer stores K/V rows in both caches")
    out["mean"] = {key: sum(out[key]) / len(out[key]) for key in ("k_cos", "v_cos", "k_rel_l2", "v_rel_l2")}
    out["tokens"] = tokens
    return out


def recurrent_similarity(rec_a: dict[int, tuple[torch.Tensor | None, torch.Tensor | None]],
                         rec_b: dict[int, tuple[torch.Tensor | None, torch.Tensor | None]]) -> dict[str, Any] | None:
    """Cosine of the carried recurrent states of hybrid models (``History.recurrent``), per layer.

    Each layer's convolution state and recurrent state are flattened whole (the paper
    reports DeltaNet state cosines of 0.87 / 0.89 without a granularity). None without
    recurrent layers.
    """
    layers = sorted(set(rec_a) & set(rec_b))
    if not layers:
        return None
    out: dict[str, Any] = {"layers": layers, "conv_cos": [], "recurrent_cos": []}
    for layer in layers:
        for name, x, y in (("conv_cos", rec_a[layer][0], rec_b[layer][0]),
                           ("recurrent_cos", rec_a[layer][1], rec_b[layer][1])):
            if x is None or y is None:
                out[name].append(None)
                continue
            u, v = x.detach().double().reshape(-1), y.detach().double().reshape(-1)
            out[name].append(float(u @ v / (u.norm() * v.norm())))
    for name in ("conv_cos", "recurrent_cos"):
        values = [x for x in out[name] if x is not None]
        out[f"{name}_mean"] = sum(values) / len(values) if values else None
    return out
