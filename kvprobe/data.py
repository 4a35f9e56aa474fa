"""The one data layer: every data set a study reads, where it comes from, and where it is found.

:data:`DATASETS` names each set with its files (sha256 and size of each), license, upstream source and
citation. :func:`data_dir` is the one resolver every study uses; it looks, in order, at

1. an explicit ``source`` (a study's ``--source``),
2. ``$KVPROBE_DATA/<folder>``,
3. the user data directory (``$XDG_DATA_HOME/kvprobe`` or ``~/.local/share/kvprobe``) ``/<folder>``,
4. for development only, a ``shared/data/<folder>`` beside a source checkout of kvprobe (its parent folder),

and a set found nowhere raises :class:`MissingDataError` naming the set, its license and the command that
gets it: ``kvprobe data pull NAME --from MIRROR`` copies the files from a mirror (a folder or ``file://``
URL laid out like the data directory) into the user data directory, checking every sha256 and moving each
file into place only once it is complete (:func:`pull`).

Released data sets a study reads through ``--source`` (BABILong's samples, MemoryAgentBench's
FactConsolidation, LongMemEval, MQuAKE) are not registered: a user gives a local file or folder in the form
the publisher ships, or a Hugging Face dataset id ``hf:OWNER/NAME[@REVISION][:CONFIG]`` (:func:`parse_hf`).
The pieces every such loader shares live here: :func:`read_records` (parquet, JSON lines, a JSON list),
:func:`published_files` (a file of a published folder layout), :func:`hf_split` (one split through
``datasets.load_dataset``) and :func:`hf_file` (one file of a dataset repository); the Hugging Face libraries
are the optional extra ``kvprobe[data]`` (:class:`MissingExtraError` says so when they are absent).

Example::

    from kvprobe.data import data_dir
    book = next(data_dir("pg19").glob("*.txt"))
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

__all__ = ["DATASETS", "DATA_EXTRA", "DataFiles", "DataSet", "HFSource", "MissingDataError", "MissingExtraError",
           "data_dir", "data_home", "find", "hf_file", "hf_split", "parse_hf", "published_files", "pull",
           "read_records"]


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
    """

    name: str
    folder: str
    files: tuple[tuple[str, str, int], ...]
    license: str
    source: str
    citation: str
    used_by: str

    @property
    def size(self) -> int:
        """Bytes of all its files."""
        return sum(size for _, _, size in self.files)


class MissingDataError(FileNotFoundError):
    """A data set is not where the resolver looks; the message names the set, its license and how to get it."""


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
       "Answering: A Set of Prerequisite Toy Tasks", "babilong, minteval, babi-verify"),
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
       "babilong"),
    DataSet("pg19", "pg19", (
    ("LICENSE", "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30", 11358),
    ("gutenberg_3261_news_from_nowhere_pg19style.txt", "69254a6d0b0aa13490512282f7625561300990f8cf53e6208c25db7a33160813", 422933),
    ), "public domain text; Apache-2.0 (PG-19)", "Project Gutenberg #3261 (William Morris, News from Nowhere), "
       "GITenberg mirror @ 79bd67b0ae22, boilerplate removed as PG-19 does; PG-19 license from "
       "google-deepmind/pg19 @ b0e1f2925359", "Rae et al. 2020, Compressive Transformers for Long-Range Sequence "
       "Modelling (PG-19)", "babilong, requests, source-influence (OAKS demonstration), bench operations/long"),
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
       "Assessing Knowledge Editing in Language Models via Multi-Hop Questions", "mquake, factconsolidation"),
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
            f"in {data_home() / dataset.folder}; get it with `kvprobe data pull {name} --from MIRROR` (a folder or "
            "file:// URL laid out like the data directory), or point $KVPROBE_DATA at a data directory holding it")
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


def pull(name: str, mirror: str | Path, home: Path | None = None) -> Path:
    """Copy data set ``name`` from ``mirror`` (a folder, or a ``file://`` URL, laid out like the data
    directory) into ``home`` (default :func:`data_home`), checking each file's sha256. Each file is written
    to a temporary name and moved into place complete; a bad file raises and leaves no partial copy."""
    dataset = _dataset(name)
    root = Path(urlparse(str(mirror)).path) if str(mirror).startswith("file://") else Path(mirror)
    if not root.is_dir():
        raise MissingDataError(f"mirror {mirror}: not a folder (give a folder or file:// URL laid out like the data "
                               "directory)")
    target = (home or data_home()) / dataset.folder
    for path, sha256, _ in dataset.files:
        source = root / dataset.folder / path
        if not source.is_file():
            raise MissingDataError(f"mirror {mirror} lacks {dataset.folder}/{path} of data set {name!r}")
        if sha256_of(source) != sha256:
            raise ValueError(f"{source}: sha256 differs from the registry's ({sha256[:12]}...): not the {name!r} "
                             "file kvprobe was checked on")
        destination = target / path
        if destination.is_file() and sha256_of(destination) == sha256:
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.")
        os.close(handle)
        try:
            shutil.copyfile(source, temporary)
            os.replace(temporary, destination)
        finally:
            if os.path.exists(temporary):
                os.unlink(temporary)
    return target


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


# --------------------------------------------------------------------------- released data in its published form

#: The optional extra that installs the Hugging Face ``datasets`` library (with ``pyarrow`` and ``huggingface_hub``).
DATA_EXTRA = "kvprobe[data]"
#: ``hf:OWNER/NAME[@REVISION][:CONFIG]``; CONFIG may hold ``/`` (a file of the repository).
_HF = re.compile(r"hf:(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<revision>[^:@\s]+))?"
                 r"(?::(?P<config>[^@\s]+))?")


class MissingExtraError(ImportError):
    """An optional dependency is missing; the message names what needed it and the ``pip install`` that adds it."""


@dataclass(frozen=True)
class HFSource:
    """A Hugging Face dataset given as a source: ``hf:OWNER/NAME[@REVISION][:CONFIG]``.

    ``config`` is a configuration of the dataset (BABILong's ``"8k"``) or, for a publication shipped as
    plain JSON files, one file of the repository (LongMemEval's ``"longmemeval_s"``); each loader says which.

    Example::

        HFSource("RMT-team/babilong", revision="main")   # str(): "hf:RMT-team/babilong@main"
    """

    repo: str
    revision: str | None = None
    config: str | None = None

    def __str__(self) -> str:
        return (f"hf:{self.repo}" + (f"@{self.revision}" if self.revision else "")
                + (f":{self.config}" if self.config else ""))


def parse_hf(source: Any) -> HFSource | None:
    """``source`` as a Hugging Face dataset id, or None when it is not one (no ``hf:`` prefix: a local path or a
    study's keyword); a malformed id raises ValueError showing the form.

    Example::

        parse_hf("hf:RMT-team/babilong@a1b2c3:8k")   # HFSource("RMT-team/babilong", "a1b2c3", "8k")
        parse_hf("hf:ai-hyz/MemoryAgentBench")       # HFSource("ai-hyz/MemoryAgentBench")
        parse_hf("data/MQuAKE-CF-3k-v2.json")        # None
    """
    if not isinstance(source, str) or not source.startswith("hf:"):
        return None
    match = _HF.fullmatch(source)
    if match is None:
        raise ValueError(f"{source!r} is not a Hugging Face dataset id: write hf:OWNER/NAME[@REVISION][:CONFIG], "
                         "e.g. hf:RMT-team/babilong or hf:xiaowu0162/longmemeval:longmemeval_oracle")
    return HFSource(match["repo"], match["revision"], match["config"])


def _extra(module: str, what: str) -> Any:
    """``import module``, or MissingExtraError saying that ``what`` needs it and how to install it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        needs = "the Hugging Face `datasets` library" if module == "datasets" else \
            f"`{module}`, which comes with the Hugging Face `datasets` library"
        raise MissingExtraError(f"{what} needs {needs}, the optional extra: pip install '{DATA_EXTRA}'") from None


def hf_split(source: HFSource, split: str, config: str | None = None) -> list[dict[str, Any]]:
    """The rows of one split of a Hugging Face dataset, through ``datasets.load_dataset`` (downloaded once, then
    read from the ``datasets`` cache); ``config`` defaults to the source's own.

    Example::

        rows = hf_split(parse_hf("hf:RMT-team/babilong"), "qa3", config="8k")   # 100 input/question/target rows
    """
    datasets = _extra("datasets", f"reading {source}")
    table = datasets.load_dataset(source.repo, config or source.config, split=split, revision=source.revision)
    return [dict(row) for row in table]


def hf_file(source: HFSource, candidates: Sequence[str]) -> Path:
    """One file of a Hugging Face dataset repository, downloaded (cached by ``huggingface_hub``; with
    ``HF_HUB_OFFLINE=1`` a cached file is read without network): the file the source names after ``:``, else
    the first of ``candidates`` the repository holds. For publications shipped as plain JSON files, which the
    loader reads itself so that values keep the publisher's types.

    Example::

        path = hf_file(parse_hf("hf:xiaowu0162/longmemeval"), ["longmemeval_oracle.json", "longmemeval_oracle"])
    """
    hub = _extra("huggingface_hub", f"reading {source}")
    from huggingface_hub.utils import EntryNotFoundError

    names = [source.config] if source.config else list(candidates)
    for name in names:
        try:
            return Path(hub.hf_hub_download(source.repo, name, repo_type="dataset", revision=source.revision))
        except EntryNotFoundError:
            continue
    raise MissingDataError(f"{source}: the repository holds none of {', '.join(names)}"
                           + ("" if source.config else f"; name the file as {source}:FILE"))


def published_files(folder: str | Path, patterns: Sequence[str]) -> list[Path]:
    """The files of the first glob pattern (relative to ``folder``) that matches any, sorted (the shards of one
    split, such as ``data/Conflict_Resolution-00000-of-00002.parquet`` and ``-00001-``); none: an empty list.

    Example::

        published_files("babilong", ["8k/qa2.jsonl", "data/qa2/8k.json", "8k/qa2-*.parquet"])
    """
    for pattern in patterns:
        found = sorted(p for p in Path(folder).glob(pattern) if p.is_file())
        if found:
            return found
    return []


def read_records(path: str | Path, error: type[Exception] = ValueError, item: str = "record"
                 ) -> list[tuple[str, Any]]:
    """``(where, record)`` of every record of a published file: parquet (needs ``pyarrow``, in ``kvprobe[data]``),
    a JSON list, or JSON lines (what ``Dataset.to_json`` writes). ``where`` names the file and the record
    (``"<file> record #3"``, ``"<file>:4"`` for a line) for the loader's own messages; a file that is no such
    thing raises ``error`` naming it.

    Example::

        for where, row in read_records("data/qa2/8k.json"):
            need_fields(row, ("input", "question", "target"), where, ValueError)
    """
    path = Path(path)
    if path.suffix == ".parquet":
        parquet = _extra("pyarrow.parquet", f"reading {path} (parquet)")
        records = parquet.read_table(path).to_pylist()
        out = [(f"{path} {item} #{k}", r) for k, r in enumerate(records)]
    else:
        text = path.read_text(encoding="utf-8")
        if text.lstrip().startswith("["):
            try:
                records = json.loads(text)
            except json.JSONDecodeError as e:
                raise error(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
            out = [(f"{path} {item} #{k}", r) for k, r in enumerate(records)]
        else:
            out = []
            for lineno, line in enumerate(text.splitlines(), 1):
                if line.strip():
                    try:
                        out.append((f"{path}:{lineno}", json.loads(line)))
                    except json.JSONDecodeError as e:
                        raise error(f"{path}:{lineno}: not JSON ({e.msg})") from None
    if not out:
        raise error(f"{path}: no records")
    return out
