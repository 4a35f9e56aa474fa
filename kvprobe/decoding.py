"""Candidate scoring and greedy generation after a history, under access conditions.

Both functions take a list of *requests* (question, access condition) on one
history and run them together as one batch: each request is one row (one row
per candidate when scoring), each row a fork of the history cache with its own
hidden columns. Question tokens are placed right after the history with
explicit positions ``T, T+1, ...``; shorter rows are left-padded inside the
question block and their padding slots are never read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import torch

from .access import Access
from .engine import ForwardOutput, RowState, fork_rows, pad_suffix_block, traced_forward

if TYPE_CHECKING:
    from .history import History
    from .model import Model


@dataclass(frozen=True)
class Request:
    """One question asked of a history under one access condition."""

    question: str
    access: Access


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


def prepare_states(model: "Model", history: "History", requests: Sequence[Request]) -> list[RowState]:
    """Each request's row state (its condition applied to its own view of the history).

    Conditions whose state does not depend on the question (all but gated biases)
    are prepared once per batch, so a recompute runs once for all its questions.
    """
    states: list[RowState] = []
    done: dict[int, RowState] = {}
    for req in requests:
        key = id(req.access)
        if req.access.question_dependent or key not in done:
            done[key] = req.access.prepare(model, history, req.question)
        states.append(done[key])
    return states


def suffix_ids(model: "Model", history: "History", question: str) -> list[int]:
    """Token ids of one question's suffix (question + template tail)."""
    if not question:
        raise ValueError("empty question")
    return model.tokenizer(history.rendered.suffix(question), add_special_tokens=False)["input_ids"]


def question_logits(
    model: "Model",
    history: "History",
    question: str,
    conditions: Sequence[Access],
    capture_attention: tuple[int, ...] = (),
    logits_to_keep: int = 0,
) -> ForwardOutput:
    """One traced forward of ``question``'s suffix under each condition (one row each).

    The building block of checks and benchmarks: logits Float[len(conditions), L, V]
    and any captured attention probabilities.
    """
    rows = fork_rows(prepare_states(model, history, [Request(question, c) for c in conditions]))
    ids, valid = pad_suffix_block([suffix_ids(model, history, question)] * len(conditions), model.pad_id)
    return traced_forward(model, rows, ids, valid, capture_attention=capture_attention,
                          logits_to_keep=logits_to_keep)


def batches(model: "Model", lengths: Sequence[int]) -> list[list[int]]:
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


def score_candidates(
    model: "Model",
    history: "History",
    requests: Sequence[Request],
    candidates: Sequence[str],
) -> list[CandidateScores]:
    """Score every candidate after every request's question, in one batch."""
    candidates = tuple(candidates)
    if not candidates or any(not c for c in candidates):
        raise ValueError("candidates must be a non-empty list of non-empty strings")
    cand_ids = [model.tokenizer(c, add_special_tokens=False)["input_ids"] for c in candidates]
    sequences, states, targets = [], [], []
    for req, state in zip(requests, prepare_states(model, history, requests)):
        q = suffix_ids(model, history, req.question)
        for c in cand_ids:
            sequences.append(q + c)
            states.append(state)
            targets.append(c)
    sums = [0.0] * len(sequences)
    for group in batches(model, [len(s) for s in sequences]):
        rows = fork_rows([states[i] for i in group])
        ids, valid = pad_suffix_block([sequences[i] for i in group], model.pad_id)
        logprobs = torch.log_softmax(traced_forward(model, rows, ids, valid).logits.float(), dim=-1)
        L = ids.shape[1]
        for r, i in enumerate(group):
            c = targets[i]
            cols = torch.arange(L - len(c), L)
            sums[i] = float(logprobs[r, cols - 1, torch.tensor(c)].sum())
    k = len(cand_ids)
    return [
        CandidateScores(candidates, tuple(sums[j * k : (j + 1) * k]), tuple(len(c) for c in cand_ids), req.access.name)
        for j, req in enumerate(requests)
    ]


def generate_greedy(
    model: "Model",
    history: "History",
    requests: Sequence[Request],
    max_new_tokens: int = 40,
) -> list[Generation]:
    """Greedy decoding of every request in one batch; each row stops at EOS or the cap."""
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    states = prepare_states(model, history, requests)
    suffixes = [suffix_ids(model, history, r.question) for r in requests]
    generated: list[list[int]] = [[] for _ in requests]
    for group in batches(model, [len(s) for s in suffixes]):
        tokens = _greedy(model, [states[i] for i in group], [suffixes[i] for i in group], max_new_tokens)
        for i, toks in zip(group, tokens):
            generated[i] = toks
    results = []
    for toks, req in zip(generated, requests):
        stopped = bool(toks) and toks[-1] in model.eos_ids
        text_ids = toks[:-1] if stopped else toks
        results.append(
            Generation(
                text=model.tokenizer.decode(text_ids),
                token_ids=tuple(toks),
                stop_reason="eos" if stopped else "cap",
                n_tokens=len(toks),
                access=req.access.name,
            )
        )
    return results


def _greedy(model: "Model", states: list[RowState], suffixes: list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy tokens of one batch of rows (stopping EOS included); finished rows leave the batch."""
    rows = fork_rows(states)
    ids, valid = pad_suffix_block(suffixes, model.pad_id)
    generated: list[list[int]] = [[] for _ in states]
    active = torch.arange(len(states))  # original index of each row still decoding
    eos = torch.tensor(sorted(model.eos_ids), dtype=torch.long)
    step_ids, step_valid = ids, valid
    for _ in range(max_new_tokens):
        out = traced_forward(model, rows, step_ids, step_valid, logits_to_keep=1)
        nxt = out.logits[:, -1].argmax(dim=-1)
        for b, i in enumerate(active.tolist()):
            generated[i].append(int(nxt[b]))
        going = ~torch.isin(nxt, eos)
        if not bool(going.any()):
            break
        if not bool(going.all()):
            keep = torch.nonzero(going).flatten()
            rows.select(keep)
            active, nxt = active[keep], nxt[keep]
        step_ids, step_valid = nxt[:, None], torch.ones(len(active), 1, dtype=torch.bool)
    return generated
