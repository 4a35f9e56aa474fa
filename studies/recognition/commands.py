"""``kvprobe extract`` and ``kvprobe readout``: the recognition datasets into a feature store, and its readouts.

``--dataset`` choices come from :data:`kvprobe.studies.datasets.recognition.DATASETS`. ``cli`` is :mod:`kvprobe.cli`.
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial

from kvprobe.model_registry import DEFAULT_MODEL
from kvprobe.parameters import at_least

from kvprobe.readouts.stats import DRAWS


def _nnsight_encoder(args: argparse.Namespace):
    """The plain-nnsight record encoder of ``--backend nnsight`` (this process) or ``ndif`` (NDIF's servers)."""
    from kvprobe.extract.remote import NnsightEncoder, language_model

    if args.backend == "ndif":
        import nnsight

        if not nnsight.CONFIG.API.APIKEY:
            raise SystemExit("kvprobe extract --backend ndif: set NDIF_API_KEY (an NDIF API key, "
                             "https://login.ndif.us) and use a model NDIF hosts")
        return NnsightEncoder(language_model(args.model), args.model, remote=True)
    from kvprobe.loading import load_weights

    w = load_weights(args.model, device=args.device)
    return NnsightEncoder(language_model(w.hf, w.tokenizer), w.name)


def _extract_inputs(args: argparse.Namespace) -> tuple[list, tuple[str, ...], dict, dict]:
    """The cases, token-level kinds, dataset info and case scores (the signed LOO unless --no-loo) of
    ``kvprobe extract``."""
    from kvprobe.extract import CaseScore
    from kvprobe.studies.datasets.recognition import DATASETS
    from .questions import signed_loo_scores

    generator, default_seed = DATASETS[args.dataset]
    seed = default_seed if args.seed is None else args.seed
    token_level = tuple(k for k in args.token_level.split(",") if k)
    # The LOO scores 8 cases per forward batch: chunks of 64 give the same values on any number of workers.
    scores = {} if args.no_loo else {"signed_loo": CaseScore(signed_loo_scores, chunk=64)}
    info = {"generator": f"kvprobe.studies.datasets.recognition.{generator.__name__}", "seed": seed}
    return generator(seed=seed), token_level, info, scores


def cmd_extract(args: argparse.Namespace, cli) -> int:
    from kvprobe.extract import StoreError, extract
    from kvprobe.extract.schema import check_writable

    try:  # bad input fails here, before a model loads
        check_writable(args.out)
        edits = _edits(args)
    except (StoreError, ValueError) as err:
        print(f"kvprobe extract: {err}", file=sys.stderr)
        return 2
    if edits:
        return _extract_edits(args, edits, cli)
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
        model, pool = cli.backend(args)
        try:
            path = extract(model, args.dataset, cases, args.out, batch_size=args.batch_size, dtype=args.dtype,
                           token_level=token_level, overwrite=args.overwrite, progress=not args.quiet,
                           dataset_info=info, case_scores=scores, pool=pool)
        finally:
            cli.close(pool)
    if not args.quiet:
        print(f"{path}: group {args.model}/{args.dataset}, {len(cases)} cases")
    return 0


def _edits(args: argparse.Namespace) -> list:
    """The ``--edit`` operations of ``kvprobe extract`` (ValueError naming a bad one), checked without a model."""
    from .edits import parse_edits

    if args.edit is None:
        return []
    if args.backend != "local":
        raise ValueError(f"--edit runs on a local model (--backend local), not --backend {args.backend}")
    if "H" in args.token_level.split(","):
        raise ValueError("--edit groups hold K and V only; drop H from --token-level")
    return parse_edits(args.edit)


def _extract_edits(args: argparse.Namespace, edits: list, cli) -> int:
    """``kvprobe extract --edit``: the original group (if missing) and one group per edit, groups already in
    the store kept unless --overwrite."""
    from pathlib import Path

    from kvprobe.extract import FeatureStore, RecordSpec, extract, model_key
    from kvprobe.extract.capture import encode_edited

    cases, token_level, info, loo = _extract_inputs(args)
    model = cli.load_args(args, args.quiet)
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


def cmd_readout(args: argparse.Namespace, cli) -> int:
    from pathlib import Path

    from kvprobe.extract import FeatureStore
    from kvprobe.readouts.evaluate import edit_transfer, evaluate_group, transfer
    from kvprobe.readouts.report import format_transfer, write_edit_report, write_group_report

    from kvprobe.files import atomic_write_text

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
    """The Items line of a readout report (``studies.datasets.recognition.DATASET_ITEMS``; None for another dataset)."""
    from kvprobe.studies.datasets.recognition import DATASET_ITEMS

    items = DATASET_ITEMS.get(dataset)
    return None if items is None else items.line()


def add_commands(sub, cli) -> None:
    """``kvprobe extract`` and ``kvprobe readout``."""
    from kvprobe.studies.datasets.recognition import DATASETS

    p = sub.add_parser("extract", help="capture per-layer K/V (as cached) and hidden states into an HDF5 store",
                       description="Encode every record of a recognition dataset (A alone, B alone, B after A) "
                       "and store per-layer K and V exactly as cached and every layer's hidden states (token "
                       "means over the record, plus token-level K) in group MODEL/DATASET of --out. Resumes an "
                       "interrupted extraction; the store is replaced atomically when the group is complete.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model to load (default {DEFAULT_MODEL})")
    p.add_argument("--dataset", choices=list(DATASETS), required=True,
                   help="records: 95 items x 6 variants (train/dev/test); role-pairs: 400 groups x 3 pairs")
    p.add_argument("--out", required=True, help="the HDF5 store to create or add the group to")
    p.add_argument("--seed", type=int, default=None, help="dataset seed (default: the dataset's own)")
    p.add_argument("--batch-size", type=at_least(1), default=16, help="records per forward (default 16)")
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
    cli.add_backend_arguments(p, nnsight=True)
    p.set_defaults(func=partial(cmd_extract, cli=cli))

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
    p.add_argument("--draws", type=at_least(1), default=DRAWS, help=f"bootstrap draws (default {DRAWS})")
    p.add_argument("--bootstrap-seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=partial(cmd_readout, cli=cli))
