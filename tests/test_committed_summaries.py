"""Every committed study run: its ``summary.json`` and ``report.md`` are exactly what its results recompute to.

For each run directory under ``artifacts/`` holding ``summary.json`` and ``results.jsonl.gz``, the
inputs (config, timing, side logs such as ``operation_costs.jsonl``, ``timings.jsonl`` or
``transfer.json``, and the results) are copied into a temporary directory,
:func:`kvprobe.studies.common.summary.write_summary` with the study's registry entry (as ``kvprobe report``
calls it) rewrites the summary there, and both files must be byte-identical to the committed ones. This guards refactors of the
statistics, parsing and report code: a changed random draw, interval, rounding or table cell shows up
as a byte difference.

Seed: the one the committed summary records (``kvprobe report``'s default, ``REPORT_SEED``, when it
records none). Summary options: a records run whose committed coverage curves rank histories by
learned readouts gets the ``scores.json`` of the same model's committed ``kvprobe readout`` run; a
detection run joined with matched-scores OAKS runs gets the folders and rule its ``natural_action``
records (relative to the checkout); a session-bias run graded by a judge gets the ``grades.jsonl`` its summary
names (in the run directory).

The committed ``kvprobe calibrate`` outputs (``artifacts/calibration/*/action.json`` and ``action.md``:
threshold calibration and coverage curves over a detection run and two quantity runs) are recomputed
the same way from the runs their ``sources`` name.
"""

from __future__ import annotations

import difflib
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from kvprobe.readouts.stats import DRAWS
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.registry import REPORT_SEED, entry

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
#: Files a summary writes (never copied: the recomputation must not read them).
OUTPUTS = {"summary.json", "report.md"}
OUTPUT_SUFFIXES = {".png"}
#: Coverage rankings every records summary has without readout scores.
RECORDS_BUILTIN_RANKINGS = {"detector", "oracle label"}

RUNS = sorted(p.parent for p in ARTIFACTS.glob("*/*/summary.json") if (p.parent / "results.jsonl.gz").is_file())
ACTION_REPORTS = sorted(p.parent for p in ARTIFACTS.glob("calibration/*/action.json"))


def _study(run: Path) -> str:
    return json.loads((run / "config.json").read_text())["study"]


def summary_options(run: Path, committed: dict[str, Any]) -> dict[str, Any]:
    """Keyword options of ``write_summary`` the committed summary was written with (besides the seed)."""
    options: dict[str, Any] = {}
    if _study(run) == "detection" and "natural_action" in committed:  # joined with matched-scores oaks runs
        options["matched_scores"] = ",".join(committed["natural_action"]["sources"])
        options["join_rule"] = committed["natural_action"]["rule"]
    if _study(run) == "session-bias" and committed.get("grades_file"):  # a judge's labels, in the run directory
        options["grades"] = committed["grades_file"]
    if _study(run) == "records":
        names = {n for curves in committed.get("coverage", {}).values() for n in curves}
        if names - RECORDS_BUILTIN_RANKINGS:
            model = json.loads((run / "config.json").read_text())["model"]["name"]
            options["readout_scores"] = ARTIFACTS / "recognition" / model / "records" / "scores.json"
    return options


def _copy_inputs(run: Path, into: Path) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for path in run.iterdir():
        if path.is_file() and path.name not in OUTPUTS and path.suffix not in OUTPUT_SUFFIXES:
            shutil.copy2(path, into / path.name)


def recompute(run: Path, into: Path) -> Path:
    """Copy the run's inputs into ``into`` and rewrite its summary there with the current code."""
    _copy_inputs(run, into)
    committed = json.loads((run / "summary.json").read_text())
    options = summary_options(run, committed)
    if "grades" in options:  # recorded by its name in the run directory: the copy's
        options["grades"] = into / options["grades"]
    write_summary(_study(run), into, seed=committed.get("seed", REPORT_SEED), **options)
    return into


def _assert_same_bytes(committed: Path, again: Path) -> None:
    a, b = committed.read_bytes(), again.read_bytes()
    if a != b:
        diff = "".join(list(difflib.unified_diff(a.decode().splitlines(True), b.decode().splitlines(True),
                                                 f"committed/{committed.name}", f"recomputed/{again.name}"))[:60])
        pytest.fail(f"{committed} differs from its recomputation:\n{diff}")


def test_every_study_has_a_committed_run():
    assert {_study(r) for r in RUNS} >= {"quantity", "babilong", "mquake", "detection", "records", "components",
                                         "derived-note", "query-aware", "cross-checkpoint", "session-bias",
                                         "requests"}


@pytest.mark.parametrize("run", RUNS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_summary_is_reproduced_byte_for_byte(run, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # a detection run records its joined runs relative to the checkout
    committed = json.loads((run / "summary.json").read_text())
    assert committed.get("draws", DRAWS) == DRAWS  # write_summary always draws DRAWS
    again = recompute(run, tmp_path / run.name)
    for name in sorted(OUTPUTS):
        _assert_same_bytes(run / name, again / name)


#: Cheap committed runs whose registry entries have three different seeds (REPORT_SEED, PAPER_SEED and the prompt
#: format's own).
DEFAULT_SEED_RUNS = ("babilong/smollm2-135m-instruct", "fact-map/smollm2-135m-instruct-quantity",
                     "prompt-format/smollm2-135m-instruct")


def test_default_seeds_differ_between_the_default_seed_runs():
    assert len({entry(_study(ARTIFACTS / run)).seed for run in DEFAULT_SEED_RUNS}) == 3


@pytest.mark.parametrize("name", DEFAULT_SEED_RUNS)
def test_write_summary_from_python_with_its_default_seed_reproduces_the_committed_summary(name, tmp_path):
    """``write_summary(NAME, DIR)`` with no seed uses the registry entry's, the one ``kvprobe report`` uses."""
    run = ARTIFACTS / name
    _copy_inputs(run, tmp_path)
    summary = write_summary(_study(run), tmp_path)
    assert summary["seed"] == entry(_study(run)).seed
    for out in sorted(OUTPUTS):
        _assert_same_bytes(run / out, tmp_path / out)
    for png in run.glob("*.png"):
        assert (tmp_path / png.name).read_bytes() == png.read_bytes(), png.name


@pytest.mark.parametrize("report", ACTION_REPORTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_committed_action_report_is_reproduced_byte_for_byte(report, tmp_path, monkeypatch):
    from kvprobe.studies.detection.action import write_action_report

    committed = json.loads((report / "action.json").read_text())
    assert committed["draws"] == DRAWS
    sources = committed["sources"]
    monkeypatch.chdir(ROOT)  # the sources are recorded as given, relative to the checkout
    write_action_report(tmp_path, sources["detection"], sources["dev"], sources["test"], seed=committed["seed"])
    for name in ("action.json", "action.md"):
        _assert_same_bytes(report / name, tmp_path / name)
