"""The paper's claims the babilong study tests, with measures of its runs' ``summary.json`` (chance: the most
common gold answer among the full-access answer rows).

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvprobe.studies.common.claims import (Claim, Measurement, Paper, Test, chance_reason, count_pp, find_entry,
                                           floor_reason, join_reasons, pp_measurement, read_summary)

__all__ = ["BABI_8K", "BABI_SHORT", "CLAIMS", "PAPER_MODELS", "QA2_32K", "QA3_32K", "QA3_LOSS_LINE", "babilong_change",
           "babilong_measurement", "paper_counts"]


BABI_8K, BABI_SHORT = "babilong/smollm2-135m-instruct-8k", "babilong/smollm2-135m-instruct"

#: The paper's models of its BABILong anchors, in the order of the counts below.
PAPER_MODELS = ("Qwen3-4B", "Llama-3.2-3B", "Qwen3-32B")
#: The paper's qa3 (earlier location) counts of 100 at 32k per model (L1495-1497): full access, the naive mask
#: (its whole-source mask) and the conservative dependency rule.
QA3_32K = {"full": (33, 25, 40), "naive": (16, 6, 15), "dependency": (31, 22, 39)}
#: The paper's qa2 (current location) counts of 100 at 32k per model (L1497-1499): full access and the naive mask.
QA2_32K = {"full": (36, 16, 46), "naive": (43, 20, 47)}
#: The line where the paper gives the qa3 loss at 32k as a range ("loses 17--25 correct historical answers").
QA3_LOSS_LINE = 585


def paper_counts(task: str, condition: str) -> str:
    """The paper's counts at 32k, full access -> ``condition``, one per model of :data:`PAPER_MODELS`.

    Example: ``paper_counts("qa3", "naive")`` is ``"33 -> 16, 25 -> 6, 40 -> 15"``.
    """
    counts = {"qa3": QA3_32K, "qa2": QA2_32K}[task]
    return ", ".join(f"{full} -> {other}" for full, other in zip(counts["full"], counts[condition]))


def _majority(run: Path, task: str, length: int) -> tuple[int, int, str]:
    """(count, n, answer) of the most common gold answer among the full-access rows of (task, length)."""
    from kvprobe.studies.common.runner import read_rows

    answers = Counter(r["answer"] for r in read_rows(run)
                      if r["task"] == task and r["length"] == length and r["condition"] == "full")
    answer, count = sorted(answers.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    return count, sum(answers.values()), answer


def babilong_measurement(cells: Sequence[dict[str, Any]], task: str, length: int, condition: str,
                         majority: tuple[int, int, str]) -> Measurement:
    """A condition's change in official-parser answers against full access in the (task, length) cell of a
    summary's ``cells``; chance: ``majority``, the (count, n, answer) of the most common gold answer.

    The run's report (``summary.py``) and the scorecard (:func:`babilong_change`) both judge this measurement.
    """
    cell, full = (find_entry(cells, task=task, length=length, policy=condition),
                  find_entry(cells, task=task, length=length, policy="full"))
    count, n, answer = majority
    value, ci = count_pp(cell["official_change_vs_full"], cell["n"])
    reason = join_reasons(floor_reason(full["official"], full["n"], "full access"),
                          chance_reason(full["official"], full["n"], count, "full access",
                                        f"always answering the most common location ({answer})"))
    return pp_measurement(value, ci, f"{cell['n']} inputs", f"full {full['official']}/{full['n']}; "
                          f"{condition} {cell['official']}/{cell['n']}; majority answer {count}/{n}", reason,
                          units=cell["n"], answers=cell["n"])


def babilong_change(task: str, length: int, condition: str, gain: bool) -> Callable[[Path], Measurement]:
    """:func:`babilong_measurement` of a committed run (the majority answer counted from its answer rows)."""
    def measure(run: Path) -> Measurement:
        return babilong_measurement(read_summary(run)["cells"], task, length, condition, _majority(run, task, length))
    return measure


def _babilong_tests(task: str, condition: str, gain: bool = False) -> tuple[Test, ...]:
    """``policy`` against full access on ``task`` in the 8k run (primary: the length closest to the paper's 32k)
    and at both short lengths (secondary)."""
    name = {"naive": "naive mask", "dependency": "dependency rule"}[condition]
    rule = f"official location parser with EOS; {name} vs full; {task}"
    return (Test(BABI_8K, f"{rule}, 7.5k tokens", babilong_change(task, 7500, condition, gain)),
            *(Test(BABI_SHORT, f"{rule}, {length} filler tokens", babilong_change(task, length, condition, gain),
                   primary=False) for length in (0, 1000)))


CLAIMS: tuple[Claim, ...] = (
    Claim("babilong.qa3-naive", "babilong", "Hiding all but each person's last movement loses qa3 "
          "(earlier location) answers",
          Paper("For qa3 at 32k, full/source/conservative-rule counts are 33/16/31 for Qwen3-4B, 25/6/22 for "
                "Llama-3.2-3B, and 40/15/39 for Qwen3-32B.", (1495, 1497), "Long-Context Object Dependencies",
                f"full -> naive {paper_counts('qa3', 'naive')} (counts at 32k)"),
          "down",
          _babilong_tests("qa3", "naive"), reference="full access", units="inputs"),
    Claim("babilong.qa3-dependency", "babilong", "Keeping the object-dependency facts keeps qa3 near full access",
          Paper("For qa3 at 32k, full/source/conservative-rule counts are 33/16/31 for Qwen3-4B, 25/6/22 for "
                "Llama-3.2-3B, and 40/15/39 for Qwen3-32B.", (1495, 1497), "Long-Context Object Dependencies",
                f"full -> conservative {paper_counts('qa3', 'dependency')} (counts at 32k)"),
          "none",
          _babilong_tests("qa3", "dependency"), reference="full access", units="inputs"),
    Claim("babilong.qa2-naive", "babilong", "The naive mask does not hurt qa2 (current location); it gains a "
          "little",
          Paper("On qa2 at the same length, naive masking improves the point counts from 36 to 43, 16 to 20, and "
                "46 to 47.", (1497, 1499), "Long-Context Object Dependencies",
                f"{paper_counts('qa2', 'naive')} (counts)"),
          "up",
          _babilong_tests("qa2", "naive", gain=True), reference="full access", units="inputs"),
)
