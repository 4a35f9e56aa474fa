"""The data layer: one registry, one resolver, pulls that verify every file and never leave a partial one."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvprobe import data
from kvprobe.data import DATASETS, MissingDataError

MIRROR = Path(__file__).resolve().parents[2] / "shared" / "data"
needs_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason="no shared/data mirror beside this checkout")


@pytest.fixture
def no_data(tmp_path, monkeypatch):
    """An empty user data directory and no checkout fallback: a user's machine before any pull."""
    monkeypatch.setenv("KVPROBE_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(data, "_checkout_data", lambda: None)
    return tmp_path / "data"


@needs_mirror
def test_the_registry_describes_the_mirror_byte_for_byte():
    for dataset in DATASETS.values():
        for path, sha256, size in dataset.files:
            file = MIRROR / dataset.folder / path
            assert file.stat().st_size == size and data.sha256_of(file) == sha256, file
        assert dataset.license and dataset.source and dataset.citation


def test_a_missing_set_names_its_license_and_the_pull_command(no_data):
    for name, dataset in DATASETS.items():
        with pytest.raises(MissingDataError) as missing:
            data.data_dir(name)
        assert f"'{name}' ({dataset.license};" in str(missing.value) and f"kvprobe data pull {name}" in str(missing.value)
    from kvprobe.studies.babilong.samples import BABI_FILES

    assert list(BABI_FILES) == ["qa2", "qa3"] and "qa2" in BABI_FILES and "qa9" not in BABI_FILES  # no data needed
    with pytest.raises(KeyError):
        BABI_FILES["qa9"]  # an unknown key is a KeyError, not a missing data set
    with pytest.raises(MissingDataError, match="kvprobe data pull babi"):
        BABI_FILES["qa2"]
    from kvprobe.cli import main

    assert main(["data", "list"]) == 0
    assert main(["data", "path", "pg19"]) == 2  # the error names the pull command


@needs_mirror
def test_pull_from_a_mirror_then_every_set_resolves_there(no_data, capsys):
    from kvprobe.cli import main

    assert main(["data", "pull", "all", "--from", f"file://{MIRROR}"]) == 0
    for name, dataset in DATASETS.items():
        folder, where = data.find(name)
        assert folder == no_data / dataset.folder and where == "$KVPROBE_DATA"
    assert data.data_dir("pg19", source=MIRROR / "pg19") == MIRROR / "pg19"  # an explicit source wins


@needs_mirror
def test_a_corrupt_mirror_file_is_refused_and_nothing_partial_is_left(no_data, tmp_path):
    mirror = tmp_path / "mirror"
    shutil.copytree(MIRROR / "pg19", mirror / "pg19")
    book = next((mirror / "pg19").glob("*.txt"))
    book.write_text(book.read_text(encoding="utf-8")[:-10], encoding="utf-8")
    with pytest.raises(ValueError, match="sha256 differs"):
        data.pull("pg19", mirror)
    assert not (no_data / "pg19" / book.name).exists()
    assert not list((no_data / "pg19").glob(".*")) if (no_data / "pg19").exists() else True
    with pytest.raises(MissingDataError, match="lacks babi/"):
        data.pull("babi", mirror)
