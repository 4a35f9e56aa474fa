"""``kvprobe bench long``: kvprobe against plain transformers on long histories, side by side.

For every history length (PG-19 filler from the ``pg19`` data set (``kvprobe data``) with the
quantity task's record A at 50 % and record B at the end, as
:func:`kvprobe.tools.bench.operations.build_history` builds them) this measures
kvprobe and the loop a researcher would write by hand with plain transformers
under its SDPA attention, on the same weights (:func:`transformers_sdpa`
switches ``model.hf`` to ``"sdpa"`` for the plain runs and back afterwards):

``prefill``
    tokens/s of ``model.prefill(prompt)`` (512-token chunks; it also tokenizes
    and hashes the cache, timed on their own as ``overhead_ms``) vs ``model.hf``
    over the same ids in 512-token chunks into a ``DynamicCache``. Check: K of
    the last layer agrees to a relative 1e-4.
``decode-B``
    one masked decode step of B rows, the access-only condition
    ``Mask(history.span("A"))``: kvprobe forks B rows of the prepared state,
    runs the question once and then single-token ``traced_forward`` steps; plain
    holds the history K/V repeated per row in a ``DynamicCache`` and passes an
    explicit [B, 1, Q, S] additive mask with A's columns at the dtype minimum.
    Check: the first decode step's logits agree to 1e-3 (absolute).
``mask``, ``rebuild``, ``recompute``, ``recompute-prefix``
    building the condition's state and the first answer token after it, as
    ``kvprobe bench operations`` does (``Condition.prepare`` then the question),
    against the same work by hand: the question under an explicit mask hiding A;
    the cache before A kept and every later token prefilled again with an
    explicit mask hiding A from the tokens after it; a fresh chunked prefill of
    the history with A's text removed; the cached rows before A copied and only
    the edited rest prefilled. Check: the same first answer token.

Timed runs are interleaved (kvprobe, plain, plain, kvprobe, ...: the side that
goes first alternates) after untimed warm-ups; medians are reported with the
ratio plain time / kvprobe time (above 1: kvprobe is faster). Every measured
piece also records its peak resident set, exactly: the kernel's high-water mark
is reset before the piece (``/proc/self/clear_refs``) and ``VmHWM`` read after
it; the increment over the resident set just before the piece is reported too.
Decode memory is measured with each side alone (set-up, question, one step),
before the interleaved timing, which holds both sides' caches.

The run is resumable: ``<out>/long.json`` is rewritten atomically after every
finished (length, measure) cell, and a rerun with the same settings runs only
the missing cells. Writes ``long.json``, ``long.md`` and ``long.png``.
"""

from __future__ import annotations

import dataclasses
import datetime
import gc
import hashlib
import json
import os
import platform
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import torch
from transformers import DynamicCache

import kvprobe
from kvprobe.access import Mask, Prepared
from kvprobe.decoding import question_logits, suffix_ids
from kvprobe.engine import CHUNK_SIZE, fork_rows, pad_suffix_block, shares_history, traced_forward
from kvprobe.files import atomic_write_text, versions
from kvprobe.history import kv_digest
from kvprobe.model import _common_prefix
from kvprobe.reference import attention_implementation, explicit_cached_mask

from .measure import interleave, measured, median_ms, memory_method, self_timed, weight_bytes
from .operations import QUESTION, book_tokens, build_history, find_book
from kvprobe.interventions.registry import CONDITIONS, covered_by, parse_condition
from kvprobe.transformers_api import cache_argument

#: History lengths (tokens) of ``kvprobe bench long`` by default.
DEFAULT_LENGTHS = (1024, 2048, 4096, 8192, 16384)
#: Batch sizes of the masked decode step by default.
DEFAULT_ROWS = (1, 15)
DEFAULT_WARMUPS = 1
DEFAULT_REPEATS = 3
DEFAULT_DECODE_STEPS = 8
#: Where record A sits in every history.
FRACTION = 0.5
#: The operations timed beside their plain transformers equivalents: the registered conditions that name this
#: benchmark (``benches`` in :data:`kvprobe.interventions.CONDITIONS`), built from their example on record A.
OPERATIONS = covered_by("long")
#: Agreement tolerances: last-layer K (relative to its largest magnitude), decode-step logits (absolute).
PREFILL_K_RTOL = 1e-4
DECODE_LOGITS_ATOL = 1e-3
#: The issue's goals (reported beside the measurements; nothing is tuned to meet them).
GOAL_PREFILL_SPEEDUP = 1.0
GOAL_RECOMPUTE_SPEEDUP = 1.0
GOAL_DECODE_SPEEDUP = 1.5
GOAL_DECODE_ROWS = 15
GOAL_LENGTH = 8192
GOAL_MEMORY_RATIO = 1.5
FORMAT = 1
MIB = 2**20


class SettingsMismatch(ValueError):
    """An existing ``long.json`` was written with other settings than this run's."""


# --------------------------------------------------------------------------- input checks


def parse_counts(text: str, option: str) -> tuple[int, ...]:
    """Comma-separated positive integers (``--lengths``, ``--rows``); a ValueError names ``option``."""
    try:
        values = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{option}: expected comma-separated positive integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{option}: expected comma-separated positive integers, got {text!r}")
    return tuple(dict.fromkeys(values))  # in order, without repeats


def model_context_length(name: str) -> int | None:
    """The model's ``max_position_embeddings`` read without loading its weights, or None if unknown.

    Tiny models: their config; registry and GGUF files: the GGUF's ``<arch>.context_length``;
    local directories: ``config.json``. Hub ids are checked after loading.
    """
    from kvprobe.loading import REGISTRY
    from kvprobe.tiny import TINY_MODELS, tiny_config

    try:
        if name in TINY_MODELS:
            return int(tiny_config(name).max_position_embeddings)
        path = Path(name).expanduser()
        gguf = REGISTRY[name].gguf_path() if name in REGISTRY else path if path.is_file() else None
        if gguf is not None:
            from gguf import GGUFReader

            fields = GGUFReader(str(gguf)).fields
            arch = fields["general.architecture"]
            arch_name = bytes(arch.parts[arch.data[0]]).decode()
            field = fields.get(f"{arch_name}.context_length")
            return None if field is None else int(field.parts[field.data[0]][0])
        if path.is_dir() and (path / "config.json").is_file():
            config = json.loads((path / "config.json").read_text())
            value = config.get("max_position_embeddings", config.get("text_config", {}).get("max_position_embeddings"))
            return None if value is None else int(value)
    except Exception:  # unreadable metadata: checked after loading instead
        return None
    return None


def choose_lengths(lengths: Sequence[int] | None, context: int | None,
                   model_name: str) -> tuple[tuple[int, ...], list[int]]:
    """(lengths to run, default lengths skipped): explicit lengths beyond the context are refused
    (naming ``--lengths``); default ones are skipped and reported."""
    if lengths is None:
        if context is None:
            return DEFAULT_LENGTHS, []
        return (tuple(n for n in DEFAULT_LENGTHS if n <= context), [n for n in DEFAULT_LENGTHS if n > context])
    lengths = tuple(int(n) for n in lengths)
    if not lengths or any(n < 1 for n in lengths):
        raise ValueError(f"--lengths: expected positive integers, got {list(lengths)}")
    too_long = [n for n in lengths if context is not None and n > context]
    if too_long:
        raise ValueError(f"--lengths: {too_long} exceed the context of {model_name} "
                         f"(max_position_embeddings {context})")
    return lengths, []


def preflight(model_name: str, out_dir: Path | str, data_dir: Path | str | None, lengths: Sequence[int] | None,
              warmups: int, repeats: int, decode_steps: int, restart: bool = False) -> None:
    """The checks that need no model: PG-19 text present, lengths within the model's context when it
    can be read without loading, and a resumable ``long.json`` written with the same settings."""
    find_book(data_dir)
    choose_lengths(lengths, model_context_length(model_name), model_name)
    if not restart:
        check_settings(load_previous(Path(out_dir)), {"model": model_name, "warmups": warmups,
                                                      "repeats": repeats, "decode_steps": decode_steps},
                       Path(out_dir) / "long.json")


# --------------------------------------------------------------------------- resume


def load_previous(out_dir: Path) -> dict[str, Any] | None:
    """The earlier run's ``long.json`` in ``out_dir``, or None."""
    path = out_dir / "long.json"
    if not path.is_file():
        return None
    try:
        previous = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path} is not readable JSON ({exc}); pass --restart to start afresh") from None
    if not isinstance(previous, dict) or previous.get("benchmark") != "long" or "settings" not in previous:
        raise ValueError(f"{path} is not a `kvprobe bench long` result; pass --restart or another --out")
    return previous


def check_settings(previous: dict[str, Any] | None, settings: dict[str, Any], path: Path) -> None:
    """Refuse to resume ``previous`` under other ``settings``, naming the first differing one."""
    if previous is None:
        return
    old = previous["settings"]
    for key, value in settings.items():
        if key in old and old[key] != value:
            raise SettingsMismatch(
                f"{path} was written with {key}={old[key]!r}, this run has {key}={value!r}; rerun with the same "
                f"settings to resume, or pass --restart to start afresh (or choose another --out)")


# --------------------------------------------------------------------------- memory and timing (measure.py)


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


def plain_operation(model: kvprobe.Model, history: kvprobe.History, name: str, chunk_size: int) -> dict[str, Any]:
    """One operation and its first answer token by hand under SDPA: op and question seconds, logits, token."""
    T = len(history)
    span = history.span("A")
    q = suffix_ids(model, history, QUESTION)
    info: dict[str, Any] = {}
    with torch.inference_mode(), transformers_sdpa(model):
        t0 = time.perf_counter()
        if name == "mask":
            hidden = _hidden_a(history)
            t1 = time.perf_counter()
            cache = _cache(history.kv)
            logits = plain_question(model, cache, q, T, explicit_cached_mask(model, T, T, len(q), hidden))
        elif name == "rebuild":
            hidden = _hidden_a(history)
            zeros = torch.zeros(T, dtype=torch.bool)

            def mask_for(first: int, n: int):  # A's own rows see A; every later row does not
                S = first + n
                visible = explicit_cached_mask(model, S, first, n, zeros[:S])
                hiding = explicit_cached_mask(model, S, first, n, hidden[:S])
                return _rowwise_choice(torch.arange(first, S) < span.end, visible, hiding)

            cache, _ = plain_prefill(model, history.input_ids[span.start:], chunk_size, _cache(history.kv, span.start),
                                     start=span.start, mask_for=mask_for)
            t1 = time.perf_counter()
            logits = plain_question(model, cache, q, T, explicit_cached_mask(model, T, T, len(q), hidden))
        elif name in ("recompute", "recompute-prefix"):
            rendered, ids, _ = model.tokenize(_edited_prompt(history))
            reused = 0
            if name == "recompute-prefix":
                reused = min(_common_prefix(ids, history.input_ids), span.start, len(ids) - 1)
            cache = _cache(history.kv, reused) if reused else None
            cache, _ = plain_prefill(model, ids[reused:], chunk_size, cache, start=reused)
            t1 = time.perf_counter()
            q = model.tokenizer(rendered.suffix(QUESTION), add_special_tokens=False)["input_ids"]
            logits = plain_question(model, cache, q, int(ids.shape[0]))
            info = {"reused_tokens": reused, "history_tokens": int(ids.shape[0])}
        else:
            raise ValueError(f"unknown operation {name!r}; choose one of {', '.join(OPERATIONS)}")
        t2 = time.perf_counter()
    return {"op_s": t1 - t0, "first_token_s": t2 - t1, "logits": logits[0].float().clone(),
            "token": int(logits[0].argmax()), "info": info}


# --------------------------------------------------------------------------- kvprobe side


def _fork(model: kvprobe.Model, states: list) -> Any:
    """``fork_rows`` as kvprobe's own question path forks (shared history copies where the model allows)."""
    return fork_rows(states, share=shares_history(model))


def _layout(rows) -> str:
    """The cache layer class of the batch's first attention layer (per-row copies or a shared history)."""
    names = [type(layer).__name__ for layer in rows.cache.layers if type(layer).__name__ != "DummyLayer"]
    return names[0] if names else "none"


def _kvprobe_operation(model: kvprobe.Model, history: kvprobe.History, name: str, chunk_size: int) -> dict[str, Any]:
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


def _kv_bytes(history: kvprobe.History) -> int:
    return sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in history.kv if k is not None)


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
            "memory": {"needs_bytes": weight_bytes(model) + _kv_bytes(history)}}


def measure_decode(model: kvprobe.Model, history: kvprobe.History, n_rows: int, warmups: int,
                   steps: int) -> dict[str, Any]:
    """Masked (access-only) decode step of ``n_rows`` rows: kvprobe vs a plain batched SDPA loop."""
    T = len(history)
    hidden = _hidden_a(history)
    q = suffix_ids(model, history, QUESTION)
    L = len(q)
    state = Mask(history.span("A"), name="mask").prepare(model, history)

    def kv_setup():
        rows = _fork(model, [state] * n_rows)
        ids, valid = pad_suffix_block([q] * n_rows, model.pad_id, model.device)
        logits = traced_forward(model, rows, ids, valid, logits_to_keep=1).logits[:, -1]
        return rows, logits

    def kv_step(rows, token):  # (last logits, seconds)
        t0 = time.perf_counter()
        logits = traced_forward(model, rows, token, logits_to_keep=1).logits[:, -1]
        return logits, time.perf_counter() - t0

    def plain_setup():
        with torch.inference_mode(), transformers_sdpa(model):
            cache = _cache(history.kv, rows=n_rows)
            mask = _per_row(explicit_cached_mask(model, T, T, L, hidden), n_rows)
            return cache, plain_question(model, cache, q, T, mask, rows=n_rows)

    def plain_step(cache, token, pos):  # (last logits, seconds)
        with torch.inference_mode(), transformers_sdpa(model):
            t0 = time.perf_counter()  # switching to SDPA is not the loop's cost; building its mask is
            mask = _per_row(explicit_cached_mask(model, T, pos, 1, hidden), n_rows)
            logits = model.hf(input_ids=token, position_ids=torch.full((n_rows, 1), pos), attention_mask=mask,
                              use_cache=True, logits_to_keep=1, **cache_argument(model.hf, cache)).logits[:, -1]
            return logits, time.perf_counter() - t0

    # Each side alone: set-up, question, first step. Peak memory and the agreement check.
    def kv_alone():
        rows, q_logits = kv_setup()
        token = q_logits[:1].argmax(-1).expand(n_rows)[:, None].clone()
        step, _ = kv_step(rows, token)
        return q_logits.float().clone(), step.float().clone(), token, _layout(rows)

    gc.collect()
    (kv_q, kv_first, token, layout), kv_mem = measured(kv_alone)

    def plain_alone():
        cache, q_logits = plain_setup()
        return q_logits.float().clone(), plain_step(cache, token, T + L)[0].float().clone()

    (plain_q, plain_first), plain_mem = measured(plain_alone)
    diff = float((kv_first - plain_first).abs().max())
    q_diff = float((kv_q - plain_q).abs().max())
    del kv_q, plain_q, kv_first, plain_first

    # Interleaved timing on both sides' caches.
    live = {"kvprobe": kv_setup()[0], "plain": plain_setup()[0], "passes": 0}

    def plain_timed():  # every pass decodes the next position (warm-up passes included)
        live["passes"] += 1
        return plain_step(live["plain"], token, T + L + live["passes"] - 1)

    runs, _ = interleave({"kvprobe": lambda: kv_step(live["kvprobe"], token), "plain": plain_timed}, 0,
                         warmups + steps, self_timed)
    timed = {side: runs[side]["seconds"][warmups:] for side in runs}  # the first passes warm up
    live.clear()
    kv_ms, plain_ms = median_ms({"seconds": timed["kvprobe"]}), median_ms({"seconds": timed["plain"]})
    kv_bytes = _kv_bytes(history)
    weights = weight_bytes(model)
    return {"history_tokens": T, "rows": n_rows, "question_tokens": L, "warmups": warmups, "steps": steps,
            "kvprobe": {"ms": [1e3 * s for s in timed["kvprobe"]], "median_ms": kv_ms, "cache_layout": layout},
            "plain": {"ms": [1e3 * s for s in timed["plain"]], "median_ms": plain_ms},
            "speedup": plain_ms / kv_ms,
            "check": {"what": "first decode step logits, max |kvprobe - plain| over rows", "max_abs_diff": diff,
                      "question_max_abs_diff": q_diff, "tolerance": DECODE_LOGITS_ATOL,
                      "passed": diff <= DECODE_LOGITS_ATOL},
            "memory": {"what": "each side alone: fork/cache set-up, question, first decode step",
                       "kvprobe": _alone(kv_mem), "plain": _alone(plain_mem),
                       "needs_bytes": weights + kv_bytes, "per_row_copies_bytes": weights + n_rows * kv_bytes}}


def measure_operation(model: kvprobe.Model, history: kvprobe.History, name: str, warmups: int, repeats: int,
                      chunk_size: int) -> dict[str, Any]:
    """An operation's state and first answer token: kvprobe vs the same work by hand under SDPA."""
    runs, last = interleave({"kvprobe": lambda: _kvprobe_operation(model, history, name, chunk_size),
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
            "memory": {"needs_bytes": weight_bytes(model) + _kv_bytes(history)}}


# --------------------------------------------------------------------------- the run


def measures_for(rows: Sequence[int]) -> list[str]:
    """Cell names of one length, in the order they run."""
    return ["prefill", *(f"decode-{b}" for b in rows), *OPERATIONS]


def select_measures(measures: Sequence[str] | None, rows: Sequence[int]) -> list[str]:
    """The cells to run per length: ``measures`` (validated, in run order), or all of :func:`measures_for`."""
    names = measures_for(rows)
    if measures is None:
        return names
    wanted = [m.strip() for m in measures if m.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown or not wanted:
        raise ValueError(f"--measures: unknown {unknown or 'empty list'}; choose from {', '.join(names)}")
    return [m for m in names if m in wanted]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def run_long_bench(
    model: kvprobe.Model,
    out_dir: Path | str,
    data_dir: Path | str | None,
    lengths: Sequence[int] | None = None,
    rows: Sequence[int] = DEFAULT_ROWS,
    warmups: int = DEFAULT_WARMUPS,
    repeats: int = DEFAULT_REPEATS,
    decode_steps: int = DEFAULT_DECODE_STEPS,
    chunk_size: int = CHUNK_SIZE,
    restart: bool = False,
    progress: bool = True,
    measures: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the long-context benchmark and write ``long.json``, ``long.md``, ``long.png``.

    ``lengths=None`` runs :data:`DEFAULT_LENGTHS` up to the model's context (longer ones are
    skipped and reported); explicit lengths beyond it are refused. A ``long.json`` already in
    ``out_dir`` is resumed when its settings (model, weights, dtype, threads, warm-ups, repeats,
    decode steps, chunk size, book, torch and transformers versions) equal this run's, refused
    (:class:`SettingsMismatch`, naming the setting) when they differ, ignored with ``restart``.
    The returned result has ``run["ran"]`` and ``run["reused"]``: the cells this call measured
    and the finished ones it kept. ``measures`` restricts a run to some cells of each length
    (names as :func:`measures_for` gives them, e.g. ``("prefill",)`` for a 32k-token prefill alone).
    """
    out_dir = Path(out_dir)
    say = print if progress else (lambda *a, **k: None)
    book_path = find_book(data_dir)
    context = model.context_length
    lengths, skipped = choose_lengths(lengths, context, model.name)
    rows = parse_counts(",".join(str(r) for r in rows), "--rows")
    names = select_measures(measures, rows)
    for what, value, low in (("warmups", warmups, 0), ("repeats", repeats, 1), ("decode_steps", decode_steps, 1),
                             ("chunk_size", chunk_size, 1)):
        if int(value) < low:
            raise ValueError(f"{what} must be at least {low}, got {value}")
    if model.arch.recurrent_layers or any(k is None for k, _ in model.empty_state().kv):
        raise ValueError(f"kvprobe bench long: the plain-transformers baseline needs every layer to cache its own "
                         f"K/V; {model.name} has recurrent or KV-sharing layers")
    settings = {"model": model.name, "weight_hash": model.weight_hash, "dtype": str(model.dtype),
                "threads": torch.get_num_threads(), "warmups": warmups, "repeats": repeats,
                "decode_steps": decode_steps, "chunk_size": chunk_size, "fraction_a": FRACTION,
                "book": book_path.name, "book_sha256": _sha256(book_path),
                "torch": torch.__version__, "transformers": versions()["transformers"]}
    path = out_dir / "long.json"
    previous = None if restart else load_previous(out_dir)
    check_settings(previous, settings, path)
    weights = weight_bytes(model)
    result: dict[str, Any] = previous or {"benchmark": "long", "format": FORMAT, "cells": {}, "runs": []}
    result.update({
        "settings": settings,
        "model": model.name, "dtype": str(model.dtype), "threads": torch.get_num_threads(),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), **versions()},
        "memory_method": memory_method(), "weight_bytes": weights, "context_length": context,
        "lengths": list(lengths), "rows": list(rows), "skipped_lengths": skipped,
    })
    cells = result["cells"]
    finished = [f"{n}/{m}" for n in lengths for m in names if m in cells.get(str(n), {}).get("measures", {})]
    run = {"started": _now(), "ran": [], "reused": finished}
    result["runs"].append(run)
    if restart:
        say(f"--restart: ignoring any earlier results in {path}")
    if finished:
        say(f"resuming {path}: reusing {len(finished)} finished cells ({', '.join(finished)})")
    if skipped:
        say(f"skipping default lengths {skipped}: beyond {model.name}'s context (max_position_embeddings {context})")
    if result["memory_method"] != "VmHWM":
        say("note: /proc/self/clear_refs is not writable; peaks are ru_maxrss (the process peak so far), not per piece")
    out_dir.mkdir(parents=True, exist_ok=True)
    book = None
    for length in lengths:
        cell = cells.setdefault(str(length), {"target_length": length, "measures": {}})
        todo = [m for m in names if m not in cell["measures"]]
        if not todo:
            say(f"long T~{length}: all {len(names)} cells finished earlier, reused")
            continue
        if book is None:
            book = book_tokens(model, data_dir)
        gc.collect()
        history, built = measured(lambda: build_history(model, book, length, FRACTION))
        span = history.span("A")
        facts = {"history_tokens": len(history), "span_a": [span.start, span.end],
                 "question_tokens": len(suffix_ids(model, history, QUESTION)), "history_kv_bytes": _kv_bytes(history),
                 # the history every measure reads, prefilled once by kvprobe (untimed by the cells)
                 "history_prefill": {"seconds": built["seconds"], "tokens_per_s": len(history) / built["seconds"],
                                     "peak_bytes": built["peak_bytes"], "increment_bytes": built["increment_bytes"]}}
        if "history_tokens" in cell and cell["history_tokens"] != facts["history_tokens"]:
            raise ValueError(f"the {length}-token history now has {facts['history_tokens']} tokens, the earlier run's "
                             f"had {cell['history_tokens']}; pass --restart")
        cell.update(facts)
        cell["last_position"] = len(history) + facts["question_tokens"] + decode_steps + warmups
        say(f"long T={len(history)} (target {length}): running {', '.join(todo)}", flush=True)
        for measure in todo:
            gc.collect()
            if measure == "prefill":
                entry = measure_prefill(model, history, warmups, repeats, chunk_size)
                line = (f"kvprobe {entry['kvprobe']['tokens_per_s']:.0f} tok/s, "
                        f"plain {entry['plain']['tokens_per_s']:.0f} tok/s, "
                        f"plain/kvprobe time {entry['speedup']:.3f}x, K rel diff {entry['check']['relative_diff']:.1e}")
            elif measure.startswith("decode-"):
                entry = measure_decode(model, history, int(measure.split("-")[1]), warmups, decode_steps)
                line = (f"kvprobe {entry['kvprobe']['median_ms']:.1f} ms, plain {entry['plain']['median_ms']:.1f} ms, "
                        f"plain/kvprobe {entry['speedup']:.3f}x, logits diff {entry['check']['max_abs_diff']:.1e}")
            else:
                entry = measure_operation(model, history, measure, warmups, repeats, chunk_size)
                line = (f"kvprobe {entry['kvprobe']['median_ms']:.1f} ms, plain {entry['plain']['median_ms']:.1f} ms, "
                        f"plain/kvprobe {entry['speedup']:.3f}x, same first token {entry['check']['passed']}")
            entry["finished"] = _now()
            cell["measures"][measure] = entry
            run["ran"].append(f"{length}/{measure}")
            flag = "" if entry["check"]["passed"] else "  CHECK FAILED"
            say(f"  T={len(history):6d} {measure:<17} {line}{flag}", flush=True)
            result["goals"] = goals(result)
            atomic_write_text(path, json.dumps(result, indent=2) + "\n")
        cell["history_unchanged"] = history.check_digest()
        if not cell["history_unchanged"]:
            raise RuntimeError("a measure changed the shared history cache")
        del history
        _write_reports(result, out_dir)
    result["goals"] = goals(result)
    run["finished"] = _now()
    atomic_write_text(path, json.dumps(result, indent=2) + "\n")
    _write_reports(result, out_dir)
    return result


def _write_reports(result: dict[str, Any], out_dir: Path) -> None:
    atomic_write_text(out_dir / "long.md", format_long_markdown(result))
    plot_long(result, out_dir / "long.png")


# --------------------------------------------------------------------------- goals and reports


def _measures(result: dict[str, Any], length: int | None = None) -> Iterator[tuple[int, dict, dict]]:
    """(target length, cell, its measures) in length order."""
    for key in sorted(result.get("cells", {}), key=int):
        cell = result["cells"][key]
        if length is None or int(key) == length:
            yield int(key), cell, cell.get("measures", {})


def goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals against what has been measured so far (``met`` None: not measured)."""
    out = []
    for measure, goal in (("prefill", GOAL_PREFILL_SPEEDUP), ("recompute", GOAL_RECOMPUTE_SPEEDUP)):
        ratios = {n: m[measure]["speedup"] for n, _, m in _measures(result) if measure in m}
        out.append({"goal": f"{measure} at least as fast as plain transformers + SDPA at every length",
                    "measure": measure, "target": f"plain/kvprobe time >= {goal:.2f}x",
                    "measured": {str(n): round(r, 3) for n, r in ratios.items()},
                    "met": None if not ratios else all(r >= goal for r in ratios.values())})
    decode = next((m.get(f"decode-{GOAL_DECODE_ROWS}") for _, _, m in _measures(result, GOAL_LENGTH)), None)
    out.append({"goal": f"{GOAL_DECODE_ROWS}-row masked decode step at least {GOAL_DECODE_SPEEDUP}x faster than the "
                        f"plain batched loop at {GOAL_LENGTH} tokens",
                "measure": f"decode-{GOAL_DECODE_ROWS}", "target": f"plain/kvprobe time >= {GOAL_DECODE_SPEEDUP:.2f}x",
                "measured": None if decode is None else round(decode["speedup"], 3),
                "met": None if decode is None else decode["speedup"] >= GOAL_DECODE_SPEEDUP})
    one = next((m.get("decode-1") for _, _, m in _measures(result, GOAL_LENGTH)), None)
    ratio = None
    if decode is not None and one is not None:
        ratio = decode["memory"]["kvprobe"]["peak_bytes"] / one["memory"]["kvprobe"]["peak_bytes"]
    out.append({"goal": f"peak memory of {GOAL_DECODE_ROWS} access-only rows over a {GOAL_LENGTH}-token history at "
                        f"most {GOAL_MEMORY_RATIO}x that of one row",
                "measure": "memory",
                "target": f"peak(decode-{GOAL_DECODE_ROWS}) / peak(decode-1) <= {GOAL_MEMORY_RATIO:.2f}x",
                "measured": None if ratio is None else round(ratio, 3),
                "met": None if ratio is None else ratio <= GOAL_MEMORY_RATIO})
    return out


def _mib(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / MIB:.0f}" if n >= 100 * MIB else f"{n / MIB:.1f}"


def _goal_cell(met: bool | None, text: str) -> str:
    return f"{text} ({'met' if met else 'not met'})" if met is not None else text


def format_long_markdown(result: dict[str, Any]) -> str:
    """Tables a person can scan: one row per length, kvprobe beside plain transformers, the goals."""
    m = result.get("machine", {})
    s = result["settings"]
    lines = [
        f"# Long-context benchmark: {result['model']} ({result['dtype']}, {result['threads']} torch thread(s), "
        f"{m.get('processor', '?')})",
        "",
        f"kvprobe against plain transformers (same weights, transformers' SDPA attention, the loop written by hand), "
        f"PG-19 histories with record A at {s['fraction_a']:.0%} and record B at the end. Timed runs interleaved "
        f"(the side going first alternates) after {s['warmups']} warm-up(s); medians of {s['repeats']} runs "
        f"(prefill, operations) or {s['decode_steps']} steps (decode). Ratios are plain time / kvprobe time: "
        f"above 1, kvprobe is faster. {m.get('platform', '')}, torch {m.get('torch', '?')}, "
        f"transformers {m.get('transformers', '?')}.",
        "",
    ]
    if result.get("skipped_lengths"):
        lines += [f"Default lengths {result['skipped_lengths']} skipped: beyond the model's context "
                  f"(max_position_embeddings {result.get('context_length')}).", ""]
    cells = list(_measures(result))
    lines += ["## Prefill", "",
              "| target | tokens | kvprobe tok/s | plain tok/s | plain/kvprobe time | goal | last-layer K rel. diff "
              "| kvprobe tokenize + digest ms |",
              "|---|---|---|---|---|---|---|---|"]
    for n, cell, ms in cells:
        if "prefill" in ms:
            p = ms["prefill"]
            extra = p["kvprobe"].get("overhead_ms", {})
            lines.append(f"| {n} | {cell['history_tokens']} | {p['kvprobe']['tokens_per_s']:.0f} | "
                         f"{p['plain']['tokens_per_s']:.0f} | {p['speedup']:.3f}x | "
                         f"{_goal_cell(p['speedup'] >= GOAL_PREFILL_SPEEDUP, '>= 1.00x')} | "
                         f"{p['check']['relative_diff']:.1e}{'' if p['check']['passed'] else ' FAIL'} | "
                         f"{sum(extra.values()):.1f} |")
    lines += ["", "kvprobe's prefill (`model.prefill(prompt)`) also tokenizes the prompt and hashes the cache "
                  "(SHA-256 digest); the last column times those two alone, once.", ""]
    built = [(n, c) for n, c, _ in cells if "history_prefill" in c]
    if built:
        lines += ["The history every cell reads, prefilled once by kvprobe before the cells (one untimed-by-the-"
                  "cells run, no warm-up, no plain side):", "",
                  "| target | tokens | kvprobe s | tok/s | peak MiB (+incr) | weights + history K/V MiB |",
                  "|---|---|---|---|---|---|"]
        for n, c in built:
            h = c["history_prefill"]
            lines.append(f"| {n} | {c['history_tokens']} | {h['seconds']:.1f} | {h['tokens_per_s']:.0f} | "
                         f"{_mib(h['peak_bytes'])} (+{_mib(h['increment_bytes'])}) | "
                         f"{_mib(result['weight_bytes'] + c['history_kv_bytes'])} |")
        lines.append("")
    context = result.get("context_length")
    beyond = [f"{n} (up to position {c['last_position']})" for n, c, _ in cells
              if context and c.get("last_position", 0) > context]
    if beyond:
        lines += [f"Question and decode tokens run past the model's context ({context} positions) at: "
                  f"{', '.join(beyond)}.", ""]
    lines += ["## Masked decode step (access-only: record A hidden)", "",
              "| target | tokens | rows | kvprobe ms | plain ms | plain/kvprobe | goal | logits diff | kvprobe cache |",
              "|---|---|---|---|---|---|---|---|---|"]
    for n, cell, ms in cells:
        for name in sorted((k for k in ms if k.startswith("decode-")), key=lambda k: int(k.split("-")[1])):
            d = ms[name]
            goal = ""
            if d["rows"] == GOAL_DECODE_ROWS and n == GOAL_LENGTH:
                goal = _goal_cell(d["speedup"] >= GOAL_DECODE_SPEEDUP, f">= {GOAL_DECODE_SPEEDUP:.2f}x")
            elif d["rows"] == GOAL_DECODE_ROWS:
                goal = f"(>= {GOAL_DECODE_SPEEDUP:.2f}x at {GOAL_LENGTH})"
            lines.append(f"| {n} | {cell['history_tokens']} | {d['rows']} | {d['kvprobe']['median_ms']:.1f} | "
                         f"{d['plain']['median_ms']:.1f} | {d['speedup']:.3f}x | {goal} | "
                         f"{d['check']['max_abs_diff']:.1e}{'' if d['check']['passed'] else ' FAIL'} | "
                         f"{d['kvprobe'].get('cache_layout', '')} |")
    lines += ["", "## Operations: the condition's state + first answer token", "",
              "| target | tokens | operation | kvprobe ms | plain ms | plain/kvprobe | goal | same first token |",
              "|---|---|---|---|---|---|---|---|"]
    for n, cell, ms in cells:
        for name in OPERATIONS:
            if name in ms:
                o = ms[name]
                goal = _goal_cell(o["speedup"] >= GOAL_RECOMPUTE_SPEEDUP, ">= 1.00x") if name == "recompute" else ""
                lines.append(f"| {n} | {cell['history_tokens']} | {name} | {o['kvprobe']['median_ms']:.0f} | "
                             f"{o['plain']['median_ms']:.0f} | {o['speedup']:.3f}x | {goal} | "
                             f"{'yes' if o['check']['passed'] else 'NO'} |")
    weights = result.get("weight_bytes")
    lines += ["", f"## Peak memory (MiB; {result.get('memory_method', '?')})", "",
              "Peak resident set during each piece (+ its increment over the resident set just before it), "
              f"against weights ({_mib(weights)} MiB) + the K/V the piece needs; decode rows also against "
              "rows x history K/V (what per-row copies need). Prefill and operations: the largest of the timed runs; "
              "decode: each side alone (set-up, question, first step).", "",
              "| target | tokens | piece | kvprobe peak (+incr) | plain peak (+incr) | weights + history K/V | "
              "weights + rows x K/V |",
              "|---|---|---|---|---|---|---|"]
    for n, cell, ms in cells:
        for name, e in ms.items():
            mem = e["memory"]
            kv_side = mem.get("kvprobe", e.get("kvprobe", {}))
            plain_side = mem.get("plain", e.get("plain", {}))
            lines.append(f"| {n} | {cell['history_tokens']} | {name} | {_mib(kv_side.get('peak_bytes'))} "
                         f"(+{_mib(kv_side.get('increment_bytes'))}) | {_mib(plain_side.get('peak_bytes'))} "
                         f"(+{_mib(plain_side.get('increment_bytes'))}) | {_mib(mem['needs_bytes'])} | "
                         f"{_mib(mem.get('per_row_copies_bytes'))} |")
    lines += ["", "## Goals (the issue's; reported, not tuned for)", "", "| goal | target | measured | met |",
              "|---|---|---|---|"]
    for g in result.get("goals") or goals(result):
        measured = g["measured"]
        if isinstance(measured, dict):
            measured = ", ".join(f"{k}: {v:.3f}x" for k, v in measured.items()) or "-"
        elif measured is None:
            measured = "not measured"
        else:
            measured = f"{measured:.3f}x"
        met = {True: "yes", False: "no", None: "-"}[g["met"]]
        lines.append(f"| {g['goal']} | {g['target']} | {measured} | {met} |")
    failed = [f"{n}/{name}" for n, _, ms in cells for name, e in ms.items() if not e["check"]["passed"]]
    lines += ["", "Agreement checks (kvprobe vs plain): " + ("all passed." if not failed else
                                                             "FAILED: " + ", ".join(failed) + "."), ""]
    return "\n".join(lines)


def plot_long(result: dict[str, Any], path: Path) -> None:
    """Prefill tokens/s and decode-step ms against history tokens, kvprobe and plain (log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(_measures(result))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    styles = {"kvprobe": ("-", "o", "kvprobe"), "plain": ("--", "s", "plain transformers + SDPA")}
    for side, (line, marker, label) in styles.items():
        pts = [(c["history_tokens"], m["prefill"][side]["tokens_per_s"]) for _, c, m in cells if "prefill" in m]
        if pts:
            left.plot(*zip(*pts), line, marker=marker, color="C0" if side == "kvprobe" else "C1", label=label)
    left.set_title(f"Prefill ({result['settings']['chunk_size']}-token chunks)")
    left.set_ylabel("tokens / s (median)")
    rows = sorted({int(k.split("-")[1]) for _, _, m in cells for k in m if k.startswith("decode-")})
    for i, b in enumerate(rows):
        for side, (line, marker, label) in styles.items():
            pts = [(c["history_tokens"], m[f"decode-{b}"][side]["median_ms"]) for _, c, m in cells
                   if f"decode-{b}" in m]
            if pts:
                right.plot(*zip(*pts), line, marker=marker, color=f"C{i}",
                           label=f"{label}, {b} row{'s' if b > 1 else ''}")
    right.set_title("Masked decode step (record A hidden)")
    right.set_ylabel("ms per step (median)")
    ticks = sorted({c["history_tokens"] for _, c, _ in cells if "history_tokens" in c})
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        if ticks:
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
        ax.set_xlabel("history tokens")
        ax.grid(True, which="both", alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=8)
    fig.suptitle(f"kvprobe vs plain transformers, {result['model']}, {result['threads']} torch thread(s)")
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)


def counts(text: str | None, option: str, default: tuple[int, ...]) -> tuple[int, ...]:
    """Comma-separated positive counts of a bench option, or ``default`` when not given."""
    return default if text is None else parse_counts(text, option)


def command(args, load) -> dict[str, Any]:
    """``kvprobe bench long``: bad input is refused (:func:`preflight`) before the model loads."""
    lengths = counts(args.lengths, "--lengths", None)
    rows = parse_counts(args.rows or "1,15", "--rows")
    measures = None if args.measures is None else select_measures(args.measures.split(","), rows)
    warmups = DEFAULT_WARMUPS if args.warmups is None else args.warmups
    repeats = DEFAULT_REPEATS if args.repeats is None else args.repeats
    decode_steps = DEFAULT_DECODE_STEPS if args.decode_steps is None else args.decode_steps
    preflight(args.model, args.out, args.data, lengths, warmups, repeats, decode_steps, restart=args.restart)
    return run_long_bench(load(), Path(args.out), args.data, lengths=lengths, rows=rows, warmups=warmups,
                          repeats=repeats, decode_steps=decode_steps, restart=args.restart, measures=measures)
