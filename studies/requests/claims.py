"""The paper's claims the requests study tests, with measures of the requests runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, find_entry,
                                           floor_reason, pp_measurement, read_summary)

__all__ = ["CLAIMS", "requests_historical"]


def requests_historical(condition: str, rule: str, lines: int = 0) -> Callable[[Path], Measurement]:
    """Historical-request accuracy change (pp) of a condition against keep-all; ``rule``: ``correct`` or
    ``lenient``. A detector condition whose detector never fired is not testable."""
    def measure(run: Path) -> Measurement:
        length = find_entry(read_summary(run)["lengths"], lines=lines)
        p, keep = length["policies"][condition], length["policies"]["keep-all"]
        a, k = p["accuracy"]["historical"], keep["accuracy"]["historical"]
        ch = a[rule]["change_pp"]
        fired = p.get("fired")
        reason = None
        if fired == 0:
            reason = f"the detector never fired (0 of {length['histories']} histories)"
        reason = reason or floor_reason(k[rule]["correct"], k["n"], "keep-all")
        return pp_measurement(ch["mean"], ch["ci"], f"{a['n']} requests, {length['histories']} histories",
                              f"keep-all {k[rule]['correct']}/{k['n']}; "
                              f"{condition} {a[rule]['correct']}/{a['n']}", reason,
                              units=length["histories"], answers=a["n"])
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("requests.recompute-historical", "requests", "Recomputing on detection lowers historical-request "
          "accuracy",
          Paper("lowers historical accuracy by 41.1, 38.9 and 28.9 points", (6472, 6473),
                "Detector Cost in a 40-Token Ten-Query Workload", "-41.1, -38.9, -28.9 pp"),
          "down",
          (Test("requests/smollm2", f"{PAPER_RULE}: exact answer field; detector recompute vs keep-all; "
                "historical requests, short histories", requests_historical("detector-recompute", "correct")),
           Test("requests/smollm2", f"{LENIENT}; detector recompute vs keep-all; historical requests",
                requests_historical("detector-recompute", "lenient"), primary=False),
           Test("requests/smollm2", f"{LENIENT}; oracle recompute (true labels, our stand-in) vs keep-all; "
                "historical requests", requests_historical("oracle-recompute", "lenient"), primary=False)),
          reference="keep-all", units="histories"),
)
