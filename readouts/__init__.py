"""kvprobe.readouts: pure-math readout layer (paper partB sections 2 and 3), numpy-first.

Fixed scores (:mod:`readouts.fixed`)
    key_similarity(keys_a, keys_b) -> float                 s_K, best-match key cosine (matching)
    value_distance(values_a, values_b) -> float             d_V, relative RMS of pooled V (replacement)
    per_head_value_distance(values_a, values_b) -> [L, H]   d_V restricted to one (layer, head)
    token_jaccard(ids_a, ids_b) -> float                    surface baseline: set Jaccard of token ids
    char_distance(a, b) -> float                            surface baseline: Levenshtein / longer length
    select_head(per_head_dev, y_dev, groups=None) -> (layer, head, sign)
    select_sign(scores_dev, y_dev, groups=None) -> +1 | -1

Statistics (:mod:`readouts.stats`, the statistics of every study too)
    auc(scores, labels) -> float                            tie-aware Mann-Whitney AUC
    auc_two_samples(positives, negatives) -> float          the same, from two samples
    weighted_auc(scores, labels, weights) -> float          weighted U-statistic
    macro_auc(scores, labels, strata) -> float              mean of per-stratum AUCs
    group_bootstrap_indices(groups, n_draws, seed, strata) -> GroupBootstrap
    group_bootstrap_weights(groups, n_draws, seed, strata) -> [n_draws, n_cases] multiplicities
    bootstrap_mean(values, weights) -> per-draw means       (NaN values left out)
    bootstrap_auc_draws(scores, labels, bootstrap, strata) -> {name: AUC per draw}
    bootstrap_auc(scores, labels, groups, n_draws, seed, alpha, strata) -> dict
    paired_change(outcomes, reference, weights) -> dict          change, corrections, reversals, interval
    mean_change_pp(values, draw_sums, draw_sizes) -> dict   a paired change as a mean in pp, with its interval
    percentile_interval(values, alpha, points) -> [lo, hi]
    one_sided_lower(values, alpha) -> float                 one-sided lower bound (the paper's L.95)
    youden_thresholds(scores, labels, grid, weights) -> (t, J) per draw   max Youden J, ties to the largest t
    clopper_pearson(k, n), zero_failure_bound(n)            exact binomial bounds
    DRAWS, ALPHA, PAPER_SEED, REPORT_SEED                   the paper's draws and interval seeds
    GroupBootstrap                                          compact sequence of group-bootstrap draws

Readouts of a store group or arrays (:mod:`readouts.estimators`, scikit-learn classifiers)
    KeySimilarity(sign="select", select_split=None)         s_K of A alone vs B alone; fit picks the sign
    ValueDistance(sign="select", select_split=None)         d_V of A alone vs B alone; fit picks the sign
    HeadValueDistance(sign="select", select_split=None)     d_V of one (layer, head); fit picks head and sign
    Probe(features="joint_kv", probe=None, C=None, C_grid, train_split=None, select_split=None)
                                                            a learned probe; C chosen on select_split
    (split None: every row, whatever the group's split names; name one to hold rows out)
    r.fit(group) / r.fit(X, y, splits=...); r.decision_function(group); r.auc(group, split="test")
    transfer(readout, other_group, split=None, reference=None) -> dict      (:mod:`readouts.transfers`)
    edit_transfer(original, edited, readout=..., split=None) -> dict       across cache edits

Probes (:mod:`readouts.probes`, scikit-learn estimators on arrays)
    RademacherProjection(n_components=128, seed=PROBE_SEED)  PROBE_SEED, PAIR_SEED, INTERACTION_SEED: 20260910/15/16
    BalancedL2Probe(C=1.0, n_components=128, seed=20260910, max_iter=5000)
    PairwiseProbe(C=1.0, kind="interaction", pair_components=64, ...)
    pairwise_features(h_a, h_b, kind="interaction") -> ndarray
    select_C(X_train, y_train, X_dev, y_dev, C_grid, dev_mask, estimator, **probe_params)
    rademacher_matrix(n_features_in, n_components, seed) -> ndarray

The names above load their module on first use, so ``import kvprobe.readouts.stats`` (the
command line's seeds) does not pull in scikit-learn or scipy.
"""

from __future__ import annotations

import importlib
from typing import Any

#: Exported name -> the submodule defining it.
_EXPORTS = {
    **dict.fromkeys(("char_distance", "key_similarity", "per_head_value_distance", "select_head", "select_sign",
                     "token_jaccard", "value_distance"), "fixed"),
    **dict.fromkeys(("BalancedL2Probe", "PairwiseProbe", "RademacherProjection", "pairwise_features",
                     "rademacher_matrix", "select_C"), "probes"),
    **dict.fromkeys(("GroupReadout", "HeadValueDistance", "KeySimilarity", "Probe", "ValueDistance"), "estimators"),
    **dict.fromkeys(("edit_transfer", "transfer"), "transfers"),
    **dict.fromkeys(("GroupBootstrap", "auc", "bootstrap_auc", "bootstrap_auc_draws", "group_bootstrap_indices",
                     "macro_auc", "weighted_auc"), "stats"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
