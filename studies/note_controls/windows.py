"""The note windows the control configurations hide, from a history's own token ids.

Every window lies inside the note. ``n`` is the number of tokens the original whole-source control
hides: record A's token count in this history (the paper's 31 Llama tokens).

===================== ============================================================================
window                tokens
===================== ============================================================================
early                 the first ``n`` note tokens after ``skip`` (the original whole-source control)
middle, late          ``n`` tokens placed at fraction ``placement`` of the note's free room
                      (0: at its start, 1: ending at its end; middle 0.5, late 1.0 by default)
sentence-end          the early window extended through the first following token holding a period
all-note              every note token
near, far             the earliest ``n``-token note subsequence with a later, non-overlapping copy of
                      identical ids, and its last such copy
preserve-first-four   the early window shifted four tokens later
first-four, last-four the first / last four note tokens
===================== ============================================================================

Example::

    pieces = token_pieces(history.text, history.offsets)
    w = note_windows(history.input_ids.tolist(), pieces, note=history.span("note"), n=len(history.span("A")))
    kvprobe.Mask(w["near"], name="near")
"""

from __future__ import annotations

from typing import Sequence

from kvprobe.prompts import SpanError, TokenSpan

#: Tokens of the four-token ablations and of the preserve-first-four shift (paper L5410-5412).
FOUR = 4
#: Window names, in report order.
WINDOWS = ("early", "middle", "late", "sentence-end", "all-note", "near", "far", "preserve-first-four",
           "first-four", "last-four")


class NoMatchedOccurrence(SpanError):
    """The note has no ``n``-token subsequence with a later identical, non-overlapping copy."""


def _inside(span: TokenSpan, note: TokenSpan, name: str) -> TokenSpan:
    if span.start < note.start or span.end > note.end:
        raise SpanError(f"the {name} window {span!r} does not fit in the note {note!r}")
    return TokenSpan(span.start, span.end, name)


def placed(note: TokenSpan, n: int, fraction: float, name: str) -> TokenSpan:
    """``n`` note tokens starting at ``note.start + round(fraction * (len(note) - n))``.

    Example: ``placed(TokenSpan(10, 110), 20, 1.0, "late")`` is ``late[90:110]``.
    """
    start = note.start + round(fraction * (len(note) - n))
    return _inside(TokenSpan(start, start + n, name), note, name)


def through_sentence_end(pieces: Sequence[str], window: TokenSpan, note: TokenSpan) -> TokenSpan:
    """``window`` extended through the first token after it whose text holds a period (``pieces[i]``: the
    characters of history token i)."""
    for j in range(window.end, note.end):
        if "." in pieces[j]:
            return TokenSpan(window.start, j + 1, "sentence-end")
    raise SpanError(f"no period follows the window {window!r} inside the note {note!r}")


def matched_occurrence(ids: Sequence[int], note: TokenSpan, n: int) -> tuple[TokenSpan, TokenSpan]:
    """(near, far): the earliest ``n``-token note subsequence that has a later copy with identical ids not
    overlapping it, and the last such copy.

    Raises :class:`NoMatchedOccurrence` when no subsequence repeats.
    """
    seq = list(ids[note.start:note.end])
    for i in range(len(seq) - n + 1):
        window = seq[i:i + n]
        copies = [j for j in range(i + n, len(seq) - n + 1) if seq[j:j + n] == window]
        if copies:
            near = TokenSpan(note.start + i, note.start + i + n, "near")
            far = TokenSpan(note.start + copies[-1], note.start + copies[-1] + n, "far")
            return near, far
    raise NoMatchedOccurrence(f"no {n}-token subsequence of the note {note!r} has a later identical copy")


def note_windows(ids: Sequence[int], pieces: Sequence[str], note: TokenSpan, n: int, skip: int = 0,
                 middle: float = 0.5, late: float = 1.0, matched: bool = True) -> dict[str, TokenSpan]:
    """Every window of :data:`WINDOWS` (module docstring) by name (without near and far unless ``matched``:
    a note of distinct sentences has no repeated subsequence).

    Args:
        ids: the history's token ids.
        pieces: each history token's characters (for the sentence-end window).
        note: the note's token span.
        n: tokens of the old-source-length windows (record A's token count).
        skip: note tokens before the early window (0: the note's first word).
        middle, late: placements of the middle and late windows (:func:`placed`).
        matched: also the near and far copies (:func:`matched_occurrence`).
    """
    if n < 1 or n + skip + FOUR > len(note):
        raise SpanError(f"a {n}-token window (+{skip} skipped, +{FOUR} shifted) does not fit in the note {note!r}")
    early = _inside(TokenSpan(note.start + skip, note.start + skip + n), note, "early")
    windows = {
        "early": early,
        "middle": placed(note, n, middle, "middle"),
        "late": placed(note, n, late, "late"),
        "sentence-end": through_sentence_end(pieces, early, note),
        "all-note": TokenSpan(note.start, note.end, "all-note"),
        "preserve-first-four": _inside(TokenSpan(early.start + FOUR, early.end + FOUR), note, "preserve-first-four"),
        "first-four": TokenSpan(note.start, note.start + FOUR, "first-four"),
        "last-four": TokenSpan(note.end - FOUR, note.end, "last-four"),
    }
    if matched:
        windows["near"], windows["far"] = matched_occurrence(ids, note, n)
    return {name: windows[name] for name in WINDOWS if name in windows}


def token_pieces(text: str, offsets: Sequence[tuple[int, int]]) -> list[str]:
    """The characters of every token (``text[start:end]`` of its offsets)."""
    return [text[s:e] for s, e in offsets]
