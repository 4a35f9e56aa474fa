"""The workload's five conditions, the paper's policies (partE E6, L6433-6435), as a decision table.

When B arrives a condition may run the detector, then either *appends* B to the resident
cache or *re-encodes* the history text without the Time-1 section; each question is then
answered with full access or with record A hidden:

| policy | detector | update | access per question |
|---|---|---|---|
| ``keep-all`` | no | append | full |
| ``detector-mask`` | yes | append | A hidden from every question if the detector fired |
| ``query-aware-mask`` | yes | append | A hidden from current questions if it fired (supplied role labels; historical and unrelated questions keep full access) |
| ``detector-recompute`` | yes | re-encode without A if it fired, else append | full |
| ``oracle-recompute`` | no | re-encode without A when the true label says replacement (``oracle="label"``, the paper's "oracle-label recomputation", L6473) or always (``oracle="always"``) | full |

Recompute filters once, when the update arrives (L6441-6442); questions never change
the cache and answers are not appended.
"""

from __future__ import annotations

CONDITIONS = ("keep-all", "detector-mask", "query-aware-mask", "detector-recompute", "oracle-recompute")
DETECTOR_CONDITIONS = frozenset({"detector-mask", "query-aware-mask", "detector-recompute"})
ORACLE_RULES = ("label", "always")


def check_condition_set(condition_set: tuple[str, ...] | list[str]) -> None:
    """Raise ``ValueError`` for unknown or repeated condition names, or a set without keep-all."""
    unknown = [c for c in condition_set if c not in CONDITIONS]
    if unknown:
        raise ValueError(f"unknown condition {unknown[0]!r}; choose from {list(CONDITIONS)}")
    if len(set(condition_set)) != len(condition_set):
        raise ValueError(f"repeated conditions in {list(condition_set)}")
    if "keep-all" not in condition_set:
        raise ValueError("the conditions must include keep-all (the paired reference)")


def uses_detector(condition: str) -> bool:
    """Whether ``condition`` runs the detector when B arrives."""
    return condition in DETECTOR_CONDITIONS


def reencodes(condition: str, fired: bool, label: int, oracle: str = "label") -> bool:
    """Whether ``condition`` re-encodes the text without A (else it appends B to the resident cache)."""
    if oracle not in ORACLE_RULES:
        raise ValueError(f"oracle must be one of {ORACLE_RULES}, got {oracle!r}")
    if condition == "detector-recompute":
        return fired
    if condition == "oracle-recompute":
        return oracle == "always" or bool(label)
    return False


def masks(condition: str, fired: bool, kind: str) -> bool:
    """Whether ``condition`` hides record A from a question of ``kind`` (on the appended cache)."""
    if condition == "detector-mask":
        return fired
    if condition == "query-aware-mask":
        return fired and kind == "current"
    return False


def operation(condition: str, kind: str, fired: bool, label: int, oracle: str = "label") -> str:
    """What a question of ``kind`` reads: ``"full"``, ``"mask"`` (A hidden) or ``"recompute"`` (text without A),
    named as the registry of conditions names them (``kvprobe.interventions.CONDITIONS``)."""
    if reencodes(condition, fired, label, oracle):
        return "recompute"
    return "mask" if masks(condition, fired, kind) else "full"
