"""The contextual MQuAKE study (paper partA section 1b): multi-hop questions after in-context updates.

Per case the history (earlier relations, remaining links, later updates; see
``history.py``) is prefilled once. Every question (three current paraphrases,
the historical question, the single-hop question) is answered greedily under
each condition (the paper's policies):

* ``full``: full access;
* ``value-mask``: hide the old target strings in the superseded records;
* ``source-mask``: hide the superseded records;
* ``recompute``: delete the superseded records' text and prefill again;
* ``online-mask``: hide each superseded record from every token after its own update;
* ``rebuild``: recompute every state from the first superseded record on, with the records hidden;
* ``compact``: delete the superseded records' rows and re-rotate later keys;
* ``no-context`` (``--no-context``): the question with the same chat framing and no history
  (weights only; ``studies/common/no_context.py``), the paper's baseline of app:v52_weights.

Cases are generated fictional ones (``datasets/mquake/generate.py``, the offline default) or the
paper's sample of a released file (``--source MQuAKE-CF-3k-v2.json``, the repository's folder or an
``hf:`` copy: 200 cases per hop count h drawn with seed 20260920 + h, ``data.py``). Every question carries the
boxed-answer instruction (``strings.BOXED_INSTRUCTION``) unless ``--no-boxed``.

Operations a model cannot support (compaction on hybrids) are left out with a
warning. Every (case, question, condition) row of a batch of cases is answered in
one ``decoding.answer`` call; the run loop (prefill, preparing each condition once
per case, the common row columns, the unchanged-cache check) is the protocol's
(``studies.common.protocol.HistoryStudy``). The row's ``query`` is the question's kind
(``current``, ``historical``, ``single_hop``). Answers are graded by normalized
exact match to the answer or an alias with EOS (``em``; ``em_strict_boxed`` accepts only
the boxed content); the historical question's retained-text stratum is recorded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.published_data import MissingExtraError
from .data import MQUAKE_SAMPLE_SEED
from kvprobe.studies.datasets.mquake.generate import MQUAKE_SEED
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.protocol import CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least, use_chat
from kvprobe.studies.common.no_context import NO_CONTEXT, NoContext
from . import strings
from kvprobe.studies.datasets.mquake.generate import dataset_hash, generate_cases
from .history import build_history, grade, online_pairs, questions, retained_text, source_segments, value_spans
from .data import sample_released
from kvprobe.studies.datasets.mquake.schema import MQuAKECase, MQuAKEFormatError

#: The condition set: the paper's seven policies (the no-context baseline is added by ``--no-context``).
CONDITIONS = ("full", "value-mask", "source-mask", "recompute", "online-mask", "rebuild", "compact")
#: Answer budget (paper L1408-1409: "a 128-token answer ceiling").
MAX_NEW_TOKENS = 128
#: Cases per hop count (paper L1376: 200).
N_PER_HOP = 200
#: ``--source`` value for the generated fictional cases.
GENERATED = "generated"


@dataclass(frozen=True)
class MQuAKEStudyCase:
    case: MQuAKECase

    @property
    def case_id(self) -> str:
        return f"mq-{self.case.case_id}"


@dataclass
class MQuAKEStudy(HistoryStudy):
    """MQuAKE cases (generated, or sampled from a released file) under the seven conditions, five questions each."""

    name: ClassVar[str] = "mquake"
    #: "generated" (fictional cases in the released schema, offline), or a released MQuAKE JSON file such as
    #: MQuAKE-CF-3k-v2.json (the paper's data), the princeton-nlp/MQuAKE folder (its datasets/MQuAKE-CF-3k-v2.json),
    #: or a Hugging Face copy hf:OWNER/NAME[:FILE] (needs kvprobe[data]).
    source: str = GENERATED
    #: Hop counts (the paper: 2, 3 and 4).
    hops: tuple[int, ...] = (2, 3, 4)
    #: Cases per hop count (the paper: 200).
    n_per_hop: int = N_PER_HOP
    #: Generator seed of the fictional world and its cases (generated cases only).
    seed: int = MQUAKE_SEED
    #: Sample seed of a released file: hop count h is drawn with this seed + h (the paper: 20260920 + h).
    sample_seed: int = MQUAKE_SAMPLE_SEED
    #: Greedy answer budget in tokens (the paper: 128).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Append the boxed-answer instruction to every question (the paper keeps it).
    boxed: bool = True
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Cases answered in one batch.
    cases_per_batch: int = 2
    #: Also answer every question with no history (weights only; the paper's no-context baseline, whose
    #: wrong answers condition the report's no-context table).
    no_context: bool = False

    def __post_init__(self) -> None:
        self.hops = tuple(self.hops)
        require_at_least(self, hops=1, n_per_hop=1, max_new_tokens=1, cases_per_batch=1)
        if self.source != GENERATED:
            try:  # read and sample the file now, so a bad file fails before any model loads
                self.cases()
            except (OSError, MissingExtraError, MQuAKEFormatError) as e:
                raise InvalidParameter("source", str(e)) from e

    def make_cases(self) -> list[MQuAKEStudyCase]:
        """The generated cases, or the paper's sample of the released file, per hop count."""
        chosen = (generate_cases({h: self.n_per_hop for h in self.hops}, seed=self.seed)
                  if self.source == GENERATED else
                  sample_released(self.source, self.hops, self.n_per_hop, seed=self.sample_seed))
        return [MQuAKEStudyCase(c) for c in chosen]

    def data_sha256(self) -> str:
        """The digest of the cases run (``datasets.mquake.generate.dataset_hash``)."""
        return dataset_hash([c.case for c in self.cases()])

    def config_extra(self) -> dict[str, Any]:
        """The conditions run (``policies``, the paper's word) and the boxed-answer instruction."""
        return {"policies": list(CONDITIONS) + ([NO_CONTEXT] if self.no_context else []),
                "boxed_instruction": strings.BOXED_INSTRUCTION if self.boxed else None}

    def group(self, case: MQuAKEStudyCase) -> str:
        """The bootstrap unit: the case (its paraphrases stay together)."""
        return case.case_id

    def prompt(self, model: kvprobe.Model, case: MQuAKEStudyCase) -> kvprobe.Prompt:
        """The history: earlier relations, remaining links, later updates (``history.py``)."""
        chat = use_chat(model.tokenizer, self.chat)
        return study_prompt(build_history(case.case), chat=chat, sep="\n")

    def questions(self, model: kvprobe.Model, case: MQuAKEStudyCase, history: kvprobe.History) -> list[Question]:
        """Three current paraphrases, the historical question, the single-hop question; ``info``: (index, gold).

        Each carries the boxed-answer instruction unless ``boxed`` is off.
        """
        suffix = strings.QUESTION_JOINER + strings.BOXED_INSTRUCTION if self.boxed else ""
        return [Question(kind, text + suffix, None, (index, gold))
                for index, (kind, text, gold) in enumerate(questions(case.case))]

    def conditions(self, model: kvprobe.Model, case: MQuAKEStudyCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        """The seven conditions on the superseded records (unsupported ones are left out by the protocol), and the
        no-context baseline when asked for."""
        from kvprobe.interventions import Compact, OnlineMask, Rebuild, TextRecompute

        sources = source_segments(case.case)
        source_spans = [history.span(name) for name in sources]
        values = [history.span(name, chars=(a, b)) for name, a, b in value_spans(case.case)]
        pairs = online_pairs(case.case)
        conditions = {
            "full": kvprobe.Full(),
            "value-mask": kvprobe.Mask(values, name="value-mask"),
            "source-mask": kvprobe.Mask(source_spans, name="source-mask"),
            "recompute": TextRecompute(sources),
            "online-mask": OnlineMask([history.span(old) for old, _ in pairs],
                                      [history.span(new) for _, new in pairs]),
            "rebuild": Rebuild(source_spans),
            "compact": Compact(source_spans),
        }
        if self.no_context:
            conditions[NO_CONTEXT] = NoContext()
        return conditions

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        case = run.case.case
        sources = source_segments(case)
        run.extra["retained_text"] = retained_text(case, [n for n, _ in build_history(case) if n not in sources])

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        g = answers[condition].generation
        index, gold = question.info
        eos = g.stop_reason == "eos"
        return {
            "hops": run.case.case.hops, "edits": len(run.case.case.requested_rewrite), "question_index": index,
            "question": question.text, "answers": gold, **grade(g.text, gold, eos),
            "retained_text": run.extra["retained_text"],
        }


#: The row columns :func:`grade` writes (recomputed by :func:`regrade_row`).
GRADE_COLUMNS = ("em", "em_strict_boxed", "contains")


def regrade_row(row: dict[str, Any]) -> dict[str, Any]:
    r"""A stored row with its grade columns recomputed from its output, answers and stop reason (grading does not
    depend on generation, so a committed run follows a changed rule without a new model run).

    >>> regrade_row({"output": r"\boxed{Paris}", "answers": ["Paris"], "stop_reason": "eos"})["contains"]
    True
    """
    return {**row, **grade(row["output"], row["answers"], row["stop_reason"] == "eos")}


if __name__ == "__main__":  # pragma: no cover - the regrade of committed runs after a grading change
    import sys

    from kvprobe.studies.common.runner import regrade_results

    for run_dir in sys.argv[1:]:
        print(run_dir, regrade_results(run_dir, regrade_row), "rows changed")
