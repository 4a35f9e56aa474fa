"""The published BABILong samples (spec partA section 2: "all 100 published examples in each of qa2
and qa3 at 8k and 32k, retaining the original prompt bodies, questions, and targets").

Released format (the Hugging Face data set ``RMT-team/babilong``, one config per length such as
``8k``, one split per task such as ``qa2``, 100 records each): records with the fields ``input``
(the facts among book text), ``question`` and ``target``. Saved with
``datasets``' ``to_json`` they are JSON lines; this loader reads a folder laid out as
``<folder>/<length>/<task>.jsonl`` (or ``.json``, JSON lines or one JSON list), e.g.::

    babilong/8k/qa2.jsonl
    babilong/8k/qa3.jsonl
    babilong/32k/qa3.jsonl

Each record becomes a :class:`~.samples.Sample` whose facts are located in ``input``:

* record ``k`` of a split is the ``k``-th of the official 100 test indices
  (``test_100_idxs.json``, question ``i`` of the bAbI test file = story ``i // 5``; inferred from
  upstream's ``get_dataset_df``, as :mod:`.samples` does). Its story's facts before the question
  must occur in ``input`` in order, and its question and answer must equal the record's (the paper:
  "all 400 extracted fact sequences, questions, and answers match the original bAbI test release");
* if they do not, every question of the test file with the record's question and answer is tried
  in file order, and the first whose facts all occur in order is taken;
* otherwise :class:`BabilongFormatError` names the file and record.

The text between located facts is the record's book text (``filler_spans``: each stretch between
facts, stripped of surrounding whitespace), which the neutral mask draws from.

Example::

    samples = load_released("babilong", "qa3", "8k")   # the 100 records, facts located
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from kvprobe.studies.datasets.datafiles import need_fields

from kvprobe.studies.datasets.babi import Story
from .samples import BABI_FILES, CountTokens, Sample, _stories, question_list, test_100_pairs, word_count_tokens

#: The fields of a released record.
RECORD_FIELDS = ("input", "question", "target")
#: Context lengths the release names (config names of RMT-team/babilong).
RELEASED_LENGTHS = ("0k", "1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k", "1M")


class BabilongFormatError(ValueError):
    """A released BABILong file is missing, malformed, or does not match the bAbI test release."""


def length_tokens(name: str) -> int:
    """The nominal context length of a released config name: ``"8k"`` -> 8000, ``"1M"`` -> 1000000."""
    match = re.fullmatch(r"(\d+)([kM])", name)
    if match is None:
        raise BabilongFormatError(f"length {name!r} is not a BABILong config name ({', '.join(RELEASED_LENGTHS)})")
    return int(match.group(1)) * (1000 if match.group(2) == "k" else 1_000_000)


def split_file(folder: str | Path, task: str, length: str) -> Path:
    """``<folder>/<length>/<task>.jsonl`` (or ``.json``), or a named error listing what was looked for."""
    base = Path(folder) / length
    for suffix in (".jsonl", ".json"):
        path = base / f"{task}{suffix}"
        if path.exists():
            return path
    raise BabilongFormatError(f"{folder}: no {length}/{task}.jsonl or {length}/{task}.json (expected the released "
                              "BABILong records saved per length and task; see kvprobe.studies.babilong.data)")


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """The records of one released file (JSON lines or one JSON list), each checked for its fields."""
    text = Path(path).read_text(encoding="utf-8")
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as e:
            raise BabilongFormatError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
        where = [f"{path} record #{k}" for k in range(len(records))]
    else:
        records, where = [], []
        for lineno, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise BabilongFormatError(f"{path}:{lineno}: not JSON ({e.msg})") from None
            where.append(f"{path}:{lineno}")
    if not records:
        raise BabilongFormatError(f"{path}: no records")
    for record, w in zip(records, where):
        need_fields(record, RECORD_FIELDS, w, BabilongFormatError)
        for key in RECORD_FIELDS:
            if not isinstance(record[key], str):
                raise BabilongFormatError(f"{w}: field {key!r} must be a string, got {type(record[key]).__name__}")
    return records


def locate_facts(text: str, facts: list[str]) -> list[tuple[int, int]] | None:
    """The ``(start, end)`` of each fact sentence in ``text``, found in order, or None if one is missing."""
    spans, cursor = [], 0
    for fact in facts:
        start = text.find(fact, cursor)
        if start < 0:
            return None
        spans.append((start, start + len(fact)))
        cursor = start + len(fact)
    return spans


def _between(text: str, fact_spans: list[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The stripped stretches of ``text`` between facts (the book text)."""
    out, cursor = [], 0
    for start, end in [*fact_spans, (len(text), len(text))]:
        piece = text[cursor:start]
        if piece.strip():
            lead = len(piece) - len(piece.lstrip())
            out.append((cursor + lead, cursor + len(piece.rstrip())))
        cursor = end
    return tuple(out)


def _match(record: dict[str, Any], story: Story, question_index: int) -> list[tuple[int, int]] | None:
    question = story.questions[question_index]
    if question.text != record["question"].strip() or question.answer != record["target"].strip():
        return None
    return locate_facts(record["input"], [f.text for f in story.facts[: question.position]])


def load_released(folder: str | Path, task: str, length: str, n: int | None = None,
                  count_tokens: CountTokens | None = None) -> list[Sample]:
    """The first ``n`` records of ``<folder>/<length>/<task>`` as samples with located facts (module docstring)."""
    if task not in BABI_FILES:
        raise BabilongFormatError(f"task {task!r}: the released loader reads {', '.join(BABI_FILES)}")
    path = split_file(folder, task, length)
    records = read_records(path)[:n]
    stories = _stories(str(BABI_FILES[task]))
    official = test_100_pairs(task, stories)
    everything = [(i, *pair) for i, pair in enumerate(question_list(stories))]
    count = count_tokens or word_count_tokens
    out = []
    for k, record in enumerate(records):
        tries = ([official[k]] if k < len(official) else []) + everything
        found = next(((index, story, q, spans) for index, story, q in tries
                      if (spans := _match(record, stories[story], q)) is not None), None)
        if found is None:
            raise BabilongFormatError(
                f"{path} record #{k}: no {task} test question with question {record['question']!r}, target "
                f"{record['target']!r} and its story's facts in order in the input (the paper checks all 400)")
        index, story, q, spans = found
        question = stories[story].questions[q]
        facts = stories[story].facts[: question.position]
        context = record["input"]
        out.append(Sample(task=task, story_index=story, question_index=q, sample_index=index,
                          question=question.text, answer=question.answer, facts=tuple(facts), context=context,
                          fact_spans=tuple((j, s, e) for j, (s, e) in enumerate(spans)),
                          filler_spans=_between(context, spans), target_tokens=length_tokens(length),
                          n_tokens=count(context), filler_start=0, seed=0, question_before=question.before))
    return out
