"""What each readout reads from a store group: per-case fixed scores and probe features.

Fixed scores compare A alone with B alone (both encoded from position 0), over every
layer with K/V rows:

* :func:`key_similarity_scores` s_K [n] from the token-level keys;
* :func:`value_distance_scores` d_V [n] from the token-mean pooled values;
* :func:`head_value_distances` d_V per (layer, head) [n, L, H];
* :func:`surface_scores` token Jaccard and character distance [n] each.

Probe features (:func:`features`) are token-mean pooled K/V at four depths
(:func:`probe_depths`, each the nearest layer with rows) and hidden states at the
depths themselves: ``joint_kv`` (B read after A), ``separate_kv`` (A alone and B
alone side by side) and ``joint_hidden``.

Example:
    >>> probe_depths(8), nearest(3, [1, 5])
    ([2, 4, 6, 7], 1)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from kvprobe.extract import StoreError, StoreGroup

from .fixed import char_distance, key_similarity, per_head_value_distance, token_jaccard, value_distance

#: Probe feature sets (:func:`features`).
FEATURE_SETS = ("joint_kv", "separate_kv", "joint_hidden")


def probe_depths(num_layers: int) -> list[int]:
    """floor(L/4), floor(L/2), floor(3L/4), L-1 (zero-based)."""
    return [num_layers // 4, num_layers // 2, (3 * num_layers) // 4, num_layers - 1]


def nearest(layer: int, available: Sequence[int]) -> int:
    """The available layer nearest to ``layer``, ties toward the earlier one."""
    return min(available, key=lambda a: (abs(a - layer), a))


def _records_alone(g: StoreGroup, what: str) -> tuple[np.ndarray, np.ndarray]:
    """Rows of A alone and B alone per case (edited groups, holding B after A only, raise)."""
    cases = g.cases()
    ra, rb = cases["record_a"], cases["record_b"]
    if (ra < 0).any() or (rb < 0).any():
        raise StoreError(f"{g.name} holds B read after A only (an edited group); {what} compares A alone with "
                         "B alone: read it from the original group")
    if not g.kv_layers:
        raise StoreError(f"{g.name}: no layer with K/V rows in this group")
    return ra, rb


def key_similarity_scores(g: StoreGroup) -> np.ndarray:
    """s_K per case (A alone vs B alone), the mean over layers with rows of each layer's s_K (float64 [n])."""
    ra, rb = _records_alone(g, "the key similarity")
    offsets = g.group["records/token_offset"][()]
    counts = g.group["records/token_rows"][()]
    s_k = np.zeros(len(ra))
    for layer in g.kv_layers:  # token-level keys of one layer in memory at once
        if f"records/tokens/K/L{layer:03d}" not in g.group:
            raise StoreError(f"{g.name}: no token-level keys of layer {layer}; extract with token_level K")
        table = g.group[f"records/tokens/K/L{layer:03d}"][()].astype(np.float32)

        def keys(r: int) -> np.ndarray:
            return table[offsets[r] : offsets[r] + counts[r]].transpose(1, 0, 2)

        s_k += np.array([key_similarity([keys(a)], [keys(b)]) for a, b in zip(ra, rb)])
    return s_k / len(g.kv_layers)


def _pooled_values(g: StoreGroup, what: str) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
    ra, rb = _records_alone(g, what)
    return ra, rb, {layer: g.pooled("V", layer) for layer in g.kv_layers}


def value_distance_scores(g: StoreGroup) -> np.ndarray:
    """d_V per case (A alone vs B alone, pooled values of every layer with rows), float64 [n]."""
    ra, rb, v = _pooled_values(g, "the value distance")
    layers = g.kv_layers
    return np.array([value_distance([v[l][a] for l in layers], [v[l][b] for l in layers]) for a, b in zip(ra, rb)])


def head_value_distances(g: StoreGroup) -> np.ndarray:
    """d_V per case and (layer with rows, head): float64 [n, L, H] (layers in ``g.kv_layers`` order)."""
    ra, rb, v = _pooled_values(g, "the per-head value distance")
    layers = g.kv_layers
    heads = {v[l].shape[1] for l in layers}
    if len(heads) != 1:
        raise StoreError(f"{g.name}: layers with rows have {sorted(heads)} heads; the per-head value distance "
                         "needs one head count")
    return np.stack([per_head_value_distance([v[l][a] for l in layers], [v[l][b] for l in layers])
                     for a, b in zip(ra, rb)])


def surface_scores(g: StoreGroup) -> dict[str, np.ndarray]:
    """Token Jaccard of the token ids and character distance of the texts, A alone vs B alone."""
    ra, rb = _records_alone(g, "a surface baseline")
    texts = g.texts()
    return {"token_jaccard": np.array([token_jaccard(g.token_ids(a), g.token_ids(b)) for a, b in zip(ra, rb)]),
            "char_distance": np.array([char_distance(texts[a], texts[b]) for a, b in zip(ra, rb)])}


def fixed_scores(g: StoreGroup) -> dict[str, np.ndarray]:
    """Per case: s_K, d_V, per-head V distances [n, L, H] and the surface baselines (A alone vs B alone)."""
    out = {"key_similarity": key_similarity_scores(g), "value_distance": value_distance_scores(g)}
    try:
        out["per_head"] = head_value_distances(g)
    except StoreError:  # layers of different head counts: no per-head choice
        pass
    return {**out, **surface_scores(g)}


def features(g: StoreGroup, name: str) -> np.ndarray:
    """Probe inputs per case, flattened over depths: ``separate_kv`` ([A's K,V | B's K,V]: the separate
    probe's input, and the pairwise probes', which split it into its A and B halves), ``joint_kv``,
    ``joint_hidden``."""
    if name not in FEATURE_SETS:
        raise ValueError(f"unknown feature set {name!r}; one of {FEATURE_SETS}")
    cases = g.cases()
    n_layers = len(g.layer_types)
    if not g.kv_layers and name != "joint_hidden":
        raise StoreError(f"{g.name}: no layer with K/V rows in this group")
    kv_depths = [nearest(d, g.kv_layers) for d in probe_depths(n_layers)] if g.kv_layers else []

    def kv(rows: np.ndarray) -> np.ndarray:
        parts = [g.pooled(kind, layer, rows).reshape(len(rows), -1) for layer in kv_depths for kind in ("K", "V")]
        return np.hstack(parts)

    if name == "separate_kv":
        _records_alone(g, "the separate_kv features")
        return np.hstack([kv(cases["record_a"]), kv(cases["record_b"])])
    if name == "joint_kv":
        return kv(cases["record_ab"])
    h_depths = [d for d in probe_depths(n_layers) if d in g.layers("H")]
    if not h_depths:
        raise StoreError(f"{g.name} holds no hidden states (an edited group holds K and V only)")
    return np.hstack([g.pooled("H", d, cases["record_ab"]) for d in h_depths])
