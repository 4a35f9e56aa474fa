"""Learned readouts of pooled K/V or hidden states (paper partB section 3), as scikit-learn estimators.

Probe (partB 3, matched capacity)::

    X --RademacherProjection(128, seed 20260910)--> StandardScaler (train only)
      --> LogisticRegression(L2, class_weight="balanced", lbfgs, C)     # 128 + 1 coefficients

with C chosen from {0.01, 0.1, 1, 10} by dev AUC (on role swaps vs role
confirmations), ties to the smaller C (:func:`select_C`).

Pairwise-feature comparison (partB 3, :class:`PairwiseProbe`): A and B go
through one shared Rademacher map to 64 dims and one standardizer fitted on
the stacked A/B training rows, then ``[h_A, h_B]`` ("linear", 128 dims) or
``[h_A, h_B, |h_A - h_B|, h_A * h_B]`` ("interaction", 256 dims, then a fixed
Rademacher map to 128), then the probe above without its own projection.

Choices where the paper is silent (partB marks them [UNCLEAR]):

- Rademacher scaling and RNG: entries are drawn as
  ``np.random.default_rng(seed).integers(0, 2, size=(n_features_in, n_components))``
  (row-major), mapped 0 -> -1 and 1 -> +1, and scaled by
  ``1 / sqrt(n_components)`` (the Johnson-Lindenstrauss scaling that keeps
  squared norms in expectation, as sklearn's random projections). The probes
  standardize after projecting, so the scale does not change any fitted
  probe's predictions; only the signs (seed, input width) matter.
- Training target and cases are the caller's (partB: presumably binary
  replacement over all 180 training cases).
- Estimator classes list the scikit-learn mixins before ``BaseEstimator``
  (sklearn's required order; the reverse order drops the estimator tags).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, clone
from sklearn.linear_model import LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.validation import check_is_fitted, validate_data

from .stats import auc

# The paper's probe seeds (partB 3), one name per use.
#: 20260910, the paper's probe seed: the Rademacher projection of every probe.
PROBE_SEED = 20260910
#: 20260915: the pairwise probe's A/B projection (:class:`PairwiseProbe`).
PAIR_SEED = 20260915
#: 20260916: the pairwise probe's interaction projection (:class:`PairwiseProbe`).
INTERACTION_SEED = 20260916

__all__ = [
    "BalancedL2Probe",
    "PairwiseProbe",
    "RademacherProjection",
    "pairwise_features",
    "rademacher_matrix",
    "select_C",
]

#: The C grid of partB 3.
C_GRID = (0.01, 0.1, 1.0, 10.0)


def rademacher_matrix(n_features_in: int, n_components: int, seed: int) -> np.ndarray:
    """The fixed ±1/sqrt(n_components) matrix R of shape (n_features_in, n_components).

    ``R = (2 * rng.integers(0, 2, size=(n_features_in, n_components)) - 1) / sqrt(n_components)``
    with ``rng = np.random.default_rng(seed)``; deterministic given the three arguments.
    """
    if n_components < 1 or n_features_in < 1:
        raise ValueError(f"need positive sizes, got n_features_in={n_features_in}, n_components={n_components}")
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2, size=(n_features_in, n_components), dtype=np.int8)
    return (2.0 * bits - 1.0) / np.sqrt(n_components)


class RademacherProjection(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Fixed random ±1 projection ``X @ R`` (partB 3).

    ``R`` has shape (n_features_in, n_components) and entries
    ±1/sqrt(n_components) drawn from ``np.random.default_rng(seed)`` (see
    :func:`rademacher_matrix`). [UNCLEAR] in the paper (scaling and RNG): our
    choice is documented in the module docstring. ``fit`` only reads the
    input width; the matrix is a function of (seed, width, n_components).

    Parameters
    ----------
    n_components : int, default=128
        Output dimension.
    seed : int, default=20260910
        Seed of ``np.random.default_rng``.

    Attributes
    ----------
    projection_ : ndarray of shape (n_features_in_, n_components)
        The matrix R.
    n_features_in_ : int
        Input width seen in ``fit``.
    """

    def __init__(self, n_components: int = 128, seed: int = PROBE_SEED):
        self.n_components = n_components
        self.seed = seed

    def fit(self, X: Any, y: Any = None) -> "RademacherProjection":
        """Draw R for the width of ``X`` (its values are not used)."""
        X = validate_data(self, X, reset=True, dtype=np.float64)
        self.projection_ = rademacher_matrix(X.shape[1], self.n_components, self.seed)
        self._n_features_out = self.n_components
        return self

    def transform(self, X: Any) -> np.ndarray:
        """Project: ``X @ projection_``, shape (n_samples, n_components)."""
        check_is_fitted(self, "projection_")
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X @ self.projection_


class BalancedL2Probe(ClassifierMixin, BaseEstimator):
    """Rademacher projection -> train-only standardization -> balanced L2 logistic regression (partB 3).

    ``p(y=1 | x) = sigmoid(w . z + b)`` with ``z = (x R - mu) / sigma``
    (mu, sigma of the projected training rows) and (w, b) minimising
    ``C * sum_i c_{y_i} logloss_i + ||w||^2 / 2`` with balanced class weights
    ``c_k = n / (2 n_k)``. With the default 128 components that is 129
    coefficients including the intercept.

    Parameters
    ----------
    C : float, default=1.0
        Inverse L2 strength of :class:`~sklearn.linear_model.LogisticRegression`.
    n_components : int or None, default=128
        Width of the Rademacher projection; None skips the projection.
    seed : int, default=20260910
        Projection seed.
    max_iter : int, default=5000
        lbfgs iterations.

    Attributes
    ----------
    pipeline_ : sklearn.pipeline.Pipeline
        Steps ``"projection"`` (or ``"passthrough"``), ``"scaler"``, ``"logreg"``.
    classes_ : ndarray of shape (n_classes,)
    coef_, intercept_ : ndarrays
        Of the logistic regression, in the standardized projected space.
    n_iter_ : ndarray of shape (1,)
        lbfgs iterations used.
    n_features_in_ : int
    """

    def __init__(self, C: float = 1.0, n_components: int | None = 128, seed: int = PROBE_SEED,
                 max_iter: int = 5000):
        self.C = C
        self.n_components = n_components
        self.seed = seed
        self.max_iter = max_iter

    def fit(self, X: Any, y: Any) -> "BalancedL2Probe":
        """Fit projection (width only), scaler and logistic regression on the training rows."""
        X, y = validate_data(self, X, y, reset=True, dtype=np.float64)
        projection = ("passthrough" if self.n_components is None
                      else RademacherProjection(n_components=self.n_components, seed=self.seed))
        self.pipeline_ = Pipeline([
            ("projection", projection),
            ("scaler", StandardScaler()),
            ("logreg", LogisticRegression(C=self.C, class_weight="balanced", solver="lbfgs",
                                          max_iter=self.max_iter)),
        ]).fit(X, y)
        logreg = self.pipeline_.named_steps["logreg"]
        self.classes_ = logreg.classes_
        self.coef_ = logreg.coef_
        self.intercept_ = logreg.intercept_
        self.n_iter_ = logreg.n_iter_
        return self

    def _checked(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "pipeline_")
        return validate_data(self, X, reset=False, dtype=np.float64)

    def decision_function(self, X: Any) -> np.ndarray:
        """Log-odds of the positive class (``classes_[1]``), shape (n_samples,)."""
        X = self._checked(X)
        return self.pipeline_.decision_function(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, shape (n_samples, n_classes), columns in ``classes_`` order."""
        X = self._checked(X)
        return self.pipeline_.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class (threshold 0.5)."""
        X = self._checked(X)
        return self.pipeline_.predict(X)


def pairwise_features(h_a: np.ndarray, h_b: np.ndarray, kind: str = "interaction") -> np.ndarray:
    """Row-wise pair features of two aligned representations h_A, h_B of shape (n, d).

    ``"linear"``: ``[h_A, h_B]`` (n, 2d); ``"interaction"``:
    ``[h_A, h_B, |h_A - h_B|, h_A * h_B]`` (n, 4d), ``*`` elementwise.
    """
    a, b = np.asarray(h_a, dtype=np.float64), np.asarray(h_b, dtype=np.float64)
    if a.ndim != 2 or a.shape != b.shape:
        raise ValueError(f"h_a and h_b must be 2-D arrays of equal shape, got {a.shape} and {b.shape}")
    if kind == "linear":
        return np.hstack([a, b])
    if kind == "interaction":
        return np.hstack([a, b, np.abs(a - b), a * b])
    raise ValueError(f"kind must be 'linear' or 'interaction', got {kind!r}")


class PairwiseProbe(ClassifierMixin, BaseEstimator):
    """Pairwise-feature comparison probe of records A and B (partB 3, retrospective).

    Input rows are ``X_pair = np.hstack([X_A, X_B])`` (equal widths, e.g. the
    8,192-dim token-mean K and V at four depths of each record). Steps, all
    fitted on the training rows only:

    1. ``h = X @ R_pair``: one shared :class:`RademacherProjection` to
       ``pair_components`` dims (seed ``pair_seed``) for A and for B.
    2. One :class:`~sklearn.preprocessing.StandardScaler` fitted on the
       stacked A and B training vectors ``[h_A; h_B]``, applied to both.
    3. :func:`pairwise_features` of ``kind``: "linear" ``[h_A, h_B]`` (128
       dims) or "interaction" ``[h_A, h_B, |h_A - h_B|, h_A * h_B]`` (256).
    4. Interaction only: a fixed Rademacher projection to
       ``interaction_components`` dims (seed ``interaction_seed``).
    5. :class:`BalancedL2Probe` without projection: train-only standardization
       and the balanced L2 logistic regression with ``C`` (129 coefficients).

    ``pair_components=None`` / ``interaction_components=None`` skip steps 1 / 4.

    Attributes
    ----------
    pair_projection_ : RademacherProjection or None
    pair_scaler_ : StandardScaler
    interaction_projection_ : RademacherProjection or None
    probe_ : BalancedL2Probe
    classes_ : ndarray of shape (n_classes,)
    n_features_in_ : int
        Width of ``X_pair`` (twice the per-record width).
    """

    def __init__(self, C: float = 1.0, kind: str = "interaction", pair_components: int | None = 64,
                 pair_seed: int = PAIR_SEED, interaction_components: int | None = 128,
                 interaction_seed: int = INTERACTION_SEED, max_iter: int = 5000):
        self.C = C
        self.kind = kind
        self.pair_components = pair_components
        self.pair_seed = pair_seed
        self.interaction_components = interaction_components
        self.interaction_seed = interaction_seed
        self.max_iter = max_iter

    def _split(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if X.shape[1] % 2:
            raise ValueError(f"X_pair must be np.hstack([X_A, X_B]) of equal widths, got odd width {X.shape[1]}")
        half = X.shape[1] // 2
        return X[:, :half], X[:, half:]

    def _features(self, X: np.ndarray) -> np.ndarray:
        x_a, x_b = self._split(X)
        if self.pair_projection_ is not None:
            x_a, x_b = self.pair_projection_.transform(x_a), self.pair_projection_.transform(x_b)
        h_a, h_b = self.pair_scaler_.transform(x_a), self.pair_scaler_.transform(x_b)
        features = pairwise_features(h_a, h_b, self.kind)
        if self.interaction_projection_ is not None:
            features = self.interaction_projection_.transform(features)
        return features

    def fit(self, X: Any, y: Any) -> "PairwiseProbe":
        """Fit steps 1-5 on the training pairs."""
        if self.kind not in ("linear", "interaction"):
            raise ValueError(f"kind must be 'linear' or 'interaction', got {self.kind!r}")
        X, y = validate_data(self, X, y, reset=True, dtype=np.float64)
        x_a, x_b = self._split(X)
        self.pair_projection_ = None
        if self.pair_components is not None:
            self.pair_projection_ = RademacherProjection(self.pair_components, self.pair_seed).fit(x_a)
            x_a, x_b = self.pair_projection_.transform(x_a), self.pair_projection_.transform(x_b)
        self.pair_scaler_ = StandardScaler().fit(np.vstack([x_a, x_b]))
        self.interaction_projection_ = None
        if self.kind == "interaction" and self.interaction_components is not None:
            width = 4 * x_a.shape[1]
            self.interaction_projection_ = RademacherProjection(self.interaction_components,
                                                                self.interaction_seed).fit(np.zeros((1, width)))
        self.probe_ = BalancedL2Probe(C=self.C, n_components=None, max_iter=self.max_iter).fit(self._features(X), y)
        self.classes_ = self.probe_.classes_
        self.n_iter_ = self.probe_.n_iter_
        return self

    def _checked(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "probe_")
        return self._features(validate_data(self, X, reset=False, dtype=np.float64))

    def decision_function(self, X: Any) -> np.ndarray:
        """Log-odds of the positive class, shape (n_samples,)."""
        X = self._checked(X)
        return self.probe_.decision_function(X)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities, shape (n_samples, n_classes)."""
        X = self._checked(X)
        return self.probe_.predict_proba(X)

    def predict(self, X: Any) -> np.ndarray:
        """Most probable class."""
        X = self._checked(X)
        return self.probe_.predict(X)


def select_C(X_train: Any, y_train: Any, X_dev: Any, y_dev: Any,
             C_grid: Sequence[float] = C_GRID, dev_mask: Any | None = None,
             estimator: BaseEstimator | None = None, **probe_params: Any
             ) -> tuple[BaseEstimator, dict[float, float]]:
    """Fit one probe per C on train, pick the C with the best dev AUC (ties -> smaller C).

    The dev score is the AUC (:func:`readouts.stats.auc`) of
    ``decision_function(X_dev)`` against ``y_dev``, restricted to the rows
    where ``dev_mask`` is true if given (partB 3: role swaps vs role
    confirmations).

    Parameters
    ----------
    X_train, y_train, X_dev, y_dev : array-likes
        Training and dev rows; labels binary (1 = positive).
    C_grid : sequence of float, default=(0.01, 0.1, 1, 10)
    dev_mask : boolean array-like of shape (n_dev,), optional
    estimator : estimator with a ``C`` parameter, optional
        Our extension: template cloned for every C (e.g. a
        :class:`PairwiseProbe`); default :class:`BalancedL2Probe`.
    **probe_params
        Further parameters set on every probe (e.g. ``n_components``, ``seed``).

    Returns
    -------
    (best_probe, dev_auc_by_C)
        The fitted probe with the chosen C, and ``{C: dev AUC}`` in grid order.

    Raises
    ------
    ValueError
        If the grid is empty or the (masked) dev rows lack a class.
    """
    if len(C_grid) == 0:
        raise ValueError("C_grid is empty")
    y_dev = np.asarray(y_dev)
    rows = np.ones(len(y_dev), dtype=bool) if dev_mask is None else np.asarray(dev_mask, dtype=bool)
    if rows.shape != y_dev.shape:
        raise ValueError(f"dev_mask has shape {rows.shape}, y_dev has shape {y_dev.shape}")
    template = BalancedL2Probe() if estimator is None else estimator
    fitted: dict[float, BaseEstimator] = {}
    scores: dict[float, float] = {}
    for C in C_grid:
        probe = clone(template).set_params(C=C, **probe_params).fit(X_train, y_train)
        fitted[float(C)] = probe
        scores[float(C)] = auc(np.asarray(probe.decision_function(X_dev))[rows], y_dev[rows])
    if all(np.isnan(v) for v in scores.values()):
        raise ValueError("dev AUC undefined: the (masked) dev rows need both classes")
    best_C = None
    for C in sorted(scores):  # ascending, a later C must be strictly better
        if best_C is None or scores[C] > scores[best_C]:
            best_C = C
    return fitted[best_C], scores
