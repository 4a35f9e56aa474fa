"""Prompts assembled from named segments, with exact character and token spans.

A :class:`Prompt` is an ordered list of named text segments (``A``, ``note``,
``B``...) that form the *history*. Questions are not part of the prompt: a
history is prefilled once and every question is appended afterwards as a
*suffix* (question text plus the chat template's tail, e.g.
``<|im_end|>\\n<|im_start|>assistant\\n``). Rendering through the chat template
uses a sentinel question so the split between history and suffix is exact.

Segments keep exact character offsets in the rendered history; :func:`char_span_to_tokens`
maps any character range to the tokens that cover it using the tokenizer's
offset mapping. Spans are computed, never counted by hand.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

#: Placeholder question used to split a rendered chat into history and suffix.
_SENTINEL = "\u2063KVPROBE_QUESTION\u2063"


#: The name of the one segment of a prompt given as a plain string (``Prompt("some text")``).
PLAIN_SEGMENT = "text"


class SpanError(ValueError):
    """A span that cannot be mapped cleanly onto tokens, is empty, or lies outside the prompt."""


@dataclass(frozen=True, order=True)
class TokenSpan:
    """Half-open token range ``[start, end)`` in history token coordinates."""

    start: int
    end: int
    label: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.start < 0 or self.end <= self.start:
            raise SpanError(f"span {self.label or ''}[{self.start}, {self.end}) is empty or negative")

    def __len__(self) -> int:
        return self.end - self.start

    def positions(self) -> range:
        """Token positions covered by the span."""
        return range(self.start, self.end)

    def overlaps(self, other: "TokenSpan") -> bool:
        """True if the two spans share at least one token."""
        return self.start < other.end and other.start < self.end

    def __repr__(self) -> str:
        name = f"{self.label}" if self.label else "span"
        return f"{name}[{self.start}:{self.end}]"


@dataclass(frozen=True)
class RenderedPrompt:
    """A prompt rendered to text: the history, and how to build a question suffix.

    Attributes:
        history_text: everything before the question (prefilled once).
        suffix_template: text after the question (chat template tail), appended to each question.
        question_prefix: text placed before each question inside the suffix (empty in chat mode,
            where the separator is part of the history).
        segments: name -> (start, end) character range in ``history_text``.
        add_special_tokens: whether the tokenizer should add BOS etc. to the history
            (false for chat templates, which write their own).
        pieces: character ranges of ``history_text`` encoded independently, their ids
            concatenated (empty: the whole text is encoded at once); special tokens, if any,
            go on the first piece.
    """

    history_text: str
    suffix_template: str
    segments: dict[str, tuple[int, int]]
    add_special_tokens: bool
    question_prefix: str = ""
    pieces: tuple[tuple[int, int], ...] = ()

    def encode(self, tokenizer: Any) -> tuple[list[int], list[tuple[int, int]]]:
        """History token ids and their character offsets in ``history_text`` (whole, or piece by piece).

        Example::

            ids, offsets = Prompt([("A", "Record A.")], chat=False).render(tok).encode(tok)
        """
        pieces = self.pieces or ((0, len(self.history_text)),)
        ids: list[int] = []
        offsets: list[tuple[int, int]] = []
        for i, (a, b) in enumerate(pieces):
            enc = tokenizer(self.history_text[a:b], add_special_tokens=self.add_special_tokens and i == 0,
                            return_offsets_mapping=True)
            ids += list(enc["input_ids"])
            offsets += [(a + s, a + e) for s, e in enc["offset_mapping"]]
        return ids, offsets

    def suffix(self, question: str) -> str:
        """Text appended after the history for one question."""
        return self.question_prefix + question + self.suffix_template

    @property
    def sha256(self) -> str:
        """Hash of the rendered history and suffix template."""
        parts = [self.history_text, self.question_prefix, self.suffix_template]
        if self.pieces:  # the same text encoded piece by piece is another history
            parts.append(json.dumps(self.pieces))
        blob = "\x00".join(parts)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class Prompt:
    """A history assembled from named segments.

    Args:
        segments: ``(name, text)`` pairs in order. Names must be unique and non-empty. A plain string is
            one segment named ``"text"`` (:data:`PLAIN_SEGMENT`): ``Prompt("...")``, ``h.span("text")``.
        chat: render through the tokenizer's chat template (system + one user message
            holding the segments and then the question, plus the generation prompt).
        system: system message text (chat mode only); ``None`` omits it (the template
            may then insert its own default).
        sep: text placed between segments.
        question_sep: text placed between the last segment and the question.
        template_kwargs: extra chat template variables, e.g. ``{"enable_thinking": False,
            "date_string": "16 Sep 2026"}``; templates ignore variables they do not use.
        raw_suffix: in raw (non-chat) mode, text appended after the question
            (default ``"\\n"``; the model continues from there).
        special_tokens: in raw mode, let the tokenizer add its special tokens (BOS...) to
            the history (default true; the paper's source-influence prompt has none).
        encode_segments: in raw mode, encode every segment (and separator) on its own and
            concatenate the ids, as when records are cached separately; default false
            (the whole history text is encoded at once).
    """

    segments: Sequence[tuple[str, str]] | str
    chat: bool = True
    system: str | None = None
    sep: str = "\n\n"
    question_sep: str = "\n\n"
    template_kwargs: dict[str, Any] = field(default_factory=dict)
    raw_suffix: str = "\n"
    special_tokens: bool = True
    encode_segments: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.segments, str):  # Prompt("text"): one segment, named "text"
            self.segments = [(PLAIN_SEGMENT, self.segments)]
        pairs = []
        for segment in self.segments:
            if isinstance(segment, str) or not isinstance(segment, (tuple, list)) or len(segment) != 2:
                raise TypeError(f"a prompt's segments are (name, text) pairs, got {segment!r}; e.g. "
                                f"Prompt([('A', 'Record A.'), ('B', 'Record B.')]), or Prompt('some text') "
                                f"for one segment named {PLAIN_SEGMENT!r}")
            pairs.append((str(segment[0]), str(segment[1])))
        self.segments = pairs
        names = [n for n, _ in self.segments]
        if not names:
            raise SpanError("a prompt needs at least one segment")
        if any(not n for n in names) or len(set(names)) != len(names):
            raise SpanError(f"segment names must be unique and non-empty, got {names}")
        for name, text in self.segments:
            if not text:
                raise SpanError(f"segment {name!r} is empty")
        if self.chat and (self.encode_segments or not self.special_tokens):
            raise SpanError("encode_segments and special_tokens=False are raw-mode options; use chat=False")

    @property
    def body(self) -> str:
        """The segments joined by ``sep``."""
        return self.sep.join(t for _, t in self.segments)

    def render(self, tokenizer: Any) -> RenderedPrompt:
        """Render to text and locate every segment's characters."""
        body = self.body
        if self.chat:
            if getattr(tokenizer, "chat_template", None) is None:
                raise SpanError("chat=True but the tokenizer has no chat template; use chat=False")
            messages = []
            if self.system is not None:
                messages.append({"role": "system", "content": self.system})
            messages.append({"role": "user", "content": body + self.question_sep + _SENTINEL})
            text = tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=True, **self.template_kwargs
            )
            if text.count(_SENTINEL) != 1:
                raise SpanError("the chat template did not keep the question placeholder exactly once")
            cut = text.index(_SENTINEL)
            history_text, tail = text[:cut], text[cut + len(_SENTINEL) :]
            body_start = history_text.rfind(body + self.question_sep)
            if body_start < 0 or history_text.count(body) != 1:
                raise SpanError("the chat template altered the segment text; cannot locate segments")
            add_special, question_prefix = False, ""
        else:
            history_text, tail, body_start = body, self.raw_suffix, 0
            add_special, question_prefix = self.special_tokens, self.question_sep
        segments, cursor = {}, body_start
        for name, seg_text in self.segments:
            segments[name] = (cursor, cursor + len(seg_text))
            cursor += len(seg_text) + len(self.sep)
        pieces: list[tuple[int, int]] = []
        if self.encode_segments:
            for (a, b), nxt in zip(segments.values(), [*list(segments.values())[1:], None]):
                pieces.append((a, b))
                if nxt is not None and nxt[0] > b:
                    pieces.append((b, nxt[0]))  # the separator
        return RenderedPrompt(history_text, tail, segments, add_special, question_prefix, tuple(pieces))

    def tokenize(self, tokenizer: Any) -> tuple[RenderedPrompt, Any, list[tuple[int, int]]]:
        """Render and tokenize the history: (rendered prompt, Long[T] ids, character offsets)."""
        import torch

        rendered = self.render(tokenizer)
        ids, offsets = rendered.encode(tokenizer)
        if not ids:
            raise SpanError("the prompt's history tokenizes to nothing")
        return rendered, torch.tensor(ids, dtype=torch.long, device="cpu"), offsets  # the model moves them


def char_span_to_tokens(
    offsets: Sequence[tuple[int, int]],
    text: str,
    start: int,
    end: int,
    *,
    strict: bool = True,
    label: str = "",
) -> TokenSpan:
    """Map the character range ``[start, end)`` of ``text`` to the tokens that cover it.

    Every token whose characters overlap the range is included. With ``strict``,
    a covering token may extend beyond the range only over whitespace (``" 12"`` for
    ``"12"`` is clean; ``"12h"`` for ``"12"`` is not) and the error names the token.
    """
    where = f"{label!r} " if label else ""
    if not 0 <= start < end <= len(text):
        raise SpanError(
            f"character span {where}[{start}, {end}) is empty or outside the history (length {len(text)})"
        )
    hits = [i for i, (s, e) in enumerate(offsets) if s < end and e > start and e > s]
    if not hits:
        raise SpanError(f"character span {where}[{start}, {end}) {text[start:end]!r} covers no token")
    first, last = hits[0], hits[-1]
    if strict:
        for i in (first, last):
            s, e = offsets[i]
            outside = text[s:max(s, min(e, start))] + text[max(s, end):e]
            if outside.strip():
                raise SpanError(
                    f"character span {where}[{start}, {end}) {text[start:end]!r} does not align with "
                    f"token {i} {text[s:e]!r} (chars [{s}, {e})), which also covers {outside.strip()!r}; "
                    "pass strict=False to include the whole token"
                )
    return TokenSpan(first, last + 1, label)


def find_occurrences(haystack: str, needle: str) -> list[int]:
    """Start offsets of every (possibly overlapping) occurrence of ``needle``."""
    out, i = [], haystack.find(needle)
    while i >= 0:
        out.append(i)
        i = haystack.find(needle, i + 1)
    return out


def merge_spans(spans: Iterable[TokenSpan]) -> list[TokenSpan]:
    """Sorted spans with overlapping or adjacent ones merged."""
    merged: list[TokenSpan] = []
    for span in sorted(spans):
        if merged and span.start <= merged[-1].end:
            last = merged.pop()
            span = TokenSpan(last.start, max(last.end, span.end), last.label or span.label)
        merged.append(span)
    return merged
