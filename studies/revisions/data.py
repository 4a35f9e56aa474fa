"""An offline demonstration set of revision histories, in the schema of ``schema.py`` (labelled "generated").

The paper's MINTEval Wikipedia histories are not available offline. Each generated
article is a window of consecutive PG-19 paragraphs (``book.py``) revised 3-6 times
(seeded) by seeded edits, one or more per revision:

* replace a word (a name is replaced by another name of the book, any other word by a
  book word with the same last two letters where one exists); the replaced word occurs
  once in the article and the new word never occurred in its history, so every answer
  string is unambiguous;
* delete a sentence (never one holding an edited word; its paragraph keeps a sentence);
* insert a sentence taken from elsewhere in the book.

The plan (per article, seeded): a word slot S replaced in k = 1..3 revisions, a slot T
replaced once in another revision, a sentence deleted in a revision that also replaces a
word, a sentence inserted, and a further replacement in any revision left without an
edit. The questions (one family per paper type, wording in ``strings.py``; every answer
is a string of the revisions):

* Simple: S's word in the final revision;
* History: the word S had before one of its changes; the last three words of the deleted
  sentence; the revision that first has the inserted sentence;
* Counting: how many times S was replaced (k);
* Ordering: which of S's first change and T's change came first (the earlier new word);
* Multi-hop: the new word(s) introduced by the revision that deleted the sentence.

Every question is marked ``source_answerable: "answerable"`` (true by construction). The
edit log is kept in each article's ``extra["edits"]``.
"""

from __future__ import annotations

import datetime
import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kvprobe.studies.common.answers import NUMBER_WORDS
from . import strings
from .book import STOP, Book, load_book, windows
from .schema import Article, Revision, RevisionQuestion

#: ``--source`` value of the generated set.
GENERATED = "generated"
#: Default generator seed (ours; the paper's data is released, not generated).
REVISIONS_SEED = 20260923
#: The most revisions a generated article may have (ordinals below).
MAX_REVISIONS = 10
ORDINALS = ("zeroth", "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth")
_WORD = re.compile(r"[A-Za-z]+")
_HEADING = re.compile(r"\b[A-Z]{2,}\b")  # an all-capitals word: a chapter heading run into a sentence
#: Words of context on each side of an edited word in a question.
CONTEXT_WORDS = 3
#: Words that identify a deleted or inserted sentence ("the sentence beginning ...").
START_WORDS = 6


class GenerationError(RuntimeError):
    """The book has too few windows to generate the requested articles."""


_DOUBLE_QUOTES = "\"\u201c\u201d"
_QUOTES = _DOUBLE_QUOTES + "'\u2018\u2019"
#: Characters that join an edited word to its neighbour (a slot is a whole word: "elm-shaded" is not edited).
_JOINERS = ("-", "'", "\u2019")


def _start(sentence: str) -> str:
    """The first :data:`START_WORDS` words of a sentence, without an opening quote (it is quoted in questions)."""
    return " ".join(sentence.split()[:START_WORDS]).lstrip(_QUOTES)


@dataclass
class _Sentence:
    text: str
    locked: bool = False


@dataclass
class _Slot:
    """An edited word: its sentence (locked), the text around it and its successive words."""

    sentence: _Sentence
    prefix: str
    suffix: str
    phrase: str
    words: list[str]


@dataclass
class _Draft:
    """An article being revised (state, every revision's text so far, the edit log)."""

    paragraphs: list[list[_Sentence]]
    book: Book
    rng: random.Random
    outside: list[str]
    texts: list[str] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    slots: list[_Slot] = field(default_factory=list)
    edits: list[dict[str, Any]] = field(default_factory=list)

    def text(self) -> str:
        return "\n\n".join(" ".join(s.text for s in p) for p in self.paragraphs)

    def commit(self) -> None:
        """Close a revision: record its text and every word it holds."""
        self.texts.append(self.text())
        self.seen |= {w.lower() for w in _WORD.findall(self.texts[-1])}

    def _unique_start(self, sentence: str) -> str | None:
        """The sentence's first words if it is long enough and they occur at most once in every revision."""
        words = sentence.split()
        start = _start(sentence)
        unique = all(t.count(start) <= 1 for t in (*self.texts, self.text()))
        quoted = set(start) & set(_DOUBLE_QUOTES)
        return start if len(words) >= START_WORDS + 4 and unique and not quoted else None

    def new_slot(self) -> int | None:
        """Choose a word occurring once, never edited before, with context on both sides; lock its sentence."""
        counts = Counter(w.lower() for w in _WORD.findall(self.text()))
        removed = {w.lower() for s in self.slots for w in s.words}
        options = []
        for sentence in (s for p in self.paragraphs for s in p if not s.locked):
            m = list(_WORD.finditer(sentence.text))
            for j in range(CONTEXT_WORDS, len(m) - CONTEXT_WORDS):
                w = m[j].group()
                (a, b), text = m[j].span(), sentence.text
                phrase = text[m[j - CONTEXT_WORDS].start():a] + "___" + text[b:m[j + CONTEXT_WORDS].end()]
                if (counts[w.lower()] == 1 and w.lower() not in STOP and w.lower() not in removed
                        and len(w) >= (4 if w[0].isupper() else 5) and text[a - 1] not in _JOINERS
                        and text[b:b + 1] not in _JOINERS and not set(phrase) & set(_DOUBLE_QUOTES)):
                    options.append(_Slot(sentence, text[:a], text[b:], phrase, [w]))
        if not options:
            return None
        slot = self.rng.choice(options)
        slot.sentence.locked = True
        self.slots.append(slot)
        return len(self.slots) - 1

    def replace(self, slot: int, revision: int) -> None:
        s = self.slots[slot]
        old = s.words[-1]
        pool = self.book.names if old[0].isupper() else self.book.words
        fresh = [w for w in pool if w.lower() not in self.seen]
        new = self.rng.choice([w for w in fresh if w[-2:] == old[-2:]] or fresh)
        s.sentence.text = s.prefix + new + s.suffix
        s.words.append(new)
        self.seen.add(new.lower())
        self.edits.append({"revision": revision, "op": "replace", "slot": slot, "old": old, "new": new})

    def delete(self, revision: int) -> bool:
        options = [(p, s, start) for p in self.paragraphs if len(p) >= 2 for s in p
                   if not s.locked and (start := self._unique_start(s.text))]
        if not options:
            return False
        paragraph, sentence, start = self.rng.choice(options)
        paragraph.remove(sentence)
        last = " ".join(sentence.text.split()[-3:]).strip(".,;:!?()" + _QUOTES)
        self.edits.append({"revision": revision, "op": "delete", "text": sentence.text, "start": start,
                           "last_words": last})
        return True

    def _insertable(self, sentence: str, used: set[str]) -> bool:
        """A book sentence that may be inserted: 8-30 words, no heading, no edited word, a new unquoted start."""
        start = _start(sentence)
        return (8 <= len(sentence.split()) <= 30 and not _HEADING.search(sentence)
                and not used & {w.lower() for w in _WORD.findall(sentence)}
                and not set(start) & set(_DOUBLE_QUOTES) and not any(start in t for t in (*self.texts, self.text())))

    def insert(self, revision: int) -> bool:
        used = {w.lower() for s in self.slots for w in s.words}
        options = [s for s in self.outside if self._insertable(s, used)]
        if not options:
            return False
        sentence = _Sentence(self.rng.choice(options), locked=True)
        paragraph = self.rng.choice(self.paragraphs)
        paragraph.insert(self.rng.randint(1, len(paragraph)), sentence)
        self.seen |= {w.lower() for w in _WORD.findall(sentence.text)}
        self.edits.append({"revision": revision, "op": "insert", "text": sentence.text,
                           "start": _start(sentence.text)})
        return True


def _timestamps(rng: random.Random, n: int) -> list[str]:
    t = datetime.datetime(2004, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(days=rng.randint(0, 3650))
    out = []
    for _ in range(n):
        t += datetime.timedelta(days=rng.randint(1, 400), seconds=rng.randint(0, 86_399))
        out.append(t.strftime("%Y-%m-%dT%H:%M:%SZ"))
    return out


#: How a count of replacements may be written (a bare "one" is too common in prose to count as an answer).
TIMES = {1: ("once", "one time"), 2: ("twice", "two times"), 3: ("three times", "thrice")}


def _count_answers(k: int) -> tuple[str, ...]:
    return (str(k), *TIMES.get(k, (f"{NUMBER_WORDS[k]} times",)))


#: Each generated question family's target time (the paper's strata, L6830, L6895-6897; ours, by construction:
#: Simple asks about the final revision; the History word and deleted-sentence questions about a past revision's
#: text; the inserted-sentence, Counting, Ordering and Multi-hop questions about changes (when one was made, how
#: many, which first, what one introduced)). The generated questions carry no ``target_time`` field (the
#: committed run's data digest predates it); ``review.target_time`` applies this map to generated runs.
GENERATED_TARGET_TIME = {"simple": "current", "history-word": "historical", "history-deleted": "historical",
                         "history-inserted": "change-aggregation", "counting": "change-aggregation",
                         "ordering": "change-aggregation", "multihop": "change-aggregation"}


def _questions(draft: _Draft, rng: random.Random) -> list[RevisionQuestion]:
    """The seven questions of a revised article (module docstring)."""
    by_op = {op: [e for e in draft.edits if e["op"] == op] for op in ("replace", "delete", "insert")}
    s_changes = [e for e in by_op["replace"] if e["slot"] == 0]
    t_change = next(e for e in by_op["replace"] if e["slot"] == 1)
    deleted, inserted = by_op["delete"][0], by_op["insert"][0]
    slot = draft.slots[0]
    asked = rng.choice(s_changes)
    first = s_changes[0]
    pair = [first, t_change] if rng.random() < 0.5 else [t_change, first]
    earlier = min(pair, key=lambda e: e["revision"])
    introduced = tuple(e["new"] for e in by_op["replace"] if e["revision"] == deleted["revision"])
    r = inserted["revision"]
    rows = [
        ("simple", "Simple", strings.Q_SIMPLE.format(phrase=slot.phrase), (slot.words[-1],)),
        ("history-word", "History", strings.Q_HISTORY_WORD.format(revision=asked["revision"], phrase=slot.phrase), (asked["old"],)),
        ("history-deleted", "History", strings.Q_HISTORY_DELETED.format(revision=deleted["revision"],
                                                                        start=deleted["start"]),
         (deleted["last_words"],)),
        ("history-inserted", "History", strings.Q_HISTORY_INSERTED.format(start=inserted["start"]),
         (strings.REVISION_ANSWER.format(index=r), f"{ORDINALS[r]} revision", str(r))),
        ("counting", "Counting", strings.Q_COUNTING.format(phrase=slot.phrase),
         _count_answers(len(s_changes))),
        ("ordering", "Ordering", strings.Q_ORDERING.format(old_a=pair[0]["old"], new_a=pair[0]["new"],
                                                           old_b=pair[1]["old"], new_b=pair[1]["new"]),
         (earlier["new"],)),
        ("multihop", "Multi-hop", strings.Q_MULTIHOP.format(start=deleted["start"]), introduced),
    ]
    options = {"ordering": (pair[0]["new"], pair[1]["new"])}
    return [RevisionQuestion(qid, qtype, text, answers, "answerable", options.get(qid, ()))
            for qid, qtype, text, answers in rows]


def revise(paragraphs: list[list[str]], book: Book, outside: list[str], n: int, rng: random.Random
           ) -> tuple[list[str], list[RevisionQuestion], list[dict[str, Any]]] | None:
    """Revise one window ``n - 1`` times (module docstring): the n texts, the questions and the edit log,
    or None when the window offers too few editable words or sentences."""
    draft = _Draft([[_Sentence(s) for s in p] for p in paragraphs], book, rng, outside)
    draft.commit()
    revs = list(range(2, n + 1))
    s_revs = sorted(rng.sample(revs, rng.randint(1, min(3, len(revs)))))
    t_rev = rng.choice([r for r in revs if r != s_revs[0]])
    d_rev = rng.choice(sorted({*s_revs, t_rev}))
    i_rev = rng.choice(revs)
    if draft.new_slot() is None or draft.new_slot() is None:
        return None
    for r in revs:
        if r == d_rev and not draft.delete(r):
            return None
        if r in s_revs:
            draft.replace(0, r)
        if r == t_rev:
            draft.replace(1, r)
        if r == i_rev and not draft.insert(r):
            return None
        if not any(e["revision"] == r for e in draft.edits):
            extra = draft.new_slot()
            if extra is None:
                return None
            draft.replace(extra, r)
        draft.commit()
    return draft.texts, _questions(draft, rng), draft.edits


def generate_articles(n_articles: int, seed: int = REVISIONS_SEED, min_revisions: int = 3, max_revisions: int = 6,
                      min_words: int = 100, max_words: int = 200, book_path: str | None = None) -> list[Article]:
    """``n_articles`` generated revision histories (module docstring), deterministic in every argument.

    Example: ``generate_articles(2, seed=1)[0].questions[0].answers``.
    """
    if not 3 <= min_revisions <= max_revisions <= MAX_REVISIONS:
        raise ValueError(f"need 3 <= min_revisions <= max_revisions <= {MAX_REVISIONS}, "
                         f"got {min_revisions}, {max_revisions}")
    book = load_book(book_path)
    rng = random.Random(seed)
    candidates = windows(book, min_words, max_words)
    rng.shuffle(candidates)
    out: list[Article] = []
    for start, paragraphs in candidates:
        if len(out) == n_articles:
            break
        inside = range(start, start + len(paragraphs))
        outside = [s for i, p in enumerate(book.paragraphs) if i not in inside for s in p]
        n = rng.randint(min_revisions, max_revisions)
        revised = revise(paragraphs, book, outside, n, random.Random(rng.random()))
        if revised is None:
            continue
        texts, questions, edits = revised
        ids = rng.randint(10_000_000, 90_000_000)
        stamps = _timestamps(rng, n)
        revisions = tuple(Revision(str(ids + 7919 * k), stamps[k], texts[k]) for k in range(n))
        title = strings.GENERATED_TITLE.format(book=book.title, first=start + 1, last=start + len(paragraphs))
        out.append(Article(f"pg19-{start + 1:04d}", title, revisions, tuple(questions),
                           {"source": GENERATED, "edits": edits}))
    if len(out) < n_articles:
        raise GenerationError(f"only {len(out)} of {n_articles} articles could be generated from {book.title} "
                              f"with {min_words}-{max_words} words per article")
    return out
