"""The cross-checkpoint study: own vs cross cache x full vs whole-source mask, on the quantity task (spec E8).

Per case (a quantity group in one support condition: B states the unit, or B
refers to A for it) both checkpoints of a pair prefill the same history. Each
reader then answers the current, historical and unrelated questions four ways:
from its own cache and from its sibling's (cross), each with full access and
with record A hidden (whole-source mask), greedily, stopping on the union of
both EOS sets, at most ``max_new_tokens`` tokens. Both histories are checked
unchanged after every case.

The runner's model is the *main* checkpoint (it renders every prompt with its chat
template and tokenizer, as in the paper); the study builds the sibling once per invocation, in the
runner's :class:`~kvprobe.studies.common.protocol.RunState` (``sibling`` recipe, see
:func:`~kvprobe.studies.cross_checkpoint.siblings.make_sibling`), or takes an already built
:class:`~kvprobe.studies.cross_checkpoint.siblings.SiblingPair` as ``sibling`` from Python. ``readers`` picks
which checkpoints read: both by default (the paper reports each pair in both directions).

On the study protocol (:class:`~kvprobe.studies.common.protocol.HistoryStudy`) the conditions
are the reads ``reader/cache/access`` (``main/own/full``, ``main/cross/source``,
``sibling/own/full``...), keyed to the main checkpoint's history. Five hooks carry the
second checkpoint, sharing the sibling's histories in the protocol's ``Batch``:
:meth:`~CrossCheckpointStudy.start_batch` checks the pair's compatibility and prefills every
case with the sibling, :meth:`~CrossCheckpointStudy.setup` pairs each case's two histories,
runs the logits checks on the batch's first case and makes each read a :class:`Read` of its
writer's history, :meth:`~CrossCheckpointStudy.answer` sends each read to its reader (one
batched decode per reader), :meth:`~CrossCheckpointStudy.row` grades it and
:meth:`~CrossCheckpointStudy.finish` puts each case's rows in (reader, cache, access, query)
order and adds its state row.

Checks, per batch: the pair's compatibility (token ids, boundaries, A's mask span,
question suffixes, architecture); on the batch's first case, each reader's traced
logits on its sibling's cache against a plain transformers forward under full
access and under the mask (no-op and intervention checks, 1e-4); per own read of
the ``first_token_queries``, the first generated token against the reader's plain
uncached forward over history + question (a tie within 1e-4 logits is recorded, a
real mismatch raises).

Rows (``kind: "answer"``): one per (reader, cache, access, query) with the graded
answer (``studies.datasets.quantity_task.grading``, equivalent units, strict JSON with one outer
fence allowed, EOS), ``invalid`` (cap or format failure), ``changed`` and
``top1_agree`` against the same reader's own read (cross rows); ``condition`` names
the read. One ``kind: "state"`` row per case holds the per-layer K/V cosine and
relative L2 between the two histories' caches (whole history and record A's span);
its answer columns (``condition``, ``query``, ``output``...) are None.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Sequence

import kvprobe
from kvprobe import decoding
from kvprobe.studies.datasets.quantity_task import grading, tasks
from kvprobe.studies.datasets.quantity_task.histories import QuantityTaskHistories
from kvprobe.studies.common.conditions import check_unchanged
from kvprobe.studies.common.protocol import (Batch, CaseRun, InvalidParameter, Question, RunState, require_at_least,
                                             require_choices)
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


def read_name(reader: str, cache: str, access: str) -> str:
    """The condition of one read: ``reader/cache/access``."""
    return f"{reader}/{cache}/{access}"


#: Every read, as the protocol's condition names.
READS = tuple(read_name(r, c, a) for r in ROLES for c in CACHES for a in ACCESS)


def _other(role: str) -> str:
    return "sibling" if role == "main" else "main"


@dataclass(frozen=True, eq=False)
class Read(kvprobe.Condition):
    """One read as its row's condition: the ``reader`` checkpoint decodes under ``access`` on the ``writer``'s
    history (own: the reader's, cross: its sibling's), stopping on ``stop_ids`` (both checkpoints' EOS ids).
    :meth:`CrossCheckpointStudy.answer` decodes it on that history; it never edits the main one."""

    writer: kvprobe.History | None = None
    access: kvprobe.Condition = field(default_factory=kvprobe.Full)
    reader: kvprobe.Model | None = None
    stop_ids: frozenset[int] = frozenset()

    def apply(self, model: kvprobe.Model, history: kvprobe.History, state: Any, question: str = "") -> Any:
        raise TypeError(f"{self.name}: a read is decoded on its writer's history (CrossCheckpointStudy.answer)")


@dataclass
class CrossCheckpointStudy(QuantityTaskHistories):
    """Own/cross x full/mask reads of the quantity histories by a checkpoint pair."""

    name: ClassVar[str] = "cross-checkpoint"
    #: The sibling: bf16, fp16, int8, noise, noise:SCALE, or a model name; from Python also a built SiblingPair
    #: (recorded by its recipe).
    sibling: str = "bf16"
    #: Seed of noise siblings.
    sibling_seed: int = 0
    #: Generator seed of the quantity groups.
    seed: int = tasks.TaskConfig.seed
    #: Run only the first N of the 120 test groups (2 cases each: the two support conditions); None: all.
    n_groups: int | None = None
    #: Questions asked (current, historical, unrelated).
    queries: tuple[str, ...] = tasks.QUERIES
    #: Checkpoints that read (main, sibling; the paper reports each pair in both directions).
    readers: tuple[str, ...] = ROLES
    #: Greedy answer budget in tokens (the paper: 40 for the Qwen3 pairs, 256 for the others).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Queries whose own-cache reads are checked against an uncached forward's first token.
    first_token_queries: tuple[str, ...] = ("current",)
    #: Run the no-op / intervention logits check on each batch's first case.
    verify: bool = True
    #: Cases decoded in one batch.
    cases_per_batch: int = 2

    #: The reads keep their own history (a cross read's writer is the sibling): never prepared on the main one.
    skip_prepare: ClassVar[tuple[str, ...]] = READS

    def __post_init__(self) -> None:
        self.queries, self.readers = tuple(self.queries), tuple(self.readers)
        self.first_token_queries = tuple(self.first_token_queries)
        require_choices(self, queries=tasks.QUERIES, readers=ROLES, first_token_queries=tasks.QUERIES)
        for name in ("queries", "readers"):
            if not getattr(self, name):
                raise InvalidParameter(name, "give at least one")
        require_at_least(self, n_groups=1, max_new_tokens=1, cases_per_batch=1)

    def make_cases(self) -> list[tasks.Case]:
        return tasks.generate_cases(tasks.TaskConfig(seed=self.seed, n_groups=self.n_groups))

    def data_sha256(self) -> str:
        """The quantity-task cases' digest (:func:`tasks.dataset_hash`)."""
        return tasks.dataset_hash(self.cases())

    def config_extra(self) -> dict[str, Any]:
        """The sibling by its recipe (a pair passed from Python too), the reads and the similarity measures."""
        recipe = self.sibling.recipe if isinstance(self.sibling, SiblingPair) else self.sibling
        return {"sibling": recipe, "caches": list(CACHES), "access": list(ACCESS), "stop": "union of both checkpoints' EOS ids",
                "similarity": "per layer, mean over tokens of per-token cosine / relative L2 (heads flattened)"}

    def sibling_pair(self, main: kvprobe.Model, state: RunState) -> SiblingPair:
        """The pair for the runner's model, once per invocation (``state``): built from the ``sibling`` recipe, or
        the pair given as ``sibling`` (on the runner's model object when it holds the same weights)."""
        def build() -> SiblingPair:
            if not isinstance(self.sibling, SiblingPair):
                return make_sibling(main, self.sibling, seed=self.sibling_seed)
            pair = self.sibling
            if pair.main is main:
                return pair
            if pair.main.weight_hash != main.weight_hash:
                raise ValueError(f"the given pair's main model {pair.main.name!r} is not the runner's model "
                                 f"{main.name!r}")
            return SiblingPair(main, pair.sibling, pair.recipe, pair.sibling_tokenizer)

        return state.memo(("sibling", id(main)), build)

    def asked(self, case: tasks.Case) -> list[tasks.Query]:
        """The case's questions among ``queries``, in the task's order."""
        return [q for q in tasks.queries(case) if q.role in self.queries]

    # ------------------------------------------------------------------ the protocol's hooks
    def questions(self, model: kvprobe.Model, case: tasks.Case, history: kvprobe.History) -> list[Question]:
        return [Question(q.role, q.question, None, q) for q in self.asked(case)]

    def start_batch(self, model: kvprobe.Model, batch: Batch) -> None:
        """The pair's compatibility check, then the sibling prefills every case (``batch.state["sibling"]``, by
        case id; the protocol prefills the main histories)."""
        pair = self.sibling_pair(model, batch.run_state)
        cases = batch.cases
        pair.check([self.prompt(model, c) for c in cases], [[q.question for q in self.asked(c)] for c in cases],
                   mask_segments=["A"])
        batch.state["sibling"] = {c.case_id: h for c, h in zip(cases, self.prefill(pair.sibling, cases))}
        batch.state["histories"] = {}

    def conditions(self, model: kvprobe.Model, case: tasks.Case, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        """Every read of the ``readers``: full access, or record A hidden (its span is the same in both
        checkpoints' histories: the compatibility check compares it)."""
        span = history.span("A")
        return {read_name(r, c, a): kvprobe.Full(name=read_name(r, c, a)) if a == "full"
                else kvprobe.Mask(span, name=read_name(r, c, a))
                for r in self.readers for c in CACHES for a in ACCESS}

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """The case's histories of both checkpoints (``run.extra["histories"]`` and the batch's
        ``state["histories"]``, by role), checked to hold the same ids; on the batch's first case the logits
        checks (``verify``: ``state["verified"]``). Each read becomes a :class:`Read` of its writer's history by
        its reader."""
        case, state = run.case, run.batch.state
        pair = self.sibling_pair(model, run.batch.run_state)
        models = {"main": pair.main, "sibling": pair.sibling}
        both = {"main": run.history, "sibling": state["sibling"][case.case_id]}
        if not same_ids(both["main"], both["sibling"]):
            raise RuntimeError(f"{case.case_id}: the two checkpoints' histories hold different token ids")
        run.extra["histories"] = state["histories"][case.case_id] = both
        if self.verify and case is run.batch.cases[0]:
            state["verified"] = self._verify(models, both, case, self.asked(case))
        for name, access in run.conditions.items():
            role, cache, _ = name.split("/")
            run.conditions[name] = Read(writer=both[role if cache == "own" else _other(role)], access=access,
                                        reader=models[role], stop_ids=pair.stop_ids, name=name)

    def answer(self, model: kvprobe.Model, items: Sequence[tuple[kvprobe.History, kvprobe.Request]],
               candidates: Sequence[Sequence[str]] | None) -> list[decoding.Answer]:
        """Each reader decodes its reads (:class:`Read`) in one batch, in (case, cache, access, query) order, on
        the writer's history (own: its own; cross: its sibling's), stopping on both checkpoints' EOS ids."""
        position = {key: i for i, key in enumerate(dict.fromkeys(id(h) for h, _ in items))}  # case order
        out: list[decoding.Answer | None] = [None] * len(items)
        for role in self.readers:
            mine = [i for i, (_, req) in enumerate(items) if req.access.name.split("/")[0] == role]
            # Stable: within one (case, cache, access) the questions keep their order.
            mine.sort(key=lambda i: (position[id(items[i][0])], CACHES.index(items[i][1].access.name.split("/")[1]),
                                     ACCESS.index(items[i][1].access.name.split("/")[2])))
            if not mine:
                continue
            chosen: list[Read] = [items[i][1].access for i in mine]  # type: ignore[misc]
            reads = [(read.writer, kvprobe.Request(items[i][1].question, read.access)) for i, read in zip(mine, chosen)]
            generations = read_caches(chosen[0].reader, reads, self.max_new_tokens, stop_ids=chosen[0].stop_ids)
            for i, g in zip(mine, generations):
                out[i] = decoding.Answer(None, g)
        assert all(a is not None for a in out)
        return out  # type: ignore[return-value]

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        """The graded read; a first-token check for own reads of ``first_token_queries``."""
        c, q, g = run.case, question.info, run.case.group
        role, cache, access = condition.split("/")
        pair = self.sibling_pair(run.history.model, run.batch.run_state)
        reader = pair.main if role == "main" else pair.sibling
        writer = role if cache == "own" else _other(role)
        h = run.extra["histories"][writer]
        span = h.span("A")
        out = answers[condition].generation
        own = answers[read_name(role, "own", access)].generation
        if q.kind == "quantity":
            auxiliary = g.b_value if g.relation in ("other_attribute", "other_entity") else None
            grade = grading.grade_quantity(out.text, out.stop_reason, q.reference, old=g.old_value,
                                           auxiliary=auxiliary)  # rule 3, the paper's complete answer
        else:
            grade = grading.grade_label(out.text, out.stop_reason, q.reference)
        first = out.token_ids[0] if out.token_ids else None
        check = reference = None
        if cache == "own" and q.role in self.first_token_queries and first is not None:
            ref = full_forward_first_token(reader, h, q.question, run.originals[condition])
            reference, check = ref.token, first_token_agrees(first, ref)
            if check == "fail":
                raise RuntimeError(f"{c.case_id}: {reader.name} decoding from its own cache ({access}, "
                                   f"{q.role}) gives first token {first}, its uncached forward "
                                   f"{ref.token} (gap {ref.gap:.3g})")
        return {
            "kind": "answer",
            "group_id": g.group_id,
            "relation": g.relation,
            "unit": g.unit,
            "information": c.information,
            "reader": role,
            "reader_model": reader.name,
            "writer_model": (pair.main if writer == "main" else pair.sibling).name,
            "cache": cache,
            "access": access,
            "mask_span": [span.start, span.end],
            "question_sha256": hashlib.sha256(q.question.encode()).hexdigest()[:16],
            "reference": q.reference,
            "token_ids": list(out.token_ids),
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
        }

    def finish(self, model: kvprobe.Model, rows: list[list[dict[str, Any]]], batch: Batch
               ) -> list[list[dict[str, Any]]]:
        """Each case's reads in (reader, cache, access, query) order, then its state row; the sibling's
        histories checked unchanged (the protocol checks the main ones)."""
        pair = self.sibling_pair(model, batch.run_state)
        out = []
        for c, case_rows in zip(batch.cases, rows):
            both = batch.state["histories"][c.case_id]
            case_rows = sorted(case_rows, key=lambda r: (self.readers.index(r["reader"]), CACHES.index(r["cache"]),
                                                         ACCESS.index(r["access"])))
            verified = batch.state.get("verified") if c is batch.cases[0] else None
            case_rows.append(self._state_row(c, pair, both, verified))
            check_unchanged(both["sibling"], f"{c.case_id} (sibling cache)")
            out.append(case_rows)
        return out

    # ------------------------------------------------------------------ pieces
    def _verify(self, models: dict[str, kvprobe.Model], histories: dict[str, kvprobe.History], case: tasks.Case,
                asked: list[tasks.Query]) -> dict[str, float]:
        """No-op (full) and intervention (mask) logits checks of each reader on its sibling's cache."""
        out = {}
        for role in self.readers:
            writer = histories[_other(role)]
            question = asked[0].question
            for access in (kvprobe.Full(), kvprobe.Mask(writer.span("A"), name="source")):
                diff = verify_cross_read(writer, models[role], question, access)
                if diff > LOGIT_TOLERANCE:
                    raise RuntimeError(f"{case.case_id}: {models[role].name} reading its sibling's cache under "
                                       f"{access.name} differs from a plain forward by {diff:.3g} (> {LOGIT_TOLERANCE})")
                out[f"{role}/{access.name}"] = diff
        return out

    def _state_row(self, c: tasks.Case, pair: SiblingPair, histories: dict[str, kvprobe.History],
                   verified: dict[str, float] | None) -> dict[str, Any]:
        hm, hs = histories["main"], histories["sibling"]
        return {
            "kind": "state",
            "case_id": c.case_id,
            "group": self.group(c),
            "group_id": c.group.group_id,
            "relation": c.group.relation,
            "information": c.information,
            "history_tokens": len(hm),
            "prompt_sha256": hm.rendered.sha256,
            "condition": None, "query": None, "output": None, "stop_reason": None, "output_tokens": None,
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
