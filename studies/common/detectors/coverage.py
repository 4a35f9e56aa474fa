"""Coverage curves: expected net corrections when acting on top-ranked cases (paper partB section 5).

Case ``i`` has a detector score ``s_i`` (higher = act first; a binary detector
gives two tie groups) and a utility ``U_i = 1{correct when acted on} -
1{correct under full access}`` (any float is accepted). Acting on the top ``k``
cases gives ``net = sum of U`` over them. A tie group cut by the boundary is
averaged uniformly over all orders within ties: whole tie groups above the
boundary add their sum, the boundary group of size ``g`` from which ``r``
cases are taken adds ``(r / g) * (its sum)``. The random baseline at the same
coverage is ``(k / N) * sum U`` (the expectation of acting on ``k`` uniformly
chosen cases), and the excess in percentage points is ``100 (net - random) / N``.

Intervals (partD section 0): paired group bootstrap, 10,000 draws, seed
20260919, optionally stratified (e.g. by relation), percentile 95 %. Draws come
from :func:`readouts.stats.group_bootstrap_indices`; in every draw the
ranking and the tie sizes are recomputed on the resampled multiset (a
duplicated case adds its multiplicity to its score's tie group). All
coverages, ``net`` and ``excess`` share the same draws, and two detectors
evaluated with the same ``groups``, ``strata`` and ``seed`` share them too.

UNCLEAR choices (the paper is silent):

- Rounding of ``k``: ``k = floor(c N + 1/2)`` (round half up, not Python's
  half-to-even ``round``), with ``c N`` first rounded to 9 decimals so float
  error cannot move it (``0.35 * 10 = 3.4999999999999996`` gives ``k = 4``).
- In a bootstrap draw ``N`` is the draw's case count (it differs from the
  original ``N`` only when groups have unequal sizes); ``k``, the random
  baseline and the excess use that draw's ``N``.
- Percentiles use numpy's default linear interpolation, as ``readouts.stats``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kvprobe.readouts.stats import ALPHA, DRAWS, PAPER_SEED, GroupBootstrap, group_bootstrap_indices, percentile_points

__all__ = ["DEFAULT_COVERAGES", "coverage_curve", "coverage_draws", "coverage_k", "expected_net", "plot_coverage"]

#: Coverages at 10 % steps, 0 to 1.
DEFAULT_COVERAGES: tuple[float, ...] = tuple(i / 10 for i in range(11))


def _vector(values: Any, name: str, n: int | None = None) -> np.ndarray:
    """Finite float64 vector of length ``n`` (if given)."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or (n is not None and len(v) != n):
        raise ValueError(f"{name} must be one-dimensional of length {n}, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name} must be finite")
    return v


def coverage_k(coverage: float | Sequence[float] | np.ndarray, n: int | np.ndarray) -> np.ndarray:
    """Number of acted cases ``k = floor(round(c * n, 9) + 0.5)`` (round half up); int array.

    Broadcasts ``coverage`` against ``n``; coverages must lie in [0, 1].
    """
    c = np.asarray(coverage, dtype=np.float64)
    if np.any((c < 0) | (c > 1)):
        raise ValueError("coverages must lie in [0, 1]")
    return np.floor(np.round(c * np.asarray(n, dtype=np.float64), 9) + 0.5).astype(np.int64)


def _tie_blocks(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Case order by descending score and the (exclusive) end position of every tie block."""
    order = np.argsort(-scores, kind="stable")
    s = scores[order]
    ends = np.r_[np.flatnonzero(s[1:] != s[:-1]) + 1, len(s)] if len(s) else np.zeros(0, np.intp)
    return order, ends


def _nets(weights: np.ndarray, utility: np.ndarray, order: np.ndarray, ends: np.ndarray,
          k: np.ndarray) -> np.ndarray:
    """Expected net [D, C] for case multiplicities ``weights`` [D, n] and acted counts ``k`` [D, C].

    ``Cm``/``Cs`` are the cumulative multiplicity and utility at tie-block ends
    (descending score, a zero column first); ``j`` counts the blocks fully
    inside the top ``k``; the boundary block ``j`` adds ``(k - Cm_j) / m_j`` of its sum.
    """
    w = weights[:, order].astype(np.float64)
    d = w.shape[0]
    cm = np.zeros((d, len(ends) + 1))
    cs = np.zeros((d, len(ends) + 1))
    if len(ends):
        cm[:, 1:] = np.cumsum(w, axis=1)[:, ends - 1]
        cs[:, 1:] = np.cumsum(w * utility[order], axis=1)[:, ends - 1]
    kf = k.astype(np.float64)
    j = (cm[:, 1:, None] <= kf[:, None, :]).sum(axis=1)                     # [D, C] in 0..B
    prev_m = np.take_along_axis(cm, j, axis=1)
    prev_s = np.take_along_axis(cs, j, axis=1)
    block_m = np.take_along_axis(np.c_[np.diff(cm, axis=1), np.ones(d)], j, axis=1)
    block_s = np.take_along_axis(np.c_[np.diff(cs, axis=1), np.zeros(d)], j, axis=1)
    return prev_s + (kf - prev_m) / block_m * block_s


def expected_net(scores: Sequence[float] | np.ndarray, utility: Sequence[float] | np.ndarray, k: int) -> float:
    """Expected net utility of acting on the ``k`` top-scored cases, uniform over orders within ties."""
    s = _vector(scores, "scores")
    u = _vector(utility, "utility", len(s))
    if not 0 <= int(k) <= len(s) or int(k) != k:
        raise ValueError(f"k must be an integer in [0, {len(s)}], got {k}")
    order, ends = _tie_blocks(s)
    return float(_nets(np.ones((1, len(s))), u, order, ends, np.array([[int(k)]]))[0, 0])


def coverage_draws(scores: Sequence[float] | np.ndarray, utility: Sequence[float] | np.ndarray,
                   bootstrap: GroupBootstrap, coverages: Sequence[float] = DEFAULT_COVERAGES,
                   chunk_size: int = 2_000) -> dict[str, np.ndarray]:
    """Per-draw ``net``, ``random`` and ``excess_pp`` (float arrays [n_draws, n_coverages]) and ``n`` [n_draws].

    Each draw's multiplicities come from ``bootstrap.weights()``; ``k`` is
    recomputed from the draw's case count. Draws run in chunks of ``chunk_size``.
    """
    s = _vector(scores, "scores", bootstrap.n_cases)
    u = _vector(utility, "utility", bootstrap.n_cases)
    c = np.asarray(coverages, dtype=np.float64)
    order, ends = _tie_blocks(s)
    out = {key: np.empty((len(bootstrap), len(c))) for key in ("net", "random", "excess_pp")}
    out["n"] = np.empty(len(bootstrap))
    for start in range(0, len(bootstrap), chunk_size):
        rows = slice(start, min(start + chunk_size, len(bootstrap)))
        w = bootstrap.weights(rows)
        n = w.sum(axis=1).astype(np.float64)
        k = coverage_k(c[None, :], n[:, None])
        net = _nets(w, u, order, ends, k)
        random = k / np.maximum(n, 1.0)[:, None] * (w @ u)[:, None]
        out["net"][rows], out["random"][rows], out["n"][rows] = net, random, n
        out["excess_pp"][rows] = 100.0 * (net - random) / np.maximum(n, 1.0)[:, None]
    return out


def coverage_curve(scores: Sequence[float] | np.ndarray, utility: Sequence[float] | np.ndarray,
                   coverages: Sequence[float] = DEFAULT_COVERAGES, groups: Sequence[Any] | None = None,
                   strata: Sequence[Any] | None = None, n_draws: int = DRAWS, seed: int = PAPER_SEED,
                   alpha: float = ALPHA) -> dict[str, Any]:
    """Expected net, random baseline and excess at each coverage, with paired bootstrap intervals.

    ``groups`` (default: each case its own group) are resampled whole, within
    ``strata`` if given; ``n_draws = 0`` skips the intervals (bounds NaN).

    Returns
    -------
    dict (JSON-serialisable; lists have one entry per coverage)
        ``coverage``, ``k`` (int), ``net``, ``random``, ``excess_pp``,
        ``net_lo``/``net_hi``, ``excess_lo``/``excess_hi`` (alpha/2 and
        1 - alpha/2 percentiles), and scalars ``n``, ``total_utility``,
        ``n_draws``, ``seed``, ``alpha``, ``stratified``.
    """
    s = _vector(scores, "scores")
    u = _vector(utility, "utility", len(s))
    c = np.asarray(coverages, dtype=np.float64)
    n = len(s)
    k = coverage_k(c, n)
    order, ends = _tie_blocks(s)
    net = _nets(np.ones((1, n)), u, order, ends, k[None, :])[0]
    random = k / max(n, 1) * u.sum()
    result: dict[str, Any] = {
        "coverage": c.tolist(), "k": k.tolist(), "net": net.tolist(), "random": random.tolist(),
        "excess_pp": (100.0 * (net - random) / max(n, 1)).tolist(), "n": n, "total_utility": float(u.sum()),
        "n_draws": int(n_draws), "seed": int(seed), "alpha": float(alpha), "stratified": strata is not None}
    bounds = {key: np.full((2, len(c)), np.nan) for key in ("net", "excess")}
    if n_draws > 0:
        boot = group_bootstrap_indices(np.arange(n) if groups is None else groups, n_draws=n_draws, seed=seed,
                                       strata=strata)
        draws = coverage_draws(s, u, boot, c)
        q = list(percentile_points(alpha, "alpha"))
        bounds = {"net": np.percentile(draws["net"], q, axis=0),
                  "excess": np.percentile(draws["excess_pp"], q, axis=0)}
    for key, (lo, hi) in bounds.items():
        result[f"{key}_lo"], result[f"{key}_hi"] = lo.tolist(), hi.tolist()
    return result


def plot_coverage(curves: Mapping[str, Mapping[str, Any]], path: Path | str, title: str = "") -> Path:
    """Plot net corrections vs coverage (interval bands) per detector and the random line; write a PNG.

    ``curves`` maps a detector name to a :func:`coverage_curve` result. Raises
    ImportError with a clear message when matplotlib is missing.
    """
    try:
        import matplotlib
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("plot_coverage needs matplotlib (pip install matplotlib)") from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    randoms: list[list[float]] = []
    for name, curve in curves.items():
        x = 100 * np.asarray(curve["coverage"])
        line = ax.plot(x, curve["net"], marker="o", ms=3, label=name)[0]
        lo, hi = np.asarray(curve["net_lo"], float), np.asarray(curve["net_hi"], float)
        if np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)):
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.2, lw=0)
        if not any(np.allclose(curve["random"], r) for r in randoms):
            randoms.append(list(curve["random"]))
            ax.plot(x, curve["random"], ls="--", color="gray", lw=1,
                    label="random" if len(randoms) == 1 else f"random ({name})")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel("coverage (% of cases acted on)")
    ax.set_ylabel("expected net corrections (95% CI)")
    ax.set_title(title)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
