"""The FactConsolidation study (paper app:v43_mab and app:v45_mab_analysis; spec partA section 3).

A case is one history (a context of numbered facts and every single- and multi-hop question asked
of it). The history is prefilled once; each operation is prepared once per history (text recompute
prefills the edited text once) and every question is answered greedily under each:

* ``full``: full access;
* ``source``: hide every superseded fact sentence (:mod:`mapping`: the latest conflicting fact wins);
* ``value``: hide only the superseded facts' old object strings;
* ``recompute``: delete the superseded sentences and prefill the retained text again.

The history and the recompute are prefilled in ``prefill_chunk``-token chunks (the paper's 128; the engine is
exact, so another size gives the same cache up to float rounding). ``exposed_questions`` names questions seen
while qualifying the run: they stay in every analysis and :mod:`summary` adds a sensitivity without them.

No equal-token control (the paper has none for this task). Histories are generated fictional ones
(:mod:`generate`, the offline default, labelled "generated") or the released split
(``--source hf:ai-hyz/MemoryAgentBench``, the repository's folder or an exported file, :mod:`schema`). The
prompt is MemoryAgentBench's own (system message, memorize
wrapper around the numbered facts, query template), the question followed by the boxed-answer
instruction (:mod:`strings`), through the chat template with thinking off. Rows carry the paper's
metrics and the rule grader's label (:mod:`rule_grader`); :mod:`summary` does the net-accuracy analysis.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.published_data import MissingExtraError
from .data import FACTCONSOLIDATION_SEED
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.protocol import CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least, \
    require_choices, require_fits, use_chat

from . import strings
from .data import TIERS, dataset_hash, generate_rows
from .rule_grader import grade_columns
from .histories import FCHistory, build_histories, mquake_index
from .schema import Fact, FactConsolidationFormatError, FactRow, load_rows, split_context

#: Tokens allowed for the chat template's tail after a question when checking that a history fits the model.
FRAMING_TOKENS = 16
#: The condition set: the four operations (paper L1535-1546: "full, source, value, recompute").
CONDITIONS = ("full", "source", "value", "recompute")
#: ``--source`` value of the generated offline set.
GENERATED = "generated"
#: Answer budget (paper L1549-1550: "a fixed 1,024-token maximum, stopping earlier at EOS").
MAX_NEW_TOKENS = 1024
#: Tiers run by default: generated 8k (fits SmolLM2's window); released 32k and 64k (the paper's).
DEFAULT_TIERS = {GENERATED: ("8k",), "released": ("32k", "64k")}
#: ``query_template`` -> the template around the question (``strings``).
QUERY_TEMPLATES = {"ours": strings.OUR_QUERY_TEMPLATE, "memoryagentbench": strings.QUERY_TEMPLATE}
#: Tiers a released file has (MemoryAgentBench ``factconsolidation_{sh,mh}_<tier>``).
RELEASED_TIERS = ("6k", "32k", "64k", "262k")


def fact_segment(number: int) -> str:
    """The prompt segment name of fact ``number``."""
    return f"fact:{number}"


@dataclass
class FactConsolidationStudy(HistoryStudy):
    """FactConsolidation histories under full access, source mask, value mask and text recompute."""

    name: ClassVar[str] = "factconsolidation"
    strings: ClassVar[ModuleType] = strings
    #: "generated" (fictional histories in the released schema, offline), or MemoryAgentBench's Conflict_Resolution
    #: split (the paper's data): hf:ai-hyz/MemoryAgentBench (needs kvprobe[data]), the dataset repository's folder,
    #: its parquet file, or the split exported to JSON or JSON lines.
    source: str = GENERATED
    #: Length tiers to run (generated: 8k, 32k, or 1k for quick checks; released: 6k, 32k, 64k, 262k); none:
    #: generated 8k, released 32k and 64k (the paper's).
    tiers: tuple[str, ...] | None = None
    #: Generated histories per tier (generated set only).
    n_histories: int = 3
    #: Questions asked per hop type and history, the first n (none: all; the paper asks all 100).
    questions_per_hop: int | None = None
    #: Same-name person pairs per generated history, left visible by the mapping (generated set only).
    homonyms: int = 2
    #: Generator seed (generated set only).
    seed: int = FACTCONSOLIDATION_SEED
    #: A released MQuAKE file (e.g. MQuAKE-CF.json; or a folder or hf: id, as mquake's --source): entity ids for the
    #: same-name rule and previous answers of multi-hop questions (released set only; none: text rules only).
    mquake_file: str | None = None
    #: The question's wording: "ours" (the latest-fact rule, the question, the boxed-answer instruction) or
    #: "memoryagentbench" (MemoryAgentBench's query template verbatim around them); the paper does not quote its own.
    query_template: str = "ours"
    #: Greedy answer budget in tokens (the paper: 1,024).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: History tokens per prefill forward, for the history and the recompute (the paper: 128); none: the
    #: engine's default for the device (512 on a CPU).
    prefill_chunk: int | None = strings.PREFILL_CHUNK
    #: qa_pair_ids of questions seen while developing or qualifying this run: kept in every analysis, left out
    #: of a separate exposure sensitivity (the paper: four such questions); none by default.
    exposed_questions: tuple[str, ...] = ()
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: (question, operation) rows decoded together; bounds memory (all rows of a history share its cache).
    rows_per_batch: int = 32
    #: Histories per batch.
    cases_per_batch: int = 1

    def __post_init__(self) -> None:
        if self.tiers is not None:
            self.tiers = tuple(self.tiers)
        self.exposed_questions = tuple(self.exposed_questions)
        require_at_least(self, n_histories=1, questions_per_hop=1, homonyms=0, max_new_tokens=1,
                         rows_per_batch=1, cases_per_batch=1, prefill_chunk=1)
        require_choices(self, query_template=tuple(QUERY_TEMPLATES))
        if len(set(self.exposed_questions)) != len(self.exposed_questions):
            raise InvalidParameter("exposed_questions", "names a question twice")
        if self.source == GENERATED:
            require_choices(self, tiers=(None, *TIERS))
            if self.mquake_file is not None:
                raise InvalidParameter("mquake_file", "applies to a released source only")
            self._check_exposed()
            return
        require_choices(self, tiers=(None, *RELEASED_TIERS))
        # Read the files now, so a bad file fails before any model loads.
        try:
            load_rows(self.source)
        except (OSError, MissingExtraError, FactConsolidationFormatError) as e:
            raise InvalidParameter("source", str(e)) from e
        if self.mquake_file is not None:
            try:
                mquake_index(self.mquake_file)
            except (OSError, MissingExtraError, ValueError) as e:
                raise InvalidParameter("mquake_file", str(e)) from e
        if not self.cases():
            raise InvalidParameter("tiers", f"{self.source} has no rows of tiers {', '.join(self.run_tiers)}")
        self._check_exposed()

    def _check_exposed(self) -> None:
        """Refuse an exposed question the run does not ask (a typo would leave the sensitivity unchanged)."""
        if not self.exposed_questions:
            return
        asked = {q.qa_pair_id for case in self.cases() for q in case.questions}
        if unknown := [q for q in self.exposed_questions if q not in asked]:
            raise InvalidParameter("exposed_questions", f"not asked in this run: {', '.join(unknown)}")

    @property
    def run_tiers(self) -> tuple[str, ...]:
        """The tiers that run (``tiers``, or the source's default)."""
        return self.tiers or DEFAULT_TIERS[GENERATED if self.source == GENERATED else "released"]

    # ------------------------------------------------------------------ data
    def rows_of_source(self) -> list[FactRow]:
        """The rows the histories come from (generated, or read from ``source``), on each call: the histories
        are built once (:meth:`cases`), the config digests the rows."""
        return (generate_rows(self.run_tiers, self.n_histories, self.seed, self.homonyms)
                if self.source == GENERATED else load_rows(self.source))

    def make_cases(self) -> list[FCHistory]:
        """The histories of the tiers run, with the same-name and previous-answer rules of ``mquake_file``."""
        ids, previous = mquake_index(self.mquake_file) if self.mquake_file is not None else (None, None)
        return build_histories(self.rows_of_source(), self.run_tiers, self.questions_per_hop, ids, previous,
                               prefix="gen" if self.source == GENERATED else "fc")

    def data_sha256(self) -> str:
        """The digest of the source rows (``data.dataset_hash``)."""
        return dataset_hash(self.rows_of_source())

    def config_extra(self) -> dict[str, Any]:
        """The data's kind, the tiers run, the conditions (``policies``, the paper's word), the boxed-answer
        instruction and each history's fact mapping (facts, superseded, ambiguous names, unparsed lines)."""
        return {"data": GENERATED if self.source == GENERATED else "released", "run_tiers": list(self.run_tiers),
                "policies": list(CONDITIONS), "boxed_instruction": strings.BOXED_INSTRUCTION,
                "mapping": {c.case_id: {"facts": len(c.mapping().triples) + len(c.mapping().unparsed),
                                        "superseded": len(c.mapping().superseded),
                                        "ambiguous_names": sorted(c.mapping().ambiguous),
                                        "unparsed": len(c.mapping().unparsed)} for c in self.cases()}}

    # ------------------------------------------------------------------ the protocol
    def prompt(self, model: kvprobe.Model, case: FCHistory) -> kvprobe.Prompt:
        """System message, memorize wrapper head, the context one line per segment (``fact:<n>``), tail."""
        preamble, lines = split_context(case.context)
        segments = [("head", strings.HISTORY_HEAD.format(time_stamp=strings.TIME_STAMP))]
        if preamble:
            segments.append(("preamble", preamble))
        segments += [(fact_segment(x.number), x.line) if isinstance(x, Fact) else (f"line:{i}", x)
                     for i, x in enumerate(lines)]
        segments.append(("tail", strings.HISTORY_TAIL))
        chat = use_chat(model.tokenizer, self.chat)
        return study_prompt(segments, chat=chat, system=strings.SYSTEM if chat else None, sep=strings.LINE_JOINER)

    def questions(self, model: kvprobe.Model, case: FCHistory, history: kvprobe.History) -> list[Question]:
        """Every question, followed by the boxed-answer instruction, in the query template; ``query``: hop type."""
        questions = self._questions(case)
        self._require_fits(model, case, len(history), questions)
        return questions

    def _questions(self, case: FCHistory) -> list[Question]:
        template = QUERY_TEMPLATES[self.query_template]
        return [Question(q.hop, template.format(question=q.question + strings.QUESTION_JOINER
                                                + strings.BOXED_INSTRUCTION), None, q) for q in case.questions]

    def _require_fits(self, model: kvprobe.Model, case: FCHistory, history_tokens: int,
                      questions: list[Question]) -> None:
        require_fits(model, case.case_id, history_tokens, [q.text for q in questions], self.max_new_tokens,
                     FRAMING_TOKENS, "max_new_tokens", "; give at most --max-new-tokens {room} or a shorter tier")

    def preflight(self, model: kvprobe.Model, cases: Sequence[FCHistory]) -> None:
        """Every case's window check (as :meth:`questions` makes it) on its tokenized prompt, before the run
        writes anything."""
        if model.context_length is None:
            return
        for case in cases:
            tokens = len(model.tokenize(self.prompt(model, case))[1])
            self._require_fits(model, case, tokens, self._questions(case))

    def conditions(self, model: kvprobe.Model, case: FCHistory, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        """The four operations on the superseded facts (a history without any keeps full access only). The value
        mask hides every token overlapping an old object string (a token may join it to the period after it)."""
        from kvprobe.interventions import TextRecompute

        superseded = case.mapping().superseded
        if not superseded:
            return {"full": kvprobe.Full()}
        names = [fact_segment(s.number) for s in superseded]
        return {"full": kvprobe.Full(),
                "source": kvprobe.Mask([history.span(n) for n in names], name="source"),
                "value": kvprobe.Mask([history.span(fact_segment(s.number), chars=s.value_chars, strict=False)
                                       for s in superseded], name="value"),
                "recompute": TextRecompute(names, chunk_size=self.prefill_chunk)}

    def prefill_chunk_size(self) -> int | None:
        """``prefill_chunk`` (the protocol prefills each history in these chunks)."""
        return self.prefill_chunk

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        m = run.case.mapping()
        run.extra["superseded"] = len(m.superseded)
        run.extra["hidden_tokens"] = {name: int(c.n_tokens) for name, c in run.originals.items()
                                      if isinstance(c, kvprobe.Mask)}

    def answer(self, model: kvprobe.Model, items: Sequence[tuple[kvprobe.History, kvprobe.Request]],
               candidates: Sequence[Sequence[str]] | None) -> list[decoding.Answer]:
        """The protocol's batched answer, ``rows_per_batch`` rows at a time (every row of a history at once
        would hold hundreds of answer caches)."""
        out: list[decoding.Answer] = []
        for start in range(0, len(items), self.rows_per_batch):
            out += decoding.answer(model, items[start:start + self.rows_per_batch], None,
                                   max_new_tokens=self.max_new_tokens)
        return out

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        g = answers[condition].generation
        q = question.info
        return {"tier": run.case.tier, "hop": q.hop, "qa_pair_id": q.qa_pair_id, "question": q.question,
                "answers": list(q.answers), "previous_answers": list(q.previous),
                "superseded_facts": run.extra["superseded"],
                "hidden_tokens": run.extra["hidden_tokens"].get(condition, 0),
                **grade_columns(g.text, g.stop_reason, q.answers, q.previous)}


#: Parameters a run's config may lack (runs made before they existed), and the value such a run used:
#: ``prefill_chunk`` None (the engine's default chunks); no exposed questions.
ADDED_PARAMETERS = {"prefill_chunk": None, "exposed_questions": ()}


def study_from_config(config: dict[str, Any]) -> FactConsolidationStudy:
    """The study of a run's ``config.json`` (its parameters; derived entries ignored; a parameter added after
    the run, :data:`ADDED_PARAMETERS`, as the run had it)."""
    sc = {**ADDED_PARAMETERS, **config["study_config"]}
    params = {f.name: tuple(v) if isinstance(v := sc[f.name], list) else v
              for f in dataclasses.fields(FactConsolidationStudy) if not f.name.startswith("_") and f.name in sc}
    return FactConsolidationStudy(**params)
