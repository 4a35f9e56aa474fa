"""The warning signal's candidate decomposition and loss split (issue 36 item 3; paper L374-379, L4085-4212),
tested on hand-computed small cases."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kvprobe.readouts.stats import GroupBootstrap, bootstrap_spearman, group_bootstrap_indices, midranks, spearman
from kvprobe.studies.quantity.summary import LOSS_KINDS, PAPER_TAU, candidate_decomposition, format_report, loss_kind


def test_spearman_hand_computed():
    # ranks of y: 1, 3, 2, 4; d = 0, 1, -1, 0; rho = 1 - 6 * 2 / (4 * 15) = 0.8
    assert spearman([1, 2, 3, 4], [10, 30, 20, 40]) == pytest.approx(0.8)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    # ties take midranks: x ranks 1.5, 1.5, 3; y ranks 1, 2, 3 -> Pearson of (-.5, -.5, 1) and (-1, 0, 1)
    assert spearman([5, 5, 7], [1, 2, 3]) == pytest.approx(1.5 / np.sqrt(1.5 * 2))
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    assert np.isnan(spearman([1], [2]))


def test_midranks_hand_computed_and_equal_to_scipy():
    assert midranks(np.array([3.0, 1.0, 3.0, 2.0, 3.0])).tolist() == [4.0, 1.0, 4.0, 2.0, 4.0]
    assert midranks(np.array([2.0, 2.0])).tolist() == [1.5, 1.5] and midranks(np.array([])).tolist() == []
    from scipy.stats import rankdata

    rng = np.random.default_rng(0)
    for n in (1, 2, 7, 60):
        for _ in range(20):
            a = rng.integers(0, max(1, n // 3), n) + rng.choice([0.0, 0.5], n)
            assert np.array_equal(midranks(a), rankdata(a))


def test_draw_means_are_nanmean_to_the_bit():
    from kvprobe.studies.quantity.summary import _draw_means

    rng = np.random.default_rng(1)
    values = rng.normal(size=40)
    values[rng.random(40) < 0.4] = np.nan
    draws = rng.integers(0, 40, (500, 40))
    with warnings.catch_warnings():  # a draw with no value in the cell: NaN, with numpy's warning
        warnings.simplefilter("ignore", RuntimeWarning)
        reference = np.nanmean(values[draws], axis=1)
    assert np.array_equal(_draw_means(values, draws), reference, equal_nan=True)
    assert _draw_means(np.array([1.0, np.nan, 3.0]), np.array([[0, 2], [1, 1]])).tolist()[0] == 2.0
    assert np.isnan(_draw_means(np.array([1.0, np.nan, 3.0]), np.array([[1, 1]]))[0])


def test_bootstrap_spearman_per_draw():
    # two groups of two cases; draw 0 takes group 0 twice (x constant within its copies -> rho of duplicated pairs)
    boot = GroupBootstrap(np.array(["a", "b"]), np.array([0, 0, 1, 1]), np.array([[0, 1], [1, 1], [0, 0]]))
    x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 2.0, 4.0, 3.0])
    draws = bootstrap_spearman(x, y, boot)
    assert draws[0] == pytest.approx(0.8)  # the original sample
    assert draws[1] == pytest.approx(-1.0)  # group b twice: (3, 4, 3, 4) against (4, 3, 4, 3)
    assert draws[2] == pytest.approx(1.0)


def test_loss_kind():
    assert loss_kind({"first_answer_correct": False, "stop_reason": "cap"}) == "content"
    assert loss_kind({"first_answer_correct": True, "stop_reason": "cap"}) == "stop"
    assert loss_kind({"first_answer_correct": True, "stop_reason": "eos"}) == "other"
    assert LOSS_KINDS == ("content", "stop", "other")


def _row(group, cond, logp_c, logp_o, complete, first=False, stop="eos"):
    return {"group_id": group, "relation": "replacement", "information": "unit_from_a", "query": "current",
            "condition": cond, "logp_right": logp_c, "logp_other": logp_o, "margin": logp_c - logp_o,
            "complete": complete, "lenient_complete": complete, "first_answer_correct": first, "stop_reason": stop}


def _cells():
    """Four replacement groups; control log p (current, old) = (-1, -5) everywhere.

    g0: source (-3, -9): D_c 2, D_o 4, Delta m 2; lost, first answer wrong (content), flagged (2 > 0.75).
    g1: source (-1.5, -12): D_c 0.5, D_o 7, Delta m 6.5; lost, complete first answer then the cap (stop), not flagged.
    g2: source (-2, -8): D_c 1, D_o 3, Delta m 2; kept, flagged.
    g3: source (-1.25, -15): D_c 0.25, D_o 10, Delta m 9.75; incomplete under full access: no label.
    """
    spec = {"g0": (-3, -9, False, False, "eos", True), "g1": (-1.5, -12, False, True, "cap", True),
            "g2": (-2, -8, True, True, "eos", True), "g3": (-1.25, -15, False, False, "eos", False)}
    cells = {("unit_from_a", "current", c): {} for c in ("full", "source", "source-control")}
    for g, (lc, lo, complete, first, stop, full_ok) in spec.items():
        cells[("unit_from_a", "current", "full")][g] = _row(g, "full", -1, -5, full_ok, True)
        cells[("unit_from_a", "current", "source")][g] = _row(g, "source", lc, lo, complete, first, stop)
        cells[("unit_from_a", "current", "source-control")][g] = _row(g, "source-control", -1, -5, True, True)
    return cells


def test_candidate_decomposition_hand_computed():
    order = ["g0", "g1", "g2", "g3"]
    boot = group_bootstrap_indices(order, n_draws=200, seed=1)
    dec = candidate_decomposition(_cells(), order, boot, rules=("complete",))
    assert dec["tau"] == PAPER_TAU == 0.75
    e = dec["per_information"]["unit_from_a"]
    assert e["n"] == 4
    assert e["mean_d_c"] == pytest.approx((2 + 0.5 + 1 + 0.25) / 4)
    assert e["mean_d_o"] == pytest.approx((4 + 7 + 3 + 10) / 4)
    assert e["mean_delta_m"] == pytest.approx((2 + 6.5 + 2 + 9.75) / 4)
    assert e["delta_m_positive"] == 4 and e["d_c_smaller"] == 4
    # Delta m (2, 6.5, 2, 9.75) has ranks (1.5, 3, 1.5, 4); D_o (4, 7, 3, 10) ranks (2, 3, 1, 4)
    assert e["spearman_delta_m_d_o"] == pytest.approx(spearman([1.5, 3, 1.5, 4], [2, 3, 1, 4]))
    lo, hi = e["spearman_ci"]
    assert -1 <= lo <= hi <= 1 and e["spearman_draws_kept"] <= 200
    s = dec["loss_split"]["complete"]["unit_from_a"]
    assert (s["lost"], s["kept"], s["flagged_lost"], s["flagged_kept"]) == (2, 1, 1, 1)
    assert (s["lost_content"], s["lost_stop"], s["lost_other"]) == (1, 1, 0)
    assert (s["flagged_lost_content"], s["flagged_lost_stop"]) == (1, 0)
    assert s["flagged_lost_stop_ci"] == pytest.approx([0.0, 0.975])  # exact interval of 0/1
    assert s["lost_current_above_old"] == 2 and s["lost_delta_m_positive"] == 2


def test_decomposition_in_report():
    order = ["g0", "g1", "g2", "g3"]
    boot = group_bootstrap_indices(order, n_draws=50, seed=1)
    summary = {"groups": 4, "draws": 50, "seed": 1, "cells": [],
               "candidate_decomposition": candidate_decomposition(_cells(), order, boot, rules=("complete",))}
    text = format_report(summary, {"model": {"name": "m"}})
    assert "Spearman(Delta m, D_o)" in text and "| complete | unit_from_a | 2 (1 / 1 / 0) | 1/1 = 100.0 %" in text


def test_decomposition_not_in_a_run_without_old_scores():
    cells = _cells()
    for row in cells[("unit_from_a", "current", "source-control")].values():
        del row["logp_other"]
    order = ["g0", "g1", "g2", "g3"]
    assert candidate_decomposition(cells, order, group_bootstrap_indices(order, n_draws=10, seed=1)) is None
