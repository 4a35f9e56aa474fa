"""The paper's net-accuracy analysis of FactConsolidation answers (app:v45_mab_analysis, L1654-1770).

Outcomes (L1661-1664): "A response that reaches 1,024 tokens is assigned to the capped category
before its content is considered. Among normally terminated answers, complete, wrong and abstaining
answers remain distinct." :func:`outcome` does exactly that, so every answer has one outcome and a
transition table between two operations is a partition of the questions. A capped answer's own
semantic label is kept apart (:func:`capped_labels`) and never added to these counts: "The original
grade-based transition counts and capped counts can overlap and must not be summed" (L1607-1609).

Transitions (:func:`transitions`, L1668-1678): gains are questions complete after and not before,
losses complete before and not after, the net change in percentage points of all paired questions;
gains are split by the outcome they came from, losses by the outcome they went to. Strata
(L1686-1728): hop type (the caller passes the subsets), the full-access answer's length in tokens
(:data:`LENGTH_BINS`, :func:`losses_by_length`), and the full-access wrong answers whose box holds an
old-answer alias (:func:`old_alias_group`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from typing import Any

from kvprobe.studies.common.answers import capped_first

CAPPED = "capped"
#: Every outcome, in report order.
OUTCOMES = ("complete", "partial", "wrong", "abstain", CAPPED)
#: Full-answer length bins in generated tokens (paper L1725-1727: 0-20, 21-200, 201-500, above 500).
LENGTH_BINS = ((0, 20), (21, 200), (201, 500), (501, None))


#: The outcome of one answer: capped first (shared rule, :func:`kvprobe.studies.common.answers.capped_first`).
outcome = capped_first


def transitions(before: Mapping[Hashable, str], after: Mapping[Hashable, str]) -> dict[str, Any]:
    """Paired outcome changes from ``before`` to ``after`` over the questions both have.

    Returns ``n``, complete counts before and after, ``gains`` / ``losses`` with their split
    (``gains_from``, ``losses_to``: outcome -> count), ``net`` (gains - losses), ``net_pp``
    (100 net / n) and ``table`` (before outcome -> after outcome -> count).

    Example: ``transitions({1: "wrong", 2: "complete"}, {1: "complete", 2: "capped"})`` has one gain
    (from wrong), one loss (to capped) and ``net_pp`` 0.0.
    """
    keys = [k for k in before if k in after]
    gains = [k for k in keys if after[k] == "complete" and before[k] != "complete"]
    losses = [k for k in keys if before[k] == "complete" and after[k] != "complete"]
    table: dict[str, dict[str, int]] = {}
    for k in keys:
        row = table.setdefault(before[k], {})
        row[after[k]] = row.get(after[k], 0) + 1
    n = len(keys)
    return {"n": n, "complete_before": sum(before[k] == "complete" for k in keys),
            "complete_after": sum(after[k] == "complete" for k in keys), "gains": len(gains), "losses": len(losses),
            "gains_from": dict(Counter(before[k] for k in gains)), "losses_to": dict(Counter(after[k] for k in losses)),
            "net": len(gains) - len(losses), "net_pp": 100 * (len(gains) - len(losses)) / n if n else None,
            "table": {b: dict(sorted(row.items(), key=lambda kv: OUTCOMES.index(kv[0]))) for b, row in
                      sorted(table.items(), key=lambda kv: OUTCOMES.index(kv[0]))}}


def length_bin(tokens: int) -> str:
    """The :data:`LENGTH_BINS` label of an answer length: ``"0-20"``, ``"21-200"``, ``"201-500"``, ``">500"``."""
    for lo, hi in LENGTH_BINS:
        if hi is None:
            return f">{lo - 1}"
        if lo <= tokens <= hi:
            return f"{lo}-{hi}"
    raise ValueError(f"negative answer length {tokens}")


def losses_by_length(before: Mapping[Hashable, str], after: Mapping[Hashable, str],
                     before_tokens: Mapping[Hashable, int]) -> list[dict[str, Any]]:
    """Among questions complete in ``before``: per length bin of the ``before`` answer, how many, how many
    ``after`` loses, and the loss rate (paper L1723-1727)."""
    out = []
    for lo, hi in LENGTH_BINS:
        label = length_bin(lo)
        keys = [k for k in before if k in after and before[k] == "complete" and length_bin(before_tokens[k]) == label]
        lost = sum(after[k] != "complete" for k in keys)
        out.append({"bin": label, "complete": len(keys), "lost": lost, "rate": lost / len(keys) if keys else None})
    return out


def old_alias_group(before: Mapping[Hashable, str], after: Mapping[Hashable, str],
                    old_in_box: Mapping[Hashable, bool]) -> dict[str, Any]:
    """The ``before`` answers that are wrong with EOS and whose box holds an old alias (paper L1692-1702):
    how many of all wrong ones, what they become in ``after`` (outcome -> count), and how many of all
    wrong-to-complete corrections they supply."""
    keys = [k for k in before if k in after]
    wrong = [k for k in keys if before[k] == "wrong"]
    group = [k for k in wrong if old_in_box.get(k)]
    corrections = [k for k in wrong if after[k] == "complete"]
    return {"wrong": len(wrong), "old_alias": len(group), "after": dict(Counter(after[k] for k in group)),
            "corrections": len(corrections), "corrections_from_group": sum(bool(old_in_box.get(k)) for k in corrections)}


def capped_labels(stop_reasons: Mapping[Hashable, str], labels: Mapping[Hashable, str]) -> dict[str, int]:
    """The semantic labels of the capped answers (kept apart; never added to outcome counts)."""
    return dict(Counter(labels[k] for k, s in stop_reasons.items() if s != "eos"))
