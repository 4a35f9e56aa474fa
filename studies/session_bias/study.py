"""The session-bias study: full access, soft session-order bias and hard mask on conversational memory.

Paper: app:guarded_validation (soft bias, L5924-5990), app:v41_public_hard (hard
mask, L6185-6215); spec partD section 10, partE E1-E3.

One case is one question (LongMemEval-Oracle: ``--source hf:xiaowu0162/longmemeval`` or a local file; or
the seeded fixtures of ``fixtures.py`` in the same schema). Per case the history of ``history.py`` is
prefilled once, without any bias (cases with an identical prompt in one batch,
e.g. a fixture question and its abstention variant, share one prefill); each condition
(``full``, ``soft``, ``hard``, and on request the development policies and the
query-aware methods at a fixed capacity, ``history.CONDITIONS``; the row's ``condition``) then asks the
question on its own fork of that cache and greedily generates at most ``max_new_tokens``
tokens (EOS stop, native chat template; paper E1: 128, E3: 256), every (case,
condition) row of a batch in one ``decoding.answer`` call. The run loop (prefill, the
batched call, the common row columns, ``check_unchanged`` proving the prefilled
K/V untouched after each case) is the protocol's
(``studies.common.protocol.HistoryStudy``). Rows are graded by ``grading.RuleGrader``,
a batch at a time (regrade a run with any :class:`grading.Grader` via
``grading.grade_run``).

``active``: the soft bias (hence the hard mask) changes at least one position,
i.e. g(q) = 1 and S > 1. The paper saw identical answers on inactive pairs
(L6197); ``skip_inactive=True`` relies on it and copies the full answer to the
other conditions of inactive questions (``copied_from_full``), saving their decoding;
by default every condition generates. A session-order condition that changes no position of a question
(an ungated development policy is active whenever S > 1) is copied; the query-aware methods always generate.

Publisher sessions: every row records its question's publisher session ids (``session_ids``: the
haystack and answer session ids, never shown to the model) and whether its publisher component, over
every question of the source, crosses the development/validation split (``publisher_crosses_split``);
the summary groups questions by those components (``summary.py``).

``max_history_tokens``: histories longer than this are not run; their rows carry
``skipped: "history_too_long"`` and no answer (the paper truncates nothing, so by
default there is no limit; set it to a small model's context length).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.published_data import MissingExtraError
from kvprobe.studies.common.chat_template import template_kwargs
from kvprobe.interventions.capacity import observation_length, resident_tokens
from kvprobe.studies.common.protocol import (Batch, CaseRun, HistoryStudy, InvalidParameter, Question,
                                             require_at_least, require_choices, use_chat)
from . import fixtures, grading, history, data, strings

#: Answer budget (paper E1, app:v8_public L5916: "up to 128 new tokens"; E3 used 256).
MAX_NEW_TOKENS = 128
FIXTURES = "fixtures"
#: The row's ``query``: every case asks its one question.
QUERY = "question"


@dataclass(frozen=True)
class SessionBiasCase:
    """One question of the selected split."""

    question: data.Question
    split: str
    crosses_split: bool
    #: The question's publisher component (over every question of the source) crosses the split.
    publisher_crosses_split: bool = False

    @property
    def case_id(self) -> str:
        return self.question.question_id


@dataclass
class SessionBiasStudy(HistoryStudy):
    """Full / soft / hard conditions on LongMemEval-schema questions (one question per case, one row per
    condition)."""

    name: ClassVar[str] = "session-bias"
    strings: ClassVar[ModuleType] = strings
    #: "fixtures" (seeded synthetic histories), or LongMemEval (the paper's data): hf:xiaowu0162/longmemeval (the oracle
    #: file; needs kvprobe[data]), or the path of longmemeval_oracle.json or of a folder holding it.
    source: str = FIXTURES
    #: Questions to run: validation (the paper's 380 of 500), development or all.
    split: str = "validation"
    #: Run the first N questions of the split, in file order (None: all).
    n: int | None = None
    #: Base questions of the fixtures (ignored for a file).
    fixture_bases: int = fixtures.N_BASES
    #: Seed of the fixtures (ignored for a file).
    fixture_seed: int = fixtures.SEED
    #: Extra small-talk exchanges per fixture session (0: the short fixtures; ignored for a file).
    fixture_fillers: int = 0
    #: Conditions to run: full, soft, hard; the development policies soft-half, soft-quarter,
    #: soft-half-ungated, soft-quarter-ungated; the query-aware recent-pages, quest, finch, refreshkv.
    condition_set: tuple[str, ...] = history.PRIMARY
    #: Attention factor of the oldest session under the soft bias (the paper: 1/2).
    oldest_weight: float = 0.5
    #: The soft bias (hence the hard mask) follows the question gate g(q) (the paper: yes).
    gated: bool = True
    #: Fixed capacity K of the query-aware conditions, in tokens (the paper's public inputs: 512).
    capacity: int = history.PUBLIC_CAPACITY
    #: Greedy answer budget in tokens (the paper: 128 for the soft bias, 256 for the hard-mask comparison).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the native chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Session order in the history: timestamp (sorted by date, stably) or file.
    order: str = "timestamp"
    #: Copy the full answer to the other conditions of inactive questions instead of generating them.
    skip_inactive: bool = False
    #: Skip questions whose history is longer than this many tokens (None: no limit).
    max_history_tokens: int | None = None
    #: Questions answered in one batch.
    cases_per_batch: int = 2

    def __post_init__(self) -> None:
        self.condition_set = tuple(self.condition_set)
        if not self.condition_set:
            raise InvalidParameter("condition_set", f"must be a non-empty subset of {history.CONDITIONS}, "
                                   f"got {self.condition_set}")
        require_choices(self, condition_set=history.CONDITIONS, split=data.SPLITS, order=history.ORDERS)
        if self.skip_inactive and "full" not in self.condition_set:
            raise InvalidParameter("skip_inactive", "copies the full answer, so condition_set must include 'full'")
        require_at_least(self, n=1, fixture_bases=1, fixture_fillers=0, max_new_tokens=1, max_history_tokens=1,
                         cases_per_batch=1, capacity=1)
        if self.fixture_fillers > len(fixtures.LONG_FILLERS):
            raise InvalidParameter("fixture_fillers", f"must be at most {len(fixtures.LONG_FILLERS)}, "
                                   f"got {self.fixture_fillers}")
        if not 0 < self.oldest_weight < 1:
            raise InvalidParameter("oldest_weight", f"must be in (0, 1) (1 is retention: the full condition), "
                                   f"got {self.oldest_weight}")
        if self.source != FIXTURES:
            try:  # read the file now, so a bad source fails before any model loads
                self.cases()
            except (OSError, MissingExtraError, data.LongMemEvalFormatError) as e:
                raise InvalidParameter("source", str(e)) from e

    # ------------------------------------------------------------------ data

    def source_questions(self) -> list[data.Question]:
        """Every question of the source (before the split), generated or read on each call (the cases are
        computed once; the config reads the development quotas)."""
        return (fixtures.generate(self.fixture_bases, self.fixture_seed, self.fixture_fillers)
                if self.source == FIXTURES
                else data.load_longmemeval(self.source))

    def make_cases(self) -> list[SessionBiasCase]:
        """The first ``n`` questions of the split, in file order."""
        everything = self.source_questions()
        chosen = data.select_split(everything, self.split)
        crossing = data.groups_crossing(everything)
        publisher = data.publisher_crossing(everything)
        if self.n is not None:
            chosen = chosen[: self.n]
        return [SessionBiasCase(q, self.split, q.group in crossing, q.question_id in publisher) for q in chosen]

    def data_sha256(self) -> str:
        """The digest of the questions run (``data.dataset_hash``)."""
        return data.dataset_hash(c.question for c in self.cases())

    def config_extra(self) -> dict[str, Any]:
        """The development quotas of the source, the grader and the chat template's arguments."""
        return {"dev_quotas": data.dev_quotas(self.source_questions()), "grader": grading.RuleGrader.name,
                "template_kwargs": template_kwargs()}

    # ------------------------------------------------------------------ the protocol's parts

    def group(self, case: SessionBiasCase) -> str:
        """The bootstrap unit: a question and its abstention variant move together."""
        return case.question.group

    def _prompt(self, model: kvprobe.Model, case: SessionBiasCase) -> tuple[kvprobe.Prompt, history.SessionLayout]:
        return history.build_prompt(case.question, chat=use_chat(model.tokenizer, self.chat),
                                    order=self.order)

    def prompt(self, model: kvprobe.Model, case: SessionBiasCase) -> kvprobe.Prompt:
        return self._prompt(model, case)[0]

    def prefill(self, model: kvprobe.Model, cases: list[SessionBiasCase]) -> list[kvprobe.History]:
        """One history per distinct prompt of the batch, consecutive or not (a fixture question and its
        abstention variant need not be neighbours in a LongMemEval file)."""
        prefilled: dict[str, kvprobe.History] = {}
        out = []
        for case in cases:
            prompt = self.prompt(model, case)
            key = json.dumps([prompt.system, prompt.segments])
            if key not in prefilled:
                prefilled[key] = model.prefill(prompt)
            out.append(prefilled[key])
        return out

    def skip(self, model: kvprobe.Model, case: SessionBiasCase) -> list[dict[str, Any]] | None:
        """Rows without an answer for a question whose history is longer than ``max_history_tokens``."""
        if self.max_history_tokens is None:
            return None
        prompt, layout = self._prompt(model, case)
        rendered, ids, _ = model.tokenize(prompt)
        n_tokens = int(ids.shape[0])
        if n_tokens <= self.max_history_tokens:
            return None
        return [{**self._case_columns(case, layout), "case_id": case.case_id, "group": self.group(case),
                 "condition": condition, "query": QUERY,
                 "skipped": "history_too_long", "history_tokens": n_tokens, "prompt_sha256": rendered.sha256,
                 "gate": None, "active": None, "output": None, "stop_reason": None, "output_tokens": None,
                 "correct": None, "grader": None, "capacity": None} for condition in self.condition_set]

    def questions(self, model: kvprobe.Model, case: SessionBiasCase, h: kvprobe.History) -> list[Question]:
        return [Question(QUERY, history.question_text(case.question))]

    def conditions(self, model: kvprobe.Model, case: SessionBiasCase, h: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        return self._session_conditions(model, case, h).conditions

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """The conditions' facts (gate, activity, biased and content tokens) and the session layout."""
        run.extra["layout"] = self._prompt(model, run.case)[1]
        run.extra["conditions"] = self._session_conditions(model, run.case, run.history)
        run.extra["window"] = observation_length(model, run.history, history.question_text(run.case.question))

    def question_conditions(self, run: CaseRun, question: Question) -> dict[str, kvprobe.Condition]:
        """Every condition; with ``skip_inactive``, not the session-order conditions that change no position
        of this question (their rows copy the full answer)."""
        if not self.skip_inactive:
            return run.conditions
        negative = run.extra["conditions"].negative
        return {n: c for n, c in run.conditions.items() if negative.get(n, 1) > 0}

    def rows(self, run: CaseRun, question: Question, answers: dict[str, decoding.Answer]) -> list[dict[str, Any]]:
        """One row per condition; a condition that was not answered copies the full condition's answer."""
        out = []
        for condition in run.conditions:
            generation = answers.get(condition, answers["full"]).generation
            out.append({**self._condition_columns(run, condition, copied=condition not in answers),
                        **self.common(run, question, condition, generation)})
        return out

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        return self._condition_columns(run, condition, copied=False)

    def finish(self, model: kvprobe.Model, rows: list[list[dict[str, Any]]], batch: Batch
               ) -> list[list[dict[str, Any]]]:
        """Grade every answered row of the batch at once (``grading.RuleGrader``)."""
        graded = [r for case_rows in rows for r in case_rows if not r["skipped"]]
        for r, v in zip(graded, grading.RuleGrader().grade([grading.task_of(r) for r in graded])):
            r.update(correct=v.correct, grade_explanation=v.explanation, grader=v.grader)
        return rows

    # ------------------------------------------------------------------ columns

    def _session_conditions(self, model: kvprobe.Model, case: SessionBiasCase, h: kvprobe.History
                            ) -> history.SessionConditions:
        layout = self._prompt(model, case)[1]
        return history.session_conditions(h, layout, history.question_text(case.question), self.oldest_weight,
                                          self.condition_set, self.capacity, self.gated)

    def _case_columns(self, case: SessionBiasCase, layout: history.SessionLayout) -> dict[str, Any]:
        q = case.question
        return {
            "question_type": q.question_type, "is_abstention": q.is_abstention, "update": q.is_update,
            "split": case.split, "group_crosses_split": case.crosses_split, "question": q.question,
            "reference": q.answer, "n_sessions": layout.n_sessions, "sessions_reordered": layout.reordered,
            "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
            "case_complete": True, "session_ids": list(data.publisher_sessions(q)),
            "publisher_crosses_split": case.publisher_crosses_split,
        }

    def _condition_columns(self, run: CaseRun, condition: str, copied: bool) -> dict[str, Any]:
        c, n = run.extra["conditions"], len(run.history)
        biased = c.negative.get(condition, 0) if condition != "hard" else 0
        out = {
            **self._case_columns(run.case, run.extra["layout"]), "skipped": None,
            "content_tokens": c.content_tokens, "biased_tokens": biased,
            "hidden_tokens": int(run.originals[condition].hidden_positions(n, "cpu").sum()),
            "gate": c.gate, "active": c.active, "copied_from_full": copied,
            "correct": None, "grade_explanation": None, "grader": None, "capacity": None,
        }
        if condition in history.QUERY_AWARE:
            window = run.extra["window"]
            out.update(capacity=self.capacity, observation_tokens=window,
                       resident_tokens=resident_tokens(condition, n, window, self.capacity))
        return out


def run(model: kvprobe.Model, out_dir: Path | str, study: SessionBiasStudy | None = None, progress: bool = True):
    """``studies.common.runner.run_study`` of the study (default: fixtures, validation split)."""
    from kvprobe.studies.common.runner import run_study

    return run_study(study or SessionBiasStudy(), model, out_dir, progress=progress)
