"""Sharded runs on a local Ray cluster (2 workers) equal single-process runs; kills lose nothing.

Every comparison is byte for byte: the workers and the local reference both compute
with one torch thread, batches are the runner's fixed partition, and the sharded
run's rows are put back in case order, so ``results.jsonl`` must be the same file.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import h5py
import numpy as np
import pytest

import kvprobe
from kvprobe.extract import CaseScore, extract
from kvprobe.sharding import ModelSpec, assign_shards, shard_of, stable_hash
from kvprobe.workers import RayOptions, RayUnavailableError, WorkerPool, require_ray
from kvprobe.studies.quantity.study import QuantityStudy
from kvprobe.studies.datasets.recognition import DATASETS
from kvprobe.studies.recognition.questions import signed_loo_scores
from kvprobe.studies.common.runner import COMMITTED, RESULTS, completed_cases, order_by_case, read_rows, run_study

pytestmark = pytest.mark.usefixtures("one_thread")

#: 3 groups x 2 information conditions = 6 cases, one per batch: enough batches for both workers.
STUDY = dict(n_groups=3, max_new_tokens=5, operations=False, cases_per_batch=1)


@pytest.fixture(scope="module")
def pool():
    with WorkerPool(ModelSpec("tiny-llama"), RayOptions(workers=2, threads=1)) as p:
        yield p


@pytest.fixture(scope="module")
def local_run(tmp_path_factory, one_thread) -> bytes:
    """The single-process reference run (one torch thread, like each worker)."""
    out = tmp_path_factory.mktemp("local")
    run_study(QuantityStudy(**STUDY), kvprobe.load_model("tiny-llama"), out, progress=False)
    return (out / RESULTS).read_bytes()


def test_shards_come_from_sha256_of_the_key_and_are_balanced():
    assert stable_hash("quantity-g000") == int.from_bytes(hashlib.sha256(b"quantity-g000").digest()[:8], "big")
    assert [shard_of(f"case-{i}", 3) for i in range(6)] == [stable_hash(f"case-{i}") % 3 for i in range(6)]
    keys = [f"case-{i:02d}" for i in range(7)]
    shards = assign_shards(keys, 3)
    assert sorted(np.bincount(shards)) == [2, 2, 3]  # balanced to one unit
    by_hash = sorted(keys, key=stable_hash)
    assert [shards[keys.index(k)] for k in by_hash] == [0, 1, 2, 0, 1, 2, 0]  # ranks dealt round-robin
    assert assign_shards(list(reversed(keys)), 3) == list(reversed(shards))  # depends on keys, not order
    with pytest.raises(ValueError, match="n_shards"):
        shard_of("x", 0)
    with pytest.raises(ValueError, match="distinct"):
        assign_shards(["a", "a"], 2)


def test_order_by_case_restores_the_case_order_and_keeps_each_case_together(tmp_path):
    rows = [("b", 0), ("b", 1), ("a", 0), ("c", 0), ("c", 1), ("c", 2)]
    path = tmp_path / RESULTS
    path.write_text("".join(json.dumps({"case_id": c, "row": r}) + "\n" for c, r in rows))
    assert order_by_case(path, ["a", "b", "c"])
    assert [(r["case_id"], r["row"]) for r in map(json.loads, path.read_text().splitlines())] == \
        [("a", 0), ("b", 0), ("b", 1), ("c", 0), ("c", 1), ("c", 2)]
    before = path.read_bytes()
    assert not order_by_case(path, ["a", "b", "c"]) and path.read_bytes() == before


def test_a_case_cut_between_two_of_its_lines_is_redone(local_run, tmp_path):
    """A kill after some whole lines of a case but before its commit: those lines go, the case reruns."""
    study = QuantityStudy(**STUDY)
    out = tmp_path / "run"
    out.mkdir()
    lines = local_run.splitlines(keepends=True)
    ids = [json.loads(line)["case_id"] for line in lines]
    third = ids.index(sorted(set(ids), key=ids.index)[2])  # first line of the third case
    committed = sum(len(x) for x in lines[:third])
    (out / RESULTS).write_bytes(b"".join(lines[: third + 2]))  # two whole lines of the third case
    (out / COMMITTED).write_text(json.dumps({"bytes": committed}))
    run_study(study, kvprobe.load_model("tiny-llama"), out, progress=False)  # writes config.json first
    assert (out / RESULTS).read_bytes() == local_run


def test_a_sharded_run_cut_short_finishes_locally_in_case_order(local_run, tmp_path):
    """A Ray run killed after three cases, written in completion order; the local backend finishes it."""
    lines = local_run.splitlines(keepends=True)
    ids = [json.loads(line)["case_id"] for line in lines]
    first = sorted(set(ids), key=ids.index)[:3]
    blocks = {c: b"".join(line for line, i in zip(lines, ids) if i == c) for c in first}
    out = tmp_path / "run"
    out.mkdir()
    written = blocks[first[2]] + blocks[first[0]] + blocks[first[1]]
    (out / RESULTS).write_bytes(written)
    (out / COMMITTED).write_text(json.dumps({"bytes": len(written)}))
    info = run_study(QuantityStudy(**STUDY), kvprobe.load_model("tiny-llama"), out, progress=False)
    assert info.cases_run == 3 and info.cases_skipped == 3
    assert (out / RESULTS).read_bytes() == local_run


def test_a_sharded_run_writes_the_single_process_file_byte_for_byte(pool, local_run, tmp_path):
    info = run_study(QuantityStudy(**STUDY), None, tmp_path, progress=False, pool=pool)
    assert info.cases_run == 6 and info.cases_skipped == 0
    assert (tmp_path / RESULTS).read_bytes() == local_run
    timing = json.loads((tmp_path / "timing.json").read_text())["invocations"][-1]
    assert timing["backend"] == "ray" and timing["workers"] == 2
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model"]["name"] == "tiny-llama"
    # Resuming a finished sharded run locally runs nothing (same config, same rows).
    again = run_study(QuantityStudy(**STUDY), kvprobe.load_model("tiny-llama"), tmp_path, progress=False)
    assert again.cases_run == 0 and (tmp_path / RESULTS).read_bytes() == local_run


def _pid(model, shared, key):
    return os.getpid()


def test_each_unit_runs_on_the_worker_of_its_key(pool):
    import ray.cloudpickle

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import a test module
    pids = pool.pids()
    keys = [f"unit-{i}" for i in range(8)]
    for _ in range(2):
        ran = dict(pool.map_sharded(_pid, [(k, (k,)) for k in keys]))
        assert [pids.index(ran[i]) for i in range(8)] == assign_shards(keys, 2)
    assert sorted(np.bincount(assign_shards(keys, 2))) == [4, 4]


def _records_cases(n: int = 10):
    generator, seed = DATASETS["records"]
    return generator(seed=seed)[:n]


def test_a_sharded_extraction_stores_the_same_arrays(pool, llama, tmp_path):
    """Shards and the signed LOO (in chunks of 8 cases, spread over both workers) equal a local extraction."""
    cases = _records_cases(20)
    scores = {"signed_loo": CaseScore(signed_loo_scores, chunk=8)}
    whole = signed_loo_scores(llama, cases)
    local = extract(llama, "records", cases, tmp_path / "local.h5", batch_size=4, progress=False,
                    case_scores=scores)
    sharded = extract(None, "records", cases, tmp_path / "ray.h5", batch_size=4, progress=False, pool=pool,
                      case_scores=scores)
    with h5py.File(local, "r") as a:
        assert np.array_equal(a["tiny-llama/records/cases/scores/signed_loo"][()], whole)  # chunked = whole
    with h5py.File(local, "r") as a, h5py.File(sharded, "r") as b:
        names: list[str] = []
        a.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        assert len(names) > 20
        others: list[str] = []
        b.visititems(lambda name, obj: others.append(name) if isinstance(obj, h5py.Dataset) else None)
        assert names == others
        for name in names:
            assert np.array_equal(a[name][()], b[name][()]), name
        group = "tiny-llama/records"
        attrs_a = {k: v for k, v in a[group].attrs.items() if k != "versions"}
        attrs_b = {k: v for k, v in b[group].attrs.items() if k != "versions"}
        assert attrs_a == attrs_b and len(attrs_a) > 10
    assert not (tmp_path / "ray.h5.parts").exists()


def test_fewer_batches_than_workers_warns(pool, tmp_path):
    with pytest.warns(UserWarning, match="1 unit.* for 2 Ray workers.*--cases-per-batch"):
        run_study(QuantityStudy(n_groups=1, max_new_tokens=2, operations=False, cases_per_batch=4), None, tmp_path,
                  progress=False, pool=pool)


def _kill_once(started: Callable[[], bool], pid: int) -> tuple[threading.Thread, list[int]]:
    """A running thread that SIGKILLs ``pid`` as soon as ``started()`` (polled every 10 ms, up to 120 s);
    the list records the kill."""
    killed: list[int] = []

    def watch() -> None:
        deadline = time.time() + 120
        while time.time() < deadline:
            if started():
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.01)

    thread = threading.Thread(target=watch)
    thread.start()
    return thread, killed


def test_killing_a_worker_mid_run_loses_nothing(pool, local_run, tmp_path):
    """SIGKILL one worker once the first case is on disk: Ray restarts it (reloading the model) and
    reruns its unfinished batches; the file still equals the single-process one."""
    before = pool.pids()
    results = tmp_path / RESULTS
    killer, killed = _kill_once(lambda: results.exists() and results.stat().st_size > 0, before[0])
    info = run_study(QuantityStudy(**STUDY), None, tmp_path, progress=False, pool=pool)
    killer.join()
    assert killed, "the run finished before a worker could be killed"
    assert pool.pids()[0] != before[0]  # the worker was really replaced
    assert info.cases_run == 6
    assert results.read_bytes() == local_run
    assert len(completed_cases(results)) == 6


def test_killing_a_worker_mid_extraction_loses_nothing(pool, llama, tmp_path):
    """SIGKILL a worker once the first shard is on disk: the extraction completes and its arrays equal a
    local extraction's."""
    cases = _records_cases(60)
    before = pool.pids()
    parts = tmp_path / "ray.h5.parts"
    killer, killed = _kill_once(lambda: parts.exists() and any(parts.rglob("batch-*.h5")), before[1])
    sharded = extract(None, "records", cases, tmp_path / "ray.h5", batch_size=2, progress=False, pool=pool)
    killer.join()
    assert killed, "the extraction finished before a worker could be killed"
    assert pool.pids()[1] != before[1]
    local = extract(llama, "records", cases, tmp_path / "local.h5", batch_size=2, progress=False)
    with h5py.File(local, "r") as a, h5py.File(sharded, "r") as b:
        names: list[str] = []
        a.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in names:
            assert np.array_equal(a[name][()], b[name][()]), name


def _cli(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "kvprobe.cli", "run", "quantity", "--model", "tiny-llama", "--n-groups", "3",
            "--max-new-tokens", "5", "--no-operations", "--cases-per-batch", "1", "--out", str(out), "--quiet",
            *extra]


def test_killing_the_driver_and_rerunning_resumes_to_the_same_file(local_run, tmp_path):
    """`kvprobe run --backend ray` killed (driver, Ray and workers) once a case is on disk; the same
    command again finishes the run; the rows equal the single-process run's."""
    out = tmp_path / "run"
    cmd = _cli(out, "--backend", "ray", "--workers", "2")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    results = out / RESULTS
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if results.exists() and results.stat().st_size > 0:
            break
        time.sleep(0.05)
    assert proc.poll() is None, f"the run ended before it could be killed: {proc.communicate()[1].decode()[-2000:]}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = completed_cases(results)
    assert 1 <= len(partial) < 6
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert results.read_bytes() == local_run
    assert len(list(read_rows(out))) == len(local_run.splitlines())
    assert (out / "report.md").exists()


def test_studies_that_log_from_inside_cases_refuse_ray_before_loading_anything(capsys):
    from kvprobe.cli import main

    assert main(["run", "requests", "--backend", "ray", "--model", "tiny-llama"]) == 2
    assert "--backend ray is not supported" in capsys.readouterr().err


def test_a_missing_ray_is_named(monkeypatch, capsys, tmp_path):
    from kvprobe.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(RayUnavailableError, match=r"pip install 'kvprobe\[ray\]'"):
        require_ray()
    assert main(["run", "quantity", "--backend", "ray", "--model", "tiny-llama", "--out", str(tmp_path / "r")]) == 2
    assert "pip install 'kvprobe[ray]'" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
