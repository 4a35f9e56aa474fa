"""BABILong qa2/qa3 grading (spec partA section 2): official location parser plus EOS, strict EM.

Official parser (upstream ``babilong/metrics.py``, ``compare_answers``), reproduced as is:
lower-case the output; keep its first sentence (text before the first "."); cut it at
"<context>", "<example>" and "Question" (upstream splits the already lower-cased text on the
capitalised "Question", so that cut never fires; we keep this quirk to match upstream numbers);
collect every location label occurring in it as a substring; drop the labels named in the question
(mentions in the question are never targets); correct iff exactly one label remains and it is the
gold one.

Decisions (UNCLEAR in the spec, "official parser ... plus EOS"; "strict bare-location EM is a
sensitivity"):

* ``official_correct`` requires the generation to have stopped at EOS by default
  (``require_eos=False`` gives upstream's parser alone).
* ``strict_correct``: the whole output, stripped of surrounding whitespace and one trailing ".",
  equals the gold location (case-insensitive), and the generation stopped at EOS.
* Label vocabulary: every movement location and gold answer in the qa2/qa3 bAbI test files (it
  equals upstream's ``TASK_LABELS`` for qa2/qa3: bathroom, bedroom, garden, hallway, kitchen, office).
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from kvprobe.studies.datasets.babi import parse_babi
from .samples import BABI_FILES


@lru_cache(maxsize=4)
def _vocabulary(paths: tuple[str, ...]) -> frozenset[str]:
    labels: set[str] = set()
    for path in paths:
        for story in parse_babi(path):
            labels |= {f.location for f in story.facts if f.location is not None}
            labels |= {q.answer for q in story.questions}
            labels |= {q.before for q in story.questions if q.before is not None}
    return frozenset(label.lower() for label in labels)


def location_vocabulary(paths: Iterable[str | Path] | None = None) -> frozenset[str]:
    """Location labels of the bAbI files (default: the qa2 and qa3 test files)."""
    paths = BABI_FILES.values() if paths is None else paths
    return _vocabulary(tuple(sorted(str(p) for p in paths)))


def preprocess_output(output: str) -> str:
    """Upstream ``preprocess_output``: lower-case, first sentence, cut at example/context markers."""
    output = output.lower().split(".")[0]
    output = output.split("<context>")[0]
    output = output.split("<example>")[0]
    return output.split("Question")[0]  # never matches after lower(): upstream quirk, kept


def question_locations(question: str, labels: Iterable[str] | None = None) -> set[str]:
    """Labels named in the question (qa3: the "before the L" location)."""
    question = question.lower()
    return {label for label in (labels or location_vocabulary()) if label in question}


def output_locations(output: str, question: str, labels: Iterable[str] | None = None) -> set[str]:
    """Labels in the preprocessed output, minus those named in the question."""
    labels = set(labels or location_vocabulary())
    text = preprocess_output(output)
    return {label for label in labels if label in text} - question_locations(question, labels)


def predicted_location(output: str, question: str, labels: Iterable[str] | None = None) -> str | None:
    """The single location the official parser reads from ``output`` (None: none or several)."""
    found = output_locations(output, question, labels)
    return next(iter(found)) if len(found) == 1 else None


def official_correct(output: str, gold: str, question: str, stopped_at_eos: bool,
                     require_eos: bool = True, labels: Iterable[str] | None = None) -> bool:
    """Official BABILong location parser (question locations excluded), plus EOS by default."""
    if require_eos and not stopped_at_eos:
        return False
    return predicted_location(output, question, labels) == gold.lower()


def strict_correct(output: str, gold: str, stopped_at_eos: bool) -> bool:
    """Strict bare-location exact match: the output is just the gold location, ended by EOS."""
    text = output.strip()
    text = text[:-1].rstrip() if text.endswith(".") else text
    return stopped_at_eos and text.lower() == gold.strip().lower()
