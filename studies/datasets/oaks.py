"""OAKS-Novel candidate-decision events (paper appendix "Natural Sources and Book Transfer",
seed L1826-1852; spec partA section 6).

The paper uses the OAKS-Novel release at commit ``0bbc4b3877ea``: 19 novels, 435 questions,
1,354 ordered chunks, 1,722 answer changes, of which 1,316 have a nonempty earlier source
sentence for the old answer and a nonempty source sentence for the new answer at the change
chunk; a hash-ordered 9/5/5 book split (development, calibration, held-out evaluation). "Each
event identifies the book, chunk order, answers at every chunk, and source sentences."

The release is not on this machine and its file layout is not quoted in the paper. ``load_oaks``
reads a JSON rendering of exactly what the paper describes (UNCLEAR, ours)::

    {"release": "OAKS-Novel", "commit": "0bbc4b3877ea",
     "books": [{"book_id": "...", "title": "...", "chunks": ["chunk 0 text", ...],
                "questions": [{"question_id": "...", "question": "...",
                               "answers": ["answer at chunk 0", ...],       # one per chunk
                               "sources": ["source sentence at chunk 0", ...],  # "" if none
                               "annotation": {...}}]}]}  # optional, see below

A question may carry an optional ``annotation`` of its earliest kept change (the paper's model
annotator's judgments, seed L2980-3000; not released, so any file's annotations are inferred):
``{"attribute_change": "change" | "compatible" | "insufficient", "attribute_change_alternative":
null | another of those, "description": "<class>", "description_alternative": null | "<class>"}``
(:class:`Annotation`). A judgment is ambiguous when it has an alternative label. Optionally also the
four-class rubric of the source relation (seed L3277-3300, mutually exclusive): ``"rubric": "strict" |
"progression" | "additive" | "insufficient"`` with ``"rubric_alternative": null | another of those``.

A change is a chunk ``k`` whose answer differs from chunk ``k - 1``; it is kept when the old
answer has a nonempty source sentence at an earlier chunk (the latest one) and the new answer a
nonempty source sentence at chunk ``k``. The split orders books by the SHA-256 of their id.

Offline, :func:`demonstration_set` builds a file in this schema from the PG-19 novel in
the ``pg19`` data set (``kvprobe data``) by a documented seeded edit rule; reports label it as generated.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .datafiles import need_fields
from kvprobe.studies.common.report import Items, data_items

#: 20260921: the offline OAKS-schema demonstration set built from the PG-19 novel (``studies.datasets.oaks``).
OAKS_DEMO_SEED = 20260921

#: Books per split, in hash order (paper L1833-1834: 9/5/5).
SPLIT_SIZES = {"development": 9, "calibration": 5, "evaluation": 5}
#: The attribute-change judgment of an annotation (seed L2984-2988: changes / compatible / insufficient context).
ATTRIBUTE_CHANGE = ("change", "compatible", "insufficient")
#: The four mutually exclusive relation classes of the rubric (seed L3277-3293: strict replacement, state
#: progression, additive or descriptive change, insufficient context).
RUBRIC = ("strict", "progression", "additive", "insufficient")
#: ``oaks_source`` value for the demonstration set generated from the PG-19 novel.
DEMONSTRATION = "demonstration"
#: Book splits of a selection (the paper's 5 held-out books are ``evaluation``).
OAKS_SPLITS = ("evaluation", "calibration", "development", "all")
#: Words shorter than this are trivial answer tokens (UNCLEAR, ours: the unrelated text excludes
#: every answer word of at least four letters).
NONTRIVIAL_LENGTH = 4


def items(source: str | None) -> Items:
    """Where an OAKS run's items come from: an OAKS-schema file, or the demonstration set generated in its schema."""
    return data_items("generated" if source == DEMONSTRATION else source, "a demonstration set in the OAKS schema, "
                      "generated from a PG-19 novel", "OAKS-schema questions")


class OaksFormatError(ValueError):
    """An OAKS file that does not follow the schema (names the file and the entry)."""


@dataclass(frozen=True)
class Change:
    """One answer change of one question: the old and new answers and their source sentences."""

    book_id: str
    question_id: str
    question: str
    chunk: int
    old_answer: str
    new_answer: str
    old_source: str
    new_source: str

    @property
    def case_id(self) -> str:
        return f"{self.question_id}@{self.chunk}"


@dataclass(frozen=True)
class Annotation:
    """A question's optional source annotation: whether the queried attribute changes and how the text
    describes the change, each with its alternative label (None: the judgment is unambiguous).

    Example: ``Annotation("change", None, "progression", "replacement").ambiguous == True``.
    """

    attribute_change: str
    attribute_change_alternative: str | None
    description: str
    description_alternative: str | None
    #: The four-class rubric (:data:`RUBRIC`; None: not annotated) and its alternative label.
    rubric: str | None = None
    rubric_alternative: str | None = None

    @property
    def change_ambiguous(self) -> bool:
        return self.attribute_change_alternative is not None

    @property
    def description_ambiguous(self) -> bool:
        return self.description_alternative is not None

    @property
    def ambiguous(self) -> bool:
        """Ambiguous in either judgment (the paper's union exclusion rule)."""
        return self.change_ambiguous or self.description_ambiguous


def parse_annotation(obj: Any, where: str) -> Annotation:
    """An :class:`Annotation` from a question's ``annotation`` object (errors name ``where``)."""
    _need(obj, ("attribute_change", "description"), where)
    change, alt = obj["attribute_change"], obj.get("attribute_change_alternative")
    if change not in ATTRIBUTE_CHANGE or (alt is not None and (alt not in ATTRIBUTE_CHANGE or alt == change)):
        raise OaksFormatError(f"{where}: attribute_change {change!r} / alternative {alt!r} must be one of "
                              f"{', '.join(ATTRIBUTE_CHANGE)} (the alternative null or a different label)")
    desc, dalt = obj["description"], obj.get("description_alternative")
    if not isinstance(desc, str) or not desc or (dalt is not None and (not isinstance(dalt, str) or dalt == desc)):
        raise OaksFormatError(f"{where}: description {desc!r} / alternative {dalt!r} must be nonempty strings "
                              "(the alternative null or a different label)")
    rubric, ralt = obj.get("rubric"), obj.get("rubric_alternative")
    if (rubric is None and ralt is not None) or (rubric is not None and rubric not in RUBRIC) \
            or (ralt is not None and (ralt not in RUBRIC or ralt == rubric)):
        raise OaksFormatError(f"{where}: rubric {rubric!r} / alternative {ralt!r} must be one of {', '.join(RUBRIC)} "
                              "or null (the alternative null or a different label)")
    return Annotation(change, alt, desc, dalt, rubric, ralt)


def annotation(question: dict[str, Any]) -> Annotation | None:
    """A question's annotation (None when the file has none; validated by :func:`parse_oaks`)."""
    return parse_annotation(question["annotation"], str(question["question_id"])) \
        if question.get("annotation") is not None else None


@dataclass(frozen=True)
class Book:
    book_id: str
    title: str
    chunks: tuple[str, ...]
    questions: tuple[dict[str, Any], ...]


def _need(obj: Any, keys: tuple[str, ...], where: str) -> None:
    need_fields(obj, keys, where, OaksFormatError)


def parse_oaks(data: Any, where: str = "OAKS") -> list[Book]:
    """Books of an OAKS document (the schema above); errors name the book and question."""
    _need(data, ("books",), where)
    books = []
    for i, b in enumerate(data["books"]):
        w = f"{where} books[{i}]"
        _need(b, ("book_id", "title", "chunks", "questions"), w)
        n = len(b["chunks"])
        for j, q in enumerate(b["questions"]):
            wq = f"{w} ({b['book_id']}) questions[{j}]"
            _need(q, ("question_id", "question", "answers", "sources"), wq)
            if len(q["answers"]) != n or len(q["sources"]) != n:
                raise OaksFormatError(f"{wq} ({q['question_id']}): {len(q['answers'])} answers and "
                                      f"{len(q['sources'])} sources for {n} chunks (one of each per chunk)")
            if q.get("annotation") is not None:
                parse_annotation(q["annotation"], f"{wq} ({q['question_id']}) annotation")
        books.append(Book(str(b["book_id"]), str(b["title"]), tuple(b["chunks"]), tuple(b["questions"])))
    ids = [b.book_id for b in books]
    if len(set(ids)) != len(ids):
        raise OaksFormatError(f"{where}: book ids repeat")
    return books


def load_oaks(path: str | Path) -> list[Book]:
    """Read an OAKS JSON file (see the module docstring)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: no such OAKS file (kvprobe does not download the release; pass its path, or "
                                "'demonstration' for the set generated from the pg19 data set (kvprobe data))")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise OaksFormatError(f"{p}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    return parse_oaks(data, str(p))


def changes(book: Book) -> list[Change]:
    """The kept answer changes of a book's questions, in question and chunk order."""
    out = []
    for q in book.questions:
        answers, sources = q["answers"], q["sources"]
        for k in range(1, len(answers)):
            old, new = answers[k - 1], answers[k]
            if old == new or not old or not new or not sources[k].strip():
                continue
            earlier = [sources[j] for j in range(k) if answers[j] == old and sources[j].strip()]
            if earlier:
                out.append(Change(book.book_id, str(q["question_id"]), str(q["question"]), k, old, new,
                                  earlier[-1].strip(), sources[k].strip()))
    return out


def split_books(books: list[Book]) -> dict[str, list[Book]]:
    """The hash-ordered split: books sorted by SHA-256 of their id, then 9 / 5 / 5 (fewer books: in that order,
    each split capped)."""
    ordered = sorted(books, key=lambda b: hashlib.sha256(b.book_id.encode()).hexdigest())
    out, start = {}, 0
    for name, size in SPLIT_SIZES.items():
        out[name] = ordered[start:start + size]
        start += size
    return out


def earliest_changes(books: list[Book], split: str = "evaluation") -> list[tuple[Book, Change]]:
    """Per question of the ``split`` books, its kept change with the lowest chunk (the paper's "earliest event
    ID" per held-out question, seed L2897, L5643): book by book in split order, question by question.

    Example: ``[c.case_id for _, c in earliest_changes(books, "all")]`` on the test fixture is
    ``["b2-q1@3", "b0-q1@3", "b1-q1@3"]`` (hash order of the book ids).
    """
    if split not in OAKS_SPLITS:
        raise ValueError(f"split {split!r} is not one of {', '.join(OAKS_SPLITS)}")
    ordered = split_books(books)
    chosen = [b for name in ordered for b in ordered[name]] if split == "all" else ordered[split]
    out: list[tuple[Book, Change]] = []
    for book in chosen:
        earliest: dict[str, Change] = {}
        for change in changes(book):
            if change.question_id not in earliest or change.chunk < earliest[change.question_id].chunk:
                earliest[change.question_id] = change
        out += [(book, c) for c in earliest.values()]
    return out


def load_books(source: str) -> list[Book]:
    """The books of an OAKS-schema file, or of the demonstration set (``source == "demonstration"``).

    Example: ``load_books("tests/fixtures/oaks_sample.json")[0].book_id == "fixture-book-0"``.
    """
    if source == DEMONSTRATION:
        from .filler import pg19_books

        novels = pg19_books()
        return parse_oaks(demonstration_set(novels[0].read_text(encoding="utf-8")), DEMONSTRATION)
    return load_oaks(source)


_WORDS = re.compile(r"\w+")


def unrelated_text(books: list[Book], book: Book, change: Change, n_chars: int | None = None) -> str:
    """Deterministic unrelated text from other books: the chunks of the next books in hash order that hold
    no nontrivial word of either answer, joined until ``n_chars`` (default: three times the old source's
    length, at least 1,200; enough tokens for the equal-token control), cut at a word boundary."""
    n_chars = max(1200, 3 * len(change.old_source)) if n_chars is None else n_chars
    banned = {w.casefold() for a in (change.old_answer, change.new_answer) for w in _WORDS.findall(a)
              if len(w) >= NONTRIVIAL_LENGTH}
    ordered = sorted(books, key=lambda b: hashlib.sha256(b.book_id.encode()).hexdigest())
    start = ordered.index(book)
    text = ""
    for other in ordered[start + 1:] + ordered[:start]:
        for chunk in other.chunks:
            if not banned & {w.casefold() for w in _WORDS.findall(chunk)}:
                text = f"{text} {' '.join(chunk.split())}".strip()
                if len(text) >= n_chars:
                    return text[:n_chars].rsplit(" ", 1)[0]
    raise OaksFormatError(f"{change.case_id}: other books hold fewer than {n_chars} characters free of the "
                          "answers' words")


# --------------------------------------------------------------------------- offline demonstration

#: Demonstration questions per pseudo-book (chapter).
DEMO_QUESTIONS_PER_BOOK = 8
_CAPITALIZED = re.compile(r"(?<=[a-z,;] )([A-Z][a-z]{3,})\b")


def demonstration_set(text: str, n_books: int = 19, per_book: int = DEMO_QUESTIONS_PER_BOOK,
                      seed: int = OAKS_DEMO_SEED) -> dict[str, Any]:
    """An OAKS-schema document generated from one novel (labelled "generated" in every report).

    Rule: the novel's first ``n_books`` chapters are the books (split into paragraphs, the chunks).
    In each, ``per_book`` sentences are drawn (``random.Random(seed)``) among those of 8-40 words
    holding a capitalized word of at least four letters after a lower-case word (a name or place,
    not a sentence start). The question asks which word fills that word's place in the sentence;
    its answer is the word at the sentence's paragraph, and from a later paragraph on another
    capitalized word of the novel (drawn from the same generator) with the same sentence edited,
    the new source. So every question has one change, its old and new source sentences.
    """
    rng = random.Random(seed)
    chapters = [c for c in re.split(r"\n\s*CHAPTER [IVXLC]+[^\n]*\n", text)[1:] if c.strip()]
    vocabulary = sorted(set(_CAPITALIZED.findall(text)))
    books = []
    for b, chapter in enumerate(chapters[:n_books]):
        paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", chapter) if len(p.split()) >= 8]
        candidates = []
        for i, para in enumerate(paragraphs[:-1]):
            for sentence in re.split(r"(?<=[.!?])\s+", para):
                words = sentence.split()
                if 8 <= len(words) <= 40 and _CAPITALIZED.search(sentence):
                    candidates.append((i, sentence))
        questions = []
        for q, (i, sentence) in enumerate(rng.sample(candidates, min(per_book, len(candidates)))):
            old = rng.choice(_CAPITALIZED.findall(sentence))
            new = rng.choice([w for w in vocabulary if w != old and w not in sentence])
            j = rng.randrange(i + 1, len(paragraphs))
            blank = sentence.replace(old, "____", 1)
            answers = [""] * i + [old] * (j - i) + [new] * (len(paragraphs) - j)
            sources = [""] * len(paragraphs)
            sources[i], sources[j] = sentence, sentence.replace(old, new, 1)
            questions.append({"question_id": f"demo-{b:02d}-q{q}", "question":
                              f'Which word belongs in the blank of "{blank}"?', "answers": answers,
                              "sources": sources})
        books.append({"book_id": f"demo-chapter-{b + 1:02d}", "title": f"News from Nowhere, chapter {b + 1}",
                      "chunks": paragraphs, "questions": questions})
    return {"release": "OAKS-Novel schema, generated offline from one PG-19 novel (not the OAKS data)",
            "generator": {"seed": seed, "books": n_books, "questions_per_book": per_book}, "books": books}
