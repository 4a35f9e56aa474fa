"""The paper's claims the cross-checkpoint study tests, with measures of the cross-checkpoint runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, floor_reason,
                                           pp_measurement, read_summary)

__all__ = ["CLAIMS", "cross_reading"]


def cross_reading(rule: str, reader: str = "main") -> Callable[[Path], Measurement]:
    """Cross minus own read, current question, full access (pp); ``rule``: ``complete`` or
    ``lenient_complete``."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        r = s["readers"][reader]["current"]
        ch = r[f"{rule}_cross_minus_own"]["full"]
        own = r["arms"]["own/full"][rule]
        return pp_measurement(ch["pp"], ch["pp_ci"], f"{r['n']} cases, {s['groups']} groups",
                              f"own cache {own}/{r['n']}", floor_reason(own, r["n"], "own cache"), units=s["groups"],
                              answers=r["n"])
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("cross-checkpoint.answers", "cross-checkpoint", "Reading a sibling checkpoint's cache changes current "
          "answers",
          Paper("Qwen3-8B's complete current answers fall from 84.2% to 76.2% on its base sibling's cache (cross "
                "minus own -7.9 points, [-12.5,-3.8])", (6669, 6671), "Reading a Cache Written by Another Checkpoint",
                "-7.9 [-12.5, -3.8] pp (Qwen3-8B)"),
          "either",
          (Test("cross-checkpoint/smollm2-int8", f"{PAPER_RULE}: complete answer; int8 sibling's cache vs own; "
                "full access", cross_reading("complete")),
           Test("cross-checkpoint/smollm2-int8", f"{LENIENT}; int8 sibling's cache vs own; full access",
                cross_reading("lenient_complete"), primary=False)),
          reference="own cache", units="groups"),
)
