"""The cross-checkpoint study: own vs cross cache x full vs whole-source mask, on the quantity task (spec E8).

Per case (a quantity group in one support condition: B states the unit, or B
refers to A for it) both checkpoints of a pair prefill the same history. Each
reader then answers the current, historical and unrelated questions four ways:
from its own cache and from its sibling's (cross), each with full access and
with record A hidden (whole-source mask), greedily, stopping on the union of
both EOS sets, at most ``max_new_tokens`` tokens. Both histories are checked
unchanged after every case.

Runner protocol: the runner's model is the *main* checkpoint (it renders every
prompt with its chat template and tokenizer, as in the paper); the study builds
or holds the sibling itself (``sibling`` spec, see
:func:`~studies.cross_checkpoint.siblings.make_sibling`, or
:meth:`CrossCheckpointStudy.attach_sibling`). ``readers`` picks which checkpoints
read: both by default (the paper reports each pair in both directions).

Checks, per batch: the pair's compatibility (token ids, boundaries, A's mask span,
question suffixes, architecture); on the batch's first case, each reader's traced
logits on its sibling's cache against a plain transformers forward under full
access and under the mask (no-op and intervention checks, 1e-4); per own read of
the ``first_token_queries``, the first generated token against the reader's plain
uncached forward over history + question (a tie within 1e-4 logits is recorded, a
real mismatch raises).

Rows (``kind: "answer"``): one per (reader, cache, access, query) with the graded
answer (``studies.quantity.grading``, equivalent units, strict JSON with one outer
fence allowed, EOS), ``invalid`` (cap or format failure), ``changed`` and
``top1_agree`` against the same reader's own read (cross rows). One ``kind:
"state"`` row per case holds the per-layer K/V cosine and relative L2 between the
two histories' caches (whole history and record A's span).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import kvprobe
from kvprobe.decoding import Generation, Request

from ..conditions import check_unchanged
from ..quantity import grading, tasks
from ..runner import study_parameters
from .checks import same_ids
from .reading import (LOGIT_TOLERANCE, answer_content, first_token_agrees, full_forward_first_token, is_invalid,
                      read_caches, verify_cross_read)
from .siblings import SiblingPair, make_sibling
from .similarity import cache_similarity, recurrent_similarity

#: Answer budget (paper: 40 tokens for the Qwen3 pairs, 256 for the others; the small models use 40).
MAX_NEW_TOKENS = 40
ROLES = ("main", "sibling")
CACHES = ("own", "cross")
ACCESS = ("full", "source")


@dataclass
class CrossCheckpointStudy:
    """Own/cross x full/mask reads of the quantity histories by a checkpoint pair (runner protocol).

    Args:
        sibling: the sibling spec (``"bf16"``, ``"fp16"``, ``"int8"``, ``"noise"``, ``"noise:0.1"``,
            or a model name ``kvprobe.load_model`` takes); ignored once a pair is attached.
        sibling_seed: seed of noise siblings.
        seed, n_groups: the quantity task generator (first ``n_groups`` of the 120 test groups;
            each group gives two cases, its two support conditions).
        queries: questions asked (current, historical, unrelated).
        readers: which checkpoints read (``"main"``, ``"sibling"``).
        max_new_tokens: answer budget.
        first_token_queries: queries whose own reads are checked against an uncached forward.
        verify: run the no-op / intervention logits check on each batch's first case.
        cases_per_batch: cases per batched decode.
    """

    sibling: str = "bf16"
    sibling_seed: int = 0
    seed: int = tasks.TaskConfig.seed
    n_groups: int | None = None
    queries: tuple[str, ...] = tasks.QUERIES
    readers: tuple[str, ...] = ROLES
    max_new_tokens: int = MAX_NEW_TOKENS
    first_token_queries: tuple[str, ...] = ("current",)
    verify: bool = True
    cases_per_batch: int = 2
    name: str = "cross-checkpoint"
    _pair: SiblingPair | None = field(default=None, repr=False, compare=False)
    _cases: list[tasks.Case] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.queries, self.readers = tuple(self.queries), tuple(self.readers)
        self.first_token_queries = tuple(self.first_token_queries)
        bad = [q for q in self.queries if q not in tasks.QUERIES] + [r for r in self.readers if r not in ROLES]
        if bad or not self.queries or not self.readers:
            raise ValueError(f"queries must be among {tasks.QUERIES} and readers among {ROLES}; got {bad or 'none'}")

    # -- runner protocol -----------------------------------------------------
    def cases(self) -> list[tasks.Case]:
        if self._cases is None:
            self._cases = tasks.generate_cases(tasks.TaskConfig(seed=self.seed, n_groups=self.n_groups))
        return self._cases

    def config(self) -> dict[str, Any]:
        cfg = study_parameters(self)
        cfg["dataset_hash"] = tasks.dataset_hash(self.cases())
        cfg["caches"], cfg["access"] = list(CACHES), list(ACCESS)
        cfg["stop"] = "union of both checkpoints' EOS ids"
        cfg["similarity"] = "per layer, mean over tokens of per-token cosine / relative L2 (heads flattened)"
        return cfg

    def attach_sibling(self, pair: SiblingPair) -> None:
        """Use an already built pair (e.g. :func:`~studies.cross_checkpoint.siblings.hub_pair`); ``sibling``
        becomes its recipe, so ``config.json`` names it."""
        self._pair = pair
        self.sibling = pair.recipe

    def sibling_pair(self, main: kvprobe.Model) -> SiblingPair:
        """The pair for the runner's model, built once from ``sibling`` unless one is attached."""
        if self._pair is not None and self._pair.main is not main:
            if self._pair.main.weight_hash != main.weight_hash:
                raise ValueError(f"the attached pair's main model {self._pair.main.name!r} is not the runner's "
                                 f"model {main.name!r}")
            self._pair = SiblingPair(main, self._pair.sibling, self._pair.recipe, self._pair.sibling_tokenizer)
        if self._pair is None:
            self._pair = make_sibling(main, self.sibling, seed=self.sibling_seed)
        return self._pair

    def run_cases(self, model: kvprobe.Model, cases: list[tasks.Case]) -> list[list[dict[str, Any]]]:
        """Rows of each case: every reader's reads of one batch decode together."""
        pair = self.sibling_pair(model)
        models = {"main": pair.main, "sibling": pair.sibling}
        asked = {c.case_id: [q for q in tasks.queries(c) if q.role in self.queries] for c in cases}
        prompts = [tasks.build_prompt(c) for c in cases]
        pair.check(prompts, [[q.question for q in asked[c.case_id]] for c in cases], mask_segments=["A"])
        histories = {role: self._prefill(models[role], cases, prompts) for role in ROLES}
        for c in cases:
            if not same_ids(histories["main"][c.case_id], histories["sibling"][c.case_id]):
                raise RuntimeError(f"{c.case_id}: the two checkpoints' histories hold different token ids")
        verified = self._verify(models, histories, cases[0], asked[cases[0].case_id]) if self.verify else None
        reads: dict[tuple, Generation] = {}
        for role in self.readers:
            other = "sibling" if role == "main" else "main"
            keys, items = [], []
            for c in cases:
                for cache, writer in (("own", role), ("cross", other)):
                    h = histories[writer][c.case_id]
                    conds = {"full": kvprobe.Full(), "source": kvprobe.Mask(h.span("A"), name="source")}
                    for access in ACCESS:
                        for q in asked[c.case_id]:
                            keys.append((role, c.case_id, cache, access, q.role))
                            items.append((h, Request(q.question, conds[access])))
            reads.update(zip(keys, read_caches(models[role], items, self.max_new_tokens, stop_ids=pair.stop_ids)))
        out = []
        for c in cases:
            rows = []
            for role in self.readers:
                rows += self._answer_rows(c, role, models, histories, asked[c.case_id], reads)
            rows.append(self._state_row(c, pair, histories, verified if c is cases[0] else None))
            for role in ROLES:
                check_unchanged(histories[role][c.case_id], f"{c.case_id} ({role} cache)")
            out.append(rows)
        return out

    # -- pieces --------------------------------------------------------------
    @staticmethod
    def _prefill(model: kvprobe.Model, cases: list[tasks.Case], prompts: list[kvprobe.Prompt]
                 ) -> dict[str, kvprobe.History]:
        """Each case's history; a group's second support condition reuses the first one's K/V up to B."""
        out: dict[str, kvprobe.History] = {}
        previous: tuple[str, kvprobe.History] | None = None
        for c, prompt in zip(cases, prompts):
            reuse = previous[1] if previous is not None and previous[0] == c.group.group_id else None
            out[c.case_id] = model.prefill(prompt, reuse=reuse)
            previous = (c.group.group_id, out[c.case_id])
        return out

    def _verify(self, models, histories, case: tasks.Case, asked: list[tasks.Query]) -> dict[str, float]:
        """No-op (full) and intervention (mask) logits checks of each reader on its sibling's cache."""
        out = {}
        for role in self.readers:
            writer = histories["sibling" if role == "main" else "main"][case.case_id]
            question = asked[0].question
            for access in (kvprobe.Full(), kvprobe.Mask(writer.span("A"), name="source")):
                diff = verify_cross_read(writer, models[role], question, access)
                if diff > LOGIT_TOLERANCE:
                    raise RuntimeError(f"{case.case_id}: {models[role].name} reading its sibling's cache under "
                                       f"{access.name} differs from a plain forward by {diff:.3g} (> {LOGIT_TOLERANCE})")
                out[f"{role}/{access.name}"] = diff
        return out

    def _answer_rows(self, c: tasks.Case, role: str, models, histories, asked: list[tasks.Query],
                     reads: dict[tuple, Generation]) -> list[dict[str, Any]]:
        g = c.group
        reader = models[role]
        other = "sibling" if role == "main" else "main"
        rows = []
        for cache in CACHES:
            writer = role if cache == "own" else other
            h = histories[writer][c.case_id]
            span = h.span("A")
            for access in ACCESS:
                for q in asked:
                    out = reads[(role, c.case_id, cache, access, q.role)]
                    own = reads[(role, c.case_id, "own", access, q.role)]
                    if q.kind == "quantity":
                        auxiliary = g.b_value if g.relation in ("other_attribute", "other_entity") else None
                        grade = grading.grade_quantity(out.text, out.stop_reason, q.reference, old=g.old_value,
                                                       auxiliary=auxiliary, rule="equivalent")
                    else:
                        grade = grading.grade_label(out.text, out.stop_reason, q.reference)
                    first = out.token_ids[0] if out.token_ids else None
                    check = reference = None
                    if cache == "own" and q.role in self.first_token_queries and first is not None:
                        cond = kvprobe.Full() if access == "full" else kvprobe.Mask(span, name="source")
                        ref = full_forward_first_token(reader, h, q.question, cond)
                        reference, check = ref.token, first_token_agrees(first, ref)
                        if check == "fail":
                            raise RuntimeError(f"{c.case_id}: {reader.name} decoding from its own cache ({access}, "
                                               f"{q.role}) gives first token {first}, its uncached forward "
                                               f"{ref.token} (gap {ref.gap:.3g})")
                    rows.append({
                        "kind": "answer",
                        "case_id": c.case_id,
                        "group_id": g.group_id,
                        "relation": g.relation,
                        "unit": g.unit,
                        "information": c.information,
                        "query": q.role,
                        "reader": role,
                        "reader_model": reader.name,
                        "writer_model": models[writer].name,
                        "cache": cache,
                        "access": access,
                        "mask_span": [span.start, span.end],
                        "history_tokens": len(h),
                        "prompt_sha256": h.rendered.sha256,
                        "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
                        "reference": q.reference,
                        "output": out.text,
                        "token_ids": list(out.token_ids),
                        "stop_reason": out.stop_reason,
                        "output_tokens": out.n_tokens,
                        "first_token": first,
                        "first_token_full_forward": reference,
                        "first_token_check": check,
                        "category": grade.category,
                        "complete": grade.complete,
                        "lenient_complete": grade.lenient_complete,
                        "parse_reason": grade.parse_reason,
                        "invalid": is_invalid(out.text, out.stop_reason),
                        "content": answer_content(out.text),
                        "changed": None if cache == "own" else answer_content(out.text) != answer_content(own.text),
                        "top1_agree": None if cache == "own" else out.token_ids[:1] == own.token_ids[:1],
                        "case_complete": True,
                    })
        return rows

    @staticmethod
    def _state_row(c: tasks.Case, pair: SiblingPair, histories, verified: dict[str, float] | None
                   ) -> dict[str, Any]:
        hm, hs = histories["main"][c.case_id], histories["sibling"][c.case_id]
        return {
            "kind": "state",
            "case_id": c.case_id,
            "group_id": c.group.group_id,
            "relation": c.group.relation,
            "information": c.information,
            "history_tokens": len(hm),
            "main_model": pair.main.name,
            "main_weight_hash": pair.main.weight_hash,
            "sibling_model": pair.sibling.name,
            "sibling_weight_hash": pair.sibling.weight_hash,
            "sibling_recipe": pair.recipe,
            "similarity": cache_similarity(hm.kv, hs.kv),
            "similarity_record_a": cache_similarity(hm.kv, hs.kv, hm.span("A")),
            "recurrent_similarity": recurrent_similarity(hm.recurrent, hs.recurrent),
            "verify_max_abs_diff": verified,
            "case_complete": True,
        }
