"""The workload's five policies (paper partE E6, L6433-6435) as a decision table.

When B arrives a policy may run the detector, then either *appends* B to the resident
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

POLICIES = ("keep-all", "detector-mask", "query-aware-mask", "detector-recompute", "oracle-recompute")
DETECTOR_POLICIES = frozenset({"detector-mask", "query-aware-mask", "detector-recompute"})
ORACLE_RULES = ("label", "always")
OPERATIONS = ("full", "mask", "recompute")


def check_policies(policies: tuple[str, ...] | list[str]) -> None:
    """Raise ``ValueError`` for unknown or repeated policy names, or a list without keep-all."""
    unknown = [p for p in policies if p not in POLICIES]
    if unknown:
        raise ValueError(f"unknown policy {unknown[0]!r}; choose from {list(POLICIES)}")
    if len(set(policies)) != len(policies):
        raise ValueError(f"repeated policies in {list(policies)}")
    if "keep-all" not in policies:
        raise ValueError("the policies must include keep-all (the paired reference)")


def uses_detector(policy: str) -> bool:
    """Whether ``policy`` runs the detector when B arrives."""
    return policy in DETECTOR_POLICIES


def reencodes(policy: str, fired: bool, label: int, oracle: str = "label") -> bool:
    """Whether ``policy`` re-encodes the text without A (else it appends B to the resident cache)."""
    if oracle not in ORACLE_RULES:
        raise ValueError(f"oracle must be one of {ORACLE_RULES}, got {oracle!r}")
    if policy == "detector-recompute":
        return fired
    if policy == "oracle-recompute":
        return oracle == "always" or bool(label)
    return False


def masks(policy: str, fired: bool, kind: str) -> bool:
    """Whether ``policy`` hides record A from a question of ``kind`` (on the appended cache)."""
    if policy == "detector-mask":
        return fired
    if policy == "query-aware-mask":
        return fired and kind == "current"
    return False


def operation(policy: str, kind: str, fired: bool, label: int, oracle: str = "label") -> str:
    """What a question of ``kind`` reads: ``"full"``, ``"mask"`` (A hidden) or ``"recompute"`` (text without A)."""
    if reencodes(policy, fired, label, oracle):
        return "recompute"
    return "mask" if masks(policy, fired, kind) else "full"
