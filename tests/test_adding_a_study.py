"""docs/adding-a-study.md's worked example is a study that passes the contract test, so the page cannot drift.

The page's ``# studies/color/<file>.py`` blocks are written into a temporary package made importable as
``kvprobe.studies.color``, its ``Entry(...)`` block is registered in ``kvprobe.studies.registry.STUDIES``
for the test, and the study then goes through ``tests/test_study_contract.py``'s checks (the protocol,
``--help``, bad counts, the smoke run with its resume) and through the page's own test.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

import kvprobe
import kvprobe.studies
import test_study_contract as contract
from kvprobe.readouts.stats import PAPER_SEED, REPORT_SEED
from kvprobe.studies import registry
from test_python_docs import python_blocks

PAGE = Path(__file__).resolve().parents[1] / "docs" / "adding-a-study.md"
NAME = "color"
PACKAGE = f"kvprobe.studies.{NAME}"

pytestmark = pytest.mark.usefixtures("one_thread")


def page_blocks() -> tuple[dict[str, str], str, str]:
    """(the study's files by name, the registry line, the test block) of the page."""
    files, entry, test = {}, None, None
    for _, code in python_blocks(PAGE.read_text()):
        first = code.splitlines()[0]
        if first.startswith(f"# studies/{NAME}/"):
            files[first.removeprefix(f"# studies/{NAME}/")] = code
        elif code.startswith("Entry("):
            entry = code
        elif "def test_" in code:
            test = code
    assert {"study.py", "summary.py"} <= set(files) and entry and test, "the page lost a block of its example"
    return files, entry, test


@pytest.fixture
def color(tmp_path_factory, monkeypatch) -> registry.Entry:
    """The page's study as the package ``kvprobe.studies.color``, registered (its smoke run in the contract's
    table) for the test only."""
    files, entry_code, _ = page_blocks()
    root = tmp_path_factory.mktemp("studies")
    (root / NAME).mkdir()
    (root / NAME / "__init__.py").write_text('"""The color study of docs/adding-a-study.md."""\n')
    for name, code in files.items():
        (root / NAME / name).write_text(code)
    monkeypatch.setattr(kvprobe.studies, "__path__", [*kvprobe.studies.__path__, str(root)])
    made = eval(entry_code, {"Entry": registry.Entry, "_P": "kvprobe.studies.", "REPORT_SEED": REPORT_SEED,
                             "PAPER_SEED": PAPER_SEED})
    entry = made[0] if isinstance(made, tuple) else made
    assert entry.name == NAME
    monkeypatch.setitem(registry.STUDIES, NAME, entry)
    monkeypatch.setitem(contract.SMALL, NAME, dict(entry.smoke))
    yield entry
    for module in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        sys.modules.pop(module)
    importlib.invalidate_caches()


@pytest.fixture(scope="module")
def tiny() -> kvprobe.Model:
    return kvprobe.load_model("tiny-llama")


def test_the_example_keeps_the_protocol(color, capsys):
    contract.test_study_class_follows_the_protocol(NAME)
    contract.test_the_protocol_owns_cases_config_and_batch_state(NAME)
    contract.test_help_lists_every_parameter(NAME, capsys)
    contract.test_no_flag_keeps_every_default(NAME)
    contract.test_bad_counts_are_refused_before_a_model_loads(NAME, capsys)


def test_the_example_runs_resumes_and_summarizes(color, tiny, tmp_path):
    from kvprobe.studies.common.summary import write_summary

    contract.test_small_run_config_rows_and_resume(NAME, tiny, tmp_path)
    summary = write_summary(NAME, tmp_path)
    assert summary["seed"] == color.seed and (tmp_path / "report.md").read_text().startswith("# Color study")
    lo, hi = summary["change"]["ci"]
    assert lo <= summary["change"]["mean"] <= hi


def test_the_pages_own_test_passes(color, tiny, tmp_path):
    _, _, code = page_blocks()
    namespace: dict = {"__name__": "adding_a_study_page"}
    exec(compile(code, str(PAGE), "exec"), namespace)
    tests = [f for name, f in namespace.items() if name.startswith("test_")]
    assert tests
    for test in tests:
        test(tiny, tmp_path / test.__name__)
