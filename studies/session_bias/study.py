"""The session-bias study: full access, soft session-order bias and hard mask on conversational memory.

Paper: app:guarded_validation (soft bias, L5924-5990), app:v41_public_hard (hard
mask, L6185-6215); spec partD section 10, partE E1-E3.

One case is one question (LongMemEval-Oracle, or the seeded fixtures of
``fixtures.py`` in the same schema). Per case the history of ``history.py`` is
prefilled once, without any bias (cases with an identical prompt in one batch,
e.g. a fixture question and its abstention variant, share one prefill); each arm
(``full``, ``soft``, ``hard``) then asks the question on its own fork of that
cache and greedily generates at most ``max_new_tokens`` tokens (EOS stop, native
chat template; paper E1: 128, E3: 256), every (case, arm) row of a batch in one
``decoding.answer`` call. After each case ``check_unchanged`` proves the
prefilled K/V untouched. Rows are graded by ``grading.RuleGrader`` (regrade a run
with any :class:`grading.Grader` via ``grading.grade_run``).

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
from typing import Any

import kvprobe
from kvprobe import decoding

from ..conditions import check_unchanged
from ..runner import study_parameters
from . import fixtures, grading, history, longmemeval, strings
from .longmemeval import Question

#: Answer budget (paper E1, app:v8_public L5916: "up to 128 new tokens"; E3 used 256).
MAX_NEW_TOKENS = 128
FIXTURES = "fixtures"


@dataclass(frozen=True)
class SessionBiasCase:
    """One question of the selected split."""

    question: Question
    split: str
    crosses_split: bool

    @property
    def case_id(self) -> str:
        return self.question.question_id


@dataclass
class SessionBiasStudy:
    """Full / soft / hard arms on LongMemEval-schema questions (runner protocol).

    Args:
        source: ``"fixtures"`` (seeded synthetic histories) or the path of ``longmemeval_oracle.json``.
        split: ``"validation"`` (the paper's 380 of 500), ``"development"`` or ``"all"``.
        n: the first ``n`` questions of the split (file order); None = all.
        fixture_bases, fixture_seed: size and seed of the fixtures (ignored for a file).
        arms: subset of ``("full", "soft", "hard")``.
        oldest_weight: attention factor of the oldest session (paper: 1/2).
        max_new_tokens: answer budget (paper: 128 for the soft bias, 256 for the hard-mask comparison).
        chat: None = the native chat template when the tokenizer has one.
        order: ``"timestamp"`` (sort sessions by date, stably) or ``"file"``.
        skip_inactive: copy the full answer to the other arms of inactive questions.
        max_history_tokens: skip questions whose history is longer (None: no limit).
        cases_per_batch: questions per ``decoding.answer`` call.
    """

    source: str = FIXTURES
    split: str = "validation"
    n: int | None = None
    fixture_bases: int = fixtures.N_BASES
    fixture_seed: int = fixtures.SEED
    arms: tuple[str, ...] = history.ARMS
    oldest_weight: float = 0.5
    max_new_tokens: int = MAX_NEW_TOKENS
    chat: bool | None = None
    order: str = "timestamp"
    skip_inactive: bool = False
    max_history_tokens: int | None = None
    cases_per_batch: int = 2
    name: str = "session-bias"
    _questions: list[Question] | None = field(default=None, repr=False, compare=False)
    _cases: list[SessionBiasCase] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.arms = tuple(self.arms)
        if not self.arms or set(self.arms) - set(history.ARMS):
            raise ValueError(f"arms must be a non-empty subset of {history.ARMS}, got {self.arms}")
        if self.skip_inactive and "full" not in self.arms:
            raise ValueError("skip_inactive copies the full answer, so arms must include 'full'")
        if self.split not in longmemeval.SPLITS:
            raise ValueError(f"split must be one of {longmemeval.SPLITS}, got {self.split!r}")
        if self.order not in history.ORDERS:
            raise ValueError(f"order must be one of {history.ORDERS}, got {self.order!r}")
        if self.max_new_tokens < 1:
            raise ValueError("max_new_tokens must be at least 1")
        if self.n is not None and self.n < 1:
            raise ValueError(f"n must be at least 1, got {self.n}")

    # ------------------------------------------------------------------ data

    def questions(self) -> list[Question]:
        """Every question of the source (before the split; loaded once)."""
        if self._questions is None:
            self._questions = (fixtures.generate(self.fixture_bases, self.fixture_seed) if self.source == FIXTURES
                               else longmemeval.load_longmemeval(self.source))
        return self._questions

    def cases(self) -> list[SessionBiasCase]:
        """The first ``n`` questions of the split, in file order."""
        if self._cases is None:
            everything = self.questions()
            chosen = longmemeval.select_split(everything, self.split)
            crossing = longmemeval.groups_crossing(everything)
            if self.n is not None:
                chosen = chosen[: self.n]
            self._cases = [SessionBiasCase(q, self.split, q.group in crossing) for q in chosen]
        return self._cases

    def config(self) -> dict[str, Any]:
        """Every parameter that decides the rows."""
        cfg = study_parameters(self)
        cases = self.cases()
        cfg.update({
            "dataset_sha256": longmemeval.dataset_hash(c.question for c in cases),
            "dev_quotas": longmemeval.dev_quotas(self.questions()),
            "grader": grading.RuleGrader.name,
            "strings_sha256": strings_hash(),
            "template_kwargs": strings.TEMPLATE_KWARGS,
        })
        return cfg

    # ------------------------------------------------------------------ running

    def run_cases(self, model: kvprobe.Model, cases: list[SessionBiasCase]) -> list[list[dict[str, Any]]]:
        """The rows of each case; every (case, arm) row of the batch runs in one ``decoding.answer`` call."""
        chat = history.use_chat(model.tokenizer, self.chat)
        prefilled: dict[str, kvprobe.History] = {}
        plans: list[tuple[SessionBiasCase, dict[str, Any] | None]] = []
        items: list[tuple[kvprobe.History, kvprobe.Request]] = []
        for case in cases:
            q = case.question
            prompt, layout = history.build_prompt(q, chat=chat, order=self.order)
            key = json.dumps([prompt.system, prompt.segments])
            if key not in prefilled:
                if self.max_history_tokens is not None:
                    n_tokens = int(model.tokenize(prompt)[1].shape[0])
                    if n_tokens > self.max_history_tokens:
                        plans.append((case, {"skipped": "history_too_long", "history_tokens": n_tokens,
                                             "layout": layout}))
                        continue
                prefilled[key] = model.prefill(prompt)
            h = prefilled[key]
            asked = history.question_text(q)
            a = history.arms(h, layout, asked, self.oldest_weight, self.arms)
            run = a.conditions if (a.active or not self.skip_inactive) else {"full": a.conditions["full"]}
            first = len(items)
            items += [(h, kvprobe.Request(asked, cond)) for cond in run.values()]
            plans.append((case, {"history": h, "layout": layout, "asked": asked, "arms": a,
                                 "run": list(run), "first": first}))
        answers = decoding.answer(model, items, max_new_tokens=self.max_new_tokens) if items else []
        out = [self._case_rows(model, case, plan, answers) for case, plan in plans]
        grader = grading.RuleGrader()
        graded = [r for rows in out for r in rows if not r["skipped"]]
        for r, v in zip(graded, grader.grade([grading.task_of(r) for r in graded])):
            r.update(correct=v.correct, grade_explanation=v.explanation, grader=v.grader)
        return out

    def _case_rows(self, model: kvprobe.Model, case: SessionBiasCase, plan: dict[str, Any],
                   answers: list[decoding.Answer]) -> list[dict[str, Any]]:
        q, layout = case.question, plan["layout"]
        base = {
            "case_id": case.case_id, "group": q.group, "question_type": q.question_type,
            "is_abstention": q.is_abstention, "update": q.is_update, "split": case.split,
            "group_crosses_split": case.crosses_split, "question": q.question, "reference": q.answer,
            "n_sessions": layout.n_sessions, "sessions_reordered": layout.reordered,
            "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
            "case_complete": True,
        }
        if "skipped" in plan:
            return [{**base, "arm": arm, "skipped": plan["skipped"], "history_tokens": plan["history_tokens"],
                     "gate": None, "active": None, "output": None, "stop_reason": None, "n_tokens": None,
                     "correct": None, "grader": None} for arm in self.arms]
        h, a = plan["history"], plan["arms"]
        got = {name: answers[plan["first"] + k].generation for k, name in enumerate(plan["run"])}
        check_unchanged(h, case.case_id)
        rows = []
        for arm, cond in a.conditions.items():
            gen = got.get(arm, got["full"])
            rows.append({
                **base, "arm": arm, "skipped": None, "history_tokens": len(h), "prompt_sha256": h.rendered.sha256,
                "content_tokens": a.content_tokens, "biased_tokens": a.biased_tokens if arm == "soft" else 0,
                "hidden_tokens": int(cond.hidden_positions(len(h)).sum()),
                "gate": a.gate, "active": a.active, "copied_from_full": arm not in got,
                "output": gen.text, "stop_reason": gen.stop_reason, "n_tokens": gen.n_tokens,
                "correct": None, "grade_explanation": None, "grader": None,
            })
        return rows


def strings_hash() -> str:
    """SHA-256 of every prompt string of ``strings.py`` (part of the config)."""
    names = sorted(k for k in vars(strings) if k.isupper())
    blob = json.dumps({k: getattr(strings, k) for k in names}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def run(model: kvprobe.Model, out_dir: Path | str, study: SessionBiasStudy | None = None, progress: bool = True):
    """``studies.runner.run_study`` of the study (default: fixtures, validation split)."""
    from ..runner import run_study

    return run_study(study or SessionBiasStudy(), model, out_dir, progress=progress)
