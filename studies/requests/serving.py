"""Timed serving primitives: encode a history, answer one request, check cache edges.

Everything timed here uses ``time.perf_counter`` around library calls that do the
work a server does, and nothing else:

* :func:`encode` is ``Model.prefill`` without the K/V digest (a check, so it is
  computed afterwards, untimed, by :func:`seal`): tokenize the whole history text,
  copy the rows it shares with ``reuse`` (the resident cache), run the rest in
  512-token chunks. Appending B to the resident history and re-encoding the text
  without A are both this call.
* :func:`serve` answers one question on its own copy of the cache: suffix
  tokenization, cache copy (the condition's row state and the forked slot cache),
  the suffix prefill up to the first answer token, then greedy decoding to EOS or the
  budget (detokenization included). It produces exactly the tokens
  ``kvprobe.decoding.answer`` produces for a batch of one (tested).

CPU only: there is no device to synchronize. Hybrid models hold recurrent states
only after a whole history, so they reuse ``reuse`` only when it is a token prefix
of the new text (the workload's resident history is: it ends right after the other
record, so appending B works on hybrids too); otherwise, and for a stored-prefix
recompute, they encode from the start.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

import kvprobe
from kvprobe.decoding import Generation, generation_from_tokens, greedy_from, suffix_ids
from kvprobe.forward import traced_forward
from kvprobe.rows import fork_rows, pad_suffix_block
from kvprobe.history import kv_digest

now = time.perf_counter


@dataclass
class Encoded:
    """A history encoded by :func:`encode` and what it cost (seconds)."""

    history: kvprobe.History
    tokenize_s: float
    encode_s: float
    reused_tokens: int
    computed_tokens: int


def encode(model: kvprobe.Model, prompt: kvprobe.Prompt, reuse: kvprobe.History | None = None,
           chunk_size: int | None = None) -> Encoded:
    """Tokenize and prefill ``prompt``'s history, reusing the rows it shares with ``reuse``.

    The history's ``digest`` is left empty; call :func:`seal` (untimed) before checks.
    """
    t0 = now()
    rendered, ids, offsets = model.tokenize(prompt)
    t1 = now()
    history = model.prefill_tokens(prompt, rendered, ids, offsets, chunk_size=chunk_size, reuse=reuse, digest=False)
    t2 = now()
    return Encoded(history, t1 - t0, t2 - t1, history.reused_tokens, len(history) - history.reused_tokens)


def seal(history: kvprobe.History) -> kvprobe.History:
    """Set the history's K/V digest (untimed; :func:`encode` leaves it empty)."""
    history.digest = kv_digest(history.kv, history.recurrent)
    return history


@dataclass
class Served:
    """One answered request and its components (seconds)."""

    generation: Generation
    tokenize_s: float
    copy_s: float
    prefill_s: float
    decode_s: float

    @property
    def total_s(self) -> float:
        return self.tokenize_s + self.copy_s + self.prefill_s + self.decode_s


def serve(model: kvprobe.Model, history: kvprobe.History, question: str, access: kvprobe.Condition,
          max_new_tokens: int) -> Served:
    """Answer ``question`` on a copy of ``history`` under ``access``: greedy, EOS or ``max_new_tokens``."""
    if max_new_tokens < 1:
        raise ValueError("max_new_tokens must be at least 1")
    t0 = now()
    ids = suffix_ids(model, history, question)
    t1 = now()
    rows = fork_rows([access.prepare(model, history, question)])
    t2 = now()
    block, valid = pad_suffix_block([ids], model.pad_id, model.device)
    last = traced_forward(model, rows, block, valid, logits_to_keep=1).logits[:, -1].float()
    t3 = now()
    generation = generation_from_tokens(model, greedy_from(model, rows, last, max_new_tokens)[0], access.name)
    t4 = now()
    return Served(generation, t1 - t0, t2 - t1, t3 - t2, t4 - t3)


def edge_rows(history: kvprobe.History) -> list[torch.Tensor]:
    """Copies of the first and last cached K and V row of every layer that stores rows."""
    out = []
    for k, v in history.kv:
        if k is not None:
            out += [t[:, :, i].clone() for t in (k, v) for i in (0, -1)]
    return out


def same_rows(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Bitwise equality of two :func:`edge_rows` snapshots."""
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))

