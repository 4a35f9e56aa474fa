"""The one summary contract (``kvprobe.studies.common.summary.write_summary``) and the registry's grading options.

``tests/test_committed_summaries.py`` proves the contract reproduces every committed summary; these tests check
its edges on a committed run copied into a temporary folder: options a study does not take are refused, a judge
runs first and its grades file is used, and ``Entry.graded`` declares each grading option once.
"""

from __future__ import annotations

import importlib
import json
import shutil
import types
import typing
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


def _fits(hint: typing.Any, value: typing.Any, where: str) -> None:
    """``value`` has the keys of every TypedDict ``hint`` names for it, at any depth: the TypedDict itself (then each
    of its keys' values against that key's type), the items of a ``list[...]``, the values of a ``dict[str, ...]``
    and the one typed alternative of an optional (``X | None``). ``Any`` and plain types are not checked."""
    if typing.is_typeddict(hint):
        assert isinstance(value, dict), f"{where} is a {type(value).__name__}, its type {hint.__name__} a dict"
        _keys_fit(hint, value, where)
        hints = typing.get_type_hints(hint)
        for key, item in value.items():
            _fits(hints[key], item, f"{where}.{key}")
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is list and isinstance(value, list):
        for i, item in enumerate(value):
            _fits(args[0], item, f"{where}[{i}]")
    elif origin is dict and isinstance(value, dict):
        for key, item in value.items():
            _fits(args[1], item, f"{where}[{key!r}]")
    elif origin in (typing.Union, types.UnionType) and value is not None:
        typed = [a for a in args if a is not type(None)]
        if len(typed) == 1:
            _fits(typed[0], value, where)


class _Inner(typing.TypedDict):
    n: int


class _Outer(typing.TypedDict):
    cells: list[_Inner]
    arms: dict[str, _Inner]
    best: _Inner | None
    free: dict[str, typing.Any]


def test_nested_keys_are_checked_where_a_type_names_them():
    """:func:`_fits` goes into lists, dicts and optionals of TypedDicts, and names the path of a stray key."""
    good = {"cells": [{"n": 1}], "arms": {"a": {"n": 2}}, "best": None, "free": {"x": {"y": 1}}}
    _fits(_Outer, good, "s")
    for bad, where in (({**good, "cells": [{"n": 1}, {"n": 1, "k": 0}]}, r"s.cells\[1\] has keys"),
                       ({**good, "arms": {"a": {}}}, r"s.arms\['a'\] lacks \['n'\]"),
                       ({**good, "best": {"m": 1}}, r"s.best lacks")):
        with pytest.raises(AssertionError, match=where):
            _fits(_Outer, bad, "s")


def test_every_study_types_its_summary():
    """Each registered study's summary module says what its ``summary.json`` holds (a ``Summary`` TypedDict)."""
    untyped = sorted({e.summary for e in STUDIES.values() if not hasattr(importlib.import_module(e.summary), "Summary")})
    assert not untyped, untyped


@pytest.mark.parametrize("run", TYPED_RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_typed_summary_names_every_key_of_its_committed_summary(run):
    """A summary module's ``Summary`` (and ``Cell``, for each of its ``cells``) names exactly the keys its committed
    ``summary.json`` holds: the required ones all, the optional ones where they apply, no others; and so does every
    TypedDict it names for a nested value (a cell of a list, an arm of a dict: :func:`_fits`)."""
    module = importlib.import_module(entry(json.loads((run / "config.json").read_text())["study"]).summary)
    summary = json.loads((run / "summary.json").read_text())
    _fits(module.Summary, summary, f"{run.name}/summary.json")
    if hasattr(module, "Cell"):
        for i, cell in enumerate(summary["cells"]):
            _keys_fit(module.Cell, cell, f"{run.name}/summary.json cells[{i}]")
