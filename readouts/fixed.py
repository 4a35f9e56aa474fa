"""Fixed (untrained) recognition scores of two records A and B (paper partB section 2).

A and B are encoded separately at positions 0..n_X-1 without a question; the
caller extracts, for every evaluated attention layer l, the cached keys
(post-RoPE, post-q/k-norm, one row per KV head) and the token-mean pooled
values. Everything here is computed in float64 on numpy arrays; torch tensors
are accepted (converted on the CPU; bfloat16 is widened to float32 first).

Scores
------
- :func:`key_similarity` s_K (matching; larger = same entity and attribute).
- :func:`value_distance` d_V (replacement; larger = replacement; "reversed V"
  is ``-d_V``).
- :func:`per_head_value_distance` (head selection), :func:`select_head`,
  :func:`select_sign` (dev-set choice of head and direction).
- Surface baselines :func:`token_jaccard` and :func:`char_distance`.

Choices where the paper is silent (partB marks them [UNCLEAR]):

- Which layers L are evaluated and how BOS is handled are the caller's
  choice: pass exactly the layers and token rows to score.
- Per-head V distance: the paper leaves the formula unclear; we use the
  natural reading, the same relative RMS restricted to one (layer, head).
- Surface baselines: tokenization is the caller's (pass token ids);
  character distance is the Levenshtein edit distance (unit costs for
  insertion, deletion, substitution) normalised by the longer length.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .stats import _as_labels, _as_scores, _auc_columns

__all__ = [
    "char_distance",
    "key_similarity",
    "per_head_value_distance",
    "select_head",
    "select_sign",
    "token_jaccard",
    "value_distance",
]

#: Floor of a key norm in the cosine (partB 2).
KEY_NORM_EPS = 1e-8
#: Floor of the RMS of B's pooled values in the V-distance denominator (partB 2).
VALUE_RMS_EPS = 1e-6


def _as_float64(x: Any) -> np.ndarray:
    """float64 numpy copy of an array-like or a (CPU/GPU, any float dtype) torch tensor."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch.Tensor, without importing torch
        x = x.detach().cpu()
        if str(x.dtype) == "torch.bfloat16":
            x = x.float()
        x = x.numpy()
    return np.asarray(x, dtype=np.float64)


def _layer_pairs(a: Sequence[Any], b: Sequence[Any], name: str, ndim: int) -> list[tuple[np.ndarray, np.ndarray]]:
    if len(a) != len(b):
        raise ValueError(f"{name}: {len(a)} layers for A but {len(b)} for B")
    if len(a) == 0:
        raise ValueError(f"{name}: no layers")
    pairs = []
    for layer, (xa, xb) in enumerate(zip(a, b)):
        xa, xb = _as_float64(xa), _as_float64(xb)
        if xa.ndim != ndim or xb.ndim != ndim:
            raise ValueError(f"{name}: layer {layer} arrays must be {ndim}-D, got shapes {xa.shape} and {xb.shape}")
        pairs.append((xa, xb))
    return pairs


def key_similarity(keys_a: Sequence[np.ndarray], keys_b: Sequence[np.ndarray]) -> float:
    """Symmetric best-match cosine similarity of cached keys, s_K (partB 2).

    With k_hat = k / max(||k||_2, 1e-8) and c_ij = k_hat_{A,i} . k_hat_{B,j}
    (per layer l and KV head h)::

        s_K = (1/L) sum_l clip_[-1,1]( (1/(2 H_l)) sum_h [ (1/n_A) sum_i max_j c_ij
                                                       + (1/n_B) sum_j max_i c_ij ] )

    Every token of A is matched to its most similar token of B within the
    same head and vice versa (not one-to-one). A zero key has cosine 0 with
    everything.

    Parameters
    ----------
    keys_a, keys_b : sequence of arrays of shape (H_l, n_A, d) and (H_l, n_B, d)
        One array per evaluated layer, keys as cached (token level). H_l and d
        may differ between layers but must agree between A and B.

    Returns
    -------
    float
        s_K in [-1, 1].
    """
    values = []
    for layer, (ka, kb) in enumerate(_layer_pairs(keys_a, keys_b, "key_similarity", 3)):
        if ka.shape[0] != kb.shape[0] or ka.shape[2] != kb.shape[2]:
            raise ValueError(f"key_similarity: layer {layer} heads/head dims differ: {ka.shape} vs {kb.shape}")
        if ka.shape[0] == 0 or ka.shape[1] == 0 or kb.shape[1] == 0:
            raise ValueError(f"key_similarity: layer {layer} has no heads or no tokens: {ka.shape} vs {kb.shape}")
        ka = ka / np.maximum(np.linalg.norm(ka, axis=-1, keepdims=True), KEY_NORM_EPS)
        kb = kb / np.maximum(np.linalg.norm(kb, axis=-1, keepdims=True), KEY_NORM_EPS)
        c = np.einsum("hid,hjd->hij", ka, kb)                       # [H, n_A, n_B]
        per_head = c.max(axis=2).mean(axis=1) + c.max(axis=1).mean(axis=1)
        values.append(np.clip(per_head.sum() / (2 * ka.shape[0]), -1.0, 1.0))
    return float(np.mean(values))


def value_distance(values_a: Sequence[np.ndarray], values_b: Sequence[np.ndarray]) -> float:
    """Relative RMS distance of token-mean pooled values, d_V (partB 2).

    With V_bar the token mean of the cached values (pooled by the caller)::

        d_V = (1/L) sum_l sqrt( (H_l d)^-1 sum_h sum_j (V_bar_A - V_bar_B)^2 )
                        / max( sqrt( (H_l d)^-1 sum_h sum_j V_bar_B^2 ), 1e-6 )

    Asymmetric (B in the denominator). Pool, then RMS over heads x dims per
    layer, layers last; not a mean of per-head distances.

    Parameters
    ----------
    values_a, values_b : sequence of arrays of shape (H_l, d)
        One array per evaluated layer, token-mean pooled V of A and of B.

    Returns
    -------
    float
        d_V >= 0; larger means "replacement".
    """
    out = []
    for layer, (va, vb) in enumerate(_layer_pairs(values_a, values_b, "value_distance", 2)):
        if va.shape != vb.shape or va.size == 0:
            raise ValueError(f"value_distance: layer {layer} shapes differ or are empty: {va.shape} vs {vb.shape}")
        rms_diff = np.sqrt(np.mean((va - vb) ** 2))
        rms_b = np.sqrt(np.mean(vb ** 2))
        out.append(rms_diff / max(rms_b, VALUE_RMS_EPS))
    return float(np.mean(out))


def per_head_value_distance(values_a: Sequence[np.ndarray], values_b: Sequence[np.ndarray]) -> np.ndarray:
    """Relative RMS distance of pooled values per (layer, head): array of shape (L, H).

    [UNCLEAR] in the paper (formula of the per-head distance): our choice is
    the natural reading, d_V restricted to one (l, h)::

        d^{l,h} = sqrt( d^-1 sum_j (V_bar_A - V_bar_B)^2 ) / max( sqrt( d^-1 sum_j V_bar_B^2 ), 1e-6 )

    Parameters
    ----------
    values_a, values_b : sequence of arrays of shape (H, d)
        One array per layer (token-mean pooled V); H must be the same in
        every layer.

    Raises
    ------
    ValueError
        If the layers have different numbers of heads.
    """
    pairs = _layer_pairs(values_a, values_b, "per_head_value_distance", 2)
    heads = {va.shape[0] for va, _ in pairs}
    if len(heads) != 1:
        raise ValueError(f"per_head_value_distance needs the same number of heads in every layer, got {sorted(heads)}")
    out = np.empty((len(pairs), heads.pop()))
    for layer, (va, vb) in enumerate(pairs):
        if va.shape != vb.shape or va.shape[1] == 0:
            raise ValueError(f"per_head_value_distance: layer {layer} shapes differ or are empty: "
                             f"{va.shape} vs {vb.shape}")
        rms_diff = np.sqrt(np.mean((va - vb) ** 2, axis=1))
        rms_b = np.sqrt(np.mean(vb ** 2, axis=1))
        out[layer] = rms_diff / np.maximum(rms_b, VALUE_RMS_EPS)
    return out


def token_jaccard(ids_a: Sequence[int], ids_b: Sequence[int]) -> float:
    """Set Jaccard similarity of token ids: |A & B| / |A | B| (1.0 for two empty records).

    [UNCLEAR] in the paper (tokenization): our choice is sets of the ids the
    caller passes (duplicates ignored). Larger = more similar, so "either
    score direction" means trying ``-token_jaccard`` as well.
    """
    a, b = set(ids_a), set(ids_b)
    union = a | b
    return len(a & b) / len(union) if union else 1.0


def char_distance(a: str, b: str) -> float:
    """Normalised character edit distance: Levenshtein(a, b) / max(len(a), len(b)) (0 for two empty).

    [UNCLEAR] in the paper (algorithm): our choice is the Levenshtein
    distance with unit costs, computed by the O(len(a) len(b)) dynamic
    programme keeping two rows, normalised to [0, 1] by the longer length.
    """
    if len(a) < len(b):
        a, b = b, a  # rows over the shorter string
    if not a:
        return 0.0
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i] + [0] * len(b)
        for j, cb in enumerate(b, start=1):
            current[j] = min(previous[j] + 1,                 # deletion
                             current[j - 1] + 1,              # insertion
                             previous[j - 1] + (ca != cb))    # substitution / match
        previous = current
    return previous[-1] / len(a)


def _signed_criterion(scores: np.ndarray, labels: Any, groups: Any | None) -> np.ndarray:
    """Dev AUC of +scores and -scores for every column of ``scores`` [n, k]: array [k, 2].

    Without ``groups`` the plain AUC; with ``groups`` the macro AUC, i.e. the
    mean of per-group AUCs over groups that contain both classes.
    """
    y = _as_labels(labels, scores.shape[0])
    both = np.stack([scores, -scores], axis=-1).reshape(scores.shape[0], -1)
    if groups is None:
        crit = _auc_columns(both, y)
    else:
        g = np.asarray(groups)
        if g.shape != (scores.shape[0],):
            raise ValueError(f"groups have shape {g.shape}, expected ({scores.shape[0]},)")
        per_group = [_auc_columns(both[g == k], y[g == k]) for k in np.unique(g)]
        per_group = [v for v in per_group if not np.all(np.isnan(v))]
        crit = np.mean(per_group, axis=0) if per_group else np.full(both.shape[1], np.nan)
    if np.all(np.isnan(crit)):
        raise ValueError("the dev labels need both classes (within at least one group)")
    return crit.reshape(scores.shape[1], 2)


def select_head(per_head_dev: np.ndarray, y_dev: Sequence[int] | np.ndarray,
                groups: Sequence[Any] | np.ndarray | None = None) -> tuple[int, int, int]:
    """Choose the (layer, head) and direction whose signed score has the best dev AUC.

    Maximises ``AUC(sign * per_head_dev[:, l, h], y_dev)`` over l, h and
    sign in {+1, -1}; ties go to the earliest layer, then the earliest head,
    then +1. ``AUC(-s) = 1 - AUC(s)`` (tie-aware), but both are computed from
    ranks so that exact ties stay exact.

    Parameters
    ----------
    per_head_dev : array of shape (n_dev, L, H)
        Per-head scores (e.g. :func:`per_head_value_distance`) of the dev cases.
    y_dev : array-like of shape (n_dev,)
        Binary dev labels (1 = positive, e.g. role swap).
    groups : array-like of shape (n_dev,), optional
        Our extension: if given, the criterion is the macro AUC, the mean of
        per-group AUCs (groups with a single class are skipped), e.g. per
        update family.

    Returns
    -------
    (layer, head, sign)
    """
    x = _as_float64(per_head_dev)
    if x.ndim != 3:
        raise ValueError(f"per_head_dev must have shape (n_dev, L, H), got {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("per_head_dev must be finite")
    n, n_layers, n_heads = x.shape
    crit = _signed_criterion(x.reshape(n, n_layers * n_heads), y_dev, groups)  # [L*H, 2]
    best = int(np.nanargmax(crit.ravel()))  # first maximum in (layer, head, +1/-1) order
    flat_head, sign_index = divmod(best, 2)
    layer, head = divmod(flat_head, n_heads)
    return layer, head, (1 if sign_index == 0 else -1)


def select_sign(scores_dev: Sequence[float] | np.ndarray, y_dev: Sequence[int] | np.ndarray,
                groups: Sequence[Any] | np.ndarray | None = None) -> int:
    """Direction of a fixed score chosen on dev: +1 unless ``-score`` has a strictly higher dev AUC.

    ``groups`` as in :func:`select_head` (macro AUC over groups if given).
    """
    s = _as_scores(scores_dev, "scores_dev")
    plus, minus = _signed_criterion(s[:, None], y_dev, groups)[0]
    return -1 if minus > plus else 1
