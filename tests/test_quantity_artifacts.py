"""The committed quantity runs: complete, with the report's headline cell from the summary.

That every row is graded with the current rules is checked in ``tests/test_committed_grading.py``; that each
summary and report is exactly what its results recompute to, for every committed run of every study, in
``tests/test_committed_summaries.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies.common.runner import read_rows

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
    conditions = (5 if not study["operations"] else 8) + int(study.get("no_context", False)) \
        + 3 * int(study.get("operation_controls", False))
    assert rows == config["cases"] * 3 * conditions
    report = (run / "report.md").read_text()
    head = next(c for c in committed["cells"] if (c["relation"], c["information"], c["query"], c["condition"]) ==
                ("replacement", "unit_from_a", "current", "source"))
    counts = " | ".join(f"{head[rule]}/{head['n']}" for rule in ("complete_exact", "complete_equivalent", "complete",
                                                                 "lenient_complete"))
    assert f"| source | {counts} |" in report
