"""``kvprobe bench SUITE``: one sub-command per registered benchmark, each with its own options and defaults,
the same defaults as the benchmark's Python function, and committed reports the same tool writes again.

Nothing here loads a model: the parsers are built from the registry, and the reports are formatted from the
committed JSON.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from kvprobe.cli import build_parser
from kvprobe.tools.bench.registry import BENCHES, parse_counts

ROOT = Path(__file__).resolve().parents[1]
BENCH_ARTIFACTS = ROOT / "artifacts" / "bench"


def _parse(*words: str):
    return build_parser(["bench", *words]).parse_args(["bench", *words])


def test_every_benchmark_is_a_sub_command_with_its_own_defaults():
    assert _parse("long").suite == "long"
    long, gpu = _parse("long"), _parse("gpu")
    assert (long.rows, long.decode_steps, long.warmups, long.repeats) == ("1,15", 8, 1, 3)
    assert (gpu.rows, gpu.decode_steps, gpu.repeats, gpu.lengths) == (15, 16, 3, "8192,32768")
    internals = _parse("internals")
    assert (internals.warmups, internals.repeats) == (2, 9)
    assert _parse("operations", "--warmups", "0").warmups == 0 and _parse("operations").warmups is None
    for name in BENCHES:
        args = _parse(name)
        assert (args.model, args.out, args.device, args.model_dtype) == (
            "smollm2-135m-instruct", "artifacts/bench", "cpu", "float32"), name


@pytest.mark.parametrize("words", [("gpu", "--measures", "prefill"), ("core", "--lengths", "512"), ()])
def test_an_option_of_another_benchmark_or_no_suite_is_refused(words, capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(*words)
    assert exc.value.code == 2
    capsys.readouterr()


def test_each_suite_help_lists_its_own_options(capsys):
    with pytest.raises(SystemExit):
        _parse("gpu", "--help")
    text = capsys.readouterr().out
    assert "--decode-steps" in text and "(default 16)" in text and "--measures" not in text
    with pytest.raises(SystemExit):
        _parse("--help")
    text = capsys.readouterr().out
    assert all(name in text for name in BENCHES)


#: Each benchmark's run function and the parameters its command passes options to (option -> parameter).
PYTHON_API = {
    "core": ("core", "run_core_bench", {"--steps": "steps"}),
    "extract": ("extract", "run_extract_bench", {"--batch-size": "batch_size"}),
    "scale": ("scale", "run_scale_bench", {"--groups": "groups", "--rounds": "rounds"}),
    "internals": ("internals", "run_internals_bench", {"--warmups": "warmups", "--repeats": "repeats"}),
    "latency": ("latency", "run_latency_bench", {"--questions": "questions", "--max-new-tokens": "max_new_tokens",
                                                 "--warmups": "warmups", "--decode": "decode"}),
    "long": ("long", "run_long_bench", {"--rows": "rows", "--warmups": "warmups", "--repeats": "repeats",
                                        "--decode-steps": "decode_steps", "--lengths": "lengths"}),
    "gpu": ("gpu", "run_gpu_bench", {"--lengths": "lengths", "--rows": "rows", "--decode-steps": "new_tokens",
                                     "--repeats": "repeats"}),
    "operations": ("operations", "run_operations_bench", {"--lengths": "lengths", "--fractions": "fractions"}),
}


def _as_python(flag: str, value):
    """An option's default as its Python function takes it (comma lists as tuples)."""
    if flag == "--fractions":
        return tuple(float(x) for x in value.split(","))
    if isinstance(value, str) and flag in ("--lengths", "--rows"):
        return parse_counts(value, flag)
    return value


@pytest.mark.parametrize("name", sorted(PYTHON_API))
def test_command_line_defaults_are_the_python_defaults(name):
    """One default per setting: ``kvprobe bench NAME`` with no options runs what the Python function runs."""
    import importlib

    module, function, params = PYTHON_API[name]
    signature = inspect.signature(getattr(importlib.import_module(f"kvprobe.tools.bench.{module}"), function))
    defaults = BENCHES[name].defaults()
    for flag, param in params.items():
        assert _as_python(flag, defaults[flag]) == signature.parameters[param].default, (name, flag)
    assert set(PYTHON_API) == set(BENCHES)


def _committed_reports() -> list[tuple[str, Path]]:
    """(benchmark, committed JSON) for every JSON under artifacts/bench named after its benchmark
    (``long.json``, ``scale-extract.json``) with its markdown report beside it."""
    found = []
    for path in sorted(BENCH_ARTIFACTS.rglob("*.json")):
        name = path.stem.split("-")[0]
        if name in BENCHES and path.with_suffix(".md").is_file():
            found.append((name, path))
    return found


@pytest.mark.parametrize("name, path", _committed_reports(),
                         ids=[str(p.relative_to(BENCH_ARTIFACTS)) for _, p in _committed_reports()])
def test_committed_reports_are_what_the_tool_writes(name, path):
    """Every committed benchmark report is its report function applied to the committed JSON, byte for byte."""
    report = BENCHES[name].report_function()(json.loads(path.read_text()))
    assert report == path.with_suffix(".md").read_text()


def test_the_committed_reports_are_all_found():
    names = {name for name, _ in _committed_reports()}
    assert names >= {"core", "operations", "extract", "scale", "long", "internals", "latency", "gpu"}


def test_bench_long_has_a_plain_version_of_every_operation_it_times():
    """A registered condition that names ``long`` among its benchmarks needs its plain transformers version."""
    from kvprobe.tools.bench.long_measures import OPERATIONS, PLAIN_OPERATIONS

    assert set(PLAIN_OPERATIONS) == set(OPERATIONS)
