"""The paper's text, for tests that check a quoted string is the paper's, verbatim.

The seed is LaTeX: quotes are ``...'', braces are escaped, values sit in \\texttt{...},
and sentences wrap across lines. :func:`in_paper` compares words and punctuation only:
both sides drop LaTeX commands, braces and backslashes, map TeX quotes to ``"`` and
collapse whitespace, so ``{"answer": "UNKNOWN"}`` matches
``\\texttt{\\{"answer": "UNKNOWN"\\}}`` while any changed word, number or punctuation
mark fails.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

PAPER = Path(__file__).resolve().parents[2] / "shared" / "seed" / "000_1f60a69837e742f0.txt"


def _plain(text: str, latex: bool) -> str:
    if latex:
        text = text.replace("``", '"').replace("''", '"').replace("~", " ").replace("$", "")
        text = re.sub(r"\\[A-Za-z]+\*?", " ", text)  # commands (\texttt, \emph, \quad...)
    text = re.sub(r"[\\{}]", " ", text)
    return " ".join(text.split())


@functools.lru_cache(maxsize=1)
def paper_plain() -> str:
    """The seed text with LaTeX markup reduced as :func:`in_paper` compares it."""
    return _plain(PAPER.read_text(), latex=True)


def in_paper(quoted: str) -> bool:
    """Whether ``quoted`` occurs in the paper, word for word and mark for mark (markup aside)."""
    return _plain(quoted, latex=False) in paper_plain()
