"""The session-bias study: full access, soft session-order bias and hard mask on conversational memory.

Paper: app:guarded_validation (soft bias, L5924-5990), app:v41_public_hard (hard
mask, L6185-6215); spec partD section 10, partE E1-E3.

One case is one question (LongMemEval-Oracle, or the seeded fixtures of
``fixtures.py`` in the same schema). Per case the history of ``history.py`` is
prefilled once, without any bias (cases with an identical prompt in one batch,
e.g. a fixture question and its abstention variant, share one prefill); each arm
(``full``, ``soft``, ``hard``; the row's ``condition``) then asks the question
on its own fork of that cache and greedily generates at most ``max_new_tokens``
tokens (EOS stop, native chat template; paper E1: 128, E3: 256), every (case,
arm) row of a batch in one ``decoding.answer`` call. The run loop (prefill, the
batched call, the common row columns, ``check_unchanged`` proving the prefilled
K/V untouched after each case) is the protocol's
(``studies.common.protocol.HistoryStudy``). Rows are graded by ``grading.RuleGrader``,
a batch at a time (regrade a run with any :class:`grading.Grader` via
``grading.grade_run``).

``active``: the soft bias (hence the hard mask) changes at least one position,
i.e. g(q) = 1 and S > 1. The paper saw identical answers on inactive pairs
(L6197); ``skip_inactive=True`` relies on it and copies the full answer to the
other arms of inactive questions (``copied_from_full``), saving their decoding;
by default every arm generates.

``max_history_tokens``: histories longer than this are not run; their rows carry
``skipped: "history_too_long"`` and no answer (the paper truncates nothing, so by
default there is no limit; set it to a small model's context length).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.studies.common.protocol import (CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least,
                                      require_choices, use_chat)
from kvprobe.studies.common.protocol import strings_sha256, study_parameters
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

    @property
    def case_id(self) -> str:
        return self.question.question_id


@dataclass
class SessionBiasStudy(HistoryStudy):
    """Full / soft / hard arms on LongMemEval-schema questions (one question per case, one row per arm)."""

    name: ClassVar[str] = "session-bias"
    #: "fixtures" (seeded synthetic histories) or the path of longmemeval_oracle.json.
    source: str = FIXTURES
    #: Questions to run: validation (the paper's 380 of 500), development or all.
    split: str = "validation"
    #: Run the first N questions of the split, in file order (None: all).
    n: int | None = None
    #: Base questions of the fixtures (ignored for a file).
    fixture_bases: int = fixtures.N_BASES
    #: Seed of the fixtures (ignored for a file).
    fixture_seed: int = fixtures.SEED
    #: Arms to run, a subset of full, soft and hard.
    arms: tuple[str, ...] = history.ARMS
    #: Attention factor of the oldest session under the soft bias (the paper: 1/2).
    oldest_weight: float = 0.5
    #: Greedy answer budget in tokens (the paper: 128 for the soft bias, 256 for the hard-mask comparison).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the native chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Session order in the history: timestamp (sorted by date, stably) or file.
    order: str = "timestamp"
    #: Copy the full answer to the other arms of inactive questions instead of generating them.
    skip_inactive: bool = False
    #: Skip questions whose history is longer than this many tokens (None: no limit).
    max_history_tokens: int | None = None
    #: Questions answered in one batch.
    cases_per_batch: int = 2
    _questions: list[data.Question] | None = field(default=None, repr=False, compare=False)
    _cases: list[SessionBiasCase] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.arms = tuple(self.arms)
        if not self.arms:
            raise InvalidParameter("arms", f"must be a non-empty subset of {history.ARMS}, got {self.arms}")
        require_choices(self, arms=history.ARMS, split=data.SPLITS, order=history.ORDERS)
        if self.skip_inactive and "full" not in self.arms:
            raise InvalidParameter("skip_inactive", "copies the full answer, so arms must include 'full'")
        require_at_least(self, n=1, fixture_bases=1, max_new_tokens=1, max_history_tokens=1, cases_per_batch=1)

    # ------------------------------------------------------------------ data

    def source_questions(self) -> list[data.Question]:
        """Every question of the source (before the split; loaded once)."""
        if self._questions is None:
            self._questions = (fixtures.generate(self.fixture_bases, self.fixture_seed) if self.source == FIXTURES
                               else data.load_longmemeval(self.source))
        return self._questions

    def cases(self) -> list[SessionBiasCase]:
        """The first ``n`` questions of the split, in file order."""
        if self._cases is None:
            everything = self.source_questions()
            chosen = data.select_split(everything, self.split)
            crossing = data.groups_crossing(everything)
            if self.n is not None:
                chosen = chosen[: self.n]
            self._cases = [SessionBiasCase(q, self.split, q.group in crossing) for q in chosen]
        return self._cases

    def config(self) -> dict[str, Any]:
        """Every parameter that decides the rows."""
        cfg = study_parameters(self)
        cases = self.cases()
        cfg.update({
            "dataset_sha256": data.dataset_hash(c.question for c in cases),
            "dev_quotas": data.dev_quotas(self.source_questions()),
            "grader": grading.RuleGrader.name,
            "strings_sha256": strings_hash(),
            "template_kwargs": strings.TEMPLATE_KWARGS,
        })
        return cfg

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
                 "condition": arm, "query": QUERY,
                 "skipped": "history_too_long", "history_tokens": n_tokens, "prompt_sha256": rendered.sha256,
                 "gate": None, "active": None, "output": None, "stop_reason": None, "output_tokens": None,
                 "correct": None, "grader": None} for arm in self.arms]

    def questions(self, model: kvprobe.Model, case: SessionBiasCase, h: kvprobe.History) -> list[Question]:
        return [Question(QUERY, history.question_text(case.question))]

    def conditions(self, model: kvprobe.Model, case: SessionBiasCase, h: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        return self._arms(model, case, h).conditions

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """The arms' facts (gate, activity, biased and content tokens) and the session layout."""
        run.extra["layout"] = self._prompt(model, run.case)[1]
        run.extra["arms"] = self._arms(model, run.case, run.history)

    def question_conditions(self, run: CaseRun, question: Question) -> dict[str, kvprobe.Condition]:
        """Every arm; only ``full`` for an inactive question when ``skip_inactive`` copies its answer."""
        if self.skip_inactive and not run.extra["arms"].active:
            return {"full": run.conditions["full"]}
        return run.conditions

    def rows(self, run: CaseRun, question: Question, answers: dict[str, decoding.Answer]) -> list[dict[str, Any]]:
        """One row per arm; an arm that was not answered copies the full arm's answer."""
        out = []
        for arm in run.conditions:
            generation = answers.get(arm, answers["full"]).generation
            out.append({**self._arm_columns(run, arm, copied=arm not in answers),
                        **self.common(run, question, arm, generation)})
        return out

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        return self._arm_columns(run, condition, copied=False)

    def finish(self, model: kvprobe.Model, batch: list[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
        """Grade every answered row of the batch at once (``grading.RuleGrader``)."""
        graded = [r for rows in batch for r in rows if not r["skipped"]]
        for r, v in zip(graded, grading.RuleGrader().grade([grading.task_of(r) for r in graded])):
            r.update(correct=v.correct, grade_explanation=v.explanation, grader=v.grader)
        return batch

    # ------------------------------------------------------------------ columns

    def _arms(self, model: kvprobe.Model, case: SessionBiasCase, h: kvprobe.History) -> history.Arms:
        layout = self._prompt(model, case)[1]
        return history.arms(h, layout, history.question_text(case.question), self.oldest_weight, self.arms)

    def _case_columns(self, case: SessionBiasCase, layout: history.SessionLayout) -> dict[str, Any]:
        q = case.question
        return {
            "question_type": q.question_type, "is_abstention": q.is_abstention, "update": q.is_update,
            "split": case.split, "group_crosses_split": case.crosses_split, "question": q.question,
            "reference": q.answer, "n_sessions": layout.n_sessions, "sessions_reordered": layout.reordered,
            "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
            "case_complete": True,
        }

    def _arm_columns(self, run: CaseRun, arm: str, copied: bool) -> dict[str, Any]:
        a, n = run.extra["arms"], len(run.history)
        return {
            **self._case_columns(run.case, run.extra["layout"]), "skipped": None,
            "content_tokens": a.content_tokens, "biased_tokens": a.biased_tokens if arm == "soft" else 0,
            "hidden_tokens": int(run.originals[arm].hidden_positions(n, "cpu").sum()),
            "gate": a.gate, "active": a.active, "copied_from_full": copied,
            "correct": None, "grade_explanation": None, "grader": None,
        }


def strings_hash() -> str:
    """SHA-256 of every prompt string of ``strings.py`` (part of the config)."""
    return strings_sha256(strings)


def run(model: kvprobe.Model, out_dir: Path | str, study: SessionBiasStudy | None = None, progress: bool = True):
    """``studies.common.runner.run_study`` of the study (default: fixtures, validation split)."""
    from kvprobe.studies.common.runner import run_study

    return run_study(study or SessionBiasStudy(), model, out_dir, progress=progress)
