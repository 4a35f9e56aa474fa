"""Checks that two store groups can be compared case by case (transfer between checkpoints, across edits).

Example:
    >>> same_records(g, g, "transfer")  # doctest: +SKIP
"""

from __future__ import annotations

import numpy as np

from kvprobe.extract import StoreError, StoreGroup


def same_records(a: StoreGroup, b: StoreGroup, what: str) -> None:
    """Raise :class:`StoreError` unless two groups hold the same cases and token ids (a readout of one
    can score the other case by case)."""
    if not np.array_equal(a.group["records/token_ids"][()], b.group["records/token_ids"][()]) or \
            list(a.cases()["case_id"]) != list(b.cases()["case_id"]):
        raise StoreError(f"{what} needs identical cases and token ids; {a.name} and {b.name} differ "
                         "(different tokenizers or datasets)")


def same_joint_records(a: StoreGroup, b: StoreGroup) -> None:
    """Raise :class:`StoreError` unless two groups hold the same cases with the same token ids of B read after A."""
    if list(a.cases()["case_id"]) != list(b.cases()["case_id"]) or any(
            not np.array_equal(a.token_ids(ra), b.token_ids(rb))
            for ra, rb in zip(a.cases()["record_ab"], b.cases()["record_ab"])):
        raise StoreError(f"{a.name} and {b.name} differ in their cases or in the tokens of B read after A")


def check_edited(original: StoreGroup, edited: dict[str, StoreGroup]) -> None:
    """Raise :class:`StoreError` unless every group of ``edited`` holds ``original``'s cases read after a cache
    edit, extracted from the same cases and weights."""
    if original.edit is not None:
        raise StoreError(f"{original.name} is an edited group; train on the original caches")
    if not edited:
        raise StoreError(f"{original.name}: no edited groups to score (kvprobe extract --edit ..., or "
                         "FeatureStore.add(..., edit=...))")
    for g in edited.values():
        if g.edit is None:
            raise StoreError(f"{g.name} holds original caches, not an edit of {original.name}")
        if g.attrs.get("dataset_hash") != original.attrs.get("dataset_hash") or \
                g.attrs.get("weight_hash") != original.attrs.get("weight_hash"):
            raise StoreError(f"{g.name} was extracted from other cases or weights than {original.name}")
        same_joint_records(original, g)
