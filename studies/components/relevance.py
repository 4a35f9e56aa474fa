"""Question-relevance signals on the controlled histories (paper appendix "Attention, Lexical Relevance,
and Leave-One-Out Signals", seed L2265-2311; spec partB section 2).

The component study's clusters and protocol (``History:`` ... ``Reasoning:``, exactly ``budget``
greedy tokens, ``Answer:``, both options scored) under two conditions, ``none`` and ``mask-old``,
with three signals per (cluster, state, query):

* ``lexical``: overlap of the query's words with the old record's words (Jaccard of case-folded
  word sets; [UNCLEAR] in the paper, ours);
* ``attention_old``: attention to the old source under full access: the attention probability
  mass on the old record's tokens from the last token before the options (the answer cue's last
  token), averaged over heads and attention layers ([UNCLEAR] head/query-token pooling, ours);
* ``loo``: the signed leave-one-out score ``M(mask-old) - M(none)``, ``M = log p(expected) - log
  p(alternative)`` (computed in the summary from the two rows).

The summary reports each signal's replacement AUC (SUPERSEDED above CURRENT, target queries) and
its question relevance (the fraction of cluster states whose target query scores higher than the
unrelated query; ``loo`` by its magnitude). The paper uses budgets 8, 32 and 128: one run per
budget, compared with ``kvprobe report question-relevance RUN RUN RUN --out DIR``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import torch

import kvprobe
from kvprobe import decoding
from kvprobe.engine import ForwardOutput, Rows
from kvprobe.studies.common.protocol import CaseRun, Question
from . import strings
from .study import ComponentCase, ComponentStudy, conditions_for

#: The two conditions the signals need (names as in the component study).
RELEVANCE_CONDITIONS = ("none", "mask-old")
_WORD = re.compile(r"\w+")


def lexical_overlap(question: str, record: str) -> float:
    """Jaccard overlap of the case-folded word sets of a question and a record.

    Example: ``lexical_overlap("Where is Kor now?", "Kor is in Ask.")`` is 2/6 (``is``, ``kor`` of six words).
    """
    a, b = set(_WORD.findall(question.casefold())), set(_WORD.findall(record.casefold()))
    return len(a & b) / len(a | b) if a | b else 0.0


def attention_mass(out: ForwardOutput, rows: Rows, row: int, span: kvprobe.TokenSpan) -> float:
    """Attention probability from the block's last token to the history positions of ``span``,
    summed over the span, averaged over heads and the captured layers."""
    slots = rows.key_valid[row] & (rows.key_pos[row] >= span.start) & (rows.key_pos[row] < span.end)
    masses = [float(attn[row, :, -1, : slots.shape[0]][:, slots].sum(dim=-1).mean()) for attn in out.attention.values()]
    return sum(masses) / len(masses)


@dataclass(frozen=True)
class CueAnswer(decoding.Answer):
    """An answer with the attention its answer cue's last token paid to the old record (:func:`attention_mass`;
    None: not read, as under ``mask-old``)."""

    attention_old: float | None = None


@dataclass
class RelevanceStudy(ComponentStudy):
    """The controlled clusters under no intervention and the old-record mask, with the attention signal."""

    name: ClassVar[str] = "question-relevance"

    def config_extra(self) -> dict[str, Any]:
        return {**super().config_extra(), "conditions": list(RELEVANCE_CONDITIONS)}

    def conditions(self, model: kvprobe.Model, case: ComponentCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        every = conditions_for(history, self.control_skip)[0]
        return {name: every[name] for name in RELEVANCE_CONDITIONS}

    def answer(self, model: kvprobe.Model, items: Sequence[tuple[kvprobe.History, kvprobe.Request]],
               candidates: Sequence[Sequence[str]] | None) -> list[CueAnswer]:
        """The component study's answer call, each ``none`` answer with the attention to the old record."""
        if not items:
            return []
        attention: dict[int, float] = {}

        def read(group: list[int], rows: Rows, out: ForwardOutput) -> None:
            for r, i in enumerate(group):
                history, request = items[i]
                if request.access.name == "none":
                    attention[i] = attention_mass(out, rows, r, history.span("old"))

        answered = decoding.reason_then_score(model, items, candidates, self.budget, strings.ANSWER_CUE,
                                              capture_attention=model.arch.attention_layers, on_cue=read)
        return [CueAnswer(scores, generation, attention.get(i)) for i, (generation, scores) in enumerate(answered)]

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        out = super().row(run, question, condition, answers)
        old = dict(run.case.cluster.segments(run.case.state))["old"]
        out["lexical"] = lexical_overlap(question.text, old)
        out["attention_old"] = answers[condition].attention_old
        return out
