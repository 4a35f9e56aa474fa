"""The paper's claims the revisions study tests, with measures of the revisions runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import (PAPER_RULE, Claim, Measurement, Paper, Test, find_entry, floor_reason,
                                           pp_measurement, read_summary)

__all__ = ["CLAIMS", "revisions_change"]


def revisions_change(operation: str) -> Callable[[Path], Measurement]:
    """An operation's change in complete answers against full access (pp; article bootstrap)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        cell, full = find_entry(s["cells"], operation=operation), find_entry(s["cells"], operation="full")
        ch = cell["change_vs_full"]
        return pp_measurement(ch["pp"], ch["pp_ci"], f"{cell['n']} questions, {s['articles']} articles",
                              f"full {full['complete']}/{full['n']}",
                              floor_reason(full["complete"], full["n"], "full access"), units=s["articles"],
                              answers=cell["n"])
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("revisions.whole-source", "revisions", "Hiding every non-final revision body loses complete answers",
          Paper("Whole-source masking reduces complete answers by 54.3 percentage points for Qwen and 44.4 for Gemma",
                (660, 661), "Questions about Wikipedia Revision Histories", "-54.3 and -44.4 pp"),
          "down",
          (Test("revisions/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer with EOS (rule grader); "
                "whole-source mask vs full", revisions_change("whole-source")),),
          reference="full access", units="articles"),
    Claim("revisions.changed-text", "revisions", "Hiding only the changed passages loses few complete answers",
          Paper("changed-text masking reduces them by 2.1 and 2.8 points", (661, 662),
                "Questions about Wikipedia Revision Histories", "-2.1 and -2.8 pp"),
          "down",
          (Test("revisions/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer with EOS (rule grader); "
                "changed-text mask vs full", revisions_change("changed-text")),),
          reference="full access", units="articles"),
)
