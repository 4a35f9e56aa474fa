"""The quantity study through the resumable runner, on a tiny model (real subprocess for the CLI)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys

import pytest

from kvprobe.studies.quantity.study import QuantityStudy
from kvprobe.studies.quantity.summary import summarize
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.runner import ConfigMismatchError, completed_cases, read_rows, run_study

STUDY = dict(n_groups=2, max_new_tokens=6)


def test_rows_cover_the_grid_and_resume_reproduces_bytes(llama, tmp_path):
    study = QuantityStudy(**STUDY)
    first = tmp_path / "a"
    info = run_study(study, llama, first, progress=False)
    rows = list(read_rows(first))
    assert info.cases_run == 4 and len(rows) == 4 * 3 * 8
    assert {r["condition"] for r in rows} == {"full", "source", "source-control", "number", "number-control",
                                               "recompute", "rebuild", "compact"}
    source = [r for r in rows if r["condition"] == "source"]
    control = {(r["case_id"], r["query"]): r for r in rows if r["condition"] == "source-control"}
    for r in source:
        c = control[(r["case_id"], r["query"])]
        assert r["margin_change_vs_control"] == pytest.approx(r["margin"] - c["margin"], abs=2e-6)
        (s0, s1), = r["spans"]
        (c0, c1), = c["spans"]
        assert s1 - s0 == c1 - c0 and (c0 >= s1 or c1 <= s0)

    # Kill simulation: keep the first case and half a line of the second, then resume.
    # Batches of 3 cases: the first batch reruns whole and writes only its missing cases.
    study = QuantityStudy(**STUDY, cases_per_batch=3)
    first = tmp_path / "a3"
    run_study(study, llama, first, progress=False)
    second = tmp_path / "b"
    run_study(study, llama, second, progress=False)
    lines = (second / "results.jsonl").read_text().splitlines(keepends=True)
    per_case = len(lines) // 4
    (second / "results.jsonl").write_text("".join(lines[:per_case]) + lines[per_case][:40])
    assert completed_cases(second / "results.jsonl") == {rows[0]["case_id"]}
    resumed = run_study(study, llama, second, progress=False)
    assert resumed.cases_skipped == 1 and resumed.cases_run == 3
    assert (second / "results.jsonl").read_bytes() == (first / "results.jsonl").read_bytes()
    again = run_study(study, llama, second, progress=False)
    assert again.cases_run == 0


def test_batch_composition_moves_numbers_only_by_rounding(llama, tmp_path):
    one = QuantityStudy(**STUDY, operations=False, cases_per_batch=1)
    four = QuantityStudy(**STUDY, operations=False, cases_per_batch=4)
    a = one.run_cases(llama, one.cases())
    b = four.run_cases(llama, four.cases())
    for rows_a, rows_b in zip(a, b):
        for ra, rb in zip(rows_a, rows_b):
            assert (ra["case_id"], ra["condition"], ra["query"]) == (rb["case_id"], rb["condition"], rb["query"])
            assert ra["output"] == rb["output"]
            assert ra["margin"] == pytest.approx(rb["margin"], abs=1e-4)


def test_a_different_config_is_refused(llama, tmp_path):
    run_study(QuantityStudy(**STUDY), llama, tmp_path, progress=False)
    before = (tmp_path / "results.jsonl").read_bytes()
    with pytest.raises(ConfigMismatchError, match="another configuration"):
        run_study(QuantityStudy(n_groups=3, max_new_tokens=6), llama, tmp_path, progress=False)
    assert (tmp_path / "results.jsonl").read_bytes() == before


def test_summary_recomputes_from_rows(llama, tmp_path):
    run_study(QuantityStudy(**STUDY), llama, tmp_path, progress=False)
    summary = write_summary("quantity", tmp_path)
    assert json.loads((tmp_path / "summary.json").read_text())["cells"] == summary["cells"]
    rows = list(read_rows(tmp_path))
    cell = next(c for c in summary["cells"] if (c["relation"], c["information"], c["query"], c["condition"]) ==
                ("all", "unit_from_a", "current", "source"))
    for relation in {r["relation"] for r in rows}:  # per-relation cells count only their groups
        sub = next(c for c in summary["cells"] if (c["relation"], c["information"], c["query"], c["condition"]) ==
                   (relation, "unit_from_a", "current", "source"))
        assert sub["n"] == len({r["group_id"] for r in rows if r["relation"] == relation})
    mine = [r for r in rows if (r["information"], r["query"], r["condition"]) == ("unit_from_a", "current", "source")]
    assert cell["n"] == len(mine) == 2
    assert cell["complete"] == sum(r["complete"] for r in mine)
    mean = sum(r["margin_change_vs_control"] for r in mine) / len(mine)
    assert cell["margin_change_vs_control"]["mean"] == pytest.approx(mean)
    lo, hi = cell["margin_change_vs_control"]["ci"]
    assert lo <= mean <= hi
    assert summarize(tmp_path)["cells"] == summary["cells"]  # seeded bootstrap
    packed = tmp_path / "packed"  # committed runs store results.jsonl gzipped
    packed.mkdir()
    (packed / "config.json").write_bytes((tmp_path / "config.json").read_bytes())
    (packed / "results.jsonl.gz").write_bytes(gzip.compress((tmp_path / "results.jsonl").read_bytes()))
    assert summarize(packed)["cells"] == summary["cells"]
    assert (tmp_path / "figure.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = (tmp_path / "report.md").read_text()
    assert "## All 2 groups, unit_from_a, historical query" in report and "| source |" in report


def test_cli_run_quantity(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "kvprobe.cli", "run", "quantity", "--model", "tiny-llama", "--n-groups", "1",
           "--max-new-tokens", "4", "--no-operations", "--out", str(out), "--quiet", "--attn", "sdpa"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert {p.name for p in out.iterdir()} >= {"config.json", "results.jsonl", "summary.json", "report.md"}
    rows = list(read_rows(out))
    assert len(rows) == 2 * 3 * 5
    config = json.loads((out / "config.json").read_text())
    assert config["study_config"]["operations"] is False and config["model"]["name"] == "tiny-llama"
    assert config["model"]["attn_implementation"] == "sdpa"


def test_auc_and_zero_failure_bound():
    import numpy as np

    from kvprobe.readouts.stats import auc_two_samples as auc
    from kvprobe.readouts.stats import zero_failure_bound

    assert auc(np.array([3.0, 4.0]), np.array([1.0, 2.0])) == 1.0
    assert auc(np.array([1.0]), np.array([1.0])) == 0.5
    assert auc(np.array([1.0, 3.0]), np.array([2.0])) == 0.5
    assert np.isnan(auc(np.array([]), np.array([1.0])))
    assert zero_failure_bound(60) == pytest.approx(0.0487, abs=1e-4)  # paper partC 6: 4.87 %
    assert zero_failure_bound(20) == pytest.approx(0.1391, abs=1e-4)  # 13.91 %
