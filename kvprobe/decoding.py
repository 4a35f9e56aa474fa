"""Candidate scoring and greedy generation after a history, under access conditions.

:func:`answer` takes (history, request) pairs, a request being a question and
an access condition, and runs them together as one batch: each pair is one row,
a fork of its history's cache with its own hidden columns (rows of different
histories share a batch; shorter caches are padded with slots nobody reads).
Question tokens are placed right after the history with explicit positions
``T, T+1, ...``; shorter questions are left-padded inside the question block
and their padding slots are never read. Each row's question runs once: the
candidates are scored from it (appended, read, rolled back) and the greedy
answer continues from it. :func:`score_candidates` and :func:`generate_greedy`
are the one-history forms used by ``Model.score`` and ``Model.generate``.
The steps they are built from (:func:`run_questions`, :func:`candidate_logprobs`,
:func:`greedy_from`, ...) are public for protocols that arrange them otherwise
(the components study's ``reason_then_score``, the latency bench's ``answer_timed``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Mapping, Sequence

import torch

from .access import Condition
from .activations import NAMES as ACTIVATION_NAMES, ActivationCache, Recorder
from .forward import ForwardOutput, shares_history, traced_forward
from .rows import Rows, RowState, fork_rows, pad_suffix_block
from .history import check_reader
from .selection import KeySelector, SelectionAccess
from .static_decode import STATIC_DECODE_DEVICES, StaticDecoder, static_refusal

if TYPE_CHECKING:
    from .history import History
    from .model_like import ModelLike


@dataclass(frozen=True)
class Request:
    """One question asked of a history under one access condition.

    ``name``: what the row is called (a residual patch names its source row by it; results carry it);
    the condition's own name by default. ``Model.score``/``generate`` pass their mapping's keys.
    """

    question: str
    access: Condition
    name: str | None = None

    @property
    def label(self) -> str:
        """The row's name: ``name``, else the condition's."""
        return self.name if self.name is not None else self.access.name


@dataclass(frozen=True)
class CandidateScores:
    """Teacher-forced summed log-probabilities (nats) of candidate strings.

    ``logprobs[i]`` is the sum over candidate i's tokens, no length
    normalization and no EOS; ``n_tokens[i]`` its token count.
    """

    candidates: tuple[str, ...]
    logprobs: tuple[float, ...]
    n_tokens: tuple[int, ...]
    access: str
    #: The question's internals when the call asked for them (``capture=``), else None.
    activations: ActivationCache | None = field(default=None, compare=False, repr=False)

    def __getitem__(self, i: int) -> float:
        return self.logprobs[i]

    def margin(self, current: int = 0, old: int = 1) -> float:
        """m = logp(current) - logp(old)."""
        return self.logprobs[current] - self.logprobs[old]


def margin_change(scores: CandidateScores, reference: CandidateScores, current: int = 0, old: int = 1) -> float:
    """Delta m = m(scores) - m(reference), e.g. source mask minus its matched control."""
    return scores.margin(current, old) - reference.margin(current, old)


@dataclass(frozen=True)
class Generation:
    """A greedy continuation.

    Attributes:
        text: decoded text without the stopping EOS token.
        token_ids: generated ids, including the EOS token when one stopped it.
        stop_reason: ``"eos"`` or ``"cap"`` (token budget reached first).
        n_tokens: number of generated tokens (len(token_ids)).
        access: name of the access condition.
    """

    text: str
    token_ids: tuple[int, ...]
    stop_reason: str
    n_tokens: int
    access: str
    #: The internals of the question and of every generated token fed back (all but the last) when the
    #: call asked for them (``capture=``), else None.
    activations: ActivationCache | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Answer:
    """What :func:`answer` returns for one (history, request): candidate scores and/or a generation."""

    scores: CandidateScores | None
    generation: Generation | None


def prepare_states(model: "ModelLike", items: Sequence[tuple["History", Request]],
                   cross_checkpoint: bool = False) -> list[RowState]:
    """Each request's row state (its condition applied to its own view of its history).

    Conditions whose state does not depend on the question (all but gated biases)
    are prepared once per history, so a recompute runs once for all its questions.
    Every history must have been prefilled by ``model`` (another load of the same weights
    counts), or ``cross_checkpoint`` must say the read is meant (:func:`kvprobe.history.check_reader`).
    """
    for history in {id(h): h for h, _ in items}.values():
        check_reader(model, history, cross_checkpoint)
    states: list[RowState] = []
    done: dict[tuple[int, int], RowState] = {}
    for history, req in items:
        key = (id(history), id(req.access))
        if req.access.question_dependent or key not in done:
            done[key] = req.access.prepare(model, history, req.question)
        states.append(done[key])
    return states


def suffix_ids(model: "ModelLike", history: "History", question: str) -> list[int]:
    """Token ids of one question's suffix (question + template tail)."""
    if not question:
        raise ValueError("empty question")
    return model.tokenizer(history.rendered.suffix(question), add_special_tokens=False)["input_ids"]


def question_logits(
    model: "ModelLike",
    history: "History",
    question: str,
    conditions: Sequence[Condition],
    capture_attention: tuple[int, ...] = (),
    logits_to_keep: int = 0,
    cross_checkpoint: bool = False,
) -> ForwardOutput:
    """One traced forward of ``question``'s suffix under each condition (one row each).

    The building block of checks and benchmarks: logits Float[len(conditions), L, V]
    and any captured attention probabilities.
    """
    rows = fork_rows(prepare_states(model, [(history, Request(question, c)) for c in conditions], cross_checkpoint),
                     share=shares_history(model), names=[c.name for c in conditions])
    ids, valid = pad_suffix_block([suffix_ids(model, history, question)] * len(conditions), model.pad_id, model.device)
    return traced_forward(model, rows, ids, valid, capture_attention=capture_attention,
                          logits_to_keep=logits_to_keep)


def run_with_cache(model: "ModelLike", history: "History", question: str, conditions: Mapping[str, Condition],
                   names: Sequence[str] = ACTIVATION_NAMES, layers: Sequence[int] | None = None,
                   cross_checkpoint: bool = False) -> dict[str, ActivationCache]:
    """One forward of ``question`` after ``history`` with one row per condition; each row's internals
    (``Model.run_with_cache``; shapes and conventions in :mod:`kvprobe.activations`).

    Everything is checked before the forward: capture names, layers, and each condition against the
    history (``Condition.validate`` through ``prepare``).
    """
    selecting = [name for name, c in conditions.items() if isinstance(c, SelectionAccess)]
    if selecting:
        raise ValueError(f"run_with_cache runs one batch; the query-aware selections {selecting} need their own "
                         "(capture them with score(..., capture=...) or generate(..., capture=...))")
    recorder = Recorder(model, names, layers, len(conditions))
    items = [(history, Request(question, c, name)) for name, c in conditions.items()]
    states = prepare_states(model, items, cross_checkpoint)
    suffixes = [remaining_suffix(model, history, question, s) for s in states]
    run_questions(model, states, suffixes, None, list(conditions), recorder, range(len(states)))
    return {name: recorder.cache(i, name) for i, name in enumerate(conditions)}


def batches(model: "ModelLike", lengths: Sequence[int]) -> list[list[int]]:
    """Row indices to run together.

    One batch for attention-only models (shorter rows are left-padded and the
    padding is never read). Hybrid models run one batch per length: padding
    tokens would pass through their recurrent states.
    """
    if not model.arch.recurrent_layers:
        return [list(range(len(lengths)))]
    groups: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        groups.setdefault(n, []).append(i)
    return list(groups.values())


def check_candidates(candidates: Sequence[Sequence[str]], n_items: int) -> None:
    """One non-empty list of non-empty strings per request."""
    if len(candidates) != n_items:
        raise ValueError(f"{len(candidates)} candidate lists for {n_items} requests")
    for cands in candidates:
        if not cands or any(not c for c in cands):
            raise ValueError("candidates must be a non-empty list of non-empty strings")


def candidate_ids(model: "ModelLike", candidates: Sequence[Sequence[str]]) -> list[list[list[int]]]:
    """Token ids of every candidate (tokenized alone, no special tokens; each distinct string once)."""
    token_ids: dict[str, list[int]] = {}
    return [[token_ids.setdefault(c, model.tokenizer(c, add_special_tokens=False)["input_ids"]) for c in cands]
            for cands in candidates]


def row_groups(model: "ModelLike", items: Sequence[tuple["History", Request]],
                suffixes: list[list[int]]) -> list[list[int]]:
    """Batches of rows: :func:`batches`, further split so that query-aware selections
    (``kvprobe.selection``) run only with rows of the same selection kind."""
    groups = []
    for group in batches(model, [len(s) for s in suffixes]):
        kinds: dict[object, list[int]] = {}
        for i in group:
            access = items[i][1].access
            kinds.setdefault(access.batch_key() if isinstance(access, SelectionAccess) else None, []).append(i)
        groups.extend(kinds.values())
    return groups


def group_selector(model: "ModelLike", items: Sequence[tuple["History", Request]], group: list[int]
                   ) -> KeySelector | None:
    """The key selector of a group whose rows share one selection kind (None for ordinary conditions)."""
    first = items[group[0]][1].access
    if not isinstance(first, SelectionAccess):
        return None
    return first.make_selector(model, [items[i][1].access for i in group])


def remaining_suffix(model: "ModelLike", history: "History", question: str, state: RowState) -> list[int]:
    """The question suffix tokens a row still has to run.

    A state may already hold the first tokens of the suffix (FINCH compresses the
    cache after reading the question but its final token): ``state.info["consumed_suffix"]``
    says how many, and they are checked to be that suffix's tokens.
    """
    ids = suffix_ids(model, history, question)
    n = int(state.info.get("consumed_suffix", 0))
    if n:
        held = state.info.get("consumed_ids")
        if held is not None and list(held) != ids[:n]:
            raise ValueError("the state holds question tokens that differ from this question's suffix")
        if n >= len(ids):
            raise ValueError(f"the state consumed {n} of {len(ids)} suffix tokens; at least one must remain")
    return ids[n:]


def run_questions(model: "ModelLike", states: list[RowState], suffixes: list[list[int]],
                   selector: KeySelector | None = None, names: Sequence[str] | None = None,
                   recorder: Recorder | None = None, items: Sequence[int] = ()) -> tuple[Rows, torch.Tensor]:
    """Fork the rows and run each row's question suffix: (the rows, each row's last logits Float[B, V]).

    Rows read shared history copies where the model allows it (:func:`~kvprobe.forward.shares_history`);
    query-aware selections run on per-row copies (their selectors read every row's keys). A ``recorder``
    keeps the question's internals, row b as item ``items[b]``.
    """
    rows = fork_rows(states, share=selector is None and shares_history(model), names=names)
    rows.selector = selector
    ids, valid = pad_suffix_block(suffixes, model.pad_id, model.device)
    if recorder is None:
        return rows, traced_forward(model, rows, ids, valid, logits_to_keep=1).logits[:, -1].float()
    out = traced_forward(model, rows, ids, valid, capture_attention=recorder.capture_attention,
                         capture_hidden=recorder.capture_hidden, logits_to_keep=recorder.logits_to_keep)
    recorder.add(out, rows, valid, items, ids)
    return rows, out.logits[:, -1].float()


def answer(
    model: "ModelLike",
    items: Sequence[tuple["History", Request]],
    candidates: Sequence[Sequence[str]] | None = None,
    max_new_tokens: int = 0,
    cross_checkpoint: bool = False,
    capture: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
) -> list[Answer]:
    """Score candidates after, and/or greedily answer, every (history, request) in one batch.

    Each row runs its question's suffix once; the candidates are scored after
    it (appended, read, rolled back; copies of the rows for hybrid models) and
    the greedy answer continues from it, so scoring costs only the candidate tokens. Rows may come from different
    histories (shorter caches are padded with slots nobody reads).

    Args:
        items: (history, request) pairs, one row each.
        candidates: per item, the strings to score (None: no scoring).
        max_new_tokens: answer budget (0: no generation).
        cross_checkpoint: the histories may come from another checkpoint with the same tokenizer and
            cache shapes (:func:`kvprobe.history.check_reader`); otherwise each must be ``model``'s own.
        capture, layers: internals to keep (``hidden``, ``attention``, ``keys``, ``values``, ``logits``;
            :mod:`kvprobe.activations`) of the question and, when generating, of every generated token fed
            back; they come back on each answer's scores and generation (``.activations``).
    """
    if candidates is None and max_new_tokens < 1:
        raise ValueError("nothing to do: give candidates to score and/or max_new_tokens >= 1")
    if max_new_tokens < 0:
        raise ValueError("max_new_tokens must be at least 0")
    if candidates is not None:
        check_candidates(candidates, len(items))
    recorder = None if capture is None else Recorder(model, capture, layers, len(items))  # checked first
    states = prepare_states(model, items, cross_checkpoint)
    suffixes = [remaining_suffix(model, h, r.question, st) for (h, r), st in zip(items, states)]
    cand_ids = None if candidates is None else candidate_ids(model, candidates)
    scores: list[CandidateScores | None] = [None] * len(items)
    generations: list[Generation | None] = [None] * len(items)
    for group in row_groups(model, items, suffixes):
        rows, last = run_questions(model, [states[i] for i in group], [suffixes[i] for i in group],
                                    group_selector(model, items, group), [items[i][1].label for i in group],
                                    recorder, group)
        if cand_ids is not None:
            sums = candidate_logprobs(model, rows, last, [cand_ids[i] for i in group])
            for r, i in enumerate(group):
                scores[i] = CandidateScores(tuple(candidates[i]), tuple(sums[r]),
                                            tuple(len(c) for c in cand_ids[i]), items[i][1].label)
        if max_new_tokens:
            for i, toks in zip(group, greedy_from(model, rows, last, max_new_tokens, recorder=recorder,
                                                   items=group)):
                generations[i] = generation_from_tokens(model, toks, items[i][1].label)
    if recorder is not None:
        for i, (_, request) in enumerate(items):
            activations = recorder.cache(i, request.label)
            scores[i] = scores[i] and replace(scores[i], activations=activations)
            generations[i] = generations[i] and replace(generations[i], activations=activations)
    return [Answer(s, g) for s, g in zip(scores, generations)]


def score_candidates(
    model: "ModelLike",
    history: "History",
    requests: Sequence[Request],
    candidates: Sequence[str],
    cross_checkpoint: bool = False,
    capture: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
) -> list[CandidateScores]:
    """Score every candidate after every request's question, in one batch."""
    answers = answer(model, [(history, r) for r in requests], [tuple(candidates)] * len(requests),
                     cross_checkpoint=cross_checkpoint, capture=capture, layers=layers)
    return [a.scores for a in answers]


def generate_greedy(
    model: "ModelLike",
    history: "History",
    requests: Sequence[Request],
    max_new_tokens: int = 40,
    cross_checkpoint: bool = False,
    capture: Sequence[str] | None = None,
    layers: Sequence[int] | None = None,
) -> list[Generation]:
    """Greedy decoding of every request in one batch; each row stops at EOS or the cap."""
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    return [a.generation for a in answer(model, [(history, r) for r in requests], max_new_tokens=max_new_tokens,
                                         cross_checkpoint=cross_checkpoint, capture=capture, layers=layers)]


def candidate_logprobs(
    model: "ModelLike", rows: Rows, last: torch.Tensor, cands: list[list[list[int]]]
) -> list[list[float]]:
    """Summed log-probabilities of each row's candidates (token lists) after its question.

    ``last`` Float[B, V] holds each row's logits after its question: they score
    every candidate's first token. The remaining tokens of candidate j run as
    one block appended to every row, which is then truncated back to the
    question (rows without a candidate j get an all-padding block). Hybrid
    models cannot roll recurrent states back: their candidates run on copies of
    the rows, batched by candidate length.
    """
    first = torch.log_softmax(last, dim=-1)
    # One gather and one host copy for every row's first tokens (no sync per candidate).
    row_of = [r for r, row in enumerate(cands) for _ in row]
    token_of = [c[0] for row in cands for c in row]
    picked = iter(first[_index(row_of, first.device), _index(token_of, first.device)].tolist())
    sums = [[next(picked) for _ in row] for row in cands]
    question_end = rows.length
    for j in range(max(len(row) for row in cands)):
        longer = [r for r, row in enumerate(cands) if j < len(row) and len(row[j]) > 1]
        if rows.can_truncate:
            # Append candidate j to every row in place, read it, then roll the rows back.
            groups = [list(range(len(longer)))] if longer else []
        else:
            groups = batches(model, [len(cands[r][j]) for r in longer])
        for sub in groups:
            members = [longer[x] for x in sub]
            if rows.can_truncate:  # every row gets a block; rows without candidate j get padding only
                fork, batch_row = rows, {r: r for r in members}
                blocks = [cands[r][j][:-1] if r in batch_row else [] for r in range(len(cands))]
            else:  # recurrent states: score on copies of the member rows
                fork, batch_row = rows.take(_index(members, model.device)), {r: b for b, r in enumerate(members)}
                blocks = [cands[r][j][:-1] for r in members]
            ids, valid = pad_suffix_block(blocks, model.pad_id, model.device)
            logprobs = torch.log_softmax(traced_forward(model, fork, ids, valid).logits.float(), dim=-1)
            L = ids.shape[1]
            device = logprobs.device
            members_sum = []  # per member, its candidate's summed log-probability (kept on the device)
            for r, b in batch_row.items():
                c = cands[r][j]
                cols = torch.arange(L - len(c) + 1, L, device=device)  # column of c[t] predicts c[t + 1]
                members_sum.append(logprobs[b, cols, _index(c[1:], device)].sum())
            for r, value in zip(batch_row, torch.stack(members_sum).tolist()):  # one host copy
                sums[r][j] += value
            if fork is rows:
                rows.truncate(question_end)
    return sums


def _index(values: Sequence[int], device: torch.device) -> torch.Tensor:
    """A Long index tensor on ``device`` (indexing with a plain list would build it on the default device)."""
    return torch.tensor(list(values), dtype=torch.long, device=device)


def generation_from_tokens(model: "ModelLike", toks: list[int], access: str) -> Generation:
    """The :class:`Generation` of greedy tokens ``toks`` (a final EOS token stops it and is not decoded)."""
    stopped = bool(toks) and toks[-1] in model.eos_ids
    return Generation(
        text=model.tokenizer.decode(toks[:-1] if stopped else toks),
        token_ids=tuple(toks),
        stop_reason="eos" if stopped else "cap",
        n_tokens=len(toks),
        access=access,
    )


def greedy_from(model: "ModelLike", rows: Rows, last: torch.Tensor, max_new_tokens: int,
                 stop_at_eos: bool = True, recorder: Recorder | None = None,
                 items: Sequence[int] = (), keep_rows: bool = False, allow_static: bool = True) -> list[list[int]]:
    """Greedy tokens of a batch whose question already ran (``last``: its logits Float[B, V]).

    Stopping EOS included; finished rows stop recording tokens and leave the batch in
    groups. ``rows`` is consumed. With ``stop_at_eos=False`` every row takes exactly
    ``max_new_tokens`` tokens (an EOS is an ordinary token), no row leaves the batch,
    and ``rows`` then holds every generated token but the last (it was not fed back). A ``recorder``
    keeps the internals of every token fed back for the rows still running (row b as item ``items[b]``).

    On a GPU (:data:`kvprobe.static_decode.STATIC_DECODE_DEVICES`) a batch reading one shared history,
    with no recorder and no ``keep_rows`` (the caller reads ``rows`` afterwards), decodes in fixed
    shapes replayed as a CUDA graph (:mod:`kvprobe.static_decode`); finished rows then stay in the batch.
    ``allow_static=False`` keeps every step on the ordinary path (e.g. to time two conditions on the same path).
    """
    B = last.shape[0]
    generated: list[list[int]] = [[] for _ in range(B)]
    # Bookkeeping on the host (plain lists): one copy of the next tokens per step, no other sync.
    active = list(range(B))  # original index of each row still in the batch
    running = [True] * B  # per batch row: not finished yet
    eos = model.eos_ids
    nxt = last.argmax(dim=-1)
    step_valid = torch.ones(B, 1, dtype=torch.bool, device=nxt.device)
    static = None
    if (allow_static and recorder is None and not keep_rows and max_new_tokens > 1 and nxt.device.type in STATIC_DECODE_DEVICES
            and static_refusal(model, rows) is None):
        static = StaticDecoder(model, rows, max_new_tokens - 1, graph=nxt.device.type == "cuda")
    for step in range(max_new_tokens):
        tokens = nxt.tolist()
        for b, token in enumerate(tokens):
            if running[b]:
                generated[active[b]].append(token)
                if stop_at_eos and token in eos:
                    running[b] = False
        if step == max_new_tokens - 1 or not any(running):
            break
        if static is not None:  # fixed shapes: every row stays in the batch
            nxt = static.step(nxt).argmax(dim=-1)
            continue
        # Copying the batch costs about as much as a few steps of a finished row, so
        # finished rows leave in groups (at least a quarter of the batch at once).
        finished = running.count(False)
        if finished and finished * 4 >= len(running):
            keep = [b for b, alive in enumerate(running) if alive]
            keep_rows = torch.tensor(keep, dtype=torch.long, device=nxt.device)
            rows.select(keep_rows)
            active, running = [active[b] for b in keep], [True] * len(keep)
            nxt, step_valid = nxt[keep_rows], step_valid[: len(keep)]
        if recorder is None:
            out = traced_forward(model, rows, nxt[:, None], step_valid, logits_to_keep=1)
        else:
            out = traced_forward(model, rows, nxt[:, None], step_valid, capture_attention=recorder.capture_attention,
                                 capture_hidden=recorder.capture_hidden, logits_to_keep=1)
            recorder.add(out, rows, step_valid, [items[active[b]] if alive else None
                                                 for b, alive in enumerate(running)], nxt[:, None])
        nxt = out.logits[:, -1].argmax(dim=-1)
    return generated
