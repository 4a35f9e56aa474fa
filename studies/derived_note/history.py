"""Histories, the equal-token neutral interval and the six conditions (paper app:v5_propagation; spec partD 8).

History segments, in order: ``header`` ("Ordered records:"), ``rule``, ``A``,
``C``, ``B`` (joined by newlines, rendered with the model's native chat template
and the system message of ``strings.py``; UNCLEAR layout, ours).

Neutral control (paper L5826-5830: "A paired control replaces the C token
interval with an equal number of tokens from a neutral note, leaving all other
tokens and positions unchanged. This control can end mid-sentence"). The *C
interval* is the token span of segment ``C`` in the derived history under the
model's own tokenizer (``n`` tokens; it can include the following newline when
the tokenizer merges ``".\n"``). The neutral case's ``C`` segment holds the
decoded text of a window of the neutral note, chosen so that the rendered
neutral history has the same length, every token outside the C interval is
unchanged, and the neutral segment lies inside the interval (any interval token
beyond it is separator whitespace, as in the derived history).
:func:`neutral_interval` tries windows in a fixed order and verifies each by
tokenizing both rendered histories: note start 0, 1, 2, ... (up to
``MAX_OFFSET``), and for each start the lengths n, n-1, n+1, n-2, n+2 note
tokens (decoded, stripped of surrounding whitespace); the first that passes is
used (ours; UNCLEAR in the paper, which works in one tokenizer per model). With
SmolLM2 and the tiny tokenizer this is the first n tokens of the note; Qwen2.5
merges ``".\n"``, so there it is the first n-1 note tokens plus the newline.
If no window passes, :class:`NeutralMatchError` is raised. Masks of the C
interval (``mask-C``, ``mask-AC``) use the interval, so the neutral control hides
exactly as many tokens as the derived note.

Conditions (paper L5833-5841):

* ``full``: full access;
* ``mask-A``, ``mask-C``, ``mask-AC``: hide A, C, or both from question and
  answer tokens (in the neutral case ``C`` is the neutral interval, so ``mask-C``
  there is the equal-token control);
* ``refresh``: ``interventions.SelectiveRefresh(A)``: reuse the cache through the
  end of A, recompute every later history state with A hidden;
* ``full-recompute``: ``SelectiveRefresh(A, full=True)``: recompute from position
  0 under the same hidden-A rule.

``recompute_hidden`` returns its state with A hidden from every later token
(``RowState.hide``), so queries in both refreshed arms hide A without an extra
``Compose(..., Mask(A))``; ``tests/test_derived_note.py`` checks this against an
uncached reference. No text is rewritten in either arm (C stays, A stays).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kvprobe
from kvprobe.prompts import SpanError, TokenSpan, char_span_to_tokens
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.protocol import use_chat

from . import strings
from .data import Case, Group

CONDITIONS = ("full", "mask-A", "mask-C", "mask-AC", "refresh", "full-recompute")
SEGMENTS = ("header", "rule", "A", "C", "B")
#: Windows of the neutral note tried before giving up (see module docstring).
MAX_OFFSET = 32


class NeutralMatchError(ValueError):
    """No window of the neutral note has C's token count in context with every other token unchanged."""


@dataclass(frozen=True)
class NeutralInterval:
    """The neutral text that replaces C, for one tokenizer and group.

    Attributes:
        text: the neutral ``C`` segment text.
        interval: the C token interval (the same positions in both histories).
        offset: first neutral-note token of the window (0 unless the fallback was needed).
        note_tokens: how many neutral-note tokens the window holds.
    """

    text: str
    interval: TokenSpan
    offset: int
    note_tokens: int

    @property
    def n_tokens(self) -> int:
        return len(self.interval)


def segments(group: Group, c_text: str | None = None) -> list[tuple[str, str]]:
    """``[(name, text), ...]`` of the history; ``c_text`` replaces the derived note in segment ``C``."""
    return [("header", strings.HEADER), ("rule", group.rule), ("A", group.record_a),
            ("C", group.derived_note if c_text is None else c_text), ("B", group.record_b)]


def build_prompt(group: Group, c_text: str | None = None, chat: bool = True) -> kvprobe.Prompt:
    """The history prompt. Without a chat template the system text becomes a leading ``system`` segment."""
    segs = segments(group, c_text)
    if not chat:
        segs = [("system", strings.SYSTEM), *segs]
    return study_prompt(segs, chat=chat, system=strings.SYSTEM if chat else None, sep=strings.SEGMENT_SEP,
                        question_sep=strings.QUESTION_SEP)


def tokenize(tokenizer: Any, prompt: kvprobe.Prompt) -> tuple[list[int], dict[str, TokenSpan]]:
    """History token ids and each segment's token span (as ``Model.tokenize`` and ``History.span`` do)."""
    rendered = prompt.render(tokenizer)
    ids, offsets = rendered.encode(tokenizer)
    spans = {name: char_span_to_tokens(offsets, rendered.history_text, a, b, label=name)
             for name, (a, b) in rendered.segments.items()}
    return ids, spans


def _matches(ids: list[int], seg: TokenSpan, ref_ids: list[int], interval: TokenSpan) -> bool:
    """Same length, same tokens outside ``interval``, neutral segment inside it."""
    return (len(ids) == len(ref_ids) and interval.start <= seg.start and seg.end <= interval.end
            and ids[: interval.start] == ref_ids[: interval.start] and ids[interval.end:] == ref_ids[interval.end:])


def _windows(n: int, note_len: int) -> list[tuple[int, int]]:
    """(start, length) of the note windows in the order they are tried (module docstring)."""
    out = []
    for offset in range(MAX_OFFSET):
        for length in (n, n - 1, n + 1, n - 2, n + 2):
            if length >= 1 and offset + length <= note_len:
                out.append((offset, length))
    return out


def neutral_interval(tokenizer: Any, group: Group, chat: bool | None = None) -> NeutralInterval:
    """The neutral replacement of C: the C interval's token count taken from the neutral note (module docstring)."""
    chat = use_chat(tokenizer, chat)
    ref_ids, ref_spans = tokenize(tokenizer, build_prompt(group, chat=chat))
    interval = TokenSpan(ref_spans["C"].start, ref_spans["C"].end, "C")
    note = tokenizer(strings.neutral_note(), add_special_tokens=False)["input_ids"]
    for offset, length in _windows(len(interval), len(note)):
        text = tokenizer.decode(note[offset: offset + length]).strip()
        if not text:
            continue
        try:
            ids, spans = tokenize(tokenizer, build_prompt(group, text, chat=chat))
        except SpanError:
            continue
        if _matches(ids, spans["C"], ref_ids, interval):
            extra = [i for i in range(interval.start, interval.end) if not spans["C"].start <= i < spans["C"].end]
            if all(not tokenizer.decode([ids[i]]).strip() for i in extra):
                return NeutralInterval(text, interval, offset, length)
    raise NeutralMatchError(
        f"{group.group_id}: no window of the neutral note (starts 0..{MAX_OFFSET - 1}) fills the "
        f"{len(interval)}-token C interval in context with every other token unchanged; C = {group.derived_note!r}")


def case_prompt(tokenizer: Any, case: Case, chat: bool | None = None) -> tuple[kvprobe.Prompt, NeutralInterval | None]:
    """The case's prompt and, for the neutral note, its verified neutral interval."""
    chat = use_chat(tokenizer, chat)
    if case.note == "derived":
        return build_prompt(case.group, chat=chat), None
    neutral = neutral_interval(tokenizer, case.group, chat=chat)
    return build_prompt(case.group, neutral.text, chat=chat), neutral


def c_interval(history: kvprobe.History, neutral: NeutralInterval | None = None) -> TokenSpan:
    """The C token interval: segment ``C`` of a derived history, the verified interval of a neutral one."""
    if neutral is None:
        return history.span("C")
    seg = history.span("C")
    if not (neutral.interval.start <= seg.start and seg.end <= neutral.interval.end <= len(history)):
        raise SpanError(f"the neutral interval {neutral.interval!r} does not hold segment {seg!r} of this history")
    return neutral.interval


def conditions(history: kvprobe.History, c: TokenSpan | None = None) -> dict[str, kvprobe.Condition]:
    """The six conditions on a prefilled case history (module docstring), in report order.

    ``c``: the C token interval (default: segment ``C``; pass :func:`c_interval` for neutral cases).
    """
    from kvprobe.interventions import SelectiveRefresh

    a = history.span("A")
    c = history.span("C") if c is None else c
    return {
        "full": kvprobe.Full(),
        "mask-A": kvprobe.Mask(a, name="mask-A"),
        "mask-C": kvprobe.Mask(c, name="mask-C"),
        "mask-AC": kvprobe.Mask([a, c], name="mask-AC"),
        "refresh": SelectiveRefresh(a, name="refresh"),
        "full-recompute": SelectiveRefresh(a, full=True, name="full-recompute"),
    }
