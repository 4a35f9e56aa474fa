"""The published BABILong samples (spec partA section 2: "all 100 published examples in each of qa2
and qa3 at 8k and 32k, retaining the original prompt bodies, questions, and targets").

Released format (the Hugging Face data set ``RMT-team/babilong``: one config per length, ``0k``, ``1k``,
..., ``128k`` and longer, one split per task, ``qa1`` ... ``qa10`` (``0k``: up to ``qa20``), 100 records each,
columns ``input`` (the facts among book text), ``question`` and ``target``, all strings). A source is

* ``hf:RMT-team/babilong[@REVISION]`` (or another repository with the same configs and splits, such as
  ``RMT-team/babilong-1k-samples``): each (length, task) is read through ``datasets.load_dataset`` (the
  optional extra ``kvprobe[data]``); the lengths come from the study's ``released_lengths``, so the id names no
  config;
* a folder in the published form, each (length, task) in the first layout found of :data:`LAYOUTS`: our
  export per length and task (``datasets``' ``to_json``: ``8k/qa2.jsonl``), the dataset repository as it
  ships (``data/qa2/8k.json``), or its parquet layout (``8k/qa2-00000-of-00001.parquet``, the
  ``babilong-1k-samples`` repository and early revisions). A JSON file is JSON lines or one JSON list
  (UNCLEAR which one the repository's files are; both are read).

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

    samples = load_released("babilong", "qa3", "8k")               # a local folder: the 100 records, facts located
    samples = load_released("hf:RMT-team/babilong", "qa3", "8k")   # the same records from the Hub
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kvprobe.published_data import hf_split, parse_hf, published_files, read_records
from kvprobe.studies.datasets.datafiles import need_fields

from kvprobe.studies.datasets.babi import Story
from .samples import BABI_FILES, CountTokens, Sample, _stories, question_list, test_100_pairs, word_count_tokens

#: The fields of a released record.
RECORD_FIELDS = ("input", "question", "target")
#: Context lengths the release names (config names of RMT-team/babilong).
RELEASED_LENGTHS = ("0k", "1k", "2k", "4k", "8k", "16k", "32k", "64k", "128k", "256k", "512k", "1M")
#: Where a folder in the published form keeps one task at one length, in the order tried (module docstring).
LAYOUTS = ("{length}/{task}.jsonl", "{length}/{task}.json", "data/{task}/{length}.json", "{length}/{task}-*.parquet")


class BabilongFormatError(ValueError):
    """A released BABILong file is missing, malformed, or does not match the bAbI test release."""


def length_tokens(name: str) -> int:
    """The nominal context length of a released config name: ``"8k"`` -> 8000, ``"1M"`` -> 1000000."""
    match = re.fullmatch(r"(\d+)([kM])", name)
    if match is None:
        raise BabilongFormatError(f"length {name!r} is not a BABILong config name ({', '.join(RELEASED_LENGTHS)})")
    return int(match.group(1)) * (1000 if match.group(2) == "k" else 1_000_000)


def released_records(source: str | Path, task: str, length: str) -> list[tuple[str, dict[str, Any]]]:
    """``(where, record)`` of every released record of ``task`` at ``length`` in ``source`` (a folder or an
    ``hf:`` id, module docstring), each checked for its fields; a missing or malformed file raises
    :class:`BabilongFormatError` naming it and what was looked for.

    Example: ``released_records("hf:RMT-team/babilong", "qa2", "8k")[0][1]["target"]``.
    """
    hf = parse_hf(str(source))
    if hf is not None:
        if hf.config is not None:
            raise BabilongFormatError(f"{hf}: the lengths (configs) come from the released lengths; give "
                                      f"hf:{hf.repo} without :{hf.config}")
        records = [(f"{hf} {length}/{task} record #{k}", r) for k, r in enumerate(hf_split(hf, task, length))]
    else:
        if not Path(source).is_dir():
            raise BabilongFormatError(f"{source}: not a folder (give the released samples' folder, laid out as "
                                      f"{LAYOUTS[0].format(task=task, length=length)} or as the dataset repository, "
                                      "or hf:RMT-team/babilong)")
        patterns = [layout.format(task=task, length=length) for layout in LAYOUTS]
        files = published_files(source, patterns)
        if not files:
            raise BabilongFormatError(f"{source}: no {', '.join(patterns)} (expected the released BABILong records "
                                      "per length and task; see kvprobe.studies.babilong.data)")
        records = [r for file in files for r in read_records(file, BabilongFormatError)]
    if not records:
        raise BabilongFormatError(f"{source}: no {length}/{task} records")
    for where, record in records:
        need_fields(record, RECORD_FIELDS, where, BabilongFormatError)
        for key in RECORD_FIELDS:
            if not isinstance(record[key], str):
                raise BabilongFormatError(f"{where}: field {key!r} must be a string, got {type(record[key]).__name__}")
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


def load_released(source: str | Path, task: str, length: str, n: int | None = None,
                  count_tokens: CountTokens | None = None) -> list[Sample]:
    """The first ``n`` released records of ``task`` at ``length`` in ``source`` (a folder or an ``hf:`` id) as
    samples with located facts (module docstring)."""
    if task not in BABI_FILES:
        raise BabilongFormatError(f"task {task!r}: the released loader reads {', '.join(BABI_FILES)}")
    records = released_records(source, task, length)[:n]
    stories = _stories(str(BABI_FILES[task]))
    official = test_100_pairs(task, stories)
    everything = [(i, *pair) for i, pair in enumerate(question_list(stories))]
    count = count_tokens or word_count_tokens
    out = []
    for k, (where, record) in enumerate(records):
        tries = ([official[k]] if k < len(official) else []) + everything
        found = next(((index, story, q, spans) for index, story, q in tries
                      if (spans := _match(record, stories[story], q)) is not None), None)
        if found is None:
            raise BabilongFormatError(
                f"{where}: no {task} test question with question {record['question']!r}, target "
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
