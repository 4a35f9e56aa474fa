"""Coverage curves and threshold calibration of detectors (studies.detection; paper partB section 5)."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest

from kvprobe.readouts.stats import group_bootstrap_indices
from kvprobe.studies.detection.calibration import (
    above_all_threshold,
    apply_threshold,
    balanced_accuracy,
    calibrate,
    candidate_thresholds,
    conditional_bootstrap,
    joint_bootstrap,
    select_threshold,
    summarize,
)
from kvprobe.studies.common.detectors.coverage import coverage_curve, coverage_draws, coverage_k, expected_net, plot_coverage

# --------------------------------------------------------------------------- coverage: point estimates


def brute_force_nets(scores, utility) -> list[float]:
    """Average top-k net over every case order consistent with non-increasing scores."""
    n = len(scores)
    totals, count = np.zeros(n + 1), 0
    for perm in itertools.permutations(range(n)):
        if all(scores[perm[i]] >= scores[perm[i + 1]] for i in range(n - 1)):
            totals += np.r_[0.0, np.cumsum([utility[i] for i in perm])]
            count += 1
    return list(totals / count)


@pytest.mark.parametrize("seed", range(25))
def test_expected_net_matches_brute_force_over_tie_orders(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 8)) if seed < 20 else 7
    scores = rng.integers(0, 3, n).astype(float)
    utility = rng.integers(-1, 2, n).astype(float) if seed % 2 else rng.normal(size=n)
    brute = brute_force_nets(scores, utility)
    for k in range(n + 1):
        assert abs(expected_net(scores, utility, k) - brute[k]) <= 1e-12


def test_all_tied_scores_equal_random_baseline_over_all_orders():
    utility = np.array([1.0, -1.0, 1.0, 1.0, 0.0, 1.0])
    scores = np.zeros(6)
    brute = brute_force_nets(scores, utility)  # all 6! orders are consistent
    curve = coverage_curve(scores, utility, coverages=[k / 6 for k in range(7)], n_draws=0)
    assert curve["k"] == list(range(7))
    np.testing.assert_allclose(curve["random"], brute, atol=1e-12)
    np.testing.assert_allclose(curve["net"], brute, atol=1e-12)
    np.testing.assert_allclose(curve["excess_pp"], 0.0, atol=1e-12)
    assert brute[2] == pytest.approx(2 / 6 * 3)


def test_binary_detector_hand_example():
    # detected (score 1): U = +1, -1, +1 (sum 1); missed (score 0): seven cases with sum 1
    scores = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    utility = [1, -1, 1, 1, 1, 0, 0, -1, 0, 0]
    assert expected_net(scores, utility, 2) == pytest.approx(2 / 3)
    assert expected_net(scores, utility, 3) == pytest.approx(1.0)
    assert expected_net(scores, utility, 5) == pytest.approx(1 + 2 / 7)
    curve = coverage_curve(scores, utility, n_draws=0)
    assert curve["k"] == list(range(11))
    assert curve["net"][5] == pytest.approx(1 + 2 / 7)
    assert curve["random"][5] == pytest.approx(0.5 * 2)
    assert curve["excess_pp"][5] == pytest.approx(100 * (2 / 7) / 10)
    assert curve["net"][10] == pytest.approx(2.0) and curve["excess_pp"][10] == pytest.approx(0.0)
    assert np.isnan(curve["net_lo"]).all()
    json.dumps(curve)


def test_coverage_k_rounds_half_up_despite_float_error():
    assert coverage_k([0.3, 0.35, 0.25, 0.15, 0.05], 10).tolist() == [3, 4, 3, 2, 1]
    assert coverage_k(0.7, 10).item() == 7  # 0.7 * 10 = 7.000000000000001
    assert coverage_k(35 / 116, 116).item() == 35
    with pytest.raises(ValueError):
        coverage_k(1.5, 10)


# --------------------------------------------------------------------------- coverage: bootstrap


def realistic_cases(n=300, seed=3):
    rng = np.random.default_rng(seed)
    utility = rng.choice([-1.0, 0.0, 1.0], n, p=[0.15, 0.6, 0.25])
    scores = np.round(utility + rng.normal(0, 1.2, n), 1)
    return scores, utility


def test_bootstrap_collapses_when_every_utility_is_equal():
    scores = np.random.default_rng(0).integers(0, 3, 40).astype(float)
    curve = coverage_curve(scores, np.full(40, 1.0), n_draws=500)
    k = np.asarray(curve["k"], float)
    np.testing.assert_allclose(curve["net_lo"], k)
    np.testing.assert_allclose(curve["net_hi"], k)
    np.testing.assert_allclose(curve["excess_lo"], 0.0, atol=1e-12)
    np.testing.assert_allclose(curve["excess_hi"], 0.0, atol=1e-12)


def test_bootstrap_draws_recompute_ties_on_the_resampled_multiset():
    rng = np.random.default_rng(5)
    scores = rng.integers(0, 3, 12).astype(float)
    utility = rng.integers(-1, 2, 12).astype(float)
    groups = np.repeat(np.arange(5), [1, 2, 3, 2, 4])  # unequal groups: N varies per draw
    boot = group_bootstrap_indices(groups, n_draws=40, seed=1)
    cov = [0.0, 0.25, 0.5, 0.8, 1.0]
    draws = coverage_draws(scores, utility, boot, cov)
    assert len(np.unique(draws["n"])) > 1
    for d in range(40):
        idx = boot[d]
        n = len(idx)
        ks = coverage_k(cov, n)
        expected = [expected_net(scores[idx], utility[idx], int(k)) for k in ks]
        np.testing.assert_allclose(draws["net"][d], expected, atol=1e-12)
        np.testing.assert_allclose(draws["random"][d], ks / n * utility[idx].sum(), atol=1e-12)


def test_bootstrap_reproducible_and_contains_point():
    scores, utility = realistic_cases()
    curve = coverage_curve(scores, utility)
    assert curve["n_draws"] == 10_000 and curve["seed"] == 20260919
    assert coverage_curve(scores, utility) == curve
    other = coverage_curve(scores, utility, seed=1)
    assert other["net_lo"] != curve["net_lo"]
    for key in ("net", "excess"):
        lo, hi = np.asarray(curve[f"{key}_lo"]), np.asarray(curve[f"{key}_hi"])
        point = np.asarray(curve["net" if key == "net" else "excess_pp"])
        assert np.all(lo <= point + 1e-9) and np.all(point <= hi + 1e-9)
    assert curve["excess_lo"][3] > 0  # an informative detector beats random at 30 %
    assert curve["net_hi"][5] - curve["net_lo"][5] > 5


def test_stratified_bootstrap_keeps_strata_sizes():
    scores, utility = realistic_cases(60)
    strata = np.arange(60) % 3
    curve = coverage_curve(scores, utility, strata=strata, n_draws=300, seed=2)
    assert curve["stratified"] and curve["net_lo"] != coverage_curve(scores, utility, n_draws=300, seed=2)["net_lo"]


def test_plot_coverage_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    scores, utility = realistic_cases(80)
    curves = {"detector": coverage_curve(scores, utility, n_draws=200),
              "binary": coverage_curve((scores > 0).astype(float), utility, n_draws=200)}
    path = plot_coverage(curves, tmp_path / "coverage.png", title="toy")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- calibration: point rules


def test_candidates_and_threshold_rule():
    np.testing.assert_array_equal(candidate_thresholds([0.5, 0.2, 0.9, 0.5]), [0.2, 0.5, 0.9, 2.0])
    np.testing.assert_array_equal(candidate_thresholds([3.0, -1.0]), [-1.0, 3.0, 4.0])
    assert above_all_threshold([0.2], [5.0]) == 6.0
    assert apply_threshold([0.4, 0.5, 0.6], 0.5).tolist() == [False, True, True]


def test_balanced_accuracy_values():
    assert balanced_accuracy([1, 0, 1, 0], [1, 1, 0, 0]) == pytest.approx(0.5)
    assert balanced_accuracy([1, 1, 1, 0, 0], [1, 0, 1, 0, 0]) == pytest.approx(0.5 * (1 + 2 / 3))
    assert balanced_accuracy([1, 0], [1, 1]) == pytest.approx(0.5)  # only positives: their recall


def test_utility_ties_pick_highest_threshold():
    sel = select_threshold([0.1, 0.4, 0.7, 0.9], [0, 0, 1, 0], "utility")
    assert sel.threshold == 0.7 and sel.value == 1.0 and sel.actions == 2
    sel = select_threshold([0.1, 0.4, 0.7, 0.9], [-1, 1, 1, 0], "utility")
    assert sel.threshold == 0.4 and sel.value == 2.0 and sel.actions == 3


def test_all_negative_utility_selects_no_action():
    sel = select_threshold([0.2, 0.5, 0.99], [-1, -1, -1], "utility")
    assert sel.threshold == 2.0 and sel.value == 0.0 and sel.actions == 0


def test_balanced_accuracy_selects_separating_threshold():
    sel = select_threshold([0.1, 0.3, 0.2, 0.6, 0.8], [0, 0, 0, 1, 1], "balanced_accuracy")
    assert sel.threshold == 0.6 and sel.value == 1.0 and sel.actions == 2
    rng = np.random.default_rng(0)
    s, y = rng.random(50).round(2), rng.random(50) < 0.4
    sel = select_threshold(s, y, "balanced_accuracy")
    assert sel.value == pytest.approx(balanced_accuracy(apply_threshold(s, sel.threshold), y))
    assert all(balanced_accuracy(apply_threshold(s, t), y) <= sel.value + 1e-12 for t in candidate_thresholds(s))


def test_summarize_counts():
    out = summarize([0.9, 0.8, 0.7, 0.1], 0.75, utility=[1, -1, 1, -1], labels=[1, 0, 1, 0])
    assert out == {"actions": 2.0, "net": 0.0, "corrections": 1.0, "reversals": 1.0, "balanced_accuracy": 0.5}


# --------------------------------------------------------------------------- calibration: intervals


def unstable_dev_and_test():
    """Dev whose utility optimum moves under resampling; test whose net depends on the threshold."""
    dev_scores = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95])
    dev_utility = np.array([-1, 1, -1, 1, 1, -1, 1, -1, 1, 0.0])
    test_scores = np.linspace(0.05, 0.99, 120).round(3)
    test_utility = np.where(test_scores > 0.5, 1.0, -1.0)
    return dev_scores, dev_utility, test_scores, test_utility


def test_conditional_bootstrap_fixed_threshold():
    _, _, ts, tu = unstable_dev_and_test()
    draws = conditional_bootstrap(ts, [0.5, 2.0], utility=tu, n_draws=200, seed=4)
    assert draws["net"].shape == (200, 2)
    assert np.all(draws["net"][:, 1] == 0) and np.all(draws["actions"].sum(axis=0)[1] == 0)
    assert np.all(draws["net"][:, 0] == draws["corrections"][:, 0] - draws["reversals"][:, 0])


def test_joint_bootstrap_refits_threshold_per_dev_draw():
    ds, du, ts, tu = unstable_dev_and_test()
    joint = joint_bootstrap(ds, du, ts, "utility", test_utility=tu, n_draws=300, seed=7)
    assert len(np.unique(joint["threshold"])) > 3
    for d in range(0, 300, 30):  # each refit equals a plain refit on the materialised dev draw
        idx = joint["dev_bootstrap"][d]
        sel = select_threshold(ds[idx], du[idx], "utility")
        assert joint["threshold"][d] == sel.threshold and joint["dev_value"][d] == sel.value
        t_idx = joint["test_bootstrap"][d]
        assert joint["net"][d] == summarize(ts[t_idx], sel.threshold, tu[t_idx])["net"]
    point = select_threshold(ds, du, "utility").threshold
    cond = conditional_bootstrap(ts, [point], utility=tu, n_draws=300, seed=7)
    assert np.ptp(np.percentile(joint["net"], [2.5, 97.5])) > np.ptp(np.percentile(cond["net"][:, 0], [2.5, 97.5]))


def test_calibrate_is_json_reproducible_and_notes_no_action():
    ds, du, ts, tu = unstable_dev_and_test()
    dy, ty = (ds > 0.5).astype(int), (ts > 0.5).astype(int)
    kwargs = dict(dev_labels=dy, dev_utility=-np.abs(du), test_labels=ty, test_utility=tu,
                  test_groups=np.arange(120) // 2, test_strata=(np.arange(120) // 2) % 2, n_draws=500, seed=11)
    result = calibrate(ds, ts, **kwargs)
    assert json.loads(json.dumps(result, allow_nan=False)) == result
    assert calibrate(ds, ts, **kwargs) == result
    rules = result["rules"]
    assert set(rules) == {"fixed_0.5", "always", "never", "balanced_accuracy", "utility"}
    util = rules["utility"]
    assert util["threshold"] == 2.0 and util["dev_actions"] == 0 and util["test_actions"] == 0
    assert any("no-action" in n for n in util["notes"])
    assert rules["balanced_accuracy"]["threshold"] == 0.6 and rules["balanced_accuracy"]["dev_value"] == 1.0
    tpr = np.sum(ts >= 0.6) / np.sum(ts > 0.5)  # test positives in (0.5, 0.6) are missed, no false alarms
    assert rules["balanced_accuracy"]["test_balanced_accuracy"] == pytest.approx(0.5 * (tpr + 1.0))
    assert rules["always"]["threshold"] is None and rules["always"]["test_actions"] == 120
    assert rules["fixed_0.5"]["test_net"] == float(tu[ts >= 0.5].sum())
    lo, hi = rules["fixed_0.5"]["conditional"]["net"]
    assert lo <= rules["fixed_0.5"]["test_net"] <= hi and lo < hi
    assert "joint" in util and "joint" not in rules["never"]


def test_joint_refits_at_paper_scale():
    rng = np.random.default_rng(2)
    ds, ts = rng.random(90).round(3), rng.random(300).round(3)
    du, tu = rng.integers(-1, 2, 90), rng.integers(-1, 2, 300)
    joint = joint_bootstrap(ds, du, ts, "utility", dev_groups=np.arange(90) // 5, test_groups=np.arange(300) // 2,
                            test_utility=tu)
    assert joint["threshold"].shape == (10_000,)


def test_action_utility_applies_the_decision_to_all_three_queries():
    """Paper L2840-2849: thresholds fitted on the current query's utility, the decision applied to the
    current, historical and unrelated queries; the current query alone is the named sensitivity."""
    import json
    from pathlib import Path

    from kvprobe.studies.detection.action import QUERIES

    summary = json.loads((Path(__file__).resolve().parents[1] / "artifacts/calibration/smollm2-135m-instruct"
                          / "action.json").read_text())
    assert QUERIES == ("current", "historical", "unrelated")
    for cell in summary["cells"]:
        assert cell["queries"] == list(QUERIES)
        for name, rule in cell["calibration"]["rules"].items():
            sensitivity = cell["current_only"]["calibration"]["rules"][name]
            assert rule["threshold"] == sensitivity["threshold"]          # one fit, on the current query
            assert sum(rule["test_net_by_query"].values()) == rule["test_net"]
            assert rule["test_net_by_query"]["current"] == sensitivity["test_net"]
    lenient_source = next(c for c in summary["cells"] if (c["rule"], c["mask"]) == ("lenient_complete", "source"))
    by_query = lenient_source["calibration"]["rules"]["always"]["test_net_by_query"]
    assert by_query["unrelated"] != 0  # the other queries do move: the sum is not the current query again


def test_selection_decomposition_hand_computed():
    """Paper L3474-3488: actions at s >= 0.5 split by relation; contributions share one denominator."""
    from kvprobe.studies.detection.action import selection_decomposition

    dec = selection_decomposition(scores=[0.9, 0.2, 0.7, 0.5, 0.1, 0.6],
                                  relations=["replacement", "replacement", "confirmation", "other_entity",
                                             "other_entity", "replacement"],
                                  groups=[0, 1, 2, 3, 4, 5], full_correct=[0, 1, 1, 1, 0, 1],
                                  utility=[1, -1, -1, -1, 1, 0], draws=200, seed=3)
    rows = {r["relation"]: r for r in dec["relations"]}
    assert [r["relation"] for r in dec["relations"]] == ["replacement", "confirmation", "other_entity"]
    assert rows["replacement"] == {"relation": "replacement", "n": 3, "full_correct": 2, "selected": 2,
                                   "corrections": 1, "reversals": 0, "net": 1, "false": 0}
    assert rows["confirmation"]["false"] == 1 and rows["confirmation"]["net"] == -1
    # case 4 (utility +1) is not selected: it contributes nothing; case 3 (score exactly 0.5) is selected
    assert rows["other_entity"] == {"relation": "other_entity", "n": 2, "full_correct": 1, "selected": 1,
                                    "corrections": 0, "reversals": 1, "net": -1, "false": 1}
    c = dec["contributions"]
    assert (c["replacement"]["net"], c["other"]["net"], c["total"]["net"]) == (1, -2, -1)
    assert c["replacement"]["pp"] + c["other"]["pp"] == pytest.approx(c["total"]["pp"]) == pytest.approx(-100 / 6)
    lo, hi = c["total"]["ci"]
    assert lo <= c["total"]["pp"] <= hi and lo < hi
