"""Text recomputation: delete the source text, retokenize, and prefill again (paper L4540, L1101-1104).

``TextRecompute(["A"])`` removes whole prompt segments (with their separator)
from the history text and prefills the edited text; ``TextRecompute(spans=[span])``
removes the characters of token spans inside one segment instead (the operation-matched
control of a recompute: as many tokens of a neutral note, paper L4535-4537):

* ``stored_prefix=False`` (full recompute) re-encodes all retained text;
* ``stored_prefix=True`` reuses the cached rows of every token before the first
  deleted character whose retokenization is identical (same ids, same
  offsets) and prefills the rest at the shifted positions. If the boundary
  tokens changed, it reuses only the identical ones and records
  ``info["prefix_identical"] = False`` (and warns). UNCLEAR in the paper: how
  the boundary is tokenized; this is our rule.

The question suffix is unchanged. Original history positions map to the new
slots through character offsets, so masks written in original coordinates
still apply to the retained tokens.
"""

from __future__ import annotations

import dataclasses
from dataclasses import replace
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from kvprobe.access import Condition, set_fields
from kvprobe.forward import extend_state
from kvprobe.rows import RowState
from kvprobe.prompts import RenderedPrompt, SpanError

from ._base import require_unedited

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.prompts import TokenSpan
    from kvprobe.history import History
    from kvprobe.model import Model


def deleted_ranges(history: "History", segments: tuple[str, ...]) -> list[tuple[int, int]]:
    """Character ranges of the history text removed when ``segments`` are deleted (with separators)."""
    rendered = history.rendered
    names = list(rendered.segments)
    unknown = [s for s in segments if s not in rendered.segments]
    if unknown:
        raise SpanError(f"no segment {unknown[0]!r}; segments are {names}")
    if len(set(segments)) == len(names):
        raise SpanError("text recompute cannot delete every segment")
    ranges = []
    for name in segments:
        i = names.index(name)
        start, end = rendered.segments[name]
        if i + 1 < len(names):
            ranges.append((start, rendered.segments[names[i + 1]][0]))
        else:
            ranges.append((rendered.segments[names[i - 1]][1], end))
    return sorted(ranges)


def span_ranges(history: "History", spans: tuple["TokenSpan", ...]) -> list[tuple[int, int]]:
    """Character ranges of the history text covered by token ``spans`` (first token's start to last token's end),
    each inside one segment; ``SpanError`` names a span that leaves the history or crosses a segment (a
    ``TokenSpan`` is never empty)."""
    rendered, ranges = history.rendered, []
    for span in spans:
        if span.end > len(history):
            raise SpanError(f"text recompute span {span!r} is outside the history ({len(history)} tokens)")
        lo, hi = history.offsets[span.start][0], history.offsets[span.end - 1][1]
        if not any(start <= lo and hi <= end for start, end in rendered.segments.values()):
            raise SpanError(f"text recompute span {span!r} (characters {lo}-{hi}) is not inside one segment")
        ranges.append((lo, hi))
    ranges.sort()
    if any(a[1] > b[0] for a, b in zip(ranges, ranges[1:])):
        raise SpanError("text recompute spans overlap")
    return ranges


def _char_map(length: int, ranges: list[tuple[int, int]]) -> torch.Tensor:
    """Long[length]: new index of every original character, -1 if deleted."""
    keep = torch.ones(length, dtype=torch.bool, device="cpu")  # host-side bookkeeping
    for lo, hi in ranges:
        keep[lo:hi] = False
    new = torch.cumsum(keep.long(), dim=0) - 1
    return torch.where(keep, new, torch.full_like(new, -1))


@dataclass(frozen=True)
class TextRecompute(Condition):
    """Delete text and prefill the retained history again (named ``recompute``, or ``recompute-prefix`` with
    ``stored_prefix``, unless ``name`` says otherwise).

    Either whole ``segments`` (with their separators) or the characters of token ``spans`` (each inside one
    segment; the rest of that segment stays) are deleted, not both.

    Example::

        TextRecompute("A")                                   # the record, as the paper's recompute
        control = kvprobe.matched_control(h, kvprobe.Mask(h.span("A")), "note")   # as many note tokens
        TextRecompute(spans=control.spans, name="recompute-control")
    """

    segments: str | tuple[str, ...] = ()
    stored_prefix: bool = False
    chunk_size: int | None = field(default=None, kw_only=True)
    name: str = field(default="", kw_only=True)
    spans: tuple["TokenSpan", ...] = field(default=(), kw_only=True)

    def __post_init__(self) -> None:
        segments = (self.segments,) if isinstance(self.segments, str) else tuple(self.segments)
        spans = tuple(self.spans)
        if bool(segments) == bool(spans):
            raise SpanError("TextRecompute needs segment names or token spans to delete (one of the two)")
        set_fields(self, segments=segments, spans=spans,
                   name=self.name or ("recompute-prefix" if self.stored_prefix else "recompute"))

    def deleted(self, history: "History") -> list[tuple[int, int]]:
        """Character ranges of the history text this recompute deletes."""
        return span_ranges(history, self.spans) if self.spans else deleted_ranges(history, self.segments)

    def validate(self, history_len: int, arch: "ArchSummary") -> None:
        if arch.recurrent_layers and self.stored_prefix:
            # Recurrent states exist only after the whole history, not at the cut.
            kinds = sorted({arch.layers[i].kind for i in arch.recurrent_layers})
            raise SpanError(f"{self.name}: stored-prefix recompute is not supported with {kinds} layers: their "
                            "recurrent states are kept only after the whole history, not at the cut "
                            "(use recompute, which prefills the edited text from the start)")

    def edited_prompt(self, history: "History"):
        """The history's prompt without the deleted segments (or the spans' characters)."""
        if not self.spans:
            kept = [(n, t) for n, t in history.prompt.segments if n not in self.segments]
            return dataclasses.replace(history.prompt, segments=kept)
        rendered, ranges, edited = history.rendered, self.deleted(history), []
        for name, text in history.prompt.segments:
            start, end = rendered.segments[name]
            if history.text[start:end] != text:
                raise SpanError(f"segment {name!r} renders as other text; cannot delete characters of its tokens")
            cut = [(lo - start, hi - start) for lo, hi in ranges if start <= lo and hi <= end]
            for lo, hi in reversed(cut):
                text = text[:lo] + text[hi:]
            edited.append((name, text))
        return dataclasses.replace(history.prompt, segments=edited)

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        require_unedited(self.name, history, state)
        ranges = self.deleted(history)
        prompt = self.edited_prompt(history)
        rendered = prompt.render(model.tokenizer)
        char_map = _char_map(len(history.text), ranges)
        expected = "".join(c for c, m in zip(history.text, char_map.tolist()) if m >= 0)
        if rendered.history_text != expected:
            raise SpanError("the chat template changed text outside the deleted segments; cannot recompute")
        ids, new_offsets = rendered.encode(model.tokenizer)
        new_ids = torch.tensor(ids, dtype=torch.long, device=history.device)
        old_ids = history.input_ids.tolist()
        first_deleted = ranges[0][0]
        reused, identical = 0, True
        if self.stored_prefix:
            before = [i for i, (s, e) in enumerate(history.offsets) if e <= first_deleted]
            for i in before:
                if i < len(ids) and ids[i] == old_ids[i] and new_offsets[i] == history.offsets[i]:
                    reused += 1
                else:
                    break
            identical = reused == len(before)
            if not identical:
                warnings.warn(f"{self.name}: tokens before the deleted text retokenized differently; "
                              f"reusing {reused} of {len(before)} cached prefix rows", stacklevel=2)
        T_new = int(new_ids.shape[0])
        prefix = replace(history.prefix_state(reused), input_ids=new_ids[:reused])
        state = extend_state(model, prefix, new_ids[reused:], torch.arange(reused, T_new, device=history.device),
                             self.chunk_size)
        # Original position -> new slot, through character offsets and token identity (host lists).
        new_index = {(s, e, int(t)): j for j, ((s, e), t) in enumerate(zip(new_offsets, ids))}
        chars = char_map.tolist()
        slot_of = [-1] * len(history)
        for i, ((s, e), t) in enumerate(zip(history.offsets, old_ids)):
            if e > s and chars[s] >= 0 and chars[e - 1] >= 0:
                j = new_index.get((chars[s], chars[e - 1] + 1, t))
                if j is not None:
                    slot_of[i] = j
        return replace(
            state,
            slot_of=torch.tensor(slot_of, dtype=torch.long, device=history.device),
            info={"reused_tokens": reused, "recomputed_tokens": T_new - reused, "prefix_identical": identical,
                  "history_tokens": T_new},
        )


# ----------------------------------------------------------------------------- weights only
#: Stands in for the history while the framing is rendered (never tokenized).
_MARK = "\u2063KVPROBE_NO_CONTEXT\u2063"


def no_context_prompt(history: "History", tokenizer: Any) -> RenderedPrompt:
    """The history's prompt rendered with no segment: its framing, and the history's own question suffix.

    Chat prompts render through the same template, system message and template variables with the
    user turn holding the question only; raw prompts keep only the tokenizer's special tokens (BOS).
    Raises ``SpanError`` if the template frames the question differently without the history.

    Example::

        h = m.prefill(kvprobe.Prompt([("A", "The box is red.")], system="Answer briefly."))
        no_context_prompt(h, m.tokenizer).history_text
        # '<|im_start|>system\\nAnswer briefly.<|im_end|>\\n<|im_start|>user\\n'
    """
    prompt = history.prompt
    marked = dataclasses.replace(prompt, segments=[("question", _MARK)]).render(tokenizer)
    start, _ = marked.segments["question"]
    framing = marked.history_text[:start]
    own = history.rendered
    if marked.suffix_template != own.suffix_template:
        raise SpanError("no-context: the chat template frames a question without the history differently "
                        f"({marked.suffix_template!r} vs {own.suffix_template!r})")
    return RenderedPrompt(framing, own.suffix_template, {}, marked.add_special_tokens, own.question_prefix)


@dataclass(frozen=True)
class NoContext(Condition):
    """Weights only: answer from a fresh prefill of the history prompt's framing, with no history segment.

    Example::

        outs = m.generate(h, q, access={"full": kvprobe.Full(), "no-context": NoContext()})
    """

    name: str = field(default="no-context", kw_only=True)

    def apply(self, model: "Model", history: "History", state: RowState, question: str = "") -> RowState:
        require_unedited(self.name, history, state)
        ids, _ = no_context_prompt(history, model.tokenizer).encode(model.tokenizer)
        if not ids:
            raise SpanError("no-context: the prompt's framing has no token (a raw prompt without special "
                            "tokens); the question would start the sequence")
        new = torch.tensor(ids, dtype=torch.long, device=history.device)
        fresh = extend_state(model, model.empty_state(), new, torch.arange(len(ids), device=history.device))
        return replace(fresh, slot_of=torch.full((len(history),), -1, dtype=torch.long, device=history.device),
                       info={"history_tokens": len(ids), "recomputed_tokens": len(ids)})
