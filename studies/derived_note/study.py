"""The derived-note / selective-refresh study (paper app:v5_propagation L5819-5870; spec partD section 8).

One case is one group in one note condition (``derived``: C present;
``neutral``: C's token interval filled from a neutral note). Per case the
history is prefilled once (the neutral case of a group reuses its derived
case's K/V up to C); the six conditions of ``history.py`` (full, mask A,
mask C, mask A+C, selective refresh, full recompute) each get their own row
state (prepared once, then every row of the batch is its own fork of it), and
every (case, query, condition) row of a batch of cases runs in one
``decoding.answer`` call: the canonical JSON candidates are scored
teacher-forced (current: new route vs A's route; historical: A's zone vs B's
zone) and a greedy answer of at most 40 tokens is generated (EOS stop, native
chat template). The run loop (prefill with reuse, the batched call, the common
row columns, the proof that the shared prefilled K/V are unchanged after each
case) is the protocol's (``studies.common.protocol.HistoryStudy``); this study
prepares its conditions itself, in :meth:`DerivedNoteStudy.setup`, to time them.

Rows carry no timings (the runner needs byte-reproducible rows). Operation cost
(paper L5847-5848: "cache crop/copy and recomputation, excluding shared prefill
and query generation") is measured per (case, condition) as the seconds to
prepare the condition's row state plus one single-row fork (copy) of it, and is
appended to its ``costs`` side log (:attr:`DerivedNoteStudy.side_logs`: ``operation_costs.jsonl`` next to
the results, JSON lines). Conditions a model cannot support are
left out with a warning (``studies.common.conditions.supported``), as in the MQuAKE study.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.rows import fork_rows
from kvprobe.studies.common.chat_template import template_kwargs
from kvprobe.studies.common.protocol import CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least, require_choices
from kvprobe.studies.common.runner import append_json_lines
from . import grading, data, history

#: Answer budget (paper L5843: 40-token limit for these models).
MAX_NEW_TOKENS = 40
#: Cases per batch: two groups (both note conditions of each), 48 rows.
CASES_PER_BATCH = 4
COSTS = "operation_costs.jsonl"


@dataclass
class DerivedNoteStudy(HistoryStudy):
    """Derived-note groups under the six conditions (both notes of a group, two queries each)."""

    name: ClassVar[str] = "derived-note"
    #: Each (case, condition)'s preparation cost, appended after the case is prepared (``summary.read_costs``).
    side_logs: ClassVar[dict[str, str]] = {"costs": COSTS}
    #: Every condition is prepared (and timed) by :meth:`setup`, not by the protocol.
    skip_prepare: ClassVar[tuple[str, ...]] = history.CONDITIONS
    #: Number of generated groups, each run with every note (the paper: 50).
    n_groups: int = data.N_GROUPS
    #: Generator seed of the groups.
    seed: int = data.SEED
    #: Note conditions: derived (note C present) and/or neutral (C's tokens from a neutral note).
    notes: tuple[str, ...] = data.NOTES
    #: Greedy answer budget in tokens (paper L5843: 40).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the native chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Cases answered in one batch (4: two groups, both notes of each, 48 rows).
    cases_per_batch: int = CASES_PER_BATCH

    def __post_init__(self) -> None:
        self.notes = tuple(self.notes)
        if not self.notes:
            raise InvalidParameter("notes", "give at least one note condition")
        require_choices(self, notes=data.NOTES)
        require_at_least(self, n_groups=1, max_new_tokens=1, cases_per_batch=1)

    def make_cases(self) -> list[data.Case]:
        """Every group in every note condition, group-major."""
        return data.generate_cases(self.n_groups, self.seed, tuple(self.notes))

    def data_sha256(self) -> str:
        """The generated groups' digest (:func:`data.dataset_hash`)."""
        return data.dataset_hash(data.generate_groups(self.n_groups, self.seed))

    def config_extra(self) -> dict[str, Any]:
        return {"conditions": list(history.CONDITIONS), "queries": list(data.QUERIES),
                "template_kwargs": template_kwargs()}

    def group(self, case: data.Case) -> str:
        return case.group.group_id

    def reuse_key(self, case: data.Case) -> str:
        # The note conditions of a group share every token before C: reuse those K/V.
        return case.group.group_id

    def prompt(self, model: kvprobe.Model, case: data.Case) -> kvprobe.Prompt:
        return history.case_prompt(model.tokenizer, case, self.chat)[0]

    def questions(self, model: kvprobe.Model, case: data.Case, h: kvprobe.History) -> list[Question]:
        return [Question(q.kind, q.question, q.candidates, q) for q in data.queries(case.group)]

    def conditions(self, model: kvprobe.Model, case: data.Case, h: kvprobe.History) -> dict[str, kvprobe.Condition]:
        return history.conditions(h, self._c_interval(model, case, h)[0])

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """Record the case's span facts (``run.extra["facts"]``); prepare each condition once, timing it
        with one fork of its state (``run.extra["costs"]``, appended to the ``costs`` side log)."""
        h = run.history
        c, neutral = self._c_interval(model, run.case, h)
        a = h.span("A")
        run.extra["facts"] = {"span_A": [a.start, a.end], "span_C": [c.start, c.end],
                              "neutral_offset": None if neutral is None else neutral.offset,
                              "neutral_note_tokens": None if neutral is None else neutral.note_tokens}
        costs = run.extra["costs"] = {}
        for name, condition in run.conditions.items():
            t0 = time.perf_counter()
            state = condition.prepare(model, h)
            fork_rows([state])  # the condition's own copy of the cache (cost only; discarded)
            costs[name] = time.perf_counter() - t0
            run.conditions[name] = kvprobe.Prepared(state, name)
        self._log_costs(model, run)

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        case, q, g = run.case, question.info, run.case.group
        out, scores = answers[condition].generation, answers[condition].scores
        margins = {name: a.scores.margin() for name, a in answers.items()}
        info = _info(run.conditions[condition])
        return {
            "group_id": g.group_id, "note": case.note, "old_listed_first": g.old_listed_first,
            "swapped": g.swapped, "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
            **run.extra["facts"],
            "recomputed_tokens": info.get("recomputed_tokens", 0), "reused_tokens": info.get("reused_tokens"),
            "reference": q.reference, "other": q.other, "candidates": list(q.candidates),
            "logp_right": round(scores[0], 6), "logp_other": round(scores[1], 6),
            "margin": round(margins[condition], 6),
            "margin_change_vs_full": (round(margins[condition] - margins["full"], 6)
                                      if "full" in margins else None),
            "margin_change_vs_mask_A": (round(margins[condition] - margins["mask-A"], 6)
                                        if "mask-A" in margins else None),
            **grading.grade_columns(out.text, out.stop_reason, q.reference, q.other),
            "case_complete": True,
        }

    def _c_interval(self, model: kvprobe.Model, case: data.Case, h: kvprobe.History
                    ) -> tuple[kvprobe.TokenSpan, history.NeutralInterval | None]:
        """The C token interval of the case's history and, for the neutral note, its neutral interval."""
        neutral = history.case_prompt(model.tokenizer, case, self.chat)[1]
        return history.c_interval(h, neutral), neutral

    def _log_costs(self, model: kvprobe.Model, run: CaseRun) -> None:
        if (path := run.batch.run_state.logs.get("costs")) is None:
            return
        costs, h = run.extra["costs"], run.history
        append_json_lines(path, [{"case_id": run.case.case_id, "note": run.case.note, "condition": name,
                                  "seconds": round(costs[name], 6), "history_tokens": len(h),
                                  "recomputed_tokens": _info(cond).get("recomputed_tokens", 0),
                                  "model": model.name} for name, cond in run.conditions.items()])


def _info(condition: kvprobe.Condition) -> dict[str, Any]:
    state = getattr(condition, "state", None)
    return dict(getattr(state, "info", None) or {})
