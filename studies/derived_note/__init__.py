"""Derived note and selective refresh (paper appendix "Recomputing States After a Derived Note",
app:v5_propagation, L5819-5870; spec partD section 8).

``groups`` (seeded, counterbalanced groups and questions), ``strings`` (every
template, all UNCLEAR in the paper), ``history`` (prompts, the equal-token
neutral interval, the six conditions), ``grading`` (exact JSON answer field),
``study`` (the runner protocol: :class:`DerivedNoteStudy`, with its operation
costs as a side log) and ``summary`` (paired group bootstrap, key contrasts,
``report.md``).
"""

from .grading import Grade, grade
from .data import NOTES, QUERIES, Case, Group, Query, dataset_hash, generate_cases, generate_groups, queries
from .history import CONDITIONS, NeutralInterval, NeutralMatchError, build_prompt, conditions, neutral_interval
from .study import DerivedNoteStudy
from .summary import format_report, summarize

__all__ = [
    "CONDITIONS", "NOTES", "QUERIES", "Case", "DerivedNoteStudy", "Grade", "Group", "NeutralInterval",
    "NeutralMatchError", "Query", "build_prompt", "conditions", "dataset_hash", "format_report", "generate_cases",
    "generate_groups", "grade", "neutral_interval", "queries", "summarize",
]
