"""An article's history as prompt segments, and the spans each operation acts on.

Segments, in order: ``intro`` (names the article), then per revision k = 1..n a header
``header:k`` (``strings.REVISION_HEADER``) and a body ``body:k`` (the revision's text),
joined by ``strings.SEGMENT_JOINER``. Headers and bodies are separate segments so that
the paper's operations (seed L6797-6801) are segment-level:

* whole-source mask: every non-final body (:func:`source_segments`), headers kept;
* changed-text mask: the characters of non-final bodies that the next revision replaces
  or deletes (:func:`changed_segments`, ``diff.py``), headers kept;
* recompute: delete the non-final bodies, keep the headers, prefill again.

Example::

    segments(article)[:3]   # [("intro", "Below is ..."), ("header:1", "=== Revision 1 of 4 (...) ==="),
                            #  ("body:1", "<text of revision 1>")]
"""

from __future__ import annotations

from . import strings
from .diff import history_changes
from .schema import Article, RevisionQuestion

INTRO = "intro"


def header_name(index: int) -> str:
    """Segment name of revision ``index``'s header (1-based)."""
    return f"header:{index}"


def body_name(index: int) -> str:
    """Segment name of revision ``index``'s body (1-based)."""
    return f"body:{index}"


def segments(article: Article) -> list[tuple[str, str]]:
    """The history's ``(name, text)`` segments (module docstring)."""
    n = len(article.revisions)
    out = [(INTRO, strings.HISTORY_INTRO.format(title=article.title))]
    for k, r in enumerate(article.revisions, start=1):
        out.append((header_name(k), strings.REVISION_HEADER.format(index=k, count=n, timestamp=r.timestamp)))
        out.append((body_name(k), r.text))
    return out


def history_text(article: Article) -> str:
    """The history as plain text (the segments joined), as the LLM grader sees it."""
    return strings.SEGMENT_JOINER.join(text for _, text in segments(article))


def source_segments(article: Article) -> list[str]:
    """The non-final bodies: what the whole-source mask hides and recompute deletes."""
    return [body_name(k) for k in range(1, len(article.revisions))]


def changed_segments(article: Article, unit: str = "word") -> list[tuple[str, int, int]]:
    """``(body segment, start, end)`` character ranges the changed-text mask hides (``diff.history_changes``)."""
    changes = history_changes([r.text for r in article.revisions], unit)
    return [(body_name(k), lo, hi) for k, ranges in enumerate(changes, start=1) for lo, hi in ranges]


def question_text(question: RevisionQuestion, boxed: bool = True) -> str:
    """The question as asked after the history, with the boxed-answer instruction unless ``boxed`` is off."""
    return question.question + (strings.QUESTION_JOINER + strings.BOXED_INSTRUCTION if boxed else "")
