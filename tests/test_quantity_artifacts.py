"""The committed quantity runs: complete, with the report's headline cell from the summary.

That each summary and report is exactly what its results recompute to is checked for every
committed run of every study in ``tests/test_committed_summaries.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies.runner import read_rows

RUNS = sorted(p for p in (Path(__file__).resolve().parents[1] / "artifacts" / "quantity").glob("*")
              if (p / "results.jsonl.gz").is_file())


def test_committed_runs_exist():
    assert {p.name for p in RUNS} >= {"smollm2-135m-instruct", "smollm2-135m-instruct-five-conditions"}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_committed_run_is_complete_and_reported(run):
    config = json.loads((run / "config.json").read_text())
    committed = json.loads((run / "summary.json").read_text())
    rows = sum(1 for _ in read_rows(run))
    study = config["study_config"]
    conditions = 5 if not study["operations"] else 8
    assert rows == config["cases"] * 3 * conditions
    report = (run / "report.md").read_text()
    head = next(c for c in committed["cells"] if (c["relation"], c["information"], c["query"], c["condition"]) ==
                ("replacement", "unit_from_a", "current", "source"))
    assert f"| source | {head['complete']}/{head['n']} |" in report
