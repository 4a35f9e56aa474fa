"""The BABILong object-dependency study (paper partA section 2): four access policies per input.

Per case (one bAbI question at one context length) the official prompt up to
the question is prefilled once; then, under each policy, the question is asked
and a greedy answer generated:

* ``full``: full access;
* ``naive``: hide every movement but each person's last one;
* ``dependency``: also keep the movements that place pickups and drops and carry
  objects (verified symbolically: ``kvprobe babi-verify``);
* ``neutral``: hide as much filler text as the dependency rule hides facts
  (equal-token control when a token counter is used; never facts or framing).

Masks hide the spans' tokens from the question and every generated token
(kvprobe ``Mask``); the stored cache is never changed. Rows are graded with the
official-style location parser (question locations excluded, EOS required) and
the strict bare-location rule. The prompt is the official one, through the
model's chat template when it has one ([UNCLEAR] in the paper; an instruct
model then ends its answer with EOS, which the metric requires), as one user
message with no system prompt. The quick reproduction defaults (two lengths,
a budget of 40 new tokens) are our choice for a 2-core CPU; the paper used
8k/32k contexts and 128 tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import kvprobe
from kvprobe import decoding

from ..conditions import check_unchanged
from ..runner import study_parameters
from . import grading, samples

POLICIES = ("full", "naive", "dependency", "neutral")
#: Answer budget ([UNCLEAR] for small models; the paper used 128, the original ceiling is 20).
MAX_NEW_TOKENS = 40


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
class BabilongStudy:
    """BABILong qa2/qa3 under the four policies (runner protocol)."""

    tasks: tuple[str, ...] = ("qa2", "qa3")
    lengths: tuple[int, ...] = (0, 1000)
    n: int | None = 50
    seed: int = 20260913
    max_new_tokens: int = MAX_NEW_TOKENS
    chat: bool | None = None  # None: the chat template when the tokenizer has one (instruct models end with EOS)
    cases_per_batch: int = 4
    name: str = "babilong"
    _cases: list[BabilongCase] | None = field(default=None, repr=False, compare=False)

    def config(self) -> dict[str, Any]:
        cfg = study_parameters(self)
        cfg["policies"] = list(POLICIES)
        return cfg

    def cases(self) -> list[BabilongCase]:
        if self._cases is None:
            out = []
            for task in self.tasks:
                out += [BabilongCase(s) for s in samples.build_samples(task, self.lengths, self.n, self.seed)]
            self._cases = out
        return self._cases

    def run_cases(self, model: kvprobe.Model, cases: list[BabilongCase]) -> list[list[dict[str, Any]]]:
        """Every (case, policy) row of a batch in one ``decoding.answer`` call."""
        items, prepared = [], []
        for case in cases:
            history, question, conditions = self.prepare(model, case)
            prepared.append((case, history, conditions))
            items += [(history, kvprobe.Request(question, c)) for c in conditions.values()]
        answers = iter(decoding.answer(model, items, max_new_tokens=self.max_new_tokens))
        out = []
        for case, history, conditions in prepared:
            out.append([self._row(case, history, name, cond, next(answers).generation)
                        for name, cond in conditions.items()])
            check_unchanged(history, case.case_id)
        return out

    def prepare(self, model: kvprobe.Model, case: BabilongCase) -> tuple[kvprobe.History, str, dict[str, Any]]:
        """Prefill the official prompt up to the question; the question suffix; the four policies."""
        s = case.sample
        text, offset = samples.render_prompt(s)
        before = text[:offset]
        after = text[offset + len(s.context):]
        marker = "Question: "
        cut = after.rindex(marker)
        chat = self.chat if self.chat is not None else getattr(model.tokenizer, "chat_template", None) is not None
        prompt = kvprobe.Prompt([("before", before), ("context", s.context)], chat=chat, sep="",
                                question_sep=after[:cut] + marker, raw_suffix="\n")
        history = model.prefill(prompt)
        conditions: dict[str, Any] = {"full": kvprobe.Full()}
        count = samples.tokenizer_counter(model.tokenizer)  # the neutral mask matches tokens, not characters
        for rule in POLICIES[1:]:
            spans = [history.span("context", chars=_trim(s.context, a, b))
                     for a, b in samples.mask_spans(s, rule, count_tokens=count) if s.context[a:b].strip()]
            conditions[rule] = kvprobe.Mask(spans, name=rule) if spans else kvprobe.Full(name=rule)
        return history, s.question, conditions

    def _row(self, case: BabilongCase, history: kvprobe.History, name: str, condition: Any,
             generation: decoding.Generation) -> dict[str, Any]:
        s = case.sample
        eos = generation.stop_reason == "eos"
        spans = getattr(condition, "spans", ())
        return {
            "case_id": case.case_id,
            "group": case.group,
            "task": s.task,
            "length": s.target_tokens,
            "story": s.story_index,
            "question": s.question,
            "answer": s.answer,
            "condition": name,
            "history_tokens": len(history),
            "masked_tokens": sum(len(x) for x in spans),
            "prompt_sha256": history.rendered.sha256,
            "output": generation.text,
            "stop_reason": generation.stop_reason,
            "output_tokens": generation.n_tokens,
            "official": grading.official_correct(generation.text, s.answer, s.question, eos),
            "official_no_eos": grading.official_correct(generation.text, s.answer, s.question, eos,
                                                        require_eos=False),
            "strict": grading.strict_correct(generation.text, s.answer, eos),
        }


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """The span without leading or trailing whitespace (token boundaries fall before spaces)."""
    piece = text[start:end]
    return start + (len(piece) - len(piece.lstrip())), end - (len(piece) - len(piece.rstrip()))
