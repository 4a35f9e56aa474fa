"""The controlled-history protocol of the component study (paper L1293-1301): reason, cue, score.

:func:`reason_then_score` continues every row greedily for exactly N tokens without EOS stopping,
appends the answer cue, then scores the candidate options, all under each row's condition and in one
batch. It arranges the decoding steps of :mod:`kvprobe.decoding` (the question's forward, greedy
tokens, candidate scores) in the study's own order; its users are this study (``study.py``) and its
relevance variant (``relevance.py``).
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

import kvprobe
from kvprobe.decoding import (CandidateScores, Generation, Request, candidate_ids, candidate_logprobs,
                              check_candidates, greedy_from, group_selector, prepare_states, remaining_suffix,
                              row_groups, run_questions)
from kvprobe.forward import ForwardOutput, traced_forward
from kvprobe.rows import Rows


def reason_then_score(
    model: kvprobe.Model,
    items: Sequence[tuple[kvprobe.History, Request]],
    candidates: Sequence[Sequence[str]],
    budget: int,
    cue: str,
    capture_attention: tuple[int, ...] = (),
    on_cue: Callable[[list[int], Rows, ForwardOutput], None] | None = None,
) -> list[tuple[Generation, CandidateScores]]:
    """Continue greedily for exactly ``budget`` tokens, append ``cue``, then score candidates; one batch.

    For every (history, request) row: its question suffix runs once, then exactly
    ``budget`` greedy tokens follow with no EOS stopping (an EOS is fed back like
    any token), then the tokens of ``cue`` (tokenized alone, no special tokens),
    then each candidate (tokenized alone, no special tokens) is scored by its
    summed teacher-forced log-probability after the cue (appended, read, rolled
    back, as in :func:`kvprobe.decoding.answer`). The row's access condition holds for every token
    after the history: question, continuation, cue and candidates. The last
    continuation token and the cue run as one block.

    Args:
        items: (history, request) pairs, one row each (histories may differ).
        candidates: per item, the non-empty strings to score.
        budget: continuation tokens (0: the cue follows the question directly).
        cue: text between the continuation and the candidates (may be empty).
        capture_attention: layers whose attention probabilities the block of the last
            continuation token and the cue captures (read them in ``on_cue``).
        on_cue: called after that block with (item indices of the batch rows, the rows,
            the block's :class:`~kvprobe.forward.ForwardOutput`), e.g. to read how much the
            token before the candidates attends to a span; not called when the block is empty.

    Returns:
        per item, (the continuation, the candidate scores). The continuation's
        ``text`` decodes all ``budget`` tokens (special tokens included) and its
        ``stop_reason`` is ``"cap"``.

    Example:
        >>> [(reasoning, scores)] = reason_then_score(model, [(h, Request(q, kvprobe.Full()))],  # doctest: +SKIP
        ...                                           [("yes", "no")], budget=32, cue="\nAnswer:")
        >>> reasoning.n_tokens, scores.margin()  # doctest: +SKIP
        (32, 1.7)
    """
    if budget < 0:
        raise ValueError("budget must be at least 0")
    check_candidates(candidates, len(items))
    states = prepare_states(model, items)
    suffixes = [remaining_suffix(model, h, r.question, st) for (h, r), st in zip(items, states)]
    cue_ids = model.tokenizer(cue, add_special_tokens=False)["input_ids"] if cue else []
    cand_ids = candidate_ids(model, candidates)
    out: list[tuple[Generation, CandidateScores] | None] = [None] * len(items)
    for group in row_groups(model, items, suffixes):
        rows, last = run_questions(model, [states[i] for i in group], [suffixes[i] for i in group],
                                    group_selector(model, items, group), [items[i][1].label for i in group])
        toks = ([[] for _ in group] if not budget
                else greedy_from(model, rows, last, budget, stop_at_eos=False, keep_rows=True))
        block = [t[-1:] + cue_ids for t in toks]  # the last continuation token was not fed back yet
        if block[0]:
            feed = torch.tensor(block, dtype=torch.long, device=model.device)
            block_out = traced_forward(model, rows, feed, logits_to_keep=1, capture_attention=capture_attention)
            if on_cue is not None:
                on_cue(group, rows, block_out)
            last = block_out.logits[:, -1].float()
        sums = candidate_logprobs(model, rows, last, [cand_ids[i] for i in group])
        for r, i in enumerate(group):
            name = items[i][1].label
            generation = Generation(text=model.tokenizer.decode(toks[r]), token_ids=tuple(toks[r]),
                                    stop_reason="cap", n_tokens=len(toks[r]), access=name)
            scores = CandidateScores(tuple(candidates[i]), tuple(sums[r]), tuple(len(c) for c in cand_ids[i]), name)
            out[i] = (generation, scores)
    return out  # type: ignore[return-value]
