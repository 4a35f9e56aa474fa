"""Contextual MQuAKE (paper appendix "Repeated Updates and Contextual Multi-Hop Questions").

Data side only: the released schema and loader (``schema``), a fictional generator in the
same schema (``generate``), exact strings (``strings``), and history segments, questions
and scoring (``history``).
"""

from kvprobe.studies.datasets.mquake.generate import dataset_hash, generate_cases
from .history import (
    build_history,
    contains_answer,
    history_text,
    normalize_answer,
    normalized_exact_match,
    questions,
    retained_text,
    source_segments,
    value_spans,
)
from kvprobe.studies.datasets.mquake.schema import MQuAKECase, MQuAKEFormatError, Orig, Rewrite, SingleHop, Target, load_mquake, save_mquake, to_json

__all__ = [
    "MQuAKECase", "MQuAKEFormatError", "Orig", "Rewrite", "SingleHop", "Target", "build_history",
    "contains_answer", "dataset_hash", "generate_cases", "history_text", "load_mquake",
    "normalize_answer", "normalized_exact_match", "questions", "retained_text", "save_mquake",
    "source_segments", "to_json", "value_spans",
]
