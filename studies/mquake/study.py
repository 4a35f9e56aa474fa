"""The contextual MQuAKE study (paper partA section 1b): multi-hop questions after in-context updates.

Per case the history (earlier relations, remaining links, later updates; see
``history.py``) is prefilled once. Every question (three current paraphrases,
the historical question, the single-hop question) is answered greedily under
each policy:

* ``full``: full access;
* ``value-mask``: hide the old target strings in the superseded records;
* ``source-mask``: hide the superseded records;
* ``recompute``: delete the superseded records' text and prefill again;
* ``online-mask``: hide the superseded records from every token after the first update;
* ``rebuild``: recompute every state from the first superseded record on, with the records hidden;
* ``compact``: delete the superseded records' rows and re-rotate later keys.

Operations a model cannot support (compaction on hybrids) are left out with a
warning. Every (case, question, policy) row of a batch of cases is answered in
one ``decoding.answer`` call; the run loop (prefill, preparing each policy once
per case, the common row columns, the unchanged-cache check) is the protocol's
(``studies.protocol.HistoryStudy``). The row's ``query`` is the question's kind
(``current``, ``historical``, ``single_hop``). Answers are graded by normalized
exact match to the answer or an alias with EOS; the historical question's
retained-text stratum is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.readouts.stats import MQUAKE_SEED
from kvprobe.studies.protocol import CaseRun, HistoryStudy, Question, require_at_least, use_chat
from kvprobe.studies.runner import study_parameters
from .generate import generate_cases
from .history import build_history, contains_answer, normalized_exact_match, questions, retained_text, \
    source_segments, value_spans
from .schema import MQuAKECase

POLICIES = ("full", "value-mask", "source-mask", "recompute", "online-mask", "rebuild", "compact")
#: Answer budget ([UNCLEAR] in the paper; the 40 tokens of its other generation studies).
MAX_NEW_TOKENS = 40


@dataclass(frozen=True)
class MQuAKEStudyCase:
    case: MQuAKECase

    @property
    def case_id(self) -> str:
        return f"mq-{self.case.case_id}"


@dataclass
class MQuAKEStudy(HistoryStudy):
    """Generated fictional MQuAKE cases under the seven policies (five questions per case)."""

    name: ClassVar[str] = "mquake"
    #: Hop counts of the generated cases (the paper: 2, 3 and 4).
    hops: tuple[int, ...] = (2, 3, 4)
    #: Generated cases per hop count.
    n_per_hop: int = 20
    #: Generator seed of the fictional world and its cases.
    seed: int = MQUAKE_SEED
    #: Greedy answer budget in tokens ([UNCLEAR] in the paper; the 40 of its other generation studies).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Cases answered in one batch.
    cases_per_batch: int = 2
    _cases: list[MQuAKEStudyCase] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.hops = tuple(self.hops)
        require_at_least(self, hops=1, n_per_hop=1, max_new_tokens=1, cases_per_batch=1)

    def config(self) -> dict[str, Any]:
        cfg = study_parameters(self)
        cfg["policies"] = list(POLICIES)
        return cfg

    def cases(self) -> list[MQuAKEStudyCase]:
        if self._cases is None:
            self._cases = [MQuAKEStudyCase(c) for c in generate_cases({h: self.n_per_hop for h in self.hops},
                                                                        seed=self.seed)]
        return self._cases

    def group(self, case: MQuAKEStudyCase) -> str:
        """The bootstrap unit: the case (its paraphrases stay together)."""
        return case.case_id

    def prompt(self, model: kvprobe.Model, case: MQuAKEStudyCase) -> kvprobe.Prompt:
        """The history: earlier relations, remaining links, later updates (``history.py``)."""
        chat = use_chat(model.tokenizer, self.chat)
        return kvprobe.Prompt(build_history(case.case), chat=chat, sep="\n")

    def questions(self, model: kvprobe.Model, case: MQuAKEStudyCase, history: kvprobe.History) -> list[Question]:
        """Three current paraphrases, the historical question, the single-hop question; ``info``: (index, gold)."""
        return [Question(kind, text, None, (index, gold))
                for index, (kind, text, gold) in enumerate(questions(case.case))]

    def conditions(self, model: kvprobe.Model, case: MQuAKEStudyCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Access]:
        """The seven policies on the superseded records (unsupported ones are left out by the protocol)."""
        from kvprobe.interventions import Compact, OnlineMask, Rebuild, TextRecompute

        segments = build_history(case.case)
        sources = source_segments(case.case)
        source_spans = [history.span(name) for name in sources]
        values = [history.span(name, chars=(a, b)) for name, a, b in value_spans(case.case)]
        first_update = next(name for name, _ in segments if name.startswith("update:"))
        return {
            "full": kvprobe.Full(),
            "value-mask": kvprobe.Mask(values, name="value-mask"),
            "source-mask": kvprobe.Mask(source_spans, name="source-mask"),
            "recompute": TextRecompute(sources),
            "online-mask": OnlineMask(source_spans, history.span(first_update)),
            "rebuild": Rebuild(source_spans),
            "compact": Compact(source_spans),
        }

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        case = run.case.case
        sources = source_segments(case)
        run.extra["retained_text"] = retained_text(case, [n for n, _ in build_history(case) if n not in sources])

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        g = answers[condition].generation
        index, gold = question.info
        return {
            "hops": run.case.case.hops, "question_index": index, "question": question.text, "answers": gold,
            "em": normalized_exact_match(g.text, gold, g.stop_reason == "eos"),
            "contains": contains_answer(g.text, gold), "retained_text": run.extra["retained_text"],
        }
