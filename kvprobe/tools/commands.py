"""``kvprobe verify``, ``kvprobe matrix`` and ``kvprobe bench``: their options and what they run.

Only the parsers are defined at import (the CLI builds them for every command); the verifier and the
benchmarks load when their command runs. ``cli`` is :mod:`kvprobe.cli` (model loading and placement).
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial

from kvprobe.model_registry import DEFAULT_MODEL


def cmd_verify(args: argparse.Namespace, cli) -> int:
    from kvprobe.tools.verify import results_as_dicts, verify_model

    model = cli.load_args(args, args.json)
    results = verify_model(model)
    if args.json:
        print(json.dumps(results_as_dicts(results), indent=2))
    else:
        print(f"{model.name}: {model.arch.describe()}")
        for r in results:
            status = "PASS" if r.passed else "FAIL"
            if r.refused:
                print(f"  {status}  {r.check:<42} refuses, as expected: {r.refused}")
            else:
                print(f"  {status}  {r.check:<42} value {r.value:.3g}  (tolerance {r.tolerance:.3g})")
    return 0 if all(r.passed for r in results) else 1


def cmd_matrix(args: argparse.Namespace, cli) -> int:
    from pathlib import Path

    from kvprobe.tools.verify.matrix import run_matrix, write_matrix
    from kvprobe.tiny import TINY_MODELS

    names = args.models or list(TINY_MODELS)
    models = (cli.load_args(args, args.quiet, name) for name in names)
    matrix = run_matrix(models)
    table = write_matrix(matrix, Path(args.out), Path(args.readme) if args.readme else None)
    if not args.quiet:
        print(table)
    failed = [f"{name}: {r.check}" for name, e in matrix.items() for r in e["results"] if not r.passed]
    for line in failed:
        print(f"FAIL {line}", file=sys.stderr)
    return 1 if failed else 0


def cmd_bench(args: argparse.Namespace, cli) -> int:
    """``kvprobe bench SUITE``: the registry's benchmark (``kvprobe.tools.bench``, loaded now)."""
    from kvprobe.tools.bench.registry import BENCHES

    bench = BENCHES[args.suite]
    result = bench.run_function()(args, lambda: cli.load_args(args, False))
    print(bench.report_function()(result))
    return 0


def add_verify_commands(sub, cli) -> None:
    """``kvprobe verify`` and ``kvprobe matrix``."""
    p = sub.add_parser("verify", help="check that masked access computes what it claims on a model",
                       description="Run equivalence checks (a)-(g) of the traced mask path and one or two "
                       "checks per cache operation against plain transformers forwards (operations the "
                       "architecture cannot support must refuse); exit status 1 if any check fails.")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help="registry name, tiny-* test model, Hub id, local directory or .gguf file "
                   f"(default {DEFAULT_MODEL})")
    p.add_argument("--json", action="store_true",
                   help='print a JSON list of {"check", "model", "passed", "value", "tolerance", "operation", '
                   '"refused"} ("refused": the expected refusal message of an operation this model cannot support)')
    cli.add_placement_arguments(p)
    p.set_defaults(func=partial(cmd_verify, cli=cli))

    p = sub.add_parser("matrix", help="verify many models and write the family x operation table",
                       description="Run `kvprobe verify` on each model and write matrix.json (every check value) "
                       "and matrix.md (one row per model, one column per operation: pass, refuses [reason], "
                       "FAIL) under --out; exit status 1 if any check fails.")
    p.add_argument("--models", nargs="*", default=None,
                   help="models to verify (default: every tiny-* test model, one per architecture family)")
    p.add_argument("--out", default="artifacts/matrix", help="output directory (default artifacts/matrix)")
    p.add_argument("--readme", default=None,
                   help="also replace the generated matrix block of this markdown file (e.g. docs/architectures.md)")
    p.add_argument("--quiet", action="store_true", help="print nothing but failures")
    cli.add_placement_arguments(p)
    p.set_defaults(func=partial(cmd_matrix, cli=cli))


def add_bench_command(sub, cli) -> None:
    """``kvprobe bench SUITE``: one sub-command per registered benchmark, each with its own options and defaults."""
    from kvprobe.tools.bench import registry as benches

    p = sub.add_parser("bench", help="benchmarks (writes JSON and markdown under artifacts/bench)",
                       description=benches.description())
    suites = p.add_subparsers(dest="suite", required=True, metavar="SUITE")
    for bench in benches.BENCHES.values():
        q = bench.add_parser(suites)
        cli.add_placement_arguments(q)
        q.set_defaults(func=partial(cmd_bench, cli=cli))
