"""The data layer: one registry, one resolver, pulls that verify every file and never leave a partial one."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvprobe import data
from kvprobe.data import DATASETS, DataSet, DownloadError, MissingDataError, Upstream

from conftest import SHARED_DATA as MIRROR  # shared/data beside this checkout

needs_mirror = pytest.mark.skipif(not MIRROR.is_dir(), reason="no shared/data mirror beside this checkout")


@pytest.fixture
def no_data(tmp_path, monkeypatch):
    """An empty user data directory and no checkout fallback: a user's machine before any pull."""
    monkeypatch.setenv("KVPROBE_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(data, "_checkout_data", lambda: None)
    return tmp_path / "data"


@needs_mirror
def test_a_checkout_finds_the_shared_data_beside_it(tmp_path, monkeypatch):
    """The development fallback (``kvprobe.data._checkout_data``): a source checkout with ``shared/data`` beside it
    reads every set from there when the user data directory is empty. Without this test a wrong path in the
    fallback turns every data-reading test into a skip (the skip hook in conftest), and the suite still passes."""
    monkeypatch.setenv("KVPROBE_DATA", str(tmp_path / "empty"))
    found = data._checkout_data()
    assert found is not None and found.resolve() == MIRROR.resolve()  # shared/ may be a link to the data
    for name, dataset in DATASETS.items():
        folder, where = data.find(name)
        assert folder is not None and folder.resolve() == (MIRROR / dataset.folder).resolve(), (name, where)


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
        message = str(missing.value)
        assert f"'{name}' ({dataset.license};" in message and f"`kvprobe data pull {name}`" in message, message
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


# --------------------------------------------------------------------------- downloads from the publishers


def test_every_registered_file_has_a_pinned_publisher_url():
    for dataset in DATASETS.values():
        assert dataset.from_publisher, dataset.name
        sizes = {path: size for path, _, size in dataset.files}
        for upstream in dataset.upstream:
            assert re.fullmatch(r"[0-9a-f]{40}", upstream.commit) and upstream.file in sizes, upstream
            assert upstream.url().startswith(f"{data.PUBLISHER_BASE}/{upstream.repo}/{upstream.commit}/")
            if upstream.transform:  # the published file is pinned too, checked before the transform
                assert upstream.transform in data.TRANSFORMS and len(upstream.sha256) == 64 and upstream.size > 0


@pytest.fixture
def publisher(tmp_path, monkeypatch):
    """A stand-in for the publishers: a folder laid out as their URL paths (``OWNER/REPO/COMMIT/PATH``) served
    over real HTTP on localhost. ``drop`` holds paths whose response announces the whole file but closes the
    connection after half of it; ``requests`` records every path asked for."""
    monkeypatch.setenv("no_proxy", "*")  # localhost, even where a proxy is configured
    root, drop, requests = tmp_path / "publisher", set(), []
    root.mkdir()

    class Handler(SimpleHTTPRequestHandler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args):
            pass

        def do_GET(self):
            requests.append(self.path.lstrip("/"))
            if self.path.lstrip("/") in drop:
                body = (root / self.path.lstrip("/")).read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[: len(body) // 2])
                self.close_connection = True
                return
            super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    yield SimpleNamespace(root=root, url=f"http://127.0.0.1:{server.server_port}", drop=drop, requests=requests)
    server.shutdown()
    server.server_close()


def publish(publisher, dataset: DataSet, files: dict[str, bytes]) -> None:
    """Lay ``files`` (the published bytes of each file of ``dataset``) out as the publisher serves them."""
    for upstream in dataset.upstream:
        served = publisher.root / upstream.repo / upstream.commit / upstream.path
        served.parent.mkdir(parents=True, exist_ok=True)
        served.write_bytes(files[upstream.file])


#: A made-up book as Project Gutenberg ships one (CRLF, header, license) and as the registry keeps it.
BOOK = (b"The Project Gutenberg eBook, Toy\r\n\r\n***START OF THE PROJECT GUTENBERG EBOOK TOY***\r\n\r\n\r\n"
        b"CHAPTER I\r\n\r\nIt was a toy.\r\n\r\n\r\n***END OF THE PROJECT GUTENBERG EBOOK TOY***\r\nLicense.\r\n")
KEPT = b"CHAPTER I\n\nIt was a toy.\n"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def toy(publisher, no_data, monkeypatch):
    """A registered set ``toy`` of two verbatim files (one renamed, one in a subfolder) and one book made by a
    transform, published by the stand-in publisher."""
    files = {"LICENSE": b"Toy license.\n", "prompts/q.json": b'{"q": 1}\n' * 500, "book.txt": KEPT}
    sha = {path: hashlib.sha256(content).hexdigest() for path, content in files.items()}
    dataset = DataSet("toy", "toy", tuple((path, sha[path], len(content)) for path, content in files.items()),
                      "MIT", "toy @ 0123456", "nobody", "tests", (
                          Upstream("LICENSE", "owner/toy", COMMIT, "COPYING"),
                          Upstream("prompts/q.json", "owner/toy", COMMIT, "data/q.json"),
                          Upstream("book.txt", "gitenberg/toy", COMMIT, "1.txt", "gutenberg_body",
                                   hashlib.sha256(BOOK).hexdigest(), len(BOOK))))
    monkeypatch.setitem(DATASETS, "toy", dataset)
    publish(publisher, dataset, {**files, "book.txt": BOOK})
    return SimpleNamespace(dataset=dataset, files=files, folder=no_data / "toy")


def leftovers(folder: Path) -> list[str]:
    """Every file under ``folder`` (temporary ones included)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()) if folder.exists() else []


def test_a_pull_from_the_publisher_is_the_registered_files_byte_for_byte(publisher, toy, capsys):
    assert data.gutenberg_body(BOOK) == KEPT
    with pytest.raises(ValueError, match="not a Project Gutenberg text"):
        data.gutenberg_body(KEPT)
    assert data.pull("toy", base_url=publisher.url, progress=True) == toy.folder
    assert leftovers(toy.folder) == sorted(toy.files)
    for path, content in toy.files.items():
        assert (toy.folder / path).read_bytes() == content, path
    assert "toy" in capsys.readouterr().err  # the progress bar
    assert data.find("toy") == (toy.folder, "$KVPROBE_DATA")
    asked = len(publisher.requests)
    (toy.folder / "LICENSE").unlink()
    data.pull("toy", base_url=publisher.url)  # a rerun fetches only what is missing
    assert publisher.requests[asked:] == [f"owner/toy/{COMMIT}/COPYING"]


def test_a_corrupt_file_already_pulled_is_fetched_again(publisher, toy):
    """A file in the data folder whose bytes no longer match the registry (same size, one byte changed) is not
    kept: the next pull fetches it again (``data._holds`` compares the sha256, not the presence or the size)."""
    data.pull("toy", base_url=publisher.url)
    kept = toy.folder / "prompts/q.json"
    kept.write_bytes(kept.read_bytes().replace(b"1", b"2", 1))
    asked = len(publisher.requests)
    data.pull("toy", base_url=publisher.url)
    assert publisher.requests[asked:] == [f"owner/toy/{COMMIT}/data/q.json"]
    assert kept.read_bytes() == toy.files["prompts/q.json"]


def test_a_corrupt_published_file_is_refused_and_nothing_is_left(publisher, toy, monkeypatch):
    monkeypatch.setenv("KVPROBE_DATA_URL_BASE", publisher.url)  # the documented override
    served = publisher.root / f"owner/toy/{COMMIT}/data/q.json"
    served.write_bytes(served.read_bytes().replace(b"1", b"2", 1))  # same size, one byte changed
    with pytest.raises(ValueError, match=rf"{re.escape(publisher.url)}/owner/toy/{COMMIT}/data/q.json \(file "
                       r"toy/prompts/q.json of data set 'toy'\): sha256 differs"):
        data.pull("toy")
    assert "prompts/q.json" not in leftovers(toy.folder) and not any(".part" in f for f in leftovers(toy.folder))
    assert data.find("toy") == (None, "missing")
    (publisher.root / f"gitenberg/toy/{COMMIT}/1.txt").write_bytes(BOOK.replace(b"toy.", b"toy!"))
    served.write_bytes(toy.files["prompts/q.json"])
    with pytest.raises(ValueError, match="1.txt .*book.txt.*differs from the published file's"):
        data.pull("toy")
    assert leftovers(toy.folder) == ["LICENSE", "prompts/q.json"]


def test_a_dropped_connection_leaves_no_complete_looking_file(publisher, toy):
    publisher.drop.add(f"owner/toy/{COMMIT}/data/q.json")
    with pytest.raises(DownloadError, match=r"/data/q.json \(file toy/prompts/q.json of data set 'toy'\): the "
                       r"connection closed after 2250 of 4500 bytes"):
        data.pull("toy", base_url=publisher.url)
    assert leftovers(toy.folder) == ["LICENSE"] and data.find("toy") == (None, "missing")
    publisher.drop.clear()
    (publisher.root / f"gitenberg/toy/{COMMIT}/1.txt").unlink()
    with pytest.raises(DownloadError, match=r"/1.txt \(file toy/book.txt of data set 'toy'\): HTTP 404"):
        data.pull("toy", base_url=publisher.url)
    assert leftovers(toy.folder) == ["LICENSE", "prompts/q.json"]
    with pytest.raises(DownloadError, match="cannot reach the server"):
        data.pull("toy", base_url="http://127.0.0.1:9")  # nothing listens on the discard port


def test_a_set_its_publishers_do_not_serve_comes_only_from_a_mirror(toy, monkeypatch, capsys):
    dataset = toy.dataset
    monkeypatch.setitem(DATASETS, "toy", DataSet(*[getattr(dataset, f) for f in (
        "name", "folder", "files", "license", "source", "citation", "used_by")], dataset.upstream[:2],
        "the book is edited by hand"))
    with pytest.raises(MissingDataError, match=r"comes only from a mirror: .* book.txt as registered \(the book is "
                       r"edited by hand\); get it with `kvprobe data pull toy --from MIRROR`"):
        data.pull("toy")
    with pytest.raises(MissingDataError, match=r"`kvprobe data pull toy --from MIRROR` \(the book is edited"):
        data.data_dir("toy")
    from kvprobe.cli import main

    assert main(["data", "list"]) == 0
    listed = capsys.readouterr().out
    assert re.search(r"toy .* mirror only +missing: kvprobe data pull toy --from MIRROR", listed), listed
    assert re.search(r"babi .* publisher +", listed), listed


def served_from_the_mirror(publisher, names) -> None:
    """Lay the mirror's files of the verbatim registered sets ``names`` out at their publishers' URL paths."""
    for name in names:
        dataset = DATASETS[name]
        publish(publisher, dataset,
                {path: (MIRROR / dataset.folder / path).read_bytes() for path, _, _ in dataset.files})


@needs_mirror
def test_the_registered_sets_pull_from_their_publishers_url_paths(publisher, no_data, monkeypatch):
    """Every verbatim registered file, served at its pinned URL's path, is pulled byte for byte (the PG-19 book is
    made by a transform of GITenberg's text, tested above on a made-up book)."""
    verbatim = [name for name, d in DATASETS.items() if not any(u.transform for u in d.upstream)]
    assert verbatim == ["babi", "babilong", "mquake"]
    served_from_the_mirror(publisher, verbatim)
    monkeypatch.setenv("KVPROBE_DATA_URL_BASE", publisher.url)
    for name in verbatim:
        folder = data.pull(name)
        for path, _, _ in DATASETS[name].files:
            assert (folder / path).read_bytes() == (MIRROR / name / path).read_bytes(), (name, path)
        assert data.find(name) == (folder, "$KVPROBE_DATA")


@needs_mirror
def test_the_cli_pulls_from_the_publishers_through_the_url_override(publisher, tmp_path, monkeypatch, capsys):
    served_from_the_mirror(publisher, ["mquake"])
    env = {**os.environ, "KVPROBE_DATA": str(tmp_path / "cli-data"), "KVPROBE_DATA_URL_BASE": publisher.url,
           "no_proxy": "*"}
    done = subprocess.run([sys.executable, "-m", "kvprobe.cli", "data", "pull", "mquake"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == f"mquake: {tmp_path / 'cli-data' / 'mquake'}", done
    for path, sha256, _ in DATASETS["mquake"].files:
        assert data.sha256_of(tmp_path / "cli-data" / "mquake" / path) == sha256
    publisher.drop.add(f"princeton-nlp/MQuAKE/{DATASETS['mquake'].upstream[0].commit}/LICENSE")
    (tmp_path / "cli-data" / "mquake" / "LICENSE").unlink()
    # The failure in process (the pull above is the real CLI; a second interpreter start costs seconds).
    from kvprobe.cli import main

    for key in ("KVPROBE_DATA", "KVPROBE_DATA_URL_BASE", "no_proxy"):
        monkeypatch.setenv(key, env[key])
    assert main(["data", "pull", "mquake"]) == 2
    err = capsys.readouterr().err
    assert "MQuAKE" in err and "connection closed" in err, err
