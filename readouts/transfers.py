"""A fitted readout scoring another store group: another checkpoint, other pairs, or edited caches.

* :func:`transfer`: score ``other`` with a readout fitted on some group; AUC with a
  group-bootstrap interval on the split you name; with ``reference`` (a group of the
  same pairs, e.g. the one it was fitted on), both AUCs and their paired difference on
  the same draws.
* :func:`edit_transfer`: score the edited groups of ``original`` (``name@EDIT``, B read
  after a cache edit) with a readout fitted on ``original``; without a readout, the
  recognition records' joint K/V probe (:func:`readouts.evaluate.edit_transfer`).

Example:
    >>> probe = Probe("joint_kv").fit(store["tiny-llama/offices"])          # doctest: +SKIP
    >>> transfer(probe, store["tiny-qwen3/offices"], split="test")["auc"]  # doctest: +SKIP
"""

from __future__ import annotations

from typing import Any

import numpy as np
from sklearn.utils.validation import check_is_fitted

from kvprobe.extract import StoreError, StoreGroup

from .groups import check_edited, same_records
from .stats import DRAWS, bootstrap_auc


def _split_rows(g: StoreGroup, split: str | None, splits: Any) -> np.ndarray:
    names = g.splits if splits is None else np.asarray(splits)
    if names.shape != (len(g),):
        raise ValueError(f"splits has shape {names.shape}; one split name per case of {g.name} ({len(g)}) expected")
    if split is None:
        return np.ones(len(g), dtype=bool)
    rows = names == split
    if not rows.any():
        raise StoreError(f"{g.name}: no cases of split {split!r} (the splits present: {sorted(set(names.tolist()))})")
    return rows


def _scores(readout: Any, g: StoreGroup) -> tuple[np.ndarray, np.ndarray]:
    """(the readout's input array of ``g``, its decision function there); a width mismatch names the group."""
    check_is_fitted(readout)
    X = readout.inputs(g)
    if X.shape[1] != readout.n_features_in_:
        raise StoreError(f"{type(readout).__name__} was fitted on {readout.n_features_in_} input columns; {g.name} "
                         f"gives {X.shape[1]} (another architecture's widths)")
    return X, np.asarray(readout.decision_function(X))


def _positive(readout: Any, g: StoreGroup) -> np.ndarray:
    return (g.labels == readout.classes_[1]).astype(np.int64)


def transfer(readout: Any, other: StoreGroup, split: str | None = None, reference: StoreGroup | None = None,
             splits: Any = None, draws: int = DRAWS, seed: int = 0) -> dict[str, Any]:
    """Score ``other`` with a fitted readout; AUC on its ``split`` cases with a group-bootstrap interval.

    ``readout``: a fitted :class:`~kvprobe.readouts.Probe`, :class:`~kvprobe.readouts.ValueDistance`...
    (any readout of :mod:`readouts.estimators`), fitted on a group of the same
    architecture's widths. ``split``: the cases to test on (default None: all), by
    ``other.splits`` or ``splits`` (one name per case). ``reference``: a group of the same
    cases and token ids (e.g. the one the readout was fitted on, another checkpoint's):
    both are scored on the same bootstrap draws of ``other``'s groups, so
    ``result["auc"]["diff"]["reference"]["transferred"]`` is the AUC lost in transfer.

    Returns ``{"readout", "target", "reference", "split", "n_cases", "n_groups", "scores"
    (decision function on every case of other), "auc"}`` with ``auc`` as
    :func:`~kvprobe.readouts.bootstrap_auc` returns it (``auc["auc"]["transferred"]["auc"]``...).

    Example:
        >>> r = transfer(probe, store["tiny-qwen3/offices"], split="test", reference=store["tiny-llama/offices"])
        ... # doctest: +SKIP
        >>> r["auc"]["auc"]["transferred"]["auc"], r["auc"]["auc"]["reference"]["auc"]  # doctest: +SKIP
    """
    _, scores = _scores(readout, other)
    named = {"transferred": scores}
    if reference is not None:
        same_records(reference, other, "transfer with a reference")
        named = {"reference": _scores(readout, reference)[1], **named}
    rows = _split_rows(other, split, splits)
    y = _positive(readout, other)
    groups = other.groups
    return {"readout": repr(readout), "target": other.name, "reference": None if reference is None else reference.name,
            "split": split, "n_cases": int(rows.sum()), "n_groups": int(len(set(groups[rows]))), "scores": scores,
            "auc": bootstrap_auc({k: v[rows] for k, v in named.items()}, y[rows], groups[rows], n_draws=draws,
                                 seed=seed)}


def edit_transfer(original: StoreGroup, edited: dict[str, StoreGroup], draws: int = DRAWS, seed: int = 0, *,
                  readout: Any = None, split: str | None = None, splits: Any = None) -> dict[str, Any]:
    """Score ``original``'s cases and their edited caches (``FeatureStore.edited(name)``) with one readout.

    With ``readout`` (fitted, e.g. on ``original``; it must read B after A, as
    ``Probe("joint_kv")`` does: edited groups hold no A alone, B alone or hidden
    states): its decision function on every group, the AUCs on ``original``'s ``split``
    cases, every group on the same group-bootstrap draws (``auc["diff"]["original"][edit]``
    is the AUC lost to that edit), and per edit how far the edit moved the split's
    readout inputs (``feature_change``: Frobenius norm of the change over the original's)
    and the Pearson correlation of the original and edited scores.

    Without ``readout``: the recognition records' analysis
    (:func:`kvprobe.readouts.evaluate.edit_transfer`, ``kvprobe readout --transfer-to-edits``).

    Example:
        >>> probe = Probe("joint_kv").fit(store["tiny-llama/offices"])                      # doctest: +SKIP
        >>> r = edit_transfer(store["tiny-llama/offices"], store.edited("tiny-llama/offices"), readout=probe)
        ... # doctest: +SKIP
        >>> r["auc"]["diff"]["original"]["compact"]["diff"]                                  # doctest: +SKIP
    """
    if readout is None:
        from .evaluate import edit_transfer as records_edit_transfer

        return records_edit_transfer(original, edited, draws=draws, seed=seed)
    check_edited(original, edited)
    X, base = _scores(readout, original)
    scores = {"original": base}
    rows = _split_rows(original, split, splits)
    moved: dict[str, dict[str, float]] = {}
    for name, g in edited.items():
        Xe, scores[name] = _scores(readout, g)
        change = float(np.linalg.norm(Xe[rows] - X[rows]) / max(float(np.linalg.norm(X[rows])), 1e-30))
        moved[name] = {"feature_change": change,
                       "score_correlation": float(np.corrcoef(scores["original"][rows], scores[name][rows])[0, 1])}
    groups = original.groups
    y = _positive(readout, original)
    return {"group": original.name, "model": original.attrs.get("model"), "readout": repr(readout), "split": split,
            "edits": {name: g.edit for name, g in edited.items()},
            "edited_groups": {name: g.name for name, g in edited.items()}, "change": moved,
            "n_cases": int(rows.sum()), "n_groups": int(len(set(groups[rows]))), "scores": scores,
            "auc": bootstrap_auc({k: v[rows] for k, v in scores.items()}, y[rows], groups[rows], n_draws=draws,
                                 seed=seed)}
