"""The statistics of every study and readout: seeds, bootstraps, intervals, AUC, binomial bounds.

This is the one place that draws random numbers for intervals and that names the paper's seeds;
studies and readouts import from here (``kvprobe.readouts.stats``) rather than define their own.

AUC is the Mann-Whitney probability that a positive outranks a negative, ties
counted one half::

    AUC = P(s+ > s-) + 1/2 P(s+ = s-)

A group bootstrap resamples whole groups (for example the six variants of one
D3 base item, or the three pairs of one D1 matched group) with replacement.
Instead of materialising 10,000 index lists, a draw is stored as the sampled
group ids; a case's multiplicity in a draw is the number of times its group
was drawn, and the AUC of a draw is the weighted U-statistic

    AUC_w = sum_{i pos, j neg} w_i w_j [1{s_i > s_j} + 1/2 1{s_i = s_j}]
            / (sum_{i pos} w_i * sum_{j neg} w_j)

which equals the plain AUC of the data with every case repeated w_i times.
Every score is evaluated on the *same* draws, so paired differences of two
scores are differences of per-draw AUCs. The history studies use the same
draws for every arm of a report: a paired change (:func:`paired_change`) is
the per-draw sum of the case-aligned differences, weighted by the draw's case
multiplicities (:meth:`GroupBootstrap.weights`).

Labels are binary: ``1``/``True`` = positive, ``0``/``False`` = negative.

Choices where the paper is silent (partB marks them [UNCLEAR]):

- [UNCLEAR] quantile method: our choice is numpy's default linear
  interpolation (Hyndman-Fan type 7) of the per-draw AUCs; the two-sided
  interval is the (alpha/2, 1 - alpha/2) percentile pair and the one-sided
  lower bound is the alpha percentile (5th percentile for alpha = 0.05).
- A draw in which a class is empty (in any stratum, for a macro AUC) has no
  AUC; it is dropped for every score alike and counted as ``dropped_draws``.

Two ways of drawing and two ways of naming an interval's percentile points are kept, each
selected by an explicit parameter, because committed summaries were written with both and
their numbers must not move:

- ``group_bootstrap_indices(seed=int)`` starts a fresh generator for one set of draws (every
  study but BABILong); ``seed=np.random.Generator`` continues a stream shared by several
  sets (BABILong draws each (task, length) cell's stories in turn from one generator).
- ``percentile_interval(points="level")`` (the history studies' paired changes) and
  ``points="alpha"`` (quantity, components, derived note, readouts) differ in the last bits
  of the lower percentile point (2.500000000000002 against 2.5 at 95 %).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Iterator, TypedDict

import numpy as np

__all__ = [
    "ALPHA",
    "DRAWS",
    "GroupBootstrap",
    "PAPER_SEED",
    "REPORT_SEED",
    "auc",
    "auc_two_samples",
    "spearman",
    "bootstrap_spearman",
    "bootstrap_auc",
    "bootstrap_auc_draws",
    "balanced_mean",
    "bootstrap_mean",
    "bootstrap_stream",
    "clopper_pearson",
    "fisher_exact",
    "MIN_HISTORIES",
    "MIN_RESAMPLED_UNITS",
    "mcnemar_exact",
    "may_resample_within",
    "mean_change_pp",
    "MeanChangePP",
    "PairedChange",
    "group_bootstrap_indices",
    "group_bootstrap_weights",
    "macro_auc",
    "one_sided_lower",
    "paired_change",
    "percentile_interval",
    "percentile_points",
    "small_sample",
    "weighted_auc",
    "youden_thresholds",
    "zero_failure_bound",
]

# --------------------------------------------------------------------------- draws and seeds

#: Bootstrap draws of every interval (the paper's 10,000, spec partD section 0).
DRAWS = 10_000
#: Two-sided 95 % intervals.
ALPHA = 0.05

# The paper's seeds, one name per use (a value serves several uses where the paper reuses it).
#: 20260916 again: the bootstrap seed ``kvprobe run`` and ``kvprobe report`` pass to a study's
#: summary (``studies.registry``); the committed summaries under ``artifacts/`` record it
#: (the MQuAKE run records seed 0).
REPORT_SEED = 20260916
#: 20260919, the paper's interval seed (spec partD section 0; seed L4929: "10,000 paired bootstrap
#: draws with seed 20260919"): default of the records, query-aware, detection, derived-note and
#: quantity summaries (``kvprobe run``/``report quantity`` pass it: ``studies.registry``), the
#: quantity held-out threshold's refit bootstrap (``studies.quantity.threshold``), the coverage curves,
#: threshold calibration and action tables (``studies.common.detectors.coverage``, ``studies.detection.calibration``,
#: ``.action``).
PAPER_SEED = 20260919


# --------------------------------------------------------------------------- input checks


def _as_scores(scores: Any, name: str = "scores") -> np.ndarray:
    """Finite float64 vector (torch tensors go through ``np.asarray``)."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {s.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{name} must be finite (no NaN or inf)")
    return s


def _as_labels(labels: Any, n: int | None = None) -> np.ndarray:
    """Boolean positives from binary labels in {0, 1} (or bool)."""
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {y.shape}")
    if n is not None and len(y) != n:
        raise ValueError(f"labels have length {len(y)}, scores have length {n}")
    if y.dtype != bool:
        if not np.all(np.isin(y, (0, 1))):
            raise ValueError("labels must be binary: 1/True = positive, 0/False = negative")
        y = y == 1
    return y


# --------------------------------------------------------------------------- point estimates


def _auc_columns(scores: np.ndarray, positive: np.ndarray) -> np.ndarray:
    """AUC of every column of ``scores`` [n, k] (midranks; NaN if a class is empty)."""
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return np.full(scores.shape[1], np.nan)
    from scipy.stats import rankdata  # here, not at import: scipy.stats takes half a second to load

    ranks = rankdata(scores, axis=0)  # average ranks of ties: 1/2 per tied pair
    u = ranks[positive].sum(axis=0) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def auc(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray) -> float:
    """Tie-aware AUC = P(s+ > s-) + 1/2 P(s+ = s-), via midranks in O(n log n).

    ``U = sum of the positives' average ranks - n+(n+ + 1)/2``, ``AUC = U / (n+ n-)``.

    Parameters
    ----------
    scores : array-like of shape (n,)
        Finite scores; larger means "more positive".
    labels : array-like of shape (n,)
        Binary labels, 1/True = positive.

    Returns
    -------
    float
        The AUC, or NaN if either class is empty.
    """
    s = _as_scores(scores)
    y = _as_labels(labels, len(s))
    return float(_auc_columns(s[:, None], y)[0])


def midranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks of a finite float vector, tied values at the average of their ranks (scipy's
    ``rankdata(method="average")``: the same exact integers and halves, without its per-call overhead).

    Example: ``midranks(np.array([3.0, 1.0, 3.0]))`` is ``[2.5, 1.0, 2.5]``.
    """
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    edge = np.ones(len(values) + 1, dtype=bool)  # tie-group starts, then the end
    edge[1:-1] = ordered[1:] != ordered[:-1]
    bounds = np.flatnonzero(edge)
    starts, ends = bounds[:-1], bounds[1:]
    ranks = np.empty(len(values), dtype=np.float64)
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)
    return ranks


def _spearman_checked(a: np.ndarray, b: np.ndarray) -> float:
    """:func:`spearman` of two finite float vectors of one length (no checks)."""
    if len(a) < 2:
        return float("nan")
    ra, rb = midranks(a) - (len(a) + 1) / 2, midranks(b) - (len(b) + 1) / 2
    denominator = float(np.sqrt((ra * ra).sum() * (rb * rb).sum()))
    return float((ra * rb).sum() / denominator) if denominator > 0 else float("nan")


def spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray) -> float:
    """Spearman rank correlation (Pearson correlation of midranks); NaN with fewer than two cases or a
    constant variable.

    Example: ``spearman([1, 2, 3, 4], [10, 30, 20, 40])`` is 0.8.
    """
    a, b = _as_scores(x, "x"), _as_scores(y, "y")
    if len(a) != len(b):
        raise ValueError(f"x has {len(a)} cases, y has {len(b)}")
    return _spearman_checked(a, b)


def bootstrap_spearman(x: Sequence[float] | np.ndarray, y: Sequence[float] | np.ndarray,
                       bootstrap: "GroupBootstrap") -> np.ndarray:
    """Per-draw :func:`spearman` of the drawn cases (with multiplicity; ties get midranks): float array
    [n_draws], NaN where a draw leaves a variable constant."""
    a, b = _as_scores(x, "x"), _as_scores(y, "y")
    if len(a) != bootstrap.n_cases or len(b) != bootstrap.n_cases:
        raise ValueError(f"x, y have {len(a)}, {len(b)} cases, the bootstrap has {bootstrap.n_cases}")
    return np.array([_spearman_checked(a[cases], b[cases]) for cases in bootstrap])


def auc_two_samples(positives: Sequence[float] | np.ndarray, negatives: Sequence[float] | np.ndarray) -> float:
    """:func:`auc` of two samples: the probability that a positive outranks a negative, ties one half.

    Counted over all ``n+ n-`` pairs (the same U, so the same float as :func:`auc`, and faster for
    small samples). NaN if either sample is empty.
    """
    pos, neg = _as_scores(positives, "positives"), _as_scores(negatives, "negatives")
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    diff = pos[:, None] - neg[None, :]
    return float(((diff > 0).sum() + 0.5 * (diff == 0).sum()) / diff.size)


def macro_auc(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray,
              strata: Sequence[Any] | np.ndarray) -> float:
    """Macro AUC: unweighted mean of the per-stratum AUCs (D1: per update family).

    ``macro = (1/S) sum_s AUC(scores[stratum == s], labels[stratum == s])``.
    A stratum with an empty class has no AUC; then the macro AUC is NaN too
    (the mean is over a fixed set of strata, not over those that happen to
    have both classes).
    """
    s = _as_scores(scores)
    y = _as_labels(labels, len(s))
    st = np.asarray(strata)
    if st.shape != s.shape:
        raise ValueError(f"strata have shape {st.shape}, scores have shape {s.shape}")
    if len(s) == 0:
        return float("nan")
    values = [_auc_columns(s[st == k][:, None], y[st == k])[0] for k in np.unique(st)]
    return float(np.mean(values))


def _weighted_u_columns(scores: np.ndarray, positive: np.ndarray, weights: np.ndarray
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Weighted U, positive and negative weight totals for every row of ``weights`` [k, n].

    Cases are sorted once by score; per row, ``below`` is the cumulative
    negative weight strictly below a case's tie block and ``tie`` the negative
    weight inside it, so ``U = sum_pos w_i (below_i + tie_i / 2)``.
    """
    if len(scores) == 0:
        zeros = np.zeros(weights.shape[0])
        return zeros, zeros, zeros
    order = np.argsort(scores, kind="stable")
    s_sorted = scores[order]
    pos_sorted = positive[order]
    new_block = np.r_[True, s_sorted[1:] != s_sorted[:-1]]
    block = np.cumsum(new_block) - 1                       # tie-block id per sorted position
    starts = np.flatnonzero(new_block)                      # first position of each block
    ends = np.r_[starts[1:], len(s_sorted)]                 # one past the last position
    w = weights[:, order].astype(np.float64, copy=False)
    w_neg = np.where(pos_sorted, 0.0, w)
    w_pos = w - w_neg
    cum = np.zeros((w.shape[0], w.shape[1] + 1))
    np.cumsum(w_neg, axis=1, out=cum[:, 1:])
    below = cum[:, starts][:, block]
    tie = (cum[:, ends] - cum[:, starts])[:, block]
    u = np.einsum("kn,kn->k", w_pos, below + 0.5 * tie)
    return u, w_pos.sum(axis=1), w_neg.sum(axis=1)


def weighted_auc(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray,
                 weights: Sequence[float] | np.ndarray) -> float:
    """Weighted tie-aware AUC (weighted Mann-Whitney U-statistic).

    ``AUC_w = sum_{i pos, j neg} w_i w_j [1{s_i > s_j} + 1/2 1{s_i = s_j}]
    / (sum_pos w * sum_neg w)``. With integer weights it equals :func:`auc` on
    the data with case ``i`` repeated ``w_i`` times (bootstrap multiplicities).
    NaN if the positive or the negative weight total is zero.
    """
    s = _as_scores(scores)
    y = _as_labels(labels, len(s))
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != s.shape:
        raise ValueError(f"weights have shape {w.shape}, scores have shape {s.shape}")
    if np.any(w < 0) or not np.all(np.isfinite(w)):
        raise ValueError("weights must be finite and non-negative")
    u, w_pos, w_neg = _weighted_u_columns(s, y, w[None, :])
    denominator = w_pos[0] * w_neg[0]
    return float(u[0] / denominator) if denominator > 0 else float("nan")


# --------------------------------------------------------------------------- group bootstrap


@dataclass(frozen=True, eq=False)
class GroupBootstrap(Sequence[np.ndarray]):
    """Seeded whole-group bootstrap draws, stored compactly.

    Behaves as a read-only sequence of ``n_draws`` index arrays (``boot[d]`` =
    the case indices of draw ``d``, with multiplicity), but keeps only the
    sampled group ids, so 10,000 draws of 300 cases cost ``n_draws x n_groups``
    integers.

    Attributes
    ----------
    groups : ndarray of shape (n_groups,)
        The distinct group labels, sorted; group id ``g`` is ``groups[g]``.
    case_group : ndarray of shape (n_cases,)
        Group id of every case.
    draws : ndarray of shape (n_draws, n_groups)
        Sampled group ids per draw (with replacement; within strata if given).
    """

    groups: np.ndarray
    case_group: np.ndarray
    draws: np.ndarray

    def __len__(self) -> int:
        return int(self.draws.shape[0])

    def __getitem__(self, d):  # type: ignore[override]
        if isinstance(d, slice):
            return [self[i] for i in range(*d.indices(len(self)))]
        members = self._members
        return np.concatenate([members[g] for g in self.draws[d]]) if self.draws.shape[1] else np.empty(0, np.intp)

    def __iter__(self) -> Iterator[np.ndarray]:
        for d in range(len(self)):
            yield self[d]

    @property
    def n_cases(self) -> int:
        return int(len(self.case_group))

    @cached_property
    def _members(self) -> list[np.ndarray]:
        """Case indices of every group id."""
        order = np.argsort(self.case_group, kind="stable")
        bounds = np.searchsorted(self.case_group[order], np.arange(1, len(self.groups)))
        return np.split(order, bounds)

    def group_counts(self, rows: slice | np.ndarray = slice(None)) -> np.ndarray:
        """How many times each group is drawn: int array [draws in ``rows``, n_groups]."""
        sampled = self.draws[rows]
        k, n_groups = sampled.shape[0], len(self.groups)
        flat = (np.arange(k)[:, None] * n_groups + sampled).ravel()
        return np.bincount(flat, minlength=k * n_groups).reshape(k, n_groups)

    def weights(self, rows: slice | np.ndarray = slice(None)) -> np.ndarray:
        """Case multiplicities: int array [draws in ``rows``, n_cases] (= count of the case's group)."""
        return self.group_counts(rows)[:, self.case_group]


def group_bootstrap_indices(groups: Sequence[Any] | np.ndarray, n_draws: int = DRAWS,
                            seed: int | np.random.Generator = 0,
                            strata: Sequence[Any] | np.ndarray | None = None) -> GroupBootstrap:
    """Draw ``n_draws`` bootstrap resamples of whole groups with replacement.

    Every draw samples ``n_groups`` group ids (the distinct ``groups``, sorted)
    uniformly with replacement from ``np.random.default_rng(seed)`` (one
    ``rng.integers`` call of shape ``[n_draws, n_groups]``); a case's
    multiplicity is its group's count. With ``strata`` (one label per case,
    constant within a group, e.g. the D1 family or a quantity relation) each
    stratum's groups are resampled within the stratum (strata in sorted order,
    one ``rng.integers`` call each), so every draw keeps the per-stratum group
    counts. With every case its own group, ``.draws`` are case indices.

    ``seed``: an int starts a fresh generator (the same draws for the same
    groups, whoever asks); a ``np.random.Generator`` is drawn from as it stands,
    so several bootstraps can share one stream in a fixed order (BABILong's
    cells: ``rng = bootstrap_stream(seed)``, then one call per cell).

    Returns
    -------
    GroupBootstrap
        A sequence of ``n_draws`` index arrays (case indices with multiplicity),
        with ``.weights()`` giving the [n_draws, n_cases] multiplicity matrix.
    """
    if n_draws < 1:
        raise ValueError(f"n_draws must be positive, got {n_draws}")
    g = np.asarray(groups)
    if g.ndim != 1:
        raise ValueError(f"groups must be one-dimensional, got shape {g.shape}")
    labels, case_group = np.unique(g, return_inverse=True)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    if strata is None:
        draws = rng.integers(0, len(labels), size=(n_draws, len(labels)))
    else:
        st = np.asarray(strata)
        if st.shape != g.shape:
            raise ValueError(f"strata have shape {st.shape}, groups have shape {g.shape}")
        group_stratum = np.empty(len(labels), dtype=st.dtype)
        for k in range(len(labels)):
            values = np.unique(st[case_group == k])
            if len(values) != 1:
                raise ValueError(f"group {labels[k]!r} spans several strata: {values.tolist()}")
            group_stratum[k] = values[0]
        columns = []
        for stratum in np.unique(group_stratum):
            members = np.flatnonzero(group_stratum == stratum)
            columns.append(members[rng.integers(0, len(members), size=(n_draws, len(members)))])
        draws = np.concatenate(columns, axis=1)
    return GroupBootstrap(groups=labels, case_group=case_group.astype(np.intp), draws=draws.astype(np.intp))


def connected_components(sources: Mapping[Hashable, Iterable[Hashable]]) -> dict[Hashable, Hashable]:
    """Bootstrap units from shared sources: item -> its component's label, the component's first item in the
    mapping's order; two items are in one component when a chain of shared sources links them (MINTEval's
    sessions sharing a bAbI story, FactConsolidation's questions sharing an MQuAKE case).

    Example: ``connected_components({"s1": {"a"}, "s2": {"a", "b"}, "s3": {"c"}})`` is
    ``{"s1": "s1", "s2": "s1", "s3": "s3"}``.
    """
    order = {s: i for i, s in enumerate(sources)}
    parent = {s: s for s in sources}

    def root(s: Hashable) -> Hashable:
        while parent[s] != s:
            parent[s] = parent[parent[s]]
            s = parent[s]
        return s

    owner: dict[Hashable, Hashable] = {}
    for item, shared in sources.items():
        for source in shared:
            if source in owner:
                a, b = root(owner[source]), root(item)
                if a != b:
                    parent[max(a, b, key=order.__getitem__)] = min(a, b, key=order.__getitem__)
            else:
                owner[source] = item
    return {s: root(s) for s in sources}


def bootstrap_stream(seed: int) -> np.random.Generator:
    """One generator that several :func:`group_bootstrap_indices` calls draw from in turn (pass it as ``seed``)."""
    return np.random.default_rng(seed)


def group_bootstrap_weights(groups: Sequence[Any] | np.ndarray, n_draws: int = DRAWS,
                            seed: int | np.random.Generator = 0,
                            strata: Sequence[Any] | np.ndarray | None = None) -> np.ndarray:
    """Case multiplicities of :func:`group_bootstrap_indices`: int array [n_draws, n_cases].

    The weights every paired statistic of a report shares (:func:`paired_change`,
    :func:`bootstrap_mean`): one row per draw, one column per case, in the order of ``groups``.
    """
    return group_bootstrap_indices(groups, n_draws=n_draws, seed=seed, strata=strata).weights()


def weighted_sums(weights: np.ndarray, values: Sequence[float] | np.ndarray) -> np.ndarray:
    """``weights @ values`` (Float[n_draws]) with the same bits on every CPU.

    A matrix product's summation order depends on the BLAS kernel the CPU selects (AVX-512 on one
    machine, AVX2 on another), so real-valued sums differed in their last bits between machines and a
    committed summary could not be reproduced byte for byte everywhere. Here each draw's sum is
    accumulated case by case, in case order, with elementwise operations (each draw an independent
    IEEE operation, whatever the vector width). Cases with value 0 add nothing and are skipped.

    Example: ``weighted_sums(np.array([[1, 2], [0, 3]]), [0.5, 0.25])`` is ``[1.0, 0.75]``.
    """
    v = np.asarray(values, dtype=float)
    if weights.shape[1] != v.shape[0]:
        raise ValueError(f"{weights.shape[1]} weight columns for {v.shape[0]} values")
    out = np.zeros(weights.shape[0])
    for j in np.flatnonzero(v):
        out += weights[:, j] * v[j]
    return out


def bootstrap_mean(values: Sequence[float] | np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per-draw mean of the drawn cases' ``values`` (NaN = the case has no value): float array.

    ``weights``: case multiplicities [n_draws, n_cases] (:func:`group_bootstrap_weights`).
    A draw's mean is ``sum_i w_i v_i / sum_i w_i`` over the cases with a value;
    draws holding none of them are dropped, so the result may be shorter than ``n_draws``.
    """
    v = np.asarray(values, dtype=float)
    present = ~np.isnan(v)
    w = weights * present
    with np.errstate(invalid="ignore", divide="ignore"):
        means = weighted_sums(w, np.where(present, v, 0.0)) / w.sum(axis=1)
    return means[~np.isnan(means)]


def balanced_mean(values: Sequence[float] | np.ndarray, strata: Sequence[Any] | np.ndarray,
                  weights: np.ndarray | None = None) -> float | np.ndarray:
    """Mean over strata of each stratum's mean, the strata weighted equally (the paper's eight
    wording patterns): a float, or with ``weights`` ([n_draws, n_cases] multiplicities drawn within
    strata, :func:`group_bootstrap_weights` with ``strata``) one value per draw.

    Example: ``balanced_mean([1, 3, 10], ["a", "a", "b"])`` is ``(2 + 10) / 2 = 6``.
    """
    v = np.asarray(values, dtype=float)
    st = np.asarray(strata)
    if st.shape != v.shape:
        raise ValueError(f"strata have shape {st.shape}, values have shape {v.shape}")
    labels = np.unique(st)
    if weights is None:
        return float(np.mean([v[st == s].mean() for s in labels]))
    if weights.shape[1] != len(v):
        raise ValueError(f"{weights.shape[1]} bootstrap columns for {len(v)} values")
    per_stratum = [weighted_sums(weights[:, st == s], v[st == s]) / weights[:, st == s].sum(axis=1) for s in labels]
    return np.mean(per_stratum, axis=0)


# --------------------------------------------------------------------------- intervals


def percentile_points(alpha: float = ALPHA, points: str = "level") -> tuple[float, float]:
    """The two percentile points (0-100) of a two-sided ``1 - alpha`` interval.

    ``points="alpha"``: ``100 alpha / 2`` and ``100 (1 - alpha / 2)`` (2.5 and 97.5 at alpha 0.05).
    ``points="level"``: the paired-change convention, from the level ``1 - alpha``:
    ``tail = 100 (1 - level) / 2`` and ``100 - tail`` (2.500000000000002 and 97.5 at 0.05).
    The two give the same interval but for the last bits of the lower bound; committed
    summaries were written with both, so each caller keeps its own.
    """
    if points == "alpha":
        return 100 * alpha / 2, 100 * (1 - alpha / 2)
    if points == "level":
        tail = 100 * (1 - (1 - alpha)) / 2
        return tail, 100 - tail
    raise ValueError(f"points must be 'level' or 'alpha', got {points!r}")


def percentile_interval(values: Sequence[float] | np.ndarray, alpha: float = ALPHA, points: str = "level"
                        ) -> list[float]:
    """Two-sided percentile interval ``[lo, hi]`` of bootstrap values (numpy's linear interpolation).

    ``points`` names how the two percentile points follow from ``alpha`` (:func:`percentile_points`).
    """
    lo, hi = percentile_points(alpha, points)
    return [float(np.percentile(values, lo)), float(np.percentile(values, hi))]


def one_sided_lower(values: Sequence[float] | np.ndarray, alpha: float = ALPHA) -> float:
    """One-sided ``1 - alpha`` lower bound of bootstrap values: their ``100 alpha`` percentile (numpy's linear
    interpolation), e.g. the paper's L.95 (the 5th percentile at alpha 0.05)."""
    return float(np.percentile(values, 100 * alpha))


# --------------------------------------------------------------------------- paired changes


class PairedChange(TypedDict):
    """:func:`paired_change`: the change in a sum against the reference, the cases that went up and down, and
    the change's percentile interval (a summary's ``*_change_vs_*`` entries)."""

    change: int | float
    corrections: int
    reversals: int
    ci: list[float]


class MeanChangePP(TypedDict):
    """:func:`mean_change_pp`: a paired change as a mean in percentage points and its percentile interval."""

    pp: float
    ci: list[float]


def paired_change(outcomes: Sequence[float] | np.ndarray, reference: Sequence[float] | np.ndarray,
                  weights: np.ndarray, alpha: float = ALPHA) -> PairedChange:
    """Change in the sum of ``outcomes`` (one condition's) against ``reference`` (case-aligned 0/1 or real outcomes).

    For the cases both conditions answered: the change (outcomes minus reference), its
    corrections (cases that went up) and reversals (down), and the percentile
    interval (``points="level"``) of the change over the bootstrap draws, each
    draw's change being ``weights[d] @ (outcomes - reference)``.

    Args:
        weights: bootstrap case multiplicities, int array [n_draws, n_cases]
            (:func:`group_bootstrap_weights`; the same for every condition of a report, so cells are comparable).
    """
    diff = np.asarray(outcomes, dtype=float) - np.asarray(reference, dtype=float)
    if weights.shape[1] != len(diff):
        raise ValueError(f"{weights.shape[1]} bootstrap columns for {len(diff)} paired cases")
    change = float(diff.sum())
    return {"change": int(change) if change.is_integer() else change, "corrections": int((diff > 0).sum()),
            "reversals": int((diff < 0).sum()), "ci": percentile_interval(weighted_sums(weights, diff), alpha)}


def mean_change_pp(values: Sequence[float] | np.ndarray, draw_sums: np.ndarray, draw_sizes: np.ndarray,
                   alpha: float = ALPHA) -> MeanChangePP:
    """A paired change as a mean in percentage points: ``pp``, 100 x the mean of ``values`` (one per case, e.g.
    the 0/1 differences between a condition and its reference), and ``ci``, the percentile interval of 100 x each
    bootstrap draw's mean, ``draw_sums[d] / draw_sizes[d]`` (the drawn cases' value sum over their number, e.g.
    ``weights @ values`` and ``weights.sum(axis=1)``); draws holding no case are dropped.

    :func:`paired_change` gives the change in counts; this the change in the mean when draws differ in size.

    Example: ``mean_change_pp([1.0, 0.0], np.array([2.0, 1.0, 0.0]), np.array([2, 2, 2]))["pp"]`` is ``50.0``.
    """
    sizes = np.asarray(draw_sizes, dtype=float)
    keep = sizes > 0
    draws = 100.0 * np.asarray(draw_sums, dtype=float)[keep] / sizes[keep]
    return {"pp": float(100.0 * np.mean(values)), "ci": percentile_interval(draws, alpha)}


# --------------------------------------------------------------------------- small samples

#: An interval resting on fewer resampled units than this is flagged in its report
#: (``studies.common.report.small_sample_note``): a percentile bootstrap over a handful of units is too narrow.
MIN_RESAMPLED_UNITS = 20
#: Questions are never resampled inside fewer histories than this: questions of one history are not
#: independent, so with fewer histories a report resamples histories or gives no interval.
MIN_HISTORIES = 5


def small_sample(units: int) -> bool:
    """Whether an interval over ``units`` resampled units (groups, histories, questions) is flagged:
    ``units < MIN_RESAMPLED_UNITS``."""
    return units < MIN_RESAMPLED_UNITS


def may_resample_within(histories: int) -> bool:
    """Whether questions may be resampled inside ``histories`` histories: ``histories >= MIN_HISTORIES``."""
    return histories >= MIN_HISTORIES


# --------------------------------------------------------------------------- binomial bounds


def clopper_pearson(k: int, n: int, alpha: float = ALPHA) -> list[float] | None:
    """Exact binomial two-sided interval for k successes in n trials (None if n = 0)."""
    if n == 0:
        return None
    from scipy.stats import beta

    lo = 0.0 if k == 0 else float(beta.ppf(alpha / 2, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - alpha / 2, k + 1, n - k))
    return [lo, hi]


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts of paired 0/1 outcomes (``b``: only the
    arm right, ``c``: only the reference right): min(1, 2 P(Bin(b + c, 1/2) <= min(b, c))); 1 when b + c = 0.

    The paper's "exact McNemar" (e.g. 5 discordant pairs against 0 gives p = 0.06, seed L4243)::

        >>> round(mcnemar_exact(5, 0), 4)
        0.0625
    """
    if b < 0 or c < 0:
        raise ValueError(f"discordant counts must be non-negative, got {b} and {c}")
    if b + c == 0:
        return 1.0
    from scipy.stats import binom

    return float(min(1.0, 2.0 * binom.cdf(min(b, c), b + c, 0.5)))


def sign_test(above: int, below: int) -> float:
    """Exact two-sided sign test of ``above`` positive against ``below`` negative paired differences (ties
    dropped before): :func:`mcnemar_exact` on those counts, min(1, 2 P(Bin(n, 1/2) <= min)).

    The paper's operation benchmark: the mask's median above keeping the cache in 18 of 20 cells (seed
    L6409-6427, spec partE E5: p = 0.0004)::

        >>> round(sign_test(18, 2), 4)
        0.0004
    """
    return mcnemar_exact(above, below)


def fisher_exact(table: Sequence[Sequence[int]], alpha: float = ALPHA) -> dict[str, Any]:
    """Two-sided Fisher exact test of a 2 x 2 count table ``[[a, b], [c, d]]``, with the conditional
    maximum-likelihood odds ratio and its exact (1 - alpha) interval (the paper's "conditional odds
    ratios ... (Fisher p)", seed L4267): ``{"odds_ratio", "ci", "p", "table"}``; an odds ratio or
    interval end that is undefined or infinite (a zero margin) is None."""
    from scipy.stats import fisher_exact as _fisher
    from scipy.stats.contingency import odds_ratio

    t = np.asarray(table, dtype=np.int64)
    if t.shape != (2, 2) or (t < 0).any():
        raise ValueError(f"a 2 x 2 table of non-negative counts is needed, got {table!r}")
    result = odds_ratio(t, kind="conditional")
    ci = result.confidence_interval(confidence_level=1 - alpha)
    def finite(x: float) -> float | None:  # JSON has no NaN or infinity: an undefined or unbounded end is None
        return float(x) if np.isfinite(x) else None

    return {"odds_ratio": finite(result.statistic), "ci": [finite(ci.low), finite(ci.high)],
            "p": float(_fisher(t).pvalue), "table": t.tolist()}


def zero_failure_bound(n: int, alpha: float = ALPHA) -> float:
    """Exact one-sided upper bound on a rate with zero observed failures in n trials: 1 - alpha^(1/n)."""
    return 1.0 - alpha ** (1.0 / n) if n > 0 else float("nan")


# --------------------------------------------------------------------------- thresholds


def youden_thresholds(scores: Sequence[float] | np.ndarray, labels: Sequence[int] | np.ndarray,
                      grid: Sequence[float], weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The grid threshold maximizing Youden's J of the rule "flag when score > t", for every row of ``weights``.

    With positive weight ``P``, negative weight ``N`` and the flagged weights ``TP`` (positives) and ``FP``
    (negatives) of a row, ``J(t) = TP/P - FP/N = (TP N - FP P) / (P N)``; the numerator is compared, so
    integer weights (bootstrap multiplicities) tie exactly, and ties go to the largest ``t`` (the paper's
    held-out tau, seed L4147-4150: refit inside each draw in its bootstrap variant).

    Args:
        weights: case multiplicities [rows, n] (``GroupBootstrap.weights()``); None: one row of ones.

    Returns:
        ``(thresholds, j)``, float arrays [rows]; NaN where a row has no positive or no negative weight.
    """
    s = _as_scores(scores)
    y = _as_labels(labels, len(s))
    w = np.ones((1, len(s))) if weights is None else np.asarray(weights, dtype=np.float64)
    if w.ndim != 2 or w.shape[1] != len(s):
        raise ValueError(f"weights must have shape (rows, {len(s)}), got {w.shape}")
    g = np.asarray(grid, dtype=np.float64)
    flagged = (s[None, :] > g[:, None]).astype(np.float64)  # [grid, n]
    w_pos, w_neg = w * y, w * ~y
    p, n = w_pos.sum(axis=1), w_neg.sum(axis=1)
    numerator = (w_pos @ flagged.T) * n[:, None] - (w_neg @ flagged.T) * p[:, None]  # [rows, grid]
    best = len(g) - 1 - np.argmax(numerator[:, ::-1], axis=1)  # the last maximum: ties to the largest t
    rows = np.arange(len(w))
    defined = (p > 0) & (n > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        j = numerator[rows, best] / (p * n)
    return np.where(defined, g[best], np.nan), np.where(defined, j, np.nan)


def bootstrap_auc_draws(scores: dict[str, Any], labels: Sequence[int] | np.ndarray,
                        bootstrap: GroupBootstrap, strata: Sequence[Any] | np.ndarray | None = None,
                        chunk_size: int = 2_000) -> dict[str, np.ndarray]:
    """Per-draw (macro) AUC of every score on the same draws: {name: float array [n_draws]}.

    The AUC of a draw is the weighted U-statistic with the draw's case
    multiplicities as weights (see :func:`weighted_auc`); with ``strata`` it is
    the mean of the per-stratum weighted AUCs. Draws with an empty class (in
    any stratum) are NaN for every score. Draws are processed in chunks of
    ``chunk_size`` to bound memory (``chunk_size x n_cases`` floats).
    """
    if not scores:
        raise ValueError("scores is empty")
    vectors = {name: _as_scores(v, f"scores[{name!r}]") for name, v in scores.items()}
    n = bootstrap.n_cases
    for name, v in vectors.items():
        if len(v) != n:
            raise ValueError(f"scores[{name!r}] has {len(v)} cases, the bootstrap has {n}")
    y = _as_labels(labels, n)
    if strata is None:
        cases_by_stratum = [np.arange(n)]
    else:
        st = np.asarray(strata)
        if st.shape != (n,):
            raise ValueError(f"strata have shape {st.shape}, expected ({n},)")
        cases_by_stratum = [np.flatnonzero(st == k) for k in np.unique(st)]
    out = {name: np.empty(len(bootstrap)) for name in vectors}
    for start in range(0, len(bootstrap), chunk_size):
        rows = slice(start, min(start + chunk_size, len(bootstrap)))
        weights = bootstrap.weights(rows)
        sums = {name: np.zeros(weights.shape[0]) for name in vectors}
        for cases in cases_by_stratum:
            w = weights[:, cases]
            for name, v in vectors.items():
                u, w_pos, w_neg = _weighted_u_columns(v[cases], y[cases], w)
                denominator = w_pos * w_neg
                with np.errstate(invalid="ignore", divide="ignore"):
                    sums[name] += np.where(denominator > 0, u / np.where(denominator > 0, denominator, 1.0), np.nan)
        for name in vectors:
            out[name][rows] = sums[name] / len(cases_by_stratum)
    return out


def bootstrap_auc(scores: dict[str, Any], labels: Sequence[int] | np.ndarray,
                  groups: Sequence[Any] | np.ndarray, n_draws: int = DRAWS, seed: int = 0,
                  alpha: float = ALPHA, strata: Sequence[Any] | np.ndarray | None = None) -> dict[str, Any]:
    """Group-bootstrap percentile intervals of AUCs and of their paired differences.

    Whole groups are resampled with replacement (:func:`group_bootstrap_indices`,
    within ``strata`` if given); every score is evaluated on the same draws as
    a multiplicity-weighted U-statistic (macro over ``strata`` if given, as
    D1's per-family macro AUC). Draws with an empty class are dropped for all
    scores and counted.

    Returns
    -------
    dict
        ``{"auc": {name: {"auc", "lo", "hi", "lower_one_sided"}},
        "diff": {a: {b: {"diff", "lo", "hi", "lower_one_sided"}}},
        "n_draws": int, "dropped_draws": int, "alpha": float}``.
        ``auc`` is the point estimate on the original data (:func:`auc` or
        :func:`macro_auc`); ``lo``/``hi`` are the alpha/2 and 1 - alpha/2
        percentiles of the kept draws; ``lower_one_sided`` the alpha
        percentile. ``diff[a][b]`` is AUC(a) - AUC(b), its interval taken over
        the per-draw differences on the same draws, for every ordered pair
        ``a != b``. Bounds are NaN if every draw was dropped.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    boot = group_bootstrap_indices(groups, n_draws=n_draws, seed=seed, strata=strata)
    per_draw = bootstrap_auc_draws(scores, labels, boot, strata=strata)
    kept = ~np.any(np.isnan(np.stack(list(per_draw.values()))), axis=0)

    def bounds(values: np.ndarray) -> list[float]:
        values = values[kept]
        if not len(values):
            return [float("nan")] * 3
        return [*percentile_interval(values, alpha, points="alpha"), one_sided_lower(values, alpha)]

    point = {name: (auc(v, labels) if strata is None else macro_auc(v, labels, strata)) for name, v in scores.items()}
    result: dict[str, Any] = {"auc": {}, "diff": {}, "n_draws": int(n_draws),
                              "dropped_draws": int((~kept).sum()), "alpha": float(alpha)}
    for name in scores:
        lo, hi, lower = bounds(per_draw[name])
        result["auc"][name] = {"auc": point[name], "lo": lo, "hi": hi, "lower_one_sided": lower}
    for a in scores:
        result["diff"][a] = {}
        for b in scores:
            if a == b:
                continue
            lo, hi, lower = bounds(per_draw[a] - per_draw[b])
            result["diff"][a][b] = {"diff": point[a] - point[b], "lo": lo, "hi": hi, "lower_one_sided": lower}
    return result
