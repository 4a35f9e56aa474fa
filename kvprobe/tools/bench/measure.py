"""How every benchmark times and measures memory: one schedule, one interleave/median helper, one
peak-memory helper.

Timing
    :func:`schedule` is the order of timed runs: ``rounds`` passes over the sides, the side that goes
    first alternating between passes (this machine is noisy; a slow minute then hits every side), or in
    a fixed order (``alternate=False``) where a benchmark's protocol says so. :func:`interleave` runs
    warm-ups and then that schedule, measuring every run with :func:`timed` (seconds; an accelerator is
    synchronised around the run) or :func:`measured` (seconds and peak memory), and keeps only each
    side's last result (the previous one is freed before the next run, so it cannot inflate a peak).
    :func:`median_ms` and :func:`median_time` read medians off the runs.
Memory
    Resident memory (CPU) is the kernel's high-water mark ``VmHWM``, reset before a piece where Linux
    allows (``/proc/self/clear_refs``); elsewhere ``ru_maxrss``, the process peak so far
    (:func:`memory_method` says which). Accelerator memory is the allocator's high-water mark above the
    memory in use before (:func:`device_peak_bytes`).
"""

from __future__ import annotations

import ctypes
import gc
import resource
import statistics
import time
from typing import Any, Callable, Iterator, Sequence

import torch

# --------------------------------------------------------------------------- memory


def _status_bytes(field: str) -> int | None:
    """A ``/proc/self/status`` field (``VmRSS``, ``VmHWM``) in bytes; None where there is none."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def reset_peak() -> bool:
    """Reset this process's ``VmHWM`` (Linux: writing 5 to /proc/self/clear_refs); False where it cannot."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """This process's peak resident bytes since the last :func:`reset_peak` (``VmHWM``; else ``ru_maxrss``)."""
    peak = _status_bytes("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def memory_method() -> str:
    """How peaks are measured here: ``"VmHWM"`` (exact per piece) or ``"ru_maxrss"`` (process peak so far)."""
    return "VmHWM" if reset_peak() and _status_bytes("VmHWM") is not None else "ru_maxrss"


def _release_free_memory() -> None:
    """Hand freed heap pages back to the kernel (glibc), so the resident set before a piece is what is live."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def measured(fn: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    """Run ``fn`` once: (its result, {seconds, peak resident bytes during it, peak - resident bytes before})."""
    _release_free_memory()
    exact = reset_peak()
    before = _status_bytes("VmRSS") or 0
    t0 = time.perf_counter()
    result = fn()
    seconds = time.perf_counter() - t0
    peak = _status_bytes("VmHWM") if exact else None
    if peak is None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return result, {"seconds": seconds, "peak_bytes": peak, "increment_bytes": max(peak - before, 0)}


def device_peak_bytes(fn: Callable[[], Any], device: torch.device) -> int | None:
    """The device allocator's high-water mark while ``fn`` runs, above what was in use before (CUDA only;
    None elsewhere, after running ``fn``)."""
    if device.type != "cuda":
        fn()
        return None
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    fn()
    _sync(device)
    return torch.cuda.max_memory_allocated(device) - before


def weight_bytes(model) -> int:
    """Bytes of the model's parameters."""
    return sum(p.numel() * p.element_size() for p in model.hf.parameters())


# --------------------------------------------------------------------------- timing


def _sync(device: torch.device | None) -> None:
    if device is not None and device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device | None = None) -> tuple[Any, dict[str, float]]:
    """Run ``fn`` once: (its result, {seconds}); on an accelerator, synchronised before and after."""
    _sync(device)
    t0 = time.perf_counter()
    result = fn()
    _sync(device)
    return result, {"seconds": time.perf_counter() - t0}


def schedule(names: Sequence[str], rounds: int, alternate: bool = True) -> Iterator[tuple[int, str]]:
    """(round, name) of ``rounds`` passes over ``names``; with ``alternate`` every other pass is reversed."""
    names = list(names)
    for r in range(rounds):
        for name in (names[::-1] if alternate and r % 2 else names):
            yield r, name


def interleave(fns: dict[str, Callable[[], Any]], warmups: int, repeats: int,
               measure: Callable[[Callable[[], Any]], tuple[Any, dict[str, float]]] = timed,
               alternate: bool = True) -> tuple[dict[str, dict[str, list[float]]], dict[str, Any]]:
    """``warmups`` untimed passes over the sides, then ``repeats`` measured ones in :func:`schedule`'s order.

    Returns per side its lists of what ``measure`` reports (``seconds``; with :func:`measured` also
    ``peak_bytes`` and ``increment_bytes``) and each side's last result.
    """
    for _ in range(warmups):
        for fn in fns.values():
            fn()
    runs: dict[str, dict[str, list[float]]] = {name: {} for name in fns}
    last: dict[str, Any] = {}
    for _, name in schedule(fns, repeats, alternate):
        last.pop(name, None)  # free the previous result before the next run
        result, stats = measure(fns[name])
        last[name] = result
        for key, value in stats.items():
            runs[name].setdefault(key, []).append(value)
    return runs, last


def median_s(runs: dict[str, list[float]]) -> float:
    """Median seconds of one side's runs."""
    return statistics.median(runs["seconds"])


def median_ms(runs: dict[str, list[float]]) -> float:
    """Median milliseconds of one side's runs."""
    return 1e3 * median_s(runs)


def median_time(fn: Callable[[], Any], warmups: int, repeats: int,
                device: torch.device | None = None) -> tuple[float, Any]:
    """(median seconds, last result) of ``fn`` alone: ``warmups`` untimed runs, then ``repeats`` timed ones
    (on an accelerator ``device``, synchronised around each)."""
    runs, last = interleave({"fn": fn}, warmups, repeats, measure=lambda f: timed(f, device))
    return median_s(runs["fn"]), last["fn"]


def self_timed(fn: Callable[[], tuple[Any, float]]) -> tuple[Any, dict[str, float]]:
    """Run ``fn``, which times the part that counts itself and returns (result, seconds)."""
    result, seconds = fn()
    return result, {"seconds": seconds}
