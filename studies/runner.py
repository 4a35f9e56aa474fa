"""A resumable study runner: cases in, one JSON row per (case, condition, query) out.

A *study* is an object with

* ``name``: a short identifier;
* ``config() -> dict``: every parameter that decides the rows (seed, sizes, budgets...);
* ``cases() -> list``: the cases, each with a unique ``case_id``;
* ``cases_per_batch``: how many consecutive cases run together (larger batches
  use the CPU better); part of the config, since batch composition can move
  results by float rounding;
* ``run_cases(model, cases) -> list[list[dict]]``: the rows of each case of one batch.

``run_study`` writes into ``out_dir``:

* ``config.json``: the study config, the model (name, source, weight hash), package
  versions and the number of cases. A directory that already holds a different
  config is refused, so results of two configs never mix.
* ``results.jsonl``: one row per line, keys sorted, written case by case and
  flushed to disk after each case. On a rerun, cases already complete are
  skipped; a line cut off by a kill is dropped and its case redone. A crash loses
  at most the batch in flight. Batches are a fixed partition of the case list
  (a batch with any case missing reruns whole, writing only the missing cases),
  and rows carry no timings, so the same config on the same machine reproduces
  the file byte for byte, resumed or not.

Timing goes to the returned ``RunInfo`` and to ``timing.json`` (one entry per
invocation that ran cases, with the machine), which reports read.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Protocol

import torch

import kvprobe
from kvprobe.files import atomic_write_text, versions

RESULTS = "results.jsonl"
CONFIG = "config.json"
TIMING = "timing.json"


class Study(Protocol):
    name: str

    def config(self) -> dict[str, Any]: ...

    cases_per_batch: int

    def cases(self) -> list[Any]: ...

    def run_cases(self, model: kvprobe.Model, cases: list[Any]) -> list[list[dict[str, Any]]]: ...


class ConfigMismatchError(ValueError):
    """The output directory holds results of a different configuration."""


@dataclass
class RunInfo:
    """What one invocation of :func:`run_study` did."""

    cases_total: int
    cases_skipped: int
    cases_run: int
    rows_written: int
    seconds: float


def study_parameters(study: Any) -> dict[str, Any]:
    """The base of a dataclass study's ``config()``: its public fields (not ``name``, not ``_private``
    caches), JSON-shaped (tuples as lists, as ``config.json`` stores them), and ``case_ids_sha256`` of
    its cases in order."""
    import dataclasses
    import hashlib

    cfg = {f.name: list(v) if isinstance(v := getattr(study, f.name), tuple) else v
           for f in dataclasses.fields(study) if not f.name.startswith("_") and f.name != "name"}
    cfg["case_ids_sha256"] = hashlib.sha256("\n".join(c.case_id for c in study.cases()).encode()).hexdigest()
    return cfg


def full_config(study: Study, model: kvprobe.Model) -> dict[str, Any]:
    """The config written to ``config.json``."""
    return {
        "study": study.name,
        "study_config": study.config(),
        "model": {"name": model.name, "source": model.source, "weight_hash": model.weight_hash,
                  "dtype": str(model.dtype), "architecture": model.arch.describe(),
                  "attn_implementation": model.hf.config._attn_implementation},
        "versions": versions(),
    }



def completed_cases(path: Path) -> set[str]:
    """Case ids whose rows are complete in ``results.jsonl``; drops a trailing cut-off line."""
    if not path.exists():
        return set()
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):  # killed mid-write: drop the partial line
        data = data[: data.rfind(b"\n") + 1]
        with open(path, "wb") as f:
            f.write(data)
    rows = [json.loads(line) for line in data.decode().splitlines() if line]
    done: dict[str, bool] = {}
    for row in rows:
        done[row["case_id"]] = done.get(row["case_id"], True) and bool(row.get("case_complete", True))
    return {case_id for case_id, ok in done.items() if ok}


def results_file(out_dir: Path | str) -> Path:
    """``results.jsonl``, or its gzip copy ``results.jsonl.gz`` (how committed runs are stored)."""
    plain = Path(out_dir) / RESULTS
    for path in (plain, plain.with_name(RESULTS + ".gz")):
        if path.exists():
            return path
    raise FileNotFoundError(f"{out_dir}: no {RESULTS} (not a `kvprobe run` output directory)")


def read_rows(out_dir: Path | str) -> Iterable[dict[str, Any]]:
    """Stream the rows of ``results.jsonl`` or ``results.jsonl.gz`` (nothing held in memory)."""
    path = results_file(out_dir)
    with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def run_study(study: Study, model: kvprobe.Model, out_dir: Path | str, progress: bool = True) -> RunInfo:
    """Run every case not yet in ``out_dir/results.jsonl``, appending its rows case by case after each batch."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = full_config(study, model)
    cases = study.cases()
    config["cases"] = len(cases)
    config_path = out / CONFIG
    if config_path.exists():
        existing = json.loads(config_path.read_text())
        mine = {k: v for k, v in config.items() if k != "versions"}
        theirs = {k: v for k, v in existing.items() if k != "versions"}
        if mine != theirs:
            raise ConfigMismatchError(
                f"{out} holds results of another configuration ({config_path}); use a new --out directory")
    else:
        atomic_write_text(config_path, json.dumps(config, indent=2, sort_keys=True) + "\n")
    ids = [c.case_id for c in cases]
    if len(set(ids)) != len(ids):
        raise ValueError(f"study {study.name!r} has duplicate case ids")
    results = out / RESULTS
    if not results.exists() and results.with_name(RESULTS + ".gz").exists():
        raise FileExistsError(f"{out} holds a packed {RESULTS}.gz; run `gunzip -k {results}.gz` first to extend it")
    done = completed_cases(results)
    todo = [c for c in cases if c.case_id not in done]
    size = max(1, int(study.cases_per_batch))
    batches = [cases[i : i + size] for i in range(0, len(cases), size)]
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(cases), initial=len(cases) - len(todo), desc=f"{study.name} on {model.name}",
                   unit="case")
    start, written = time.perf_counter(), 0
    with open(results, "a") as f:
        for batch in batches:
            if all(c.case_id in done for c in batch):
                continue
            for case, rows in zip(batch, study.run_cases(model, batch)):
                if case.case_id in done:
                    continue
                f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
                f.flush()
                os.fsync(f.fileno())
                written += len(rows)
                if bar is not None:
                    bar.update(1)
    if bar is not None:
        bar.close()
    info = RunInfo(len(cases), len(cases) - len(todo), len(todo), written, time.perf_counter() - start)
    if info.cases_run:
        _record_timing(out, info, size)
    return info


def _record_timing(out: Path, info: RunInfo, cases_per_batch: int) -> None:
    path = out / TIMING
    runs = json.loads(path.read_text())["invocations"] if path.exists() else []
    runs.append({"seconds": round(info.seconds, 1), "cases_run": info.cases_run, "rows_written": info.rows_written,
                 "cases_per_batch": cases_per_batch, "threads": torch.get_num_threads(),
                 "cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
                 "platform": platform.platform()})
    atomic_write_text(path, json.dumps({"invocations": runs}, indent=2) + "\n")


def read_timing(out_dir: Path | str) -> dict[str, Any] | None:
    """Totals over the invocations in ``timing.json`` (None if there is none)."""
    path = Path(out_dir) / TIMING
    if not path.exists():
        return None
    runs = json.loads(path.read_text())["invocations"]
    seconds = sum(r["seconds"] for r in runs)
    cases = sum(r["cases_run"] for r in runs)
    rows = sum(r["rows_written"] for r in runs)
    return {"seconds": seconds, "cases_run": cases, "rows_written": rows, "invocations": len(runs),
            "seconds_per_case": seconds / cases if cases else None, "rows_per_second": rows / seconds if seconds else None,
            "machine": {k: runs[-1][k] for k in ("threads", "cpus", "processor", "platform")},
            "cases_per_batch": runs[-1]["cases_per_batch"]}


def run_with_log(study: Any, model: kvprobe.Model, out_dir: Path | str, attribute: str, filename: str,
                 progress: bool = True) -> RunInfo:
    """:func:`run_study` for a study that appends a side log (costs, timings) outside ``results.jsonl``:
    ``study.<attribute>`` is set to ``out_dir/filename`` first."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    setattr(study, attribute, str(Path(out_dir) / filename))
    return run_study(study, model, out_dir, progress=progress)


def write_run_summary(out_dir: Path | str, summarize: Any, format_report: Any, seed: int = 0) -> dict[str, Any]:
    """Write ``summary.json`` and ``report.md`` of a run from ``summarize(out, seed=...)`` and
    ``format_report(summary, config, timing)``; return the summary."""
    out = Path(out_dir)
    summary = summarize(out, seed=seed)
    config = json.loads((out / CONFIG).read_text())
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=1) + "\n")
    atomic_write_text(out / "report.md", format_report(summary, config, read_timing(out)))
    return summary
