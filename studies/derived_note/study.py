"""The derived-note / selective-refresh study (paper app:v5_propagation L5819-5870; spec partD section 8).

One case is one group in one note condition (``derived``: C present;
``neutral``: C's token interval filled from a neutral note). Per case the
history is prefilled once; the six conditions of ``history.py`` (full, mask A,
mask C, mask A+C, selective refresh, full recompute) each get their own row
state (prepared once, then every row of the batch is its own fork of it), and
every (case, query, condition) row of a batch of cases runs in one
``decoding.answer`` call: the canonical JSON candidates are scored
teacher-forced (current: new route vs A's route; historical: A's zone vs B's
zone) and a greedy answer of at most 40 tokens is generated (EOS stop, native
chat template). After each case ``history.check_digest()`` proves the shared
prefilled K/V are unchanged.

Rows carry no timings (the runner needs byte-reproducible rows). Operation cost
(paper L5847-5848: "cache crop/copy and recomputation, excluding shared prefill
and query generation") is measured per (case, condition) as the seconds to
prepare the condition's row state plus one single-row fork (copy) of it, and is
appended to ``cost_log`` (a JSON-lines file, normally ``operation_costs.jsonl``
next to the results; see :func:`run`). Conditions a model cannot support are
left out with a warning (``studies.conditions.supported``), as in the MQuAKE study.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kvprobe
from kvprobe import decoding
from kvprobe.engine import fork_rows

from ..conditions import check_unchanged, supported
from . import grading, groups, history, strings

if TYPE_CHECKING:
    from ..runner import RunInfo

#: Answer budget (paper L5843: 40-token limit for these models).
MAX_NEW_TOKENS = 40
#: Cases per batch: two groups (both note conditions of each), 48 rows.
CASES_PER_BATCH = 4
COSTS = "operation_costs.jsonl"


@dataclass
class DerivedNoteStudy:
    """Derived-note groups under the six conditions (runner protocol: name, config, cases, run_cases)."""

    n_groups: int = groups.N_GROUPS
    seed: int = groups.SEED
    notes: tuple[str, ...] = groups.NOTES
    max_new_tokens: int = MAX_NEW_TOKENS
    chat: bool | None = None  # None: the native chat template when the tokenizer has one
    cases_per_batch: int = CASES_PER_BATCH
    name: str = "derived-note"
    #: Where to append operation costs (JSON lines); not part of the config.
    cost_log: str | None = field(default=None, compare=False)

    def config(self) -> dict[str, Any]:
        """Every parameter that decides the rows."""
        return {
            "n_groups": self.n_groups, "seed": self.seed, "notes": list(self.notes),
            "max_new_tokens": self.max_new_tokens, "chat": self.chat, "cases_per_batch": self.cases_per_batch,
            "conditions": list(history.CONDITIONS), "queries": list(groups.QUERIES),
            "template_kwargs": strings.TEMPLATE_KWARGS,
            "dataset_hash": groups.dataset_hash(groups.generate_groups(self.n_groups, self.seed)),
        }

    def cases(self) -> list[groups.Case]:
        """Every group in every note condition, group-major."""
        return groups.generate_cases(self.n_groups, self.seed, tuple(self.notes))

    def prepare(self, model: kvprobe.Model, case: groups.Case, reuse: kvprobe.History | None = None
                ) -> tuple[kvprobe.History, dict[str, kvprobe.Access], dict[str, Any], dict[str, float]]:
        """Prefill the case; prepare each supported condition once.

        Returns the history, the prepared conditions, the case's span facts (for rows)
        and each condition's operation cost in seconds.
        """
        prompt, neutral = history.case_prompt(model.tokenizer, case, self.chat)
        h = model.prefill(prompt, reuse=reuse)
        c = history.c_interval(h, neutral)
        a = h.span("A")
        facts = {"history_tokens": len(h), "prompt_sha256": h.rendered.sha256,
                 "span_A": [a.start, a.end], "span_C": [c.start, c.end],
                 "neutral_offset": None if neutral is None else neutral.offset,
                 "neutral_note_tokens": None if neutral is None else neutral.note_tokens}
        prepared, costs = {}, {}
        for name, condition in supported(self.name, h, history.conditions(h, c)).items():
            t0 = time.perf_counter()
            state = condition.prepare(model, h)
            fork_rows([state])  # the condition's own copy of the cache (cost only; discarded)
            costs[name] = time.perf_counter() - t0
            prepared[name] = kvprobe.Prepared(state, name)
        return h, prepared, facts, costs

    def run_cases(self, model: kvprobe.Model, cases: list[groups.Case]) -> list[list[dict[str, Any]]]:
        """The rows of each case; every (case, query, condition) row of the batch runs in one call."""
        prepared, items, candidates = [], [], []
        previous: tuple[str, kvprobe.History] | None = None
        for case in cases:
            # The note conditions of a group share every token before C: reuse those K/V.
            reuse = previous[1] if previous is not None and previous[0] == case.group.group_id else None
            h, conds, facts, costs = self.prepare(model, case, reuse)
            previous = (case.group.group_id, h)
            self._log_costs(model, case, h, conds, costs)
            asked = groups.queries(case.group)
            prepared.append((case, h, conds, facts, asked))
            for q in asked:
                for cond in conds.values():
                    items.append((h, kvprobe.Request(q.question, cond)))
                    candidates.append(q.candidates)
        answers = iter(decoding.answer(model, items, candidates, max_new_tokens=self.max_new_tokens))
        out = []
        for case, h, conds, facts, asked in prepared:
            rows = []
            for q in asked:
                got = {name: next(answers) for name in conds}
                rows.extend(_rows(case, q, got, conds, facts))
            check_unchanged(h, case.case_id)
            out.append(rows)
        return out

    def _log_costs(self, model: kvprobe.Model, case: groups.Case, h: kvprobe.History,
                   conds: dict[str, kvprobe.Access], costs: dict[str, float]) -> None:
        if self.cost_log is None:
            return
        lines = [json.dumps({"case_id": case.case_id, "note": case.note, "condition": name,
                             "seconds": round(costs[name], 6), "history_tokens": len(h),
                             "recomputed_tokens": _info(conds[name]).get("recomputed_tokens", 0),
                             "model": model.name}, sort_keys=True) for name in conds]
        with open(self.cost_log, "a") as f:
            f.write("".join(line + "\n" for line in lines))


def _info(condition: kvprobe.Access) -> dict[str, Any]:
    state = getattr(condition, "state", None)
    return dict(getattr(state, "info", None) or {})


def _rows(case: groups.Case, q: groups.Query, got: dict[str, decoding.Answer],
          conds: dict[str, kvprobe.Access], facts: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per condition for one query of one case."""
    g = case.group
    margins = {name: a.scores.margin() for name, a in got.items()}
    rows = []
    for name, a in got.items():
        out, scores = a.generation, a.scores
        gr = grading.grade(out.text, out.stop_reason, q.reference, q.other)
        info = _info(conds[name])
        rows.append({
            "case_id": case.case_id, "group_id": g.group_id, "note": case.note, "query": q.kind,
            "condition": name, "old_listed_first": g.old_listed_first, "swapped": g.swapped,
            "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
            **facts,
            "recomputed_tokens": info.get("recomputed_tokens", 0), "reused_tokens": info.get("reused_tokens"),
            "reference": q.reference, "other": q.other, "candidates": list(q.candidates),
            "logp_right": round(scores[0], 6), "logp_other": round(scores[1], 6),
            "margin": round(margins[name], 6),
            "margin_change_vs_full": round(margins[name] - margins["full"], 6) if "full" in margins else None,
            "margin_change_vs_mask_A": (round(margins[name] - margins["mask-A"], 6)
                                        if "mask-A" in margins else None),
            "output": out.text, "stop_reason": out.stop_reason, "output_tokens": out.n_tokens,
            "correct": gr.correct, "category": gr.category, "parse_reason": gr.parse_reason,
            "answer": gr.answer, "fenced": gr.fenced, "strict_single_field": gr.strict_single_field,
            "lenient_correct": gr.lenient_correct, "first_value": gr.first_value,
            "case_complete": True,
        })
    return rows


def run(model: kvprobe.Model, out_dir: Path | str, study: DerivedNoteStudy | None = None,
        progress: bool = True) -> "RunInfo":
    """``studies.runner.run_study`` with operation costs appended to ``out_dir/operation_costs.jsonl``."""
    from ..runner import run_with_log

    return run_with_log(study or DerivedNoteStudy(), model, out_dir, "cost_log", COSTS, progress=progress)
