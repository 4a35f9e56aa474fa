"""Released data in the form its publishers ship: every form a study's ``--source`` accepts gives the same records.

The fixtures under ``tests/fixtures/hf/OWNER/NAME`` are laid out as those Hugging Face dataset repositories ship
(BABILong's JSON per config and split, MemoryAgentBench's parquet split, LongMemEval's extensionless JSON files),
with a few rows written field for field in the published schema; ``mquake_sample.json`` is MQuAKE's JSON list and
``factconsolidation_released.json`` the exported JSON our loaders read first. Each set is read as a local file, as
a local folder in the published form, through ``datasets.load_dataset`` on the local files, and as an ``hf:`` id
against a stand-in Hub (:func:`local_hub`: the real ``datasets.load_dataset`` on the fixture folder, and
``huggingface_hub``'s download answered from it), so no test touches the network.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from kvprobe import published_data
from kvprobe.data import MissingDataError
from kvprobe.published_data import HFSource, MissingExtraError, parse_hf

FIXTURES = Path(__file__).parent / "fixtures"
HUB = FIXTURES / "hf"
BABILONG = HUB / "RMT-team" / "babilong"
MEMORYAGENTBENCH = HUB / "ai-hyz" / "MemoryAgentBench"
LONGMEMEVAL = HUB / "xiaowu0162" / "longmemeval"
FACTCONSOLIDATION_JSON = FIXTURES / "factconsolidation_released.json"
MQUAKE_JSON = FIXTURES / "mquake_sample.json"


@pytest.fixture
def local_hub(monkeypatch, tmp_path) -> dict[str, Path]:
    """The Hub, answered from local folders: ``repos`` maps a dataset id to its folder (every fixture under
    ``fixtures/hf``; a test may add its own). ``datasets.load_dataset`` is the real one, run on the folder (its
    README's configs), with a cache in ``tmp_path``; ``huggingface_hub``'s listing and download read the folder."""
    datasets = pytest.importorskip("datasets")
    hub = pytest.importorskip("huggingface_hub")
    repos = {f"{owner.name}/{repo.name}": repo for owner in HUB.iterdir() for repo in owner.iterdir()}
    real_load = datasets.load_dataset

    def load_dataset(path, name=None, split=None, revision=None, **kwargs):
        if path not in repos:  # a builder on local files ("json", "parquet")
            return real_load(path, name, split=split, **kwargs)
        return real_load(str(repos[path]), name, split=split, cache_dir=str(tmp_path / "hf-cache"))

    def hf_hub_download(repo_id, filename, repo_type=None, revision=None):
        assert repo_type == "dataset"
        if not (repos[repo_id] / filename).is_file():
            raise LocalEntryNotFoundError(f"{repo_id} has no {filename}")
        return str(repos[repo_id] / filename)

    from huggingface_hub.utils import LocalEntryNotFoundError

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    monkeypatch.setattr(hub, "hf_hub_download", hf_hub_download)
    return repos


def _load_local(kind: str, path: Path, tmp_path: Path) -> list[dict]:
    """Rows of a local file read by ``datasets.load_dataset`` (the ``json`` or ``parquet`` builder)."""
    datasets = pytest.importorskip("datasets")
    return datasets.load_dataset(kind, data_files=str(path), split="train",
                                 cache_dir=str(tmp_path / "hf-cache")).to_list()


# --------------------------------------------------------------------------- hf: ids and the optional extra


def test_hf_ids_parse_and_a_malformed_one_shows_the_form():
    assert parse_hf("hf:RMT-team/babilong") == HFSource("RMT-team/babilong")
    assert parse_hf("hf:RMT-team/babilong@4e2f1a0:8k") == HFSource("RMT-team/babilong", "4e2f1a0", "8k")
    assert parse_hf("hf:xiaowu0162/longmemeval:longmemeval_s") == HFSource("xiaowu0162/longmemeval", None,
                                                                          "longmemeval_s")
    assert str(parse_hf("hf:ai-hyz/MemoryAgentBench@main")) == "hf:ai-hyz/MemoryAgentBench@main"
    assert parse_hf("generated") is None and parse_hf(str(MQUAKE_JSON)) is None
    for bad in ("hf:babilong", "hf:RMT-team/babilong@", "hf:a/b c"):
        with pytest.raises(ValueError, match=r"write hf:OWNER/NAME\[@REVISION\]\[:CONFIG\]"):
            parse_hf(bad)


def test_without_the_extra_a_hub_source_names_the_flag_and_the_pip_install(monkeypatch, capsys, tmp_path):
    from kvprobe.cli import main

    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    assert main(["run", "babilong", "--source", "hf:RMT-team/babilong", "--tasks", "qa3", "--out", str(tmp_path)]) == 2
    message = capsys.readouterr().err
    assert "--source: reading hf:RMT-team/babilong needs the Hugging Face `datasets` library" in message
    assert "pip install 'kvprobe[data]'" in message
    with pytest.raises(MissingExtraError, match=r"parquet\) needs .*pip install 'kvprobe\[data\]'"):
        published_data.read_records(MEMORYAGENTBENCH / "data" / "Conflict_Resolution-00000-of-00001.parquet")


# --------------------------------------------------------------------------- BABILong


def test_babilong_records_are_the_same_in_every_published_form(local_hub, tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    from pyarrow import parquet
    from kvprobe.studies.babilong.data import BabilongFormatError, released_records

    def rows(source):
        return [r for _, r in released_records(source, "qa3", "1k")]

    published = rows(BABILONG)  # the repository as it ships: data/qa3/1k.json
    assert len(published) == 3 and all(list(r) == ["input", "question", "target"] for r in published)
    export, as_list, as_parquet = tmp_path / "export", tmp_path / "list", tmp_path / "parquet"
    shutil.copytree(BABILONG / "data" / "qa3", export / "1k", dirs_exist_ok=True)
    (export / "1k" / "1k.json").rename(export / "1k" / "qa3.jsonl")  # datasets' to_json per length and task
    (as_list / "1k").mkdir(parents=True)
    (as_list / "1k" / "qa3.json").write_text(json.dumps(published))
    (as_parquet / "1k").mkdir(parents=True)  # the parquet layout of babilong-1k-samples
    parquet.write_table(pyarrow.Table.from_pylist(published), as_parquet / "1k" / "qa3-00000-of-00001.parquet")
    assert rows(export) == rows(as_list) == rows(as_parquet) == published
    assert rows("hf:RMT-team/babilong") == published  # config 1k, split qa3, through datasets.load_dataset
    with pytest.raises(BabilongFormatError, match="the lengths .* come from the released lengths"):
        released_records("hf:RMT-team/babilong:1k", "qa3", "1k")
    with pytest.raises(BabilongFormatError, match="not a folder"):
        released_records(BABILONG / "README.md", "qa3", "1k")


# --------------------------------------------------------------------------- MemoryAgentBench (FactConsolidation)


def test_memoryagentbench_parquet_has_the_published_schema_and_the_json_fixture_rows(tmp_path):
    pyarrow = pytest.importorskip("pyarrow")
    from pyarrow import parquet

    s = pyarrow.string()
    turn = pyarrow.struct([("content", s), ("has_answer", pyarrow.bool_()), ("role", s)])
    published = pyarrow.schema([  # the dataset card's dataset_info, column for column
        ("context", s), ("questions", pyarrow.list_(s)), ("answers", pyarrow.list_(pyarrow.list_(s))),
        ("metadata", pyarrow.struct([
            ("demo", s), ("haystack_sessions", pyarrow.list_(pyarrow.list_(pyarrow.list_(turn)))),
            ("keypoints", pyarrow.list_(s)), ("previous_events", pyarrow.list_(s)), ("qa_pair_ids", pyarrow.list_(s)),
            ("question_dates", pyarrow.list_(s)), ("question_ids", pyarrow.list_(s)),
            ("question_types", pyarrow.list_(s)), ("source", s)]))])
    path = MEMORYAGENTBENCH / "data" / "Conflict_Resolution-00000-of-00001.parquet"
    table = parquet.read_table(path)
    assert table.schema.remove_metadata().equals(published)
    assert table.to_pylist() == json.loads(FACTCONSOLIDATION_JSON.read_text())


def test_factconsolidation_rows_are_the_same_in_every_published_form(local_hub, tmp_path):
    from kvprobe.studies.factconsolidation.schema import FactConsolidationFormatError, load_rows, row_from_json
    from kvprobe.studies.factconsolidation.study import FactConsolidationStudy

    exported = load_rows(FACTCONSOLIDATION_JSON)
    assert [r.source for r in exported] == ["factconsolidation_sh_32k", "factconsolidation_mh_32k"]
    parquet_file = MEMORYAGENTBENCH / "data" / "Conflict_Resolution-00000-of-00001.parquet"
    lines = tmp_path / "rows.jsonl"
    lines.write_text("".join(json.dumps(r) + "\n" for r in json.loads(FACTCONSOLIDATION_JSON.read_text())))
    through_datasets = [row_from_json(r, f"row #{i}") for i, r in enumerate(_load_local("parquet", parquet_file,
                                                                                         tmp_path))]
    assert load_rows(parquet_file) == load_rows(MEMORYAGENTBENCH) == load_rows(lines) == through_datasets == exported
    assert load_rows("hf:ai-hyz/MemoryAgentBench") == exported  # split Conflict_Resolution via datasets
    study = FactConsolidationStudy(source="hf:ai-hyz/MemoryAgentBench", tiers=("32k",))
    assert [c.case_id for c in study.cases()] == [c.case_id for c in
                                                  FactConsolidationStudy(source=str(MEMORYAGENTBENCH),
                                                                         tiers=("32k",)).cases()]
    with pytest.raises(FactConsolidationFormatError, match=r"no data/Conflict_Resolution-\*\.parquet"):
        load_rows(tmp_path)


# --------------------------------------------------------------------------- LongMemEval


def test_longmemeval_questions_are_the_same_in_every_published_form(local_hub, tmp_path):
    from kvprobe.studies.session_bias import data as lme
    from kvprobe.studies.session_bias.study import SessionBiasStudy

    oracle = LONGMEMEVAL / "longmemeval_oracle"  # the Hub's file carries no extension
    questions = lme.load_longmemeval(oracle)
    package = tmp_path / "data"  # the data package's name for the same file
    package.mkdir()
    shutil.copy(oracle, package / "longmemeval_oracle.json")
    through_datasets = lme.parse_questions(_load_local("json", oracle, tmp_path), str(oracle))
    assert lme.load_longmemeval(LONGMEMEVAL) == lme.load_longmemeval(package) == through_datasets == questions
    assert lme.dataset_hash(through_datasets) == lme.dataset_hash(questions)
    assert lme.load_longmemeval("hf:xiaowu0162/longmemeval") == questions  # the oracle file, downloaded
    assert lme.load_longmemeval("hf:xiaowu0162/longmemeval:longmemeval_oracle") == questions
    # the set's quirks: an abstention variant beside its question, evidence turns flagged, an unsorted haystack
    by_id = {q.question_id: q for q in questions}
    assert by_id["b71e06d4_abs"].is_abstention and by_id["b71e06d4_abs"].group == by_id["b71e06d4"].group
    assert [t.has_answer for t in by_id["3f9a2c71"].sessions[0].turns] == [True, None, None, None]
    dates = [lme.parse_date(s.date) for s in by_id["b71e06d4"].sessions]
    assert dates != sorted(dates)
    study = SessionBiasStudy(source="hf:xiaowu0162/longmemeval", split="all")
    assert [c.case_id for c in study.cases()] == list(by_id)
    with pytest.raises(MissingDataError, match=r"none of .*longmemeval_oracle.* name the file as hf:.*:FILE"):
        lme.load_longmemeval("hf:ai-hyz/MemoryAgentBench")


# --------------------------------------------------------------------------- MQuAKE


def test_mquake_cases_are_the_same_in_every_published_form(local_hub, tmp_path):
    from kvprobe.studies.datasets.mquake.schema import case_from_json, load_mquake, to_json
    from kvprobe.studies.mquake.data import sample_released

    cases = load_mquake(MQUAKE_JSON)
    clone = tmp_path / "MQuAKE"  # princeton-nlp/MQuAKE keeps its files under datasets/
    (clone / "datasets").mkdir(parents=True)
    shutil.copy(MQUAKE_JSON, clone / "datasets" / "MQuAKE-CF-3k-v2.json")
    local_hub["someone/mquake-copy"] = clone / "datasets"  # a copy on the Hub
    through_datasets = [case_from_json(r, f"row #{i}") for i, r in enumerate(_load_local("json", MQUAKE_JSON,
                                                                                       tmp_path))]
    assert load_mquake(clone) == load_mquake("hf:someone/mquake-copy") == through_datasets == cases
    assert [to_json(c) for c in through_datasets] == json.loads(MQUAKE_JSON.read_text())  # nulls datasets adds drop
    assert sample_released("hf:someone/mquake-copy", (2,), 1) == sample_released(MQUAKE_JSON, (2,), 1)
