"""Revision histories: the JSON schema, its loader and its writer.

The paper uses "the released Wikipedia-history subset of MINTEval" (seed L6785-6786) but
does not describe the release's file format, and the data is not available offline
(they are not among kvprobe's data sets). The schema below is inferred from what the paper says a
history and a question carry (seed L6781-6830; spec partE E9), and is the one the
generated demonstration set (``data.py``) is written in::

    {"articles": [
      {"article_id": "a001",                      # unique in the file
       "title": "Some article",
       "revisions": [                             # oldest first; at least one
         {"revision_id": "1001",                  # unique within the article
          "timestamp": "2014-03-05T12:31:07Z",    # any string; shown in the revision header
          "text": "The complete article body at that revision."}],
       "questions": [                             # asked after the last revision
         {"question_id": "q1",                    # unique within the article
          "type": "History",                      # Simple | History | Multi-hop | Counting | Ordering
          "question": "Which word ...?",
          "answers": ["reference", "alias"],      # at least one non-empty string
          "source_answerable": "answerable",      # optional: answerable | partial | unanswerable |
                                                  # ambiguous | null (not assessed)
          "options": ["reference", "other"],      # optional: the choices the question offers (ours)
          "target_time": "historical"}]}]}        # optional: historical | change-aggregation | current (ours)

Inferred (not stated by the paper): the field names; that a revision's text is the whole
article body (the paper masks "non-final article bodies", L6798); that revisions are in
chronological order (the loader keeps file order); that the source-answerability label
(L6806-6815) travels with the question. ``options`` is ours, for questions that name their
choices (Ordering): the rule grader does not count an answer that also names a choice
that is not a reference (``rule_grader.rule_grade``). ``target_time`` is ours too: the question's
target-time stratum (the paper's strata, L6830, L6895-6897; ``review.target_time`` says which
source sets it). Unknown extra keys are kept in ``extra`` so :func:`to_json` round-trips.
Every malformed file is refused with :class:`RevisionsFormatError` naming the file, the
article (index and id), the revision or question index and the missing or bad field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.studies.datasets.datafiles import need_fields, need_unique
from . import strings

#: The question types the paper names (seed L6822-6829).
QUESTION_TYPES = strings.PAPER_QUESTION_TYPES
#: Source-answerability labels (seed L6812-6815); None = not assessed.
SOURCE_LABELS = strings.PAPER_SOURCE_LABELS
#: Target-time strata (seed L6830, L6895-6897).
TARGET_TIMES = strings.TARGET_TIMES


class RevisionsFormatError(ValueError):
    """A revision-history file does not follow the schema (the message names file, entry and field)."""


@dataclass(frozen=True)
class Revision:
    """One revision: its id, timestamp and complete body text."""

    revision_id: str
    timestamp: str
    text: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class RevisionQuestion:
    """One question about an article's history, with its references and source label."""

    question_id: str
    type: str
    question: str
    answers: tuple[str, ...]
    source_answerable: str | None = None
    options: tuple[str, ...] = ()
    target_time: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Article:
    """An article: its revisions (oldest first) and the questions asked after the last one."""

    article_id: str
    title: str
    revisions: tuple[Revision, ...]
    questions: tuple[RevisionQuestion, ...]
    extra: dict[str, Any] = field(default_factory=dict)


_ARTICLE_KEYS = ("article_id", "title", "revisions", "questions")
_REVISION_KEYS = ("revision_id", "timestamp", "text")
_QUESTION_KEYS = ("question_id", "type", "question", "answers")


def _string(obj: dict, key: str, where: str, empty_ok: bool = False) -> str:
    value = obj[key]
    if not isinstance(value, str) or (not empty_ok and not value.strip()):
        raise RevisionsFormatError(f"{where}: field {key} must be a non-empty string, got {value!r}")
    return value


def _list(obj: dict, key: str, where: str) -> list:
    value = obj[key]
    if not isinstance(value, list):
        raise RevisionsFormatError(f"{where}: field {key} must be a list, got {type(value).__name__}")
    return value


def _rest(d: dict, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k not in keys}


def revision_from_json(d: Any, where: str) -> Revision:
    """One revision from its JSON object (errors name ``where``)."""
    need_fields(d, _REVISION_KEYS, where, RevisionsFormatError)
    return Revision(_string(d, "revision_id", where), _string(d, "timestamp", where), _string(d, "text", where),
                    _rest(d, _REVISION_KEYS))


def question_from_json(d: Any, where: str) -> RevisionQuestion:
    """One question from its JSON object (errors name ``where``)."""
    need_fields(d, _QUESTION_KEYS, where, RevisionsFormatError)
    qtype = _string(d, "type", where)
    if qtype not in QUESTION_TYPES:
        raise RevisionsFormatError(f"{where}: field type must be one of {', '.join(QUESTION_TYPES)}, got {qtype!r}")
    answers = _list(d, "answers", where)
    if not answers or not all(isinstance(a, str) and a.strip() for a in answers):
        raise RevisionsFormatError(f"{where}: field answers must be a non-empty list of non-empty strings")
    source = d.get("source_answerable")
    if source is not None and source not in SOURCE_LABELS:
        raise RevisionsFormatError(f"{where}: field source_answerable must be one of {', '.join(SOURCE_LABELS)} "
                                   f"or null, got {source!r}")
    options = d.get("options", [])
    if not isinstance(options, list) or not all(isinstance(o, str) and o.strip() for o in options):
        raise RevisionsFormatError(f"{where}: field options must be a list of non-empty strings")
    target = d.get("target_time")
    if target is not None and target not in TARGET_TIMES:
        raise RevisionsFormatError(f"{where}: field target_time must be one of {', '.join(TARGET_TIMES)} or null, "
                                   f"got {target!r}")
    return RevisionQuestion(_string(d, "question_id", where), qtype, _string(d, "question", where), tuple(answers),
                            source, tuple(options), target,
                            _rest(d, _QUESTION_KEYS + ("source_answerable", "options", "target_time")))


def article_from_json(d: Any, where: str = "article") -> Article:
    """One article from its JSON object; errors name ``where``, the article id and the entry.

    Example::

        article_from_json({"article_id": "a1", "title": "T", "questions": [],
                           "revisions": [{"revision_id": "1", "timestamp": "2020", "text": "Body."}]})
    """
    need_fields(d, ("article_id",), where, RevisionsFormatError)
    where = f"{where} (article_id={d['article_id']!r})"
    need_fields(d, _ARTICLE_KEYS, where, RevisionsFormatError)
    revisions = [revision_from_json(r, f"{where} revision #{j}") for j, r in enumerate(_list(d, "revisions", where))]
    if not revisions:
        raise RevisionsFormatError(f"{where}: field revisions is empty (an article needs at least one revision)")
    questions = [question_from_json(q, f"{where} question #{j}") for j, q in enumerate(_list(d, "questions", where))]
    need_unique([r.revision_id for r in revisions], "revision_id", where, RevisionsFormatError)
    need_unique([q.question_id for q in questions], "question_id", where, RevisionsFormatError)
    return Article(str(d["article_id"]), _string(d, "title", where), tuple(revisions), tuple(questions),
                   _rest(d, _ARTICLE_KEYS))


def load_revisions(path: str | Path) -> list[Article]:
    """Read a revision-history file in the schema of the module docstring.

    Example: ``load_revisions("tests/fixtures/revisions_sample.json")[0].revisions[-1].text``.
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise RevisionsFormatError(f"{path}: not valid JSON ({e})") from e
    need_fields(data, ("articles",), str(path), RevisionsFormatError)
    articles = _list(data, "articles", str(path))
    out = [article_from_json(a, f"{path} article #{i}") for i, a in enumerate(articles)]
    need_unique([a.article_id for a in out], "article_id", str(path), RevisionsFormatError)
    return out


def to_json(article: Article) -> dict[str, Any]:
    """The article as a JSON-ready dict in the schema (inverse of :func:`article_from_json`)."""
    return {
        "article_id": article.article_id, "title": article.title,
        "revisions": [{"revision_id": r.revision_id, "timestamp": r.timestamp, "text": r.text, **r.extra}
                      for r in article.revisions],
        "questions": [{"question_id": q.question_id, "type": q.type, "question": q.question,
                       "answers": list(q.answers), "source_answerable": q.source_answerable,
                       **({"options": list(q.options)} if q.options else {}),
                       **({"target_time": q.target_time} if q.target_time is not None else {}), **q.extra}
                      for q in article.questions],
        **article.extra,
    }


def save_revisions(articles: list[Article], path: str | Path) -> None:
    """Write ``{"articles": [...]}`` (readable by :func:`load_revisions`)."""
    Path(path).write_text(json.dumps({"articles": [to_json(a) for a in articles]}, indent=1, ensure_ascii=False)
                          + "\n", encoding="utf-8")


def dataset_sha256(articles: list[Article]) -> str:
    """SHA-256 of the articles' JSON (the config records it, so two data versions never mix in one run)."""
    blob = json.dumps([to_json(a) for a in articles], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()
