"""BABILong sample builder for qa2/qa3 (spec partA section 2), pure Python, no model.

A sample is one bAbI question with the story's facts before it (other questions dropped), the
facts kept in order and scattered among consecutive sentences of PG-19 filler text until the
context reaches a target length, as upstream ``babilong_utils.NoiseInjectionDataset`` does. Every
fact's exact character span in the context is recorded so attention masks can be built later.

Decisions (UNCLEAR upstream or deliberately simplified), with our choice:

* Filler (:mod:`studies.datasets.filler`): one PG-19 book (the ``pg19`` data set (``kvprobe data``)), split into
  sentences by a regex (no nltk); upstream samples random PG-19 books and Punkt sentences.
  Sentences shorter than ``min_words`` (headings) or longer than ``max_words`` are dropped.
  Filler is taken as consecutive sentences from a seeded start sentence; whole sentences only
  (upstream cuts the last sentence to hit the length exactly), so the length is approximate
  (closest whole sentence).
* Fact positions: one seeded draw per fact, with replacement, among the ``k + 1`` gaps of the
  ``k`` filler sentences, sorted (as upstream); facts sharing a gap keep their story order.
* Pieces (facts and filler sentences) are joined by one space; upstream concatenates token ids.
* Length: ``count_tokens(context)`` of the context alone (no prompt framing, no question), as the
  upstream ``sample_size`` counts facts + filler. Default counter: ``round(1.3 * words)``.
* Sample indices: ``test_100_idxs.json`` maps each task to 100 indices in ``0..999``. Upstream
  ``get_dataset_df`` makes one sample per question in file order, so index ``i`` is the i-th
  question of the test file (every qa2/qa3 story has 5 questions: story ``i // 5``, question
  ``i % 5``). This gives 78 qa2 stories (spec: 78) and 82 qa3 stories (spec says 80; unresolved).
  Upstream drops questions with more than ``length // 8`` facts for lengths > 0 (only the 1k
  qa3 set is affected); we never drop, so indices are those of the unfiltered 0k/2k+ sets.
* Seeds: ``build_samples`` derives each sample's seed from (seed, task, sample index) but not the
  length, so all lengths of a question start at the same book sentence.
* Neutral mask: hides filler text only, as much as the DEPENDENCY rule hides (the hidden
  movement facts' tokens under ``count_tokens``, or their characters without a counter), taken
  from the first filler sentences of the context (the ones nearest the context start).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvprobe.data import DataFiles, find
from kvprobe.studies.datasets.filler import filler_sentences

from kvprobe.studies.datasets.babi import Fact, Story, parse_babi
from .dependencies import dependency_keep, naive_keep

#: 20260913: BABILong sample selection (``studies.babilong.samples``).
BABILONG_SEED = 20260913

#: The bAbI test files of the object-tracking tasks BABILong uses (the ``babi`` data set of :mod:`kvprobe.data`).
BABI_FILES = DataFiles("babi", {"qa2": "qa2_two-supporting-facts_test.txt", "qa3": "qa3_three-supporting-facts_test.txt"})
#: BABILong's official prompt configs, per task (the ``babilong`` data set).
PROMPT_CONFIGS = DataFiles("babilong", {task: f"prompts/{task}_prompt_config.json" for task in BABI_FILES})
#: BABILong's index of the 100 test samples per task.
TEST_IDXS = DataFiles("babilong", {"test": "test_100_idxs.json"})
MASK_RULES = ("naive", "dependency", "neutral")

Span = tuple[int, int]
CountTokens = Callable[[str], int]


def word_count_tokens(text: str) -> int:
    """Default token estimate: whitespace words x 1.3, rounded."""
    return round(1.3 * len(text.split()))


def tokenizer_counter(tokenizer: Any) -> CountTokens:
    """A ``count_tokens`` from a Hugging Face-style tokenizer (no special tokens)."""
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


# --------------------------------------------------------------------------- samples


@dataclass(frozen=True)
class Sample:
    """One BABILong input: context (facts among filler), question and gold answer.

    ``fact_spans``: ``(fact_index, start, end)`` per fact, in story order, with
    ``context[start:end] == facts[fact_index].text``. ``filler_spans``: ``(start, end)`` per filler
    sentence, in order (book sentences ``filler_start ..``). Spans are in context coordinates;
    add the offset returned by ``render_prompt`` for prompt coordinates.
    """

    task: str
    story_index: int
    question_index: int  # index of the question within its story
    sample_index: int | None  # index of the question in the test file (test_100_idxs numbering)
    question: str
    answer: str
    facts: tuple[Fact, ...]  # the story facts before the question
    context: str
    fact_spans: tuple[tuple[int, int, int], ...]
    filler_spans: tuple[Span, ...]
    target_tokens: int
    n_tokens: int  # count_tokens(context)
    filler_start: int  # index of the first filler sentence in the book
    seed: int
    question_before: str | None = None  # qa3: the location named in the question


def _task_of(story: Story) -> str:
    for task, path in BABI_FILES.items():
        if Path(story.source).name == path.name:
            return task
    kinds = {q.kind for q in story.questions}
    return "qa3" if "where_before" in kinds else "qa2"


def _assemble(facts: Sequence[Fact], filler: Sequence[str], positions: Sequence[int]):
    """Join facts (inserted before filler sentence ``positions[j]``) and filler with spaces."""
    by_gap: dict[int, list[int]] = {}
    for j, pos in enumerate(positions):
        by_gap.setdefault(pos, []).append(j)
    pieces: list[tuple[str, int | None]] = []  # (text, fact index or None for filler)
    for gap in range(len(filler) + 1):
        pieces += [(facts[j].text, j) for j in by_gap.get(gap, [])]
        if gap < len(filler):
            pieces.append((filler[gap], None))
    parts, fact_spans, filler_spans, cursor = [], [], [], 0
    for text, fact_index in pieces:
        if parts:
            cursor += 1
        start, end = cursor, cursor + len(text)
        (filler_spans.append((start, end)) if fact_index is None else fact_spans.append((fact_index, start, end)))
        parts.append(text)
        cursor = end
    return " ".join(parts), tuple(fact_spans), tuple(filler_spans)


def _choose_count(counts: list[int], base: int, target: int) -> int:
    """Number k of sentences whose counts plus ``base`` come closest to ``target``."""
    total, k = base, 0
    while k < len(counts) and total + counts[k] <= target:
        total += counts[k]
        k += 1
    if k < len(counts) and (total + counts[k] - target) < (target - total):
        k += 1
    return k


def build_sample(story: Story, question_index: int, filler: Sequence[str], target_tokens: int,
                 count_tokens: CountTokens | None = None, seed: int = BABILONG_SEED,
                 sample_index: int | None = None, task: str | None = None) -> Sample:
    """The facts before question ``question_index`` of ``story``, scattered in ``filler``.

    Filler: consecutive sentences from a seeded start, as many as bring ``count_tokens(context)``
    closest to ``target_tokens`` (``0``: facts only, no filler). Facts: in order, at seeded gaps.
    """
    count = count_tokens or word_count_tokens
    question = story.questions[question_index]
    facts = story.facts[: question.position]
    rng = random.Random(seed)
    filler_start, chosen = 0, []
    if target_tokens > 0:
        base = count(" ".join(f.text for f in facts))
        # rough budget (1.3 tokens/word, 2x margin) so the start leaves enough book behind it
        need, acc, last_start = max(target_tokens - base, 0) * 2, 0.0, len(filler)
        while last_start > 0 and acc < need:
            last_start -= 1
            acc += 1.3 * len(filler[last_start].split())
        filler_start = rng.randrange(last_start + 1)
        counts: list[int] = []
        running = base
        for sentence in filler[filler_start:]:
            counts.append(count(sentence))
            running += counts[-1]
            if running > target_tokens * 1.5 + 200:
                break
        if running < 0.9 * target_tokens:
            raise ValueError(f"filler too short for {target_tokens} tokens ({running} from sentence {filler_start})")
        k = _choose_count(counts, base, target_tokens)
        # the counter need not be additive over pieces (joins, rounding): fold the measured
        # residual into the base and re-choose, a few rounds at most
        for _ in range(4):
            context, _, _ = _assemble(facts, filler[filler_start:filler_start + k], [0] * len(facts))
            k_new = _choose_count(counts, count(context) - sum(counts[:k]), target_tokens)
            if k_new == k:
                break
            k = k_new
        chosen = list(filler[filler_start:filler_start + k])
    positions = sorted(rng.randrange(len(chosen) + 1) for _ in facts)
    context, fact_spans, filler_spans = _assemble(facts, chosen, positions)
    return Sample(task=task or _task_of(story), story_index=story.index, question_index=question_index,
                  sample_index=sample_index, question=question.text, answer=question.answer, facts=tuple(facts),
                  context=context, fact_spans=fact_spans, filler_spans=filler_spans, target_tokens=target_tokens,
                  n_tokens=count(context), filler_start=filler_start, seed=seed, question_before=question.before)


# --------------------------------------------------------------------------- prompt

_SENTINEL = "\x00CONTEXT\x00"


def load_prompt_config(task_or_path: str | Path) -> dict[str, str]:
    """The official prompt pieces (instruction, examples, post_prompt, template) of qa2/qa3."""
    path = PROMPT_CONFIGS.get(str(task_or_path), task_or_path)
    config = json.loads(Path(path).read_text(encoding="utf-8"))
    return config.get("prompt", config)


def render_prompt(sample: Sample, config: dict[str, Any] | str | Path | None = None) -> tuple[str, int]:
    """Official BABILong prompt (template filled verbatim, then ``.strip()`` as upstream does).

    ``config``: a prompt config dict (the file's ``prompt`` object, or the whole file), a task
    name or a path; default: the official config of ``sample.task``. Returns the prompt text and
    the character offset of the context in it: ``text[offset + s:offset + e]`` is the span ``(s, e)``.
    """
    if config is None or isinstance(config, (str, Path)):
        config = load_prompt_config(config if config is not None else sample.task)
    config = config.get("prompt", config)
    text = config["template"].format(instruction=config["instruction"], examples=config["examples"],
                                     post_prompt=config["post_prompt"], context=_SENTINEL,
                                     question=sample.question).strip()
    offset = text.index(_SENTINEL)
    return text.replace(_SENTINEL, sample.context, 1), offset


def shift_spans(spans: Sequence[tuple[int, ...]], offset: int) -> list[tuple[int, ...]]:
    """Shift ``(start, end)`` or ``(index, start, end)`` spans by ``offset`` characters."""
    return [(*s[:-2], s[-2] + offset, s[-1] + offset) for s in spans]


# --------------------------------------------------------------------------- masks


def hidden_facts(sample: Sample, rule: str) -> list[int]:
    """Indices of the facts the naive or dependency rule does not keep (all are movements)."""
    keep = {"naive": naive_keep, "dependency": dependency_keep}[rule](sample.facts)
    return [i for i in range(len(sample.facts)) if i not in keep]


def _prefix_reaching(text: str, amount: int, count: CountTokens) -> int:
    """Length of the shortest word-boundary prefix of ``text`` with ``count(prefix) >= amount``."""
    ends = [m.end() for m in re.finditer(r"\S+", text)]
    lo, hi = 0, len(ends) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if count(text[:ends[mid]]) >= amount:
            hi = mid
        else:
            lo = mid + 1
    return ends[lo]


def mask_spans(sample: Sample, rule: str, count_tokens: CountTokens | None = None) -> list[Span]:
    """Context spans to hide under ``rule`` ("naive", "dependency" or "neutral"), in order.

    naive/dependency: the spans of the movement facts the rule does not keep. neutral: filler
    text only (never facts, never framing), from the first filler sentences of the context on,
    as much as the dependency rule hides: tokens under ``count_tokens`` (each span counted on its
    own) when given, else characters. The last sentence is cut at a word boundary (tokens) or at
    the exact character (characters). With too little filler (e.g. 0k), all filler is hidden.
    """
    if rule not in MASK_RULES:
        raise ValueError(f"unknown rule {rule!r}; choose from {MASK_RULES}")
    if rule != "neutral":
        spans = {i: (s, e) for i, s, e in sample.fact_spans}
        return [spans[i] for i in hidden_facts(sample, rule)]
    hidden = hidden_facts(sample, "dependency")
    measure = count_tokens or len
    remaining = sum(measure(sample.facts[i].text) for i in hidden)
    out: list[Span] = []
    for start, end in sample.filler_spans:
        if remaining <= 0:
            break
        size = measure(sample.context[start:end])
        if size <= remaining:
            out.append((start, end))
            remaining -= size
        elif count_tokens is None:
            out.append((start, start + remaining))
            remaining = 0
        else:
            out.append((start, start + _prefix_reaching(sample.context[start:end], remaining, count_tokens)))
            remaining = 0
    return out


def masked_amount(sample: Sample, spans: Sequence[Span], count_tokens: CountTokens | None = None) -> int:
    """Tokens (each span counted on its own) or characters hidden by ``spans``."""
    measure = count_tokens or len
    return sum(measure(sample.context[s:e]) for s, e in spans)


# --------------------------------------------------------------------------- sample sets


@lru_cache(maxsize=4)
def _stories(path: str) -> tuple[Story, ...]:
    return tuple(parse_babi(path))


def question_list(stories: Sequence[Story]) -> list[tuple[int, int]]:
    """``(story index, question index)`` of every question, in file order (upstream numbering)."""
    return [(s.index, j) for s in stories for j in range(len(s.questions))]


def test_100_pairs(task: str, stories: Sequence[Story]) -> list[tuple[int, int, int]]:
    """``(sample index, story index, question index)`` of the official 100 test indices."""
    indices = json.loads(TEST_IDXS["test"].read_text(encoding="utf-8"))[task]
    pairs = question_list(stories)
    return [(i, *pairs[i]) for i in indices]


def sample_seed(seed: int, task: str, sample_index: int) -> int:
    """Per-sample seed (independent of the length, so all lengths share the filler start)."""
    digest = hashlib.sha256(f"{seed}:{task}:{sample_index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def build_samples(task: str, lengths: Sequence[int] = (0, 1000, 2000, 4000), n: int | None = None,
                  seed: int = BABILONG_SEED, count_tokens: CountTokens | None = None,
                  filler: Sequence[str] | None = None, babi_path: str | Path | None = None) -> list[Sample]:
    """Samples of the official 100 test questions of ``task`` (the first ``n``), at every length.

    Ordered by question, then by length. Uses ``test_100_idxs.json`` (see the module docstring);
    if the file is missing, the first question of each of the first ``n`` stories.
    """
    if task not in BABI_FILES:
        raise ValueError(f"task must be one of {sorted(BABI_FILES)}")
    stories = _stories(str(babi_path or BABI_FILES[task]))
    if find("babilong")[0] is not None:
        chosen = test_100_pairs(task, stories)
    else:
        pairs = question_list(stories)
        chosen = [(pairs.index((s.index, 0)), s.index, 0) for s in stories]
    chosen = chosen[:n] if n is not None else chosen
    filler = filler if filler is not None else filler_sentences()
    return [build_sample(stories[story], q, filler, length, count_tokens, sample_seed(seed, task, index),
                         sample_index=index, task=task)
            for index, story, q in chosen for length in lengths]
