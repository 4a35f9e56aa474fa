"""The paper's claims the query-aware study tests, with measures of the query-aware runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, count_pp, find_entry,
                                           floor_reason, pp_measurement, read_summary)

__all__ = ["CLAIMS", "query_aware"]


def query_aware(condition: str, rule: str, reference: str) -> Callable[[Path], Measurement]:
    """A condition's change (pp) against ``reference`` (``full`` or ``source-mask``) on the current question,
    all histories; ``rule``: ``correct`` (the paper's exact field) or ``lenient``. The floor is checked on
    full access. The interval resamples items (groups of six histories)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        cell = find_entry(s["cells"], query="current", subset="all", arm=condition)
        full = find_entry(s["cells"], query="current", subset="all", arm="full")
        ref = find_entry(s["cells"], query="current", subset="all", arm=reference)
        value, ci = count_pp(cell[f"{rule}_vs_{reference}"], cell["n"])
        return pp_measurement(value, ci, f"{cell['n']} histories, {s['groups']} items",
                              f"{reference} {ref[rule]}/{ref['n']}; {condition} {cell[rule]}/{cell['n']}",
                              floor_reason(full[rule], full["n"], "full access"), units=s["groups"],
                              answers=cell["n"])
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("query-aware.source", "query-aware", "Hiding A on all 300 record histories loses answers against full "
          "access",
          Paper("On 300 controlled conditions, Qwen3-32B answers 98.3% (295) with full access, 83.0% (249) with "
                "source masking, 98.3% (295) with FINCH and 98.7% (296) with RefreshKV", (782, 785),
                "Other Access Choices Can Avoid Some Losses", "295 -> 249 of 300 (Qwen3-32B)"),
          "down",
          (Test("query-aware/smollm2", f"{PAPER_RULE}: exact answer field; source mask vs full",
                query_aware("source-mask", "correct", "full")),
           Test("query-aware/smollm2", f"{LENIENT}; source mask vs full",
                query_aware("source-mask", "lenient", "full"), primary=False),
           Test("query-aware/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; source mask vs full",
                query_aware("source-mask", "correct", "full"))),
          reference="full access", units="items (groups of six histories)"),
    Claim("query-aware.finch", "query-aware", "FINCH at the source mask's budget recovers answers the mask loses",
          Paper("On 300 controlled conditions, Qwen3-32B answers 98.3% (295) with full access, 83.0% (249) with "
                "source masking, 98.3% (295) with FINCH and 98.7% (296) with RefreshKV", (782, 785),
                "Other Access Choices Can Avoid Some Losses", "249 -> 295 of 300 (Qwen3-32B)"),
          "up",
          (Test("query-aware/smollm2", f"{PAPER_RULE}: exact answer field; FINCH at matched K vs source mask",
                query_aware("finch@matched", "correct", "source-mask")),
           Test("query-aware/smollm2", f"{LENIENT}; FINCH at matched K vs source mask",
                query_aware("finch@matched", "lenient", "source-mask"), primary=False),
           Test("query-aware/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; FINCH at matched K vs "
                "source mask", query_aware("finch@matched", "correct", "source-mask"))),
          reference="source mask", units="items (groups of six histories)"),
    Claim("query-aware.refreshkv", "query-aware", "RefreshKV at the source mask's budget recovers answers the mask "
          "loses",
          Paper("On 300 controlled conditions, Qwen3-32B answers 98.3% (295) with full access, 83.0% (249) with "
                "source masking, 98.3% (295) with FINCH and 98.7% (296) with RefreshKV", (782, 785),
                "Other Access Choices Can Avoid Some Losses", "249 -> 296 of 300 (Qwen3-32B)"),
          "up",
          (Test("query-aware/smollm2", f"{PAPER_RULE}: exact answer field; RefreshKV at matched K vs source mask",
                query_aware("refreshkv@matched", "correct", "source-mask")),
           Test("query-aware/smollm2", f"{LENIENT}; RefreshKV at matched K vs source mask",
                query_aware("refreshkv@matched", "lenient", "source-mask"), primary=False),
           Test("query-aware/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact answer field; RefreshKV at matched K "
                "vs source mask", query_aware("refreshkv@matched", "correct", "source-mask"))),
          reference="source mask", units="items (groups of six histories)"),
)
