"""Every study kvprobe knows: one line each. Adding a study adds a line here, no CLI code.

An :class:`Entry` names the study class (its dataclass fields become the options of
``kvprobe run NAME``), the summary module (its ``summarize`` and ``format_report``, which
:func:`kvprobe.studies.common.summary.write_summary` calls to write ``summary.json`` and
``report.md``; ``kvprobe report NAME DIR`` reruns it), the study's figure, and what
else the command must know: a runner that does more than run the cases, options of the
summary or of the run that are not study parameters, whether a model grader may label the
answers (:class:`Graded`), and why a study cannot run on Ray workers. Modules are named as
strings and imported on use, so ``kvprobe --help`` stays fast.

A study whose commands are its own rather than ``kvprobe run NAME`` is a :class:`CommandStudy` of
:data:`COMMAND_STUDIES` (``recognition``: ``kvprobe extract`` and ``kvprobe readout``). :func:`study_anchors`
names every registered study's module, beside which its claims and README sit.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

# The bootstrap seed ``kvprobe run``, ``kvprobe report`` and ``write_summary`` use by default
# (``Entry.seed``: REPORT_SEED, or the paper's PAPER_SEED where the paper gives it; every committed
# summary under artifacts/ records its entry's seed). Importing the stats module costs numpy only
# (``kvprobe.readouts`` loads its other modules on use).
from kvprobe.readouts.stats import PAPER_SEED, REPORT_SEED
from kvprobe.studies.common.report import Items
from kvprobe.studies.source_influence.data import PROMPT_FORMAT_SEED


@dataclass(frozen=True)
class Option:
    """A command-line option that is not a study parameter.

    Attributes:
        name: the keyword it is passed as (``readout_scores`` -> ``--readout-scores``).
        help: one sentence for ``--help``.
        to: ``"summary"`` (a keyword of the summary module's ``summarize``, through
            :func:`kvprobe.studies.common.summary.write_summary`) or ``"run"`` (a keyword of the entry's runner).
        flag: a yes/no switch (``store_true``) rather than a value.
    """

    name: str
    help: str
    to: str = "summary"
    flag: bool = False


#: ``--grades`` of a study whose model grader replaces the rule grader's labels.
GRADES_INSTEAD = ("a grades.jsonl from the study's grading.grade_run (an LLM judge) to use instead of the rule "
                  "grader's labels")


@dataclass(frozen=True)
class Graded:
    """A study whose answers a model grader may label after the run: ``Entry.graded`` gives it the summary
    option ``grades`` (a ``grades.jsonl``, read by its ``summarize(..., grades=...)``) and, with a ``judge``,
    ``judge_model`` and ``judge_dtype`` (:func:`kvprobe.studies.common.summary.write_summary` grades the run
    with that local model first and uses its grades file).

    Attributes:
        grades: what ``--grades`` reads, one sentence.
        judge: ``"module:function"`` called as ``fn(out_dir, model, dtype)``: grades the run with a local model
            (``dtype`` None: the loader's), writes ``grades.jsonl`` and ``judge.jsonl`` in the run and returns the
            grades file (None: the study's grader runs from Python only, e.g. ``grading.grade_run``).
        judge_help: what ``--judge-model`` does (its prompts and label rule), one sentence.
        audit: ``"module:name"`` of the judge's audit on the study's hand-labelled answers
            (:class:`kvprobe.studies.common.judge_audit.AuditTask`; ``kvprobe report judge-audit MODEL NAME``;
            None: no audit set).
    """

    grades: str = GRADES_INSTEAD
    judge: str | None = None
    judge_help: str = ""
    audit: str | None = None

    def options(self) -> tuple[Option, ...]:
        """The summary options this grading adds to its entry."""
        if self.judge is None:
            return (Option("grades", self.grades),)
        return (Option("grades", self.grades), Option("judge_model", self.judge_help),
                Option("judge_dtype", "the --judge-model's dtype (float32, bfloat16, float16; default the loader's)"))


@dataclass(frozen=True)
class Entry:
    """One study: where its parts live and what the command line must know about it.

    Attributes:
        name: ``kvprobe run NAME``.
        study: ``"module:Class"`` of the study dataclass.
        summary: module with ``summarize(out_dir, seed=..., **options)`` and ``format_report(summary, config,
            timing)`` (:mod:`kvprobe.studies.common.summary`).
        description: one line for ``kvprobe run --help``.
        runner: ``"module:function"`` called as ``fn(model, out_dir, study=..., progress=..., **run options)``
            instead of :func:`kvprobe.studies.common.runner.run_study` (a study that does more after its cases,
            e.g. cross-checkpoint's readout transfer).
        options: options beyond the study's fields (a graded study's grading options come from ``graded``;
            :attr:`command_options` holds both).
        graded: how a model grader may label the study's answers (None: the rule grader only).
        local_only: why the study cannot run on Ray workers (None: it can).
        compare: ``"module:function"`` of ``kvprobe report NAME DIR DIR ... --out OUT`` (several runs):
            ``fn(run_dirs, out_dir, seed=...)`` writes its files and returns a markdown table to print.
        seed: the bootstrap seed ``kvprobe run`` and ``kvprobe report`` pass by default (``--bootstrap-seed``).
        figure: ``"module:function"`` of the study's figure (its ``figure.py``), called as
            ``fn(summary, path, model)`` after the summary is written (None: the study draws none; a function
            may also return None when a run has nothing to draw).
        figure_file: the figure's file name in the run folder.
        smoke: the parameters of a run that takes seconds on a tiny model (``tests/test_study_contract.py``
            runs every registered study with them, so a new study needs no test list of its own).
    """

    name: str
    study: str
    summary: str
    description: str
    runner: str | None = None
    options: tuple[Option, ...] = ()
    graded: Graded | None = None
    local_only: str | None = None
    compare: str | None = None
    seed: int = REPORT_SEED
    figure: str | None = None
    figure_file: str = "figure.png"
    smoke: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def study_class(self) -> type:
        return _load(self.study)

    @property
    def command_options(self) -> tuple[Option, ...]:
        """Every option of the entry's commands beyond the study's fields: the grading's, then the declared ones."""
        return (*(self.graded.options() if self.graded is not None else ()), *self.options)

    def judge_function(self) -> Callable[..., Any]:
        if self.graded is None or self.graded.judge is None:
            raise ValueError(f"{self.name}: no judge model grades this study")
        return _load(self.graded.judge)

    def audit_task(self) -> Any:
        if self.graded is None or self.graded.audit is None:
            raise ValueError(f"{self.name}: no judge audit set")
        return _load(self.graded.audit)

    def run_function(self) -> Callable[..., Any] | None:
        return None if self.runner is None else _load(self.runner)

    def compare_function(self) -> Callable[..., Any] | None:
        return None if self.compare is None else _load(self.compare)

    def figure_function(self) -> Callable[..., Any] | None:
        return None if self.figure is None else _load(self.figure)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


_P = "kvprobe.studies."
STUDIES: dict[str, Entry] = {e.name: e for e in (
    Entry("quantity", _P + "quantity.study:QuantityStudy", _P + "quantity.summary",
          "quantity records: does hiding, rebuilding or recomputing the old record change answers? (partC)",
          compare=_P + "quantity.panel:write_comparison",
          seed=PAPER_SEED,  # the paper's seed of its answer-quality intervals (seed L4929)
          figure=_P + "quantity.figure:plot_summary",
          smoke=dict(n_groups=1, max_new_tokens=4, operations=False)),
    Entry("babilong", _P + "babilong.study:BabilongStudy", _P + "babilong.summary",
          "BABILong qa2/qa3 object dependencies under naive, dependency-keeping and neutral masks (partA 2)",
          figure=_P + "babilong.figure:draw",
          smoke=dict(tasks=("qa2",), lengths=(0,), n=2, max_new_tokens=4)),
    Entry("mquake", _P + "mquake.study:MQuAKEStudy", _P + "mquake.summary",
          "contextual MQuAKE multi-hop questions after in-context updates, seven policies (partA 1b)",
          smoke=dict(hops=(2,), n_per_hop=1, max_new_tokens=3, no_context=True)),
    Entry("minteval", _P + "minteval.study:MINTEvalStudy", _P + "minteval.summary",
          "MINTEval state tracking: five policies over superseded movement records (partA 1a)",
          graded=Graded("a grades.jsonl from the study's grading.grade_run (an LLM judge): its labels as a judge rule "
                        "beside the rule grader's"),
          figure=_P + "minteval.figure:draw",
          smoke=dict(n_sessions=2, questions_per_type=1, max_events=24, max_new_tokens=3)),
    Entry("factconsolidation", _P + "factconsolidation.study:FactConsolidationStudy", _P + "factconsolidation.summary",
          "FactConsolidation: full, source, value, recompute over accumulated fact updates; capped-first net "
          "accuracy (partA 3)",
          graded=Graded(),
          smoke=dict(tiers=("1k",), n_histories=1, questions_per_hop=1, max_new_tokens=2)),
    Entry("revisions", _P + "revisions.study:RevisionsStudy", _P + "revisions.summary",
          "questions about article revision histories under whole-source, changed-text masks and recompute "
          "(partE E9)",
          graded=Graded(GRADES_INSTEAD + " (default: the run's grades.jsonl when present)"),
          options=(Option("review", "a source_review.jsonl from revisions.review.review_run (the source-answerability "
                          "review before grading) to set the source-answerable questions and target times"),),
          figure=_P + "revisions.figure:draw",
          smoke=dict(n_articles=1, max_new_tokens=3)),
    Entry("factorial", _P + "factorial.study:FactorialStudy", _P + "factorial.summary",
          "quantity and endpoint factorial: B information x question wording x note x five access conditions "
          "(partD 1c)", seed=PAPER_SEED,
          figure=_P + "factorial.figure:draw",
          smoke=dict(n_groups=1, max_new_tokens=3, matrices=("quantity",), information=("stated",), notes=("notebook",))),
    Entry("note-controls", _P + "note_controls.study:NoteControlsStudy", _P + "note_controls.summary",
          "which note tokens, question wording and note content make an equal-token control abstain? (partD 1d, 2)",
          seed=PAPER_SEED,
          figure=_P + "note_controls.figure:draw",
          smoke=dict(n_groups=1, max_new_tokens=3)),
    Entry("matched-scores", _P + "matched_scores.study:MatchedScoresStudy", _P + "matched_scores.summary",
          "candidate scores and greedy answers under full access, the old-source mask and its equal-token control "
          "on record histories or OAKS; generation limits (partD 1a, 1b, 1e, 6)",
          compare=_P + "matched_scores.summary:write_panel", seed=PAPER_SEED,
          figure=_P + "matched_scores.figure:draw",
          smoke=dict(n_groups=1, max_new_tokens=3, prefix_budgets=(3,))),
    Entry("fact-map", _P + "fact_map.study:FactMapStudy", _P + "fact_map.summary",
          "where the old record's effect lives: each later piece rebuilt without it, per layer band, against the "
          "mask and the recompute (issue fact-map; paper title claim)", seed=PAPER_SEED,
          figure=_P + "fact_map.figure:draw",
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
          figure=_P + "records.figure:draw", figure_file="coverage.png",
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
          graded=Graded("a grades.jsonl of the source-aware model grader (open_answers.grading.grade_run; "
                        "default: the run's grades.jsonl when present, else the rule grader)",
                        judge=_P + "matched_scores.open_answers.summary:judge_run",
                        judge_help="grade the run with this local model (any kvprobe can load) and the source-aware "
                        "rubric, one prompt per verdict, greedy, 10 new tokens; writes grades.jsonl and judge.jsonl "
                        "in the run and uses them",
                        audit=_P + "matched_scores.open_answers.audit:AUDIT"),
          seed=PAPER_SEED, smoke=dict(oaks_split="all", n_questions=2, max_new_tokens=3)),
    Entry("session-bias", _P + "session_bias.study:SessionBiasStudy", _P + "session_bias.summary",
          "soft session-order bias, hard mask, development policies and query-aware methods at a fixed capacity "
          "on LongMemEval-schema conversations (partD 10, partE E1-E4)",
          graded=Graded(judge=_P + "session_bias.summary:judge_run",
                        judge_help="grade the run with this local model (any kvprobe can load) and the official "
                        "LongMemEval answer-check prompts, one prompt per request, greedy, 10 new tokens, label 'yes' "
                        "in the reply; writes grades.jsonl and judge.jsonl in the run and uses them",
                        audit=_P + "session_bias.audit:AUDIT"),
          smoke=dict(split="all", n=2, max_new_tokens=2)),
    Entry("requests", _P + "requests.study:RequestsStudy", _P + "requests.summary",
          "repeated-request workload: cost of detector masks and recomputes over keep-all (partE)",
          local_only="its timings measure one process on an otherwise idle machine",
          smoke=dict(n_groups=1, lengths=(0,), max_new_tokens=2, detector_max_new_tokens=2)),
)}


@dataclass(frozen=True)
class CommandStudy:
    """A study run by commands of its own rather than ``kvprobe run NAME``: what they write is not a run
    folder of cases (``recognition``: ``kvprobe extract`` writes a feature store of encoded records,
    ``kvprobe readout`` the readouts of a store). Its folder holds the commands module, ``README.md`` and, when it
    tests claims of the paper, ``claims.py`` (found beside the commands module, as a run study's beside its study
    module).

    Attributes:
        name: the study (its claims' ``study``; its runs' folder under ``artifacts/``).
        commands: ``"module:function"`` called as ``fn(sub, cli)`` to add its sub-commands to the ``kvprobe``
            parser (``sub``: the parser's sub-parsers; ``cli``: :mod:`kvprobe.cli`).
        description: one line.
    """

    name: str
    commands: str
    description: str

    def add_commands(self, sub: Any, cli: Any) -> None:
        """Adds the study's sub-commands to the ``kvprobe`` parser."""
        _load(self.commands)(sub, cli)


COMMAND_STUDIES: dict[str, CommandStudy] = {e.name: e for e in (
    CommandStudy("recognition", _P + "recognition.commands:add_commands",
                 "can cached K/V tell a replacement from a confirmation? `kvprobe extract` encodes the recognition "
                 "datasets into a feature store, `kvprobe readout` reads it out (partB 1-3)"),
)}


def study_anchors() -> dict[str, str]:
    """Every registered study -> its anchor, the ``"module:name"`` whose module its claims and README sit beside:
    ``Entry.study`` of the run studies (in registry order), then ``CommandStudy.commands`` of the command studies."""
    return {**{name: e.study for name, e in STUDIES.items()},
            **{name: e.commands for name, e in COMMAND_STUDIES.items()}}


def judge_audits() -> dict[str, Entry]:
    """The studies whose judge has an audit set (``Graded.audit``), by name."""
    return {n: e for n, e in STUDIES.items() if e.graded is not None and e.graded.audit is not None}


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
