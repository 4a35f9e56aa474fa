"""Every ``python`` code block of docs/python.md runs, in order, in one namespace (tiny models, a temporary folder).

A block that fails names its line on the page (tracebacks point into docs/python.md).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "python.md"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(autouse=True)
def one_blas_thread():
    """The page's small probe fits gain nothing from a second BLAS thread (and lose much on a shared machine)."""
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1):
        yield


def python_blocks(text: str) -> list[tuple[int, str]]:
    """(first line on the page, code) of every ``python`` fenced block, in page order."""
    return [(text[: m.start(1)].count("\n") + 1, m.group(1)) for m in _BLOCK.finditer(text)]


#: The used-by tasks the page walks through, one section each.
SECTIONS = ("Mask a record and compare conditions", "Read the internals: `run_with_cache`, `capture=`, `trace`",
            "Heads, components and patching", "Read another checkpoint's cache",
            "Store, probe and transfer on your own pairs")


def test_the_page_has_every_section_with_blocks():
    text = PAGE.read_text()
    for section in SECTIONS:
        assert f"\n## {section}\n" in text, section
    assert len(python_blocks(text)) >= 10


def test_every_block_runs_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_python"}
    for line, code in python_blocks(PAGE.read_text()):
        # Leading newlines keep the page's line numbers in tracebacks.
        exec(compile("\n" * (line - 1) + code, str(PAGE), "exec"), namespace)
