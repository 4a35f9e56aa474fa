"""Every ``kvprobe ...`` command in the README, docs/ and the study READMEs parses with the real CLI.

Commands are read from fenced code blocks (one command per line, ``\\`` continuations
joined; ``$ `` prompts and trailing ``# comments`` dropped). A renamed option or study
then fails here instead of in a reader's terminal.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from kvprobe.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "studies").glob("*/README.md")])
_FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.M | re.S)


def commands(path: Path) -> list[tuple[int, str]]:
    """(line number, command) of every ``kvprobe`` command in the file's code blocks."""
    text = path.read_text()
    out = []
    for block in _FENCE.finditer(text):
        first_line = text[: block.start(1)].count("\n") + 1
        joined, start = "", None
        for i, line in enumerate(block.group(1).splitlines()):
            line = line.strip()
            if line.startswith("$ "):
                line = line[2:]
            if start is None:
                if not line.startswith("kvprobe "):
                    continue
                start = first_line + i
            joined += " " + line.rstrip("\\").strip()
            if not line.endswith("\\"):
                out.append((start, joined.strip()))
                joined, start = "", None
    return out


CASES = [(p, n, c) for p in DOCS if p.exists() for n, c in commands(p)]


def test_the_docs_have_commands():
    assert len(CASES) >= 10


@pytest.mark.parametrize("path, line, command", CASES,
                         ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in CASES])
def test_command_parses(path, line, command):
    words = shlex.split(command, comments=True)[1:]
    # Shell glue after the command (pipes, &&) is not ours to parse.
    for stop in ("|", "&&", ";", ">"):
        if stop in words:
            words = words[: words.index(stop)]
    try:
        build_parser(words).parse_args(words)
    except SystemExit as exc:
        assert exc.code == 0, f"{path.relative_to(ROOT)}:{line}: `{command}` does not parse"
