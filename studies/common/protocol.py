"""The study protocol: one run loop for every history study.

A history study asks questions of prefilled histories under several access
conditions and writes one row per (case, question, condition). Everything those
studies share lives here, once:

* prefill each case's prompt, reusing the K/V of the previous case in the batch
  when :meth:`HistoryStudy.reuse_key` says they share a prefix (and the same
  history object when the prompts are identical);
* keep only the conditions the model supports (:func:`kvprobe.studies.common.conditions.supported`),
  each prepared once per case (``kvprobe.Prepared.of``: a recompute runs once for
  all its questions);
* answer every (case, question, condition) of a batch in one batched call
  (:func:`kvprobe.decoding.answer`: candidate scores and/or a greedy answer), the
  answers keyed by ``(case_id, query, condition)``, never matched up by position;
* the common row columns (:data:`COMMON_COLUMNS`) and the proof that the shared
  history cache is bit-identical after the case (``check_unchanged``).

A study is a dataclass subclass of :class:`HistoryStudy` that supplies its
parameters as fields (with a docstring comment each: ``kvprobe run STUDY --help``
shows them), ``make_cases()``, ``prompt()``, ``questions()``, ``conditions()`` and
``row()`` (its own columns), plus the ``summary`` and ``report`` of its folder. The
protocol computes the cases once per parameter values (:meth:`Study.cases`) and writes
the config (:meth:`Study.config`: the fields, the case ids' digest, the study's data digest
and its strings' digest); a study only declares what to add (:meth:`Study.data_sha256`,
:attr:`Study.strings`, :meth:`Study.config_extra`). A study object holds its parameters only: state one
batch's hooks share travels in the :class:`Batch` the protocol hands them (``run.batch`` in the per-case
hooks), what one invocation of the runner builds once (a detector, a sibling checkpoint) in its
:class:`RunState` (``batch.run_state``), and the side logs a study appends to are declared
(:attr:`Study.side_logs`), their paths in the run state.
Studies that differ in one respect override one hook (:meth:`answer` for
reason-then-score, :meth:`rows` for several policies sharing one answer,
:meth:`question_conditions` for conditions built per question, :meth:`skip` for cases not run,
:meth:`start_batch` for work shared by a batch's cases), not the loop.

Example (a complete study)::

    Case = collections.namedtuple("Case", "case_id group")

    @dataclass
    class Tiny(HistoryStudy):
        name: ClassVar[str] = "tiny"
        #: Greedy answer budget.
        max_new_tokens: int = 8
        #: Cases per batch.
        cases_per_batch: int = 2

        def make_cases(self): return [Case("c0", "g0")]
        def prompt(self, model, case): return kvprobe.Prompt([("A", "The box is red."), ("B", "It is blue.")])
        def questions(self, model, case, history): return [Question("current", "What color is the box?")]
        def conditions(self, model, case, history):
            return {"full": kvprobe.Full(), "mask-A": kvprobe.Mask(history.span("A"), name="mask-A")}
        def row(self, run, question, condition, answers): return {}

    run_study(Tiny(), kvprobe.load_model("tiny-llama"), "runs/tiny")
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from types import ModuleType
from pathlib import Path
from typing import Any, Callable, ClassVar, Hashable, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

import kvprobe
from kvprobe import decoding
from kvprobe.parameters import public_fields
from kvprobe.selection import SelectionAccess

from .conditions import check_unchanged, supported

def study_parameters(study: Any) -> dict[str, Any]:
    """The fields part of a study's ``config()``: its parameters (:func:`kvprobe.parameters.public_fields`, every
    field of a study: what a run builds lives in its :class:`RunState`; the study's ``name`` is a class attribute,
    not a field), JSON-shaped (tuples as lists, as ``config.json`` stores them), and ``case_ids_sha256`` of its
    cases in order."""
    cfg = {f.name: list(v) if isinstance(v := getattr(study, f.name), tuple) else v
           for f in public_fields(type(study))}
    cfg["case_ids_sha256"] = hashlib.sha256("\n".join(c.case_id for c in study.cases()).encode()).hexdigest()
    return cfg


def strings_sha256(module: Any) -> str:
    """SHA-256 of every upper-case string constant of a ``strings`` module (a study's exact prompts), so
    ``config.json`` changes when a prompt does and a run directory never mixes two prompt versions. For a
    tuple of modules: the SHA-256 of their digests, one per line in order."""
    if isinstance(module, tuple):
        return hashlib.sha256("\n".join(strings_sha256(m) for m in module).encode()).hexdigest()
    names = sorted(k for k in vars(module) if k.isupper())
    blob = json.dumps({k: getattr(module, k) for k in names}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


@runtime_checkable
class CaseLike(Protocol):
    """What the runner and the protocol read of every case: its unique ``case_id`` (a frozen dataclass field,
    a named-tuple field or a property). Its resampling group is :meth:`Study.group` of the case: ``case.group``
    by default, so a case type without a ``group`` has its study override :meth:`Study.group`.

    Example: ``collections.namedtuple("Case", "case_id group")("c0", "g0")`` is a ``CaseLike``.
    """

    @property
    def case_id(self) -> str: ...


T = TypeVar("T")


@dataclass
class RunState:
    """What one invocation of the runner keeps for its study beside the study's parameters.

    The runner (:func:`kvprobe.studies.common.runner.run_study`) makes one per invocation (a Ray worker keeps
    its own copy across its batches) and hands it to :meth:`Study.run_cases`; a history study's hooks reach it
    as ``batch.run_state`` (``run.batch.run_state`` in the per-case hooks). The study object itself stays a
    plain holder of parameters.

    Attributes:
        logs: the paths of the study's side logs (:attr:`Study.side_logs`) by name, under the run directory;
            empty outside a run (a direct :meth:`Study.run_cases` call writes no side log).
        built: objects built once per invocation (a detector, a sibling checkpoint, decisions read from another
            run), by key: :meth:`memo`.

    Example::

        detector = batch.run_state.memo("detector", lambda: make_detector(self.detector))
        if (path := batch.run_state.logs.get("costs")) is not None:
            append_lines(path, lines)
    """

    logs: dict[str, Path] = field(default_factory=dict)
    built: dict[Hashable, Any] = field(default_factory=dict)

    def memo(self, key: Hashable, build: Callable[[], T]) -> T:
        """``build()`` the first time ``key`` is asked for in this invocation, the same object after."""
        if key not in self.built:
            self.built[key] = build()
        return self.built[key]


#: Columns every history study's rows carry, filled by the protocol.
COMMON_COLUMNS = ("case_id", "group", "condition", "query", "history_tokens", "prompt_sha256", "output",
                  "stop_reason", "output_tokens")


@dataclass(frozen=True)
class Question:
    """One question asked of a case's history under every condition.

    Attributes:
        query: the question's role in the study (``current``, ``historical``...): the row's ``query``.
        text: the question as asked (the suffix after the history).
        candidates: answers to score teacher-forced after the question (None: generate only).
        info: anything the study wants back in :meth:`HistoryStudy.row` (its own query object).
    """

    query: str
    text: str
    candidates: tuple[str, ...] | None = None
    info: Any = None


@dataclass
class Batch:
    """One batch of cases as the protocol runs it, handed to every hook of the batch.

    Attributes:
        cases: the cases that run (skipped ones are not here).
        state: what the study's hooks share within this batch (a detector's verdicts on every case,
            the maps of each case...): set in :meth:`HistoryStudy.start_batch` or :meth:`HistoryStudy.setup`,
            read in ``row``/``rows``/``finish``. It lives as long as the batch, never on the study.
        run_state: what lives as long as the runner's invocation (:class:`RunState`: objects built once,
            the side logs' paths).
    """

    cases: list[CaseLike]
    state: dict[str, Any] = field(default_factory=dict)
    run_state: RunState = field(default_factory=RunState)


@dataclass
class CaseRun:
    """One case of a batch, once its history is prefilled: what :meth:`HistoryStudy.row` sees.

    Attributes:
        case: the study's case.
        history: the prefilled history (shared by every condition; never edited).
        conditions: the supported conditions, prepared, by name.
        questions: the case's questions.
        originals: the same conditions before preparation (their spans, layers...).
        extra: whatever the study's :meth:`HistoryStudy.setup` put there (spans, costs...).
        batch: the batch the case runs in (its shared ``state``).
    """

    case: CaseLike
    history: kvprobe.History
    conditions: dict[str, kvprobe.Condition]
    questions: list[Question]
    originals: dict[str, kvprobe.Condition] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    batch: Batch = field(default_factory=lambda: Batch([]))


def use_chat(tokenizer: Any, chat: bool | None) -> bool:
    """``chat``, or when None whether the tokenizer has a chat template (an instruct model then ends its
    answer with EOS). Every study's ``chat`` field means this."""
    return chat if chat is not None else getattr(tokenizer, "chat_template", None) is not None


def prepared(model: kvprobe.Model, history: kvprobe.History, condition: kvprobe.Condition) -> kvprobe.Condition:
    """``condition`` prepared once for every question (``kvprobe.Prepared.of``), unless it depends on the
    question or selects keys per query (those are applied per row)."""
    if condition.question_dependent or isinstance(condition, SelectionAccess):
        return condition
    return kvprobe.Prepared.of(model, history, condition)


class InvalidParameter(ValueError):
    """A study parameter whose value makes no sense (named, with the value and what is allowed)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field_name = field_name


def require_at_least(study: Any, **minimums: int | float) -> None:
    """Refuse fields below their minimum (``None`` passes: it means "all" or "no limit").

    Call it from a study's ``__post_init__`` so bad values fail when the study is built,
    before any model loads::

        def __post_init__(self):
            require_at_least(self, n_groups=1, max_new_tokens=1, cases_per_batch=1)
    """
    for name, low in minimums.items():
        value = getattr(study, name)
        values = value if isinstance(value, (tuple, list)) else (value,)
        for v in values:
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v < low):
                raise InvalidParameter(name, f"must be at least {low}, got {value!r}")


def require_choices(study: Any, **choices: Sequence[Any]) -> None:
    """Refuse fields (or tuple fields' items) outside their allowed values."""
    for name, allowed in choices.items():
        value = getattr(study, name)
        values = value if isinstance(value, (tuple, list)) else (value,)
        bad = [v for v in values if v not in allowed]
        if bad:
            raise InvalidParameter(name, f"{bad[0]!r} is not one of {', '.join(map(str, allowed))}")


def positions_needed(model: kvprobe.Model, history_tokens: int, questions: Sequence[str], max_new_tokens: int,
                     framing: int) -> tuple[int, int]:
    """(positions a case needs, tokens of its longest question): the history, the longest question (no
    special tokens), ``framing`` tokens for the chat template around a question, and the answer budget."""
    longest = max((len(model.tokenizer.encode(q, add_special_tokens=False)) for q in questions), default=0)
    return history_tokens + longest + framing + max_new_tokens, longest


def require_fits(model: kvprobe.Model, case_id: str, history_tokens: int, questions: Sequence[str],
                 max_new_tokens: int, framing: int, field_name: str, advice: str = "") -> None:
    """Refuse (:class:`InvalidParameter` naming ``field_name``) a case whose history, longest question and answer
    budget exceed the model's positions: studies never truncate or extend RoPE. ``advice`` ends the message;
    ``{room}`` in it becomes the largest answer budget that would fit.

    Example: ``require_fits(model, "c0", len(history), [q.text for q in questions], 128, 32, "lengths")``.
    """
    limit = model.context_length
    need, longest = positions_needed(model, history_tokens, questions, max_new_tokens, framing)
    if limit is not None and need > limit:
        room = limit - need + max_new_tokens
        if room < 1:  # no answer budget fits: never suggest a budget below 1
            advice = (f"; the history and question alone need {need - max_new_tokens} positions, so no answer "
                      "budget fits: a shorter input or a model with a longer window")
        raise InvalidParameter(field_name, f"{case_id}: {history_tokens} history tokens + a {longest}-token question "
                               f"+ {max_new_tokens} answer tokens exceed {model.name}'s {limit} positions (no RoPE "
                               "extension)" + advice.format(room=room))


class Study:
    """Base of every study: what the runner (:func:`kvprobe.studies.common.runner.run_study`) needs.

    A study is a ``@dataclass`` subclass whose fields are its parameters, each with a ``#:``
    comment above it (``kvprobe run NAME --help`` shows it); what a run builds or appends to lives in
    the runner's :class:`RunState`, not in fields. :class:`HistoryStudy` adds the shared run loop; a study
    that is not about histories under conditions (detection, the request workload)
    subclasses this class and implements :meth:`run_cases` itself.
    """

    #: The study's name (``kvprobe run NAME``; the directory under ``runs/``).
    name: ClassVar[str] = ""
    #: The study's module of verbatim paper strings (its ``strings.py``; a tuple when it also quotes a shared
    #: one), or None: ``config.json`` records their digest (:func:`strings_sha256`), so a run directory never
    #: mixes two prompt versions.
    strings: ClassVar[ModuleType | tuple[ModuleType, ...] | None] = None
    #: The side logs the study appends to beside ``results.jsonl`` (timings, costs), by name: their file
    #: names in the run directory. The runner puts their paths in :attr:`RunState.logs`.
    side_logs: ClassVar[Mapping[str, str]] = {}
    cases_per_batch: int

    # ------------------------------------------------------------------ what a study supplies
    def make_cases(self) -> Sequence[CaseLike]:
        """The cases, each with a unique ``case_id`` (called once per parameter values: use :meth:`cases`)."""
        raise NotImplementedError

    def data_sha256(self) -> str | None:
        """A digest of the study's data beyond its case ids (a released file's content, generated rows), or
        None. ``config.json`` records it as ``data_sha256``."""
        return None

    def config_extra(self) -> dict[str, Any]:
        """What else decides the rows besides the fields and the digests (derived constants, a detector's
        settings...); added to ``config.json`` as is."""
        return {}

    def preflight(self, model: kvprobe.Model, cases: Sequence[CaseLike]) -> None:
        """Refuse, before a run writes anything, what would fail part way (a case too long for the model's
        window, see :func:`require_fits`); called by the runner with every case. Default: nothing to check."""

    # ------------------------------------------------------------------ what the protocol computes
    def cases(self) -> list[CaseLike]:
        """The cases (:meth:`make_cases`), computed once for the study's current parameter values."""
        key = json.dumps([repr(getattr(self, f.name)) for f in public_fields(type(self))])
        memo = self.__dict__.get("_protocol_cases")
        if memo is None or memo[0] != key:
            memo = (key, list(self.make_cases()))
            object.__setattr__(self, "_protocol_cases", memo)
        return memo[1]

    def config(self) -> dict[str, Any]:
        """Every parameter that decides the rows (``config.json``'s ``study_config``): the fields and
        ``case_ids_sha256`` (:func:`study_parameters`), ``data_sha256`` (:meth:`data_sha256`),
        ``strings_sha256`` (:attr:`strings`), then :meth:`config_extra`. Studies do not override it."""
        cfg = study_parameters(self)
        if (digest := self.data_sha256()) is not None:
            cfg["data_sha256"] = digest
        if self.strings is not None:
            cfg["strings_sha256"] = strings_sha256(self.strings)
        cfg.update(self.config_extra())
        return cfg

    def group(self, case: CaseLike) -> str:
        """The resampling group of a case (``case.group`` by default)."""
        return str(case.group)  # type: ignore[attr-defined]

    def run_cases(self, model: kvprobe.Model, cases: list[CaseLike], state: RunState | None = None
                  ) -> list[list[dict[str, Any]]]:
        """The rows of each case of one batch; ``state``: the runner's invocation state (a fresh one when
        called directly)."""
        raise NotImplementedError


class HistoryStudy(Study):
    """Base of every history study (subclass it as a ``@dataclass``; see the module docstring).

    Class attributes a study sets:
        name: the study's name (``kvprobe run NAME``; the directory under ``runs/``).
        skip_prepare: condition names applied per row rather than prepared once (rarely needed).

    Fields every study has (declare them in the subclass with its own defaults):
        max_new_tokens: the greedy answer budget (0: score candidates only).
        cases_per_batch: consecutive cases answered in one batch.
    """

    #: Condition names applied per row rather than prepared once (derived-note times its own preparation).
    skip_prepare: ClassVar[tuple[str, ...]] = ()
    max_new_tokens: int

    # ------------------------------------------------------------------ what a study supplies
    def prompt(self, model: kvprobe.Model, case: CaseLike) -> kvprobe.Prompt:
        """The history prompt of ``case`` (prefilled once per case), built with
        :func:`~kvprobe.studies.common.chat_template.study_prompt` (which decides the chat-template settings)."""
        raise NotImplementedError

    def questions(self, model: kvprobe.Model, case: CaseLike, history: kvprobe.History) -> list[Question]:
        """The questions asked of the case's history."""
        raise NotImplementedError

    def conditions(self, model: kvprobe.Model, case: CaseLike, history: kvprobe.History
                   ) -> Mapping[str, kvprobe.Condition]:
        """The candidate conditions of the case, by name (unsupported ones are left out with a warning)."""
        raise NotImplementedError

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        """The study's own columns of the row of ``condition`` (the protocol adds :data:`COMMON_COLUMNS`).

        ``answers`` holds every condition's answer to this question (``answers[condition]`` is the
        row's own), for columns that compare conditions (margin changes)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ hooks with defaults
    def reuse_key(self, case: CaseLike) -> Hashable | None:
        """Consecutive cases of a batch with the same non-None key share their prompt's common prefix K/V."""
        return None

    def prefill_chunk_size(self) -> int | None:
        """History tokens per forward when a case's history is prefilled (None: the engine's default for the
        model's device, :func:`kvprobe.forward.default_chunk_size`); a study whose paper states its chunks
        returns them (FactConsolidation: 128)."""
        return None

    def start_batch(self, model: kvprobe.Model, batch: Batch) -> None:
        """Called once per batch with the cases that run (``batch.cases``, not the skipped ones), before any
        is prefilled: work shared by the batch's cases (e.g. a detector's verdicts on all of them in one
        generation batch), kept in ``batch.state``."""

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """Called once per case after its conditions are prepared (record spans, costs... in ``run.extra``)."""

    def question_conditions(self, run: CaseRun, question: Question) -> dict[str, kvprobe.Condition]:
        """The conditions one question is answered under (all of the case's by default)."""
        return run.conditions

    def answer(self, model: kvprobe.Model, items: Sequence[tuple[kvprobe.History, kvprobe.Request]],
               candidates: Sequence[Sequence[str]] | None) -> list[decoding.Answer]:
        """Answer every row of a batch at once (override for another decoding protocol)."""
        if not items:
            return []
        return decoding.answer(model, items, candidates, max_new_tokens=self.max_new_tokens)

    def rows(self, run: CaseRun, question: Question, answers: dict[str, decoding.Answer]) -> list[dict[str, Any]]:
        """The rows of one question: one per answered condition (override to share one answer between
        several row conditions, as the record-history policies do)."""
        return [{**self.row(run, question, name, answers), **self.common(run, question, name, a.generation)}
                for name, a in answers.items()]

    def skip(self, model: kvprobe.Model, case: CaseLike) -> list[dict[str, Any]] | None:
        """The rows standing in for a case that is not run (e.g. its history is too long), or None to run
        it (the default). A skipped case is neither prefilled nor answered; its rows keep their place in
        the batch that :meth:`finish` sees."""
        return None

    def finish(self, model: kvprobe.Model, rows: list[list[dict[str, Any]]], batch: Batch
               ) -> list[list[dict[str, Any]]]:
        """Post-process the rows of a batch, one list per case in case order, skipped cases included (e.g.
        grade them all at once); the identity by default."""
        return rows

    # ------------------------------------------------------------------ the loop
    def common(self, run: CaseRun, question: Question, condition: str,
               generation: decoding.Generation | None) -> dict[str, Any]:
        """The :data:`COMMON_COLUMNS` of one row."""
        g = generation
        return {"case_id": run.case.case_id, "group": self.group(run.case), "condition": condition,
                "query": question.query, "history_tokens": len(run.history),
                "prompt_sha256": run.history.rendered.sha256, "output": None if g is None else g.text,
                "stop_reason": None if g is None else g.stop_reason,
                "output_tokens": None if g is None else g.n_tokens}

    def prefill(self, model: kvprobe.Model, cases: Sequence[CaseLike]) -> list[kvprobe.History]:
        """Each case's history: identical prompts share one, equal :meth:`reuse_key` reuse the prefix."""
        out: list[kvprobe.History] = []
        previous: tuple[Hashable | None, kvprobe.Prompt, kvprobe.History] | None = None
        for case in cases:
            prompt, key = self.prompt(model, case), self.reuse_key(case)
            if previous is not None and previous[1] == prompt:
                history = previous[2]
            else:
                reuse = previous[2] if previous is not None and key is not None and previous[0] == key else None
                history = model.prefill(prompt, chunk_size=self.prefill_chunk_size(), reuse=reuse)
            previous = (key, prompt, history)
            out.append(history)
        return out

    def run_cases(self, model: kvprobe.Model, cases: list[CaseLike], state: RunState | None = None
                  ) -> list[list[dict[str, Any]]]:
        """The rows of each case of a batch (the runner's protocol); one batched answer call."""
        skipped = {i: rows for i, case in enumerate(cases) if (rows := self.skip(model, case)) is not None}
        live = Batch([case for i, case in enumerate(cases) if i not in skipped], run_state=state or RunState())
        self.start_batch(model, live)
        runs: list[CaseRun] = []
        for case, history in zip(live.cases, self.prefill(model, live.cases)):
            candidates = supported(self.name, history, dict(self.conditions(model, case, history)))
            conditions = {name: c if name in self.skip_prepare else prepared(model, history, c)
                          for name, c in candidates.items()}
            run = CaseRun(case, history, conditions, list(self.questions(model, case, history)), candidates,
                          batch=live)
            self.setup(model, run)
            runs.append(run)
        keys, items, candidates_ = [], [], []
        asked: dict[tuple[str, str, str], list[str]] = {}
        for run in runs:
            for q in run.questions:
                names = asked[(run.case.case_id, q.query, q.text)] = []
                for name, condition in self.question_conditions(run, q).items():
                    names.append(name)
                    keys.append((run.case.case_id, q.query, q.text, name))
                    items.append((run.history, kvprobe.Request(q.text, condition)))
                    candidates_.append(q.candidates)
        if len(set(keys)) != len(keys):
            raise ValueError(f"{self.name}: two rows share (case, query, question, condition); "
                             "give each question of a case its own query name or text")
        scored = any(c is not None for c in candidates_)
        got = dict(zip(keys, self.answer(model, items, candidates_ if scored else None)))
        batch = []
        for run in runs:
            rows = []
            for q in run.questions:
                answers = {name: got[(run.case.case_id, q.query, q.text, name)]
                           for name in asked[(run.case.case_id, q.query, q.text)]}
                rows += self.rows(run, q, answers)
            check_unchanged(run.history, run.case.case_id)
            batch.append(rows)
        if skipped:
            ran = iter(batch)
            batch = [skipped[i] if i in skipped else next(ran) for i in range(len(cases))]
        return self.finish(model, batch, live)
