"""MemoryAgentBench FactConsolidation rows: the released schema, a reader and a writer.

The released data is the Hugging Face dataset ``ai-hyz/MemoryAgentBench``, split
``Conflict_Resolution``: eight rows ``factconsolidation_{mh,sh}_{6k,32k,64k,262k}``, each with
four columns (confirmed from a full scan of the split published with
Hunk0724/MemoryAgentBench's inventory report; the paper uses the 32k and 64k tiers):

* ``context`` (str): the numbered facts, one per line (``"0. <fact>\\n1. <fact>..."``), possibly
  after a short preamble; the ``sh`` and ``mh`` rows of a tier share one byte-identical context;
* ``questions`` (list of str): 100 bare questions;
* ``answers`` (list of list of str): per question, the accepted answer strings;
* ``metadata`` (object): ``source`` (``"factconsolidation_mh_32k"``...), ``qa_pair_ids`` (one per
  question) and fields other splits use (``demo``, ``keypoints``... null here), kept as they are.

A source (:func:`load_rows`) is ``hf:ai-hyz/MemoryAgentBench[@REVISION]`` (the split through
``datasets.load_dataset``, the optional extra ``kvprobe[data]``), the dataset repository's folder (the split
ships as parquet, ``data/Conflict_Resolution-00000-of-0000N.parquet``: ``metadata`` a struct of every field
above, null where unused), one such parquet file, or the split exported to JSON (a JSON list of rows or JSON
lines, ``datasets``' ``to_json``). Tested on ``tests/fixtures/factconsolidation_released.json`` and the same
rows as the repository's parquet (``tests/fixtures/hf/ai-hyz/MemoryAgentBench``). Inferred, not confirmed:
the exact separator between a preamble and fact 0 (:func:`split_context` accepts a line break or
a space). Generated files add two optional metadata fields of ours (``kvprobe_previous_answers``,
``kvprobe_entity_ids``; :class:`FactRow`), which a released file does not have.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.published_data import hf_split, parse_hf, published_files, read_records
from kvprobe.studies.datasets.datafiles import need_fields, need_unique

#: The split of ``ai-hyz/MemoryAgentBench`` that holds the FactConsolidation rows.
SPLIT = "Conflict_Resolution"
#: Where the dataset repository's folder keeps the split (parquet shards).
SPLIT_FILES = (f"data/{SPLIT}-*.parquet",)
#: Columns of a released row.
ROW_KEYS = ("context", "questions", "answers", "metadata")
#: Metadata fields of ours (generated files); kept in :class:`FactRow`'s own attributes, not in ``metadata``.
EXTENSIONS = ("kvprobe_previous_answers", "kvprobe_entity_ids")
#: ``metadata.source`` of a FactConsolidation row: hop type and nominal length tier.
SOURCE_RE = re.compile(r"^factconsolidation_(?P<hop>sh|mh)_(?P<tier>\w+)$")
#: A numbered fact line: ``"<number>. <sentence>"``.
FACT_RE = re.compile(r"^(?P<number>\d+)\. (?P<text>.+)$")
#: Where the numbered facts begin: ``0.`` at the start of the context or after whitespace.
FIRST_FACT_RE = re.compile(r"(?:^|(?<=\s))0\. ")


class FactConsolidationFormatError(ValueError):
    """A FactConsolidation file or row does not follow the schema (the message names file, row and field)."""


@dataclass(frozen=True)
class Fact:
    """One numbered fact line of a context: its serial number and sentence (without the number)."""

    number: int
    text: str

    @property
    def line(self) -> str:
        """The line as it stands in the context: ``"12. <sentence>"``."""
        return f"{self.number}. {self.text}"


@dataclass(frozen=True)
class FactRow:
    """One released row (one hop type at one length tier).

    Attributes:
        context, questions, answers, metadata: the released columns (metadata kept whole).
        previous_answers: per question, outdated answers and aliases (generated files only: metadata
            ``kvprobe_previous_answers``; None for released rows).
        entity_ids: entity id(s) behind each name of the history (generated files: metadata
            ``kvprobe_entity_ids``; None for released rows).
    """

    context: str
    questions: list[str]
    answers: list[list[str]]
    metadata: dict[str, Any]
    previous_answers: list[list[str]] | None = None
    entity_ids: dict[str, list[str]] | None = field(default=None, compare=False)

    @property
    def source(self) -> str:
        return self.metadata["source"]

    @property
    def hop(self) -> str:
        """``"sh"`` (single-hop) or ``"mh"`` (multi-hop)."""
        return SOURCE_RE.match(self.source).group("hop")

    @property
    def tier(self) -> str:
        """The nominal length tier (``"32k"``)."""
        return SOURCE_RE.match(self.source).group("tier")

    @property
    def qa_pair_ids(self) -> list[str]:
        return list(self.metadata.get("qa_pair_ids") or [f"{self.source}_no{i}" for i in range(len(self.questions))])


def split_context(context: str) -> tuple[str, list[Fact | str]]:
    """``(preamble, lines)`` of a context: the text before fact 0, then every later non-empty line in
    order, a :class:`Fact` when it is numbered (``"12. <sentence>"``), else the stripped line itself
    (kept visible, never mapped).

    Example: ``split_context("Here is a list of facts: 0. A is B.\\n1. C is D.")`` gives
    ``("Here is a list of facts:", [Fact(0, "A is B."), Fact(1, "C is D.")])``.
    """
    start = FIRST_FACT_RE.search(context)
    if start is None:
        return context.strip(), []
    lines: list[Fact | str] = []
    for line in context[start.start():].splitlines():
        m = FACT_RE.match(line.strip())
        if m:
            lines.append(Fact(int(m.group("number")), m.group("text").strip()))
        elif line.strip():
            lines.append(line.strip())
    return context[:start.start()].strip(), lines


def facts_of(context: str) -> list[Fact]:
    """The numbered facts of a context, in the order they stand."""
    return [x for x in split_context(context)[1] if isinstance(x, Fact)]


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(s, str) for s in value)


def row_from_json(d: Any, where: str) -> FactRow:
    """One row from its JSON object; every error names ``where`` and the field."""
    need_fields(d, ROW_KEYS, where, FactConsolidationFormatError)
    meta = d["metadata"]
    need_fields(meta, ("source",), f"{where} metadata", FactConsolidationFormatError)
    if not isinstance(meta["source"], str) or not SOURCE_RE.match(meta["source"]):
        raise FactConsolidationFormatError(f"{where}: metadata.source {meta['source']!r} is not "
                                           "factconsolidation_<sh|mh>_<tier>")
    if not isinstance(d["context"], str) or not facts_of(d["context"]):
        raise FactConsolidationFormatError(f"{where}: context holds no numbered facts (\"0. ...\")")
    need_unique([f.number for f in facts_of(d["context"])], "context fact number", where,
                FactConsolidationFormatError)
    questions, answers = d["questions"], d["answers"]
    if not _strings(questions) or not questions:
        raise FactConsolidationFormatError(f"{where}: questions must be a non-empty list of strings")
    if not isinstance(answers, list) or len(answers) != len(questions):
        raise FactConsolidationFormatError(f"{where}: answers must be a list as long as questions "
                                           f"({len(questions)})")
    for i, a in enumerate(answers):
        if not _strings(a) or not a or not all(s.strip() for s in a):
            raise FactConsolidationFormatError(f"{where}: answers[{i}] must be a non-empty list of non-empty strings")
    ids = meta.get("qa_pair_ids")
    if ids is not None and (not _strings(ids) or len(ids) != len(questions)):
        raise FactConsolidationFormatError(f"{where}: metadata.qa_pair_ids must list one string per question")
    previous = meta.get("kvprobe_previous_answers")
    if previous is not None and (not isinstance(previous, list) or len(previous) != len(questions)
                                 or not all(_strings(p) for p in previous)):
        raise FactConsolidationFormatError(f"{where}: metadata.kvprobe_previous_answers must list one list of "
                                           "strings per question")
    entity_ids = meta.get("kvprobe_entity_ids")
    if entity_ids is not None and (not isinstance(entity_ids, dict) or not all(_strings(v) for v in entity_ids.values())):
        raise FactConsolidationFormatError(f"{where}: metadata.kvprobe_entity_ids must map names to lists of ids")
    released = {k: v for k, v in meta.items() if k not in EXTENSIONS}
    return FactRow(d["context"], list(questions), [list(a) for a in answers], released,
                   None if previous is None else [list(p) for p in previous], entity_ids)


def load_rows(source: str | Path) -> list[FactRow]:
    """The FactConsolidation rows of a source (module docstring: ``hf:`` id, repository folder, parquet, JSON list
    or JSON lines); other rows of the ``Conflict_Resolution`` split, if any, are refused by name.

    Example: ``load_rows("tests/fixtures/factconsolidation_released.json")[0].source``
    is ``"factconsolidation_sh_32k"``; ``load_rows("hf:ai-hyz/MemoryAgentBench")`` reads the released split.
    """
    hf = parse_hf(str(source))
    if hf is not None:
        records = [(f"{hf} {SPLIT} row #{i}", r) for i, r in enumerate(hf_split(hf, SPLIT))]
    else:
        path = Path(source)
        files = published_files(path, SPLIT_FILES) if path.is_dir() else [path]
        if not files:
            raise FactConsolidationFormatError(f"{path}: no {', '.join(SPLIT_FILES)} (a folder must be the dataset "
                                               "repository ai-hyz/MemoryAgentBench; or give a parquet or JSON file)")
        records = [r for file in files for r in read_records(file, FactConsolidationFormatError, item="row")]
    if not records:
        raise FactConsolidationFormatError(f"{source}: no rows")
    return [row_from_json(d, where) for where, d in records]


def to_json(row: FactRow) -> dict[str, Any]:
    """The row as a JSON-ready dict in the released schema (inverse of :func:`row_from_json`)."""
    meta = dict(row.metadata)
    if row.previous_answers is not None:
        meta["kvprobe_previous_answers"] = row.previous_answers
    if row.entity_ids is not None:
        meta["kvprobe_entity_ids"] = row.entity_ids
    return {"context": row.context, "questions": list(row.questions), "answers": [list(a) for a in row.answers],
            "metadata": meta}


def save_rows(rows: list[FactRow], path: str | Path) -> None:
    """Write rows as a JSON list (what :func:`load_rows` reads)."""
    Path(path).write_text(json.dumps([to_json(r) for r in rows], indent=1, ensure_ascii=False) + "\n",
                          encoding="utf-8")
