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
warning. Answers are graded by normalized exact match to the answer or an
alias with EOS; the historical question's retained-text stratum is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import kvprobe
from kvprobe import decoding

from ..conditions import check_unchanged, supported
from ..runner import study_parameters
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
class MQuAKEStudy:
    """Generated fictional MQuAKE cases under the seven policies (runner protocol)."""

    hops: tuple[int, ...] = (2, 3, 4)
    n_per_hop: int = 20
    seed: int = 20260912
    max_new_tokens: int = MAX_NEW_TOKENS
    chat: bool | None = None  # None: the chat template when the tokenizer has one
    cases_per_batch: int = 2
    name: str = "mquake"
    _cases: list[MQuAKEStudyCase] | None = field(default=None, repr=False, compare=False)

    def config(self) -> dict[str, Any]:
        cfg = study_parameters(self)
        cfg["policies"] = list(POLICIES)
        return cfg

    def cases(self) -> list[MQuAKEStudyCase]:
        if self._cases is None:
            self._cases = [MQuAKEStudyCase(c) for c in generate_cases({h: self.n_per_hop for h in self.hops},
                                                                        seed=self.seed)]
        return self._cases

    def prepare(self, model: kvprobe.Model, case: MQuAKEStudyCase) -> tuple[kvprobe.History, dict[str, Any]]:
        """Prefill the history; the policies that apply to this model."""
        from kvprobe.interventions import Compact, OnlineMask, Rebuild, TextRecompute

        segments = build_history(case.case)
        chat = self.chat if self.chat is not None else getattr(model.tokenizer, "chat_template", None) is not None
        history = model.prefill(kvprobe.Prompt(segments, chat=chat, sep="\n"))
        sources = source_segments(case.case)
        source_spans = [history.span(name) for name in sources]
        values = [history.span(name, chars=(a, b)) for name, a, b in value_spans(case.case)]
        first_update = next(name for name, _ in segments if name.startswith("update:"))
        candidates = {
            "full": kvprobe.Full(),
            "value-mask": kvprobe.Mask(values, name="value-mask"),
            "source-mask": kvprobe.Mask(source_spans, name="source-mask"),
            "recompute": TextRecompute(sources),
            "online-mask": OnlineMask(source_spans, history.span(first_update)),
            "rebuild": Rebuild(source_spans),
            "compact": Compact(source_spans),
        }
        return history, {name: kvprobe.Prepared.of(model, history, condition)
                         for name, condition in supported(self.name, history, candidates).items()}

    def run_cases(self, model: kvprobe.Model, cases: list[MQuAKEStudyCase]) -> list[list[dict[str, Any]]]:
        """Every (case, question, policy) row of a batch in one ``decoding.answer`` call."""
        prepared, items = [], []
        for case in cases:
            history, conditions = self.prepare(model, case)
            asked = questions(case.case)
            prepared.append((case, history, conditions, asked))
            items += [(history, kvprobe.Request(text, c)) for _, text, _ in asked for c in conditions.values()]
        answers = iter(decoding.answer(model, items, max_new_tokens=self.max_new_tokens))
        out = []
        for case, history, conditions, asked in prepared:
            retained = retained_text(case.case, [n for n, _ in build_history(case.case)
                                                 if n not in source_segments(case.case)])
            rows = []
            for index, (kind, text, gold) in enumerate(asked):
                for name in conditions:
                    g = next(answers).generation
                    rows.append({
                        "case_id": case.case_id, "hops": case.case.hops, "question_kind": kind,
                        "question_index": index, "condition": name, "question": text, "answers": gold,
                        "history_tokens": len(history), "prompt_sha256": history.rendered.sha256,
                        "output": g.text, "stop_reason": g.stop_reason, "output_tokens": g.n_tokens,
                        "em": normalized_exact_match(g.text, gold, g.stop_reason == "eos"),
                        "contains": contains_answer(g.text, gold), "retained_text": retained,
                    })
            check_unchanged(history, case.case_id)
            out.append(rows)
        return out
