"""``kvprobe bench scale``: a study's throughput on 1 vs 2 Ray workers against the local backend.

The same quantity study (``groups`` groups, five access conditions, one case per
batch by default so both workers get work) runs under each configuration, in
one process, one after another, over ``rounds`` rounds whose order alternates
(this machine is noisy; a slow minute then hits every configuration):

* ``local x1``: this process, one torch thread;
* ``local x2``: this process, two torch threads (the usual way on 2 cores);
* ``ray 1x1``: one Ray worker with one thread;
* ``ray 2x1``: two Ray workers with one thread each.

Reported per configuration: the run's seconds (first batch to last row on disk,
from :class:`~studies.common.runner.RunInfo`), cases per second, the start-up seconds
(model load; for Ray also starting Ray and the workers), the speed-up over
``ray 1x1`` and ``local x1`` measured in the same round, and peak resident
memory of each process (driver and workers, ``VmHWM``, the driver's reset
before each configuration) against weight bytes + the KV bytes of the longest history. The
SHA-256 of ``results.jsonl`` shows that every one-thread configuration wrote the
same file (``local x2`` may differ in the last bits of floats: a different
thread count changes reduction order).

Writes ``<out>/scale.json`` and ``<out>/scale.md``. With ``--target extract`` the
same four configurations time ``kvprobe extract`` of the first ``--cases``
recognition records cases with the signed LOO (``scale-extract.json``/``.md``);
identity is then a SHA-256 over every array of the stored group.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import h5py

import torch

from kvprobe.extract import CaseScore, extract
from kvprobe.files import atomic_write_text
from kvprobe.sharding import ModelSpec, assign_shards
from kvprobe.workers import RayOptions, WorkerPool

from kvprobe.studies.datasets.quantity_task import tasks
from kvprobe.studies.quantity.study import QuantityStudy
from kvprobe.studies.recognition.questions import signed_loo_scores
from kvprobe.studies.common.runner import RESULTS, run_study

from .measure import peak_rss_bytes, reset_peak, schedule, timed, weight_bytes

CONFIGS = ("ray 2x1", "ray 1x1", "local x1", "local x2")


def _longest_history_kv(model, study: QuantityStudy) -> dict[str, int]:
    longest = max(study.cases(), key=lambda c: len(model.tokenize(tasks.build_prompt(c))[1]))
    history = model.prefill(tasks.build_prompt(longest))
    kv_bytes = sum(t.numel() * t.element_size() for kv in history.kv for t in kv if t is not None)
    return {"weight_bytes": weight_bytes(model),
            "history_tokens": len(history), "history_kv_bytes": kv_bytes}


def _study_work(study: QuantityStudy) -> Callable[..., tuple[float, int, str]]:
    """Run ``study`` (locally or on a pool): (seconds, cases run, sha256 of results.jsonl)."""
    def work(model, pool, out: Path) -> tuple[float, int, str]:
        info = run_study(study, model, out, progress=False, pool=pool)
        return info.seconds, info.cases_run, hashlib.sha256((out / RESULTS).read_bytes()).hexdigest()
    return work


def _extract_work(cases: list[Any], batch_size: int, loo_chunk: int) -> Callable[..., tuple[float, int, str]]:
    """Extract ``cases`` with the signed LOO: (seconds, cases, sha256 over every array of the group)."""
    def work(model, pool, out: Path) -> tuple[float, int, str]:
        store, stats = timed(lambda: extract(
            model, "bench", cases, out / "store.h5", batch_size=batch_size, progress=False, pool=pool,
            case_scores={"signed_loo": CaseScore(signed_loo_scores, chunk=loo_chunk)}))
        seconds = stats["seconds"]
        digest = hashlib.sha256()
        with h5py.File(store, "r") as f:
            names: list[str] = []
            f.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
            for name in sorted(names):
                data = f[name][()]
                # String datasets read as object arrays, whose raw bytes are pointers: hash their values.
                blob = "\x00".join(map(str, data.tolist())).encode() if data.dtype.kind == "O" else data.tobytes()
                digest.update(name.encode() + blob)
        return seconds, len(cases), digest.hexdigest()
    return work


def _run_one(config: str, model_name: str, work: Callable[..., tuple[float, int, str]], out: Path) -> dict[str, Any]:
    gc.collect()  # a previous configuration's model is gone before this one's peak is measured
    reset_peak()
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    if config.startswith("ray"):
        workers = int(config.split()[1].split("x")[0])
        with WorkerPool(ModelSpec(model_name), RayOptions(workers=workers, threads=1)) as pool:
            pool.description()  # waits for every worker's model load
            startup = time.perf_counter() - t0
            seconds, cases, digest = work(None, pool, out)
            peaks = {"driver": peak_rss_bytes(), "workers": pool.peak_rss()}
    else:
        from kvprobe.model import load_model

        before = torch.get_num_threads()
        torch.set_num_threads(int(config.split("x")[1]))
        try:
            model = load_model(model_name)
            startup = time.perf_counter() - t0
            seconds, cases, digest = work(model, None, out)
            peaks = {"driver": peak_rss_bytes(), "workers": []}
            del model
        finally:
            torch.set_num_threads(before)
    return {"config": config, "seconds": seconds, "cases": cases, "cases_per_second": cases / seconds,
            "startup_seconds": startup, "peak_rss_bytes": peaks, "results_sha256": digest}


def _time_configs(model_name: str, work: Callable[..., tuple[float, int, str]], rounds: int) -> list[dict[str, Any]]:
    """Every configuration of :data:`CONFIGS`, ``rounds`` times in alternating order."""
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for r, config in schedule(CONFIGS, rounds):
            out = Path(tmp) / f"round{r}-{config.replace(' ', '-')}"
            runs.append({"round": r, **_run_one(config, model_name, work, out)})
            print(f"  round {r}: {config}: {runs[-1]['seconds']:.1f} s", flush=True)
    return runs


def _summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    summary = {}
    for config in CONFIGS:
        mine = [x for x in runs if x["config"] == config]
        summary[config] = {
            "seconds_median": statistics.median(x["seconds"] for x in mine),
            "cases_per_second_median": statistics.median(x["cases_per_second"] for x in mine),
            "startup_seconds_median": statistics.median(x["startup_seconds"] for x in mine),
            **{f"speedup_over_{base.replace(' ', '_')}": statistics.median(
                _same_round(runs, x, base)["seconds"] / x["seconds"] for x in mine)
               for base in ("ray 1x1", "local x1", "local x2")},
            "results_sha256": sorted({x["results_sha256"] for x in mine}),
        }
    return summary


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
            "platform": platform.platform(), "torch": torch.__version__}


def run_extract_scale_bench(model_name: str, out_dir: Path, cases: int = 120, batch_size: int = 16,
                            loo_chunk: int = 16, rounds: int = 2) -> dict[str, Any]:
    """Time ``kvprobe extract`` (records dataset, first ``cases`` cases, with the signed LOO) under
    :data:`CONFIGS`; write scale-extract.json / .md under ``out_dir``."""
    from kvprobe.studies.datasets.recognition import generate_records

    chosen = generate_records()[:cases]
    runs = _time_configs(model_name, _extract_work(chosen, batch_size, loo_chunk), rounds)
    one_thread = {x["results_sha256"] for x in runs if x["config"] != "local x2"}
    result = {"workload": {"name": "extract", "dataset": "records", "cases": len(chosen), "batch_size": batch_size,
                           "loo_chunk": loo_chunk},
              "model": model_name, "rounds": rounds, "runs": runs, "summary": _summarize(runs),
              "one_thread_configs_wrote_identical_results": len(one_thread) == 1, "machine": _machine()}
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "scale-extract.json", json.dumps(result, indent=2) + "\n")
    atomic_write_text(out_dir / "scale-extract.md", format_scale_markdown(result))
    return result


def run_scale_bench(model_name: str, out_dir: Path, groups: int = 6, cases_per_batch: int = 1,
                    max_new_tokens: int | None = None, rounds: int = 2) -> dict[str, Any]:
    """Time the quantity study under :data:`CONFIGS`; write scale.json / scale.md under ``out_dir``."""
    from kvprobe.model import load_model

    budget = {} if max_new_tokens is None else {"max_new_tokens": max_new_tokens}
    study = QuantityStudy(n_groups=groups, operations=False, cases_per_batch=cases_per_batch, **budget)
    cases = study.cases()
    batches = [cases[i : i + cases_per_batch] for i in range(0, len(cases), cases_per_batch)]
    shards = assign_shards([b[0].case_id for b in batches], 2)
    per_worker = [shards.count(w) for w in range(2)]
    memory = _longest_history_kv(load_model(model_name), study)
    runs = _time_configs(model_name, _study_work(study), rounds)
    one_thread = {x["results_sha256"] for x in runs if x["config"] != "local x2"}
    result = {
        "study": {"name": "quantity", "groups": groups, "cases": len(cases), "cases_per_batch": cases_per_batch,
                  "operations": False, "max_new_tokens": study.max_new_tokens, "batches": len(batches),
                  "batches_per_worker_of_2": per_worker},
        "model": model_name,
        "rounds": rounds,
        "runs": runs,
        "summary": _summarize(runs),
        "one_thread_configs_wrote_identical_results": len(one_thread) == 1,
        "memory": memory,
        "machine": _machine(),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "scale.json", json.dumps(result, indent=2) + "\n")
    atomic_write_text(out_dir / "scale.md", format_scale_markdown(result))
    return result


def _same_round(runs: list[dict[str, Any]], run: dict[str, Any], config: str) -> dict[str, Any]:
    return next(x for x in runs if x["round"] == run["round"] and x["config"] == config)


def format_scale_markdown(r: dict[str, Any]) -> str:
    """scale.md (a study, :func:`run_scale_bench`) or scale-extract.md (:func:`run_extract_scale_bench`)."""
    mib = 2**20
    machine = f"{r['machine']['cpus']} CPUs ({r['machine']['processor']}, {r['machine']['platform']})"
    if "study" in r:
        s = r["study"]
        title, what = "Scale benchmark", (
            f"Quantity study, {s['groups']} groups = {s['cases']} cases x 5 access conditions x 3 queries, "
            f"{s['cases_per_batch']} case(s) per batch ({s['batches']} batches, "
            f"{s['batches_per_worker_of_2'][0]} / {s['batches_per_worker_of_2'][1]} on 2 workers), "
            f"{s['max_new_tokens']} new tokens")
        identical = "`results.jsonl` bytes"
    else:
        w = r["workload"]
        title, what = "Scale benchmark, extraction", (
            f"`kvprobe extract` of the first {w['cases']} cases of the {w['dataset']} dataset (batches of "
            f"{w['batch_size']} records, signed LOO in chunks of {w['loo_chunk']} cases)")
        identical = "store arrays (SHA-256 over every dataset)"
    lines = [
        f"# {title}: {r['model']}",
        "",
        f"{what}; medians of {r['rounds']} rounds in alternating order on {machine}.",
        "",
        "| configuration | run seconds | cases/s | start-up s | vs ray 1x1 | vs local x1 | vs local x2 | "
        "peak RSS per process |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for config, x in r["summary"].items():
        last = [y for y in r["runs"] if y["config"] == config][-1]["peak_rss_bytes"]
        procs = [last["driver"]] + list(last["workers"])
        rss = " + ".join(f"{p / mib:.0f}" for p in procs if p is not None) + " MiB"
        lines.append(f"| {config} | {x['seconds_median']:.1f} | {x['cases_per_second_median']:.3f} | "
                     f"{x['startup_seconds_median']:.1f} | {x['speedup_over_ray_1x1']:.2f}x | "
                     f"{x['speedup_over_local_x1']:.2f}x | {x['speedup_over_local_x2']:.2f}x | {rss} |")
    same = "identical" if r["one_thread_configs_wrote_identical_results"] else "DIFFERENT"
    lines += ["", f"Every one-thread configuration wrote {same} {identical}. Peak RSS: the driver first, then each "
              "worker."]
    if "memory" in r:
        m = r["memory"]
        lines[-1] += (f" Weights {m['weight_bytes'] / mib:.0f} MiB, the longest history's KV "
                      f"{m['history_kv_bytes'] / mib:.1f} MiB ({m['history_tokens']} tokens, one row).")
    return "\n".join(lines + [""])


def command(args, load) -> dict[str, Any]:
    """``kvprobe bench scale``: every configuration loads its own model (``load`` is not used)."""
    if args.target == "extract":
        return run_extract_scale_bench(args.model, Path(args.out), cases=args.cases, batch_size=args.batch_size,
                                       rounds=args.rounds)
    return run_scale_bench(args.model, Path(args.out), groups=args.groups, rounds=args.rounds)
