"""The committed quantity runs: their reports are what their results recompute to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies.quantity.summary import summarize
from kvprobe.studies.runner import read_rows

RUNS = sorted(p for p in (Path(__file__).resolve().parents[1] / "artifacts" / "quantity").glob("*")
              if (p / "results.jsonl.gz").is_file())


def test_committed_runs_exist():
    assert {p.name for p in RUNS} >= {"smollm2-135m-instruct", "smollm2-135m-instruct-five-conditions"}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_committed_summary_matches_a_recomputation_from_results(run):
    config = json.loads((run / "config.json").read_text())
    committed = json.loads((run / "summary.json").read_text())
    rows = sum(1 for _ in read_rows(run))
    study = config["study_config"]
    conditions = 5 if not study["operations"] else 8
    assert rows == config["cases"] * 3 * conditions
    again = summarize(run, seed=committed["seed"], draws=committed["draws"])
    assert again["cells"] == committed["cells"]
    assert again["warning_signal"] == committed["warning_signal"]
    report = (run / "report.md").read_text()
    head = next(c for c in committed["cells"] if (c["relation"], c["information"], c["query"], c["condition"]) ==
                ("replacement", "unit_from_a", "current", "source"))
    assert f"| source | {head['complete']}/{head['n']} |" in report
