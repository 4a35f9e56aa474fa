"""The OAKS arm: native generation of an A/B/UNKNOWN choice on one answer transition per question
(paper app:v7_bridge, seed L5641-5660; spec partD section 6).

"OAKS reuses the earliest held-out event ID per question, its original earlier/later sentences,
unrelated excerpts, question, and two annotated answer strings. The native system instruction asks
for the state after the later source. Both answer candidates are displayed without temporal-role
labels; alternating question order balances current A and current B (58 each). The model generates
a JSON A/B/UNKNOWN answer. The old mask covers the earlier source; the matched mask covers an
equally long start of the existing unrelated-source block."

Events come from an OAKS-schema file or the PG-19 demonstration set (the loader, kept changes, the
hash-ordered book split and the unrelated text of another book are the OAKS study's,
:mod:`kvprobe.studies.datasets.oaks`). Per question of the chosen books, the change with the
lowest chunk is kept; questions are taken book by book in split order, question by question, and
the current answer is candidate A on even positions, B on odd ones. The history is the paper's
natural-source prefix (``Earlier source:`` / ``Unrelated source:`` / ``Later source:``) as the user
message of the chat template, after our system instruction (UNCLEAR); the question with both
candidates follows. The old span is the earlier source's text and its trailing newline, as in the
paper's natural-source panel (seed L1325-1327).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kvprobe
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.datasets import oaks
from kvprobe.studies.datasets.oaks import DEMONSTRATION, OAKS_SPLITS, load_books

from . import strings

__all__ = ["DEMONSTRATION", "OAKS_SPLITS", "OaksFormatError", "OaksItem", "load_books", "oaks_items"]
OaksFormatError = oaks.OaksFormatError


@dataclass(frozen=True)
class OaksItem:
    """One question's earliest kept answer transition, with its displayed candidate order (a study case)."""

    change: oaks.Change
    book_title: str
    neutral: str
    current_is_a: bool

    @property
    def case_id(self) -> str:
        return self.change.case_id

    @property
    def group(self) -> str:
        """The bootstrap unit: the question."""
        return self.change.question_id

    @property
    def stratum(self) -> str:
        """Questions are resampled within their book (seed L5628-5630)."""
        return self.change.book_id

    @property
    def reference(self) -> str:
        """The letter of the current (later) answer."""
        return strings.LETTERS[0 if self.current_is_a else 1]

    @property
    def old(self) -> str:
        """The letter of the old (earlier) answer."""
        return strings.LETTERS[1 if self.current_is_a else 0]

    @property
    def replacement(self) -> bool:
        return True

    @property
    def shown(self) -> tuple[str, str]:
        """(candidate A, candidate B) as displayed."""
        c = self.change
        return (c.new_answer, c.old_answer) if self.current_is_a else (c.old_answer, c.new_answer)

    @property
    def mentions(self) -> tuple[str, str]:
        """The lenient rule's values: the current answer's text, then the old one's (a model may name the
        candidate instead of its letter)."""
        return self.change.new_answer, self.change.old_answer

    @property
    def question(self) -> str:
        a, b = self.shown
        return strings.QUESTION.format(query=self.change.question, a=a, b=b)

    def prompt(self, chat: bool, date: str, system: str = strings.OAKS_SYSTEM) -> kvprobe.Prompt:
        """The natural-source prefix as the user message (chat) or after the instruction (raw); ``date``: the chat
        template's; ``system``: the instruction (the open-answer study's has no candidates)."""
        c = self.change
        segments = [("earlier", strings.EARLIER_SOURCE.format(old=c.old_source)),
                    ("unrelated", strings.UNRELATED_SOURCE.format(neutral=self.neutral)),
                    ("later", strings.LATER_SOURCE.format(later=c.new_source))]
        if not chat:
            segments.insert(0, ("instructions", system + "\n"))
        return study_prompt(segments, chat=chat, system=system if chat else None, sep="",
                            question_sep="\n", date=date)

    def spans(self, history: kvprobe.History, trailing_newline: bool = True
              ) -> tuple[kvprobe.TokenSpan, kvprobe.TokenSpan]:
        """(old span: the earlier source's text, and its trailing newline; neutral span: the unrelated text,
        not its heading) in ``history``."""
        head = strings.EARLIER_SOURCE.index("{old}")
        old = history.span("earlier", chars=(head, head + len(self.change.old_source)))
        if trailing_newline:
            newline = history.span("unrelated", chars=(0, 1), strict=False)
            if newline.end > old.end:  # the newline is a token of its own (else the old span already holds it)
                added = kvprobe.TokenSpan(old.end, newline.end)
                if history.token_text(added).strip():
                    raise kvprobe.SpanError(f"{self.case_id}: the newline after the old source shares a token "
                                            f"with the heading that follows ({history.token_text(added)!r})")
                old = kvprobe.TokenSpan(old.start, newline.end, old.label)
        head = strings.UNRELATED_SOURCE.index("{neutral}")
        neutral = history.span("unrelated", chars=(head, head + len(self.neutral)))
        return old, neutral

    def columns(self) -> dict[str, Any]:
        c = self.change
        return {"family": self.book_title, "variant": "oaks", "replacement": True, "stratum": c.book_id,
                "question_id": c.question_id, "current_position": self.reference, "reference": self.reference,
                "old_value": self.old, "current_answer": c.new_answer, "old_answer": c.old_answer}


def oaks_items(books: list[oaks.Book], split: str = "evaluation") -> list[OaksItem]:
    """One item per question of the ``split`` books: its earliest kept change, the current answer shown as
    candidate A on even positions and as B on odd ones (half each, seed L5647-5648).

    Example: ``[i.reference for i in oaks_items(load_books(FIXTURE), "all")] == ["A", "B", "A"]``.
    """
    items: list[OaksItem] = []
    for book, change in oaks.earliest_changes(books, split):
        items.append(OaksItem(change, book.title, oaks.unrelated_text(books, book, change),
                              current_is_a=len(items) % 2 == 0))
    return items
