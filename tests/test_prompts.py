"""Prompts, segments and token spans (kvprobe.prompts, History.span)."""

from __future__ import annotations

import pytest

import kvprobe
from kvprobe import SpanError, TokenSpan
from kvprobe.prompts import char_span_to_tokens

from conftest import SEGMENTS, make_history


def test_segment_spans_cover_exactly_their_text(llama):
    h = make_history(llama)
    for name, text in SEGMENTS:
        span = h.span(name)
        assert h.token_text(span) == text
        lo, hi = h.rendered.segments[name]
        assert h.text[lo:hi] == text


def test_chat_history_and_suffix_split(llama):
    h = make_history(llama)
    assert h.text.startswith("<|im_start|>system\nAnswer from the records.<|im_end|>\n<|im_start|>user\n")
    assert h.text.endswith(SEGMENTS[-1][1] + "\n\n")
    assert h.rendered.suffix("Q?") == "Q?<|im_end|>\n<|im_start|>assistant\n"


def test_raw_prompt_puts_question_after_separator(llama):
    h = llama.prefill(kvprobe.Prompt(SEGMENTS, chat=False))
    assert h.text == "\n\n".join(t for _, t in SEGMENTS)
    assert h.rendered.suffix("Q?") == "\n\nQ?\n"
    assert h.token_text(h.span("B")) == SEGMENTS[2][1]


def test_substring_span_maps_through_offsets(llama):
    h = make_history(llama)
    span = h.span("A", "12")
    assert h.token_text(span).strip() == "12"
    assert h.span("A").start <= span.start < span.end <= h.span("A").end


def test_misaligned_span_is_an_error_naming_the_token(llama):
    h = make_history(llama)
    with pytest.raises(SpanError, match="does not align with token"):
        h.span("A", "eekly")
    loose = h.span("A", "eekly", strict=False)
    assert "eekly" in h.token_text(loose)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"text": "Room 99"}, "does not occur"),
        ({"text": ""}, "empty text"),
        ({"chars": (5, 5)}, "empty or outside"),
        ({"chars": (0, 10_000)}, "empty or outside"),
        ({"text": "the"}, "occurs 2 times"),
    ],
)
def test_bad_spans_are_clear_errors(llama, kwargs, message):
    h = make_history(llama)
    with pytest.raises(SpanError, match=message):
        h.span("A", **kwargs)


def test_unknown_segment_lists_segments(llama):
    h = make_history(llama)
    with pytest.raises(SpanError, match="no segment 'C'.*'A', 'note', 'B'"):
        h.span("C")


def test_token_span_rejects_empty_and_negative():
    with pytest.raises(SpanError):
        TokenSpan(3, 3)
    with pytest.raises(SpanError):
        TokenSpan(-1, 2)


def test_char_span_outside_text_is_an_error():
    with pytest.raises(SpanError, match="outside the history"):
        char_span_to_tokens([(0, 2), (2, 4)], "abcd", 2, 9)


def test_prompt_validation():
    with pytest.raises(SpanError, match="unique"):
        kvprobe.Prompt([("A", "x"), ("A", "y")])
    with pytest.raises(SpanError, match="empty"):
        kvprobe.Prompt([("A", "")])


def test_segment_encoding_and_special_tokens_are_raw_mode_options(llama):
    import kvprobe
    from kvprobe import SpanError

    segs = [("A", "Record A."), ("B", "Record B.")]
    with pytest.raises(SpanError, match="raw-mode options"):
        kvprobe.Prompt(segs, chat=True, encode_segments=True)
    tok = llama.tokenizer
    rendered = kvprobe.Prompt(segs, chat=False, sep="\n", special_tokens=False, encode_segments=True).render(tok)
    ids, offsets = rendered.encode(tok)
    pieces = ["Record A.", "\n", "Record B."]
    assert ids == [t for p in pieces for t in tok(p, add_special_tokens=False)["input_ids"]]
    assert rendered.pieces == ((0, 9), (9, 10), (10, 19)) and offsets[-1][1] == 19
    whole = kvprobe.Prompt(segs, chat=False, sep="\n").render(tok)
    assert whole.encode(tok)[0] == tok("Record A.\nRecord B.")["input_ids"] and whole.sha256 != rendered.sha256
