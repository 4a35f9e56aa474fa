"""The paper's claims the records study tests, with measures of the records runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, count_pp, find_entry,
                                           floor_reason, pp_measurement, read_summary)

__all__ = ["CLAIMS", "records_change"]


def records_change(query: str, condition: str, rule: str) -> Callable[[Path], Measurement]:
    """A condition's change (pp) against keep-all; ``rule``: ``correct`` (exact field) or ``lenient``. The interval
    resamples items (groups of six histories)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        cell = find_entry(s["cells"], query=query, policy=condition, subset="all")
        keep = find_entry(s["cells"], query=query, policy="keep-all", subset="all")
        value, ci = count_pp(cell[f"{rule}_change"], cell["n"])
        return pp_measurement(value, ci, f"{cell['n']} histories, {s['groups']} items",
                              f"keep-all {keep[rule]}/{keep['n']}; {condition} {cell[rule]}/{cell['n']}",
                              floor_reason(keep[rule], keep["n"], "keep-all"), units=s["groups"], answers=cell["n"])
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("records.oracle-current", "records", "Masking true replacements still loses current exact-field answers",
          Paper("Their masking losses therefore concern answer-field mismatches, including unit omission, not "
                "necessarily wrong semantic values.", (5509, 5511), "Query Preservation and Generation Errors",
                "Qwen3-4B: 26 oracle-mask reversals against keep-all", (5511, 5512)),
          "down",
          (Test("records/smollm2-135m-instruct", f"{PAPER_RULE}: exact answer field; oracle mask vs keep-all; "
                "current question; deadlines as dates (the paper's: hours)",
                records_change("current", "oracle-mask", "correct")),
           Test("records/smollm2-135m-instruct", f"{LENIENT}; oracle mask vs keep-all; current question; deadlines "
                "as dates",
                records_change("current", "oracle-mask", "lenient"), primary=False),
           Test("records/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; oracle mask vs keep-all; "
                "current question; deadlines as dates", records_change("current", "oracle-mask", "correct"))),
          reference="keep-all", units="items (groups of six histories)"),
    Claim("records.oracle-historical", "records", "Hiding the old record loses historical answers",
          Paper("Hiding the old record is cheap, but it may still contain needed details or answer questions about "
                "the past.", (156, 158), "Abstract", "MQuAKE historical 88.2 -> 74 (Qwen3-4B, %)", (436, 436)),
          "down",
          (Test("records/smollm2-135m-instruct", f"{PAPER_RULE}: exact answer field; oracle mask vs keep-all; "
                "historical question", records_change("historical", "oracle-mask", "correct")),
           Test("records/smollm2-135m-instruct", f"{LENIENT}; oracle mask vs keep-all; historical question",
                records_change("historical", "oracle-mask", "lenient"), primary=False),
           Test("records/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; oracle mask vs keep-all; "
                "historical question", records_change("historical", "oracle-mask", "correct"))),
          reference="keep-all", units="items (groups of six histories)"),
)
