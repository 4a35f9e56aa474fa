"""Held-out-model warning threshold: grid fit, ties, exact intervals, rows read from run directories."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from kvprobe.readouts.stats import clopper_pearson
from kvprobe.studies.quantity.threshold import (TAU_GRID, SignalCases, fit_tau, held_out_thresholds, signal_cases,
                                                write_thresholds, youden)


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


def test_each_model_is_scored_with_a_tau_fitted_on_the_others():
    a = SignalCases("a", np.array([0.0, 0.5, 6.0, 7.0]), np.array([False, False, True, True]))
    b = SignalCases("b", np.array([1.0, 2.0, 3.2, 9.0]), np.array([False, False, True, True]))
    c = SignalCases("c", np.array([0.3, 8.0]), np.array([False, True]))
    rows = {r["model"]: r for r in held_out_thresholds([a, b, c])}
    # Held out a: trained on b + c, whose classes separate for tau in [2.0, 3.0]: tau = 3.0.
    assert rows["a"]["tau"] == 3.0 and rows["a"]["train_models"] == ["b", "c"]
    assert (rows["a"]["flagged_lost"], rows["a"]["flagged_kept"]) == (2, 0)
    # Held out b: trained on a + c (separate on [0.5, 5.75]): tau = 5.75 misses b's 3.2.
    assert rows["b"]["tau"] == 5.75 and rows["b"]["flagged_lost"] == 1 and rows["b"]["sensitivity"] == 0.5
    with pytest.raises(ValueError, match="at least two"):
        held_out_thresholds([a])
    with pytest.raises(ValueError, match="different model"):
        held_out_thresholds([a, a])


def _run_dir(path, model, cases):
    """A run directory with the rows signal_cases reads (statistics input, not a model stand-in)."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model": {"name": model}}))
    rows = []
    for case, (full_ok, source_ok, logp_source, logp_control) in enumerate(cases):
        for cond, ok, logp in (("full", full_ok, -1.0), ("source", source_ok, logp_source),
                               ("source-control", True, logp_control)):
            rows.append({"case_id": f"c{case}", "query": "current", "relation": "replacement", "condition": cond,
                         "lenient_complete": ok, "logp_right": logp})
        rows.append({"case_id": f"c{case}", "query": "historical", "relation": "replacement",
                     "condition": "full", "lenient_complete": False, "logp_right": 0.0})
    (path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_signal_cases_and_cli_compare(tmp_path):
    _run_dir(tmp_path / "m1", "m1", [(True, False, -9.0, -1.0), (True, True, -1.5, -1.0), (False, False, -5, -1)])
    _run_dir(tmp_path / "m2", "m2", [(True, False, -7.0, -2.0), (True, True, -2.0, -2.0)])
    s = signal_cases(tmp_path / "m1")
    assert s.model == "m1" and s.d_c.tolist() == [8.0, 0.5] and s.lost.tolist() == [True, False]  # c2 excluded
    rows = write_thresholds([tmp_path / "m1", tmp_path / "m2"], tmp_path / "cmp")
    assert [r["model"] for r in rows] == ["m1", "m2"]
    assert json.loads((tmp_path / "cmp" / "thresholds.json").read_text())["models"] == rows
    cmd = [sys.executable, "-m", "kvprobe.cli", "report", "quantity", str(tmp_path / "m1"), str(tmp_path / "m2"),
           "--out", str(tmp_path / "cli")]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "| m1 |" in done.stdout and (tmp_path / "cli" / "thresholds.md").is_file()
    bad = subprocess.run(cmd[:-2] + [str(tmp_path / "nowhere")], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "nowhere: no results.jsonl" in bad.stderr
    assert not (tmp_path / "nowhere").exists()
