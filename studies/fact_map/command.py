"""``kvprobe map``: the fact map of one history, from a JSON file or the paper's quantity example.

Input file (``--input``), checked before any model loads::

    {
      "segments": [["A", "..."], ["note", "..."], ["B", "..."]],   # named history segments, in order
      "source": "A",                                              # the segment whose effect is mapped
      "question": "What is ...?",
      "candidates": ["{\\"answer\\": \\"new\\"}", "{\\"answer\\": \\"old\\"}"],   # (current, old)
      "system": "Answer from the records.",                        # optional
      "chat": true                                                 # optional (default true: the chat template)
    }

Without ``--input`` the map is of the paper's worked quantity example (segments A,
inspection, note, B; the current question; 628 vs 159 minutes). Output: the table on
standard output, and with ``--out DIR`` ``map.json``, ``map.md`` and ``map.png`` (the
pieces x layer bands heatmap), written atomically.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kvprobe
from kvprobe.files import atomic_write_text
from .analysis import FactMap, fact_map
from kvprobe.studies.common.answers import canonical_answer
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.datasets.quantity_task.example import EXAMPLE, build_prompt, example_case
from kvprobe.studies.datasets.quantity_task import tasks
from kvprobe.studies.datasets.quantity_task.tasks import ITEMS as QUANTITY_ITEMS


class MapInputError(ValueError):
    """A ``kvprobe map --input`` file that cannot be used (the message names the file and the field)."""


@dataclass(frozen=True)
class MapInput:
    """One history to map: its prompt, the source segment, the question and (current, old) candidates."""

    prompt: kvprobe.Prompt
    source: str
    question: str
    candidates: tuple[str, str]
    label: str
    #: Where the history comes from, as the map's report says it (an ``Items:`` line).
    items: str = ""


def example_input(unit_from_a: bool = True) -> MapInput:
    """The paper's worked quantity example (L3795-3815), source A, the current question."""
    current = next(q for q in tasks.queries(example_case(unit_from_a)) if q.role == "current")
    return MapInput(build_prompt(unit_from_a), "A", current.question,
                    (canonical_answer(EXAMPLE.current_value), canonical_answer(EXAMPLE.old_value)),
                    f"quantity example {EXAMPLE.group_id}", QUANTITY_ITEMS.line())


def load_input(path: str | Path) -> MapInput:
    """Read and check a map input file (see the module docstring); :class:`MapInputError` names the problem."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise MapInputError(f"--input {path}: no such file") from None
    except json.JSONDecodeError as err:
        raise MapInputError(f"--input {path}: not JSON (line {err.lineno}: {err.msg})") from None
    if not isinstance(data, dict):
        raise MapInputError(f"--input {path}: expected a JSON object with segments, source, question, candidates")

    def need(key: str, kind: type) -> Any:
        if key not in data:
            raise MapInputError(f"--input {path}: missing field {key!r}")
        if not isinstance(data[key], kind):
            raise MapInputError(f"--input {path}: field {key!r} must be a {kind.__name__}")
        return data[key]

    segments = need("segments", list)
    if not segments or not all(isinstance(s, list) and len(s) == 2 and all(isinstance(x, str) for x in s)
                               for s in segments):
        raise MapInputError(f"--input {path}: 'segments' must be a non-empty list of [name, text] pairs")
    names = [name for name, _ in segments]
    if len(set(names)) != len(names):
        raise MapInputError(f"--input {path}: segment names repeat: {names}")
    source = need("source", str)
    if source not in names:
        raise MapInputError(f"--input {path}: source {source!r} is not a segment ({', '.join(names)})")
    if names.index(source) == len(names) - 1:
        raise MapInputError(f"--input {path}: source {source!r} is the last segment; nothing comes after it to map")
    candidates = need("candidates", list)
    if len(candidates) != 2 or not all(isinstance(c, str) and c for c in candidates):
        raise MapInputError(f"--input {path}: 'candidates' must be two non-empty strings (current, old)")
    system, chat = data.get("system"), data.get("chat", True)
    if system is not None and not isinstance(system, str):
        raise MapInputError(f"--input {path}: field 'system' must be a string")
    if not isinstance(chat, bool):
        raise MapInputError(f"--input {path}: field 'chat' must be true or false")
    prompt = study_prompt([(name, text) for name, text in segments], system=system, chat=chat)
    return MapInput(prompt, source, need("question", str), (candidates[0], candidates[1]), path.name,
                    f"Items: the input file `{path.name}`.")


def run_map(model: kvprobe.Model, item: MapInput, n_bands: int) -> FactMap:
    """Prefill ``item``'s history and map its source."""
    history = model.prefill(item.prompt)
    return fact_map(model, history, item.source, item.question, list(item.candidates), n_bands=n_bands)


def report(fm: FactMap, item: MapInput, model: kvprobe.Model) -> str:
    """``map.md``: what was mapped, the pieces, the table and the heatmap as a table."""
    pieces = ", ".join(f"{label} [{s.start}, {s.end})" for label, s in fm.pieces)
    lines = [f"# Fact map: {item.label} on {model.name}", "", *([item.items, ""] if item.items else []),
             f"Source {item.source!r} (tokens [{fm.source.start}, {fm.source.end})); later pieces: {pieces}. "
             f"Question: {item.question!r}; candidates (current, old): {list(item.candidates)}.", "",
             f"Target ({fm.target}) minus mask: {fm.target_effect:+.3f} nats. Recovered = change vs mask / that "
             "effect (empty below the minimum effect of "
             f"{fm.min_effect} nats). Prepare times are wall-clock seconds on this machine.", "", fm.table(), "",
             "Recovery of each piece rebuilt with the source hidden in one layer band only:", "",
             "| piece | " + " | ".join(f"layers {lo}-{hi}" for lo, hi in fm.bands) + " |",
             "|---|" + "---|" * len(fm.bands)]
    for (label, _), row in zip(fm.pieces, fm.heatmap()):
        lines.append(f"| {label} | " + " | ".join("" if x != x else f"{x:+.2f}" for x in row) + " |")
    return "\n".join(lines) + "\n"


def write_outputs(fm: FactMap, item: MapInput, model: kvprobe.Model, out: str | Path) -> Path:
    """``map.json``, ``map.md`` and ``map.png`` under ``out``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "map.json", json.dumps({"model": model.name, "input": item.label, **fm.to_json()},
                                                   indent=1) + "\n")
    atomic_write_text(out / "map.md", report(fm, item, model))
    from .figure import draw_map

    draw_map(json.loads((out / "map.json").read_text()), out / "map.png")
    return out
