"""``kvprobe bench latency``: what a soft session bias and a hard mask cost an answer, phase by phase.

The paper times its LongMemEval arms (app:guarded_validation, tab:guarded_cost; app:v41_public_hard,
tab:v41_public_timing, "Timing boundaries", seed L6047-6075, L6225-6270): per question the history is
tokenized and prefilled once; then each arm (``full``; ``soft``, the gated session-order bias; ``hard``,
a mask on exactly the positions the soft bias pushes down) builds its policy, processes the question and
decodes greedily to EOS or the budget. This benchmark runs the session-bias study's questions
(:mod:`kvprobe.studies.session_bias`: LongMemEval-Oracle or its seeded fixtures) one arm at a time and
records, per (question, arm), after an accelerator sync at every boundary:

* shared by the arms: ``tokenize_ms`` (history rendering and tokenization) and ``prefill_ms``;
* ``policy_ms``: the arm's condition built from the question and the prefilled history (session spans,
  gate, bias vector or mask; 0 for full access) plus its row state (:meth:`Condition.prepare`);
* ``query_ms``: question tokenization, the fork of the cache, the question's forward and the first token;
* ``decode_ms``: the remaining greedy tokens; ``tokens``: how many were generated.

``ttft_resident = policy + query`` (the paper's resident TTFT: policy construction and question
processing, no cache copy); ``ttft_cold = tokenize + prefill + ttft_resident`` (a sum of measured
components, as the paper's); ``complete = policy + query + decode``. kvprobe forks a row that reads the
prefilled cache in place, so there is no cache copy to exclude.

The summary gives, per arm, mean complete time and median resident TTFT, and per arm against ``full``
the paired overheads ``100 (arm / full - 1)`` per question, median and 95th percentile, over all
questions and over the active ones (where the bias changes some position), for resident and cold TTFT,
query, decode, complete time and generated tokens (the paper's tab:guarded_cost and
tab:v41_public_timing columns). Inactive questions must give the same tokens in every arm (the paper's
consistency check, L6059-6061); the count is reported. Peak device memory (CUDA: the allocator's high
water mark) or peak resident memory (CPU) covers the whole run.

Arms run in a seeded random order per question (the machine drifts); the first ``warmups`` questions run
untimed first. On CUDA, full access and the hard mask can decode in fixed shapes (a CUDA graph) while a
logit bias cannot: ``--decode ordinary`` puts every arm on the ordinary path, so the overheads compare
the policies rather than the two decode paths; each row records its path.

An arm (the paper's word, kept in rows, ``latency.json`` and the report) is a condition of the study's
``condition_set`` (default ``full``, ``soft``, ``hard``; every name in
:data:`kvprobe.studies.session_bias.history.CONDITIONS`), built by the study's ``session_conditions``: the
bench keeps no table of its own.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

import kvprobe
from kvprobe.decoding import Request
from kvprobe.files import atomic_write_text
from kvprobe.studies.common.protocol import use_chat
from kvprobe.studies.session_bias import history as sessions
from kvprobe.studies.session_bias.study import SessionBiasStudy

from .measure import peak_rss_bytes, reset_peak, weight_bytes
from .timed_answer import answer_timed, device_clock

#: The paired measures of the summary: row key -> its label in the report.
MEASURES = {"ttft_resident_ms": "TTFT resident", "ttft_cold_ms": "TTFT cold", "query_ms": "query",
            "decode_ms": "decode", "complete_ms": "complete", "tokens": "tokens"}
DECODE_CHOICES = ("auto", "ordinary")


def time_question(model: kvprobe.Model, case, max_new_tokens: int, order: Sequence[str], oldest_weight: float = 0.5,
                  static: bool = True) -> list[dict[str, Any]]:
    """One question: tokenize and prefill its history once, then answer it under each arm of ``order``,
    one at a time; one row per arm (module docstring)."""
    prompt, layout = sessions.build_prompt(case.question, chat=use_chat(model.tokenizer, None))
    asked = sessions.question_text(case.question)
    t0 = device_clock(model.device)
    rendered, ids, offsets = model.tokenize(prompt)
    t1 = device_clock(model.device)
    h = model.prefill_tokens(prompt, rendered, ids, offsets, digest=False)
    t2 = device_clock(model.device)
    rows = []
    for arm in order:
        start = device_clock(model.device)
        facts = sessions.session_conditions(h, layout, asked, oldest_weight, (arm,))
        condition = facts.conditions[arm]
        built = device_clock(model.device)
        gen, phases = answer_timed(model, h, Request(asked, condition, arm), max_new_tokens, static=static)
        policy_s = (built - start if arm != "full" else 0.0) + phases.condition_s
        rows.append({
            "question_id": case.question.question_id, "arm": arm, "active": facts.active, "gate": facts.gate,
            "history_tokens": len(h), "kv_bytes": h.base_state().kv_bytes(),
            "tokenize_ms": 1e3 * (t1 - t0), "prefill_ms": 1e3 * (t2 - t1), "policy_ms": 1e3 * policy_s,
            "query_ms": 1e3 * phases.query_s, "decode_ms": 1e3 * phases.decode_s,
            "ttft_resident_ms": 1e3 * (policy_s + phases.query_s),
            "ttft_cold_ms": 1e3 * (t2 - t0 + policy_s + phases.query_s),
            "complete_ms": 1e3 * (policy_s + phases.query_s + phases.decode_s),
            "tokens": gen.n_tokens, "stop_reason": gen.stop_reason, "token_ids": list(gen.token_ids),
            "decode_path": phases.decode_path,
        })
    return rows


def paired_overheads(rows: Sequence[dict[str, Any]], arm: str, measure: str, active_only: bool = False
                     ) -> list[float]:
    """Per question, ``100 (arm / full - 1)`` of ``measure`` (questions whose full value is 0 are left out).

    Example:
        >>> rows = [{"question_id": "q", "arm": "full", "active": True, "decode_ms": 10.0},
        ...         {"question_id": "q", "arm": "soft", "active": True, "decode_ms": 12.5}]
        >>> paired_overheads(rows, "soft", "decode_ms")
        [25.0]
    """
    by_q: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_q.setdefault(r["question_id"], {})[r["arm"]] = r
    out = []
    for arms in by_q.values():
        if arm not in arms or "full" not in arms or (active_only and not arms["full"]["active"]):
            continue
        base = arms["full"][measure]
        if base:
            out.append(100.0 * (arms[arm][measure] / base - 1.0))
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (linear interpolation, numpy's default); None for no values."""
    return float(np.percentile(values, q)) if values else None


def summarize(rows: Sequence[dict[str, Any]], arms: Sequence[str]) -> dict[str, Any]:
    """Per arm: means and medians; per arm against full: paired overheads (median, p95) on all and active
    questions; the inactive-question agreement count."""
    per_arm = {}
    for arm in arms:
        mine = [r for r in rows if r["arm"] == arm]
        active = [r for r in mine if r["active"]]
        per_arm[arm] = {
            "questions": len(mine), "active": len(active),
            "mean_complete_ms": statistics.fmean(r["complete_ms"] for r in mine),
            "mean_complete_ms_active": statistics.fmean(r["complete_ms"] for r in active) if active else None,
            "median_ttft_resident_ms": statistics.median(r["ttft_resident_ms"] for r in mine),
            "median_ttft_cold_ms": statistics.median(r["ttft_cold_ms"] for r in mine),
            "mean_tokens": statistics.fmean(r["tokens"] for r in mine),
            "capped": sum(r["stop_reason"] == "cap" for r in mine),
            "decode_paths": sorted({r["decode_path"] for r in mine}),
        }
    overheads = {}
    for arm in arms:
        if arm == "full":
            continue
        overheads[arm] = {}
        for stratum, active_only in (("all", False), ("active", True)):
            cells = {}
            for measure in MEASURES:
                values = paired_overheads(rows, arm, measure, active_only)
                cells[measure] = {"n": len(values), "p50": percentile(values, 50), "p95": percentile(values, 95)}
            overheads[arm][stratum] = cells
    by_q: dict[str, dict[str, dict[str, Any]]] = {}
    for r in rows:
        by_q.setdefault(r["question_id"], {})[r["arm"]] = r
    inactive = [a for a in by_q.values() if not a[arms[0]]["active"]]
    same = sum(len({tuple(r["token_ids"]) for r in a.values()}) == 1 for a in inactive)
    return {"per_arm": per_arm, "overheads": overheads, "inactive_questions": len(inactive),
            "inactive_identical": same,
            "median_history_tokens": statistics.median(r["history_tokens"] for r in rows),
            "median_prefill_ms": statistics.median(r["prefill_ms"] for r in rows)}


def run_latency_bench(model: kvprobe.Model, out_dir: Path, study: SessionBiasStudy | None = None,
                      questions: int | None = 40, max_new_tokens: int = 128, warmups: int = 1,
                      decode: str = "auto", seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Time the arms on the first ``questions`` questions of ``study``'s cases (default: the seeded fixtures,
    every split) and write ``latency.json`` and ``latency.md`` under ``out_dir``."""
    if decode not in DECODE_CHOICES:
        raise ValueError(f"decode must be one of {DECODE_CHOICES}, got {decode!r}")
    study = study or SessionBiasStudy(split="all")
    cases = study.cases()[:questions] if questions else study.cases()
    if not cases:
        raise ValueError("the study selects no questions")
    arms = tuple(study.condition_set)
    if "full" not in arms:
        raise ValueError("the overheads are paired against full access: the condition set must include 'full'")
    static = decode == "auto"
    weight = study.oldest_weight
    for case in [c for c in cases if study.skip(model, c) is None][:warmups]:
        time_question(model, case, max_new_tokens, arms, weight, static)
    rng = random.Random(seed)
    if model.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(model.device)
    reset_peak()
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped = 0
    for i, case in enumerate(cases):
        if study.skip(model, case) is not None:  # longer than the study's max_history_tokens
            skipped += 1
            continue
        order = list(arms)
        rng.shuffle(order)
        got = time_question(model, case, max_new_tokens, order, weight, static)
        rows += got
        if progress:
            cells = "  ".join(f"{r['arm']} {r['ttft_resident_ms']:7.1f}/{r['complete_ms']:8.1f} ms {r['tokens']:3d} tok"
                              for r in sorted(got, key=lambda r: arms.index(r["arm"])))
            print(f"  [{i + 1}/{len(cases)}] T={got[0]['history_tokens']:5d} "
                  f"{'active  ' if got[0]['active'] else 'inactive'} TTFT/complete: {cells}", flush=True)
    memory = ({"device_peak_bytes": int(torch.cuda.max_memory_allocated(model.device))}
              if model.device.type == "cuda" else {"peak_rss_bytes": peak_rss_bytes()})
    result = {
        "model": model.name, "dtype": str(model.dtype), "device": str(model.device),
        "device_name": torch.cuda.get_device_name(model.device) if model.device.type == "cuda" else "CPU",
        "threads": torch.get_num_threads(), "source": study.source, "split": study.split,
        "questions": len(cases) - skipped, "skipped_too_long": skipped, "arms": list(arms), "max_new_tokens": max_new_tokens, "warmups": warmups,
        "decode": decode, "seed": seed, "oldest_weight": weight, "weight_bytes": weight_bytes(model),
        "wall_s": time.perf_counter() - started, **memory,
        "summary": summarize(rows, arms), "rows": rows,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "latency.json", json.dumps(result, indent=1) + "\n")
    atomic_write_text(out_dir / "latency.md", format_markdown(result))
    return result


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}"


def format_markdown(result: dict[str, Any]) -> str:
    """The per-arm table and the paired-overhead tables (all questions, active questions)."""
    s = result["summary"]
    mb = 2**20
    memory = (f"peak device allocation {result['device_peak_bytes'] / mb:.0f} MiB" if "device_peak_bytes" in result
              else f"peak RSS {result['peak_rss_bytes'] / mb:.0f} MiB")
    lines = [
        f"# Answer latency of the session arms: {result['model']} ({result['dtype']}, {result['device_name']})",
        "",
        f"{result['questions']} questions ({result['source']}, split {result['split']}), "
        f"{s['per_arm']['full']['active']} active; greedy to EOS or {result['max_new_tokens']} tokens; "
        f"decode path {result['decode']}; {result['warmups']} warm-up question(s); median history "
        f"{s['median_history_tokens']:.0f} tokens, median prefill {s['median_prefill_ms']:.1f} ms; {memory} "
        f"(weights {result['weight_bytes'] / mb:.0f} MiB); {result['wall_s']:.0f} s.",
        "",
        "| arm | questions | active | mean complete ms | mean complete ms, active | median TTFT resident ms "
        "| median TTFT cold ms | mean tokens | capped | decode path |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for arm, a in s["per_arm"].items():
        active = "-" if a["mean_complete_ms_active"] is None else f"{a['mean_complete_ms_active']:.1f}"
        lines.append(f"| {arm} | {a['questions']} | {a['active']} | {a['mean_complete_ms']:.1f} | {active} | "
                     f"{a['median_ttft_resident_ms']:.1f} | {a['median_ttft_cold_ms']:.1f} | {a['mean_tokens']:.1f} | "
                     f"{a['capped']} | {'; '.join(a['decode_paths'])} |")
    for stratum, title in (("all", "all questions"), ("active", "active questions")):
        lines += ["", f"Paired overhead against full access, {title}: median (p95) of 100 (arm / full - 1), %", "",
                  "| arm | n | " + " | ".join(MEASURES.values()) + " |", "|---|---|" + "---|" * len(MEASURES)]
        for arm, strata in s["overheads"].items():
            cells = strata[stratum]
            n = cells["complete_ms"]["n"]
            lines.append(f"| {arm} | {n} | " + " | ".join(
                f"{_pct(c['p50'])} ({_pct(c['p95'])})" for c in cells.values()) + " |")
    lines += ["", f"Inactive questions answered identically in every arm: {s['inactive_identical']} of "
              f"{s['inactive_questions']}.", ""]
    return "\n".join(lines)


def command(args, load) -> dict[str, Any]:
    """``kvprobe bench latency``: the study's parameters are checked (and a file source read) before the model
    loads."""
    study = SessionBiasStudy(source=args.source, split=args.split, max_history_tokens=args.max_history_tokens)
    return run_latency_bench(load(), Path(args.out), study, questions=args.questions,
                             max_new_tokens=args.max_new_tokens, warmups=args.warmups, decode=args.decode)
