"""Every string a study quotes from the paper is the paper's, verbatim.

A study's ``strings.py`` lists the strings it quotes in ``PAPER_STRINGS`` (name -> text, the
paper section beside each in a comment); placeholders such as ``{envelope}`` are written as
the paper writes them. This test finds every such module and compares each string with the
seed text (:mod:`paper_text`).
"""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from paper_text import PAPER, in_paper

STUDIES = Path(__file__).resolve().parents[1] / "studies"


def _quoted() -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(STUDIES.rglob("strings.py")):
        module = "kvprobe.studies." + ".".join(path.relative_to(STUDIES).with_suffix("").parts)
        for name, text in getattr(importlib.import_module(module), "PAPER_STRINGS", {}).items():
            out.append((module, name, text))
    return out


QUOTED = _quoted()


@pytest.mark.skipif(not PAPER.exists(), reason="the paper (../shared/seed) is not beside the checkout")
@pytest.mark.parametrize("module,name,text", QUOTED, ids=[f"{m.rsplit('.', 2)[-2]}.{n}" for m, n, _ in QUOTED])
def test_quoted_string_is_the_papers(module, name, text):
    assert in_paper(text), f"{module}.PAPER_STRINGS[{name!r}] is not in the paper verbatim: {text!r}"


@pytest.mark.skipif(not PAPER.exists(), reason="the paper is not beside the checkout")
def test_the_comparison_can_fail():
    assert in_paper('return {"answer": "UNKNOWN"}.')
    assert not in_paper('return {"answer": "UNKNOWN"} now.')
    assert not in_paper("Use the same measurement unit as the Time 2 entry.")
