"""kvprobe.readouts: pure-math readout layer (paper partB sections 2 and 3), numpy-first.

Fixed scores (:mod:`readouts.fixed`)
    key_similarity(keys_a, keys_b) -> float                 s_K, best-match key cosine (matching)
    value_distance(values_a, values_b) -> float             d_V, relative RMS of pooled V (replacement)
    per_head_value_distance(values_a, values_b) -> [L, H]   d_V restricted to one (layer, head)
    token_jaccard(ids_a, ids_b) -> float                    surface baseline: set Jaccard of token ids
    char_distance(a, b) -> float                            surface baseline: Levenshtein / longer length
    select_head(per_head_dev, y_dev, groups=None) -> (layer, head, sign)
    select_sign(scores_dev, y_dev, groups=None) -> +1 | -1

Statistics (:mod:`readouts.stats`)
    auc(scores, labels) -> float                            tie-aware Mann-Whitney AUC
    weighted_auc(scores, labels, weights) -> float          weighted U-statistic
    macro_auc(scores, labels, strata) -> float              mean of per-stratum AUCs
    group_bootstrap_indices(groups, n_draws, seed, strata) -> GroupBootstrap
    bootstrap_auc_draws(scores, labels, bootstrap, strata) -> {name: AUC per draw}
    bootstrap_auc(scores, labels, groups, n_draws, seed, alpha, strata) -> dict
    GroupBootstrap                                          compact sequence of group-bootstrap draws

Probes (:mod:`readouts.probes`, scikit-learn estimators)
    RademacherProjection(n_components=128, seed=20260910)
    BalancedL2Probe(C=1.0, n_components=128, seed=20260910, max_iter=5000)
    PairwiseProbe(C=1.0, kind="interaction", pair_components=64, ...)
    pairwise_features(h_a, h_b, kind="interaction") -> ndarray
    select_C(X_train, y_train, X_dev, y_dev, C_grid, dev_mask, estimator, **probe_params)
    rademacher_matrix(n_features_in, n_components, seed) -> ndarray
"""

from .fixed import (
    char_distance,
    key_similarity,
    per_head_value_distance,
    select_head,
    select_sign,
    token_jaccard,
    value_distance,
)
from .probes import (
    BalancedL2Probe,
    PairwiseProbe,
    RademacherProjection,
    pairwise_features,
    rademacher_matrix,
    select_C,
)
from .stats import (
    GroupBootstrap,
    auc,
    bootstrap_auc,
    bootstrap_auc_draws,
    group_bootstrap_indices,
    macro_auc,
    weighted_auc,
)

__all__ = [
    "BalancedL2Probe",
    "GroupBootstrap",
    "PairwiseProbe",
    "RademacherProjection",
    "auc",
    "bootstrap_auc",
    "bootstrap_auc_draws",
    "char_distance",
    "group_bootstrap_indices",
    "key_similarity",
    "macro_auc",
    "pairwise_features",
    "per_head_value_distance",
    "rademacher_matrix",
    "select_C",
    "select_head",
    "select_sign",
    "token_jaccard",
    "value_distance",
    "weighted_auc",
]
