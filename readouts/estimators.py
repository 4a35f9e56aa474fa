"""Readouts as scikit-learn classifiers of record pairs, fitted on a store group or on arrays.

Every readout here is a binary classifier (``fit``, ``decision_function``,
``predict_proba``, ``predict``, plus :meth:`~GroupReadout.auc`) whose ``X`` is either a
:class:`~kvprobe.extract.StoreGroup` or an array:

* a **group**: the readout reads its own inputs from it (:meth:`~GroupReadout.inputs`),
  ``y`` defaults to ``group.labels`` and the rows of each split to ``group.splits``;
* an **array**: ``X`` is those inputs, ``y`` the labels, and ``splits`` (a fit
  argument, one name per row) says which rows train and which select; without
  ``splits`` every row does both.

Split names are the caller's: ``train_split`` trains a probe, ``select_split`` chooses
a fixed score's sign and head or a probe's C (both default None: every row, so a readout
fits any group whatever its split names; name a split to hold rows out), and ``auc(X, split=...)``,
:func:`~kvprobe.readouts.transfer` and :func:`~kvprobe.readouts.edit_transfer` test
on whichever split they are told.

Fixed scores (no training; ``fit`` only chooses, on the ``select_split`` rows):

* :class:`KeySimilarity`: s_K of A alone vs B alone (input: one column);
* :class:`ValueDistance`: d_V of A alone vs B alone (one column);
* :class:`HeadValueDistance`: d_V per (layer with rows, head) (L*H columns; ``fit``
  picks the head).

On arrays their input columns are candidate scores; ``fit`` picks the column and the
sign (``sign="select"``; or a fixed +1 / -1) with the best AUC on the selection rows,
ties to the earliest column, then +1 (as :func:`~kvprobe.readouts.select_head`).
``decision_function`` is the chosen signed score minus ``threshold_`` (the midpoint of
the two classes' mean scores on the selection rows), so ``decision_function(X) +
threshold_`` is the score itself; ``predict_proba`` is a logistic map of
``decision_function / scale_`` (a monotone squashing, not a calibration).

Learned probes (:class:`Probe`): :class:`~kvprobe.readouts.BalancedL2Probe` (default)
or :class:`~kvprobe.readouts.PairwiseProbe` on the group's ``joint_kv``,
``separate_kv`` or ``joint_hidden`` features (:func:`readouts.inputs.features`),
trained on ``train_split``, C chosen from ``C_grid`` by AUC on ``select_split``
(ties to the smaller C) unless ``C`` is given.

Example:
    >>> import numpy as np
    >>> X = np.array([[0.1], [0.9], [0.2], [0.8]]); y = np.array([0, 1, 0, 1])
    >>> r = ValueDistance().fit(X, y)
    >>> r.sign_, r.predict(X).tolist(), r.auc(X, y)
    (1, [0, 1, 0, 1], 1.0)
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from kvprobe.extract import StoreGroup

from .fixed import _signed_criterion
from .inputs import FEATURE_SETS, features, head_value_distances, key_similarity_scores, value_distance_scores
from .probes import C_GRID, BalancedL2Probe, select_C
from .stats import auc as _auc

__all__ = ["GroupReadout", "HeadValueDistance", "KeySimilarity", "Probe", "ValueDistance"]


class GroupReadout(ClassifierMixin, BaseEstimator):
    """What every readout shares: group or array input, split rows, binary classes, :meth:`auc`.

    Subclasses define :meth:`_group_inputs` (a group's input array) and ``fit``.
    """

    def _group_inputs(self, group: StoreGroup) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def inputs(self, X: Any) -> Any:
        """The readout's input array of ``X``: read from a store group, or ``X`` itself.

        Example:
            >>> ValueDistance().inputs(np.zeros((2, 1))).shape
            (2, 1)
        """
        return self._group_inputs(X) if isinstance(X, StoreGroup) else X

    def _prepare_fit(self, X: Any, y: Any, splits: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Validated inputs, 0/1 labels (1 = ``classes_[1]``) and the split name of every row (or None)."""
        if isinstance(X, StoreGroup):
            y = X.labels if y is None else y
            splits = X.splits if splits is None else splits
        X, y = validate_data(self, self.inputs(X), y, reset=True, dtype=np.float64)
        check_classification_targets(y)
        classes = np.unique(y)
        if len(classes) > 2:
            raise ValueError(f"Only binary classification is supported. {type(self).__name__} got "
                             f"{len(classes)} classes: {classes.tolist()[:5]}")
        if len(classes) < 2:
            raise ValueError(f"{type(self).__name__} needs both classes; the labels have 1 class: {classes.tolist()}")
        self.classes_ = classes
        if splits is not None:
            splits = np.asarray(splits)
            if splits.shape != (len(y),):
                raise ValueError(f"splits has shape {splits.shape}; one split name per row ({len(y)}) expected")
        return X, (y == classes[1]).astype(np.int64), splits

    @staticmethod
    def _rows(splits: np.ndarray | None, name: str | None, n: int, role: str) -> np.ndarray:
        """Rows of split ``name`` (every row without splits or without a name)."""
        if splits is None or name is None:
            return np.ones(n, dtype=bool)
        rows = splits == name
        if not rows.any():
            present = sorted(set(splits.tolist()))
            raise ValueError(f"no rows of split {name!r} to {role} (the splits present: {present})")
        return rows

    def _checked(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "classes_")
        return validate_data(self, self.inputs(X), reset=False, dtype=np.float64)

    def predict_proba(self, X: Any) -> np.ndarray:
        """Class probabilities [n, 2], columns in ``classes_`` order."""
        p = self._positive_probability(X)
        return np.column_stack([1.0 - p, p])

    def predict(self, X: Any) -> np.ndarray:
        """``classes_[1]`` where ``decision_function`` is positive, else ``classes_[0]``."""
        positive = np.asarray(self.decision_function(X)) > 0
        return self.classes_[positive.astype(int)]

    def auc(self, X: Any, y: Any = None, split: str | None = None, splits: Any = None) -> float:
        """Tie-aware AUC of ``decision_function`` against the labels, on the rows of ``split`` (all rows if None).

        For a group, ``y`` and ``splits`` default to ``group.labels`` and ``group.splits``.

        Example:
            >>> r.auc(group, split="test")  # doctest: +SKIP
            0.83
        """
        if isinstance(X, StoreGroup):
            y = X.labels if y is None else y
            splits = X.splits if splits is None else splits
        if y is None:
            raise ValueError("auc needs the labels y of an array X")
        scores = np.asarray(self.decision_function(X))
        if split is not None and splits is None:
            raise ValueError(f"split {split!r} given but no splits: pass splits= (one name per row)")
        rows = self._rows(None if splits is None else np.asarray(splits), split, len(scores), "score")
        positive = np.asarray(y) == self.classes_[1]
        return _auc(scores[rows], positive[rows])

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        return tags


class _FixedScore(GroupReadout):
    """A dev-chosen column and sign of fixed scores (the base of the three fixed readouts)."""

    def __init__(self, sign: str | int = "select", select_split: str | None = None):
        self.sign = sign
        self.select_split = select_split

    def fit(self, X: Any, y: Any = None, splits: Any = None) -> "_FixedScore":
        """Choose the column and sign with the best AUC on the ``select_split`` rows; set ``threshold_``."""
        if self.sign not in ("select", 1, -1):
            raise ValueError(f"sign must be 'select', 1 or -1, got {self.sign!r}")
        X, y, splits = self._prepare_fit(X, y, splits)
        rows = self._rows(splits, self.select_split, len(y), "choose the sign on")
        crit = _signed_criterion(X[rows], y[rows], None)  # [columns, (+1, -1)] selection AUCs
        if self.sign != "select":
            crit[:, 1 if self.sign == 1 else 0] = -np.inf  # the other direction is not a candidate
        best = int(np.nanargmax(crit.ravel()))  # first maximum in (column, +1/-1) order
        self.column_, sign_index = divmod(best, 2)
        self.sign_ = 1 if sign_index == 0 else -1
        self.select_auc_ = float(crit.ravel()[best])
        chosen = self.sign_ * X[rows, self.column_]
        self.threshold_ = float((chosen[y[rows] == 1].mean() + chosen[y[rows] == 0].mean()) / 2)
        spread = float(chosen.std())
        self.scale_ = spread if np.isfinite(spread) and spread > 0 else 1.0
        return self

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # A fixed direction is not trained: it may classify its own training rows poorly, by design.
        tags.classifier_tags.poor_score = self.sign != "select"
        return tags

    def decision_function(self, X: Any) -> np.ndarray:
        """The chosen signed score minus ``threshold_``, [n] (positive: ``classes_[1]``)."""
        X = self._checked(X)
        return self.sign_ * X[:, self.column_] - self.threshold_

    def _positive_probability(self, X: Any) -> np.ndarray:
        return expit(self.decision_function(X) / self.scale_)


class KeySimilarity(_FixedScore):
    """s_K, the symmetric best-match cosine of A's and B's cached keys (each alone), as a classifier.

    Input of a group: one column, s_K averaged over every layer with rows
    (:func:`~kvprobe.readouts.key_similarity`; larger = same entity and attribute).
    ``sign="select"`` picks the direction on ``select_split``; ``sign=1`` keeps
    the paper's (the recognition readouts' ``key similarity s_K``).

    Parameters
    ----------
    sign : "select", 1 or -1, default="select"
    select_split : str or None, default=None
        The split whose rows choose the sign (None: every row).

    Attributes
    ----------
    column_, sign_ : int
        The chosen input column (0 for a group) and direction.
    threshold_, scale_ : float
        Decision offset and the spread of the chosen score on the selection rows.
    select_auc_ : float
        AUC of the chosen signed score on the selection rows.
    classes_ : ndarray of shape (2,)
    n_features_in_ : int

    Example:
        >>> KeySimilarity(sign=1).fit(group).auc(group, split="test")  # doctest: +SKIP
    """

    def _group_inputs(self, group: StoreGroup) -> np.ndarray:
        return key_similarity_scores(group)[:, None]


class ValueDistance(_FixedScore):
    """d_V, the relative RMS distance of A's and B's token-mean pooled values (each alone), as a classifier.

    Input of a group: one column, d_V averaged over every layer with rows
    (:func:`~kvprobe.readouts.value_distance`; larger = replacement). Parameters and
    attributes as :class:`KeySimilarity`; ``sign=1`` is the recognition readouts'
    ``fixed d_V``, ``sign="select"`` their ``sign-chosen d_V``.

    Example:
        >>> ValueDistance().fit(group).sign_  # doctest: +SKIP
        1
    """

    def _group_inputs(self, group: StoreGroup) -> np.ndarray:
        return value_distance_scores(group)[:, None]


class HeadValueDistance(_FixedScore):
    """d_V of one (layer, KV head), the one with the best AUC on ``select_split``, as a classifier.

    Input of a group: L*H columns, d_V per layer with rows (``group.kv_layers`` order) and
    head (:func:`~kvprobe.readouts.per_head_value_distance`), flattened layer-major.
    Parameters and attributes as :class:`KeySimilarity`, plus, when fitted on a group,
    ``layer_`` (the decoder layer) and ``head_``; on arrays they are None.

    Example:
        >>> r = HeadValueDistance().fit(group)  # doctest: +SKIP
        >>> r.layer_, r.head_, r.sign_          # doctest: +SKIP
        (3, 1, -1)
    """

    def _group_inputs(self, group: StoreGroup) -> np.ndarray:
        per_head = head_value_distances(group)
        return per_head.reshape(len(per_head), -1)

    def fit(self, X: Any, y: Any = None, splits: Any = None) -> "HeadValueDistance":
        """Choose the (layer, head) column and sign on the ``select_split`` rows."""
        super().fit(X, y, splits)
        self.layer_ = self.head_ = None
        if isinstance(X, StoreGroup):
            layers = X.kv_layers
            n_heads = self.n_features_in_ // len(layers)
            layer_index, self.head_ = divmod(self.column_, n_heads)
            self.layer_ = layers[layer_index]
        return self


class Probe(GroupReadout):
    """A learned probe of a group's pooled features: trained on ``train_split``, C chosen on ``select_split``.

    Parameters
    ----------
    features : {"joint_kv", "separate_kv", "joint_hidden"}, default="joint_kv"
        What a group gives it (:func:`readouts.inputs.features`): K and V of B read after
        A at four depths, of A alone and B alone side by side (the pairwise probes' input),
        or the hidden states of B read after A at four depths.
    probe : estimator with a ``C`` parameter, default=None
        Cloned for every fit: :class:`~kvprobe.readouts.BalancedL2Probe` when None, or e.g.
        ``PairwiseProbe(kind="interaction")`` (with ``features="separate_kv"``).
    C : float or None, default=None
        None: choose from ``C_grid`` by AUC on ``select_split`` (ties to the smaller C).
    C_grid : sequence of float, default=(0.01, 0.1, 1, 10)
    train_split, select_split : str or None, default=None
        Split names of the rows that train and that choose C (None: every row).

    Attributes
    ----------
    probe_ : the fitted probe
    C_ : float
        Its C.
    select_auc_by_C_ : dict
        ``{C: AUC on the selection rows}`` (empty when C was given).
    classes_, n_features_in_

    Example:
        >>> p = Probe("joint_kv").fit(group)            # doctest: +SKIP
        >>> p.C_, p.auc(group, split="test")             # doctest: +SKIP
        (0.1, 0.9)
    """

    def __init__(self, features: str = "joint_kv", probe: Any = None, C: float | None = None,
                 C_grid: Sequence[float] = C_GRID, train_split: str | None = None,
                 select_split: str | None = None):
        self.features = features
        self.probe = probe
        self.C = C
        self.C_grid = C_grid
        self.train_split = train_split
        self.select_split = select_split

    def _group_inputs(self, group: StoreGroup) -> np.ndarray:
        if self.features not in FEATURE_SETS:
            raise ValueError(f"features {self.features!r}: one of {FEATURE_SETS}")
        return features(group, self.features)

    def fit(self, X: Any, y: Any = None, splits: Any = None) -> "Probe":
        """Train on the ``train_split`` rows; choose C on the ``select_split`` rows unless ``C`` is set."""
        X, y, splits = self._prepare_fit(X, y, splits)
        train = self._rows(splits, self.train_split, len(y), "train on")
        template = BalancedL2Probe() if self.probe is None else self.probe
        if self.C is None:
            select = self._rows(splits, self.select_split, len(y), "choose C on")
            self.probe_, by_C = select_C(X[train], y[train], X[select], y[select], C_grid=self.C_grid,
                                         estimator=template)
            self.select_auc_by_C_ = dict(by_C)
        else:
            self.probe_ = clone(template).set_params(C=self.C).fit(X[train], y[train])
            self.select_auc_by_C_ = {}
        self.C_ = float(self.probe_.C)
        return self

    def decision_function(self, X: Any) -> np.ndarray:
        """The probe's log-odds of ``classes_[1]``, [n]."""
        check_is_fitted(self, "probe_")
        return np.asarray(self.probe_.decision_function(self._checked(X)))

    def _positive_probability(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "probe_")
        return self.probe_.predict_proba(self._checked(X))[:, 1]
