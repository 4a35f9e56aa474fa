"""The benchmarks: one registry from which ``kvprobe bench`` is built.

Each :class:`Bench` names its module (loaded only when it runs: ``command(args, load)`` turns the parsed
options into its run and returns the result; ``load()`` loads ``--model`` with ``--device``/``--dtype``),
its report writer (result -> the markdown printed and written beside the JSON), the options it reads
and the sentence ``kvprobe bench --help`` gives it. Every benchmark times with
:mod:`kvprobe.tools.bench.measure` (one interleave/median helper, one peak-memory helper).

Adding a benchmark: its module under ``kvprobe/tools/bench/`` with ``command`` and a report function,
one :data:`BENCHES` line, any new option in :data:`OPTIONS`, and a section in docs/benchmarks.md.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from kvprobe.parameters import at_least

DEFAULT_MODEL = "smollm2-135m-instruct"


#: Options of ``kvprobe bench`` (argparse keyword arguments); each :class:`Bench` lists those it reads.
OPTIONS: dict[str, dict[str, Any]] = {
    "--model": dict(default=DEFAULT_MODEL, help=f"model to load (default {DEFAULT_MODEL})"),
    "--steps": dict(type=at_least(1), default=40, help="interleaved decode steps to time (default 40)"),
    "--out": dict(default="artifacts/bench", help="output directory (default artifacts/bench)"),
    "--lengths": dict(default=None, help="operations, long: history lengths in tokens, comma-separated (operations "
                      "default 512,1024,2048,4096,8192; long default 1024,2048,4096,8192,16384, keeping those within "
                      "the model's context; a given length beyond max_position_embeddings is refused)"),
    "--fractions": dict(default="0.1,0.3,0.5,0.7,0.9",
                        help="operations: where record A sits, as fractions of the history (default the paper's five "
                        "positions, 10-90 %%)"),
    "--warmups": dict(type=at_least(0), default=None,
                      help="operations, long, internals, latency: untimed warm-up runs per cell and side (default 3 "
                      "for operations, 1 for long, 2 for internals; for long's decode cells, warm-up steps; for "
                      "latency, warm-up questions, default 1)"),
    "--repeats": dict(type=at_least(1), default=None,
                      help="operations, long, internals: timed runs per cell, median reported (operations default 9, "
                      "1+3 from 4096 tokens unless --warmups/--repeats are given, which then hold for every length; long default 3 per side, interleaved with plain transformers; long's "
                      "decode cells time --decode-steps steps instead; internals default 9 per side)"),
    "--rows": dict(default=None, help="long: batch sizes of the masked decode step, comma-separated (default 1,15: "
                   "one row and 15 access-only rows of one history); gpu: the rows of the decode cell (default 15)"),
    "--measures": dict(default=None, help="long: only these cells of each length, comma-separated, from prefill, "
                       "decode-B (one per --rows B), mask, rebuild, recompute, recompute-prefix (default: all); e.g. "
                       "--measures prefill for a 32k-token prefill alone"),
    "--decode-steps": dict(type=at_least(1), default=None,
                           help="long: interleaved single-token decode steps timed per side and batch size, median "
                           "reported (default 8); gpu: greedy tokens each decode row generates (default 16)"),
    "--restart": dict(action="store_true", help="long: ignore an earlier long.json in --out and start afresh (by "
                      "default finished cells are reused, and a long.json written with another model, dtype, thread "
                      "count, warm-ups, repeats or decode steps is refused, naming the setting)"),
    "--data": dict(default=None, help="operations, long: a data directory holding pg19/ (default: where `kvprobe "
                   "data` finds the pg19 data set)"),
    "--cases": dict(type=at_least(1), default=120,
                    help="extract: first N cases of the records dataset (default 120: 20 items, ~260 records)"),
    "--batch-size": dict(type=at_least(1), default=16, help="extract: records per forward (default 16)"),
    "--groups": dict(type=at_least(1), default=6,
                     help="scale: quantity groups (2 cases each) run under every configuration (default 6)"),
    "--rounds": dict(type=at_least(1), default=2,
                     help="scale: rounds over the four configurations, in alternating order (default 2)"),
    "--target": dict(choices=["study", "extract"], default="study",
                     help="scale: time a study (scale.json; default) or an extraction of --cases records cases with "
                     "the signed LOO in batches of --batch-size (scale-extract.json)"),
    "--source": dict(default="fixtures",
                     help="latency: the session-bias questions: fixtures (seeded, LongMemEval schema; default), "
                     "hf:xiaowu0162/longmemeval, or the path of longmemeval_oracle.json or its folder"),
    "--split": dict(choices=["development", "validation", "all"], default="all",
                    help="latency: which questions of --source (default all)"),
    "--questions": dict(type=at_least(1), default=40, help="latency: time the first N questions (default 40)"),
    "--max-new-tokens": dict(type=at_least(1), default=128,
                             help="latency: greedy answer budget per arm, EOS stop (default 128, the paper's soft-bias "
                             "runs; its hard-mask comparison used 256)"),
    "--max-history-tokens": dict(type=at_least(1), default=None,
                                 help="latency: skip questions whose history is longer (default: no limit)"),
    "--decode": dict(choices=["auto", "ordinary"], default="auto",
                     help="latency: auto (default): each arm decodes as kvprobe would (on CUDA, full access and "
                     "masks in fixed shapes, a bias on the ordinary path); ordinary: every arm on the ordinary path"),
}
#: Options every benchmark reads (besides ``--device``/``--dtype``, which the CLI adds).
COMMON = ("--model", "--out")


@dataclass(frozen=True)
class Bench:
    """One benchmark of ``kvprobe bench NAME``."""

    name: str
    #: Its sentence(s) in ``kvprobe bench --help``.
    description: str
    #: Module under ``kvprobe.tools.bench`` holding ``command(args, load)``.
    module: str
    #: Function of that module: result -> markdown (the report printed and written beside the JSON).
    report: str
    #: Options it reads besides :data:`COMMON`.
    options: tuple[str, ...] = field(default=())

    def _module(self):
        return importlib.import_module(f"kvprobe.tools.bench.{self.module}")

    def run_function(self) -> Callable[[Any, Callable[[], Any]], dict]:
        """``command(args, load) -> result`` of the benchmark (its module imported now)."""
        return self._module().command

    def report_function(self) -> Callable[[dict], str]:
        """result -> markdown."""
        return getattr(self._module(), self.report)


BENCHES: dict[str, Bench] = {b.name: b for b in [
    Bench("core", "`kvprobe bench core`: nnsight masked decode step vs plain forward with the same 4-D mask, batched "
          "vs one-at-a-time conditions, peak memory.", "core", "format_core_markdown", ("--steps",)),
    Bench("operations", "`kvprobe bench operations`: time of every cache operation and of the first answer token "
          "after it on long PG-19 histories.", "operations", "format_markdown",
          ("--lengths", "--fractions", "--warmups", "--repeats", "--data")),
    Bench("extract", "`kvprobe bench extract`: extraction against a plain forward on the records dataset, and "
          "store bytes per case (extract.json, extract.md).", "extract", "format_extract_markdown",
          ("--cases", "--batch-size")),
    Bench("scale", "`kvprobe bench scale`: a quantity study on 1 vs 2 Ray workers against the local backend "
          "(scale.json, scale.md); run nothing else meanwhile.", "scale", "format_scale_markdown",
          ("--cases", "--batch-size", "--groups", "--rounds", "--target")),
    Bench("long", "`kvprobe bench long`: kvprobe beside plain transformers (same weights, SDPA, the loop written by "
          "hand) on PG-19 histories of --lengths tokens: prefill tokens/s, the masked decode step of --rows rows, "
          "mask/rebuild/recompute/stored-prefix recompute plus the first answer token, peak memory of each piece, "
          "agreement checks (long.json, long.md, long.png). It is resumable: long.json is saved after every "
          "(length, measure) cell and a rerun with the same --out and settings runs only the missing cells.",
          "long", "format_long_markdown",
          ("--lengths", "--warmups", "--repeats", "--rows", "--measures", "--decode-steps", "--restart", "--data")),
    Bench("internals", "`kvprobe bench internals`: run_with_cache of every layer's hidden states and an empty "
          "trace beside score of the same five-condition batch (internals.json, internals.md).", "internals",
          "format_internals_markdown", ("--warmups", "--repeats")),
    Bench("latency", "`kvprobe bench latency`: per question of the session-bias study, full access, the soft "
          "session-order bias and the hard mask answered one at a time, with tokenization, prefill, policy, query, "
          "decode, resident/cold time to first token and paired overheads (latency.json, latency.md).", "latency",
          "format_markdown", ("--source", "--split", "--questions", "--max-new-tokens", "--max-history-tokens",
                              "--decode", "--warmups")),
    Bench("gpu", "`kvprobe bench gpu`: kvprobe beside plain transformers on an accelerator (prefill, a decode of "
          "--rows rows, operations; gpu.json, gpu.md).", "gpu", "format_gpu_markdown",
          ("--lengths", "--repeats", "--rows", "--decode-steps")),
]}


def description() -> str:
    """``kvprobe bench --help``'s description: every benchmark's sentence."""
    return " ".join(b.description for b in BENCHES.values())


def options() -> dict[str, dict[str, Any]]:
    """Every option some benchmark reads, in :data:`OPTIONS` order."""
    used = {o for b in BENCHES.values() for o in (*COMMON, *b.options)}
    return {flag: kwargs for flag, kwargs in OPTIONS.items() if flag in used}
