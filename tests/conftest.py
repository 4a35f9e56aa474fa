"""Shared fixtures: tiny random models (built in-process) and a small record history."""

from __future__ import annotations

import contextlib
import os
import types
from pathlib import Path

import pytest

import kvprobe
from kvprobe.tiny import TINY_MODELS

#: Attention-only tiny models most tests run on (GQA, QK-norm, sliding + full layers). Every
#: other family runs through the architecture matrix (tests/test_architectures.py) and the
#: hybrid through tests/test_hybrid.py.
ATTENTION_MODELS = ("tiny-llama", "tiny-qwen3", "tiny-gemma3")
assert set(ATTENTION_MODELS) <= set(TINY_MODELS)

SEGMENTS = [
    ("A", "Record A, Monday: the weekly planning meeting is held in Room 12 on the third floor."),
    ("note", "A square seal is printed beside a blank signature box. The cover is gray and the folder is closed."),
    ("B", "Record B, Friday: the weekly planning meeting moves to Room 18 on the fifth floor."),
]
QUESTIONS = ["Which room is the weekly planning meeting in now?", "What is gray?"]


#: Test modules that are end-to-end runs as a whole (a Ray cluster, subprocesses, several model loads).
SLOW_MODULES = {"test_scale.py", "test_long_bench.py"}  # a Ray cluster; whole long-history benchmark runs
#: In-process end-to-end tests of several seconds each (a feature store, a whole workload, a whole study run).
#: Tests that start a subprocess are slow without being named here (:func:`starts_a_subprocess`).
SLOW_TESTS = {"test_run_summary_and_resume", "test_records_evaluation_and_report",
              # whole benchmark and extraction runs under the device guard (seconds each)
              "test_gpu_bench_runs_on_the_cpu", "test_operations_bench_five_positions",
              "test_latency_bench_rows_and_summary", "test_extraction_with_edits_runs_under_the_device_guard",
              "test_store_readouts_reproduce_hand_computed_scores",
              # whole small study runs already covered by the study contract's small run of each study
              "test_fake_detectors_drive_every_question", "test_tiny_run_writes_rows_and_a_summary",
              # the request workload's small run (7 s: several detectors and recomputes per request)
              "test_small_run_config_rows_and_resume[requests]",
              # the quantity summary recomputed whole (its bootstrap Spearman intervals loop over draws); the
              # committed quantity runs' reproductions run in the full suite (the dev run's stays fast)
              "test_summary_recomputes_from_rows",
              "test_committed_summary_is_reproduced_byte_for_byte[quantity/smollm2-135m-instruct]",
              "test_committed_summary_is_reproduced_byte_for_byte[quantity/smollm2-135m-instruct-five-conditions]",
              "test_committed_summary_is_reproduced_byte_for_byte[quantity/qwen2.5-coder-1.5b-instruct]",
              "test_committed_summary_is_reproduced_byte_for_byte[quantity/qwen2.5-coder-1.5b-instruct-operation-controls]"}


#: The development data beside a source checkout (``kvprobe.data._checkout_data``'s folder, found independently).
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

#: Torch and BLAS threads of the test process and of the processes it starts (``KVPROBE_TEST_THREADS``; 1 unless
#: set): see :func:`pytest_configure`.
THREADS = int(os.environ.get("KVPROBE_TEST_THREADS", "1"))


def pytest_configure(config):
    """Run the whole session on :data:`THREADS` torch and BLAS threads (one by default), and start every
    subprocess (a CLI run, a Ray worker) with as many (``OMP_NUM_THREADS``).

    The tiny models' operations are a few thousand multiply-adds: a second thread only adds its hand-off, and on
    a 2-core machine shared with anything else (a second test process, a model run) two threads per process
    oversubscribe the cores, which made the one-thread-less modules (the architecture matrix, the cache
    operations) 5-30 times slower. One thread also fixes float32 summation order run to run."""
    import torch
    from threadpoolctl import threadpool_limits

    os.environ["OMP_NUM_THREADS"] = str(THREADS)
    torch.set_num_threads(THREADS)
    threadpool_limits(limits=THREADS)  # numpy's OpenBLAS (the bootstrap summaries); kept for the session


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A test that stops on a data set the machine lacks (``kvprobe.data.MissingDataError``: a clone with no
    data directory and no ``shared/data`` beside it) is reported as skipped, with the set and the pull command;
    where a ``shared/data`` sits beside the checkout (CI, development: :data:`SHARED_DATA`) they fail, so a broken
    resolver cannot pass as skips. The data layer's own tests (tests/test_data.py), whose subject these errors are,
    always fail on them."""
    from kvprobe.data import MissingDataError

    outcome = yield
    report = outcome.get_result()
    # Where the development data sits beside the checkout (CI, development), a missing set is a failure: a broken
    # resolver must not turn every data-reading test into a skip.
    error = call.excinfo.value if report.failed and call.excinfo is not None and item.path.name != "test_data.py" \
        and not SHARED_DATA.is_dir() else None
    while error is not None and not isinstance(error, MissingDataError):  # a study may wrap it (InvalidParameter)
        error = error.__cause__ or error.__context__
    if error is not None:
        report.outcome = "skipped"
        report.longrepr = (str(item.path), item.location[1], f"needs data: {error}")


#: Test modules between two full garbage collections (see :func:`pytest_runtest_setup`).
MODULES_PER_FULL_COLLECTION = 20
_gc_state = {"module": None, "modules": 0}


def pytest_runtest_setup(item):
    """Keep the garbage collector off the objects that outlive a test module.

    A whole-suite run holds about 1.5 million live objects (loaded models, parsed pages, cached summaries);
    every full collection walks all of them (~0.8 s), and tests that allocate many objects trigger such
    collections often, which doubled the long-history benchmark and request-workload tests inside the suite.
    At each new module the objects made since the last module are collected (a young collection, cheap)
    and the survivors frozen (``gc.freeze``: never scanned again); every
    :data:`MODULES_PER_FULL_COLLECTION` modules everything is unfrozen and fully collected once, so cyclic
    garbage of finished modules (a torn-down fixture's model) is freed within that many modules."""
    import gc

    if item.path == _gc_state["module"]:
        return
    _gc_state["module"] = item.path
    _gc_state["modules"] += 1
    if _gc_state["modules"] % MODULES_PER_FULL_COLLECTION == 0:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def _code_names(code: types.CodeType) -> set[str]:
    """The global and attribute names ``code`` and the functions nested in it use."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def starts_a_subprocess(function: types.FunctionType, _seen: set | None = None) -> bool:
    """Whether a test function uses ``subprocess`` (a CLI run in a second interpreter, a wheel build: each start
    imports torch and kvprobe again, seconds on a 2-core machine), in its own body, a function nested in it, or a
    function of its module that it calls (e.g. a ``_cli`` helper), at any depth."""
    seen = set() if _seen is None else _seen
    if function in seen:
        return False
    seen.add(function)
    names = _code_names(function.__code__)
    if "subprocess" in names:
        return True
    helpers = (function.__globals__.get(n) for n in names)
    return any(starts_a_subprocess(h, seen) for h in helpers
               if isinstance(h, types.FunctionType) and h.__module__ == function.__module__)


def pytest_collection_modifyitems(config, items):
    """``slow``: tests of :data:`SLOW_MODULES` and :data:`SLOW_TESTS`, tests that start a subprocess
    (:func:`starts_a_subprocess`: the CLI in a second interpreter, a wheel build), and every test loading the
    embedded model (``embedded``). In-process command tests (``main([...])``, milliseconds) stay fast. Nothing
    is skipped by default; the fast subset is ``python -m pytest -q -m "not slow"``."""
    for item in items:
        name = item.originalname if hasattr(item, "originalname") else item.name
        function = getattr(item, "function", None)
        if (item.path.name in SLOW_MODULES or name in SLOW_TESTS or item.name in SLOW_TESTS
                or item.get_closest_marker("embedded")
                or (isinstance(function, types.FunctionType) and starts_a_subprocess(function))):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="module")
def one_thread():
    """Run a module's tests on one torch thread whatever :data:`THREADS` is (tiny models gain nothing from a
    second one, and on a shared 2-core machine two threads per process oversubscribe the CPU badly)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", params=ATTENTION_MODELS)
def tiny_model(request) -> kvprobe.Model:
    """Each attention-only tiny model family in turn."""
    return kvprobe.load_model(request.param)


@pytest.fixture(scope="session")
def llama() -> kvprobe.Model:
    return kvprobe.load_model("tiny-llama")


@pytest.fixture(scope="session")
def hybrid() -> kvprobe.Model:
    """Qwen3.5-style hybrid: Gated DeltaNet layers beside full attention."""
    return kvprobe.load_model("tiny-qwen3.5")


@pytest.fixture(scope="session")
def gemma() -> kvprobe.Model:
    return kvprobe.load_model("tiny-gemma3")


def make_history(model: kvprobe.Model, **kwargs) -> kvprobe.History:
    """Prefill the shared three-segment chat history on ``model``."""
    return model.prefill(kvprobe.Prompt(SEGMENTS, system="Answer from the records.", **kwargs))


@contextlib.contextmanager
def tensors_made_on_meta():
    """Device guard: inside, a tensor made without an explicit ``device=`` lands on ``meta``.

    Models stay on the CPU, so any such tensor that meets the model's activations, cache or
    masks fails the forward ("Tensor on device cpu is not on the expected device meta"). This
    is how a CPU-only machine catches what would fail on a GPU (tensors made on the CPU while
    the model is on CUDA): every tensor kvprobe makes must name the model's device.
    """
    import torch

    with torch.device("meta"):
        yield


@pytest.fixture
def on_meta():
    """:func:`tensors_made_on_meta` for a whole test."""
    with tensors_made_on_meta():
        yield


def recognition_cases(n_items: int = 2) -> list:
    """Every recognition-records case of the first ``n_items`` items of each split (a small store's worth)."""
    from kvprobe.studies.datasets.recognition import generate_records

    chosen: dict[str, list[str]] = {}
    cases = generate_records()
    for c in cases:
        items = chosen.setdefault(c.split, [])
        if c.group not in items and len(items) < n_items:
            items.append(c.group)
    return [c for c in cases if c.group in chosen[c.split]]
