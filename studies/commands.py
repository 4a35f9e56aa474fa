"""The study commands: ``kvprobe run``, ``report``, ``demo``, ``map``, ``calibrate``, ``babi-verify`` and those of
the command studies (``extract``, ``readout``).

``kvprobe run STUDY`` and ``kvprobe report STUDY`` are built from the study registry
(:data:`kvprobe.studies.registry.STUDIES`: one sub-command per study, its parameters from the study's
fields, its extra options from the entry); a command study of the registry
(:data:`kvprobe.studies.registry.COMMAND_STUDIES`) adds its own. ``cli`` is :mod:`kvprobe.cli` (model loading,
Ray backend).
"""

from __future__ import annotations

import argparse
import json
import sys
from functools import partial

from kvprobe.model_registry import DEFAULT_MODEL
from kvprobe.parameters import at_least
from typing import Any, Iterable, Sequence

from kvprobe.readouts.stats import PAPER_SEED


def cmd_demo(args: argparse.Namespace, cli) -> int:
    # The demo is a study; kvprobe's core never imports studies except here, on demand.
    from kvprobe.studies.quantity.demo import format_table, run_demo

    model = cli.load_args(args, args.json)
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


def cmd_map(args: argparse.Namespace, cli) -> int:
    # The map's input files and report are study-layer code; the core never imports studies except here.
    from kvprobe.studies.fact_map.command import example_input, load_input, run_map, write_outputs

    item = load_input(args.input) if args.input else example_input(unit_from_a=not args.unit_stated)
    if args.out:
        cli.check_out_dir(args.out)
    model = cli.load_args(args, args.json)
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


def study_from_args(entry, args: argparse.Namespace):
    """The study built from the options given (the others keep the study's defaults); a bad value
    is refused here, naming its option, before any model loads."""
    from kvprobe.studies.common.protocol import InvalidParameter

    from kvprobe.parameters import flag, given_fields

    cls = entry.study_class()
    try:
        return cls(**given_fields(cls, args))
    except InvalidParameter as exc:
        raise ValueError(f"{flag(exc.field_name)}: {str(exc).split(': ', 1)[1]}") from None


def _given_options(entry, args: argparse.Namespace, to: str) -> dict:
    """The registry options of ``entry`` bound for ``to`` (``"run"`` or ``"summary"``) that were given."""
    return {o.name: getattr(args, o.name) for o in entry.command_options
            if o.to == to and getattr(args, o.name, None) not in (None, False)}


def cmd_run(args: argparse.Namespace, cli) -> int:
    from kvprobe.studies.registry import entry as study_entry
    from kvprobe.studies.common.runner import run_study
    from kvprobe.studies.common.summary import write_summary

    from kvprobe.parameters import flag

    entry = study_entry(args.study)
    study = study_from_args(entry, args)
    run_options, summary_options = _given_options(entry, args, "run"), _given_options(entry, args, "summary")
    if args.backend == "ray" and (entry.local_only or run_options):
        why = entry.local_only or f"{flag(next(iter(run_options)))} runs on the driver after the run"
        print(f"kvprobe run {args.study}: --backend ray is not supported ({why}); use --backend local",
              file=sys.stderr)
        return 2
    if args.out:
        cli.check_out_dir(args.out)
    study.cases()  # read the study's data now: a missing or bad data set fails before the model loads
    runner = entry.run_function()
    model, pool = cli.backend(args)
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
        cli.close(pool)
    write_summary(entry, out, seed=bootstrap_seed(entry, args), **summary_options)
    if not args.quiet:
        print(f"{info.cases_run} cases run, {info.cases_skipped} already done; results in {out}/ "
              "(config.json, results.jsonl, summary.json, report.md)")
    return 0


def cmd_calibrate(args: argparse.Namespace, cli) -> int:
    from kvprobe.studies.detection.action import write_action_report
    from kvprobe.studies.common.runner import results_file

    for run_dir in (args.detection, args.dev, args.test):
        results_file(run_dir)  # a clear error before anything is written
    write_action_report(args.out, args.detection, args.dev, args.test, seed=args.bootstrap_seed)
    if not args.quiet:
        print(f"calibration and coverage written to {args.out}/ (action.json, action.md, coverage-*.png)")
    return 0


def bootstrap_seed(entry, args: argparse.Namespace) -> int:
    """``--bootstrap-seed``, or the study's default (``Entry.seed``)."""
    return entry.seed if args.bootstrap_seed is None else args.bootstrap_seed


def cmd_report(args: argparse.Namespace, cli) -> int:
    if args.study == "scorecard":
        return _scorecard(args)
    if args.study == "cross-benchmark":
        return _cross_benchmark(args)
    if args.study == "judge-audit":
        return _judge_audit(args, cli)
    from kvprobe.studies.registry import entry as study_entry
    from kvprobe.studies.common.runner import results_file
    from kvprobe.studies.common.summary import write_summary

    if not args.runs:
        raise ValueError(f"give the output directory of at least one `kvprobe run {args.study}`")
    entry = study_entry(args.study)
    for run_dir in args.runs:
        results_file(run_dir)  # a clear error before anything is written
    summary_options = _given_options(entry, args, "summary")
    if len(args.runs) > 1 and entry.compare is not None:
        if not args.out:
            raise ValueError(f"several {args.study} runs: give --out DIR for the comparison")
        table = entry.compare_function()(args.runs, args.out, seed=bootstrap_seed(entry, args))
        if not args.quiet:
            print(table)
        return 0
    for run_dir in args.runs:
        write_summary(entry, run_dir, seed=bootstrap_seed(entry, args), **summary_options)
        if not args.quiet:
            print(f"rewrote summary.json and report.md in {run_dir}/")
    return 0


def _scorecard(args: argparse.Namespace) -> int:
    """``kvprobe report scorecard [ARTIFACTS] [--out FILE]``: every paper claim a committed run tests, with its
    verdict (``studies/scorecard.py``), written to FILE (default docs/scorecard.md) and FILE's ``.json``."""
    from kvprobe.studies.common.claims import VERDICTS
    from kvprobe.studies.scorecard import write_scorecard

    if len(args.runs) > 1:
        raise ValueError("scorecard takes one artifacts folder (default artifacts)")
    out = args.out or "docs/scorecard.md"
    rows = write_scorecard(args.runs[0] if args.runs else "artifacts", out)
    if not args.quiet:
        counts = ", ".join(f"{sum(r.verdict == v for r in rows)} {v}" for v in VERDICTS)
        print(f"wrote {out} and {out.rsplit('.', 1)[0]}.json: {len(rows)} rows ({counts})")
    return 0


#: ``kvprobe report cross-benchmark`` with no runs: the committed runs of the three benchmarks.
CROSS_BENCHMARK_RUNS = ("artifacts/minteval/smollm2-135m-instruct", "artifacts/mquake/smollm2-135m-instruct",
                        "artifacts/babilong/smollm2-135m-instruct", "artifacts/babilong/smollm2-135m-instruct-8k")


def _cross_benchmark(args: argparse.Namespace) -> int:
    """``kvprobe report cross-benchmark [RUN ...] [--out DIR]``: current and historical answers under
    whole-source masking across MINTEval, MQuAKE and BABILong runs, from their committed summaries
    (``studies/cross_benchmark.py``), written to DIR (default artifacts/cross-benchmark)."""
    from kvprobe.studies.cross_benchmark import write_cross_benchmark

    out = args.out or "artifacts/cross-benchmark"
    found = write_cross_benchmark(list(args.runs or CROSS_BENCHMARK_RUNS), out)
    if not args.quiet:
        print(f"wrote {out}/report.md, figure.png and cross-benchmark.json: {len(found)} rows")
    return 0


def _judge_audit(args: argparse.Namespace, cli) -> int:
    """``kvprobe report judge-audit MODEL TASK [--judge-dtype D] [--out DIR]``: a local judge model scored on the
    task's hand-labelled answers (``studies/common/judge_audit.py``; MODEL ``rule``: the study's rule grader),
    written to DIR/TASK/ (default artifacts/judge-audit). Unknown tasks, models and dtypes are refused before any
    model loads."""
    from kvprobe.studies.common import judge_audit
    from kvprobe.studies.registry import judge_audits

    audits = judge_audits()
    if len(args.runs) != 2:
        raise ValueError(f"judge-audit takes a judge MODEL and a TASK ({', '.join(audits)}), got {len(args.runs)} "
                         "arguments")
    model, task = args.runs
    if task not in audits:
        hint = " (the MODEL comes first)" if model in audits else ""
        raise ValueError(f"unknown task {task!r}{hint}; tasks with a judge audit: {', '.join(audits)}")
    if model == "rule":  # the study's rule grader, the baseline beside its judges
        result = judge_audit.audit_rule(audits[task].audit_task())
    else:
        if args.judge_dtype is not None and args.judge_dtype not in cli.MODEL_DTYPES:
            raise ValueError(f"--judge-dtype {args.judge_dtype!r}: choose one of {', '.join(cli.MODEL_DTYPES)}")
        judge_audit.check_model(model)
        result = judge_audit.audit_model(audits[task].audit_task(), model, args.judge_dtype, progress=not args.quiet)
    path, md = judge_audit.write_audit(result, args.out or judge_audit.AUDIT_DIR)
    if not args.quiet:
        print(f"{result.judge} on {task}: agreement {result.agree}/{result.n}, planted wrongs accepted "
              f"{len(result.planted_accepted)}/{result.planted}: {'passes' if result.passed else 'fails'} "
              f"({judge_audit.PASS_RULE}); wrote {path} and {md}")
    return 0


def cmd_babi_verify(args: argparse.Namespace, cli) -> int:
    from kvprobe.studies.babilong.dependencies import check_files

    return check_files(args.paths, args.rule, args.show)


#: Options every study's ``kvprobe run STUDY`` has besides its parameters (a study field may not reuse them).
COMMON_RUN_OPTIONS = {"--model", "--out", "--quiet", "--attn", "--bootstrap-seed", "--backend", "--address",
                      "--workers", "--threads-per-worker", "--gpus-per-worker", "--device", "--help"}


def _add_run_parser(sub, argv: Sequence[str] | None, cli) -> None:
    """``kvprobe run``: one sub-command per registered study. Only the study named in ``argv`` gets its
    parameter options (importing every study to build the parser would make each command slow)."""
    from kvprobe.studies.registry import STUDIES

    from kvprobe.parameters import add_field_options, flag

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
        for option in entry.command_options:
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
        cli.add_backend_arguments(p)
        p.set_defaults(func=partial(cmd_run, cli=cli))


def _run_target(argv: Sequence[str] | None) -> str | None:
    """The study of a ``kvprobe run STUDY ...`` command line (None for any other command)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "run" not in args:
        return None
    rest = args[args.index("run") + 1:]
    return rest[0] if rest and not rest[0].startswith("-") else None


def _summary_option_helps(entries: Iterable[Any]) -> dict[str, dict[str, list[str]]]:
    """Each summary option of ``entries`` (``Entry.command_options``), its help texts and the studies giving each
    (studies that share an option name may say different things about it, e.g. ``grades``)."""
    helps: dict[str, dict[str, list[str]]] = {}
    for e in entries:
        for o in e.command_options:
            if o.to == "summary":
                helps.setdefault(o.name, {}).setdefault(o.help, []).append(e.name)
    return helps


def add_report(sub, cli) -> None:
    """``kvprobe report STUDY|scorecard``: the summary options of every registered study."""
    from kvprobe.studies.registry import REPORT_SEED, STUDIES

    from kvprobe.parameters import flag

    p = sub.add_parser("report", help="rewrite a run's report, compare runs of several models, or write the "
                       "scorecard",
                       description="With one run directory: recompute summary.json, report.md (and figures) "
                       "from its results.jsonl. Quantity with several (one model each): fit the warning threshold "
                       "tau on all models but one and test it on that one, for each model in turn (thresholds.json, "
                       "thresholds.md), and put the models side by side (panel.md, panel.json: complete-answer rates "
                       "with exact intervals, the source mask against its control, margin changes, failure "
                       "diagnostics, units, capped outputs; preservation.png, preservation-lenient.png, margins.png), "
                       "all under --out. `kvprobe report scorecard [ARTIFACTS]`: "
                       "read the committed runs under ARTIFACTS (default artifacts) and write the scorecard of the "
                       "paper's claims, one row per claim, run and rule with a verdict computed by one stated rule, "
                       "to --out (default docs/scorecard.md) and the JSON beside it. `kvprobe report cross-benchmark [RUN ...]`: "
                       "read the committed summary.json of MINTEval, MQuAKE and BABILong runs (default: the "
                       "committed smollm2 runs) and write the current- and historical-answer rates under full "
                       "access and whole-source masking, with intervals, n and the paper's numbers, as report.md, "
                       "figure.png and cross-benchmark.json under --out (default artifacts/cross-benchmark). "
                   "`kvprobe report judge-audit MODEL TASK [--judge-dtype D]`: grade the hand-labelled answers of "
                   "TASK's audit set (a study with a model judge) with the local judge MODEL and the study's own "
                   "prompt and label rule, and write its agreement with the hand labels, the planted wrong answers "
                   "it accepts and whether it passes the bar to --out/TASK/ (default artifacts/judge-audit); MODEL "
                   "`rule`: the study's rule grader, scored the same way.")
    p.add_argument("study", choices=[*STUDIES, "scorecard", "cross-benchmark", "judge-audit"],
                   help="which study, or scorecard, or cross-benchmark, or judge-audit")
    p.add_argument("runs", nargs="*", help="output directories of `kvprobe run` (several: quantity thresholds and panel, "
                   "or each rewritten for the other studies); scorecard: the artifacts folder (default artifacts); "
                   "cross-benchmark: MINTEval, MQuAKE and BABILong run directories holding config.json and "
                   "summary.json (default: the committed smollm2 runs); judge-audit: MODEL TASK")
    for name, helps in _summary_option_helps(STUDIES.values()).items():
        p.add_argument(flag(name), dest=name, default=None,
                       help="; ".join(f"{', '.join(studies)}: {text}" for text, studies in helps.items()))
    p.add_argument("--out", default=None, help="where to write the comparison of several runs (quantity: "
                   "thresholds.{json,md}, panel.{md,json} and the panel's figures); scorecard: the markdown file "
                   "(default docs/scorecard.md), the JSON "
                   "beside it; cross-benchmark: the folder for report.md, figure.png and cross-benchmark.json "
                   "(default artifacts/cross-benchmark); judge-audit: the folder of the task folders (default "
                   "artifacts/judge-audit)")
    p.add_argument("--bootstrap-seed", type=int, default=None,
                   help=f"seed of the bootstrap intervals (default: the study's, {REPORT_SEED}; "
                   f"{', '.join(f'{e.name} {e.seed}' for e in STUDIES.values() if e.seed != REPORT_SEED)}); "
                   "scorecard and cross-benchmark read the intervals the committed summaries hold")
    p.add_argument("--quiet", action="store_true", help="print nothing on success")
    p.set_defaults(func=partial(cmd_report, cli=cli))


def add_commands(sub, cli, argv: Sequence[str] | None) -> None:
    """``kvprobe demo``, ``map``, ``run`` (one sub-command per registered study), ``calibrate``, then the
    commands of each command study (:data:`kvprobe.studies.registry.COMMAND_STUDIES`: ``extract``, ``readout``)."""
    from kvprobe.studies.registry import COMMAND_STUDIES

    p = sub.add_parser("demo", help="the quantity example under five access conditions",
                       description="Prefill the paper's quantity example once; score the new vs old answer "
                       "and generate greedily under full access, whole-source mask, its control, "
                       "number-only mask and its control.")
    p.add_argument("--model", default=DEFAULT_MODEL, help=f"model to load (default {DEFAULT_MODEL})")
    p.add_argument("--max-new-tokens", type=at_least(1), default=40, help="generation budget per answer (default 40)")
    p.add_argument("--unit-stated", action="store_true",
                   help="use the B record that states the unit (default: B refers to A for its unit)")
    p.add_argument("--conditions", default="",
                   help="extra conditions by name, comma-separated, on segments A, inspection, note, B "
                   "(e.g. compact:A,rebuild:A,recompute:A,zero-k:A); see `kvprobe conditions`")
    p.add_argument("--json", action="store_true", help="print rows as JSON instead of a table")
    cli.add_placement_arguments(p)
    p.set_defaults(func=partial(cmd_demo, cli=cli))

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
    p.add_argument("--bands", type=at_least(1), default=4,
                   help="contiguous layer bands of the heatmap (default 4)")
    p.add_argument("--out", help="also write map.json, map.md and map.png (the heatmap) to this directory")
    p.add_argument("--json", action="store_true", help="print the map as JSON instead of a table")
    cli.add_placement_arguments(p)
    p.set_defaults(func=partial(cmd_map, cli=cli))

    _add_run_parser(sub, argv, cli)

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
    p.set_defaults(func=partial(cmd_calibrate, cli=cli))

    for study in COMMAND_STUDIES.values():
        study.add_commands(sub, cli)


def add_babi_verify(sub, cli) -> None:
    """``kvprobe babi-verify``: a BABILong masking rule checked on bAbI-format stories."""
    p = sub.add_parser("babi-verify", help="verify a BABILong masking rule on bAbI-format stories (no model)",
                       description="Simulate every story of each bAbI-format file (qa2/qa3 style: movements, "
                       "pickups, drops) with all facts and with only the facts a masking rule keeps; report whether "
                       "object trajectories, event locations, final ownership and every question's answer are "
                       "preserved. Exit status 1 if any story fails.")
    p.add_argument("paths", nargs="+", help="bAbI-format files, e.g. the qa3 test file of the babi data set (kvprobe data path babi)")
    p.add_argument("--rule", choices=["dependency", "naive"], default="dependency",
                   help="dependency (default): keep each person's last movement plus the movements that place "
                   "pickups and drops and carry objects; naive: keep only each person's last movement")
    p.add_argument("--show", type=at_least(0), default=3, help="mismatches to print per file (default 3)")
    p.set_defaults(func=partial(cmd_babi_verify, cli=cli))
