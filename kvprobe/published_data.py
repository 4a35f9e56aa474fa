"""Released data in its published form: the pieces every loader of a study's ``--source`` shares.

Released data sets a study reads through ``--source`` (BABILong's samples, MemoryAgentBench's
FactConsolidation, LongMemEval, MQuAKE) are not registered in :data:`kvprobe.data.DATASETS`: a user gives a
local file or folder in the form the publisher ships, or a Hugging Face dataset id
``hf:OWNER/NAME[@REVISION][:CONFIG]`` (:func:`parse_hf`). Here: :func:`read_records` (parquet, JSON lines, a
JSON list), :func:`published_files` (a file of a published folder layout), :func:`hf_split` (one split through
``datasets.load_dataset``) and :func:`hf_file` (one file of a dataset repository); the Hugging Face libraries
are the optional extra ``kvprobe[data]`` (:class:`MissingExtraError` says so when they are absent).

Example::

    from kvprobe.published_data import parse_hf, published_files, read_records
    rows = [r for f in published_files("babilong", ["8k/qa2.jsonl"]) for _, r in read_records(f)]
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .data import MissingDataError

__all__ = ["DATA_EXTRA", "HFSource", "MissingExtraError", "hf_file", "hf_split", "parse_hf", "published_files",
           "read_records"]

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
