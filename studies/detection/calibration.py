"""Threshold calibration of a detector on dev groups, evaluated on test groups (paper partB section 5).

A case has a detector score (D4: a YES probability), optionally a binary
label (1 = replacement, act) and a utility ``U = 1{masked correct} -
1{full correct}``. A threshold ``t`` acts on a case iff ``score >= t`` (a
threshold acts on its whole tie). Candidates are the distinct dev scores plus
one value above every score, which acts on nothing. Objectives, maximized on
dev: ``balanced_accuracy`` (mean of the recalls of label 1 and label 0) and
``utility`` (net = sum of U over acted cases = corrections - reversals); ties go
to the highest threshold (fewest dev actions). Baselines: fixed 0.5, always
(t = -inf), never. Intervals (partD section 0: 10,000 draws, seed 20260919,
percentile 95 %): *conditional* resamples test groups (optionally within
strata, e.g. relation) with the threshold fixed; *joint* resamples dev groups
and test groups independently and refits the threshold on every dev draw.

UNCLEAR choices (the paper is silent or only implies them):

- ``score >= t`` rather than ``>`` ([INFER] in the spec).
- The above-all threshold is ``max(1.0, max score) + 1``: above any
  probability and any dev score. For the *never* baseline the max also
  covers the test scores, so it acts on nothing on test; a dev-selected
  above-all threshold could act on test scores above it only if scores are not
  probabilities.
- Ties of the objective are found with an absolute tolerance of 1e-12.
- Balanced accuracy with one class absent (possible in an unstratified draw)
  is the recall of the class present; NaN when both are absent.
- In a joint draw the candidate set stays the original dev candidates: a dev
  score absent from the draw acts like the next higher candidate, so with the
  highest-threshold tie rule it is never selected and the refit equals a refit
  on the draw's own candidates.
- Joint draws reuse the conditional test draws (same seed); dev draws use the
  seed ``SeedSequence([seed, 1])``, so the two intervals differ only through dev
  resampling and refitting. Interval bounds ignore NaN draws.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from kvprobe.readouts.stats import ALPHA, DRAWS, PAPER_SEED, group_bootstrap_indices, percentile_points

__all__ = ["OBJECTIVES", "Selection", "above_all_threshold", "apply_threshold", "balanced_accuracy", "calibrate",
           "candidate_thresholds", "conditional_bootstrap", "joint_bootstrap", "select_threshold", "summarize"]

OBJECTIVES = ("balanced_accuracy", "utility")
TIE_TOLERANCE = 1e-12
Array = Sequence[float] | np.ndarray


class Selection(NamedTuple):
    """A threshold chosen on dev: its value, the dev objective there and the dev actions."""

    threshold: float
    value: float
    actions: int


def _vec(values: Any, dtype: Any = np.float64) -> np.ndarray:
    """One-dimensional array of ``dtype``."""
    v = np.asarray(values, dtype=dtype)
    if v.ndim != 1:
        raise ValueError(f"expected a one-dimensional array, got shape {v.shape}")
    return v


def above_all_threshold(*scores: Array) -> float:
    """``max(1.0, max of all scores) + 1``: a threshold that acts on none of the given scores."""
    return max([1.0] + [float(np.max(s)) for s in scores if len(s)]) + 1.0


def candidate_thresholds(dev_scores: Array) -> np.ndarray:
    """Distinct dev scores (ascending) followed by :func:`above_all_threshold` of them."""
    s = _vec(dev_scores)
    return np.r_[np.unique(s), above_all_threshold(s)]


def apply_threshold(scores: Array, threshold: float) -> np.ndarray:
    """Boolean actions ``score >= threshold``."""
    return _vec(scores) >= threshold


def _acts(scores: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Float actions [n_thresholds, n_cases]."""
    return (scores[None, :] >= thresholds[:, None]).astype(float)


def _boot(groups: Sequence[Any] | None, n: int, n_draws: int, seed: int, strata: Sequence[Any] | None) -> Any:
    """Group bootstrap (each case its own group by default)."""
    return group_bootstrap_indices(np.arange(n) if groups is None else groups, n_draws=n_draws, seed=seed,
                                   strata=strata)


def _balanced(weights: np.ndarray, act: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Balanced accuracy [D, T] for multiplicities [D, n] and actions [T, n].

    With one class absent from a draw it is the recall of the class present.
    """
    pos = labels.astype(np.float64)
    tp, fp = weights @ (act * pos).T, weights @ (act * (1 - pos)).T
    n_pos, n_neg = (weights @ pos)[:, None], (weights @ (1 - pos))[:, None]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpr, tnr = tp / n_pos, (n_neg - fp) / n_neg
    return np.where(np.isnan(tpr), tnr, np.where(np.isnan(tnr), tpr, 0.5 * (tpr + tnr)))


def balanced_accuracy(act: Array, labels: Array) -> float:
    """Mean of the recalls of label 1 (acted on) and label 0 (left alone)."""
    a, y = _vec(act, bool), _vec(labels, bool)
    return float(_balanced(np.ones((1, len(a))), a[None, :].astype(float), y)[0, 0])


def _objective(weights: np.ndarray, act: np.ndarray, target: np.ndarray, objective: str) -> np.ndarray:
    """Objective [D, T] of every candidate (rows of ``act``) on every draw (rows of ``weights``)."""
    if objective == "utility":
        return weights @ (act * target).T
    if objective == "balanced_accuracy":
        return _balanced(weights, act, target.astype(bool))
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")


def _pick(values: np.ndarray) -> np.ndarray:
    """Per row, the highest column index whose value is within TIE_TOLERANCE of the row maximum."""
    best = np.nanmax(values, axis=1, keepdims=True)
    reversed_hit = (values >= best - TIE_TOLERANCE)[:, ::-1]
    return values.shape[1] - 1 - np.argmax(reversed_hit, axis=1)


def select_threshold(dev_scores: Array, dev_target: Array, objective: str = "utility") -> Selection:
    """Maximize ``objective`` over :func:`candidate_thresholds`; ties -> highest threshold.

    ``dev_target`` is the utility (objective ``"utility"``) or the binary labels
    (``"balanced_accuracy"``).
    """
    s, target = _vec(dev_scores), _vec(dev_target)
    cands = candidate_thresholds(s)
    act = _acts(s, cands)
    values = _objective(np.ones((1, len(s))), act, target, objective)
    i = int(_pick(values)[0])
    return Selection(float(cands[i]), float(values[0, i]), int(act[i].sum()))


def _metrics(weights: np.ndarray, act: np.ndarray, utility: np.ndarray | None,
             labels: np.ndarray | None) -> dict[str, np.ndarray]:
    """Test metrics [D, T]: actions, and net/corrections/reversals and balanced accuracy when available."""
    out = {"actions": weights @ act.T}
    if utility is not None:
        out["net"] = weights @ (act * utility).T
        out["corrections"] = weights @ (act * (utility > 0)).T
        out["reversals"] = weights @ (act * (utility < 0)).T
    if labels is not None:
        out["balanced_accuracy"] = _balanced(weights, act, labels.astype(bool))
    return out


def _optional(values: Array | None) -> np.ndarray | None:
    """:func:`_vec` of ``values`` unless None."""
    return None if values is None else _vec(values)


def summarize(scores: Array, threshold: float, utility: Array | None = None,
              labels: Array | None = None) -> dict[str, float]:
    """Actions, net, corrections (U > 0), reversals (U < 0) and balanced accuracy of one threshold."""
    act = apply_threshold(scores, threshold).astype(float)[None, :]
    m = _metrics(np.ones((1, act.shape[1])), act, _optional(utility), _optional(labels))
    return {key: float(v[0, 0]) for key, v in m.items()}


def conditional_bootstrap(test_scores: Array, thresholds: Array, test_groups: Sequence[Any] | None = None,
                          utility: Array | None = None, labels: Array | None = None,
                          strata: Sequence[Any] | None = None, n_draws: int = DRAWS,
                          seed: int = PAPER_SEED) -> dict[str, np.ndarray]:
    """Per-draw test metrics [n_draws, len(thresholds)] with the thresholds fixed (same draws for all)."""
    s = _vec(test_scores)
    weights = conditional_bootstrap_weights(test_groups, len(s), n_draws, seed, strata)
    return _metrics(weights, _acts(s, _vec(thresholds)), _optional(utility), _optional(labels))


def conditional_bootstrap_weights(groups: Sequence[Any] | None, n: int, n_draws: int = DRAWS, seed: int = PAPER_SEED,
                                  strata: Sequence[Any] | None = None) -> np.ndarray:
    """Float multiplicities [n_draws, n] of the test cases in :func:`conditional_bootstrap`'s draws."""
    return _boot(groups, n, n_draws, seed, strata).weights().astype(float)


def _dev_seed(seed: int) -> int:
    """Seed of the joint dev draws, independent of the test draws' ``seed``."""
    return int(np.random.SeedSequence([seed, 1]).generate_state(1)[0])


def joint_bootstrap(dev_scores: Array, dev_target: Array, test_scores: Array, objective: str = "utility",
                    dev_groups: Sequence[Any] | None = None, test_groups: Sequence[Any] | None = None,
                    test_utility: Array | None = None, test_labels: Array | None = None,
                    dev_strata: Sequence[Any] | None = None, test_strata: Sequence[Any] | None = None,
                    n_draws: int = DRAWS, seed: int = PAPER_SEED) -> dict[str, Any]:
    """Refit the threshold on every dev draw and evaluate it on an independent test draw.

    Returns ``threshold``, ``dev_value``, ``dev_actions`` and the test metrics
    of :func:`summarize` as arrays [n_draws], plus the ``dev_bootstrap`` and
    ``test_bootstrap`` (:class:`readouts.stats.GroupBootstrap`) used.
    """
    ds, target, ts = _vec(dev_scores), _vec(dev_target), _vec(test_scores)
    cands = candidate_thresholds(ds)
    dev_act = _acts(ds, cands)
    dev_boot = _boot(dev_groups, len(ds), n_draws, _dev_seed(seed), dev_strata)
    test_boot = _boot(test_groups, len(ts), n_draws, seed, test_strata)
    w_dev = dev_boot.weights().astype(float)
    values = _objective(w_dev, dev_act, target, objective)
    idx, rows = _pick(values), np.arange(n_draws)
    metrics = _metrics(test_boot.weights().astype(float), _acts(ts, cands), _optional(test_utility),
                       _optional(test_labels))
    out: dict[str, Any] = {key: v[rows, idx] for key, v in metrics.items()}
    out.update(threshold=cands[idx], dev_value=values[rows, idx], dev_actions=(w_dev @ dev_act.T)[rows, idx],
               dev_bootstrap=dev_boot, test_bootstrap=test_boot)
    return out


def _num(x: Any, integer: bool = False) -> float | int | None:
    """JSON-safe number: None for missing or non-finite values; ``int`` for counts."""
    return None if x is None or not np.isfinite(x) else int(round(x)) if integer else float(x)


def _interval(draws: np.ndarray, alpha: float) -> list[float | None]:
    """Percentile interval [lo, hi] of the non-NaN draws (None if there are none)."""
    if np.all(np.isnan(draws)):
        return [None, None]
    return [_num(v) for v in np.nanpercentile(draws, list(percentile_points(alpha, "alpha")))]


def _rule(name: str, threshold: float, dev: dict[str, float], test: dict[str, float],
          dev_value: float | None) -> dict[str, Any]:
    """One rule's point results and notes (intervals are added by :func:`calibrate`)."""
    kind = "objective" if name in OBJECTIVES else "baseline"
    out: dict[str, Any] = {"kind": kind, "threshold": _num(threshold), "dev_value": _num(dev_value)}
    out.update({f"dev_{k}": _num(v, k == "actions") for k, v in dev.items() if k in ("actions", "net",
                                                                                       "balanced_accuracy")})
    out.update({f"test_{k}": _num(v, k in ("actions", "corrections", "reversals")) for k, v in test.items()})
    notes = []
    if threshold == -np.inf:
        notes.append("always acts (threshold -inf)")
    elif name == "never":
        notes.append("never acts (threshold above every dev and test score)")
    elif kind == "objective" and dev["actions"] == 0:
        notes.append("selected threshold is the no-action one: it acts on no dev case")
    if name != "never" and test["actions"] == 0:
        notes.append("threshold acts on no test case")
    out["notes"] = notes
    return out


def calibrate(dev_scores: Array, test_scores: Array, *, dev_groups: Sequence[Any] | None = None,
              test_groups: Sequence[Any] | None = None, dev_labels: Array | None = None,
              dev_utility: Array | None = None, test_labels: Array | None = None, test_utility: Array | None = None,
              dev_strata: Sequence[Any] | None = None, test_strata: Sequence[Any] | None = None,
              n_draws: int = DRAWS, seed: int = PAPER_SEED, alpha: float = ALPHA) -> dict[str, Any]:
    """Fit each objective on dev (balanced accuracy needs ``dev_labels``, utility ``dev_utility``), add the
    baselines ``fixed_0.5``, ``always`` and ``never``, and evaluate all on test.

    Returns a JSON-serialisable dict ``{"rules": {name: {...}}, "n_draws", "seed", "alpha"}``. Each rule has
    ``kind``, ``threshold`` (None for -inf), ``dev_value`` (objectives only), ``dev_actions``, ``dev_net``,
    ``dev_balanced_accuracy``, ``test_actions``/``test_net``/``test_corrections``/``test_reversals``/
    ``test_balanced_accuracy`` (those the inputs allow), ``conditional`` ``{metric: [lo, hi]}``, for
    objectives ``joint`` ``{metric: [lo, hi]}`` and ``joint_refit`` (fraction of draws whose refit differs
    from the point threshold or acts on no dev case), and ``notes``.
    """
    ds, ts = _vec(dev_scores), _vec(test_scores)
    never = above_all_threshold(ds, ts)
    thresholds = {"fixed_0.5": 0.5, "always": -np.inf, "never": never}
    dev_value: dict[str, float | None] = dict.fromkeys(thresholds)
    targets = {"balanced_accuracy": dev_labels, "utility": dev_utility}
    for objective in (o for o in OBJECTIVES if targets[o] is not None):
        sel = select_threshold(ds, targets[objective], objective)
        thresholds[objective], dev_value[objective] = sel.threshold, sel.value
    names = list(thresholds)
    cond = conditional_bootstrap(ts, [thresholds[n] for n in names], test_groups=test_groups,
                                 utility=test_utility, labels=test_labels, strata=test_strata, n_draws=n_draws,
                                 seed=seed)
    rules: dict[str, Any] = {}
    for j, name in enumerate(names):
        t = thresholds[name]
        rule = _rule(name, t, summarize(ds, t, dev_utility, dev_labels), summarize(ts, t, test_utility, test_labels),
                     dev_value[name])
        rule["conditional"] = {k: _interval(v[:, j], alpha) for k, v in cond.items()}
        if name in OBJECTIVES:
            joint = joint_bootstrap(ds, targets[name], ts, objective=name, dev_groups=dev_groups,
                                    test_groups=test_groups, test_utility=test_utility, test_labels=test_labels,
                                    dev_strata=dev_strata, test_strata=test_strata, n_draws=n_draws, seed=seed)
            rule["joint"] = {k: _interval(joint[k], alpha) for k in cond}
            rule["joint_refit"] = {"threshold_changed_fraction": float(np.mean(joint["threshold"] != t)),
                                   "no_action_fraction": float(np.mean(joint["dev_actions"] == 0))}
        rules[name] = rule
    return {"rules": rules, "n_draws": int(n_draws), "seed": int(seed), "alpha": float(alpha)}
