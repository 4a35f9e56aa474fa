"""The five prompt profiles of the note-control study and the varied note built per tokenizer.

* ``original``: the quantity task's history (``quantity_task.tasks.build_prompt``), the repeated note;
* ``plain``: every ``gray`` of the note replaced by ``plain`` (a new prefill; the positions after the
  note shift when the two words tokenize to different counts, see :func:`note_layout`);
* ``no-unknown``: the system message without its UNKNOWN clause (shorter system prefix, new prefill);
* ``no-note``: the note segment deleted (new prefill);
* ``varied``: authored distinct sentences in place of the repeated note with exactly the repeated
  note's native token count, every token outside the note unchanged (:func:`build_varied_note`).

Example::

    note = build_varied_note(model.tokenizer, case)          # once per tokenizer
    prompt = profile_prompt(case, "varied", varied_note=note.text)
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any, Sequence

import kvprobe
from kvprobe.prompts import TokenSpan, char_span_to_tokens
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.datasets.quantity_task import strings as task_strings
from kvprobe.studies.datasets.quantity_task import tasks

from . import strings

#: The prompt profiles, in the order a group's cases run (consecutive cases share their common prefix).
PROFILES = ("original", "plain", "varied", "no-note", "no-unknown")


class VariedNoteError(ValueError):
    """No varied note with the repeated note's exact token count and unchanged outside tokens was found."""


def profile_prompt(case: tasks.Case, profile: str, varied_note: str | None = None) -> kvprobe.Prompt:
    """The history prompt of ``case`` under ``profile`` (``varied_note``: the varied profile's note text).

    The original profile is exactly ``tasks.build_prompt(case)``.
    """
    texts = tasks.segment_texts(case)
    system = task_strings.SYSTEM
    if profile == "plain":
        texts["note"] = strings.plain_note()
    elif profile == "no-unknown":
        system = strings.system_without_unknown(system)
    elif profile == "no-note":
        del texts["note"]
    elif profile == "varied":
        if not varied_note:
            raise ValueError("the varied profile needs its note text (build_varied_note)")
        texts["note"] = varied_note
    elif profile != "original":
        raise ValueError(f"unknown profile {profile!r}; profiles are {', '.join(PROFILES)}")
    return study_prompt([(name, texts[name]) for name in tasks.SEGMENT_ORDER if name in texts], chat=True,
                        system=system, date=task_strings.TEMPLATE_DATE)


@dataclass(frozen=True)
class NoteLayout:
    """A tokenized history and where its note lies (tokenizer only, no model).

    Attributes:
        ids: every history token id.
        note: the note's token span.
    """

    ids: tuple[int, ...]
    note: TokenSpan

    def outside(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """The ids before and after the note."""
        return self.ids[: self.note.start], self.ids[self.note.end:]


def note_layout(tokenizer: Any, prompt: kvprobe.Prompt) -> NoteLayout:
    """Tokenize ``prompt`` (a profile with a note) as a prefill would and locate its note."""
    rendered, ids, offsets = prompt.tokenize(tokenizer)
    note = char_span_to_tokens(offsets, rendered.history_text, *rendered.segments["note"], label="note")
    return NoteLayout(tuple(ids.tolist()), note)


@dataclass(frozen=True)
class VariedNote:
    """The varied note of one tokenizer.

    Attributes:
        text: the note.
        n_tokens: its token count in the history (equal to the repeated note's).
        sentences: the authored sentences it uses, in order.
        fillers: the filler sentences appended to reach the exact count.
    """

    text: str
    n_tokens: int
    sentences: tuple[str, ...]
    fillers: tuple[str, ...]


def _join(parts: Sequence[str]) -> str:
    return " ".join(parts)


def build_varied_note(tokenizer: Any, case: tasks.Case, sentences: Sequence[str] = strings.VARIED_SENTENCES,
                      fillers: Sequence[str] = strings.FILLER_SENTENCES, max_fillers: int = 4) -> VariedNote:
    """Distinct sentences whose note has exactly the repeated note's token count in ``case``'s history.

    Authored sentences are added in order, each only if the note still fits; then up to ``max_fillers``
    filler sentences (fewest first) make up the remaining tokens. A combination counts only if every
    token outside the note is the original history's (same ids at the same positions); when none
    fits, trailing authored sentences are dropped one at a time and the fillers tried again.

    Raises :class:`VariedNoteError` when nothing fits.
    """
    original = note_layout(tokenizer, profile_prompt(case, "original"))
    target = len(original.note)

    def layout(parts: Sequence[str]) -> NoteLayout:
        return note_layout(tokenizer, profile_prompt(case, "varied", varied_note=_join(parts)))

    chosen: list[str] = []
    for sentence in sentences:
        if len(layout([*chosen, sentence]).note) <= target:
            chosen.append(sentence)
    if len(set(chosen)) != len(chosen) or set(chosen) & set(fillers):
        raise VariedNoteError("the varied note's sentences must be distinct")
    for drop in range(len(chosen) + 1):
        base = chosen[: len(chosen) - drop]
        for k in range(0, max_fillers + 1):
            for extra in combinations(fillers, k):
                parts = [*base, *extra]
                if not parts:
                    continue
                got = layout(parts)
                if len(got.note) == target and got.note.start == original.note.start \
                        and got.outside() == original.outside():
                    return VariedNote(_join(parts), target, tuple(base), tuple(extra))
    raise VariedNoteError(f"{case.case_id}: no combination of the authored and filler sentences gives a "
                          f"{target}-token note with the tokens outside it unchanged")


def check_varied(tokenizer: Any, case: tasks.Case, varied_note: str) -> NoteLayout:
    """The varied history's layout, after proving it equals the original's outside the note (same ids at the
    same positions) and in note length. Raises :class:`VariedNoteError` otherwise."""
    original = note_layout(tokenizer, profile_prompt(case, "original"))
    varied = note_layout(tokenizer, profile_prompt(case, "varied", varied_note=varied_note))
    if varied.note != original.note or varied.outside() != original.outside():
        raise VariedNoteError(f"{case.case_id}: the varied note spans {varied.note!r}, the repeated note "
                              f"{original.note!r}, or tokens outside the note differ")
    return varied
