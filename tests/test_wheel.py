"""The built wheel works outside the checkout: installed into a fresh virtual environment, it finds no data until
``kvprobe data pull`` copies the sets from a mirror, then runs every study that reads a registered data set.

Slow (about a minute or two): it builds the wheel from a copy of the sources, makes a venv that reuses the installed
dependencies (``--system-site-packages``), installs the wheel there (shadowing the editable install), and runs
``kvprobe`` from a folder outside the checkout. Skipped without a ``shared/data`` mirror beside the checkout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kvprobe.parameters import flag
from kvprobe.studies.registry import STUDIES

ROOT = Path(__file__).resolve().parents[1]
MIRROR = ROOT.parent / "shared" / "data"
#: The top-level files and folders a wheel is built from (setup.py maps the folders under ``kvprobe``).
SOURCES = ("pyproject.toml", "setup.py", "README.md", "kvprobe", "extract", "interventions", "readouts", "studies")
#: The studies that read a registered data set in their small run (``smoke``): bAbI, PG-19 or MQuAKE's templates.
DATA_STUDIES = ("babilong", "minteval", "mquake", "factconsolidation", "revisions", "detection", "oaks")


#: Runs ``kvprobe.cli.main`` on each (name, arguments) of ``sys.argv[1]`` (JSON) in one process and prints, as one
#: JSON line, name -> [exit status, the end of what it wrote to stderr (and any exception)].
DRIVER = """
import contextlib, io, json, sys
from kvprobe.cli import main
out = {}
for name, args in json.loads(sys.argv[1]):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            status = main(args)
    except SystemExit as stop:
        status = stop.code if isinstance(stop.code, int) else 1
    except Exception as error:
        status = 1
        err.write(repr(error))
    out[name] = [status, err.getvalue()[-3000:]]
print(json.dumps(out))
"""


def smoke_options(name: str) -> list[str]:
    """The registry's ``smoke`` parameters of study ``name`` as ``kvprobe run`` options."""
    cls = STUDIES[name].study_class()
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}
    out: list[str] = []
    for key, value in STUDIES[name].smoke.items():
        if isinstance(value, bool) and isinstance(defaults[key], bool):  # a switch: --name, or --no-name
            out += [] if value == defaults[key] else [flag(key) if value else "--no-" + key.replace("_", "-")]
        elif isinstance(value, tuple):
            out += [flag(key), ",".join(map(str, value))]
        else:
            out += [flag(key), "none" if value is None else "yes" if value is True else "no" if value is False
                    else str(value)]
    return out


@pytest.mark.slow
@pytest.mark.skipif(not MIRROR.is_dir(), reason="no shared/data mirror beside this checkout to pull the data from")
def test_the_wheel_pulls_the_data_and_runs_every_data_reading_study_outside_the_checkout(tmp_path):
    source = tmp_path / "source"  # a copy, so the build writes nothing into the checkout
    source.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy(ROOT / name, source / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w",
                    str(tmp_path / "wheels"), str(source)], check=True, capture_output=True)
    (wheel,) = (tmp_path / "wheels").glob("kvprobe-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python, kvprobe = venv / "bin" / "python", venv / "bin" / "kvprobe"
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", str(wheel)],
                   check=True, capture_output=True)

    work = tmp_path / "work"  # outside the checkout: no shared/data beside any source tree
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KVPROBE_DATA")}
    env.update(KVPROBE_DATA=str(tmp_path / "data"), XDG_DATA_HOME=str(tmp_path / "xdg"), OMP_NUM_THREADS="1")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*args], cwd=work, env=env, capture_output=True, text=True, timeout=300)

    where = run(str(python), "-c", "import kvprobe, kvprobe.studies; print(kvprobe.__file__, kvprobe.studies.__file__)")
    assert where.returncode == 0 and all(Path(p).is_relative_to(venv) for p in where.stdout.split()), where

    def studies(prefix: str) -> dict[str, list]:
        """Run every data-reading study's small run through the wheel's ``kvprobe`` command line, in one venv
        process (one import instead of one per study): name -> [exit status, the end of its stderr]."""
        calls = [(name, ["run", name, "--model", "tiny-llama", "--quiet", "--out", str(tmp_path / f"{prefix}{name}"),
                         *smoke_options(name)]) for name in DATA_STUDIES]
        done = run(str(python), "-c", DRIVER, json.dumps(calls))
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.splitlines()[-1])

    for name, (status, stderr) in studies("before-").items():  # no data yet: each stops, naming the pull command
        assert status != 0 and "kvprobe data pull" in stderr, (name, stderr)

    pulled = run(str(kvprobe), "data", "pull", "all", "--from", str(MIRROR))
    assert pulled.returncode == 0, pulled.stderr
    listed = run(str(kvprobe), "data", "list")
    assert listed.stdout.count("$KVPROBE_DATA") == 4 and "missing" not in listed.stdout, listed.stdout

    for name, (status, stderr) in studies("").items():
        assert status == 0, (name, stderr)
        assert (tmp_path / name / "summary.json").is_file() and (tmp_path / name / "report.md").is_file(), name
