"""Filler text: sentences of a PG-19 book (the babilong samples' filler and the requests workload's background).

One book (the ``pg19`` data set of :mod:`kvprobe.data`), split into sentences by a regex (no nltk), its
Project Gutenberg header and footer dropped; sentences shorter than ``min_words``
(headings) or longer than ``max_words`` are dropped.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

from kvprobe.data import MissingDataError, data_dir



def pg19_books() -> list[Path]:
    """The PG-19 book files (the ``pg19`` data set of :mod:`kvprobe.data`; MissingDataError names the pull)."""
    books = sorted(data_dir("pg19").glob("*.txt"))
    if not books:
        raise MissingDataError(f"no PG-19 book (.txt) in {data_dir('pg19')}")
    return books

_START = re.compile(r"\*\*\* ?START OF (?:THE|THIS) PROJECT GUTENBERG[^\n]*\n")
_END = re.compile(r"\*\*\* ?END OF (?:THE|THIS) PROJECT GUTENBERG")
# a sentence ends at . ! ? (plus closing quotes/brackets/underscores) before whitespace and an
# upper-case letter or digit (possibly after opening quotes), unless the word is a title abbreviation
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'\u2019\u201d)\]_]*(?=\s+[\"'\u2018\u201c(\[_]*[A-Z0-9])")
_ABBREVIATIONS = ("Mr.", "Mrs.", "Messrs.", "Dr.", "St.", "Co.")


def strip_gutenberg(text: str) -> str:
    """Drop a Project Gutenberg header/footer if their ``*** START/END OF`` markers are present."""
    start = _START.search(text)
    if start:
        text = text[start.end():]
    end = _END.search(text)
    if end:
        text = text[:end.start()]
    return text


def split_sentences(text: str, min_words: int = 5, max_words: int = 100) -> list[str]:
    """Deterministic regex sentence split: paragraphs by blank lines, whitespace collapsed.

    Sentences outside ``min_words..max_words`` are dropped (upstream drops sentences under 10
    tokens); "consecutive" filler means consecutive among the kept sentences.
    """
    sentences = []
    for paragraph in re.split(r"\n\s*\n", text):
        paragraph = " ".join(paragraph.split())
        start = 0
        for match in _SENTENCE_END.finditer(paragraph):
            if paragraph[:match.end()].endswith(_ABBREVIATIONS):
                continue
            sentences.append(paragraph[start:match.end()].strip())
            start = match.end()
        sentences.append(paragraph[start:].strip())
    return [s for s in sentences if min_words <= len(s.split()) <= max_words]


@lru_cache(maxsize=4)
def _filler_cached(path: str, min_words: int, max_words: int) -> tuple[str, ...]:
    text = Path(path).read_text(encoding="utf-8")
    return tuple(split_sentences(strip_gutenberg(text), min_words, max_words))


def filler_sentences(path: str | Path | None = None, min_words: int = 5, max_words: int = 100) -> list[str]:
    """Sentences of a PG-19 book (default: the first of :func:`pg19_books`)."""
    if path is None:
        path = pg19_books()[0]
    return list(_filler_cached(str(path), min_words, max_words))
