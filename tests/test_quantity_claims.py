"""The quantity study's claims and unit readouts on planted data (issue 46 items 8d and 9): the state operations
against the source mask (rebuild loses, compaction keeps or gains), judged by the one rule; the unit-cluster
bootstrap beside the group bootstrap and the warning signal within unit; and the committed Qwen-1.5B run's rows and
summary read as the issue recounted them. No model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from kvprobe.studies.common.claims import INCONCLUSIVE, NOT_TESTABLE, REPLICATES, evaluate_run, judge
from kvprobe.studies.quantity.claims import CLAIMS, QUANTITY_QWEN, quantity_vs_source

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
BY_KEY = {c.key: c for c in CLAIMS}


def _cell(condition: str, complete: int, vs_source: tuple[int, int, list[float]] | None = None) -> dict:
    """A replacement / unit-from-A / current cell of 60 groups; ``vs_source``: corrections, reversals, net CI."""
    cell = {"relation": "replacement", "information": "unit_from_a", "query": "current", "condition": condition,
            "n": 60, "complete": complete}
    if vs_source:
        c, r, ci = vs_source
        cell["complete_vs_source"] = {"corrections": c, "reversals": r, "net": (c - r) / 60, "net_ci": ci}
    return cell


def _run(tmp_path: Path, source: int, **operations: tuple[int, tuple[int, int, list[float]]]) -> Path:
    cells = [_cell("source", source), *(_cell(op, n, vs) for op, (n, vs) in operations.items())]
    run = tmp_path / "q"
    run.mkdir(parents=True, exist_ok=True)
    (run / "summary.json").write_text(json.dumps({"cells": cells}))
    return run


def test_rebuild_losing_answers_the_source_mask_keeps_replicates(tmp_path):
    run = _run(tmp_path, 23, rebuild=(11, (0, 12, [-0.3, -0.1])), compact=(25, (2, 0, [0.0, 0.0833])))
    rebuild = quantity_vs_source("rebuild", "unit_from_a", "complete")(run)
    assert (rebuild.value, rebuild.ci) == (-20.0, (-30.0, -10.0))
    assert rebuild.reference == "source mask 23/60; rebuild 11/60" and rebuild.units == 60
    assert rebuild.note == "0/12 corrections/reversals"
    assert judge(BY_KEY["quantity.rebuild"], rebuild) == REPLICATES
    # compaction: a gain whose interval touches 0 is not the paper's gain
    compact = quantity_vs_source("compact", "unit_from_a", "complete")(run)
    assert compact.ci[0] == 0.0 and judge(BY_KEY["quantity.compact"], compact) == INCONCLUSIVE
    gained = _run(tmp_path, 23, compact=(27, (4, 0, [0.0167, 0.1333])))
    assert judge(BY_KEY["quantity.compact"], quantity_vs_source("compact", "unit_from_a", "complete")(gained)) == \
        REPLICATES


def test_a_source_mask_at_the_floor_cannot_lose_answers(tmp_path):
    run = _run(tmp_path, 3, rebuild=(0, (0, 3, [-0.1, -0.0167])))
    m = quantity_vs_source("rebuild", "unit_from_a", "complete")(run)
    assert m.not_testable == "source mask at floor: 3/60 correct, below 10%"
    assert judge(BY_KEY["quantity.rebuild"], m) == NOT_TESTABLE


def test_the_state_operation_claims_are_declared_against_the_source_mask():
    for key, direction in (("quantity.rebuild", "down"), ("quantity.compact", "up")):
        claim = BY_KEY[key]
        assert claim.reference == "source mask" and claim.direction == direction and claim.units == "groups"
        assert sum(t.primary for t in claim.tests if t.run == QUANTITY_QWEN) == 1


def test_the_committed_qwen_run_reads_as_its_summary():
    rows = {(r.claim.key, r.test.primary): r for r in evaluate_run(ARTIFACTS / QUANTITY_QWEN, CLAIMS)}
    rebuild, compact = rows[("quantity.rebuild", True)], rows[("quantity.compact", True)]
    assert rebuild.estimate_text == "-20.0 [-30.0, -10.0] pp" and rebuild.verdict == REPLICATES
    assert "rebuild 11/60" in rebuild.measurement.reference and rebuild.measurement.note.startswith("0/12")
    assert compact.estimate_text == "+3.3 [+0.0, +8.3] pp" and compact.verdict == INCONCLUSIVE
    assert compact.measurement.note.startswith("2/0")


@pytest.mark.parametrize("key", ["quantity.rebuild", "quantity.compact"])
def test_smollm2_cannot_test_the_state_operations(key):
    rows = [r for r in evaluate_run(ARTIFACTS / "quantity" / "smollm2-135m-instruct", CLAIMS) if r.claim.key == key]
    assert rows and all(r.verdict == NOT_TESTABLE for r in rows)


# --------------------------------------------------------------------------- the unit as the resampled level (item 9)


def test_within_unit_auc_ignores_the_ranking_between_units():
    """Lost answers in one unit with a high D_c and kept ones in another rank perfectly when pooled; within unit
    only the unit holding both classes counts (here a: lost 3 and 1 against kept 2, AUC 0.5)."""
    from kvprobe.readouts.stats import auc, group_bootstrap_indices
    from kvprobe.studies.quantity.unit_cluster import within_unit_auc

    d_c = np.array([3.0, 1.0, 2.0, 9.0, 8.0, 0.1, 0.2])
    lost = np.array([True, True, False, True, True, False, False])
    units = np.array(["a", "a", "a", "b", "b", "c", "c"])
    boot = group_bootstrap_indices(np.arange(7), n_draws=500, seed=3)
    w = within_unit_auc(d_c, lost, units, np.arange(7), boot)
    assert auc(d_c, lost) > 0.8 and w["auc"] == 0.5 and w["units_with_both"] == ["a"]
    assert [(u["unit"], u["lost"], u["kept"], u["auc"]) for u in w["per_unit"]] == [
        ("a", 2, 1, 0.5), ("b", 2, 0, None), ("c", 0, 2, None)]
    assert 0 < w["draws_kept"] < 500 and w["auc_ci"][0] <= 0.5 <= w["auc_ci"][1]
    none = within_unit_auc(d_c[3:], lost[3:], units[3:], np.arange(4), boot)
    assert none["auc"] is None and none["auc_ci"] is None and none["units_with_both"] == []


def _unit_cells(per_unit: dict[str, tuple[int, bool]]) -> tuple[dict, list[str]]:
    """Rows of full, source and source-control per group: ``per_unit[unit] = (groups, lost)``; a lost group is
    complete under full access and its control, incomplete under the mask (D_c 2.0), a kept one complete in all
    three (D_c 0.5 - a small per-group offset)."""
    cells: dict = {("unit_from_a", "current", c): {} for c in ("full", "source", "source-control")}
    order = []
    for unit, (n, lost) in per_unit.items():
        for i in range(n):
            g = f"{unit}-{i}"
            order.append(g)
            d_c = 2.0 if lost else 0.5 - i / 100
            for condition in ("full", "source", "source-control"):
                ok = not (lost and condition == "source")
                cells[("unit_from_a", "current", condition)][g] = {
                    "relation": "replacement", "unit": unit, "complete": ok, "lenient_complete": ok,
                    "logp_right": -d_c if condition == "source" else 0.0, "margin_change_vs_control": 1.0}
    return cells, sorted(order)


def test_a_loss_set_by_the_unit_has_a_wide_unit_cluster_interval():
    """Two of four units lose every answer, two keep every one: the group bootstrap's interval excludes 0, the
    unit-cluster one (four units resampled) reaches it; the within-unit AUC is undefined (no unit has both)."""
    from kvprobe.readouts.stats import group_bootstrap_indices
    from kvprobe.studies.quantity.unit_cluster import unit_cluster

    cells, order = _unit_cells({"grams": (5, False), "volts": (5, False), "meters": (5, True), "hours": (5, True)})
    summary_cells = [{"relation": "replacement", "information": "unit_from_a", "query": "current",
                      "condition": "source", **{f"{r}_vs_{ref}": {"net_ci": [-0.7, -0.3]}
                                                for r in ("complete", "lenient_complete") for ref in ("control", "full")}}]
    boot = group_bootstrap_indices(order, n_draws=2000, seed=5)
    uc = unit_cluster(cells, order, boot, seed=5, draws=2000, summary_cells=summary_cells)
    e = uc["per_information"]["unit_from_a"]
    assert (e["n"], e["units"]) == (20, 4)
    c = e["rules"]["complete"]["source_vs_control"]
    assert c["net"] == -0.5 and c["group_ci"] == [-0.7, -0.3]
    assert c["unit_ci"][0] == -1.0 and c["unit_ci"][1] == 0.0  # all-lost and all-kept draws are both likely
    w = e["warning_within_unit"]["complete"]
    assert w["auc"] is None and {u["unit"]: (u["lost"], u["kept"]) for u in w["per_unit"]} == {
        "meters": (5, 0), "volts": (0, 5), "grams": (0, 5), "hours": (5, 0)}


def test_the_committed_qwen_summary_reports_both_bootstraps():
    """Issue 46 item 9's numbers: -0.567 with the group interval [-0.717, -0.417] and the unit-cluster one
    [-0.968, -0.107]; the warning signal within liters (the one unit with lost and kept answers) 0.56 against 0.76
    pooled."""
    s = json.loads((ARTIFACTS / QUANTITY_QWEN / "summary.json").read_text())
    e = s["unit_cluster"]["per_information"]["unit_from_a"]
    c = e["rules"]["complete"]["source_vs_control"]
    assert round(c["net"], 3) == -0.567 and [round(x, 3) for x in c["group_ci"]] == [-0.717, -0.417]
    assert [round(x, 3) for x in c["unit_ci"]] == [-0.968, -0.107] and e["units"] == 6
    w = e["warning_within_unit"]["complete"]
    assert w["units_with_both"] == ["liters"] and w["auc"] == 0.5625
    assert round(s["warning_signal"]["complete"]["unit_from_a"]["auc"], 2) == 0.76
    report = (ARTIFACTS / QUANTITY_QWEN / "report.md").read_text()
    assert "| unit_from_a | complete | source vs control | 60 | 6 | -0.567 [-0.717, -0.417] | -0.567 [-0.968, -0.107] |" \
        in report


def _unit_summary(tmp_path: Path, unit_ci: list[float], mixed: bool) -> Path:
    per_unit = [{"unit": "liters", "lost": 8, "kept": 2 if mixed else 0, "auc": 0.5625 if mixed else None},
                {"unit": "grams", "lost": 0, "kept": 11, "auc": None}]
    within = {"units_with_both": ["liters"] if mixed else [], "per_unit": per_unit,
              "auc": 0.5625 if mixed else None, "auc_ci": [0.125, 1.0] if mixed else None, "draws_kept": 8731}
    contrast = {"net": -0.5, "unit_ci": unit_ci, "group_ci": [-0.7, -0.3]}
    summary = {"cells": [_cell("source-control", 57), _cell("full", 58)],
               "unit_cluster": {"per_information": {"unit_from_a": {
                   "n": 60, "units": 6, "rules": {"complete": {"source_vs_control": contrast,
                                                               "source_vs_full": contrast}},
                   "warning_within_unit": {"complete": within}}}}}
    run = tmp_path / "u"
    run.mkdir(parents=True, exist_ok=True)
    (run / "summary.json").write_text(json.dumps(summary))
    return run


def test_the_unit_cluster_rows_are_secondary_and_flag_their_few_units(tmp_path):
    from kvprobe.studies.quantity.claims import quantity_change_by_unit, quantity_warning_within_unit

    wide = quantity_change_by_unit("unit_from_a", "complete")(_unit_summary(tmp_path, [-0.95, 0.05], True))
    assert (wide.value, wide.ci, wide.units) == (-50.0, (-95.0, 5.0), 6)
    assert wide.reference == "source-control 57/60" and wide.note == "group bootstrap -50.0 [-70.0, -30.0] pp"
    assert judge(BY_KEY["quantity.unit-loss"], wide) == INCONCLUSIVE  # the group interval alone would replicate
    full = quantity_change_by_unit("unit_from_a", "complete", "full")(_unit_summary(tmp_path, [-0.95, -0.1], True))
    assert full.reference == "full 58/60" and judge(BY_KEY["quantity.unit-loss-full"], full) == REPLICATES
    within = quantity_warning_within_unit("complete", "unit_from_a")(_unit_summary(tmp_path, [-0.9, -0.1], True))
    assert (within.value, within.ci, within.units, within.n) == (0.5625, (0.125, 1.0), 10, "liters: 8 lost, 2 kept")
    assert judge(BY_KEY["quantity.warning"], within) == INCONCLUSIVE
    none = quantity_warning_within_unit("complete", "unit_from_a")(_unit_summary(tmp_path, [-0.9, -0.1], False))
    assert judge(BY_KEY["quantity.warning"], none) == NOT_TESTABLE and "no unit holds both" in none.not_testable
    qwen = [t for c in CLAIMS for t in c.tests if "unit-cluster" in t.rule or "within unit" in t.rule]
    assert len(qwen) == 2 and all(not t.primary and t.run == QUANTITY_QWEN for t in qwen)
