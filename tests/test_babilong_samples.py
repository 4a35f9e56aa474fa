"""BABILong sample builder (facts among PG-19 filler, exact spans, prompt, masks) and grading."""

from __future__ import annotations

import json

import pytest

from kvprobe.studies.datasets.babi import parse_babi, parse_babi_lines
from kvprobe.studies.babilong.dependencies import dependency_keep, naive_keep
from kvprobe.studies.babilong.grading import (
    location_vocabulary, official_correct, predicted_location, strict_correct,
)
from kvprobe.studies.babilong.samples import (
    BABI_FILES, PROMPT_CONFIGS, build_sample, build_samples, mask_spans, masked_amount, render_prompt, shift_spans,
    word_count_tokens,
)
from kvprobe.studies.datasets.filler import filler_sentences, split_sentences, strip_gutenberg

LENGTHS = (0, 1000, 2000, 4000)

STORY = parse_babi_lines("""\
1 John went to the bedroom.
2 Mary moved to the hallway.
3 John travelled to the kitchen.
4 John picked up the football there.
5 John journeyed to the garden.
6 Mary went to the bathroom.
7 John dropped the football.
8 John went to the office.
9 Where is the football?\tgarden\t7 5
10 Mary went to the kitchen.
11 Where was the football before the garden?\tkitchen\t7 5 3
""".splitlines())[0]


def char_quarter(text: str) -> int:
    """A non-additive stand-in for a tokenizer counter (joins and rounding matter)."""
    return len(text) // 4


@pytest.fixture(scope="module")
def filler() -> list[str]:
    return filler_sentences()


@pytest.fixture(scope="module")
def samples(filler) -> list:
    return build_samples("qa2", LENGTHS, n=4, filler=filler) + build_samples("qa3", LENGTHS, n=4, filler=filler)


def _check_spans(sample) -> None:
    spans = [(s, e) for _, s, e in sample.fact_spans]
    assert [i for i, _, _ in sample.fact_spans] == list(range(len(sample.facts)))
    for index, start, end in sample.fact_spans:
        assert sample.context[start:end] == sample.facts[index].text
    pieces = sorted(spans + list(sample.filler_spans))
    assert all(e < s2 for (_, e), (s2, _) in zip(pieces, pieces[1:]))  # disjoint, in order
    assert " ".join(sample.context[s:e] for s, e in pieces) == sample.context  # nothing else in it
    assert spans == sorted(spans)


# --------------------------------------------------------------------------- filler


def test_filler_sentences(filler):
    assert len(filler) > 2000 and filler == filler_sentences()
    assert all(5 <= len(s.split()) <= 100 for s in filler)
    assert not any("PROJECT GUTENBERG" in s.upper() for s in filler)
    text = "header\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\nBody. Text here.\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\nlicense"
    assert strip_gutenberg(text).strip() == "Body. Text here."
    assert split_sentences('"Is it?" said Mr. Smith to me. Then he went home. No.', 1) == [
        '"Is it?" said Mr. Smith to me.', "Then he went home.", "No."]


# --------------------------------------------------------------------------- samples


def test_spans_exact_in_order_at_every_length(samples):
    assert len(samples) == 2 * 4 * len(LENGTHS)
    for sample in samples:
        _check_spans(sample)
        assert sample.facts and sample.answer and sample.question.startswith("Where")


def test_lengths_near_target(samples):
    for sample in samples:
        assert sample.n_tokens == word_count_tokens(sample.context)
        if sample.target_tokens == 0:
            assert sample.filler_spans == () and sample.context == " ".join(f.text for f in sample.facts)
        elif word_count_tokens(" ".join(f.text for f in sample.facts)) < 0.9 * sample.target_tokens:
            assert abs(sample.n_tokens - sample.target_tokens) <= 0.1 * sample.target_tokens, sample


def test_tokenizer_counter_and_determinism(filler):
    story = build_samples("qa2", (0,), n=1)[0]
    stories = parse_babi(BABI_FILES["qa2"])
    a = build_sample(stories[story.story_index], story.question_index, filler, 2000, char_quarter, seed=7)
    b = build_sample(stories[story.story_index], story.question_index, filler, 2000, char_quarter, seed=7)
    c = build_sample(stories[story.story_index], story.question_index, filler, 2000, char_quarter, seed=8)
    assert a == b and a.context != c.context
    assert a.n_tokens == char_quarter(a.context) and abs(a.n_tokens - 2000) <= 200
    _check_spans(a)
    assert build_samples("qa3", (1000,), n=2, filler=filler) == build_samples("qa3", (1000,), n=2, filler=filler)


def test_test_100_index_mapping():
    idxs = json.loads(PROMPT_CONFIGS["qa2"].parent.parent.joinpath("test_100_idxs.json").read_text())
    samples = build_samples("qa2", (0,))
    assert [s.sample_index for s in samples] == idxs["qa2"]
    first = samples[0]  # index 8: story 1, question 3 (five questions per story)
    assert (first.sample_index, first.story_index, first.question_index) == (8, 1, 3)
    assert len({s.story_index for s in samples}) == 78  # spec: 78 qa2 source stories


# --------------------------------------------------------------------------- prompt


@pytest.mark.parametrize("task", ["qa2", "qa3"])
def test_prompt_rendering_keeps_spans(samples, task):
    config = json.loads(PROMPT_CONFIGS[task].read_text())["prompt"]
    for sample in (s for s in samples if s.task == task):
        text, offset = render_prompt(sample)
        assert (text, offset) == render_prompt(sample, config)
        assert text.startswith(config["instruction"] + "\n\n" + config["examples"] + "\n\n" + config["post_prompt"])
        assert text.endswith(f"<context>\n{sample.context}\n</context>\n\nQuestion: {sample.question}")
        for (index, start, end), (_, s2, e2) in zip(sample.fact_spans, shift_spans(sample.fact_spans, offset)):
            assert text[s2:e2] == sample.facts[index].text == sample.context[start:end]
        for (s, e), (s2, e2) in zip(sample.filler_spans, shift_spans(sample.filler_spans, offset)):
            assert text[s2:e2] == sample.context[s:e]


# --------------------------------------------------------------------------- masks


def test_rule_masks_cover_exactly_the_unkept_movements(samples, filler):
    hand = build_sample(STORY, 0, filler, 1000, seed=3)
    assert len(hand.facts) == 8
    spans = {i: (s, e) for i, s, e in hand.fact_spans}
    assert mask_spans(hand, "naive") == [spans[i] for i in (0, 1, 2, 4)]
    assert mask_spans(hand, "dependency") == [spans[i] for i in (0, 1)]
    for sample in samples:
        spans = {i: (s, e) for i, s, e in sample.fact_spans}
        for rule, keep in (("naive", naive_keep), ("dependency", dependency_keep)):
            hidden = [i for i in range(len(sample.facts)) if i not in keep(sample.facts)]
            assert all(sample.facts[i].kind == "move" for i in hidden)
            assert mask_spans(sample, rule) == [spans[i] for i in hidden]


def _inside_filler(sample, start, end) -> bool:
    return any(s <= start and end <= e for s, e in sample.filler_spans)


@pytest.mark.parametrize("counter", [None, word_count_tokens])
def test_neutral_mask_is_filler_only_and_matches_dependency(samples, counter):
    checked = 0
    for sample in samples:
        neutral = mask_spans(sample, "neutral", counter)
        for start, end in neutral:
            assert start < end and _inside_filler(sample, start, end)
            assert all(end <= s or e <= start for _, s, e in sample.fact_spans)
        hidden = masked_amount(sample, mask_spans(sample, "dependency"), counter)
        filler_total = masked_amount(sample, sample.filler_spans, counter)
        got = masked_amount(sample, neutral, counter)
        if filler_total < hidden:  # e.g. 0k: no filler to hide
            assert neutral == list(sample.filler_spans)
            continue
        checked += 1
        if counter is None:
            assert got == hidden
        else:  # the last sentence is cut at a word boundary, each span counted on its own
            assert hidden <= got <= hidden + 3
    assert checked >= 10


def test_unknown_rule(samples):
    with pytest.raises(ValueError):
        mask_spans(samples[0], "random")


# --------------------------------------------------------------------------- grading


def test_location_vocabulary():
    assert location_vocabulary() == {"bathroom", "bedroom", "garden", "hallway", "kitchen", "office"}


def test_official_grading():
    q3 = "Where was the apple before the kitchen?"
    assert official_correct("Before the kitchen the apple was in the bathroom.", "bathroom", q3, True)
    assert predicted_location("Before the kitchen the apple was in the bathroom.", q3) == "bathroom"
    assert not official_correct("Before the kitchen the apple was in the bathroom.", "bathroom", q3, False)
    assert official_correct("Before the kitchen the apple was in the bathroom.", "bathroom", q3, False,
                            require_eos=False)
    assert not official_correct("The apple was in the bathroom or the garden.", "bathroom", q3, True)
    assert not official_correct("Before the kitchen the apple was in the kitchen.", "kitchen", q3, True)
    q2 = "Where is the football?"
    assert official_correct("The football is in the garden. Then it went to the office.", "garden", q2, True)
    assert official_correct("The 'football' is in 'GARDEN'", "garden", q2, True)
    assert not official_correct("I don't know.", "garden", q2, True)


def test_strict_grading():
    assert strict_correct("garden", "garden", True)
    assert strict_correct(" Garden.\n", "garden", True)
    assert not strict_correct("garden", "garden", False)
    assert not strict_correct("The football is in the garden.", "garden", True)


def test_filler_too_short():
    with pytest.raises(ValueError, match="filler too short"):
        build_sample(STORY, 0, ["A short filler sentence here."] * 3, 1000)
