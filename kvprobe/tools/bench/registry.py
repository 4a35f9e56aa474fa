"""The benchmarks: one registry from which ``kvprobe bench SUITE`` is built.

Each :class:`Bench` names its module (loaded only when it runs: ``command(args, load)`` turns the parsed
options into its run and returns the result; ``load()`` loads ``--model`` with ``--device``/``--dtype``),
its report writer (result -> the markdown printed and written beside the JSON), its own options with
their defaults (``kvprobe bench SUITE --help`` lists them) and the lines ``kvprobe bench --help`` gives
it. Options several benchmarks take share one definition (:data:`SHARED`); each benchmark sets its own
default (:func:`option`). Every benchmark times with :mod:`kvprobe.tools.bench.measure` (one
interleave/median helper, one peak-memory helper).

Adding a benchmark: its module under ``kvprobe/tools/bench/`` with ``command`` and a report function,
one :data:`BENCHES` entry with its options, and a section in docs/benchmarks.md.

Example:
    >>> BENCHES["long"].defaults()["--decode-steps"], BENCHES["gpu"].defaults()["--decode-steps"]
    (8, 16)
"""

from __future__ import annotations

import argparse
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from kvprobe.model_registry import DEFAULT_MODEL
from kvprobe.parameters import at_least

#: A data directory option's help (``--data``).
_PG19 = "a data directory holding pg19/ (default: where `kvprobe data` finds the pg19 data set)"

#: Options several benchmarks take (argparse keyword arguments without a default; ``%(default)s`` in a help
#: is the benchmark's own default).
SHARED: dict[str, dict[str, Any]] = {
    "--lengths": dict(help="history lengths in tokens, comma-separated (default %(default)s)"),
    "--warmups": dict(type=at_least(0), help="untimed warm-up runs per cell and side (default %(default)s)"),
    "--repeats": dict(type=at_least(1), help="timed runs per cell and side, median reported (default %(default)s)"),
    "--data": dict(help=_PG19),
    "--cases": dict(type=at_least(1), help="first N cases of the records dataset (default %(default)s: 20 items, "
                    "~260 records)"),
    "--batch-size": dict(type=at_least(1), help="records per forward (default %(default)s)"),
}


def parse_counts(text: str, option: str) -> tuple[int, ...]:
    """Comma-separated positive integers of a count option (``--lengths``, ``--rows``), in order and without
    repeats; a ValueError names ``option``.

    Example:
        >>> parse_counts("1024,2048,1024", "--lengths")
        (1024, 2048)
    """
    try:
        values = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise ValueError(f"{option}: expected comma-separated positive integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{option}: expected comma-separated positive integers, got {text!r}")
    return tuple(dict.fromkeys(values))


def option(flag: str, default: Any = None, **kwargs: Any) -> tuple[str, dict[str, Any]]:
    """``(flag, argparse keyword arguments)``: the :data:`SHARED` definition of ``flag`` (if any) with this
    benchmark's ``default`` and any keyword it changes (a ``help`` of its own, ``type``, ``choices``...).

    Example:
        >>> option("--repeats", 9)[1]["default"]
        9
    """
    return flag, {**SHARED.get(flag, {}), "default": default, **kwargs}


@dataclass(frozen=True)
class Bench:
    """One benchmark: ``kvprobe bench NAME``."""

    name: str
    #: Its line in ``kvprobe bench --help``.
    help: str
    #: What it measures and writes (``kvprobe bench NAME --help``).
    description: str
    #: Module under ``kvprobe.tools.bench`` holding ``command(args, load)``.
    module: str
    #: Function of that module: result -> markdown (the report printed and written beside the JSON).
    report: str
    #: Its options besides ``--model`` and ``--out`` (and ``--device``/``--dtype``, which the CLI adds), each with
    #: its own default: flag -> argparse keyword arguments.
    options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add_parser(self, suites: argparse._SubParsersAction) -> argparse.ArgumentParser:
        """Its sub-command of ``kvprobe bench``: ``--model``, ``--out`` and its own options."""
        p = suites.add_parser(self.name, help=self.help, description=f"{self.help}: {self.description}")
        p.add_argument("--model", default=DEFAULT_MODEL, help="model to load (default %(default)s)")
        p.add_argument("--out", default="artifacts/bench", help="output directory (default %(default)s)")
        for flag, kwargs in self.options.items():
            p.add_argument(flag, **kwargs)
        return p

    def defaults(self) -> dict[str, Any]:
        """flag -> its default in this benchmark."""
        return {flag: kwargs.get("default") for flag, kwargs in self.options.items()}

    def _module(self):
        return importlib.import_module(f"kvprobe.tools.bench.{self.module}")

    def run_function(self) -> Callable[[Any, Callable[[], Any]], dict]:
        """``command(args, load) -> result`` of the benchmark (its module imported now)."""
        return self._module().command

    def report_function(self) -> Callable[[dict], str]:
        """result -> markdown."""
        return getattr(self._module(), self.report)


def _bench(name: str, help: str, description: str, module: str, report: str,
           *options: tuple[str, dict[str, Any]]) -> Bench:
    return Bench(name, help, description, module, report, dict(options))


BENCHES: dict[str, Bench] = {b.name: b for b in [
    _bench("core", "nnsight masked decode step vs plain forward, batching, peak memory",
           "the nnsight masked decode step against a plain forward with the same 4-D mask, batched against "
           "one-at-a-time conditions, peak memory (core.json, core.md).", "core", "format_core_markdown",
           option("--steps", 40, type=at_least(1), help="interleaved decode steps to time (default %(default)s)")),
    _bench("operations", "every cache operation and the first answer token after it on long PG-19 histories",
           "the time of every cache operation and of the first answer token after it on PG-19 histories, record A "
           "at five positions (operations.json, operations.md, operations.png).", "operations", "format_markdown",
           option("--lengths", "512,1024,2048,4096,8192"),
           option("--fractions", "0.1,0.3,0.5,0.7,0.9",
                  help="where record A sits, as fractions of the history (default the paper's five positions, "
                  "10-90 %%)"),
           option("--warmups", help="untimed warm-up runs per cell and side (default 3, and 1 from 4096 tokens; a "
                  "given count holds for every length)"),
           option("--repeats", help="timed runs per cell, median reported (default 9, and 3 from 4096 tokens; a "
                  "given count holds for every length)"),
           option("--data")),
    _bench("extract", "extraction against a plain forward, store bytes per case",
           "extraction against a plain forward on the records dataset, and store bytes per case (extract.json, "
           "extract.md).", "extract", "format_extract_markdown",
           option("--cases", 120), option("--batch-size", 16)),
    _bench("scale", "a study (or an extraction) on 1 vs 2 Ray workers against the local backend",
           "a quantity study on 1 and 2 Ray workers against the local backend (scale.json, scale.md), or with "
           "--target extract an extraction (scale-extract.json); run nothing else meanwhile.", "scale",
           "format_scale_markdown",
           option("--target", "study", choices=["study", "extract"],
                  help="time a study (scale.json; default) or an extraction of --cases records cases with the "
                  "signed LOO in batches of --batch-size (scale-extract.json)"),
           option("--groups", 6, type=at_least(1),
                  help="quantity groups (2 cases each) run under every configuration (default %(default)s)"),
           option("--rounds", 2, type=at_least(1),
                  help="rounds over the four configurations, in alternating order (default %(default)s)"),
           option("--cases", 120, help="--target extract: first N cases of the records dataset (default "
                  "%(default)s)"),
           option("--batch-size", 16, help="--target extract: records per forward (default %(default)s)")),
    _bench("long", "kvprobe beside plain transformers on long PG-19 histories (resumable)",
           "kvprobe beside plain transformers (same weights, SDPA, the loop written by hand) on PG-19 histories of "
           "--lengths tokens: prefill tokens/s, the masked decode step of --rows rows, mask/rebuild/recompute/"
           "stored-prefix recompute plus the first answer token, peak memory of each piece, agreement checks "
           "(long.json, long.md, long.png). It is resumable: long.json is saved after every (length, measure) cell "
           "and a rerun with the same --out and settings runs only the missing cells.", "long", "format_long_markdown",
           option("--lengths", help="history lengths in tokens, comma-separated (default 1024,2048,4096,8192,16384, "
                  "keeping those within the model's context; a given length beyond max_position_embeddings is "
                  "refused)"),
           option("--warmups", 1, help="untimed warm-up runs per cell and side; for the decode cells, warm-up "
                  "steps (default %(default)s)"),
           option("--repeats", 3, help="timed runs per cell and side, interleaved with plain transformers, median "
                  "reported; the decode cells time --decode-steps steps instead (default %(default)s)"),
           option("--rows", "1,15", help="batch sizes of the masked decode step, comma-separated (default "
                  "%(default)s: one row and 15 access-only rows of one history)"),
           option("--measures", help="only these cells of each length, comma-separated, from prefill, decode-B "
                  "(one per --rows B), mask, rebuild, recompute, recompute-prefix (default: all); e.g. --measures "
                  "prefill for a 32k-token prefill alone"),
           option("--decode-steps", 8, type=at_least(1), help="interleaved single-token decode steps timed per "
                  "side and batch size, median reported (default %(default)s)"),
           option("--restart", False, action="store_true",
                  help="ignore an earlier long.json in --out and start afresh (by default finished cells are "
                  "reused, and a long.json written with another model, dtype, thread count, warm-ups, repeats or "
                  "decode steps is refused, naming the setting)"),
           option("--data")),
    _bench("internals", "run_with_cache and an empty trace beside score",
           "run_with_cache of every layer's hidden states and an empty trace beside score of the same "
           "five-condition batch (internals.json, internals.md).", "internals", "format_internals_markdown",
           option("--warmups", 2), option("--repeats", 9)),
    _bench("latency", "per question of the session-bias study: full access, soft bias and hard mask, phase by phase",
           "per question of the session-bias study, full access, the soft session-order bias and the hard mask "
           "answered one at a time, with tokenization, prefill, policy, query, decode, resident/cold time to first "
           "token and paired overheads (latency.json, latency.md).", "latency", "format_markdown",
           option("--source", "fixtures",
                  help="the session-bias questions: fixtures (seeded, LongMemEval schema; default), "
                  "hf:xiaowu0162/longmemeval, or the path of longmemeval_oracle.json or its folder"),
           option("--split", "all", choices=["development", "validation", "all"],
                  help="which questions of --source (default %(default)s)"),
           option("--questions", 40, type=at_least(1), help="time the first N questions (default %(default)s)"),
           option("--max-new-tokens", 128, type=at_least(1),
                  help="greedy answer budget per condition, EOS stop (default %(default)s, the paper's soft-bias "
                  "runs; its hard-mask comparison used 256)"),
           option("--max-history-tokens", type=at_least(1),
                  help="skip questions whose history is longer (default: no limit)"),
           option("--decode", "auto", choices=["auto", "ordinary"],
                  help="auto (default): each condition decodes as kvprobe would (on CUDA, full access and masks in "
                  "fixed shapes, a bias on the ordinary path); ordinary: every condition on the ordinary path"),
           option("--warmups", 1, help="untimed warm-up questions (default %(default)s)")),
    _bench("gpu", "kvprobe beside plain transformers on an accelerator",
           "kvprobe beside plain transformers on an accelerator: prefill, a decode of --rows rows, operations "
           "(gpu.json, gpu.md).", "gpu", "format_gpu_markdown",
           option("--lengths", "8192,32768"), option("--repeats", 3),
           option("--rows", 15, type=at_least(1), help="rows of the decode cell (default %(default)s)"),
           option("--decode-steps", 16, type=at_least(1),
                  help="greedy tokens each decode row generates (default %(default)s)")),
]}


def description() -> str:
    """``kvprobe bench --help``'s description."""
    return ("Benchmarks, each written as JSON and markdown under --out (default artifacts/bench). Each SUITE has its "
            "own options and defaults: `kvprobe bench SUITE --help`.")
