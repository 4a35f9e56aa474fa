"""Every study ``kvprobe run`` knows: one line each. Adding a study adds a line here, no CLI code.

An :class:`Entry` names the study class (its dataclass fields become the options of
``kvprobe run NAME``), the summary module (``write_summary(out_dir, seed=...)`` writes
``summary.json`` and ``report.md``; ``kvprobe report NAME DIR`` reruns it), and what
else the command must know: a runner that does more than run the cases, options of the
summary or of the run that are not study parameters, and why a study cannot run on
Ray workers. Modules are named as strings and imported on use, so ``kvprobe --help``
stays fast.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

# The bootstrap seed ``kvprobe run`` and ``kvprobe report`` pass to a study's summary by default
# (``Entry.seed``: REPORT_SEED, or the paper's PAPER_SEED where the paper gives it; the committed
# summaries under artifacts/ record theirs; the MQuAKE run records 0). Importing the stats module
# costs numpy only (``kvprobe.readouts`` loads its other modules on use).
from kvprobe.readouts.stats import PAPER_SEED, REPORT_SEED
from kvprobe.studies.common.report import Items
from kvprobe.studies.source_influence.data import PROMPT_FORMAT_SEED


@dataclass(frozen=True)
class Option:
    """A command-line option that is not a study parameter.

    Attributes:
        name: the keyword it is passed as (``readout_scores`` -> ``--readout-scores``).
        help: one sentence for ``--help``.
        to: ``"summary"`` (a keyword of ``write_summary``) or ``"run"`` (a keyword of the entry's runner).
        flag: a yes/no switch (``store_true``) rather than a value.
    """

    name: str
    help: str
    to: str = "summary"
    flag: bool = False


@dataclass(frozen=True)
class Entry:
    """One study: where its parts live and what the command line must know about it.

    Attributes:
        name: ``kvprobe run NAME``.
        study: ``"module:Class"`` of the study dataclass.
        summary: module with ``write_summary(out_dir, seed=...)``.
        description: one line for ``kvprobe run --help``.
        runner: ``"module:function"`` called as ``fn(model, out_dir, study=..., progress=..., **run options)``
            instead of :func:`kvprobe.studies.common.runner.run_study` (a study that does more after its cases,
            e.g. cross-checkpoint's readout transfer).
        options: options beyond the study's fields.
        local_only: why the study cannot run on Ray workers (None: it can).
        compare: ``"module:function"`` of ``kvprobe report NAME DIR DIR ... --out OUT`` (several runs):
            ``fn(run_dirs, out_dir, seed=...)`` writes its files and returns a markdown table to print.
        seed: the bootstrap seed ``kvprobe run`` and ``kvprobe report`` pass by default (``--bootstrap-seed``).
        smoke: the parameters of a run that takes seconds on a tiny model (``tests/test_study_contract.py``
            runs every registered study with them, so a new study needs no test list of its own).
    """

    name: str
    study: str
    summary: str
    description: str
    runner: str | None = None
    options: tuple[Option, ...] = ()
    local_only: str | None = None
    compare: str | None = None
    seed: int = REPORT_SEED
    smoke: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def study_class(self) -> type:
        return _load(self.study)

    def write_summary(self) -> Callable[..., dict[str, Any]]:
        return importlib.import_module(self.summary).write_summary

    def run_function(self) -> Callable[..., Any] | None:
        return None if self.runner is None else _load(self.runner)

    def compare_function(self) -> Callable[..., Any] | None:
        return None if self.compare is None else _load(self.compare)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


_P = "kvprobe.studies."
STUDIES: dict[str, Entry] = {e.name: e for e in (
    Entry("quantity", _P + "quantity.study:QuantityStudy", _P + "quantity.summary",
          "quantity records: does hiding, rebuilding or recomputing the old record change answers? (partC)",
          compare=_P + "quantity.panel:write_comparison",
          seed=PAPER_SEED,  # the paper's seed of its answer-quality intervals (seed L4929)
          smoke=dict(n_groups=1, max_new_tokens=4, operations=False)),
    Entry("babilong", _P + "babilong.study:BabilongStudy", _P + "babilong.summary",
          "BABILong qa2/qa3 object dependencies under naive, dependency-keeping and neutral masks (partA 2)",
          smoke=dict(tasks=("qa2",), lengths=(0,), n=2, max_new_tokens=4)),
    Entry("mquake", _P + "mquake.study:MQuAKEStudy", _P + "mquake.summary",
          "contextual MQuAKE multi-hop questions after in-context updates, seven policies (partA 1b)",
          smoke=dict(hops=(2,), n_per_hop=1, max_new_tokens=3, no_context=True)),
    Entry("minteval", _P + "minteval.study:MINTEvalStudy", _P + "minteval.summary",
          "MINTEval state tracking: five policies over superseded movement records (partA 1a)",
          smoke=dict(n_sessions=2, questions_per_type=1, max_events=24, max_new_tokens=3)),
    Entry("factconsolidation", _P + "factconsolidation.study:FactConsolidationStudy", _P + "factconsolidation.summary",
          "FactConsolidation: full, source, value, recompute over accumulated fact updates; capped-first net "
          "accuracy (partA 3)",
          options=(Option("grades", "a grades.jsonl from the study's grading.grade_run (an LLM judge) to use instead "
                          "of the rule grader's labels"),),
          smoke=dict(tiers=("1k",), n_histories=1, questions_per_hop=1, max_new_tokens=2)),
    Entry("revisions", _P + "revisions.study:RevisionsStudy", _P + "revisions.summary",
          "questions about article revision histories under whole-source, changed-text masks and recompute "
          "(partE E9)",
          options=(Option("grades", "a grades.jsonl from the study's grading.grade_run (an LLM judge) to use instead "
                          "of the rule grader's labels"),
                   Option("review", "a source_review.jsonl from revisions.review.review_run (the source-answerability "
                          "review before grading) to set the source-answerable questions and target times")),
          smoke=dict(n_articles=1, max_new_tokens=3)),
    Entry("factorial", _P + "factorial.study:FactorialStudy", _P + "factorial.summary",
          "quantity and endpoint factorial: B information x question wording x note x five access conditions "
          "(partD 1c)", seed=PAPER_SEED,
          smoke=dict(n_groups=1, max_new_tokens=3, matrices=("quantity",), information=("stated",), notes=("notebook",))),
    Entry("note-controls", _P + "note_controls.study:NoteControlsStudy", _P + "note_controls.summary",
          "which note tokens, question wording and note content make an equal-token control abstain? (partD 1d, 2)",
          seed=PAPER_SEED,
          smoke=dict(n_groups=1, max_new_tokens=3)),
    Entry("matched-scores", _P + "matched_scores.study:MatchedScoresStudy", _P + "matched_scores.summary",
          "candidate scores and greedy answers under full access, the old-source mask and its equal-token control "
          "on record histories or OAKS; generation limits (partD 1a, 1b, 1e, 6)",
          compare=_P + "matched_scores.summary:write_panel", seed=PAPER_SEED,
          smoke=dict(n_groups=1, max_new_tokens=3, prefix_budgets=(3,))),
    Entry("fact-map", _P + "fact_map.study:FactMapStudy", _P + "fact_map.summary",
          "where the old record's effect lives: each later piece rebuilt without it, per layer band, against the "
          "mask and the recompute (issue fact-map; paper title claim)", seed=PAPER_SEED,
          smoke=dict(n_groups=1, n_bands=2)),
    Entry("detection", _P + "detection.study:DetectionStudy", _P + "detection.summary",
          "replacement detectors (JSON classifiers, YES/NO score) on record pairs and OAKS natural text (partB 4-5)",
          options=(Option("matched_scores", "comma-separated `matched-scores --dataset oaks` run folders (one per "
                          "generator): join their full and old-mask outcomes with the OAKS detections"),
                   Option("join_rule", "the matched-scores correctness column the join reads (complete, exact, "
                          "lenient; default complete)")),
          smoke=dict(n_groups=1, max_new_tokens=4, datasets=("records", "oaks"), oaks_max_new_tokens=4)),
    Entry("records", _P + "records.study:RecordsStudy", _P + "records.summary",
          "record histories under the seven detector/oracle policies, three queries each (partD 3)",
          options=(Option("readout_scores", "a `kvprobe readout` scores.json (or its folder) of the same records: "
                          "its readouts also rank histories in the coverage curves"),),
          smoke=dict(n_groups=1, max_new_tokens=3)),
    Entry("components", _P + "components.study:ComponentStudy", _P + "components.summary",
          "zero K, V or both of the old record vs the attention mask, reason-then-score (appendix)",
          smoke=dict(n_per_family=1, budget=2, families=("location",))),
    Entry("question-relevance", _P + "components.relevance:RelevanceStudy", _P + "components.relevance_summary",
          "lexical, attention and leave-one-out signals: replacement AUC and question relevance (partB 2)",
          compare=_P + "components.relevance_summary:write_comparison",
          smoke=dict(n_per_family=2, budget=2, families=("location",))),
    Entry("native-pairs", _P + "native_pairs.study:NativePairsStudy", _P + "native_pairs.summary",
          "record pairs without a question on native forward paths: s_K matching and d_V replacement on the "
          "intrinsic and controlled-history panels, component bootstrap (partB 1-2, D2)",
          smoke=dict(intrinsic_groups=2, history_per_family=1, draws=20, cases_per_batch=4)),
    Entry("derived-note", _P + "derived_note.study:DerivedNoteStudy", _P + "derived_note.summary",
          "a derived note carries the old record's content: masks, selective refresh, recompute (appendix)",
          local_only="it appends a cost log from inside each case",
          smoke=dict(n_groups=1, max_new_tokens=3)),
    Entry("query-aware", _P + "query_aware.study:QueryAwareStudy", _P + "query_aware.summary",
          "Quest, FINCH, RefreshKV and recent pages against the source mask at matched capacity (partE E4)",
          smoke=dict(n_groups=1, max_new_tokens=3, fixed_budget=48, methods=("quest",))),
    Entry("cross-checkpoint", _P + "cross_checkpoint.study:CrossCheckpointStudy", _P + "cross_checkpoint.summary",
          "one checkpoint reads a sibling checkpoint's cache (partE)",
          runner=_P + "cross_checkpoint.transfer:run",
          options=(Option("transfer", "also train the joint K/V readout on the sibling's cache of the recognition "
                          "records and test it on the main model's (transfer.json, in the report)", to="run",
                          flag=True),),
          smoke=dict(sibling="noise", n_groups=1, max_new_tokens=2, queries=("current",))),
    Entry("source-influence", _P + "source_influence.study:SourceInfluenceStudy", _P + "source_influence.summary",
          "role-matched source influence: old-source mask vs equal-token control on candidate margins (partA 5)",
          compare=_P + "source_influence.summary:write_panel",
          smoke=dict(split="development", n=3)),
    Entry("prompt-format", _P + "source_influence.study:PromptFormatStudy", _P + "source_influence.summary",
          "the source-influence events as raw text and through the native chat template, paired (partA 7)",
          compare=_P + "source_influence.summary:write_panel", seed=PROMPT_FORMAT_SEED,
          smoke=dict(split="development", n=2)),
    Entry("oaks", _P + "source_influence.study:OaksStudy", _P + "source_influence.summary",
          "OAKS-Novel answer changes: old-source mask vs equal-token control on candidate choices (partA 6)",
          compare=_P + "source_influence.summary:write_panel",
          smoke=dict(n=3)),
    Entry("oaks-open", _P + "matched_scores.open_answers.study:OaksOpenStudy",
          _P + "matched_scores.open_answers.summary",
          "open OAKS answers (no options) under full access, the old-source mask and its control; source-aware "
          "grading, answerable subset, three grading protocols (app:v41_oaks_open)",
          options=(Option("grades", "a grades.jsonl of the source-aware model grader (open_answers.grading.grade_run; "
                          "default: the run's grades.jsonl when present, else the rule grader)"),
                   Option("judge_model", "grade the run with this local model (any kvprobe can load) and the "
                          "source-aware rubric, one prompt per verdict, greedy, 10 new tokens; writes grades.jsonl "
                          "and judge.jsonl in the run and uses them"),
                   Option("judge_dtype", "the --judge-model's dtype (float32, bfloat16, float16; default the "
                          "loader's)")),
          seed=PAPER_SEED, smoke=dict(oaks_split="all", n_questions=2, max_new_tokens=3)),
    Entry("session-bias", _P + "session_bias.study:SessionBiasStudy", _P + "session_bias.summary",
          "soft session-order bias, hard mask, development policies and query-aware methods at a fixed capacity "
          "on LongMemEval-schema conversations (partD 10, partE E1-E4)",
          options=(Option("grades", "a grades.jsonl from the study's grading.grade_run (an LLM judge) to use instead "
                          "of the rule grader's labels"),
                   Option("judge_model", "grade the run with this local model (any kvprobe can load) and the "
                          "official LongMemEval answer-check prompts, one prompt per request, greedy, 10 new tokens, "
                          "label 'yes' in the reply; writes grades.jsonl and judge.jsonl in the run and uses them"),
                   Option("judge_dtype", "the --judge-model's dtype (float32, bfloat16, float16; default the "
                          "loader's)")),
          smoke=dict(split="all", n=2, max_new_tokens=2)),
    Entry("requests", _P + "requests.study:RequestsStudy", _P + "requests.summary",
          "repeated-request workload: cost of detector masks and recomputes over keep-all (partE)",
          local_only="its timings measure one process on an otherwise idle machine",
          smoke=dict(n_groups=1, lengths=(0,), max_new_tokens=2, detector_max_new_tokens=2)),
)}


def entry(name: str) -> Entry:
    """The registry entry of a study, or a ValueError listing the known ones."""
    try:
        return STUDIES[name]
    except KeyError:
        raise ValueError(f"unknown study {name!r}; known: {', '.join(STUDIES)}") from None


def run_items(config: dict[str, Any]) -> list[Items]:
    """Where a run's items come from, as its study declares it: the study's summary module (``studies.registry``)
    has ``items(config)`` or a constant ``ITEMS``."""
    module = importlib.import_module(entry(config["study"]).summary)
    found = module.items(config) if hasattr(module, "items") else module.ITEMS
    return [found] if isinstance(found, Items) else list(found)


def items_lines(configs: Iterable[dict[str, Any]]) -> list[str]:
    """The Items lines of several runs (a panel), each distinct line once, then a blank line."""
    lines = list(dict.fromkeys(i.line() for c in configs for i in run_items(c)))
    return [*lines, ""] if lines else []
