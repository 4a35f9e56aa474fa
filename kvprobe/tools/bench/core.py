"""``kvprobe bench core``: cost of the traced mask path and of batching conditions.

Measured side by side in one run (this machine is noisy, so ratios matter more
than absolute times):

1. per-step masked decode time through the nnsight path (``traced_forward``
   with a hidden span) vs a plain transformers forward given the same 4-D mask,
   batch 1, interleaved step by step, medians;
2. sequences per second when the conditions of one history decode as one
   batch vs one at a time;
3. the fast paths: a decode step of a study-sized batch (15 and 60 rows, the
   five conditions of one and of four histories' worth of rows) under
   transformers' eager attention with its concatenating cache (a copy per row) vs
   kvprobe's default (its attention, preallocated slots, rows reading one shared
   copy of the history), interleaved, medians;
4. peak resident memory against weight bytes + KV bytes.

Writes ``<out>/core.json`` and ``<out>/core.md``.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import torch
from transformers import DynamicCache

from kvprobe.access import Full, Mask, matched_control
from kvprobe.decoding import suffix_ids
from kvprobe.files import atomic_write_text
from kvprobe.forward import shares_history, traced_forward
from kvprobe.rows import fork_rows, pad_suffix_block
from kvprobe.model import Model
from kvprobe.prompts import Prompt
from kvprobe.reference import explicit_cached_mask, transformers_eager
from kvprobe.transformers_api import cache_argument

from .measure import interleave, median_s, peak_rss_bytes, weight_bytes


def bench_decode_step(model: Model, history, steps: int = 40) -> dict[str, Any]:
    """Median per-step time of masked decoding: nnsight path vs plain forward with the same 4-D mask."""
    mask = Mask(history.span("A"), name="source")
    T = len(history)
    q = suffix_ids(model, history, "What is the current cycle duration?")
    hidden = mask.hidden_positions(T)

    rows = fork_rows([mask.prepare(model, history)])
    ids, valid = pad_suffix_block([q], model.pad_id, model.device)
    traced_forward(model, rows, ids, valid, logits_to_keep=1)

    cache = DynamicCache(ddp_cache_data=[(k.clone(), v.clone()) for k, v in history.kv])
    with torch.inference_mode():
        model.hf(input_ids=torch.tensor([q]), position_ids=torch.arange(T, T + len(q))[None],
                 attention_mask=explicit_cached_mask(model, T, T, len(q), hidden), use_cache=True,
                 **cache_argument(model.hf, cache))
    L = T + len(q)
    token = torch.tensor([[q[-1]]])
    steps_done = [0]

    def plain_step():
        pos = L + steps_done[0]
        steps_done[0] += 1
        with torch.inference_mode():
            model.hf(input_ids=token, position_ids=torch.tensor([[pos]]),
                     attention_mask=explicit_cached_mask(model, T, pos, 1, hidden),
                     use_cache=True, logits_to_keep=1, **cache_argument(model.hf, cache))

    # step by step, the traced step first each time
    runs, _ = interleave({"traced": lambda: traced_forward(model, rows, token, logits_to_keep=1),
                          "plain": plain_step}, 0, steps, alternate=False)
    t_med, p_med = median_s(runs["traced"]), median_s(runs["plain"])
    return {"steps": steps, "history_tokens": T, "traced_ms": 1e3 * t_med, "plain_ms": 1e3 * p_med,
            "ratio": t_med / p_med, "goal_ratio_at_most": 1.10}


QUESTIONS = (
    "At T2, what is the current cycle duration of Assembly-TEST-000? Return the complete quantity including its unit.",
    "What was the cycle duration of Assembly-TEST-000 at T1? Return the complete quantity including its unit.",
    "What is the inspection label on Envelope-TEST-000? Return only the label in the answer field.",
)


def five_conditions(history) -> dict:
    """The study's five access conditions on the demo history: full, whole-source mask,
    its control, number-only mask, its control."""
    source = Mask(history.span("A"), name="source")
    number = Mask(history.span("A", "159"), name="number")
    return {"full": Full(), "source": source, "source-control": matched_control(history, source, "note"),
            "number": number, "number-control": matched_control(history, number, "note")}


def bench_batching(model: Model, history, n_questions: int, max_new_tokens: int = 24) -> dict[str, Any]:
    """Sequences per second: 5 conditions x ``n_questions`` decoded as one batch vs one at a time."""
    conds = five_conditions(history)
    questions = list(QUESTIONS[:n_questions])
    runs, out = interleave({
        "batched": lambda: model.generate(history, questions, access=conds, max_new_tokens=max_new_tokens),
        "single": lambda: {name: [model.generate(history, q, access=a, max_new_tokens=max_new_tokens) for q in questions]
                           for name, a in conds.items()}}, 0, 1, alternate=False)
    (t_batched,), (t_single,) = runs["batched"]["seconds"], runs["single"]["seconds"]
    batched, single = out["batched"], out["single"]
    same = all(batched[n][i].token_ids == single[n][i].token_ids for n in conds for i in range(len(questions)))
    n_seq = len(conds) * len(questions)
    tokens = sum(g.n_tokens for gs in batched.values() for g in gs)
    return {"conditions": len(conds), "questions": len(questions), "sequences": n_seq,
            "max_new_tokens": max_new_tokens, "generated_tokens": tokens,
            "batched_seq_per_s": n_seq / t_batched, "one_at_a_time_seq_per_s": n_seq / t_single,
            "speedup": t_single / t_batched, "goal_speedup_at_least": 3.0, "identical_outputs": same}


def bench_fast_paths(model: Model, history, rows_per_batch: int, steps: int = 20) -> dict[str, Any]:
    """Median decode step: transformers eager + concatenating per-row caches vs kvprobe's default
    (its attention, slots, one shared history copy)."""
    states = [c.prepare(model, history) for c in five_conditions(history).values()]
    states = [states[i % len(states)] for i in range(rows_per_batch)]
    q = suffix_ids(model, history, QUESTIONS[0])
    ids, valid = pad_suffix_block([q] * rows_per_batch, model.pad_id, model.device)
    token = torch.full((rows_per_batch, 1), q[-1])

    def start(plain: bool):
        rows = fork_rows(states, share=not plain and shares_history(model))
        if plain:  # the layout transformers' DynamicCache grows by torch.cat
            rows.cache = DynamicCache(ddp_cache_data=[(layer.keys.contiguous(), layer.values.contiguous())
                                                      for layer in rows.cache.layers])
        return rows

    plain_rows, fast_rows = start(True), start(False)
    with transformers_eager(model):
        traced_forward(model, plain_rows, ids, valid, logits_to_keep=1)
    traced_forward(model, fast_rows, ids, valid, logits_to_keep=1)

    def plain_step():
        with transformers_eager(model):
            traced_forward(model, plain_rows, token, logits_to_keep=1)

    runs, _ = interleave({"plain": plain_step, "fast": lambda: traced_forward(model, fast_rows, token, logits_to_keep=1)},
                         0, steps, alternate=False)
    p_med, f_med = median_s(runs["plain"]), median_s(runs["fast"])
    return {"rows": rows_per_batch, "steps": steps, "history_tokens": len(history),
            "eager_concat_ms": 1e3 * p_med, "kvprobe_ms": 1e3 * f_med, "speedup": p_med / f_med}


def run_core_bench(model: Model, prompt: Prompt, out_dir: Path, steps: int = 40) -> dict[str, Any]:
    """Run both benchmarks on the history of ``prompt`` (it needs a segment ``A`` and a ``note``;
    ``kvprobe bench core`` uses the quantity demo's) and write ``core.json`` and ``core.md`` under ``out_dir``."""
    history = model.prefill(prompt)
    decode = bench_decode_step(model, history, steps=steps)
    batching = [bench_batching(model, history, n) for n in (1, 3)]
    fast = [bench_fast_paths(model, history, n) for n in (15, 60)]
    weights = weight_bytes(model)
    kv_bytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in history.kv)
    peak = peak_rss_bytes()
    result = {
        "model": model.name,
        "machine": {"cpus": torch.get_num_threads(), "platform": platform.platform(),
                    "processor": platform.processor() or platform.machine(), "torch": torch.__version__},
        "dtype": str(model.dtype),
        "decode_step": decode,
        "batching": batching,
        "fast_paths": fast,
        "memory": {"weight_bytes": weights, "history_kv_bytes": kv_bytes, "peak_rss_bytes": peak,
                   "peak_over_weights_plus_kv": peak / (weights + kv_bytes)},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "core.json", json.dumps(result, indent=2) + "\n")
    atomic_write_text(out_dir / "core.md", format_core_markdown(result))
    return result


def format_core_markdown(r: dict[str, Any]) -> str:
    """The short markdown table quoted by docs/benchmarks.md."""
    d, m = r["decode_step"], r["memory"]
    mb = 1024 * 1024
    batch_rows = []
    for b in r["batching"]:
        what = f"{b['conditions']} conditions x {b['questions']} question(s) = {b['sequences']} sequences"
        batch_rows += [
            f"| {what}, one batch | {b['batched_seq_per_s']:.2f} seq/s | |",
            f"| {what}, one at a time | {b['one_at_a_time_seq_per_s']:.2f} seq/s | |",
            f"| batching speedup, {b['sequences']} sequences (identical outputs: {b['identical_outputs']}) "
            f"| {b['speedup']:.2f}x | >= {b['goal_speedup_at_least']:.0f}x |",
        ]
    return "\n".join([
        f"# Core benchmark: {r['model']} ({r['dtype']}, {r['machine']['cpus']} threads, {r['machine']['processor']})",
        "",
        "| measure | value | goal |",
        "|---|---|---|",
        f"| masked decode step, nnsight path | {d['traced_ms']:.1f} ms | |",
        f"| masked decode step, plain forward + same 4-D mask | {d['plain_ms']:.1f} ms | |",
        f"| ratio nnsight / plain ({d['steps']} interleaved steps, medians, {d['history_tokens']}-token history) "
        f"| {d['ratio']:.3f}x | <= {d['goal_ratio_at_most']:.2f}x |",
        *batch_rows,
        *[f"| decode step, {f['rows']} rows: transformers eager + torch.cat cache per row / kvprobe (shared history, slots) "
          f"| {f['eager_concat_ms']:.0f} / {f['kvprobe_ms']:.0f} ms = {f['speedup']:.2f}x | |"
          for f in r.get("fast_paths", [])],
        f"| peak RSS vs weights + history KV | {m['peak_rss_bytes'] / mb:.0f} MiB vs "
        f"{m['weight_bytes'] / mb:.0f} + {m['history_kv_bytes'] / mb:.1f} MiB "
        f"({m['peak_over_weights_plus_kv']:.1f}x) | |",
        "",
    ])


def command(args, load) -> dict[str, Any]:
    """``kvprobe bench core``: the quantity demo's history, ``--steps`` decode steps."""
    from kvprobe.studies.quantity.demo import build_prompt

    return run_core_bench(load(), build_prompt(), Path(args.out), steps=args.steps)
