"""Readouts of a feature-store group, evaluated on held-out cases (paper partB sections 2-3).

Two kinds of groups, told apart by their labels:

* **records** (``labels/replacement``, train/dev/test splits by item): fixed d_V,
  its dev-chosen sign, the dev-chosen (layer, head) value distance, surface
  baselines, and learned probes (separate K/V, joint K/V, joint hidden,
  pairwise linear and interaction) trained on the 180 training cases with C chosen on the dev role swaps vs role confirmations.
  Primary: AUC on the 50 test role swaps vs 50 role confirmations; secondary:
  all 300 test cases. Intervals: 10,000 draws of whole test items, paired
  differences on shared draws. Shuffled-label control: the joint K/V probe
  retrained on 20 permutations of the labels; its AUCs form the null range a
  probe of the same capacity reaches on these test cases by chance.
* **role pairs** (``labels/matching``): key-similarity matching AUC over every
  pair and value-distance replacement AUC over the matching pairs (supersedes vs
  duplicate), macro over the five families, bootstrap of whole groups within
  family, one-sided 95 % lower bounds against 0.60, and V minus surface on the
  same draws.

Layers: every layer that stores K/V rows (on hybrids these are the full-attention
layers; Gemma 4's KV-sharing layers add nothing of their own). Probe depths
floor(L/4), floor(L/2), floor(3L/4), L-1; K/V features take the nearest layer
with rows (ties toward the earlier one), hidden states the depth itself.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvprobe.extract import StoreError, StoreGroup

from .fixed import select_head, select_sign
from .groups import check_edited, same_records
from .inputs import features, fixed_scores, nearest, probe_depths
from .probes import BalancedL2Probe, PairwiseProbe, select_C
from .stats import DRAWS, auc, bootstrap_auc, macro_auc, percentile_interval

#: 20260917: the shuffled-label control's permutations (``readouts.evaluate``).
SHUFFLE_SEED = 20260917

#: Number of the shuffled-label control's permutations (their seed: :data:`SHUFFLE_SEED`).
SHUFFLES = 20
REPLACEMENT_VARIANTS = ("replacement", "role_swap", "explicit_rejection")
#: The signed leave-one-out scores the *expected* answer, which the label decides (the new value
#: after a replacement, the old one otherwise): an oracle-informed signal, not a detector.
LOO_NAME = "signed LOO (oracle reference)"
ROLE_VARIANTS = ("role_swap", "role_confirmation")
#: Criterion of partB section 2: one-sided 95 % lower bound of the AUC above this.
AUC_CRITERION = 0.60


PROBES: dict[str, tuple[str, Any]] = {
    "separate K/V probe": ("separate_kv", BalancedL2Probe()),
    "joint K/V probe": ("joint_kv", BalancedL2Probe()),
    "joint hidden probe": ("joint_hidden", BalancedL2Probe()),
    "pairwise linear probe": ("separate_kv", PairwiseProbe(kind="linear")),
    "pairwise interaction probe": ("separate_kv", PairwiseProbe(kind="interaction")),
}


# ----------------------------------------------------------------------------- records


def evaluate_records(g: StoreGroup, draws: int = DRAWS, seed: int = 0, probes: bool = True) -> dict[str, Any]:
    """Fixed and learned readouts of a records group: role AUC (primary) and all-test AUC with intervals."""
    cases = g.cases()
    split, variant = cases["split"], cases["variant"]
    y = cases["label:replacement"].astype(int)
    train, dev, test = (split == "train"), (split == "dev"), (split == "test")
    if not (train.any() and dev.any() and test.any()):
        raise StoreError(f"{g.name}: a records group needs train, dev and test cases")
    role = np.isin(variant, ROLE_VARIANTS)
    fixed = fixed_scores(g)
    scores: dict[str, np.ndarray] = {}
    choices: dict[str, Any] = {}
    scores["fixed d_V"] = fixed["value_distance"]
    sign = select_sign(fixed["value_distance"][dev & role], y[dev & role])
    scores["sign-chosen d_V"] = sign * fixed["value_distance"]
    choices["sign-chosen d_V"] = {"sign": sign}
    if "per_head" in fixed:
        layer_i, head, hsign = select_head(fixed["per_head"][dev & role], y[dev & role])
        scores["head-chosen d_V"] = hsign * fixed["per_head"][:, layer_i, head]
        choices["head-chosen d_V"] = {"layer": g.kv_layers[layer_i], "head": head, "sign": hsign}
    for surface in ("token_jaccard", "char_distance"):  # either direction; chosen on dev
        s = select_sign(fixed[surface][dev & role], y[dev & role])
        scores[f"surface {surface.replace('_', ' ')}"] = s * fixed[surface]
        choices[f"surface {surface.replace('_', ' ')}"] = {"sign": s}
    scores["key similarity s_K"] = fixed["key_similarity"]
    if "score:signed_loo" in cases:
        scores[LOO_NAME] = cases["score:signed_loo"]
    if probes:
        cache: dict[str, np.ndarray] = {}
        for label, (feature, template) in PROBES.items():
            if feature not in cache:  # each feature set is read from the store once
                cache[feature] = features(g, feature)
            X = cache[feature]
            probe, dev_auc = select_C(X[train], y[train], X[dev], y[dev], dev_mask=role[dev], estimator=template)
            scores[label] = probe.decision_function(X)
            choices[label] = {"C": float(probe.C), "dev_role_auc_by_C": {str(k): v for k, v in dev_auc.items()},
                              "n_features_in": int(X.shape[1])}
        # Shuffled-label control: the joint K/V probe trained on permuted training labels (C chosen on
        # equally permuted dev labels), repeated for SHUFFLES permutations: the AUCs a probe of this
        # capacity reaches on these test cases when the labels carry no information.
        shuffled = shuffled_label_control(cache["joint_kv"], y, train, dev, role)
        choices["shuffled-label control"] = {"permutations": SHUFFLES, "seed": SHUFFLE_SEED}
    else:
        shuffled = None
    groups = cases["group"]
    result = {
        "group": g.name,
        "model": g.attrs.get("model"),
        "dataset": "records",
        "n_cases": {"train": int(train.sum()), "dev": int(dev.sum()), "test": int(test.sum()),
                    "test_role": int((test & role).sum()), "test_groups": int(len(set(groups[test])))},
        "depths": {"kv": [nearest(d, g.kv_layers) for d in probe_depths(len(g.layer_types))],
                   "hidden": probe_depths(len(g.layer_types))},
        "choices": choices,
        "role_auc": bootstrap_auc({k: v[test & role] for k, v in scores.items()}, y[test & role],
                                  groups[test & role], n_draws=draws, seed=seed),
        "all_test_auc": bootstrap_auc({k: v[test] for k, v in scores.items()}, y[test], groups[test],
                                      n_draws=draws, seed=seed),
        "by_variant_mean": {name: {v: float(np.mean(s[test & (variant == v)])) for v in sorted(set(variant))}
                            for name, s in scores.items() if name in ("fixed d_V", "key similarity s_K")},
    }
    held_out = dev | test  # per-case scores, so a readout can act as a detector (studies.detection)
    result["case_scores"] = {"case_id": [str(c) for c in cases["case_id"][held_out]],
                             "split": [str(s) for s in split[held_out]],
                             "scores": {name: [float(x) for x in s[held_out]] for name, s in scores.items()}}
    if shuffled is not None:
        result["shuffled_label_control"] = {
            "role_auc": _null_summary([auc(s[test & role], y[test & role]) for s in shuffled]),
            "all_test_auc": _null_summary([auc(s[test], y[test]) for s in shuffled]),
        }
    return result


def shuffled_label_control(X: np.ndarray, y: np.ndarray, train: np.ndarray, dev: np.ndarray, role: np.ndarray,
                           permutations: int | None = None, seed: int = SHUFFLE_SEED) -> list[np.ndarray]:
    """Decision functions of probes trained on permuted train (and dev) labels, one per permutation."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(permutations or SHUFFLES):
        y_perm = y.copy()
        y_perm[train] = rng.permutation(y[train])
        y_perm[dev] = rng.permutation(y[dev])
        probe, _ = select_C(X[train], y_perm[train], X[dev], y_perm[dev], dev_mask=role[dev])
        out.append(probe.decision_function(X))
    return out


def _null_summary(aucs: list[float]) -> dict[str, float]:
    values = np.asarray(aucs)
    lo, hi = percentile_interval(values, points="alpha")
    return {"mean": float(values.mean()), "lo": lo, "hi": hi, "permutations": int(len(values))}


# ----------------------------------------------------------------------------- role pairs


def evaluate_role_pairs(g: StoreGroup, draws: int = DRAWS, seed: int = 0) -> dict[str, Any]:
    """Matching AUC of s_K (all pairs) and replacement AUC of d_V (matching pairs), macro over families."""
    cases = g.cases()
    family, groups = cases["family"], cases["group"]
    matching = cases["label:matching"].astype(int)
    replacement = cases["label:replacement"].astype(int)
    fixed = fixed_scores(g)
    match_scores = {"key similarity s_K": fixed["key_similarity"], "value distance d_V": fixed["value_distance"],
                    "surface token jaccard": fixed["token_jaccard"], "surface char distance": -fixed["char_distance"]}
    m = matching == 1
    repl_scores = {"value distance d_V": fixed["value_distance"], "reversed d_V": -fixed["value_distance"],
                   "key similarity s_K": fixed["key_similarity"]}
    if "score:signed_loo" in cases:
        repl_scores[LOO_NAME] = cases["score:signed_loo"]
    # Surface baselines: either direction allowed, the stronger one is used (partB 2; retrospective).
    for surface in ("token_jaccard", "char_distance"):
        s = fixed[surface]
        sign = 1 if macro_auc(s[m], replacement[m], family[m]) >= macro_auc(-s[m], replacement[m], family[m]) else -1
        repl_scores[f"surface {surface.replace('_', ' ')}"] = sign * s
    result = {
        "group": g.name,
        "model": g.attrs.get("model"),
        "dataset": "role-pairs",
        "n_cases": {"pairs": int(len(matching)), "matching": int(m.sum()), "groups": int(len(set(groups)))},
        "criterion_lower_bound": AUC_CRITERION,
        "matching_macro_auc": bootstrap_auc(match_scores, matching, groups, n_draws=draws, seed=seed, strata=family),
        "replacement_macro_auc": bootstrap_auc({k: v[m] for k, v in repl_scores.items()}, replacement[m], groups[m],
                                               n_draws=draws, seed=seed, strata=family[m]),
        "matching_auc_by_family": {f: auc(fixed["key_similarity"][family == f], matching[family == f])
                                   for f in sorted(set(family))},
        "replacement_auc_by_family": {f: auc(fixed["value_distance"][m & (family == f)], replacement[m & (family == f)])
                                      for f in sorted(set(family))},
    }
    return result


def evaluate_group(g: StoreGroup, draws: int = DRAWS, seed: int = 0, probes: bool = True) -> dict[str, Any]:
    """Dispatch on the group's labels (records vs role pairs)."""
    if g.edit is not None:
        raise StoreError(f"{g.name} holds caches read after {g.edit['condition']} (K and V only); it is scored by "
                         "the original group's probe (edit_transfer, kvprobe readout --transfer-to-edits)")
    labels = {k for k in g.cases() if k.startswith("label:")}
    if "label:matching" in labels:
        return evaluate_role_pairs(g, draws, seed)
    if "label:replacement" in labels:
        return evaluate_records(g, draws, seed, probes)
    raise StoreError(f"{g.name}: no replacement or matching labels; not a recognition dataset")


# ----------------------------------------------------------------------------- transfer


def _trained_probe(g: StoreGroup, X: np.ndarray) -> tuple[Any, dict[str, np.ndarray]]:
    """The joint-K/V-style probe trained on ``g``'s training cases, C chosen on its dev role pairs; and the
    case fields every transfer reports on (labels, role and test masks, groups)."""
    cases = g.cases()
    split = cases["split"]
    y = cases["label:replacement"].astype(int)
    role = np.isin(cases["variant"], ROLE_VARIANTS)
    train, dev = split == "train", split == "dev"
    probe, _ = select_C(X[train], y[train], X[dev], y[dev], dev_mask=role[dev])
    return probe, {"y": y, "role": role, "test": split == "test", "groups": cases["group"]}


def _test_aucs(scores: dict[str, np.ndarray], f: dict[str, np.ndarray], draws: int, seed: int) -> dict[str, Any]:
    """Role and all-test AUCs of ``scores`` on shared group-bootstrap draws of the test items."""
    role, test = f["test"] & f["role"], f["test"]
    return {"role_auc": bootstrap_auc({k: v[role] for k, v in scores.items()}, f["y"][role], f["groups"][role],
                                      n_draws=draws, seed=seed),
            "all_test_auc": bootstrap_auc({k: v[test] for k, v in scores.items()}, f["y"][test], f["groups"][test],
                                          n_draws=draws, seed=seed)}


def transfer(train_group: StoreGroup, test_group: StoreGroup, feature: str = "joint_kv",
             draws: int = DRAWS, seed: int = 0) -> dict[str, Any]:
    """Train a probe on one checkpoint's store group, test it on another's (identical token ids required).

    The probe (C chosen on the training group's dev role pairs) scores the test
    group's held-out cases; AUCs as in :func:`evaluate_records` (``kvprobe readout
    --transfer``). Any fitted readout, on any split names: :func:`kvprobe.readouts.transfer`.
    """
    a, b = train_group, test_group
    same_records(a, b, "transfer")
    Xa, Xb = features(a, feature), features(b, feature)
    if Xa.shape != Xb.shape:
        raise StoreError(f"transfer needs equal feature widths; {a.name} has {Xa.shape[1]}, {b.name} {Xb.shape[1]}")
    probe, f = _trained_probe(a, Xa)
    scores = {"in-checkpoint": probe.decision_function(Xa), "transferred": probe.decision_function(Xb)}
    return {"train_group": a.name, "test_group": b.name, "feature": feature, "C": float(probe.C),
            **_test_aucs(scores, f, draws, seed)}


#: The probe :func:`edit_transfer` moves across cache edits: B's K and V read after A.
EDIT_FEATURE = "joint_kv"


def edit_transfer(original: StoreGroup, edited: dict[str, StoreGroup], draws: int = DRAWS,
                  seed: int = 0) -> dict[str, Any]:
    """Train the joint K/V probe on the original caches, score the same cases' edited caches (records groups;
    any fitted readout on any split names: :func:`kvprobe.readouts.edit_transfer` with ``readout=``).

    ``edited``: edit name -> the group of the same records read after that cache edit
    (``FeatureStore.edited``). One probe (C chosen on the original dev role pairs)
    scores every group; AUCs on the test role swaps vs role confirmations (primary) and
    all test cases, every group on the same group-bootstrap draws of whole test items,
    so ``diff["original"][edit]`` is the AUC drop of that edit with its paired interval.
    ``test_change[edit]``: how far the edit moved the test cases' probe inputs (Frobenius
    norm of the change over that of the original features) and the Pearson correlation
    of their original and edited probe scores.

    Example:
        >>> with FeatureStore("runs/recognition.h5") as s:  # doctest: +SKIP
        ...     r = edit_transfer(s["m/records"], s.edited("m/records"))
        ...     r["role_auc"]["diff"]["original"]["compact"]["diff"]   # AUC(original) - AUC(compacted)
    """
    check_edited(original, edited)
    X = features(original, EDIT_FEATURE)
    probe, f = _trained_probe(original, X)
    scores = {"original": probe.decision_function(X)}
    moved: dict[str, dict[str, float]] = {}
    for name, g in edited.items():
        Xe = features(g, EDIT_FEATURE)
        scores[name] = probe.decision_function(Xe)
        t = f["test"]
        moved[name] = {"feature_change": float(np.linalg.norm(Xe[t] - X[t]) / np.linalg.norm(X[t])),
                       "score_correlation": float(np.corrcoef(scores["original"][t], scores[name][t])[0, 1])}
    test, role = f["test"], f["test"] & f["role"]
    return {"group": original.name, "model": original.attrs.get("model"), "feature": EDIT_FEATURE,
            "C": float(probe.C), "edits": {name: g.edit for name, g in edited.items()},
            "edited_groups": {name: g.name for name, g in edited.items()},
            "test_change": moved,
            "n_cases": {"test_role": int(role.sum()), "test": int(test.sum()),
                        "test_groups": int(len(set(f["groups"][test])))},
            **_test_aucs(scores, f, draws, seed)}
