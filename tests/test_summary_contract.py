"""The one summary contract (``kvprobe.studies.common.summary.write_summary``) and the registry's grading options.

``tests/test_committed_summaries.py`` proves the contract reproduces every committed summary; these tests check
its edges on a committed run copied into a temporary folder: options a study does not take are refused, a judge
runs first and its grades file is used, and ``Entry.graded`` declares each grading option once.
"""

from __future__ import annotations

import importlib
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.registry import STUDIES, Graded, entry

ROOT = Path(__file__).resolve().parents[1]
#: A cheap committed run of a graded study (its grades file is committed beside it).
GRADED_RUN = ROOT / "artifacts" / "session-bias" / "smollm2-val"


def _copy(run: Path, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    for path in run.iterdir():
        if path.is_file() and path.name not in ("summary.json", "report.md") and path.suffix != ".png":
            shutil.copy2(path, into / path.name)
    return into


def test_grading_options_are_declared_once_per_graded_study():
    graded = {name: e for name, e in STUDIES.items() if e.graded is not None}
    assert set(graded) == {"minteval", "factconsolidation", "revisions", "oaks-open", "session-bias"}
    for name, e in STUDIES.items():
        names = [o.name for o in e.command_options]
        assert len(names) == len(set(names)), name
        assert ("grades" in names) == (e.graded is not None), name
        assert ("judge_model" in names) == ("judge_dtype" in names) == (e.graded is not None and
                                                                      e.graded.judge is not None), name
        assert not {"grades", "judge_model", "judge_dtype"} & {o.name for o in e.options}, name


def test_an_option_the_study_does_not_take_is_refused(tmp_path):
    with pytest.raises(TypeError, match="unknown summary option"):
        write_summary("babilong", _copy(ROOT / "artifacts" / "babilong" / "smollm2-135m-instruct", tmp_path),
                      grades="grades.jsonl")


def test_a_judge_model_grades_the_run_first_and_its_grades_are_used(tmp_path, monkeypatch):
    """``judge_model`` runs the entry's judge (here a stand-in returning the committed judge's grades file) with
    the model and dtype given, and the summary is the committed one, which those grades gave."""
    run = _copy(GRADED_RUN, tmp_path)
    calls = []

    def judge(out_dir, model, dtype):
        calls.append((Path(out_dir), model, dtype))
        return Path(out_dir) / "grades.jsonl"

    monkeypatch.setattr("kvprobe.studies.session_bias.summary.judge_run", judge)
    write_summary("session-bias", run, judge_model="a-judge", judge_dtype="bfloat16")
    assert calls == [(run, "a-judge", "bfloat16")]
    for name in ("summary.json", "report.md"):
        assert (run / name).read_bytes() == (GRADED_RUN / name).read_bytes(), name


def test_grades_and_a_judge_model_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        write_summary("session-bias", tmp_path, grades="g.jsonl", judge_model="m")
    with pytest.raises(ValueError, match="needs judge_model"):
        write_summary("session-bias", tmp_path, judge_dtype="bfloat16")


def test_a_study_without_a_judge_has_no_judge_option(tmp_path):
    with pytest.raises(TypeError, match="unknown summary option"):
        write_summary("minteval", tmp_path, judge_model="m")
    with pytest.raises(ValueError, match="no judge model"):
        replace(entry("minteval"), graded=Graded()).judge_function()


#: Committed runs of the studies whose summary module types its ``summary.json`` (``Summary``, ``Cell``).
TYPED_RUNS = sorted(p.parent for p in (ROOT / "artifacts").glob("*/*/summary.json")
                    if (p.parent / "config.json").is_file()
                    and json.loads((p.parent / "config.json").read_text()).get("study") in STUDIES
                    and hasattr(importlib.import_module(
                        entry(json.loads((p.parent / "config.json").read_text())["study"]).summary), "Summary"))


def _keys_fit(typed: type, value: dict, where: str) -> None:
    keys = set(value)
    assert typed.__required_keys__ <= keys, f"{where} lacks {sorted(typed.__required_keys__ - keys)}"
    assert keys <= typed.__required_keys__ | typed.__optional_keys__, \
        f"{where} has keys its type does not name: {sorted(keys - typed.__required_keys__ - typed.__optional_keys__)}"


def test_every_study_types_its_summary():
    """Each registered study's summary module says what its ``summary.json`` holds (a ``Summary`` TypedDict)."""
    untyped = sorted({e.summary for e in STUDIES.values() if not hasattr(importlib.import_module(e.summary), "Summary")})
    assert not untyped, untyped


@pytest.mark.parametrize("run", TYPED_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_typed_summary_names_every_key_of_its_committed_summary(run):
    """A summary module's ``Summary`` (and ``Cell``, for each of its ``cells``) names exactly the keys its committed
    ``summary.json`` holds: the required ones all, the optional ones where they apply, no others."""
    module = importlib.import_module(entry(json.loads((run / "config.json").read_text())["study"]).summary)
    summary = json.loads((run / "summary.json").read_text())
    _keys_fit(module.Summary, summary, f"{run.name}/summary.json")
    if hasattr(module, "Cell"):
        for i, cell in enumerate(summary["cells"]):
            _keys_fit(module.Cell, cell, f"{run.name}/summary.json cells[{i}]")
