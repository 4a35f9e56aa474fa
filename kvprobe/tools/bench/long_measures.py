"""The measures of ``kvprobe bench long`` on one history: kvprobe beside the loop written by hand.

Each ``measure_*`` times kvprobe and plain transformers (``model.hf`` under transformers' own SDPA
attention, same weights: :func:`transformers_sdpa`) on the same history, interleaved after warm-ups
(:mod:`.measure`), checks that both sides agree and returns one cell of ``long.json``:

* :func:`measure_prefill`: ``model.prefill`` against a chunked plain prefill into a ``DynamicCache``;
* :func:`measure_decode`: the masked (access-only) decode step of B rows against a plain batched
  loop with an explicit additive mask hiding record A;
* :func:`measure_operation`: a condition's state (``Condition.prepare``) and the first answer token
  against the same work by hand (:func:`plain_operation`).

The run that calls them per length, and resumes, is :mod:`.long`; the report is :mod:`.long_report`.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import time
from typing import Any, Callable, Sequence

import torch
from transformers import DynamicCache

import kvprobe
from kvprobe.access import Mask, Prepared
from kvprobe.decoding import question_logits, suffix_ids
from kvprobe.forward import shares_history, traced_forward
from kvprobe.history import kv_digest
from kvprobe.interventions.registry import CONDITIONS, covered_by, parse_condition
from kvprobe.model import _common_prefix
from kvprobe.reference import attention_implementation, explicit_cached_mask
from kvprobe.rows import fork_rows, pad_suffix_block
from kvprobe.transformers_api import cache_argument

from .measure import interleave, measured, median_ms, self_timed, weight_bytes
from .operations import QUESTION

#: The operations timed beside their plain transformers equivalents: the registered conditions that name this
#: benchmark (``benches`` in :data:`kvprobe.interventions.CONDITIONS`), built from their example on record A.
OPERATIONS = covered_by("long")
#: Agreement tolerances: last-layer K (relative to its largest magnitude), decode-step logits (absolute).
PREFILL_K_RTOL = 1e-4
DECODE_LOGITS_ATOL = 1e-3


def kv_bytes(history: kvprobe.History) -> int:
    """Bytes of the history's cached K/V."""
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in history.kv if k is not None)


def _alone(stats: dict[str, float]) -> dict[str, float]:
    """One side's memory measured alone, as long.json records it."""
    return {"peak_bytes": stats["peak_bytes"], "increment_bytes": stats["increment_bytes"], "seconds": stats["seconds"]}


def _side(runs: dict) -> dict[str, Any]:
    """Median ms and the worst memory of one side's runs."""
    return {"ms": [1e3 * s for s in runs["seconds"]], "median_ms": median_ms(runs),
            "peak_bytes": max(runs["peak_bytes"]), "increment_bytes": max(runs["increment_bytes"])}


# --------------------------------------------------------------------------- plain transformers


def transformers_sdpa(model: kvprobe.Model):
    """Run ``model.hf`` under transformers' own SDPA attention inside the block (same weights), then restore."""
    return attention_implementation(model, "sdpa")


def _cache(kv, n: int | None = None, rows: int = 1) -> DynamicCache:
    """A transformers cache holding the first ``n`` rows of ``kv`` (all by default), repeated per row.
    The tensors are copied (one layer at a time), so the history stays untouched."""
    def layers():
        for k, v in kv:
            k, v = k[:, :, :n], v[:, :, :n]
            yield (k.repeat(rows, 1, 1, 1), v.repeat(rows, 1, 1, 1)) if rows > 1 else (k, v)
    return DynamicCache(ddp_cache_data=layers())


def _per_row(mask, rows: int):
    """A [1, 1, Q, S] mask (or a dict of them per layer type) as [rows, 1, Q, S]."""
    if isinstance(mask, dict):
        return {t: None if m is None else m.expand(rows, -1, -1, -1) for t, m in mask.items()}
    return mask.expand(rows, -1, -1, -1)


def _rowwise_choice(rows_first: torch.Tensor, first, second):
    """Mask rows from ``first`` where Bool[Q] ``rows_first``, else from ``second`` (dicts per layer type too)."""
    pick = rows_first[None, None, :, None]
    if isinstance(first, dict):
        return {t: None if first[t] is None else torch.where(pick, first[t], second[t]) for t in first}
    return torch.where(pick, first, second)


def plain_prefill(model: kvprobe.Model, ids: torch.Tensor, chunk_size: int, cache: DynamicCache | None = None,
                  start: int = 0,
                  mask_for: Callable[[int, int], Any] | None = None) -> tuple[DynamicCache, torch.Tensor]:
    """Run Long[n] ``ids`` at positions ``start..`` through ``model.hf`` in chunks, into ``cache``.

    ``mask_for(first_position, n_tokens)`` gives an explicit attention mask per chunk (default:
    transformers builds its causal mask). Returns the cache and the last token's logits.
    """
    if cache is None:
        cache = DynamicCache(config=model.hf.config)
    n = int(ids.shape[0])
    logits = None
    for lo in range(0, n, chunk_size):
        hi = min(lo + chunk_size, n)
        kwargs = dict(input_ids=ids[lo:hi][None], position_ids=torch.arange(start + lo, start + hi)[None],
                      use_cache=True, logits_to_keep=1, **cache_argument(model.hf, cache))
        if mask_for is not None:
            kwargs["attention_mask"] = mask_for(start + lo, hi - lo)
        logits = model.hf(**kwargs).logits[0, -1]
    return cache, logits


def plain_question(model: kvprobe.Model, cache: DynamicCache, q: Sequence[int], start: int,
                   mask=None, rows: int = 1) -> torch.Tensor:
    """The question ``q`` at positions ``start..`` on ``cache``: last-token logits Float[rows, V]."""
    L = len(q)
    kwargs = dict(input_ids=torch.tensor([list(q)] * rows),
                  position_ids=torch.arange(start, start + L)[None].expand(rows, -1),
                  use_cache=True, logits_to_keep=1, **cache_argument(model.hf, cache))
    if mask is not None:
        kwargs["attention_mask"] = mask
    return model.hf(**kwargs).logits[:, -1]


def _hidden_a(history: kvprobe.History) -> torch.Tensor:
    span = history.span("A")
    hidden = torch.zeros(len(history), dtype=torch.bool)
    hidden[span.start : span.end] = True
    return hidden


def _edited_prompt(history: kvprobe.History) -> kvprobe.Prompt:
    """The history's prompt without record A (what a recompute prefills)."""
    return dataclasses.replace(history.prompt, segments=[(n, t) for n, t in history.prompt.segments if n != "A"])


#: A plain operation by hand: ``(model, history, question ids, chunk size)`` -> (the first answer token's
#: forward, still to run, and facts about the operation); the operation's own work is done before it returns.
PlainOperation = Callable[[kvprobe.Model, kvprobe.History, Sequence[int], int],
                          tuple[Callable[[], torch.Tensor], dict[str, Any]]]


def _plain_mask(model, history, q, chunk_size):
    """Mask: the question under an explicit mask hiding A (the cache copy is the question's cost)."""
    T, hidden = len(history), _hidden_a(history)

    def question():
        return plain_question(model, _cache(history.kv), q, T, explicit_cached_mask(model, T, T, len(q), hidden))
    return question, {}


def _plain_rebuild(model, history, q, chunk_size):
    """Rebuild: the cache before A kept, every later token prefilled again with A hidden from those after it."""
    T, span, hidden = len(history), history.span("A"), _hidden_a(history)
    zeros = torch.zeros(T, dtype=torch.bool)

    def mask_for(first: int, n: int):  # A's own rows see A; every later row does not
        S = first + n
        visible = explicit_cached_mask(model, S, first, n, zeros[:S])
        hiding = explicit_cached_mask(model, S, first, n, hidden[:S])
        return _rowwise_choice(torch.arange(first, S) < span.end, visible, hiding)

    cache, _ = plain_prefill(model, history.input_ids[span.start:], chunk_size, _cache(history.kv, span.start),
                             start=span.start, mask_for=mask_for)
    return (lambda: plain_question(model, cache, q, T, explicit_cached_mask(model, T, T, len(q), hidden))), {}


def _plain_recompute(model, history, q, chunk_size, stored_prefix: bool = False):
    """Recompute: a fresh chunked prefill of the history without A's text (``stored_prefix``: the cached rows
    before A copied, only the edited rest prefilled)."""
    rendered, ids, _ = model.tokenize(_edited_prompt(history))
    reused = min(_common_prefix(ids, history.input_ids), history.span("A").start, len(ids) - 1) if stored_prefix \
        else 0
    cache, _ = plain_prefill(model, ids[reused:], chunk_size, _cache(history.kv, reused) if reused else None,
                             start=reused)

    def question():
        edited_q = model.tokenizer(rendered.suffix(QUESTION), add_special_tokens=False)["input_ids"]
        return plain_question(model, cache, edited_q, int(ids.shape[0]))
    return question, {"reused_tokens": reused, "history_tokens": int(ids.shape[0])}


#: Operation name -> its plain transformers version (one per name of :data:`OPERATIONS`).
PLAIN_OPERATIONS: dict[str, PlainOperation] = {
    "mask": _plain_mask, "rebuild": _plain_rebuild, "recompute": _plain_recompute,
    "recompute-prefix": functools.partial(_plain_recompute, stored_prefix=True)}


def plain_operation(model: kvprobe.Model, history: kvprobe.History, name: str, chunk_size: int) -> dict[str, Any]:
    """One operation and its first answer token by hand under SDPA: op and question seconds, logits, token."""
    if name not in PLAIN_OPERATIONS:
        raise ValueError(f"unknown operation {name!r}; choose one of {', '.join(OPERATIONS)}")
    q = suffix_ids(model, history, QUESTION)
    with torch.inference_mode(), transformers_sdpa(model):
        t0 = time.perf_counter()
        question, info = PLAIN_OPERATIONS[name](model, history, q, chunk_size)
        t1 = time.perf_counter()
        logits = question()
        t2 = time.perf_counter()
    return {"op_s": t1 - t0, "first_token_s": t2 - t1, "logits": logits[0].float().clone(),
            "token": int(logits[0].argmax()), "info": info}


# --------------------------------------------------------------------------- kvprobe side


def _layout(rows) -> str:
    """The cache layer class of the batch's first attention layer (per-row copies or a shared history)."""
    names = [type(layer).__name__ for layer in rows.cache.layers if type(layer).__name__ != "DummyLayer"]
    return names[0] if names else "none"


def kvprobe_operation(model: kvprobe.Model, history: kvprobe.History, name: str, chunk_size: int) -> dict[str, Any]:
    """``Condition.prepare`` then the question (``kvprobe bench operations``' first_token): seconds, logits, token."""
    op = parse_condition(CONDITIONS[name].spec(name), history)
    if any(f.name == "chunk_size" for f in dataclasses.fields(op)):  # the recomputes prefill in the bench's chunks
        op = dataclasses.replace(op, chunk_size=chunk_size)
    t0 = time.perf_counter()
    state = op.prepare(model, history, QUESTION)
    t1 = time.perf_counter()
    out = question_logits(model, history, QUESTION, [Prepared(state, name)], logits_to_keep=1)
    t2 = time.perf_counter()
    logits = out.logits[0, -1].float().clone()
    info = {k: v for k, v in state.info.items() if isinstance(v, (int, float, bool, str))}
    return {"op_s": t1 - t0, "first_token_s": t2 - t1, "logits": logits, "token": int(logits.argmax()), "info": info}


# --------------------------------------------------------------------------- measures


def measure_prefill(model: kvprobe.Model, history: kvprobe.History, warmups: int, repeats: int,
                    chunk_size: int) -> dict[str, Any]:
    """Tokens/s of ``model.prefill`` vs a plain chunked SDPA prefill of the same ids; last-layer K agreement."""
    prompt, ids = history.prompt, history.input_ids
    T = len(history)

    def kv_run():
        h = model.prefill(prompt, chunk_size=chunk_size)
        return h.kv[-1][0].clone()

    def plain_run():
        with torch.inference_mode(), transformers_sdpa(model):
            cache, _ = plain_prefill(model, ids, chunk_size)
        return cache.layers[-1].keys.clone()

    runs, last = interleave({"kvprobe": kv_run, "plain": plain_run}, warmups, repeats, measured)
    k_kv, k_plain = last["kvprobe"], last["plain"]
    diff = float((k_kv - k_plain).abs().max())
    rel = diff / max(float(k_plain.abs().max()), 1e-30)
    # What model.prefill does beyond the forwards: tokenizing and hashing the cache.
    t0 = time.perf_counter()
    model.tokenize(prompt)
    t1 = time.perf_counter()
    kv_digest(history.kv, history.recurrent)
    t2 = time.perf_counter()
    kv, plain = _side(runs["kvprobe"]), _side(runs["plain"])
    for side in (kv, plain):
        side["tokens_per_s"] = T / (side["median_ms"] / 1e3)
    return {"history_tokens": T, "chunk_size": chunk_size, "warmups": warmups, "repeats": repeats,
            "kvprobe": {**kv, "overhead_ms": {"tokenize": 1e3 * (t1 - t0), "digest": 1e3 * (t2 - t1)}},
            "plain": plain, "speedup": plain["median_ms"] / kv["median_ms"],
            "check": {"what": "last-layer K, max |kvprobe - plain| / max |plain|", "max_abs_diff": diff,
                      "relative_diff": rel, "tolerance": PREFILL_K_RTOL, "passed": rel <= PREFILL_K_RTOL},
            "memory": {"needs_bytes": weight_bytes(model) + kv_bytes(history)}}


@dataclasses.dataclass
class _KvprobeDecode:
    """kvprobe's side of a decode cell: ``rows`` forks of the masked state, the question, single-token steps."""

    model: kvprobe.Model
    state: Any
    q: Sequence[int]
    rows: int

    def setup(self):
        """(the forked rows, the question's last logits Float[rows, V])."""
        forked = fork_rows([self.state] * self.rows, share=shares_history(self.model))
        ids, valid = pad_suffix_block([self.q] * self.rows, self.model.pad_id, self.model.device)
        return forked, traced_forward(self.model, forked, ids, valid, logits_to_keep=1).logits[:, -1]

    def step(self, forked, token):
        """(last logits, seconds) of one decode step."""
        t0 = time.perf_counter()
        logits = traced_forward(self.model, forked, token, logits_to_keep=1).logits[:, -1]
        return logits, time.perf_counter() - t0


@dataclasses.dataclass
class _PlainDecode:
    """The plain side: the history's K/V repeated per row and an explicit [rows, 1, Q, S] mask hiding A."""

    model: kvprobe.Model
    history: kvprobe.History
    q: Sequence[int]
    rows: int

    def __post_init__(self):
        self.T, self.hidden = len(self.history), _hidden_a(self.history)

    def setup(self):
        """(the cache, the question's last logits Float[rows, V])."""
        with torch.inference_mode(), transformers_sdpa(self.model):
            cache = _cache(self.history.kv, rows=self.rows)
            mask = _per_row(explicit_cached_mask(self.model, self.T, self.T, len(self.q), self.hidden), self.rows)
            return cache, plain_question(self.model, cache, self.q, self.T, mask, rows=self.rows)

    def step(self, cache, token, pos: int):
        """(last logits, seconds) of one decode step at position ``pos``."""
        with torch.inference_mode(), transformers_sdpa(self.model):
            t0 = time.perf_counter()  # switching to SDPA is not the loop's cost; building its mask is
            mask = _per_row(explicit_cached_mask(self.model, self.T, pos, 1, self.hidden), self.rows)
            logits = self.model.hf(input_ids=token, position_ids=torch.full((self.rows, 1), pos), attention_mask=mask,
                                   use_cache=True, logits_to_keep=1,
                                   **cache_argument(self.model.hf, cache)).logits[:, -1]
            return logits, time.perf_counter() - t0


def _decode_alone(kv: _KvprobeDecode, plain: _PlainDecode, start: int) -> dict[str, Any]:
    """Each side alone (set-up, question, first step at position ``start``): peak memory and agreement."""
    def kv_alone():
        forked, q_logits = kv.setup()
        token = q_logits[:1].argmax(-1).expand(kv.rows)[:, None].clone()
        step, _ = kv.step(forked, token)
        return q_logits.float().clone(), step.float().clone(), token, _layout(forked)

    gc.collect()
    (kv_q, kv_first, token, layout), kv_mem = measured(kv_alone)

    def plain_alone():
        cache, q_logits = plain.setup()
        return q_logits.float().clone(), plain.step(cache, token, start)[0].float().clone()

    (plain_q, plain_first), plain_mem = measured(plain_alone)
    return {"token": token, "layout": layout, "kv_mem": kv_mem, "plain_mem": plain_mem,
            "diff": float((kv_first - plain_first).abs().max()), "q_diff": float((kv_q - plain_q).abs().max())}


def _decode_timed(kv: _KvprobeDecode, plain: _PlainDecode, token, start: int, warmups: int,
                  steps: int) -> dict[str, list[float]]:
    """Interleaved steps on both sides' caches (every pass decodes the next position): seconds per side."""
    live = {"kvprobe": kv.setup()[0], "plain": plain.setup()[0], "passes": 0}

    def plain_timed():  # every pass decodes the next position (warm-up passes included)
        live["passes"] += 1
        return plain.step(live["plain"], token, start + live["passes"] - 1)

    runs, _ = interleave({"kvprobe": lambda: kv.step(live["kvprobe"], token), "plain": plain_timed}, 0,
                         warmups + steps, self_timed)
    live.clear()
    return {side: runs[side]["seconds"][warmups:] for side in runs}  # the first passes warm up


def measure_decode(model: kvprobe.Model, history: kvprobe.History, n_rows: int, warmups: int,
                   steps: int) -> dict[str, Any]:
    """Masked (access-only) decode step of ``n_rows`` rows: kvprobe vs a plain batched SDPA loop."""
    T = len(history)
    q = suffix_ids(model, history, QUESTION)
    L = len(q)
    state = Mask(history.span("A"), name="mask").prepare(model, history)
    kv, plain = _KvprobeDecode(model, state, q, n_rows), _PlainDecode(model, history, q, n_rows)
    alone = _decode_alone(kv, plain, T + L)
    timed = _decode_timed(kv, plain, alone["token"], T + L, warmups, steps)
    kv_ms, plain_ms = median_ms({"seconds": timed["kvprobe"]}), median_ms({"seconds": timed["plain"]})
    history_bytes, weights = kv_bytes(history), weight_bytes(model)
    return {"history_tokens": T, "rows": n_rows, "question_tokens": L, "warmups": warmups, "steps": steps,
            "kvprobe": {"ms": [1e3 * s for s in timed["kvprobe"]], "median_ms": kv_ms,
                        "cache_layout": alone["layout"]},
            "plain": {"ms": [1e3 * s for s in timed["plain"]], "median_ms": plain_ms},
            "speedup": plain_ms / kv_ms,
            "check": {"what": "first decode step logits, max |kvprobe - plain| over rows",
                      "max_abs_diff": alone["diff"], "question_max_abs_diff": alone["q_diff"],
                      "tolerance": DECODE_LOGITS_ATOL, "passed": alone["diff"] <= DECODE_LOGITS_ATOL},
            "memory": {"what": "each side alone: fork/cache set-up, question, first decode step",
                       "kvprobe": _alone(alone["kv_mem"]), "plain": _alone(alone["plain_mem"]),
                       "needs_bytes": weights + history_bytes,
                       "per_row_copies_bytes": weights + n_rows * history_bytes}}


def measure_operation(model: kvprobe.Model, history: kvprobe.History, name: str, warmups: int, repeats: int,
                      chunk_size: int) -> dict[str, Any]:
    """An operation's state and first answer token: kvprobe vs the same work by hand under SDPA."""
    runs, last = interleave({"kvprobe": lambda: kvprobe_operation(model, history, name, chunk_size),
                             "plain": lambda: plain_operation(model, history, name, chunk_size)},
                            warmups, repeats, measured)
    kv, plain = _side(runs["kvprobe"]), _side(runs["plain"])
    k, p = last["kvprobe"], last["plain"]
    for side, res in ((kv, k), (plain, p)):
        side.update(op_ms_last=1e3 * res["op_s"], first_token_ms_last=1e3 * res["first_token_s"], info=res["info"],
                    first_token=res["token"])
    return {"history_tokens": len(history), "operation": name, "warmups": warmups, "repeats": repeats,
            "kvprobe": kv, "plain": plain, "speedup": plain["median_ms"] / kv["median_ms"],
            "check": {"what": "first answer token (argmax) equal", "kvprobe_token": k["token"],
                      "plain_token": p["token"], "logits_max_abs_diff": float((k["logits"] - p["logits"]).abs().max()),
                      "passed": k["token"] == p["token"]},
            "memory": {"needs_bytes": weight_bytes(model) + kv_bytes(history)}}
