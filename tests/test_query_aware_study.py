"""The query-aware study end to end on a tiny model: conditions, capacities, resumable rows, report."""

from __future__ import annotations

import json

import pytest

import kvprobe
from kvprobe.studies.query_aware.study import QueryAwareStudy
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.runner import read_rows, run_study


def test_query_aware_study_runs_and_reports(tmp_path, llama, monkeypatch):
    study = QueryAwareStudy(n_groups=1, max_new_tokens=6, fixed_budget=48, cases_per_batch=3)
    cases = study.cases()
    assert len(cases) == 6 and {c.case.variant for c in cases} >= {"replacement", "confirmation"}
    study = QueryAwareStudy(n_groups=1, max_new_tokens=6, fixed_budget=48, cases_per_batch=3)
    monkeypatch.setattr(study, "make_cases", lambda: cases[:3])
    run_study(study, llama, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    conditions = {r["condition"] for r in rows}
    assert conditions == {"full", "source-mask"} | {f"{m}@{k}" for m in ("quest", "finch", "refreshkv", "recent-pages")
                                                    for k in ("matched", "fixed")}
    for r in rows:
        if r["capacity"] == "matched":  # K = history + observation - masked
            assert r["budget"] == r["history_tokens"] + r["observation_tokens"] - r["masked_tokens"]
        if r["method"] == "finch":
            assert r["resident_tokens"] == r["budget"]
    summary = write_summary("query-aware", tmp_path)
    assert summary["histories"] == 3
    report = (tmp_path / "report.md").read_text()
    assert "quest@matched" in report and "K min / median / max" in report
    # Resuming runs nothing new.
    info = run_study(study, llama, tmp_path, progress=False)
    assert info.cases_run == 0
    assert json.loads((tmp_path / "config.json").read_text())["study_config"]["fixed_budget"] == 48


def test_matched_conditions_equal_full_when_nothing_is_masked_away(llama):
    """With K at least every slot, each method reads everything: the same answers as full access."""
    study = QueryAwareStudy(n_groups=1, max_new_tokens=6, fixed_budget=100_000, methods=("quest", "finch", "refreshkv"))
    case = study.cases()[0]
    history = llama.prefill(case.prompt(False))
    from kvprobe.studies.datasets.record_histories import question_text

    question = question_text(case.queries()[0][1])
    conditions = {n: c for n, _, _, c in study.budgeted_conditions(llama, history, case, question)}
    full = llama.generate(history, question, access=kvprobe.Full(), max_new_tokens=6).token_ids
    for name in ("quest@fixed", "finch@fixed", "refreshkv@fixed"):
        assert llama.generate(history, question, access=conditions[name], max_new_tokens=6).token_ids == full, name


def test_bad_parameters_fail_before_a_model_loads():
    for field in ("n_groups", "fixed_budget", "max_new_tokens", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            QueryAwareStudy(**{field: 0})
    with pytest.raises(ValueError, match="methods"):
        QueryAwareStudy(methods=("quest", "h2o"))
    with pytest.raises(ValueError, match="queries"):
        QueryAwareStudy(queries=("current", "future"))


def test_cli_runs_query_aware_and_lists_the_methods(tmp_path, capsys):
    """`kvprobe run query-aware` and `kvprobe conditions` in real subprocesses on a tiny model."""
    import subprocess
    import sys

    out = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "kvprobe.cli", "run", "query-aware", "--model", "tiny-llama",
                           "--n-groups", "1", "--max-new-tokens", "3", "--fixed-budget", "none", "--out", str(out),
                           "--quiet"], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    rows = list(read_rows(out))
    assert len(rows) == 6 * 6 and not any(r["capacity"] == "fixed" for r in rows)
    assert "quest@matched" in (out / "report.md").read_text()
    from kvprobe.cli import main  # the listing in process: a second interpreter start costs seconds

    assert main(["conditions"]) == 0
    listing = capsys.readouterr().out
    assert all(name in listing for name in ("quest", "finch", "refreshkv", "recent-pages"))
