"""The quantity study's claims on planted summaries (issue 46 items 8d and 9): the state operations against the
source mask (rebuild loses, compaction keeps or gains), judged by the one rule; and the committed Qwen-1.5B run's
rows read as its summary says. No model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

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
