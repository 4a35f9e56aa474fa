"""What every loader of a released data file shares: checking an object's fields and ids with an error that
names the file and the entry (MQuAKE, OAKS, MINTEval, revision histories, FactConsolidation)."""

from __future__ import annotations

from typing import Any


def need_fields(obj: Any, keys: tuple[str, ...], where: str, error: type[ValueError]) -> None:
    """Raise ``error`` naming ``where`` unless ``obj`` is a JSON object holding every key.

    Example: ``need_fields({"a": 1}, ("a", "b"), "file.json case #3", ValueError)`` raises
    ``ValueError("file.json case #3: missing field(s) b")``.
    """
    if not isinstance(obj, dict):
        raise error(f"{where}: expected an object, got {type(obj).__name__}")
    missing = [k for k in keys if k not in obj]
    if missing:
        raise error(f"{where}: missing field(s) {', '.join(missing)}")


def need_unique(ids: list[Any], what: str, where: str, error: type[ValueError]) -> None:
    """Raise ``error`` naming ``where`` when an id in ``ids`` repeats.

    Example: ``need_unique(["a", "a"], "event id", "file.json session #0", ValueError)`` raises
    ``ValueError("file.json session #0: event id 'a' repeats")``.
    """
    seen: set[Any] = set()
    for i in ids:
        if i in seen:
            raise error(f"{where}: {what} {i!r} repeats")
        seen.add(i)
