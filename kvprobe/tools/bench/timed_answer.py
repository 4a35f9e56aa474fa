"""One request answered alone with the time of each phase: what ``kvprobe bench latency`` measures.

:func:`answer_timed` runs the steps of :func:`kvprobe.decoding.answer` for a one-row batch (the
condition's row state, the question's forward and first token, the remaining greedy tokens) and reads
:func:`device_clock` at each boundary the paper times (app:v41_public_hard: policy construction, query
processing, decoding), giving :class:`PhaseTimes`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

import kvprobe
from kvprobe.decoding import (Generation, Request, generation_from_tokens, greedy_from, group_selector,
                              prepare_states, remaining_suffix, run_questions)
from kvprobe.static_decode import STATIC_DECODE_DEVICES, static_refusal


@dataclass(frozen=True)
class PhaseTimes:
    """Seconds of the phases of one answer (:func:`answer_timed`), each measured after an accelerator sync.

    ``condition_s``: the condition's row state built from the prefilled history (``Condition.prepare``: a
    hidden vector, a bias, a recompute ...); ``query_s``: the question suffix tokenized, the row forked off
    the history, the suffix run and the first answer token chosen; ``decode_s``: the remaining greedy tokens.
    ``decode_path``: ``"static"`` (fixed shapes, a CUDA graph on CUDA) or ``"ordinary"``, with the reason.
    """

    condition_s: float
    query_s: float
    decode_s: float
    decode_path: str

    @property
    def first_token_s(self) -> float:
        """Time to the first answer token once the history is prefilled (condition + query)."""
        return self.condition_s + self.query_s

    @property
    def complete_s(self) -> float:
        """The whole answer after the prefilled history."""
        return self.condition_s + self.query_s + self.decode_s


def device_clock(device: torch.device) -> float:
    """``time.perf_counter()`` after the device's queued work has finished (CUDA is synchronised)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()


def answer_timed(model: kvprobe.Model, history: kvprobe.History, request: Request, max_new_tokens: int,
                 static: bool = True) -> tuple[Generation, PhaseTimes]:
    """One request answered alone (greedy, EOS stop), with the time of each phase (:class:`PhaseTimes`).

    The same computation as :func:`kvprobe.decoding.answer` on a one-row batch, split at the phase boundaries the paper
    times (its app:v41_public_hard: policy construction, query processing, decoding). ``static=False``
    keeps decoding off the fixed-shape path, so conditions that cannot use it (a logit bias) are compared
    on the same path as those that can.

    Example:
        >>> gen, t = answer_timed(model, history, Request("Where?", kvprobe.Mask(spans=["A"])), 16)  # doctest: +SKIP
        >>> t.first_token_s < t.complete_s
        True
    """
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    items = [(history, request)]
    start = device_clock(model.device)
    state = prepare_states(model, items)[0]
    prepared = device_clock(model.device)
    rows, last = run_questions(model, [state], [remaining_suffix(model, history, request.question, state)],
                                group_selector(model, items, [0]), [request.label])
    int(last[0].argmax())  # the first token reaches the host
    first = device_clock(model.device)
    refusal = static_refusal(model, rows) if model.device.type in STATIC_DECODE_DEVICES else "not an accelerator"
    if not static:
        refusal = "static=False"
    path = "static" if refusal is None else f"ordinary ({refusal})"
    decode_start = device_clock(model.device)
    toks = greedy_from(model, rows, last, max_new_tokens, allow_static=static)[0]
    done = device_clock(model.device)
    return (generation_from_tokens(model, toks, request.label),
            PhaseTimes(prepared - start, first - prepared, done - decode_start, path))
