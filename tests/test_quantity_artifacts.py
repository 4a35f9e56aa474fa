"""The committed quantity runs: complete, graded with the current rules, with the report's headline cell from
the summary.

That each summary and report is exactly what its results recompute to is checked for every
committed run of every study in ``tests/test_committed_summaries.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies.quantity.study import GRADE_COLUMNS, regrade_rows
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
    conditions = 5 if not study["operations"] else 8
    assert rows == config["cases"] * 3 * conditions
    report = (run / "report.md").read_text()
    head = next(c for c in committed["cells"] if (c["relation"], c["information"], c["query"], c["condition"]) ==
                ("replacement", "unit_from_a", "current", "source"))
    counts = " | ".join(f"{head[rule]}/{head['n']}" for rule in ("complete_exact", "complete_equivalent", "complete",
                                                                 "lenient_complete"))
    assert f"| source | {counts} |" in report


@pytest.mark.parametrize("run", RUNS, ids=lambda p: p.name)
def test_committed_grades_are_the_current_grading(run):
    """Generation does not depend on grading: every stored grade column equals a regrade of the stored output
    and stop reason, so a change of the rules cannot leave stale rows behind (regrade them in place)."""
    config = json.loads((run / "config.json").read_text())
    rows = list(read_rows(run))
    stale = [(row["case_id"], row["query"], row["condition"], column)
             for row, again in zip(rows, regrade_rows(iter(rows), config))
             for column in GRADE_COLUMNS if row.get(column, "missing") != again[column]]
    assert not stale, f"{len(stale)} stale grade cells, e.g. {stale[:3]}"
