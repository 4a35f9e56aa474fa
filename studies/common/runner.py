"""A resumable study runner: cases in, one JSON row per (case, condition, query) out.

A *study* is a :class:`kvprobe.studies.common.protocol.Study`; the runner uses its

* ``name``: a short identifier;
* ``config() -> dict``: every parameter that decides the rows (seed, sizes, budgets...);
* ``cases() -> list``: the cases, each with a unique ``case_id``;
* ``cases_per_batch``: how many consecutive cases run together (larger batches
  use the CPU better); part of the config, since batch composition can move
  results by float rounding;
* ``side_logs``: the side logs it appends to beside ``results.jsonl`` (name -> file name);
* ``run_cases(model, cases, state) -> list[list[dict]]``: the rows of each case of one batch,
  with the invocation's :class:`~kvprobe.studies.common.protocol.RunState` (objects built once,
  the side logs' paths).

``run_study`` writes into ``out_dir``:

* ``config.json``: the study config, the model (name, source, weight hash), package
  versions and the number of cases. A directory that already holds a different
  config is refused, so results of two configs never mix.
* ``results.jsonl``: one row per line, keys sorted, written case by case and
  flushed to disk after each case; ``results.committed`` then records the file's
  length, so the rows of a case whose write a kill cut short (even between two
  of its lines) are dropped on a rerun and the case redone. On a rerun, cases
  already complete are skipped. A crash loses at most the batches in flight.
  Batches are a fixed partition of the case list (a batch with any case missing
  reruns whole, writing only the missing cases), and rows carry no timings, so
  the same config on the same machine reproduces the file byte for byte,
  resumed or not.

With a :class:`kvprobe.workers.WorkerPool` the batches run on Ray workers (one
model load each; batches dealt to workers by the stable hashes of their first case
ids), rows are appended as batches return and put back in case order at the end: the same
``results.jsonl`` as a local run, and the same resumption (a run may stop on Ray
and resume locally, or the other way round).

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
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import torch

import kvprobe
from kvprobe.files import atomic_write_text, versions
from kvprobe.sharding import model_description

from .progress import CaseProgress
from .protocol import RunState, Study

if TYPE_CHECKING:
    from kvprobe.workers import WorkerPool

RESULTS = "results.jsonl"
CONFIG = "config.json"
TIMING = "timing.json"
#: The byte length of ``results.jsonl`` known to hold only whole cases, rewritten after every case.
COMMITTED = "results.committed"


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


def full_config(study: Study, model: kvprobe.Model | dict[str, Any]) -> dict[str, Any]:
    """The config written to ``config.json`` (``model``: a loaded model or its :func:`model_description`)."""
    description = model if isinstance(model, dict) else model_description(model)
    return {"study": study.name, "study_config": study.config(), "model": description, "versions": versions()}


def completed_cases(path: Path) -> set[str]:
    """Case ids whose rows are complete in ``results.jsonl``.

    Cuts the file back to its last committed byte (see :data:`COMMITTED`), which drops
    the rows of a case whose write a kill interrupted, even if some of its lines were
    whole; without a commit record (runs of older versions) only a trailing cut-off line
    is dropped.
    """
    if not path.exists():
        return set()
    committed = _committed_bytes(path)
    data = path.read_bytes()
    keep = len(data) if committed is None else min(committed, len(data))
    if keep < len(data) or (data and not data.endswith(b"\n")):
        data = data[:keep]
        data = data[: data.rfind(b"\n") + 1]  # killed mid-write: drop a partial line
        with open(path, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    rows = [parse_row(path, i, line) for i, line in enumerate(data.decode().splitlines(), 1) if line]
    done: dict[str, bool] = {}
    for row in rows:
        done[row["case_id"]] = done.get(row["case_id"], True) and bool(row.get("case_complete", True))
    return {case_id for case_id, ok in done.items() if ok}


class CorruptResultsError(ValueError):
    """A line of ``results.jsonl`` is not a JSON row (``FILE:LINE: not JSON (...)``)."""


def parse_row(path: Path | str, lineno: int, line: str | bytes) -> dict[str, Any]:
    """One line of a results file as a row, or :class:`CorruptResultsError` naming the file and line."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise CorruptResultsError(f"{path}:{lineno}: not JSON ({exc.msg} at column {exc.colno}); "
                                  "fix or delete the line, or start a new --out directory") from None
    if not isinstance(row, dict) or "case_id" not in row:
        raise CorruptResultsError(f"{path}:{lineno}: not a result row (a JSON object with a case_id)")
    return row


def _commit_path(results: Path) -> Path:
    return results.with_name(COMMITTED)


def _committed_bytes(results: Path) -> int | None:
    path = _commit_path(results)
    if not path.exists():
        return None
    return int(json.loads(path.read_text())["bytes"])


def _commit(results: Path, size: int) -> None:
    """Record that the first ``size`` bytes of ``results.jsonl`` hold only whole cases."""
    atomic_write_text(_commit_path(results), json.dumps({"bytes": size}) + "\n")


def order_by_case(results: Path, case_ids: Sequence[str]) -> bool:
    """Rewrite ``results.jsonl`` with its cases in the order of ``case_ids`` (each case's rows kept
    together and in their order); return whether the file changed.

    A sharded run appends cases as workers finish them; this puts them back in the
    order a single-process run writes, so both produce the same bytes. Only line
    offsets are held in memory; the new file replaces the old one atomically.
    """
    spans: dict[str, list[tuple[int, int]]] = {}
    order: list[str] = []
    with open(results, "rb") as f:
        offset = 0
        for lineno, line in enumerate(f, 1):
            case_id = parse_row(results, lineno, line)["case_id"]
            if case_id not in spans:
                spans[case_id] = []
                order.append(case_id)
            spans[case_id].append((offset, len(line)))
            offset += len(line)
    expected = set(case_ids)
    wanted = [c for c in case_ids if c in spans] + [c for c in order if c not in expected]
    if wanted == order:
        return False
    tmp = results.with_name(results.name + ".reorder.tmp")
    with open(results, "rb") as src, open(tmp, "wb") as dst:
        for case_id in wanted:
            for start, length in spans[case_id]:
                src.seek(start)
                dst.write(src.read(length))
        dst.flush()
        os.fsync(dst.fileno())
    os.replace(tmp, results)
    return True


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
        for lineno, line in enumerate(f, 1):
            if line.strip():
                yield parse_row(path, lineno, line)


def rewrite_rows(out_dir: Path | str, rows: Iterable[dict[str, Any]]) -> Path:
    """Replace the rows of ``results.jsonl`` or ``results.jsonl.gz`` in place (a regrade of stored outputs), in
    the format :func:`run_study` writes: one row per line, keys sorted; a gzip copy stays gzip (mtime 0)."""
    path = results_file(out_dir)
    data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
    if path.suffix == ".gz":
        data = gzip.compress(data, compresslevel=9, mtime=0)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)
    return path


def regrade_results(out_dir: Path | str, regrade: Any) -> int:
    """Rewrite a run's results in place with ``regrade(row)`` of every row (:func:`rewrite_rows`); the number of
    rows that changed. How a study's committed rows follow a changed grading rule without a new model run."""
    rows = list(read_rows(out_dir))
    new = [regrade(r) for r in rows]
    rewrite_rows(out_dir, new)
    return sum(a != b for a, b in zip(rows, new))


def run_study(study: Study, model: kvprobe.Model | None, out_dir: Path | str, progress: bool = True,
              pool: "WorkerPool | None" = None, state: RunState | None = None) -> RunInfo:
    """Run every case not yet in ``out_dir/results.jsonl``, appending its rows case by case after each batch.

    ``state``: the invocation's :class:`~kvprobe.studies.common.protocol.RunState` (default a fresh one), for a
    caller that reuses what the run built (a runner that reads the study's sibling checkpoint afterwards); its
    ``logs`` are set to the study's :attr:`~kvprobe.studies.common.protocol.Study.side_logs` under ``out_dir``.

    ``pool``: run the batches on Ray workers instead (``model`` is then unused and may
    be None; see :mod:`kvprobe.workers`). A batch goes to the worker chosen by the
    stable hash of its first case id (:func:`kvprobe.sharding.assign_shards`); rows are
    appended as batches come back. Every invocation ends with the cases in case order,
    so the file is the one a single-process run writes (byte for byte when the workers
    compute with the same torch thread count).
    """
    out = Path(out_dir)
    if (model is None) == (pool is None):
        raise ValueError("run_study needs exactly one of model (local run) and pool (Ray workers)")
    state = state or RunState()
    state.logs = {name: out / filename for name, filename in study.side_logs.items()}
    config = full_config(study, model if pool is None else pool.description())
    cases = study.cases()
    config["cases"] = len(cases)
    config_path = out / CONFIG
    if model is not None:  # what would fail mid-run (a case too long for the window) fails before any file
        study.preflight(model, cases)
    out.mkdir(parents=True, exist_ok=True)
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
    batches = [b for b in batches if not all(c.case_id in done for c in b)]
    bar = None
    if progress:  # counts cases from what is on disk, a batch's at once; ETA from this invocation's rate
        where = model.name if pool is None else f"{pool.spec.name} ({len(pool.actors)} Ray workers)"
        bar = CaseProgress(len(cases), len(cases) - len(todo), f"{study.name} on {where}", size)
    if pool is None:
        finished: Iterable[tuple[int, list[list[dict[str, Any]]]]] = (
            (b, study.run_cases(model, batch, state)) for b, batch in enumerate(batches))
    else:
        pool.warn_if_idle(len(batches), "lower --cases-per-batch to split the cases into more batches")
        finished = pool.map_sharded(_run_batch, [(batch[0].case_id, (batch,)) for batch in batches],
                                    shared=(study, state))
    start, written = time.perf_counter(), 0
    try:
        with open(results, "a") as f:
            for b, batch_rows in finished:
                new = 0
                for case, rows in zip(batches[b], batch_rows):
                    if case.case_id in done:
                        continue
                    f.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
                    f.flush()
                    os.fsync(f.fileno())
                    _commit(results, f.tell())
                    done.add(case.case_id)
                    written += len(rows)
                    new += 1
                if bar is not None:
                    bar.advance(new)
    finally:
        if bar is not None:
            bar.close()
    if order_by_case(results, ids):  # after a Ray invocation, or a local one resuming it
        _commit(results, results.stat().st_size)
    info = RunInfo(len(cases), len(cases) - len(todo), len(todo), written, time.perf_counter() - start)
    if info.cases_run:
        _record_timing(out, info, size, pool)
    return info


def _run_batch(model: kvprobe.Model, shared: tuple[Study, RunState], batch: list[Any]) -> list[list[dict[str, Any]]]:
    """One batch on a Ray worker (module level, so workers import it rather than unpickle its code); the worker
    keeps its copy of the study and of the run state across its batches."""
    study, state = shared
    return study.run_cases(model, batch, state)


def _record_timing(out: Path, info: RunInfo, cases_per_batch: int, pool: "WorkerPool | None" = None) -> None:
    path = out / TIMING
    runs = json.loads(path.read_text())["invocations"] if path.exists() else []
    backend = ({"backend": "local"} if pool is None else
               {"backend": "ray", "workers": len(pool.actors), "threads_per_worker": pool.options.threads,
                "ray_address": pool.options.address or "local"})
    runs.append({"seconds": round(info.seconds, 1), "cases_run": info.cases_run, "rows_written": info.rows_written,
                 **backend, "cases_per_batch": cases_per_batch, "threads": torch.get_num_threads(),
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


def append_json_lines(path: Path | str, records: Iterable[dict[str, Any]]) -> None:
    """Append ``records`` to a side log (:attr:`~kvprobe.studies.common.protocol.Study.side_logs`), one JSON object
    per line with sorted keys, in one write. A line a kill cuts short is the last one; readers skip it.

    Example: ``append_json_lines(state.logs["costs"], [{"case_id": "c0", "seconds": 0.12}])``.
    """
    lines = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
    with open(path, "a") as f:
        f.write(lines)
