"""The one data layer: every data set a study reads, where it comes from, and where it is found.

:data:`DATASETS` names each set with its files (sha256 and size of each), license, upstream source and
citation. :func:`data_dir` is the one resolver every study uses; it looks, in order, at

1. an explicit ``source`` (a study's ``--source``),
2. ``$KVPROBE_DATA/<folder>``,
3. the user data directory (``$XDG_DATA_HOME/kvprobe`` or ``~/.local/share/kvprobe``) ``/<folder>``,
4. for development only, a ``shared/data/<folder>`` beside a source checkout of kvprobe (its parent folder),

and a set found nowhere raises :class:`MissingDataError` naming the set, its license and the command that
gets it: ``kvprobe data pull NAME`` downloads each file from its publisher (a raw file of a repository at a
full commit SHA, :class:`Upstream`; ``$KVPROBE_DATA_URL_BASE`` points the downloads at a proxy or mirror) and
``kvprobe data pull NAME --from MIRROR`` copies the files from a mirror (a folder or ``file://`` URL laid out
like the data directory), both into the user data directory, checking every sha256 and moving each file into
place only once it is complete (:func:`pull`).

Released data sets a study reads through ``--source`` (BABILong's samples, MemoryAgentBench's
FactConsolidation, LongMemEval, MQuAKE) are not registered: the pieces their loaders share (a local file
in the publisher's form, or a Hugging Face dataset id) live in :mod:`kvprobe.published_data`.

Example::

    from kvprobe.data import data_dir
    book = next(data_dir("pg19").glob("*.txt"))
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

__all__ = ["DATASETS", "PUBLISHER_BASE", "TRANSFORMS", "DataFiles", "DataSet", "DownloadError", "MissingDataError",
           "Upstream", "data_dir", "data_home", "find", "gutenberg_body", "publisher_base", "pull", "pull_command"]

#: Where the publishers of the registered sets serve raw files (``OWNER/REPO/COMMIT/PATH`` below it).
PUBLISHER_BASE = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class Upstream:
    """Where one registered file is published: a raw file of a repository at a full commit SHA.

    Attributes:
        file: the file's path in the data set (as :attr:`DataSet.files` names it).
        repo: the repository, ``OWNER/NAME``.
        commit: the full 40-hex commit the file is pinned at.
        path: the file's path in the repository.
        transform: empty when the published file is the registered one byte for byte; else the name of the
            function of :data:`TRANSFORMS` that makes the registered file from the published bytes.
        sha256: with a transform, the sha256 of the published file (checked before the transform).
        size: with a transform, the bytes of the published file.

    Example::

        Upstream("LICENSE", "princeton-nlp/MQuAKE", "fb43dadc2d8cd19d08ce81c63d957b59deb3f3cd", "LICENSE").url()
        # 'https://raw.githubusercontent.com/princeton-nlp/MQuAKE/fb43dadc2d8cd19d08ce81c63d957b59deb3f3cd/LICENSE'
    """

    file: str
    repo: str
    commit: str
    path: str
    transform: str = ""
    sha256: str = ""
    size: int = 0

    def url(self, base: str | None = None) -> str:
        """The file's URL under ``base`` (default :func:`publisher_base`)."""
        return f"{(base or publisher_base()).rstrip('/')}/{self.repo}/{self.commit}/{quote(self.path)}"


def _published(repo: str, commit: str, paths: Mapping[str, str]) -> tuple[Upstream, ...]:
    """The :class:`Upstream` of files published verbatim in one repository at one commit:
    ``paths`` maps each file of the set to its path in the repository."""
    return tuple(Upstream(file, repo, commit, path) for file, path in paths.items())


@dataclass(frozen=True)
class DataSet:
    """One data set: its folder in the data directory and every file in it.

    Attributes:
        name: the name ``kvprobe data`` and the errors use.
        folder: its folder under a data directory.
        files: (path under the folder, sha256, bytes) of every file.
        license: the license of the files.
        source: where the files come from (repository at a commit, and paths).
        citation: who to cite.
        used_by: the studies and benchmarks that read it.
        upstream: where each file is published (:class:`Upstream`); a file without one comes only from a
            mirror.
        mirror_only: why the files without an upstream come only from a mirror (said by ``kvprobe data pull``).
    """

    name: str
    folder: str
    files: tuple[tuple[str, str, int], ...]
    license: str
    source: str
    citation: str
    used_by: str
    upstream: tuple[Upstream, ...] = ()
    mirror_only: str = ""

    @property
    def size(self) -> int:
        """Bytes of all its files."""
        return sum(size for _, _, size in self.files)

    @property
    def from_publisher(self) -> bool:
        """Whether every file can be downloaded from its publisher (else the set, or some of it, comes only from
        a mirror)."""
        published = {u.file for u in self.upstream}
        return all(path in published for path, _, _ in self.files)


class MissingDataError(FileNotFoundError):
    """A data set is not where the resolver looks; the message names the set, its license and how to get it."""


class DownloadError(MissingDataError):
    """A download from a publisher failed (the network, the server, a connection closed early): the set is still
    missing. The message names the URL and the file; nothing of the file is left behind."""


_KRR = "Wang-Han/krr-question-answering", "7df9344276e028d344dc862785daf0bd77956bba"
_BABILONG = "booydar/babilong", "7a6efee29f5cac03c3c410e6799c80fd2ffe3610"
#: BABILong's prompt configs as its evaluation of gemini-3-flash-preview at 0k saved them (one file a task).
_BABILONG_PROMPTS = "babilong_evals/google/gemini-3-flash-preview/{}_0k_instruction_yes_examples_yes_post_prompt_yes" \
    "_chat_template_no.json"
_PG19 = "google-deepmind/pg19", "b0e1f2925359688af19f8784c23c3deeda52d3ea"
_GITENBERG_3261 = ("GITenberg/News-from-Nowhere--Or-An-Epoch-of-Rest--13-Being-Some-Chapters-from-a-Utopian-"
                   "Romance_3261", "79bd67b0ae225cd64f7bbc25c0449850b3131069")
_MQUAKE = "princeton-nlp/MQuAKE", "fb43dadc2d8cd19d08ce81c63d957b59deb3f3cd"


DATASETS: dict[str, DataSet] = {d.name: d for d in [
    DataSet("babi", "babi", (
    ("qa10_indefinite-knowledge_test.txt", "fde8f20ed0b3ba979058ed391a566af34653f23baab5b2793ee37f87ef4e88b7", 99632),
    ("qa1_single-supporting-fact_test.txt", "55acf66cef2f6d798e2aa1d056e1ec8f24e910ea9215b639450574321132959b", 94477),
    ("qa2_two-supporting-facts_test.txt", "eff93fb9cd81ba02eb765772cf7cc269769ed44ec71cbbbc19cfb16ee5eba0f6", 179835),
    ("qa3_three-supporting-facts_test.txt", "17795c977100baf8188f386522ae301b62d6c1a13efc01b3aea781e588b4d57f", 526527),
    ("qa4_two-arg-relations_test.txt", "07f0ca18ddeea9eed4ba6d59e162adcb0ce44815721114b3540d92825509331e", 117394),
    ("qa5_three-arg-relations_test.txt", "ec825c1c8a76e63a31f0d7a7763cd63740e98332fa9bdf246a19068949bd5f97", 207037),
    ("qa6_yes-no-questions_test.txt", "b108b16f1eccbd1c24df6dca2649079a7b2f10af7fd12d4c45a3393802de59e3", 100109),
    ("qa7_counting_test.txt", "a74d1f2b91329b2bae814d41cdac2fbdfdf0328562b7d8afa9a0fa576d461e27", 130136),
    ("qa8_lists-sets_test.txt", "362a653c821a580fa315a85243b4f03bfa06fa7e0269b6f8e596f8fe6911646a", 126863),
    ("qa9_simple-negation_test.txt", "63590aff3f89993db409f0e9a9eb39c2a5b9d5efff99b255d800a891b0044d9f", 97208),
    ), "CC BY 3.0", "Facebook bAbI v1.2, English 1k test split (en/qaN_*_test.txt), as mirrored by "
       "Wang-Han/krr-question-answering @ 7df9344276e0 data/", "Weston et al. 2015, Towards AI-Complete Question "
       "Answering: A Set of Prerequisite Toy Tasks", "babilong, minteval, babi-verify",
       _published(*_KRR, {f"qa{k}_{task}_test.txt": f"data/qa{k}_{task}_test.txt" for k, task in enumerate((
           "single-supporting-fact", "two-supporting-facts", "three-supporting-facts", "two-arg-relations",
           "three-arg-relations", "yes-no-questions", "counting", "lists-sets", "simple-negation",
           "indefinite-knowledge"), 1)})),
    DataSet("babilong", "babilong", (
    ("LICENSE", "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4", 11357),
    ("UPSTREAM_data_README.md", "cf4dd89832725177b488359c69dda00c954f7efb1c4e4ff2df10284de78795cc", 810),
    ("prompts/qa1_prompt_config.json", "5441eac63e3dd210c7f872b2ac35d12c6c70eb27234c46707eb103e01f62e719", 1435),
    ("prompts/qa2_prompt_config.json", "dbefc33771a10ab32b0ea3208f2ad21c28aa78686804ef604e797ef6b93af67f", 1530),
    ("prompts/qa3_prompt_config.json", "c09469dca0c1e5887a4e93de82b3fd3c76a20abdb789c19d764e689d1dbbdc6a", 1815),
    ("prompts/qa4_prompt_config.json", "8682903c835f1602aad590f95fa1d2580799c8c8eec9868f1b431f67f180537c", 1190),
    ("prompts/qa5_prompt_config.json", "36c870baaf30c27faad4c855a88846e4d483fa029b7c4906f605c3023b67887f", 1462),
    ("test_100_idxs.json", "aa0a2a8cc8e4d52a9a16913aab7e02bed3b0d114fa08a7c42b153473105e2540", 6533),
    ), "Apache-2.0", "booydar/babilong @ 7a6efee29f5c (prompt configs, test_100_idxs.json, data README)",
       "Kuratov et al. 2024, BABILong: Testing the Limits of LLMs with Long Context Reasoning-in-a-Haystack",
       "babilong", _published(*_BABILONG, {
           "LICENSE": "LICENSE", "UPSTREAM_data_README.md": "data/README.md",
           "test_100_idxs.json": "data/test_100_idxs.json",
           **{f"prompts/qa{k}_prompt_config.json": _BABILONG_PROMPTS.format(f"qa{k}") for k in range(1, 6)}})),
    DataSet("pg19", "pg19", (
    ("LICENSE", "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30", 11358),
    ("gutenberg_3261_news_from_nowhere_pg19style.txt", "69254a6d0b0aa13490512282f7625561300990f8cf53e6208c25db7a33160813", 422933),
    ), "public domain text; Apache-2.0 (PG-19)", "Project Gutenberg #3261 (William Morris, News from Nowhere), "
       "GITenberg mirror @ 79bd67b0ae22, boilerplate removed as PG-19 does; PG-19 license from "
       "google-deepmind/pg19 @ b0e1f2925359", "Rae et al. 2020, Compressive Transformers for Long-Range Sequence "
       "Modelling (PG-19)", "babilong, requests, source-influence (OAKS demonstration), bench operations/long",
       (*_published(*_PG19, {"LICENSE": "LICENSE"}),
        Upstream("gutenberg_3261_news_from_nowhere_pg19style.txt", *_GITENBERG_3261, "3261.txt", "gutenberg_body",
                 "e5182ca7efdcfdb806cc6c981df49e0d40a1b578ad1c22beb9db1e69872da914", 450413))),
    DataSet("mquake", "mquake", (
    ("LICENSE", "8872dbf8660b00890b5e07ce1ea1f7a44fa7ae4e1857da56caba172b51dab3cb", 1094),
    ("UPSTREAM_README.md", "e48f96772d1a39a07a3e8cd34272a545a5ddd33685f0d2cbd6a98a98d9bc0e6e", 7963),
    ("prompts/MeLLo-prompt.txt", "022f97a82c8d889a7fa2e945d636f58a124de57160866e7958170aba8b17e937", 3536),
    ("prompts/multihop-cot-prompts.txt", "f74ad1cca21841d83a63b868d2e694c164aaaf8636a659e193fc99f41005cafa", 1160),
    ("prompts/multihop-prompts.txt", "1d6f48038599dec1ea63080c07f946f47f57c3227a3428b0efdca88cf566de17", 1135),
    ("prompts/rel-prompts.json", "5186c6bd07a60d3f561b17200c1e86c5f21215bbc3883d9a9c99d57da7871910", 20038),
    ("prompts/templates/cloze_templates.json", "2b06da99237d67e40844e727efb24795d8990d99a00868d95c4276ff7e1c7d84", 1927),
    ("prompts/templates/question_templates.json", "d3a5421ce3cbd6d51e77e3b854d7fd13b98f161c0d54daa597456d804a170d96", 2058),
    ), "MIT", "princeton-nlp/MQuAKE @ fb43dadc2d8c (prompts/, README, LICENSE)", "Zhong et al. 2023, MQuAKE: "
       "Assessing Knowledge Editing in Language Models via Multi-Hop Questions", "mquake, factconsolidation",
       _published(*_MQUAKE, {"LICENSE": "LICENSE", "UPSTREAM_README.md": "README.md", **{
           f"prompts/{f}": f"prompts/{f}" for f in ("MeLLo-prompt.txt", "multihop-cot-prompts.txt",
                                                    "multihop-prompts.txt", "rel-prompts.json",
                                                    "templates/cloze_templates.json",
                                                    "templates/question_templates.json")}})),
]}


def data_home() -> Path:
    """The user data directory ``kvprobe data pull`` writes to: ``$KVPROBE_DATA``, else
    ``$XDG_DATA_HOME/kvprobe``, else ``~/.local/share/kvprobe``."""
    if os.environ.get("KVPROBE_DATA"):
        return Path(os.environ["KVPROBE_DATA"])
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kvprobe"


def _checkout_data() -> Path | None:
    """``shared/data`` beside a source checkout of kvprobe (development only), or None."""
    root = Path(__file__).resolve().parents[1]
    if not (root / "pyproject.toml").is_file():
        return None  # an installed wheel has no checkout around it
    candidate = root.parent / "shared" / "data"
    return candidate if candidate.is_dir() else None


def _complete(folder: Path, dataset: DataSet) -> bool:
    return all((folder / path).is_file() for path, _, _ in dataset.files)


def find(name: str) -> tuple[Path | None, str]:
    """(the folder holding every file of set ``name``, where it was found), or (None, "missing")."""
    dataset = _dataset(name)
    places = [(data_home() / dataset.folder, "$KVPROBE_DATA" if os.environ.get("KVPROBE_DATA") else "user data")]
    checkout = _checkout_data()
    if checkout is not None:
        places.append((checkout / dataset.folder, "checkout (development)"))
    for folder, where in places:
        if _complete(folder, dataset):
            return folder, where
    return None, "missing"


def data_dir(name: str, source: str | Path | None = None) -> Path:
    """The folder of data set ``name``: ``source`` when given (it must exist), else where :func:`find` finds
    it; otherwise :class:`MissingDataError` with the command that gets it."""
    dataset = _dataset(name)
    if source is not None:
        path = Path(source)
        if not path.exists():
            raise MissingDataError(f"{path}: no such file or folder (the {name} data set given as source)")
        return path
    folder, _ = find(name)
    if folder is None:
        raise MissingDataError(
            f"data set {name!r} ({dataset.license}; {dataset.size / 2**20:.1f} MiB; from {dataset.source}) is not "
            f"in {data_home() / dataset.folder}; get it with `{pull_command(name)}`"
            + (f" (from its publisher) or `kvprobe data pull {name} --from MIRROR`" if dataset.from_publisher else
               f" ({dataset.mirror_only or 'its publishers do not serve it as registered'})")
            + " (a mirror is a folder or file:// URL laid out like the data directory), or point $KVPROBE_DATA at a "
            "data directory holding it")
    return folder


class DataFiles(Mapping):
    """key -> a file of a data set, resolved when read (:func:`data_dir`): listing the keys needs no data.

    Example::

        BABI_FILES = DataFiles("babi", {"qa2": "qa2_two-supporting-facts_test.txt"})
        list(BABI_FILES)            # ["qa2"], with or without the data; so is "qa2" in BABI_FILES
        BABI_FILES["qa2"]           # the file's path, or MissingDataError naming the pull command
    """

    def __init__(self, name: str, files: Mapping[str, str]):
        _dataset(name)
        self.name, self._files = name, dict(files)

    def __getitem__(self, key: str) -> Path:
        path = self._files[key]  # an unknown key is a KeyError, with or without the data
        return data_dir(self.name) / path

    def __contains__(self, key: object) -> bool:
        return key in self._files  # needs no data (Mapping's would resolve the file)

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


def publisher_base() -> str:
    """The base URL of the publishers' raw files: ``$KVPROBE_DATA_URL_BASE`` when set (a proxy or mirror that
    serves ``OWNER/REPO/COMMIT/PATH`` below it), else :data:`PUBLISHER_BASE`.

    Example::

        os.environ["KVPROBE_DATA_URL_BASE"] = "http://proxy.lab:8080/github-raw"
        DATASETS["mquake"].upstream[0].url()   # 'http://proxy.lab:8080/github-raw/princeton-nlp/MQuAKE/fb43.../LICENSE'
    """
    return os.environ.get("KVPROBE_DATA_URL_BASE") or PUBLISHER_BASE


def pull_command(name: str) -> str:
    """The command that gets data set ``name``: ``kvprobe data pull NAME`` where its publishers serve every file,
    else the mirror form.

    Example::

        pull_command("babi")   # 'kvprobe data pull babi'
    """
    return f"kvprobe data pull {name}" + ("" if _dataset(name).from_publisher else " --from MIRROR")


def pull(name: str, mirror: str | Path | None = None, home: Path | None = None, *, base_url: str | None = None,
         progress: bool | None = None) -> Path:
    """Fetch data set ``name`` into ``home`` (default :func:`data_home`) and return its folder there: from its
    publishers when ``mirror`` is None, else by copying from ``mirror`` (a folder, or a ``file://`` URL, laid
    out like the data directory).

    Every file is written to a temporary name in the target folder, checked against the registry's sha256 and
    only then moved into place, so a failed, corrupt or interrupted fetch leaves nothing that looks complete
    (a set is complete when all its files are there); files already there and correct are kept, so a rerun
    fetches only what is missing. A download that fails raises :class:`DownloadError`, a file whose sha256
    differs ValueError, each naming the URL (or mirror path) and the file. Downloads go to
    ``base_url`` (default :func:`publisher_base`) with a progress bar on stderr when ``progress`` is True
    (None: only on a terminal); a set its publishers do not serve whole raises :class:`MissingDataError`
    saying why it comes only from a mirror.

    Example::

        pull("babi")                                        # from its publisher, into data_home() / "babi"
        pull("pg19", "/shared/fs/kvprobe-data")             # from a lab's mirror
        pull("mquake", base_url="http://127.0.0.1:8000")    # from a proxy serving OWNER/REPO/COMMIT/PATH
    """
    dataset = _dataset(name)
    target = (home or data_home()) / dataset.folder
    if mirror is None:
        _download(dataset, target, base_url, progress)
        return target
    root = Path(urlparse(str(mirror)).path) if str(mirror).startswith("file://") else Path(mirror)
    if not root.is_dir():
        raise MissingDataError(f"mirror {mirror}: not a folder (give a folder or file:// URL laid out like the data "
                               "directory)")
    for path, sha256, _ in dataset.files:
        source = root / dataset.folder / path
        if not source.is_file():
            raise MissingDataError(f"mirror {mirror} lacks {dataset.folder}/{path} of data set {name!r}")
        if not _holds(target / path, sha256):
            _install(target / path, sha256, lambda out, source=source: shutil.copyfile(source, out),
                     f"{source} (data set {name!r})")
    return target


#: Seconds a download may wait on the server for each read.
_TIMEOUT = 60


def _download(dataset: DataSet, target: Path, base_url: str | None, progress: bool | None) -> None:
    """Download every file of ``dataset`` that ``target`` lacks from its publisher (:func:`pull`)."""
    published = {u.file: u for u in dataset.upstream}
    lacking = [path for path, _, _ in dataset.files if path not in published]
    if lacking:
        raise MissingDataError(
            f"data set {dataset.name!r} comes only from a mirror: its publishers do not serve {', '.join(lacking)} "
            f"as registered ({dataset.mirror_only or 'no pinned URL'}); get it with `kvprobe data pull "
            f"{dataset.name} --from MIRROR`")
    todo = [(path, sha256, size, published[path]) for path, sha256, size in dataset.files
            if not _holds(target / path, sha256)]
    if not todo:
        return
    from tqdm import tqdm

    with tqdm(total=sum(u.size or size for _, _, size, u in todo), desc=dataset.name, unit="B", unit_scale=True,
              unit_divisor=1024, file=sys.stderr, disable=None if progress is None else not progress) as bar:
        for path, sha256, _, upstream in todo:
            url = upstream.url(base_url)
            what = f"{url} (file {dataset.folder}/{path} of data set {dataset.name!r})"
            _install(target / path, sha256, lambda out, u=upstream, url=url, what=what: _fetch(u, url, out, bar, what),
                     what)


def _fetch(upstream: Upstream, url: str, out: Path, bar: Any, what: str) -> None:
    """Download ``url`` into ``out`` (updating the progress ``bar``), then apply the upstream's transform after
    checking the published file's sha256; a failure raises, naming ``what``."""
    got, length, reason = 0, None, None
    try:
        with urllib.request.urlopen(url, timeout=_TIMEOUT) as response, open(out, "wb") as f:
            length = response.headers.get("Content-Length")
            while block := response.read(1 << 16):
                f.write(block)
                got += len(block)
                bar.update(len(block))
    except urllib.error.HTTPError as e:
        reason = f"HTTP {e.code} {e.reason}"
    except urllib.error.URLError as e:
        reason = f"cannot reach the server ({e.reason})"
    except (OSError, http.client.HTTPException) as e:
        reason = f"{type(e).__name__}: {e}"
    else:
        if length is not None and got != int(length):
            reason = f"the connection closed after {got} of {length} bytes"
    if reason is not None:
        raise DownloadError(f"{what}: {reason}; nothing was written (run the pull again, or pull from a mirror "
                            "with --from MIRROR)")
    if upstream.transform:
        if sha256_of(out) != upstream.sha256:
            raise ValueError(f"{what}: sha256 differs from the published file's that kvprobe pinned "
                             f"({upstream.sha256[:12]}...); nothing was written")
        out.write_bytes(TRANSFORMS[upstream.transform](out.read_bytes()))


def _holds(path: Path, sha256: str) -> bool:
    """Whether ``path`` is a file with this sha256."""
    return path.is_file() and sha256_of(path) == sha256


def _install(destination: Path, sha256: str, write: Callable[[Path], None], what: str) -> None:
    """Make ``destination`` through a temporary name beside it: ``write(temporary)`` fills it, its sha256 is
    checked, and only then is it moved into place; on any failure the temporary file is removed (ValueError
    naming ``what`` for a sha256 that differs). The file gets the usual permissions (umask), not a temporary
    file's owner-only ones, so a shared data directory stays readable."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.parent / f".{destination.name}.{os.getpid()}.{os.urandom(4).hex()}.part"
    os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
    try:
        write(temporary)
        if sha256_of(temporary) != sha256:
            raise ValueError(f"{what}: sha256 differs from the registry's ({sha256[:12]}...): not the file kvprobe "
                             "was checked on; nothing was written")
        os.replace(temporary, destination)
    finally:
        if temporary.exists():
            temporary.unlink()


#: Project Gutenberg's marker lines around a book's text.
_GUTENBERG_MARK = re.compile(rb"^\*\*\* ?(START|END) OF (?:THE|THIS) PROJECT GUTENBERG E-?BOOK[^\n]*\n", re.M)


def gutenberg_body(raw: bytes) -> bytes:
    """A Project Gutenberg text without Gutenberg's header and license (PG-19 removes them too): the lines between
    the ``***START OF THE PROJECT GUTENBERG EBOOK ...`` and ``***END OF ...`` marker lines, line ends made
    ``\\n``, the blank lines around the text dropped, and one final newline. Deterministic; it makes the registered
    PG-19 book from GITenberg's ``3261.txt`` (:data:`TRANSFORMS`).

    Example::

        gutenberg_body(b"Title\\r\\n***START OF THE PROJECT GUTENBERG EBOOK X***\\r\\n\\r\\nText.\\r\\n\\r\\n"
                       b"***END OF THE PROJECT GUTENBERG EBOOK X***\\r\\nLicense")   # b"Text.\\n"
    """
    text = raw.replace(b"\r\n", b"\n")
    marks = list(_GUTENBERG_MARK.finditer(text))
    start = next((m for m in marks if m[1] == b"START"), None)
    end = next((m for m in marks if m[1] == b"END" and start is not None and m.start() > start.end()), None)
    if start is None or end is None:
        raise ValueError("not a Project Gutenberg text: no ***START OF ... and ***END OF ... marker lines")
    return text[start.end():end.start()].strip() + b"\n"


#: The transforms :class:`Upstream` names, each published bytes -> registered bytes.
TRANSFORMS: dict[str, Callable[[bytes], bytes]] = {"gutenberg_body": gutenberg_body}


def sha256_of(path: Path) -> str:
    """SHA-256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _dataset(name: str) -> DataSet:
    if name not in DATASETS:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")
    return DATASETS[name]
