"""Readout math (paper partB sections 2 and 3): fixed scores, AUC statistics, probes. Numpy only, fast."""

from __future__ import annotations

import math

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.metrics import roc_auc_score

from kvprobe.readouts import (
    BalancedL2Probe,
    PairwiseProbe,
    RademacherProjection,
    auc,
    bootstrap_auc,
    bootstrap_auc_draws,
    char_distance,
    group_bootstrap_indices,
    key_similarity,
    macro_auc,
    pairwise_features,
    per_head_value_distance,
    select_C,
    select_head,
    select_sign,
    token_jaccard,
    value_distance,
    weighted_auc,
)


# --------------------------------------------------------------------------- explicit-loop references


def loop_key_similarity(keys_a, keys_b) -> float:
    layers = []
    for ka, kb in zip(keys_a, keys_b):
        n_heads, n_a, _ = ka.shape
        n_b = kb.shape[1]
        total = 0.0
        for h in range(n_heads):
            unit_a = [ka[h, i] / max(math.sqrt(sum(x * x for x in ka[h, i])), 1e-8) for i in range(n_a)]
            unit_b = [kb[h, j] / max(math.sqrt(sum(x * x for x in kb[h, j])), 1e-8) for j in range(n_b)]
            c = [[sum(p * q for p, q in zip(unit_a[i], unit_b[j])) for j in range(n_b)] for i in range(n_a)]
            total += sum(max(c[i]) for i in range(n_a)) / n_a
            total += sum(max(c[i][j] for i in range(n_a)) for j in range(n_b)) / n_b
        layers.append(min(1.0, max(-1.0, total / (2 * n_heads))))
    return sum(layers) / len(layers)


def loop_value_distance(values_a, values_b) -> float:
    layers = []
    for va, vb in zip(values_a, values_b):
        n_heads, d = va.shape
        sq_diff = sum((va[h, j] - vb[h, j]) ** 2 for h in range(n_heads) for j in range(d))
        sq_b = sum(vb[h, j] ** 2 for h in range(n_heads) for j in range(d))
        layers.append(math.sqrt(sq_diff / (n_heads * d)) / max(math.sqrt(sq_b / (n_heads * d)), 1e-6))
    return sum(layers) / len(layers)


def loop_auc(scores, labels) -> float:
    pos = [s for s, y in zip(scores, labels) if y == 1]
    neg = [s for s, y in zip(scores, labels) if y == 0]
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


# --------------------------------------------------------------------------- fixed scores


def test_key_similarity_matches_explicit_loops():
    rng = np.random.default_rng(1)
    keys_a = [rng.normal(size=(2, 3, 4)), rng.normal(size=(1, 3, 5))]  # H and d may differ by layer
    keys_b = [rng.normal(size=(2, 2, 4)), rng.normal(size=(1, 4, 5))]
    assert key_similarity(keys_a, keys_b) == pytest.approx(loop_key_similarity(keys_a, keys_b), abs=1e-12)


def test_key_similarity_by_hand():
    k = np.array([[[1.0, 0.0], [0.0, 2.0]]])  # 1 head, 2 tokens
    assert key_similarity([k], [k]) == pytest.approx(1.0)  # identical keys
    assert key_similarity([k], [3.0 * k[:, ::-1]]) == pytest.approx(1.0)  # scale and token order free
    assert key_similarity([np.array([[[1.0, 0.0]]])], [np.array([[[0.0, 1.0]]])]) == 0.0  # orthogonal tokens
    # A = {e1}, B = {e1, e2}: A->B max 1; B->A maxima 1 and 0 -> mean 0.5; (1 + 0.5) / 2 = 0.75.
    assert key_similarity([np.array([[[1.0, 0.0]]])], [k]) == pytest.approx(0.75)
    # opposite one-token keys give -1 (inside the clip); two layers average: (1 + -1) / 2 = 0.
    e1 = np.array([[[1.0, 0.0]]])
    assert key_similarity([e1], [-e1]) == pytest.approx(-1.0)
    assert key_similarity([e1, e1], [e1, -e1]) == pytest.approx(0.0)
    # B = {-e1, -e2} against A = {e1, e2}: every best match is 0 (not -1): matches are not one-to-one.
    assert key_similarity([k], [-k]) == 0.0


def test_key_similarity_zero_vector_epsilon_and_clip():
    zero = np.zeros((1, 1, 3))
    assert key_similarity([zero], [zero]) == 0.0  # k / max(0, 1e-8) = 0, no NaN
    tiny = np.full((1, 1, 3), 1e-12)  # below the 1e-8 floor: cosine of the scaled vectors, not 1
    expected = (3 * 1e-12 ** 2) / 1e-16
    assert key_similarity([tiny], [tiny]) == pytest.approx(expected)
    # Rounding can put a unit vector's self-cosine at 1 + 2^-52; the clip to [-1, 1] removes it.
    k = np.random.default_rng(0).normal(size=(5, 1, 1, 7))[4]
    unit = k / np.linalg.norm(k, axis=-1, keepdims=True)
    assert np.einsum("hid,hjd->hij", unit, unit).item() > 1.0  # unclipped
    assert key_similarity([k], [k]) == 1.0


def test_value_distance_matches_explicit_loops():
    rng = np.random.default_rng(2)
    values_a = [rng.normal(size=(2, 4)), rng.normal(size=(3, 2))]
    values_b = [rng.normal(size=(2, 4)), rng.normal(size=(3, 2))]
    assert value_distance(values_a, values_b) == pytest.approx(loop_value_distance(values_a, values_b), abs=1e-12)


def test_value_distance_by_hand_and_epsilon():
    b = np.array([[3.0, 4.0]])  # RMS(B) = sqrt(25/2)
    a = np.array([[0.0, 0.0]])  # RMS(A - B) = RMS(B) -> 1
    assert value_distance([a], [b]) == pytest.approx(1.0)
    assert value_distance([b], [b]) == 0.0
    assert value_distance([b], [np.zeros((1, 2))]) == pytest.approx(math.sqrt(12.5) / 1e-6)  # floor 1e-6
    assert value_distance([np.zeros((1, 2))], [np.zeros((1, 2))]) == 0.0
    assert value_distance([a], [b]) != value_distance([b], [a])  # asymmetric: B in the denominator


def test_per_head_value_distance():
    rng = np.random.default_rng(3)
    values_a = [rng.normal(size=(3, 4)) for _ in range(2)]
    values_b = [rng.normal(size=(3, 4)) for _ in range(2)]
    d = per_head_value_distance(values_a, values_b)
    assert d.shape == (2, 3)
    for layer in range(2):
        for head in range(3):
            one = value_distance([values_a[layer][head:head + 1]], [values_b[layer][head:head + 1]])
            assert d[layer, head] == pytest.approx(one)
    with pytest.raises(ValueError):
        per_head_value_distance([np.ones((2, 4)), np.ones((3, 4))], [np.ones((2, 4)), np.ones((3, 4))])


def test_surface_baselines():
    assert token_jaccard([1, 2, 3], [2, 3, 4]) == pytest.approx(2 / 4)
    assert token_jaccard([], []) == 1.0
    assert token_jaccard([1, 1], [2]) == 0.0
    assert char_distance("kitten", "sitting") == pytest.approx(3 / 7)
    assert char_distance("", "") == 0.0
    assert char_distance("", "abc") == 1.0
    assert char_distance("abc", "abc") == 0.0
    assert char_distance("flaw", "lawn") == char_distance("lawn", "flaw") == pytest.approx(2 / 4)


def test_select_head_and_sign():
    y = np.array([1, 1, 1, 0, 0, 0])
    x = np.zeros((6, 2, 3))
    x[:, 1, 2] = np.arange(6.0)  # positives lowest: perfect in the reversed direction
    x[:, 0, 1] = np.r_[5, 4, 0, 3, 2, 1]  # imperfect, positive direction
    assert select_head(x, y) == (1, 2, -1)
    x[:, 0, 0] = np.arange(6.0)[::-1]  # a perfect +1 head earlier: wins the tie
    assert select_head(x, y) == (0, 0, 1)
    assert select_head(np.zeros((6, 2, 2)), y) == (0, 0, 1)  # all tie at 0.5: earliest, +1
    assert select_sign(np.arange(6.0), y) == -1
    assert select_sign(np.arange(6.0)[::-1], y) == 1
    assert select_sign(np.zeros(6), y) == 1  # tie -> +1


# --------------------------------------------------------------------------- AUC statistics


def test_auc_against_sklearn_with_ties():
    rng = np.random.default_rng(4)
    for _ in range(5):
        s = rng.integers(0, 6, size=120).astype(float)  # many ties
        y = rng.integers(0, 2, size=120)
        assert auc(s, y) == pytest.approx(roc_auc_score(y, s), abs=1e-12)
    assert auc([0.0, 1.0, 1.0, 2.0], [0, 0, 1, 1]) == pytest.approx(loop_auc([0, 1, 1, 2], [0, 0, 1, 1]))
    assert math.isnan(auc([1.0, 2.0], [1, 1]))


def test_weighted_auc_equals_auc_of_repeated_data():
    rng = np.random.default_rng(5)
    s = rng.integers(0, 5, size=60).astype(float)
    y = rng.integers(0, 2, size=60)
    w = rng.integers(0, 4, size=60)
    assert weighted_auc(s, y, w) == pytest.approx(auc(np.repeat(s, w), np.repeat(y, w)), abs=1e-12)
    assert weighted_auc(s, y, np.ones(60)) == pytest.approx(auc(s, y), abs=1e-12)


def test_macro_auc():
    s = np.array([1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0])
    y = np.array([0, 1, 0, 1, 1, 1, 0, 0])
    strata = np.array(["a"] * 4 + ["b"] * 4)
    expected = (loop_auc(s[:4], y[:4]) + loop_auc(s[4:], y[4:])) / 2
    assert macro_auc(s, y, strata) == pytest.approx(expected)


def _grouped_data(n_groups=50, seed=0, signal=1.0):
    rng = np.random.default_rng(seed)
    groups = np.repeat([f"g{i:02d}" for i in range(n_groups)], 6)
    y = np.tile([1, 1, 1, 0, 0, 0], n_groups)
    return groups, y, rng


def test_group_bootstrap_draws_whole_groups():
    groups, y, _ = _grouped_data(n_groups=10)
    boot = group_bootstrap_indices(groups, n_draws=20, seed=3)
    assert len(boot) == 20
    for idx in boot:
        assert len(idx) == 60
        drawn = groups[idx]
        for g in np.unique(drawn):  # each drawn group brings all 6 cases, as often as drawn
            assert (drawn == g).sum() % 6 == 0
    weights = boot.weights()
    assert weights.shape == (20, 60)
    assert np.array_equal(np.bincount(boot[7], minlength=60), weights[7])
    again = group_bootstrap_indices(groups, n_draws=20, seed=3)
    assert np.array_equal(boot.draws, again.draws)


def test_bootstrap_per_draw_auc_equals_resampled_auc():
    groups, y, rng = _grouped_data(n_groups=12)
    s = rng.integers(0, 4, size=len(y)).astype(float)
    boot = group_bootstrap_indices(groups, n_draws=30, seed=1)
    per_draw = bootstrap_auc_draws({"s": s}, y, boot)["s"]
    for d, idx in enumerate(boot):
        assert per_draw[d] == pytest.approx(auc(s[idx], y[idx]), abs=1e-12)


def test_bootstrap_auc_deterministic_paired_and_covering():
    groups, y, rng = _grouped_data()
    strong = 2.0 * y + rng.normal(size=len(y))
    noise = rng.normal(size=len(y))
    scores = {"strong": strong, "copy": strong.copy(), "noise": noise}
    first = bootstrap_auc(scores, y, groups, n_draws=2_000, seed=7)
    assert first == bootstrap_auc(scores, y, groups, n_draws=2_000, seed=7)
    assert first["dropped_draws"] == 0 and first["n_draws"] == 2_000
    same = first["diff"]["strong"]["copy"]
    assert same == {"diff": 0.0, "lo": 0.0, "hi": 0.0, "lower_one_sided": 0.0}
    boot = group_bootstrap_indices(groups, n_draws=2_000, seed=7)
    per_draw = bootstrap_auc_draws(scores, y, boot)
    assert np.all(per_draw["strong"] - per_draw["copy"] == 0.0)  # exactly 0 on every draw
    ci = first["auc"]["strong"]
    assert ci["lo"] <= ci["auc"] <= ci["hi"] and ci["lower_one_sided"] > 0.8
    assert ci["lo"] <= ci["lower_one_sided"] <= ci["hi"]
    assert first["diff"]["strong"]["noise"]["lo"] > 0
    assert first["diff"]["noise"]["strong"]["diff"] == pytest.approx(-first["diff"]["strong"]["noise"]["diff"])


def test_bootstrap_drops_draws_with_an_empty_class():
    groups = np.array(["a", "a", "b", "b"])
    y = np.array([1, 1, 0, 0])  # a draw of only "a" (or only "b") has one class
    out = bootstrap_auc({"s": np.array([2.0, 3.0, 0.0, 1.0])}, y, groups, n_draws=200, seed=0)
    assert 0 < out["dropped_draws"] < 200
    assert out["auc"]["s"]["auc"] == 1.0 and out["auc"]["s"]["lo"] == 1.0


def test_bootstrap_within_strata_macro():
    groups, y, rng = _grouped_data(n_groups=20)
    strata = np.where(np.arange(len(y)) < 60, "x", "y")  # groups g00-g09 in x, g10-g19 in y
    s = y + rng.normal(size=len(y))
    out = bootstrap_auc({"s": s}, y, groups, n_draws=500, seed=0, strata=strata)
    assert out["auc"]["s"]["auc"] == pytest.approx(macro_auc(s, y, strata))
    boot = group_bootstrap_indices(groups, n_draws=50, seed=0, strata=strata)
    assert np.all(boot.draws[:, :10] < 10) and np.all(boot.draws[:, 10:] >= 10)


# --------------------------------------------------------------------------- probes


def test_rademacher_projection_deterministic():
    X = np.random.default_rng(6).normal(size=(5, 40))
    a = RademacherProjection(n_components=16, seed=11).fit(X)
    b = RademacherProjection(n_components=16, seed=11).fit(np.zeros((2, 40)))
    assert np.array_equal(a.projection_, b.projection_)
    assert set(np.unique(a.projection_ * 4)) == {-1.0, 1.0}  # ±1/sqrt(16)
    assert np.allclose(a.transform(X), X @ a.projection_)
    assert not np.array_equal(a.projection_, RademacherProjection(16, seed=12).fit(X).projection_)
    assert a.get_feature_names_out().shape == (16,)


def test_balanced_probe_sklearn_conventions():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(120, 300))
    y = (X[:, 0] + 0.5 * rng.normal(size=120) > 0).astype(int)
    probe = BalancedL2Probe(C=0.1, n_components=32, seed=5)
    assert probe.get_params() == {"C": 0.1, "n_components": 32, "seed": 5, "max_iter": 5000}
    twin = clone(probe)
    assert twin.get_params() == probe.get_params() and not hasattr(twin, "pipeline_")
    probe.fit(X, y)
    assert probe.coef_.size + probe.intercept_.size == 33
    proba = probe.predict_proba(X)
    assert proba.shape == (120, 2) and np.allclose(proba.sum(axis=1), 1.0)
    assert np.array_equal(probe.classes_, [0, 1])
    assert np.array_equal(probe.predict(X), probe.classes_[(probe.decision_function(X) > 0).astype(int)])
    assert np.allclose(clone(probe).fit(X, y).decision_function(X), probe.decision_function(X))
    assert BalancedL2Probe().set_params(n_components=None).fit(X[:, :10], y).coef_.shape == (1, 10)
    default = BalancedL2Probe().fit(X, y)
    assert default.coef_.size + default.intercept_.size == 129


def test_shuffled_label_probe_is_near_chance():
    rng = np.random.default_rng(8)
    X = rng.normal(size=(800, 200))
    y = rng.permutation(np.repeat([0, 1], 400))
    probe = BalancedL2Probe(C=1.0).fit(X[:400], y[:400])
    assert 0.35 <= auc(probe.decision_function(X[400:]), y[400:]) <= 0.65


def test_select_C_ties_pick_the_smaller_C():
    rng = np.random.default_rng(9)
    X = rng.normal(size=(200, 20))
    y = (X[:, 0] > 0).astype(int)
    X_dev = np.zeros((10, 20))
    X_dev[:, 0] = np.r_[-5, -4, -3, -2, -1, 1, 2, 3, 4, 5] * 10.0  # perfectly separable: every C gets 1.0
    y_dev = (X_dev[:, 0] > 0).astype(int)
    best, by_C = select_C(X, y, X_dev, y_dev, C_grid=(10, 1, 0.1, 0.01), n_components=None)
    assert by_C == {10.0: 1.0, 1.0: 1.0, 0.1: 1.0, 0.01: 1.0}
    assert best.C == 0.01
    mask = np.r_[True, False, False, False, True, True, False, False, False, True]
    best, by_C = select_C(X, y, X_dev, y_dev, dev_mask=mask, n_components=None)
    assert best.C == 0.01 and set(by_C) == {0.01, 0.1, 1.0, 10.0}


def test_pairwise_features_and_probe():
    a, b = np.array([[1.0, -2.0]]), np.array([[3.0, 1.0]])
    assert np.array_equal(pairwise_features(a, b, "linear"), [[1, -2, 3, 1]])
    assert np.array_equal(pairwise_features(a, b), [[1, -2, 3, 1, 2, 3, 3, -2]])
    rng = np.random.default_rng(10)
    x_a = rng.normal(size=(150, 96))
    change = rng.integers(0, 2, size=150)
    x_b = x_a + change[:, None] * rng.normal(size=(150, 96)) + 0.1 * rng.normal(size=(150, 96))
    X_pair = np.hstack([x_a, x_b])
    for kind in ("linear", "interaction"):
        probe = PairwiseProbe(kind=kind).fit(X_pair[:100], change[:100])
        assert probe.probe_.coef_.size + probe.probe_.intercept_.size == 129
        assert probe.predict(X_pair[100:]).shape == (50,)
        assert probe.predict_proba(X_pair[100:]).shape == (50, 2)
        assert np.allclose(clone(probe).fit(X_pair[:100], change[:100]).decision_function(X_pair),
                           probe.decision_function(X_pair))
    interaction = PairwiseProbe().fit(X_pair[:100], change[:100])  # |h_A - h_B| sees the change
    assert auc(interaction.decision_function(X_pair[100:]), change[100:]) > 0.75
    with pytest.raises(ValueError):
        PairwiseProbe().fit(X_pair[:, :-1], change)


# --------------------------------------------------------------------------- the studies' statistics


def test_study_statistics_reproduce_the_schemes_they_replace():
    from kvprobe.readouts.stats import (auc_two_samples, bootstrap_mean, bootstrap_stream, clopper_pearson,
                                        group_bootstrap_weights, paired_change, percentile_interval,
                                        percentile_points, zero_failure_bound)

    rng = np.random.default_rng(3)
    # two percentile conventions, kept apart: the paired changes' "level" one and the "alpha" one
    assert percentile_points(0.05, "alpha") == (2.5, 97.5)
    assert percentile_points(0.05, "level") == (100 * (1 - 0.95) / 2, 100 - 100 * (1 - 0.95) / 2)
    values = rng.normal(size=1001)
    assert percentile_interval(values, points="alpha") == [float(np.percentile(values, 2.5)),
                                                           float(np.percentile(values, 97.5))]
    with pytest.raises(ValueError):
        percentile_points(0.05, "other")
    # a shared stream (BABILong's cells) continues where the previous bootstrap stopped
    groups_a, groups_b = ["s1", "s1", "s2", "s3"], ["t1", "t2"]
    stream = bootstrap_stream(7)
    first, second = (group_bootstrap_weights(g, n_draws=50, seed=stream) for g in (groups_a, groups_b))
    replay = np.random.default_rng(7)
    draws_a = replay.integers(0, 3, size=(50, 3))
    draws_b = replay.integers(0, 2, size=(50, 2))
    counts_a = np.stack([np.bincount(d, minlength=3) for d in draws_a])
    assert np.array_equal(first, counts_a[:, [0, 0, 1, 2]])
    assert np.array_equal(second, np.stack([np.bincount(d, minlength=2) for d in draws_b]))
    assert np.array_equal(group_bootstrap_weights(groups_a, n_draws=50, seed=7), first)  # an int seed starts afresh
    # per-draw means: NaN values are left out, draws without a value are dropped
    w = np.array([[2, 0, 1], [0, 3, 0], [1, 1, 1]])
    assert bootstrap_mean([1.0, np.nan, 4.0], w).tolist() == [2.0, 2.5]
    assert np.allclose(bootstrap_mean([1.0, 2.0, 4.0], w), w @ [1.0, 2.0, 4.0] / w.sum(axis=1))
    change = paired_change([1, 1, 0], [0, 1, 1], w)
    assert (change["change"], change["corrections"], change["reversals"]) == (0, 1, 1)
    # asymmetric data: the direction is outcomes minus reference, in the change and in every draw (by hand:
    # diff = [+1, 0, +1]; draws w @ diff = 2+1, 0, 1+1 = [3, 0, 2])
    change = paired_change([1, 1, 1], [0, 1, 0], w)
    assert (change["change"], change["corrections"], change["reversals"]) == (2, 2, 0)
    assert change["ci"][0] >= 0.0 and change["ci"][1] <= 3.0 and change["ci"][1] > 2.0
    # the two-sample AUC is the rank AUC
    pos, neg = rng.integers(0, 4, size=9).astype(float), rng.integers(0, 4, size=7).astype(float)
    assert auc_two_samples(pos, neg) == auc(np.r_[pos, neg], np.r_[np.ones(9), np.zeros(7)])
    assert math.isnan(auc_two_samples([], [1.0]))
    # exact binomial bounds
    assert clopper_pearson(0, 0) is None and clopper_pearson(0, 10)[0] == 0.0
    assert zero_failure_bound(60) == pytest.approx(1 - 0.05 ** (1 / 60))


def test_exact_mcnemar_against_hand_computation():
    from math import comb

    from kvprobe.readouts.stats import mcnemar_exact

    assert mcnemar_exact(5, 0) == pytest.approx(0.0625)  # the paper's "5 discordant pairs against 0: p = 0.06"
    # 7 against 2: 2 * sum_{k<=2} C(9, k) / 2^9
    assert mcnemar_exact(7, 2) == pytest.approx(2 * sum(comb(9, k) for k in range(3)) / 2 ** 9)
    assert mcnemar_exact(3, 3) == 1.0 and mcnemar_exact(0, 0) == 1.0
    with pytest.raises(ValueError):
        mcnemar_exact(-1, 2)


def test_fisher_exact_against_hand_computation():
    from math import comb

    from kvprobe.readouts.stats import fisher_exact

    # [[3, 1], [1, 3]]: hypergeometric with margins 4/4 of 8; two-sided = tables as or less likely.
    probs = [comb(4, a) * comb(4, 4 - a) / comb(8, 4) for a in range(5)]
    observed = probs[3]
    assert fisher_exact([[3, 1], [1, 3]])["p"] == pytest.approx(sum(p for p in probs if p <= observed + 1e-12))
    result = fisher_exact([[12, 5], [2, 11]])
    assert result["ci"][0] < result["odds_ratio"] < result["ci"][1] and result["p"] < 0.05
    assert fisher_exact([[0, 0], [0, 60]])["odds_ratio"] is None  # zero margins: undefined, not NaN
    with pytest.raises(ValueError):
        fisher_exact([[1, 2, 3], [4, 5, 6]])


def test_weighted_sums_are_the_case_order_sums_on_every_cpu():
    """Bootstrap sums accumulate case by case (bit for bit what plain Python floats give in that order),
    not through a matrix product whose summation order depends on the CPU's BLAS kernel."""
    import math

    from kvprobe.readouts.stats import weighted_sums

    rng = np.random.default_rng(0)
    weights = rng.integers(0, 4, size=(50, 37))
    values = rng.normal(size=37) * 10.0 ** rng.integers(-3, 4, size=37)
    values[[4, 9]] = 0.0
    got = weighted_sums(weights, values)
    for d in range(50):
        acc = 0.0
        for j in range(37):
            if values[j] != 0:
                acc += float(weights[d, j]) * float(values[j])
        assert got[d] == acc  # the same bits
        assert abs(got[d] - math.fsum(weights[d] * values)) < 1e-9 * max(1.0, abs(acc))
    with pytest.raises(ValueError, match="36 weight columns for 37 values"):
        weighted_sums(weights[:, :36], values)
