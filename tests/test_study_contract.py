"""The contract every registered study keeps (run on a tiny model through the protocol).

Like scikit-learn's ``parametrize_with_checks``: one set of checks, every study. A new
study in ``kvprobe.studies.registry`` is checked here without a line of new test code,
once its registry entry names ``smoke`` parameters (a run that takes seconds).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import kvprobe
from conftest import tensors_made_on_meta
from kvprobe.parameters import field_comments, flag, public_fields
from kvprobe.studies.common.protocol import COMMON_COLUMNS, CaseLike, HistoryStudy, Study
from kvprobe.studies.registry import STUDIES
from kvprobe.studies.common.runner import COMMITTED, RESULTS, run_study

#: A few-second tiny-model run of every study: its registry entry's ``smoke`` parameters.
SMALL: dict[str, dict] = {name: dict(e.smoke) for name, e in STUDIES.items()}
#: Studies whose rows are not (case, question, condition) rows of a history (no common answer columns).
NOT_HISTORY = {"detection", "native-pairs", "requests"}

pytestmark = pytest.mark.usefixtures("one_thread")


def test_every_registered_study_has_a_small_run():
    assert all(SMALL[name] for name in STUDIES), [name for name in STUDIES if not SMALL[name]]


@pytest.mark.parametrize("name", list(STUDIES))
def test_study_class_follows_the_protocol(name):
    cls = STUDIES[name].study_class()
    assert dataclasses.is_dataclass(cls) and issubclass(cls, Study), f"{name}: a dataclass subclass of Study"
    assert cls.name == name
    if name not in NOT_HISTORY:
        assert issubclass(cls, HistoryStudy)
        assert "run_cases" not in vars(cls), f"{name} overrides the protocol's run loop"
    comments = field_comments(cls)
    missing = [f.name for f in public_fields(cls) if not comments.get(f.name)]
    assert not missing, f"{name}: fields without a #: comment (their --help text): {missing}"
    # A study holds its parameters only: what a run builds or logs lives in the runner's RunState.
    hidden = [f.name for f in dataclasses.fields(cls) if f not in public_fields(cls)]
    assert not hidden, f"{name}: fields that are not parameters (move them to RunState / side_logs): {hidden}"
    # A side log is appended from inside the cases, in the driver's run folder: no Ray workers.
    assert not cls.side_logs or STUDIES[name].local_only, f"{name} declares side logs but may run on Ray"


#: The digests the protocol writes into every ``config.json`` (:meth:`Study.config`); no study spells its own.
DIGESTS = {"case_ids_sha256", "data_sha256", "strings_sha256"}


@pytest.mark.parametrize("name", list(STUDIES))
def test_the_protocol_owns_cases_config_and_batch_state(name):
    """A study declares its cases (``make_cases``), data digest, strings module and extra config keys; the
    protocol computes the cases once and writes the config. Batch state travels in the protocol's ``Batch``:
    the batch hooks take it, so no study keeps one batch's state in its fields."""
    import inspect

    cls = STUDIES[name].study_class()
    overridden = [m for m in ("cases", "config") if m in vars(cls)]
    assert not overridden, f"{name} overrides the protocol's {overridden}: declare make_cases/data_sha256/config_extra"
    assert "make_cases" in {k for c in cls.__mro__ if c is not object for k in vars(c)} and \
        cls.make_cases is not Study.make_cases, f"{name} supplies no make_cases()"
    for hook, params in (("start_batch", ["self", "model", "batch"]), ("finish", ["self", "model", "rows", "batch"])):
        if hook in vars(cls):
            assert list(inspect.signature(getattr(cls, hook)).parameters) == params, f"{name}.{hook}"
    study = cls(**SMALL[name])
    assert study.cases() is study.cases(), "cases are computed once per parameter values"
    assert all(isinstance(c, CaseLike) for c in study.cases()), f"{name}: a case without a case_id"
    config = study.config()
    field_names = {f.name for f in dataclasses.fields(cls) if not f.name.startswith("_")}
    digests = {k for k in config if k not in field_names and ("sha256" in k or "hash" in k)}
    assert digests <= DIGESTS, f"{name}: digest keys outside the protocol's one spelling: {sorted(digests - DIGESTS)}"


@pytest.mark.parametrize("name", list(STUDIES))
def test_help_lists_every_parameter(name, capsys):
    from kvprobe.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", name, "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for f in public_fields(STUDIES[name].study_class()):
        option = flag(f.name)
        assert option in text or option.replace("--", "--no-", 1) in text, f"{name}: {option} missing from --help"


@pytest.mark.parametrize("name", list(STUDIES))
def test_no_flag_keeps_every_default(name):
    from kvprobe.cli import build_parser
    from kvprobe.studies.commands import study_from_args as _study_from_args
    from kvprobe.studies.registry import entry

    args = build_parser(["run", name]).parse_args(["run", name])
    cls = STUDIES[name].study_class()
    assert _study_from_args(entry(name), args).config() == cls().config()


def _count_fields(cls: type) -> list[str]:
    """Integer fields that count or size something (each must refuse 0 and negatives)."""
    import typing

    from kvprobe.parameters import _unwrap

    hints = typing.get_type_hints(cls)
    out = []
    for f in public_fields(cls):
        kind, _ = _unwrap(hints[f.name])
        if kind is int and (f.name.startswith("n") or f.name.endswith(("tokens", "batch", "budget", "bases"))) \
                and "seed" not in f.name:
            out.append(f.name)
    return out


@pytest.mark.parametrize("name", list(STUDIES))
def test_bad_counts_are_refused_before_a_model_loads(name, capsys):
    from kvprobe.cli import main

    fields = _count_fields(STUDIES[name].study_class())
    assert "cases_per_batch" in fields
    for field_name in fields:
        # A model name that does not exist: the study must refuse first.
        code = main(["run", name, flag(field_name), "-3", "--model", "no-such-model", "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and flag(field_name) in err and "-3" in err, (field_name, err)


# --------------------------------------------------------------------------- running


@pytest.fixture(scope="module")
def tiny() -> kvprobe.Model:
    return kvprobe.load_model("tiny-llama")


def _run(name: str, model: kvprobe.Model, out: Path):
    """A small run under the device guard (tests/conftest.py): a tensor the study makes without the
    model's device fails the run, as it would on a GPU."""
    entry = STUDIES[name]
    study = entry.study_class()(**SMALL[name])
    runner = entry.run_function()
    with tensors_made_on_meta():
        if runner is None:
            return study, run_study(study, model, out, progress=False)
        return study, runner(model, out, study=study, progress=False)


@pytest.mark.parametrize("name", list(STUDIES))
def test_small_run_config_rows_and_resume(name, tiny, tmp_path):
    study, info = _run(name, tiny, tmp_path)
    assert info.cases_run == len(study.cases()) > 0
    # Parameters round-trip: config.json holds every field as the study has it.
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["study"] == name
    for f in public_fields(type(study)):
        value = getattr(study, f.name)
        assert config["study_config"][f.name] == (list(value) if isinstance(value, tuple) else value), f.name
    data = (tmp_path / RESULTS).read_bytes()
    rows = [json.loads(line) for line in data.decode().splitlines()]
    assert rows and {r["case_id"] for r in rows} == {c.case_id for c in study.cases()}
    if name not in NOT_HISTORY:
        for r in rows:
            assert set(COMMON_COLUMNS) <= set(r), sorted(set(COMMON_COLUMNS) - set(r))
    # A kill in the middle of the last case's write: the committed length is still that of the case
    # before, the file ends with a partial line. The rerun redoes that case only, to the same bytes.
    last_case = rows[-1]["case_id"]
    first_of_last = next(i for i, r in enumerate(rows) if r["case_id"] == last_case)
    keep = sum(len(line) + 1 for line in data.decode().splitlines()[:first_of_last])
    (tmp_path / COMMITTED).write_text(json.dumps({"bytes": keep}) + "\n")
    cut = data[: keep + max(1, (len(data) - keep) // 2)]
    (tmp_path / RESULTS).write_bytes(cut)
    _, again = _run(name, tiny, tmp_path)
    assert again.cases_run == 1
    assert (tmp_path / RESULTS).read_bytes() == data


def test_corrupt_results_line_is_named(tiny, tmp_path, capsys):
    from kvprobe.cli import main
    from kvprobe.studies.common.runner import CorruptResultsError, read_rows

    _run("quantity", tiny, tmp_path)
    lines = (tmp_path / RESULTS).read_text().splitlines()
    lines[2] = lines[2][:-5] + "oops"
    (tmp_path / RESULTS).write_text("\n".join(lines) + "\n")
    with pytest.raises(CorruptResultsError, match=rf"{RESULTS}:3: not JSON"):
        list(read_rows(tmp_path))
    # In process: `kvprobe report quantity` runs in a real subprocess in tests/test_quantity_threshold.py.
    assert main(["report", "quantity", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{RESULTS}:3: not JSON" in err, err


def test_out_pointing_at_a_file_is_refused(tmp_path, capsys):
    from kvprobe.cli import main

    target = tmp_path / "file.txt"
    target.write_text("x")
    assert main(["run", "quantity", "--out", str(target), "--model", "no-such-model"]) == 2
    assert "is an existing file, not a directory" in capsys.readouterr().err


def test_the_protocol_docstring_example_runs(tmp_path, monkeypatch):
    """The complete study in ``kvprobe.studies.common.protocol``'s docstring runs as written."""
    import collections
    import textwrap
    from dataclasses import dataclass
    from typing import ClassVar

    from kvprobe.studies.common import protocol

    doc = protocol.__doc__
    code = textwrap.dedent(doc[doc.index("Example (a complete study)::") + len("Example (a complete study)::"):])
    monkeypatch.chdir(tmp_path)
    namespace = {"collections": collections, "dataclass": dataclass, "ClassVar": ClassVar, "kvprobe": kvprobe,
                 "HistoryStudy": HistoryStudy, "Question": protocol.Question, "run_study": run_study}
    exec(compile(code, "protocol-docstring", "exec"), namespace)
    rows = [json.loads(line) for line in (tmp_path / "runs/tiny/results.jsonl").read_text().splitlines()]
    assert [r["condition"] for r in rows] == ["full", "mask-A"] and rows[0]["query"] == "current"


def test_options_are_not_abbreviated(capsys):
    """``--n`` is babilong's field; in quantity it must not silently mean ``--n-groups``."""
    from kvprobe.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["run", "quantity", "--n", "3", "--model", "no-such-model"])
    assert exit_.value.code == 2 and "unrecognized arguments: --n 3" in capsys.readouterr().err
