"""``kvprobe bench gpu``: kvprobe beside plain transformers on an accelerator, side by side in one run.

On a model of a released shape with random weights (``random-llama-3.1-8b``: Llama-3.1-8B's
config, the tiny tokenizer; :data:`kvprobe.tiny.SHAPED_MODELS`) or any loadable model, for
every history length this measures kvprobe and the loop a researcher writes with plain
transformers (SDPA, same weights):

``prefill``
    ``Model.prefill`` (chunks of :func:`kvprobe.forward.default_chunk_size` tokens for the
    device, the history digest included) vs one ``model.hf`` pass over the same ids with
    SDPA (transformers' causal kernel, no explicit mask). Check: the last layer's K. Every plain
    side runs transformers' own ``sdpa`` attention (with a mask over grouped heads it expands K/V
    per query head).
``decode``
    ``rows`` access-only conditions of one history (the source mask) answering the question,
    ``new_tokens`` greedy tokens each (no EOS stop, so both sides do the same work): kvprobe
    reads one shared copy of the history; plain holds it repeated per row in a ``DynamicCache``
    with an explicit ``[rows, 1, Q, S]`` mask hiding record A. Check: the first generated
    token of every row.
``mask``, ``rebuild``, ``recompute``, ``compact``
    the condition's state plus the first answer token (kvprobe) vs the same by hand: the question
    under an explicit mask; the rows before A kept and the rest prefilled again hiding A from
    the tokens after it; a fresh one-pass prefill of the edited text (compact has no plain
    equivalent). Check: the same first token.

Timed runs alternate sides after a warm-up (kvprobe, plain, plain, kvprobe, ...); medians are
reported with the ratio plain time / kvprobe time (above 1: kvprobe is faster). Peak memory
is the device allocator's high-water mark (``torch.cuda.max_memory_allocated``) of each side
run alone, minus the memory in use before it. A side that runs out of memory is recorded as
such. Writes ``gpu.json`` and ``gpu.md`` under ``--out``.
"""

from __future__ import annotations

import gc
import json
import platform
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from transformers import DynamicCache

from kvprobe.access import Mask
from kvprobe.decoding import Request, answer, greedy_from, prepare_states, run_questions, suffix_ids
from kvprobe.forward import default_chunk_size, mask_argument
from kvprobe.files import atomic_write_text, versions
from kvprobe.history import kv_digest
from kvprobe.masks import layer_type_masks
from kvprobe.prompts import Prompt
from kvprobe.reference import attention_implementation
from kvprobe.tiny import tiny_corpus

from kvprobe.interventions.compaction import Compact
from kvprobe.interventions.recompute import Rebuild
from kvprobe.interventions.text import TextRecompute
from kvprobe.transformers_api import cache_argument, output_cache

from .measure import device_peak_bytes, interleave, median_s, timed
from .registry import parse_counts

DEFAULT_LENGTHS = (8192, 32768)
DEFAULT_ROWS = 15
DEFAULT_NEW_TOKENS = 16
DEFAULT_REPEATS = 3
QUESTION = "What is the current cycle duration of Assembly-TEST-000?"
RECORD_A = "Reference time T1. Certified specification for Assembly-TEST-000: cycle duration = 159 minutes."
RECORD_B = "Reference time T2, after T1. The certified cycle duration of Assembly-TEST-000 is 628."
#: The issue's goals, reported beside the measurements (nothing is tuned to meet them).
GOAL_SPEEDUP = 1.0
GIB = 2**30


def bench_prompt(model, n_tokens: int) -> Prompt:
    """About ``n_tokens`` of filler (the tiny corpus, repeated) with record A at the middle and B at the end."""
    sentences = [s for s in tiny_corpus().split("\n") if s.strip()]
    per = [len(model.tokenizer(" " + s, add_special_tokens=False)["input_ids"]) for s in sentences]
    fixed = sum(len(model.tokenizer(t, add_special_tokens=False)["input_ids"]) for t in (RECORD_A, RECORD_B))
    target, text, count, i = max(n_tokens - fixed, 2), [], 0, 0
    while count < target:
        text.append(sentences[i % len(sentences)])
        count += per[i % len(sentences)]
        i += 1
    half = len(text) // 2
    return Prompt([("pre", " ".join(text[:half])), ("A", RECORD_A), ("post", " ".join(text[half:])),
                   ("B", RECORD_B)])


def interleaved(kvprobe_fn: Callable[[], Any], plain_fn: Callable[[], Any] | None, device: torch.device,
                repeats: int) -> dict[str, Any]:
    """Median seconds of each side (one warm-up each, then alternating order) and their ratio; a side
    that runs out of memory in its warm-up is recorded as such and not timed."""
    sides = {"kvprobe": kvprobe_fn, **({"plain": plain_fn} if plain_fn is not None else {})}
    out: dict[str, Any] = {}
    for name, fn in sides.items():
        try:
            fn()
        except torch.OutOfMemoryError:
            out[f"{name}_error"] = "out of memory"
    live = {k: fn for k, fn in sides.items() if f"{k}_error" not in out}
    runs, _ = interleave(live, 0, repeats, lambda fn: timed(fn, device))
    for name in live:
        out[f"{name}_s"] = median_s(runs[name])
    if "kvprobe_s" in out and "plain_s" in out:
        out["speedup"] = out["plain_s"] / out["kvprobe_s"]
    return out


def _memory(kvprobe_fn, plain_fn, device: torch.device) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, fn in (("kvprobe", kvprobe_fn), ("plain", plain_fn)):
        if fn is None:
            continue
        try:
            peak = device_peak_bytes(fn, device)
        except torch.OutOfMemoryError:
            out[f"{name}_peak_gib"] = "out of memory"
            gc.collect()
            torch.cuda.empty_cache()
            continue
        if peak is not None:
            out[f"{name}_peak_gib"] = peak / GIB
    return out


# --------------------------------------------------------------------------- plain transformers


def _plain_cache(history, rows: int) -> DynamicCache:
    """The history K/V repeated once per row, as plain transformers batches them."""
    return DynamicCache(ddp_cache_data=[(k.expand(rows, -1, -1, -1).contiguous(), v.expand(rows, -1, -1, -1).contiguous())
                                        for k, v in history.kv])


def _hiding_mask(model, q_start: int, n_new: int, hidden: torch.Tensor, from_row: int = 0) -> Any:
    """Additive mask(s) of ``n_new`` tokens at positions ``q_start..`` over ``q_start + n_new`` keys; Bool[T]
    ``hidden`` columns hidden from the new rows at positions >= ``from_row``."""
    device = model.device
    S = q_start + n_new
    q_pos = torch.arange(q_start, S, device=device)[None]
    k_pos = torch.arange(S, device=device)[None]
    masks = layer_type_masks(model.arch, q_pos, k_pos, torch.ones(1, S, dtype=torch.bool, device=device), model.dtype)
    cols = torch.zeros(S, dtype=torch.bool, device=device)
    cols[: hidden.shape[0]] = hidden
    rows = q_pos[0] >= from_row
    block = (rows[:, None] & cols[None, :])[None, None]
    minimum = torch.finfo(model.dtype).min
    return mask_argument(model.arch, {t: m.masked_fill(block, minimum) for t, m in masks.items()})


def plain_decode(model, history, suffix: list[int], hidden: torch.Tensor, rows: int, new_tokens: int) -> list[list[int]]:
    """Greedy tokens of ``rows`` copies of the history with ``hidden`` masked: plain transformers, SDPA."""
    device, T, L = model.device, len(history), len(suffix)
    cache = _plain_cache(history, rows)
    mask = _hiding_mask(model, T, L, hidden)
    expand = (lambda m: m.expand(rows, -1, -1, -1))
    ids = torch.tensor([suffix] * rows, device=device)
    with torch.inference_mode():
        out = model.hf(input_ids=ids, attention_mask=_map(mask, expand), use_cache=True, **cache_argument(model.hf, cache),
                       position_ids=torch.arange(T, T + L, device=device)[None].expand(rows, -1))
        nxt = out.logits[:, -1].argmax(-1)
        tokens = [nxt]
        # one row of the mask per step: the hidden columns at the dtype minimum, every other key visible
        full = torch.zeros(rows, 1, 1, T + L + new_tokens, dtype=model.dtype, device=device)
        full[..., : hidden.shape[0]] = full[..., : hidden.shape[0]].masked_fill(hidden, torch.finfo(model.dtype).min)
        for step in range(1, new_tokens):
            pos = T + L + step - 1
            step_mask = full[..., : pos + 1]
            out = model.hf(input_ids=nxt[:, None], attention_mask=_map(mask, lambda m: step_mask),
                           use_cache=True, **cache_argument(model.hf, output_cache(out)),
                           position_ids=torch.full((rows, 1), pos, device=device))
            nxt = out.logits[:, -1].argmax(-1)
            tokens.append(nxt)
    return torch.stack(tokens, 1).tolist()


def _map(mask, fn):
    return {k: None if v is None else fn(v) for k, v in mask.items()} if isinstance(mask, dict) else fn(mask)


def plain_first_token(model, ids: list[int], suffix: list[int], hidden: torch.Tensor | None = None,
                      from_row: int = 0, keep: int = 0, history=None) -> int:
    """First answer token of one plain pass: the rows before ``keep`` from ``history``'s cache, then
    ``ids[keep:]`` + the suffix, with ``hidden`` hidden from the rows at positions >= ``from_row``."""
    device = model.device
    new = torch.tensor([ids[keep:] + suffix], device=device)
    kwargs: dict[str, Any] = {}
    if keep:
        kwargs.update(cache_argument(model.hf, DynamicCache(ddp_cache_data=[(k[:, :, :keep].clone(), v[:, :, :keep].clone())
                                                                            for k, v in history.kv])))
        kwargs["position_ids"] = torch.arange(keep, len(ids) + len(suffix), device=device)[None]
    if hidden is not None:
        kwargs["attention_mask"] = _hiding_mask(model, keep, new.shape[1], hidden, from_row)
    with torch.inference_mode():
        return int(model.hf(input_ids=new, use_cache=bool(keep), logits_to_keep=1, **kwargs).logits[0, -1].argmax())


# --------------------------------------------------------------------------- the benchmark


def _prefill_cell(model, prompt: Prompt, chunk_size: int | None, repeats: int) -> tuple[dict[str, Any], Any]:
    """The prefill cell of one history (kvprobe's chunked prefill vs one plain SDPA pass) and kvprobe's history."""
    device = model.device
    rendered, ids, offsets = model.tokenize(prompt)
    holder: dict[str, Any] = {}

    def kv_prefill():
        holder["h"] = model.prefill_tokens(prompt, rendered, ids, offsets, chunk_size=chunk_size)

    def plain_prefill():
        with torch.inference_mode(), attention_implementation(model, "sdpa"):
            holder["plain"] = model.hf(input_ids=ids[None].to(device), use_cache=True, logits_to_keep=1)

    cell = {"length": int(ids.shape[0]), "measure": "prefill",
            **interleaved(kv_prefill, plain_prefill, device, repeats), **_memory(kv_prefill, plain_prefill, device)}
    if "h" in holder:  # what the history digest (part of every prefill) costs alone
        cell["kvprobe_digest_s"] = timed(lambda: kv_digest(holder["h"].kv, holder["h"].recurrent), device)[1]["seconds"]
    if "h" in holder and "plain" in holder:
        k1 = holder["h"].kv[-1][0].float()
        k2 = output_cache(holder["plain"]).layers[-1].keys.float()
        cell["last_layer_k_rel_diff"] = float((k1 - k2).abs().max() / k2.abs().max())
    holder.pop("plain", None)
    return cell, holder["h"]


def _decode_cell(model, h, T: int, rows: int, new_tokens: int, repeats: int) -> dict[str, Any]:
    """``rows`` masked rows decoding ``new_tokens`` greedy tokens: kvprobe's batch vs the plain batched loop."""
    device = model.device
    hidden = Mask(h.span("A"), name="source").hidden_positions(T, h.device)
    suffix = suffix_ids(model, h, QUESTION)
    items = [(h, Request(QUESTION, Mask(h.span("A"), name=f"source-{i}"))) for i in range(rows)]
    holder: dict[str, Any] = {}

    def kv_decode():
        states = prepare_states(model, items)
        batch, last = run_questions(model, states, [suffix] * rows)
        holder["kv_tokens"] = greedy_from(model, batch, last, new_tokens, stop_at_eos=False)

    def plain_dec():
        with attention_implementation(model, "sdpa"):  # transformers' own SDPA, not kvprobe's attention
            holder["plain_tokens"] = plain_decode(model, h, suffix, hidden, rows, new_tokens)

    cell = {"length": T, "measure": f"decode-{rows}", **_memory(kv_decode, plain_dec, device),
            **interleaved(kv_decode, plain_dec, device, repeats)}
    if "kv_tokens" in holder and "plain_tokens" in holder:
        cell["first_tokens_agree"] = all(a[0] == b[0] for a, b in zip(holder["kv_tokens"], holder["plain_tokens"]))
    holder.clear()
    gc.collect()
    return cell


def _operation_cells(model, h, T: int, repeats: int) -> Iterator[dict[str, Any]]:
    """Each operation's state and first answer token, kvprobe vs by hand (compaction: kvprobe alone), one cell
    at a time (each measured when the next is asked for)."""
    device = model.device
    source = Mask(h.span("A"), name="source")
    hidden = source.hidden_positions(T, h.device)
    suffix = suffix_ids(model, h, QUESTION)
    h_ids = h.input_ids.tolist()
    A = h.span("A")
    edited = TextRecompute("A").edited_prompt(h)
    edited_ids = edited.render(model.tokenizer).encode(model.tokenizer)[0]
    ops: dict[str, tuple[Any, Callable[[], int] | None]] = {
        "mask": (source, lambda: plain_first_token(model, h_ids, suffix, hidden, from_row=T, keep=T, history=h)),
        "rebuild": (Rebuild(A), lambda: plain_first_token(model, h_ids, suffix, hidden, from_row=A.end,
                                                          keep=A.start, history=h)),
        "recompute": (TextRecompute("A"), lambda: plain_first_token(model, edited_ids, suffix)),
        "compact": (Compact(A), None),
    }
    holder: dict[str, Any] = {}
    for name, (op, plain_fn) in ops.items():
        def kv_op(op=op):
            res = answer(model, [(h, Request(QUESTION, op))], max_new_tokens=1)
            holder["kv_first"] = res[0].generation.token_ids[0]

        def plain_op(fn=plain_fn):
            with attention_implementation(model, "sdpa"):
                holder["plain_first"] = fn()

        cell = {"length": T, "measure": name,
                **interleaved(kv_op, plain_op if plain_fn else None, device, repeats),
                **_memory(kv_op, plain_op if plain_fn else None, device)}
        if plain_fn is not None and "plain_first" in holder:
            cell["first_token_agrees"] = holder["kv_first"] == holder["plain_first"]
        yield cell


def run_gpu_bench(model, out: Path, lengths=DEFAULT_LENGTHS, rows: int = DEFAULT_ROWS,
                  new_tokens: int = DEFAULT_NEW_TOKENS, repeats: int = DEFAULT_REPEATS,
                  chunk_size: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Measure every cell for every length; write ``gpu.json`` and ``gpu.md`` under ``out`` after each cell."""
    device = model.device
    result: dict[str, Any] = {
        "model": model.name, "dtype": str(model.dtype).replace("torch.", ""), "device": _device_name(device),
        "chunk_size": chunk_size or default_chunk_size(device), "rows": rows, "new_tokens": new_tokens,
        "repeats": repeats, "versions": versions(), "host": platform.node(), "cells": [],
    }
    out.mkdir(parents=True, exist_ok=True)

    def save(cell):
        result["cells"].append(cell)
        atomic_write_text(out / "gpu.json", json.dumps(result, indent=1) + "\n")
        atomic_write_text(out / "gpu.md", format_gpu_markdown(result))
        if progress:
            print(json.dumps(cell), flush=True)

    for n in lengths:
        cell, h = _prefill_cell(model, bench_prompt(model, n), chunk_size, repeats)
        save(cell)
        T = cell["length"]
        save(_decode_cell(model, h, T, rows, new_tokens, repeats))
        for cell in _operation_cells(model, h, T, repeats):
            save(cell)
        assert h.check_digest(), "the history changed during the benchmark"
        del h
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return result


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)} (torch {torch.__version__})"
    return f"{platform.machine()} CPU, {torch.get_num_threads()} threads (torch {torch.__version__})"


def _fmt(v: Any, spec: str) -> str:
    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else ("-" if v is None else str(v))


def _speedup(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}x"


def format_gpu_markdown(result: dict[str, Any]) -> str:
    """The benchmark as a table a person can scan (one row per length and measure)."""
    lines = [f"# kvprobe beside plain transformers: {result['model']} ({result['dtype']})", "",
             f"Device: {result['device']}. Prefill chunk {result['chunk_size']} tokens; decode: {result['rows']} "
             f"rows x {result['new_tokens']} new tokens; medians of {result['repeats']} interleaved runs per side. "
             "Speedup = plain time / kvprobe time (above 1: kvprobe is faster). Peak = allocator high-water mark "
             "above the memory in use before, each side alone.", "",
             "| length | measure | kvprobe s | plain s | speedup | kvprobe peak GiB | plain peak GiB | check |",
             "|---:|---|---:|---:|---:|---:|---:|---|"]
    for c in result["cells"]:
        check = next((f"{k} {_fmt(c[k], '.2e') if isinstance(c[k], float) else c[k]}" for k in
                      ("last_layer_k_rel_diff", "first_tokens_agree", "first_token_agrees") if k in c), "")
        lines.append(f"| {c['length']} | {c['measure']} | {_fmt(c.get('kvprobe_s', c.get('kvprobe_error')), '.3f')} | "
                     f"{_fmt(c.get('plain_s', c.get('plain_error')), '.3f')} | {_speedup(c.get('speedup'))} | "
                     f"{_fmt(c.get('kvprobe_peak_gib'), '.2f')} | {_fmt(c.get('plain_peak_gib'), '.2f')} | {check} |")
    return "\n".join(lines) + "\n"


def command(args, load) -> dict[str, Any]:
    """``kvprobe bench gpu``: ``--rows`` is the decode cell's rows, ``--decode-steps`` its new tokens."""
    return run_gpu_bench(load(), Path(args.out), lengths=parse_counts(args.lengths, "--lengths"), rows=args.rows,
                         new_tokens=args.decode_steps, repeats=args.repeats)
