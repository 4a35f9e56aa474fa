"""The cache edits a recognition store can be read after (``kvprobe extract --edit``).

Each edit is a cache operation of :mod:`kvprobe.interventions` applied to the
history of one joint record (A, the separator, then B) before B's rows are read:

========== ============== ==========================================================================
edit       condition      B's stored rows
========== ============== ==========================================================================
rebuild    ``rebuild:A``  rebuilt: recomputed at their original positions with A hidden from them
compact    ``compact:A``  re-rotated: A's rows deleted, B's keys rotated by -len(A) (values kept)
recompute  ``recompute:A`` recomputed: the text without A (and its separator) prefilled again
zero       ``zero-kv:A``  kept: A's keys and values overwritten with 0; B's own rows unchanged
========== ============== ==========================================================================

``zero`` leaves B's rows as they were (they were computed before A was zeroed), so a
probe reading them cannot change: a null check of the edit pipeline.

Example:
    >>> [e.name for e in parse_edits("rebuild,compact")]
    ['rebuild', 'compact']
"""

from __future__ import annotations

from functools import partial

from kvprobe.extract.capture import Edit
from kvprobe.interventions.registry import parse_condition

#: edit name -> (condition on the joint record's history, what happens to B's rows)
RECORD_EDITS: dict[str, tuple[str, str]] = {
    "rebuild": ("rebuild:A", "rebuilt"),
    "compact": ("compact:A", "re-rotated"),
    "recompute": ("recompute:A", "recomputed"),
    "zero": ("zero-kv:A", "kept"),
}


def record_edit(name: str) -> Edit:
    """The :class:`~kvprobe.extract.capture.Edit` of one name of :data:`RECORD_EDITS`."""
    if name not in RECORD_EDITS:
        raise ValueError(f"unknown edit {name!r}; known: {', '.join(RECORD_EDITS)}")
    condition, action = RECORD_EDITS[name]
    return Edit(name, condition, action, partial(parse_condition, condition))


def parse_edits(text: str) -> list[Edit]:
    """Edits from a comma-separated list (``rebuild,compact,recompute``); unknown or repeated names raise
    ``ValueError`` naming them (no model is needed to check)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"no edit named in {text!r}; known: {', '.join(RECORD_EDITS)}")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"edit {repeated[0]!r} named twice")
    return [record_edit(n) for n in names]
