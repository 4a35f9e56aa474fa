"""``kvprobe bench long``: kvprobe against plain transformers on long histories, side by side.

For every history length (PG-19 filler from the ``pg19`` data set (``kvprobe data``) with the
quantity task's record A at 50 % and record B at the end, as
:func:`kvprobe.tools.bench.operations.build_history` builds them) this measures
kvprobe and the loop a researcher would write by hand with plain transformers
under its SDPA attention, on the same weights (:func:`transformers_sdpa`
switches ``model.hf`` to ``"sdpa"`` for the plain runs and back afterwards):

``prefill``
    tokens/s of ``model.prefill(prompt)`` (512-token chunks; it also tokenizes
    and hashes the cache, timed on their own as ``overhead_ms``) vs ``model.hf``
    over the same ids in 512-token chunks into a ``DynamicCache``. Check: K of
    the last layer agrees to a relative 1e-4.
``decode-B``
    one masked decode step of B rows, the access-only condition
    ``Mask(history.span("A"))``: kvprobe forks B rows of the prepared state,
    runs the question once and then single-token ``traced_forward`` steps; plain
    holds the history K/V repeated per row in a ``DynamicCache`` and passes an
    explicit [B, 1, Q, S] additive mask with A's columns at the dtype minimum.
    Check: the first decode step's logits agree to 1e-3 (absolute).
``mask``, ``rebuild``, ``recompute``, ``recompute-prefix``
    building the condition's state and the first answer token after it, as
    ``kvprobe bench operations`` does (``Condition.prepare`` then the question),
    against the same work by hand: the question under an explicit mask hiding A;
    the cache before A kept and every later token prefilled again with an
    explicit mask hiding A from the tokens after it; a fresh chunked prefill of
    the history with A's text removed; the cached rows before A copied and only
    the edited rest prefilled. Check: the same first answer token.

Timed runs are interleaved (kvprobe, plain, plain, kvprobe, ...: the side that
goes first alternates) after untimed warm-ups; medians are reported with the
ratio plain time / kvprobe time (above 1: kvprobe is faster). Every measured
piece also records its peak resident set, exactly: the kernel's high-water mark
is reset before the piece (``/proc/self/clear_refs``) and ``VmHWM`` read after
it; the increment over the resident set just before the piece is reported too.
Decode memory is measured with each side alone (set-up, question, one step),
before the interleaved timing, which holds both sides' caches.

The run is resumable: ``<out>/long.json`` is rewritten atomically after every
finished (length, measure) cell, and a rerun with the same settings runs only
the missing cells. Writes ``long.json``, ``long.md`` and ``long.png``.

This module is the run (settings, resume, one history per length, its cells in order); the
measures of one history are :mod:`.long_measures`, the goals and reports :mod:`.long_report`.
"""

from __future__ import annotations

import datetime
import gc
import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

import kvprobe
from kvprobe.decoding import suffix_ids
from kvprobe.files import atomic_write_text, versions
from kvprobe.forward import CHUNK_SIZE

from .long_measures import OPERATIONS, kv_bytes, measure_decode, measure_operation, measure_prefill
from .long_report import format_long_markdown, goals, plot_long
from .measure import measured, memory_method, weight_bytes
from .operations import QUESTION, book_tokens, build_history, find_book
from .registry import parse_counts

#: History lengths (tokens) of ``kvprobe bench long`` by default.
DEFAULT_LENGTHS = (1024, 2048, 4096, 8192, 16384)
#: Batch sizes of the masked decode step by default.
DEFAULT_ROWS = (1, 15)
DEFAULT_WARMUPS = 1
DEFAULT_REPEATS = 3
DEFAULT_DECODE_STEPS = 8
#: Where record A sits in every history.
FRACTION = 0.5
FORMAT = 1


class SettingsMismatch(ValueError):
    """An existing ``long.json`` was written with other settings than this run's."""


# --------------------------------------------------------------------------- input checks


def model_context_length(name: str) -> int | None:
    """The model's ``max_position_embeddings`` read without loading its weights, or None if unknown.

    Tiny models: their config; registry and GGUF files: the GGUF's ``<arch>.context_length``;
    local directories: ``config.json``. Hub ids are checked after loading.
    """
    from kvprobe.model_registry import REGISTRY
    from kvprobe.tiny import TINY_MODELS, tiny_config

    try:
        if name in TINY_MODELS:
            return int(tiny_config(name).max_position_embeddings)
        path = Path(name).expanduser()
        gguf = REGISTRY[name].gguf_path() if name in REGISTRY else path if path.is_file() else None
        if gguf is not None:
            from gguf import GGUFReader

            fields = GGUFReader(str(gguf)).fields
            arch = fields["general.architecture"]
            arch_name = bytes(arch.parts[arch.data[0]]).decode()
            field = fields.get(f"{arch_name}.context_length")
            return None if field is None else int(field.parts[field.data[0]][0])
        if path.is_dir() and (path / "config.json").is_file():
            config = json.loads((path / "config.json").read_text())
            value = config.get("max_position_embeddings", config.get("text_config", {}).get("max_position_embeddings"))
            return None if value is None else int(value)
    except Exception:  # unreadable metadata: checked after loading instead
        return None
    return None


def choose_lengths(lengths: Sequence[int] | None, context: int | None,
                   model_name: str) -> tuple[tuple[int, ...], list[int]]:
    """(lengths to run, default lengths skipped): explicit lengths beyond the context are refused
    (naming ``--lengths``); default ones are skipped and reported."""
    if lengths is None:
        if context is None:
            return DEFAULT_LENGTHS, []
        return (tuple(n for n in DEFAULT_LENGTHS if n <= context), [n for n in DEFAULT_LENGTHS if n > context])
    lengths = tuple(int(n) for n in lengths)
    if not lengths or any(n < 1 for n in lengths):
        raise ValueError(f"--lengths: expected positive integers, got {list(lengths)}")
    too_long = [n for n in lengths if context is not None and n > context]
    if too_long:
        raise ValueError(f"--lengths: {too_long} exceed the context of {model_name} "
                         f"(max_position_embeddings {context})")
    return lengths, []


def preflight(model_name: str, out_dir: Path | str, data_dir: Path | str | None, lengths: Sequence[int] | None,
              warmups: int, repeats: int, decode_steps: int, restart: bool = False) -> None:
    """The checks that need no model: PG-19 text present, lengths within the model's context when it
    can be read without loading, and a resumable ``long.json`` written with the same settings."""
    find_book(data_dir)
    choose_lengths(lengths, model_context_length(model_name), model_name)
    if not restart:
        check_settings(load_previous(Path(out_dir)), {"model": model_name, "warmups": warmups,
                                                      "repeats": repeats, "decode_steps": decode_steps},
                       Path(out_dir) / "long.json")


# --------------------------------------------------------------------------- resume


def load_previous(out_dir: Path) -> dict[str, Any] | None:
    """The earlier run's ``long.json`` in ``out_dir``, or None."""
    path = out_dir / "long.json"
    if not path.is_file():
        return None
    try:
        previous = json.loads(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path} is not readable JSON ({exc}); pass --restart to start afresh") from None
    if not isinstance(previous, dict) or previous.get("benchmark") != "long" or "settings" not in previous:
        raise ValueError(f"{path} is not a `kvprobe bench long` result; pass --restart or another --out")
    return previous


def check_settings(previous: dict[str, Any] | None, settings: dict[str, Any], path: Path) -> None:
    """Refuse to resume ``previous`` under other ``settings``, naming the first differing one."""
    if previous is None:
        return
    old = previous["settings"]
    for key, value in settings.items():
        if key in old and old[key] != value:
            raise SettingsMismatch(
                f"{path} was written with {key}={old[key]!r}, this run has {key}={value!r}; rerun with the same "
                f"settings to resume, or pass --restart to start afresh (or choose another --out)")


# --------------------------------------------------------------------------- the run


def measures_for(rows: Sequence[int]) -> list[str]:
    """Cell names of one length, in the order they run."""
    return ["prefill", *(f"decode-{b}" for b in rows), *OPERATIONS]


def select_measures(measures: Sequence[str] | None, rows: Sequence[int]) -> list[str]:
    """The cells to run per length: ``measures`` (validated, in run order), or all of :func:`measures_for`."""
    names = measures_for(rows)
    if measures is None:
        return names
    wanted = [m.strip() for m in measures if m.strip()]
    unknown = sorted(set(wanted) - set(names))
    if unknown or not wanted:
        raise ValueError(f"--measures: unknown {unknown or 'empty list'}; choose from {', '.join(names)}")
    return [m for m in names if m in wanted]


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_run(model: kvprobe.Model, counts: dict[str, int]) -> None:
    """Refuse counts below their minimum and models the plain baseline cannot run."""
    for what, low in (("warmups", 0), ("repeats", 1), ("decode_steps", 1), ("chunk_size", 1)):
        if int(counts[what]) < low:
            raise ValueError(f"{what} must be at least {low}, got {counts[what]}")
    if model.arch.recurrent_layers or any(k is None for k, _ in model.empty_state().kv):
        raise ValueError(f"kvprobe bench long: the plain-transformers baseline needs every layer to cache its own "
                         f"K/V; {model.name} has recurrent or KV-sharing layers")


def _settings(model: kvprobe.Model, counts: dict[str, int], book_path: Path) -> dict[str, Any]:
    """What a resumed ``long.json`` must have been written with."""
    return {"model": model.name, "weight_hash": model.weight_hash, "dtype": str(model.dtype),
            "threads": torch.get_num_threads(), **counts, "fraction_a": FRACTION,
            "book": book_path.name, "book_sha256": _sha256(book_path),
            "torch": torch.__version__, "transformers": versions()["transformers"]}


def _start_result(previous: dict[str, Any] | None, settings: dict[str, Any], model: kvprobe.Model,
                  lengths: Sequence[int], rows: Sequence[int], skipped: list[int]) -> dict[str, Any]:
    """The earlier result (or a new one) with this run's settings, machine and lengths."""
    result: dict[str, Any] = previous or {"benchmark": "long", "format": FORMAT, "cells": {}, "runs": []}
    result.update({
        "settings": settings,
        "model": model.name, "dtype": str(model.dtype), "threads": torch.get_num_threads(),
        "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                    "cpus": os.cpu_count(), **versions()},
        "memory_method": memory_method(), "weight_bytes": weight_bytes(model), "context_length": model.context_length,
        "lengths": list(lengths), "rows": list(rows), "skipped_lengths": skipped,
    })
    return result


def _announce(say: Callable, path: Path, run: dict[str, Any], restart: bool, result: dict[str, Any]) -> None:
    if restart:
        say(f"--restart: ignoring any earlier results in {path}")
    if run["reused"]:
        say(f"resuming {path}: reusing {len(run['reused'])} finished cells ({', '.join(run['reused'])})")
    if result["skipped_lengths"]:
        say(f"skipping default lengths {result['skipped_lengths']}: beyond {result['model']}'s context "
            f"(max_position_embeddings {result['context_length']})")
    if result["memory_method"] != "VmHWM":
        say("note: /proc/self/clear_refs is not writable; peaks are ru_maxrss (the process peak so far), not per piece")


def _build_cell(model: kvprobe.Model, book, length: int, cell: dict[str, Any],
                extra_positions: int) -> kvprobe.History:
    """The length's history (prefilled once by kvprobe, timed and measured), its facts written into ``cell``;
    ``extra_positions``: the decode steps and warm-ups that run past the question."""
    gc.collect()
    history, built = measured(lambda: build_history(model, book, length, FRACTION))
    span = history.span("A")
    facts = {"history_tokens": len(history), "span_a": [span.start, span.end],
             "question_tokens": len(suffix_ids(model, history, QUESTION)), "history_kv_bytes": kv_bytes(history),
             # the history every measure reads, prefilled once by kvprobe (untimed by the cells)
             "history_prefill": {"seconds": built["seconds"], "tokens_per_s": len(history) / built["seconds"],
                                 "peak_bytes": built["peak_bytes"], "increment_bytes": built["increment_bytes"]}}
    if "history_tokens" in cell and cell["history_tokens"] != facts["history_tokens"]:
        raise ValueError(f"the {length}-token history now has {facts['history_tokens']} tokens, the earlier run's "
                         f"had {cell['history_tokens']}; pass --restart")
    cell.update(facts)
    cell["last_position"] = len(history) + facts["question_tokens"] + extra_positions
    return history


def _measure(model: kvprobe.Model, history: kvprobe.History, measure: str,
             counts: dict[str, int]) -> tuple[dict[str, Any], str]:
    """One cell: (its long.json entry, its progress line)."""
    warmups, repeats, chunk_size = counts["warmups"], counts["repeats"], counts["chunk_size"]
    if measure == "prefill":
        entry = measure_prefill(model, history, warmups, repeats, chunk_size)
        return entry, (f"kvprobe {entry['kvprobe']['tokens_per_s']:.0f} tok/s, "
                       f"plain {entry['plain']['tokens_per_s']:.0f} tok/s, "
                       f"plain/kvprobe time {entry['speedup']:.3f}x, K rel diff {entry['check']['relative_diff']:.1e}")
    if measure.startswith("decode-"):
        entry = measure_decode(model, history, int(measure.split("-")[1]), warmups, counts["decode_steps"])
        return entry, (f"kvprobe {entry['kvprobe']['median_ms']:.1f} ms, plain {entry['plain']['median_ms']:.1f} ms, "
                       f"plain/kvprobe {entry['speedup']:.3f}x, logits diff {entry['check']['max_abs_diff']:.1e}")
    entry = measure_operation(model, history, measure, warmups, repeats, chunk_size)
    return entry, (f"kvprobe {entry['kvprobe']['median_ms']:.1f} ms, plain {entry['plain']['median_ms']:.1f} ms, "
                   f"plain/kvprobe {entry['speedup']:.3f}x, same first token {entry['check']['passed']}")


def _save(result: dict[str, Any], out_dir: Path, reports: bool = False) -> None:
    """``long.json`` with the goals so far, atomically (``reports``: ``long.md`` and ``long.png`` too)."""
    result["goals"] = goals(result)
    atomic_write_text(out_dir / "long.json", json.dumps(result, indent=2) + "\n")
    if reports:
        atomic_write_text(out_dir / "long.md", format_long_markdown(result))
        plot_long(result, out_dir / "long.png")


def _run_cells(model: kvprobe.Model, history: kvprobe.History, cell: dict[str, Any], todo: list[str],
               counts: dict[str, int], result: dict[str, Any], out_dir: Path, say: Callable) -> None:
    """Measure ``todo`` on ``history`` in order, saving ``long.json`` after each cell."""
    for measure in todo:
        gc.collect()
        entry, line = _measure(model, history, measure, counts)
        entry["finished"] = _now()
        cell["measures"][measure] = entry
        result["runs"][-1]["ran"].append(f"{cell['target_length']}/{measure}")
        flag = "" if entry["check"]["passed"] else "  CHECK FAILED"
        say(f"  T={len(history):6d} {measure:<17} {line}{flag}", flush=True)
        _save(result, out_dir)
    cell["history_unchanged"] = history.check_digest()
    if not cell["history_unchanged"]:
        raise RuntimeError("a measure changed the shared history cache")


def run_long_bench(
    model: kvprobe.Model,
    out_dir: Path | str,
    data_dir: Path | str | None,
    lengths: Sequence[int] | None = None,
    rows: Sequence[int] = DEFAULT_ROWS,
    warmups: int = DEFAULT_WARMUPS,
    repeats: int = DEFAULT_REPEATS,
    decode_steps: int = DEFAULT_DECODE_STEPS,
    chunk_size: int = CHUNK_SIZE,
    restart: bool = False,
    progress: bool = True,
    measures: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Run (or resume) the long-context benchmark and write ``long.json``, ``long.md``, ``long.png``.

    ``lengths=None`` runs :data:`DEFAULT_LENGTHS` up to the model's context (longer ones are
    skipped and reported); explicit lengths beyond it are refused. A ``long.json`` already in
    ``out_dir`` is resumed when its settings (model, weights, dtype, threads, warm-ups, repeats,
    decode steps, chunk size, book, torch and transformers versions) equal this run's, refused
    (:class:`SettingsMismatch`, naming the setting) when they differ, ignored with ``restart``.
    The returned result has ``run["ran"]`` and ``run["reused"]``: the cells this call measured
    and the finished ones it kept. ``measures`` restricts a run to some cells of each length
    (names as :func:`measures_for` gives them, e.g. ``("prefill",)`` for a 32k-token prefill alone).
    """
    out_dir = Path(out_dir)
    say = print if progress else (lambda *a, **k: None)
    book_path = find_book(data_dir)
    lengths, skipped = choose_lengths(lengths, model.context_length, model.name)
    rows = parse_counts(",".join(str(r) for r in rows), "--rows")
    names = select_measures(measures, rows)
    counts = {"warmups": warmups, "repeats": repeats, "decode_steps": decode_steps, "chunk_size": chunk_size}
    _check_run(model, counts)
    settings = _settings(model, counts, book_path)
    previous = None if restart else load_previous(out_dir)
    check_settings(previous, settings, out_dir / "long.json")
    result = _start_result(previous, settings, model, lengths, rows, skipped)
    cells = result["cells"]
    finished = [f"{n}/{m}" for n in lengths for m in names if m in cells.get(str(n), {}).get("measures", {})]
    run = {"started": _now(), "ran": [], "reused": finished}
    result["runs"].append(run)
    _announce(say, out_dir / "long.json", run, restart, result)
    out_dir.mkdir(parents=True, exist_ok=True)
    book = None
    for length in lengths:
        cell = cells.setdefault(str(length), {"target_length": length, "measures": {}})
        todo = [m for m in names if m not in cell["measures"]]
        if not todo:
            say(f"long T~{length}: all {len(names)} cells finished earlier, reused")
            continue
        book = book if book is not None else book_tokens(model, data_dir)
        history = _build_cell(model, book, length, cell, decode_steps + warmups)
        say(f"long T={len(history)} (target {length}): running {', '.join(todo)}", flush=True)
        _run_cells(model, history, cell, todo, counts, result, out_dir, say)
        del history
        _save(result, out_dir, reports=True)
    run["finished"] = _now()
    _save(result, out_dir, reports=True)
    return result


def command(args, load) -> dict[str, Any]:
    """``kvprobe bench long``: bad input is refused (:func:`preflight`) before the model loads."""
    lengths = None if args.lengths is None else parse_counts(args.lengths, "--lengths")
    rows = parse_counts(args.rows, "--rows")
    measures = None if args.measures is None else select_measures(args.measures.split(","), rows)
    preflight(args.model, args.out, args.data, lengths, args.warmups, args.repeats, args.decode_steps,
              restart=args.restart)
    return run_long_bench(load(), Path(args.out), args.data, lengths=lengths, rows=rows, warmups=args.warmups,
                          repeats=args.repeats, decode_steps=args.decode_steps, restart=args.restart,
                          measures=measures)
