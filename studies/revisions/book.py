"""The PG-19 book the demonstration histories are cut from: paragraphs, article windows, word pools.

The book is the one ``studies.datasets.filler`` reads (the ``pg19`` data set (``kvprobe data``), Gutenberg header
and footer dropped). A paragraph is a blank-line-separated block, split into sentences
by :func:`kvprobe.studies.datasets.filler.split_sentences`; an *eligible* paragraph has at least
two sentences and :data:`MIN_PARAGRAPH_WORDS` words (no headings, no one-line speeches).
An article window is a run of consecutive eligible paragraphs of ``min_words`` to
``max_words`` words (the last paragraph cut at a sentence boundary to fit).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from kvprobe.studies.datasets.filler import pg19_books, split_sentences, strip_gutenberg

MIN_PARAGRAPH_WORDS = 25
#: Words too common to be an edited word (all others of five or more letters may be).
STOP = frozenset("""about above after again against along among another around because before behind being
below beside between beyond could every first found great having might never other quite rather shall
should since still their there these thing things think those though three through under until where
which while whole would yours little often perhaps indeed always""".split())
_NAME_CONTEXT = re.compile(r"(?<=[a-z,;] )([A-Z][a-z]{3,})\b")
_LOWER = re.compile(r"\b[a-z]{5,12}\b")


@dataclass(frozen=True)
class Book:
    """A book as paragraphs of sentences, with the word pools the edits draw replacements from."""

    title: str
    paragraphs: tuple[tuple[str, ...], ...]
    names: tuple[str, ...]
    words: tuple[str, ...]

    def eligible(self, index: int) -> bool:
        sentences = self.paragraphs[index]
        return len(sentences) >= 2 and sum(len(s.split()) for s in sentences) >= MIN_PARAGRAPH_WORDS


def _title(path: Path) -> str:
    """``gutenberg_3261_news_from_nowhere_pg19style.txt`` -> ``News From Nowhere``."""
    parts = [p for p in path.stem.split("_") if p not in ("gutenberg", "pg19style") and not p.isdigit()]
    return " ".join(parts).title() or path.stem


@lru_cache(maxsize=2)
def load_book(path: str | None = None) -> Book:
    """The book at ``path`` (default: the one ``.txt`` in the ``pg19`` data set (``kvprobe data``)).

    Example: ``load_book().paragraphs[100][0]`` is the first sentence of paragraph 100.
    """
    if path is None:
        books = pg19_books()
        path = str(books[0])
    text = strip_gutenberg(Path(path).read_text(encoding="utf-8"))
    paragraphs = tuple(tuple(split_sentences(p, min_words=1, max_words=10_000)) for p in re.split(r"\n\s*\n", text))
    lower = set(_LOWER.findall(text))
    names = sorted({n for n in _NAME_CONTEXT.findall(text) if n.lower() not in lower})
    counts = Counter(_LOWER.findall(text))
    words = sorted(w for w, c in counts.items() if c >= 2 and w not in STOP)
    return Book(_title(Path(path)), tuple(p for p in paragraphs if p), tuple(names), tuple(words))


def windows(book: Book, min_words: int, max_words: int) -> list[tuple[int, list[list[str]]]]:
    """Non-overlapping article windows, in book order: ``(first paragraph index, paragraphs of sentences)``.

    Example: ``windows(load_book(), 100, 200)[0]``.
    """
    out: list[tuple[int, list[list[str]]]] = []
    start, current, n = 0, [], 0
    for i in range(len(book.paragraphs)):
        if not book.eligible(i):
            start, current, n = i + 1, [], 0
            continue
        kept: list[str] = []
        for sentence in book.paragraphs[i]:
            if n + sum(len(k.split()) for k in kept) + len(sentence.split()) > max_words:
                break
            kept.append(sentence)
        if len(kept) >= 2:
            current.append(kept)
            n += sum(len(k.split()) for k in kept)
        if n >= min_words or len(kept) < len(book.paragraphs[i]):
            if n >= min_words:
                out.append((start, current))
            start, current, n = i + 1, [], 0
    return out
