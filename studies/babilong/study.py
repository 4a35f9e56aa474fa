"""The BABILong object-dependency study (paper partA section 2, app:v41_babilong): seven conditions per input.

Per case (one bAbI question at one context length) the official prompt up to
the question is prefilled once; then, under each condition, the question is asked
and a greedy answer generated:

* ``full``: full access;
* ``naive``: hide every movement but each person's last one;
* ``dependency``: also keep the movements that place pickups and drops and carry
  objects (verified symbolically: ``kvprobe babi-verify``);
* ``neutral``: hide as much filler text as the dependency rule hides facts
  (equal-token control; never facts or framing);
* ``quest``, ``finch``, ``refreshkv``: the query-aware methods at a fixed capacity
  of 512 tokens at every length (paper L1490-1494), with the schedules of
  app:v41_dynamic (``studies.common.conditions.query_aware_condition``).

Masks hide the spans' tokens from the question and every generated token
(kvprobe ``Mask``); the stored cache is never changed. The run loop (prefill,
one batched ``decoding.answer`` call per batch of cases, the common row
columns, the unchanged-cache check) is the protocol's
(``studies.common.protocol.HistoryStudy``). Rows are graded with the official-style
location parser (question locations excluded, EOS required) and the strict
bare-location rule; answers stopped by the ceiling are recorded (``stop_reason``).
The prompt is the official one, through the model's chat template when it has
one ([UNCLEAR] in the paper; an instruct model then ends its answer with EOS,
which the metric requires), as one user message with no system prompt. Answers
get the paper's 128 new tokens (L1497).

Inputs are the published samples (``--source hf:RMT-team/babilong`` or a folder in the published form:
records ``input``/``question``/``target`` per length and task, ``data.py``) or, offline, our
reconstruction from the bAbI test release and PG-19 text (``samples.py``; labelled
``generated`` in the config and report). A case whose prompt, question and answer
budget do not fit the model's positions is refused (no RoPE extension, as in the paper).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.published_data import MissingExtraError
from .samples import BABILONG_SEED
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.protocol import (CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least,
                                      require_choices, require_fits, use_chat)
from kvprobe.studies.common.conditions import query_aware_condition
from . import grading, data, samples

#: Mask conditions (full access, the fact rules and their equal-token control), then the query-aware methods: the
#: condition set (the paper's seven policies).
MASK_CONDITIONS = ("full", "naive", "dependency", "neutral")
QUERY_AWARE = ("quest", "finch", "refreshkv")
CONDITIONS = MASK_CONDITIONS + QUERY_AWARE
#: The query-aware methods' fixed capacity at both lengths (paper L1491: "a fixed 512-token capacity").
CAPACITY = 512
#: Tokens allowed for the chat template around the question when checking that a case fits the model.
FRAMING_TOKENS = 32
#: ``--source`` value of the offline reconstruction from bAbI + PG-19.
GENERATED = "generated"
#: Answer budget (the paper: 128 tokens, L1490, rather than BABILong's original 20).
MAX_NEW_TOKENS = 128
#: The row's ``query``: every case asks its one bAbI question.
QUERY = "question"


@dataclass(frozen=True)
class BabilongCase:
    """One input: a sample (story facts among filler at a target length)."""

    sample: samples.Sample

    @property
    def case_id(self) -> str:
        s = self.sample
        return f"{s.task}-q{s.sample_index}-{s.target_tokens}"

    @property
    def group(self) -> str:
        """The bootstrap cluster: the source story."""
        return f"{self.sample.task}-story{self.sample.story_index}"


@dataclass
class BabilongStudy(HistoryStudy):
    """BABILong qa2/qa3 under the seven conditions (one question per case, one row per condition)."""

    name: ClassVar[str] = "babilong"
    #: bAbI tasks to run: qa2 (two supporting facts) and/or qa3 (three supporting facts).
    tasks: tuple[str, ...] = ("qa2", "qa3")
    #: "generated" (facts among PG-19 text, offline), or the published samples (the paper's data): hf:RMT-team/babilong
    #: (needs kvprobe[data]) or a folder laid out as the dataset repository (data/<task>/<length>.json) or as an
    #: export per length and task (<length>/<task>.jsonl), records input/question/target.
    source: str = GENERATED
    #: Generated inputs: target context lengths in estimated tokens (0: the story facts alone).
    lengths: tuple[int, ...] = (0, 1000)
    #: Published inputs: the release's length names to read (the paper: 8k and 32k).
    released_lengths: tuple[str, ...] = ("8k", "32k")
    #: Conditions to run (default all seven; full is always run, as every change is paired with it).
    condition_set: tuple[str, ...] = CONDITIONS
    #: Capacity in tokens of Quest, FINCH and RefreshKV (the paper: 512 at every length).
    capacity: int = CAPACITY
    #: Run the first N of the official 100 test questions of each task (None: all).
    n: int | None = 50
    #: Seed of the filler text around the story facts.
    seed: int = BABILONG_SEED
    #: Greedy answer budget in tokens (the paper: 128).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the chat template (auto: when the tokenizer has one; instruct models then end with EOS).
    chat: bool | None = None
    #: Cases answered in one batch.
    cases_per_batch: int = 4

    def __post_init__(self) -> None:
        self.tasks, self.lengths = tuple(self.tasks), tuple(self.lengths)
        self.released_lengths = tuple(self.released_lengths)
        self.condition_set = ("full", *[c for c in CONDITIONS if c in self.condition_set and c != "full"])
        lengths = "lengths" if self.source == GENERATED else "released_lengths"
        if not self.tasks or not getattr(self, lengths):
            raise InvalidParameter("tasks" if not self.tasks else lengths, "give at least one")
        require_choices(self, tasks=tuple(samples.BABI_FILES), condition_set=CONDITIONS)
        require_at_least(self, lengths=0, n=1, max_new_tokens=1, cases_per_batch=1, capacity=1)
        if self.source != GENERATED:
            require_choices(self, released_lengths=data.RELEASED_LENGTHS)
            try:  # read and match the files now, so a bad file fails before any model loads
                self.cases()
            except (OSError, MissingExtraError, data.BabilongFormatError) as e:
                raise InvalidParameter("source", str(e)) from e

    def make_cases(self) -> list[BabilongCase]:
        """The samples of every task: generated at each length, or read from the published files."""
        out = []
        for task in self.tasks:
            if self.source == GENERATED:
                chosen = samples.build_samples(task, self.lengths, self.n, self.seed)
            else:
                chosen = [s for length in self.released_lengths
                          for s in data.load_released(self.source, task, length, self.n)]
            out += [BabilongCase(s) for s in chosen]
        return out

    def prompt(self, model: kvprobe.Model, case: BabilongCase) -> kvprobe.Prompt:
        """The official prompt up to the question (one user message; the question is the suffix)."""
        s = case.sample
        text, offset = samples.render_prompt(s)
        before = text[:offset]
        after = text[offset + len(s.context):]
        marker = "Question: "
        cut = after.rindex(marker)
        chat = use_chat(model.tokenizer, self.chat)
        return study_prompt([("before", before), ("context", s.context)], chat=chat, sep="",
                            question_sep=after[:cut] + marker, raw_suffix="\n")

    def questions(self, model: kvprobe.Model, case: BabilongCase, history: kvprobe.History) -> list[Question]:
        """The bAbI question, once its prompt, question and answer budget are known to fit the model."""
        question = Question(QUERY, case.sample.question)
        self._require_fits(model, case, len(history))
        return [question]

    def _require_fits(self, model: kvprobe.Model, case: BabilongCase, history_tokens: int) -> None:
        require_fits(model, case.case_id, history_tokens, [case.sample.question], self.max_new_tokens, FRAMING_TOKENS,
                     "lengths" if self.source == GENERATED else "released_lengths", "; use a shorter length")

    def preflight(self, model: kvprobe.Model, cases: list[BabilongCase]) -> None:
        """Every case's window check (as :meth:`questions` makes it) on its tokenized prompt, before the run
        writes anything."""
        if model.context_length is None:
            return
        for case in cases:
            self._require_fits(model, case, len(model.tokenize(self.prompt(model, case))[1]))

    def conditions(self, model: kvprobe.Model, case: BabilongCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        """Full access, the masks of the naive, dependency and neutral rules, and the query-aware methods."""
        s = case.sample
        conditions: dict[str, kvprobe.Condition] = {"full": kvprobe.Full()}
        count = samples.tokenizer_counter(model.tokenizer)  # the neutral mask matches tokens, not characters
        for rule in [c for c in MASK_CONDITIONS[1:] if c in self.condition_set]:
            spans = [history.span("context", chars=_trim(s.context, a, b))
                     for a, b in samples.mask_spans(s, rule, count_tokens=count) if s.context[a:b].strip()]
            conditions[rule] = kvprobe.Mask(spans, name=rule) if spans else kvprobe.Full(name=rule)
        for method in [c for c in QUERY_AWARE if c in self.condition_set]:
            conditions[method] = query_aware_condition(method, self.capacity)
        return conditions

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        s = run.case.sample
        generation = answers[condition].generation
        eos = generation.stop_reason == "eos"
        return {
            "task": s.task,
            "length": s.target_tokens,
            "story": s.story_index,
            "question": s.question,
            "answer": s.answer,
            "masked_tokens": sum(len(x) for x in getattr(run.originals[condition], "spans", ())),
            "capacity": self.capacity if condition in QUERY_AWARE else None,
            "official": grading.official_correct(generation.text, s.answer, s.question, eos),
            "official_no_eos": grading.official_correct(generation.text, s.answer, s.question, eos,
                                                        require_eos=False),
            "strict": grading.strict_correct(generation.text, s.answer, eos),
        }


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """The span without leading or trailing whitespace (token boundaries fall before spaces)."""
    piece = text[start:end]
    return start + (len(piece) - len(piece.lstrip())), end - (len(piece) - len(piece.rstrip()))
