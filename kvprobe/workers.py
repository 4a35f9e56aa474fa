"""Model workers on Ray: one model load per worker, work sharded deterministically, results streamed back.

Ray is optional (``pip install 'kvprobe[ray]'``); nothing here imports it until a
pool starts. A :class:`WorkerPool` starts ``workers`` Ray actors, each loading the
model of a :class:`~kvprobe.sharding.ModelSpec` once, and runs functions
``fn(model, *args)`` on them:

* units of work go to workers by :func:`~kvprobe.sharding.assign_shards` of their
  keys (stable hashes, balanced), so the same run always puts the same unit on
  the same worker;
* each worker has at most ``in_flight`` units outstanding, and results come back
  to the caller as they complete (the caller writes them to disk at once), so
  neither the driver nor Ray's object store holds a whole run;
* a worker process that dies (killed, out of memory, machine lost) is restarted
  by Ray (``max_restarts``), loads the model again and reruns the units it had
  not returned (``max_task_retries``); nothing is lost, and since a unit's result
  is returned exactly once, nothing is duplicated.

The driver starts a local Ray instance (``address=None``) or joins a running
cluster (``address="auto"`` or ``"ray://host:10001"``); every node needs kvprobe
and the model installed (see docs/scaling.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

from .sharding import ModelSpec, assign_shards, model_description, shard_of


def peak_rss_bytes() -> int | None:
    """This process's peak resident memory (``VmHWM`` of /proc/self/status; None where there is none)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


class RayUnavailableError(ImportError):
    """Ray is not installed (it is an optional dependency)."""


class WorkerMismatchError(ValueError):
    """Workers of one pool loaded different weights (a sharded run would mix models)."""


def require_ray():
    """The ``ray`` module, or a clear error saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise RayUnavailableError("the Ray backend needs Ray: pip install 'kvprobe[ray]' (or pip install ray)") from err
    return ray


@dataclass(frozen=True)
class RayOptions:
    """Where and how wide a pool runs.

    Attributes:
        address: a running Ray cluster (``"auto"``, ``"ray://head:10001"``), or None to start a local one.
        workers: model workers (each loads the model once).
        threads: torch threads per worker (also the CPUs Ray reserves for it). One thread per
            worker keeps ``workers`` processes from oversubscribing a small machine.
        gpus: GPUs Ray reserves per worker (with ``ModelSpec(device="auto")`` a worker spreads the
            model over all of them).
        in_flight: units of work outstanding per worker.
        max_restarts: times Ray restarts a dead worker (and retries its units) before the run fails.
    """

    address: str | None = None
    workers: int = 2
    threads: int = 1
    gpus: float = 0.0
    in_flight: int = 2
    max_restarts: int = 3

    def __post_init__(self) -> None:
        if self.workers < 1 or self.threads < 1 or self.in_flight < 1 or self.max_restarts < 0:
            raise ValueError(f"RayOptions: workers, threads and in_flight must be >= 1, max_restarts >= 0 ({self})")


class _ModelWorker:
    """The Ray actor: loads the model once, then runs ``fn(model, *args)`` for the driver."""

    def __init__(self, spec: ModelSpec, threads: int) -> None:
        import torch

        torch.set_num_threads(threads)
        self.model = spec.load()
        self._shared_ref: Any = None
        self._shared: Any = None

    def describe(self) -> dict[str, Any]:
        return model_description(self.model)

    def pid(self) -> int:
        return os.getpid()

    def peak_rss(self) -> int | None:
        return peak_rss_bytes()

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self.model, *args)

    def call_shared(self, fn: Callable[..., Any], shared: list[Any], *args: Any) -> Any:
        """``fn(model, shared object, *args)``; the shared object (e.g. the study, with its caches) is
        fetched once per map and kept, as a local run keeps one study object across batches."""
        import ray

        ref = shared[0]  # boxed in a list so that Ray passes the reference, not the object
        if self._shared_ref != ref:
            self._shared_ref, self._shared = ref, ray.get(ref)
        return fn(self.model, self._shared, *args)


class WorkerPool:
    """``workers`` Ray actors with the model of ``spec`` loaded; use as a context manager."""

    def __init__(self, spec: ModelSpec, options: RayOptions = RayOptions()) -> None:
        ray = require_ray()
        self.spec, self.options = spec, options
        self._started_ray = False
        if not ray.is_initialized():
            if options.address is None:
                ray.init(num_cpus=max(os.cpu_count() or 1, options.workers * options.threads),
                         include_dashboard=False, log_to_driver=False, configure_logging=False)
            else:
                ray.init(address=options.address, log_to_driver=False, configure_logging=False)
            self._started_ray = True
        actor = ray.remote(num_cpus=options.threads, num_gpus=options.gpus, max_restarts=options.max_restarts,
                           max_task_retries=options.max_restarts)(_ModelWorker)
        self.actors = [actor.remote(spec, options.threads) for _ in range(options.workers)]
        self._description: dict[str, Any] | None = None

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        """Stop the workers (and the local Ray instance this pool started)."""
        ray = require_ray()
        for a in self.actors:
            ray.kill(a)
        self.actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def description(self) -> dict[str, Any]:
        """The model as every worker loaded it (:func:`model_description`); refuses differing weights."""
        if self._description is None:
            ray = require_ray()
            found = ray.get([a.describe.remote() for a in self.actors])
            if any(d != found[0] for d in found[1:]):
                raise WorkerMismatchError(f"workers of {self.spec.name!r} loaded different models: {found}")
            self._description = found[0]
        return self._description

    def pids(self) -> list[int]:
        """Process ids of the workers (tests kill one to check recovery)."""
        ray = require_ray()
        return ray.get([a.pid.remote() for a in self.actors])

    def call_one(self, fn: Callable[..., Any], *args: Any, key: str = "") -> Any:
        """``fn(model, *args)`` on the worker of ``key`` (one unit, waited for)."""
        ray = require_ray()
        return ray.get(self.actors[shard_of(key, len(self.actors))].call.remote(fn, *args))

    def peak_rss(self) -> list[int | None]:
        """Each worker's peak resident memory in bytes (Linux; None elsewhere)."""
        ray = require_ray()
        return ray.get([a.peak_rss.remote() for a in self.actors])

    def warn_if_idle(self, units: int, hint: str) -> None:
        """Warn when fewer units of work than workers are left (some workers would idle)."""
        if 0 < units < len(self.actors):
            import warnings

            warnings.warn(f"{units} unit(s) of work for {len(self.actors)} Ray workers: some will idle; {hint}",
                          stacklevel=3)

    def map_sharded(self, fn: Callable[..., Any], units: Sequence[tuple[str, tuple[Any, ...]]],
                    shared: Any = None) -> Iterator[tuple[int, Any]]:
        """Run ``fn(model, shared, *args)`` for each ``(key, args)`` of ``units`` on the worker
        :func:`assign_shards` gives its key.

        Yields ``(index into units, result)`` as units complete. ``shared`` (e.g. the study) is
        sent to the object store once and fetched once per worker, which keeps it across units.
        """
        ray = require_ray()
        n = len(self.actors)
        queues: list[list[int]] = [[] for _ in range(n)]
        for i, shard in enumerate(assign_shards([key for key, _ in units], n)):
            queues[shard].append(i)
        for q in queues:
            q.reverse()  # pop() from the end = submission in unit order
        shared_ref = ray.put(shared)
        pending: dict[Any, tuple[int, int]] = {}  # object ref -> (unit index, worker)

        def submit(w: int) -> None:
            i = queues[w].pop()
            pending[self.actors[w].call_shared.remote(fn, [shared_ref], *units[i][1])] = (i, w)

        for w in range(n):
            for _ in range(min(self.options.in_flight, len(queues[w]))):
                submit(w)
        while pending:
            (ref,), _ = ray.wait(list(pending), num_returns=1)
            i, w = pending.pop(ref)
            result = ray.get(ref)
            if queues[w]:
                submit(w)
            yield i, result
