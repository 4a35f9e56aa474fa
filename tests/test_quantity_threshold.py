"""Held-out-model warning threshold: grid fit, ties, exact intervals, the bootstrap that refits tau, rows read
from run directories; the warning signal's AUCs (D_c and Delta m) and the summary's L.95 and default seed."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kvprobe.readouts.stats import (PAPER_SEED, REPORT_SEED, clopper_pearson, group_bootstrap_indices,
                                    one_sided_lower, youden_thresholds)
from kvprobe.studies.quantity.threshold import (TAU_GRID, SignalCases, bootstrap_held_out, fit_tau, midpoint_grid,
                                                held_out_thresholds, signal_cases, write_thresholds, youden)


def test_grid_is_the_papers():
    assert TAU_GRID[0] == 0.0 and TAU_GRID[-1] == 10.0 and len(TAU_GRID) == 41


def test_fit_tau_maximizes_youden_and_breaks_ties_toward_the_largest():
    d_c = np.array([0.1, 0.2, 3.0, 4.0])
    lost = np.array([False, False, True, True])
    # Every tau in [0.25, 2.75] separates perfectly (J = 1): the largest wins.
    assert fit_tau(d_c, lost) == (2.75, 1.0)
    assert youden(d_c, lost, 0.0) == 0.0  # everything flagged: 1 - 1
    assert youden(d_c, lost, 0.15) == 0.5  # one kept case (0.2) still flagged: 1 - 1/2
    with pytest.raises(ValueError, match="only lost or only kept"):
        fit_tau(d_c, np.ones(4, dtype=bool))


def test_clopper_pearson_known_values():
    lo, hi = clopper_pearson(0, 60)
    assert lo == 0.0 and hi == pytest.approx(1 - 0.025 ** (1 / 60), abs=1e-9)
    lo, hi = clopper_pearson(5, 10)
    assert (lo, hi) == (pytest.approx(0.187086, abs=1e-5), pytest.approx(0.812914, abs=1e-5))
    assert clopper_pearson(0, 0) is None


def _cases(model, d_c, lost, groups=None):
    groups = [f"g{i}" for i in range(len(d_c))] if groups is None else groups
    return SignalCases(model, np.array(groups), np.array(d_c, dtype=float), np.array(lost, dtype=bool))


def test_each_model_is_scored_with_a_tau_fitted_on_the_others():
    a = _cases("a", [0.0, 0.5, 6.0, 7.0], [False, False, True, True])
    b = _cases("b", [1.0, 2.0, 3.2, 9.0], [False, False, True, True])
    c = _cases("c", [0.3, 8.0], [False, True])
    result = held_out_thresholds([a, b, c], draws=200)
    rows = {r["model"]: r for r in result["models"]}
    # Held out a: trained on b + c, whose classes separate for tau in [2.0, 3.0]: tau = 3.0.
    assert rows["a"]["tau"] == 3.0 and rows["a"]["train_models"] == ["b", "c"]
    assert (rows["a"]["flagged_lost"], rows["a"]["flagged_kept"]) == (2, 0)
    # Held out b: trained on a + c (separate on [0.5, 5.75]): tau = 5.75 misses b's 3.2.
    assert rows["b"]["tau"] == 5.75 and rows["b"]["flagged_lost"] == 1 and rows["b"]["sensitivity"] == 0.5
    # Pooled over the held-out models: 2 + 1 + 1 of 5 lost answers flagged, 0 of 5 kept ones.
    pooled = result["pooled"]
    assert (pooled["flagged_lost"], pooled["lost"], pooled["flagged_kept"], pooled["kept"]) == (4, 5, 0, 5)
    assert pooled["sensitivity_ci"] == clopper_pearson(4, 5)
    assert pooled["sensitivity_ci_refit"][0] <= 0.8 <= pooled["sensitivity_ci_refit"][1]
    # Midpoint sensitivity (seed ~4206): held out a, b + c train scores 0.3 1 2 3.2 8 9 -> midpoints
    # 0.65 1.5 2.6 5.6 8.5; the classes separate at 2.6 (the largest tau with J = 1 is 2.6).
    assert midpoint_grid(np.array([1.0, 3.0, 3.0, 4.0])) == (2.0, 3.5)
    assert rows["a"]["midpoints"]["tau"] == pytest.approx(2.6)
    assert (rows["a"]["midpoints"]["flagged_lost"], rows["a"]["midpoints"]["flagged_kept"]) == (2, 0)
    with pytest.raises(ValueError, match="at least two"):
        held_out_thresholds([a])
    with pytest.raises(ValueError, match="different model"):
        held_out_thresholds([a, a])


def _run_dir(path, model, cases):
    """A run directory with the rows signal_cases (and the summary of the cross-model panel) reads (statistics
    input, not a model stand-in)."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model": {"name": model}}))
    rows = []
    for case, (full_ok, source_ok, logp_source, logp_control) in enumerate(cases):
        for cond, ok, logp in (("full", full_ok, -1.0), ("source", source_ok, logp_source),
                               ("source-control", True, logp_control)):
            rows.append({**_rows(f"g{case}", "replacement", "unit_stated", "current", cond, ok and case == 0, ok,
                                 logp, 0.0), "case_id": f"c{case}"})
        rows.append({**_rows(f"g{case}", "replacement", "unit_stated", "historical", "full", False, False, 0.0),
                     "case_id": f"c{case}"})
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_model_without_a_fittable_tau_is_reported_and_left_out_of_the_pool():
    a = _cases("a", [0.0, 6.0], [False, True])
    b = _cases("b", [1.0, 2.0], [False, False])
    result = held_out_thresholds([a, b], draws=50)
    rows = {r["model"]: r for r in result["models"]}
    assert rows["a"]["tau"] is None and rows["a"]["flagged_lost"] is None and rows["a"]["sensitivity_ci"] is None
    assert rows["b"]["tau"] == 5.75 and rows["b"]["flagged_kept"] == 0
    assert (result["pooled"]["lost"], result["pooled"]["kept"]) == (0, 2)  # b only


def test_weighted_youden_fit_is_the_fit_on_repeated_cases():
    scores, labels = np.array([0.2, 1.4, 2.6, 3.0, 0.9]), np.array([0, 1, 1, 0, 1])
    weights = np.array([[2, 0, 1, 3, 1], [1, 1, 1, 1, 1], [0, 2, 0, 0, 1]])
    tau, j = youden_thresholds(scores, labels, TAU_GRID, weights)
    for row, t, jj in zip(weights, tau, j):
        if row[labels == 0].sum() == 0:
            assert np.isnan(t) and np.isnan(jj)  # no kept case drawn: undefined
            continue
        assert (t, jj) == fit_tau(np.repeat(scores, row), np.repeat(labels, row).astype(bool))


def test_the_bootstrap_refits_tau_in_each_draw():
    # Two models whose separating thresholds differ: the tau refit on a draw's training cases moves from
    # draw to draw, while the fixed variant keeps the tau of the original cases.
    a = _cases("a", [0.5, 1.5, 2.5, 3.5, 4.5, 5.5], [False, True, False, True, False, True])
    b = _cases("b", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [False, False, True, False, True, True])
    refit = bootstrap_held_out([a, b], draws=300, seed=7)
    fixed = bootstrap_held_out([a, b], draws=300, seed=7, refit=False)
    tau_fixed = fit_tau(b.d_c, b.lost)[0]  # a is held out: tau fitted on b
    assert np.all(fixed["a"]["tau"] == tau_fixed)
    defined = ~np.isnan(refit["a"]["tau"])
    assert len(np.unique(refit["a"]["tau"][defined])) > 1
    assert not np.array_equal(refit["a"]["sensitivity"], fixed["a"]["sensitivity"], equal_nan=True)
    # One draw by hand: the refit tau is the fit on b's cases repeated as often as their groups were drawn.
    counts = group_bootstrap_indices([f"g{i}" for i in range(6)], n_draws=300, seed=7).group_counts()
    for d in np.flatnonzero(defined)[:5]:
        assert refit["a"]["tau"][d] == fit_tau(np.repeat(b.d_c, counts[d]), np.repeat(b.lost, counts[d]))[0]
        flagged = np.repeat(a.d_c, counts[d]) > refit["a"]["tau"][d]
        lost = np.repeat(a.lost, counts[d])
        if lost.any():
            assert refit["a"]["sensitivity"][d] == flagged[lost].mean()


def test_one_sided_lower_is_the_alpha_percentile():
    # numpy's linear interpolation: the 5th percentile of 1..5 sits at position 0.05 * 4 = 0.2: 1.2.
    assert one_sided_lower([5.0, 1.0, 3.0, 2.0, 4.0]) == pytest.approx(1.2)
    assert one_sided_lower(np.arange(101.0)) == pytest.approx(5.0)
    assert one_sided_lower([1.0, 2.0], alpha=0.5) == pytest.approx(1.5)


def _rows(group, relation, info, query, cond, complete, lenient, logp_right=-1.0, delta_m=None):
    return {"group_id": group, "case_id": f"{group}/{info}", "relation": relation, "information": info,
            "query": query, "condition": cond, "complete_exact": complete, "complete_equivalent": complete,
            "complete": complete, "lenient_complete": lenient, "logp_right": logp_right, "margin": 0.0,
            "margin_change_vs_full": 0.0, "margin_change_vs_control": delta_m,
            "stop_reason": "eos", "category": "complete" if complete else "old_value", "unit": "minutes"}


def test_warning_signal_aucs_by_hand_and_the_default_rule():
    from kvprobe.studies.quantity.summary import warning_signal

    # Three replacement cases, all complete under full access. Under the paper's complete rule g1 is lost,
    # g2 and g3 kept; under the lenient rule nothing is lost.
    #         D_c = -(logp source - logp control)   Delta m (source row's margin change vs control)
    # g1 lost      2.0                               1.0
    # g2 kept      1.0                               3.0
    # g3 kept      0.0                               1.0
    # AUC(D_c) = 2/2 = 1.0; AUC(Delta m) = (0 [1 < 3] + 1/2 [1 = 1]) / 2 = 0.25.
    cells = {}
    for g, lost, d_c, delta_m in (("g1", True, 2.0, 1.0), ("g2", False, 1.0, 3.0), ("g3", False, 0.0, 1.0)):
        for cond, complete, logp, dm in (("full", True, -1.0, None), ("source", not lost, -1.0 - d_c, delta_m),
                                         ("source-control", True, -1.0, None)):
            cells.setdefault(("unit_stated", "current", cond), {})[g] = _rows(
                g, "replacement", "unit_stated", "current", cond, complete, True, logp, dm)
    boot = group_bootstrap_indices(["g1", "g2", "g3"], n_draws=100, seed=0)
    default = warning_signal(cells, ["g1", "g2", "g3"], boot)["unit_stated"]
    assert default["rule"] == "complete" and (default["lost"], default["kept"]) == (1, 2)
    assert default["auc"] == 1.0 and default["auc_delta_m"] == 0.25
    assert (default["mean_delta_m_lost"], default["mean_delta_m_kept"]) == (1.0, 2.0)
    lenient = warning_signal(cells, ["g1", "g2", "g3"], boot, rule="lenient_complete")["unit_stated"]
    assert (lenient["lost"], lenient["kept"]) == (0, 3) and lenient["auc"] is None and lenient["auc_delta_m"] is None


def _summary_run(path, full_ok, control_ok):
    """A run directory with current-query rows of a few groups (statistics input, not a model stand-in)."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model": {"name": "m"}}))
    rows = [_rows(f"g{i}", "replacement", "unit_stated", "current", cond, ok, ok,
                  delta_m=0.0 if cond == "source" else None)
            for i, (full, control) in enumerate(zip(full_ok, control_ok))
            for cond, ok in (("full", full), ("source", full), ("source-control", control))]
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_control_minus_full_lower_bound_by_hand(tmp_path):
    from kvprobe.studies.quantity.summary import summarize

    # g0: right under full, wrong under the control (-1); g1, g2: right under both (0). Control minus full:
    # -1/3 (-33.3 pp). A draw's mean is -k/3 with k ~ Binomial(3, 1/3): P(k = 3) = 1/27 = 3.7 % and
    # P(k >= 2) = 7/27 = 25.9 %, so the 5th percentile of the draws' means, L.95, is -2/3 (-66.7 pp),
    # while the two-sided interval's 2.5th percentile is -1.
    _summary_run(tmp_path / "r", (True, True, True), (False, True, True))
    cells = summarize(tmp_path / "r")["cells"]
    cell = next(c for c in cells if (c["relation"], c["condition"]) == ("all", "source-control"))
    for rule in ("complete", "lenient_complete"):
        assert cell[f"{rule}_vs_full"]["net"] == pytest.approx(-1 / 3)
        assert cell[f"{rule}_vs_full"]["net_lower_one_sided"] == pytest.approx(-2 / 3)
        assert cell[f"{rule}_vs_full"]["net_ci"][0] == pytest.approx(-1.0)
    source = next(c for c in cells if (c["relation"], c["condition"]) == ("all", "source"))
    assert "net_lower_one_sided" not in source["complete_vs_full"]  # controls only


def test_quantity_summaries_default_to_the_papers_seed(tmp_path):
    from kvprobe.cli import build_parser
    from kvprobe.studies.commands import bootstrap_seed as _seed
    from kvprobe.studies.quantity.summary import summarize
    from kvprobe.studies.registry import entry

    _summary_run(tmp_path / "r", (True, True), (True, True))
    assert summarize(tmp_path / "r")["seed"] == PAPER_SEED == 20260919
    args = build_parser(["report", "quantity", "x"]).parse_args(["report", "quantity", "x"])
    assert args.bootstrap_seed is None
    assert _seed(entry("quantity"), args) == PAPER_SEED and _seed(entry("babilong"), args) == REPORT_SEED
    given = build_parser().parse_args(["report", "quantity", "x", "--bootstrap-seed", "3"])
    assert _seed(entry("quantity"), given) == 3


def test_signal_cases_and_cli_compare(tmp_path, capsys):
    _run_dir(tmp_path / "m1", "m1", [(True, False, -9.0, -1.0), (True, True, -1.5, -1.0), (False, False, -5, -1)])
    _run_dir(tmp_path / "m2", "m2", [(True, False, -7.0, -2.0), (True, True, -2.0, -2.0)])
    s = signal_cases(tmp_path / "m1", "lenient_complete")
    assert s.model == "m1" and s.d_c.tolist() == [8.0, 0.5] and s.lost.tolist() == [True, False]  # c2 excluded
    assert s.groups.tolist() == ["g0", "g1"]
    paper = signal_cases(tmp_path / "m1")  # the default: the paper's complete answers (only c0 is complete)
    assert paper.d_c.tolist() == [8.0] and paper.lost.tolist() == [True]
    results = write_thresholds([tmp_path / "m1", tmp_path / "m2"], tmp_path / "cmp")
    assert list(results) == ["complete", "lenient_complete"]
    assert [r["model"] for r in results["lenient_complete"]["models"]] == ["m1", "m2"]
    written = json.loads((tmp_path / "cmp" / "thresholds.json").read_text())
    assert written["rules"] == results and written["seed"] == PAPER_SEED
    cmd = [sys.executable, "-m", "kvprobe.cli", "report", "quantity", str(tmp_path / "m1"), str(tmp_path / "m2"),
           "--out", str(tmp_path / "cli")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| m1 |" in done.stdout and (tmp_path / "cli" / "thresholds.md").is_file()
    written = {p.name for p in (tmp_path / "cli").iterdir()}
    assert {"panel.md", "panel.json", "preservation.png", "margins.png"} <= written
    from kvprobe.cli import main  # the refusal in process: a second interpreter start costs seconds

    assert main(cmd[3:-2] + [str(tmp_path / "nowhere")]) == 2
    assert "nowhere: no results.jsonl" in capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()
