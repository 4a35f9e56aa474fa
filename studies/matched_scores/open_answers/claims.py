"""The paper's claims the oaks-open study tests, with measures of the oaks-open runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvprobe.studies.common.claims import (Claim, Measurement, Paper, Test, floor_reason, join_reasons, judge_reason,
                                           pp_measurement, read_summary, rule_audit_note)

from .grading import RULE_GRADER

__all__ = ["CLAIMS", "OAKS_OPEN_GRADERS", "PRIMARY_GRADER", "oaks_open", "oaks_open_measurement"]


#: The committed open-OAKS runs (one set of answers) by their grader: artifact suffix, how a test names it.
OAKS_OPEN_GRADERS = (("rule", "rule grader"), ("judged", "Qwen2.5-Coder-0.5B judge, 38 questions"),
                     ("judged-1.5b", "Qwen2.5-Coder-1.5B judge, 38 questions"))
#: The primary grader, fixed before the results: the paper's protocol is a source-aware model judge, and the
#: largest local one is Qwen2.5-Coder-1.5B; the 0.5B judge and the rule grader are shown beside it.
PRIMARY_GRADER = "judged-1.5b"


def oaks_open_measurement(s: dict[str, Any], quantity: str) -> Measurement:
    """Open OAKS answers on the answerable questions of a summary ``s``: ``mask_vs_full`` (source complete, mask
    minus full) or ``agreement_minus_complete`` (reference agreement minus source completeness, same grader), pp
    over reused-source components. The rule grader has one protocol, so the difference is not testable there;
    under a model grader both need source-complete answers under full access (the floor).

    The run's report (``summary.claim_rows``) and the scorecard (:func:`oaks_open`) both judge this measurement.
    """
    panel = s["panels"]["answerable"]
    counts = panel["protocols"]["complete"]["counts"]
    graded = ", ".join(s["graders"])
    n = f"{panel['n']} answerable questions, {panel['components']} components"
    if quantity == "mask_vs_full":
        d = panel["protocols"]["complete"]["mask_vs_full"]
        return pp_measurement(d["pp"], d["ci"], n,
                              f"full {counts['full']}/{panel['n']}; mask {counts['mask']}/{panel['n']} ({graded})",
                              floor_reason(counts["full"], panel["n"], "full access"), units=panel["components"],
                              answers=panel["n"])
    d = panel["agreement_minus_complete"]
    rule_only = all(g.startswith("rule") for g in s["graders"])
    return pp_measurement(d["pp"], d["ci"], n, f"source complete, full access {counts['full']}/{panel['n']} ({graded})",
                          "the rule grader has one protocol: agreement and completeness coincide" if rule_only
                          else floor_reason(counts["full"], panel["n"], "full access"), units=panel["components"])


def oaks_open(quantity: str) -> Callable[[Path], Measurement]:
    """:func:`oaks_open_measurement` of a committed run; not testable where its model judge is not validated (no
    audit on the oaks-open set, or one it fails: ``studies.common.claims.judge_reason``); a rule-graded row notes
    the rule grader's own audit (``studies.common.claims.rule_audit_note``: rule graders are shown, never gated)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        m = oaks_open_measurement(s, quantity)
        note = rule_audit_note(run, "oaks-open", RULE_GRADER) if s["graders"] == [RULE_GRADER] else ""
        return replace(m, not_testable=join_reasons(judge_reason(run, "oaks-open", s["graders"]), m.not_testable),
                       note=note)
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("oaks-open.source-complete", "oaks-open", "Hiding the earlier source loses complete open answers on "
          "natural text",
          Paper("On the 92 answerable questions, Qwen3-32B's source-complete count falls from 51 to 42 under masking",
                (4615, 4616), "Open Answers on Natural Source Excerpts", "Qwen3-32B -9.8 [-18.5, -1.1] pp",
                (4609, 4609)),
          "down",
          tuple(Test(f"oaks-open/smollm2-135m-instruct-{grader}", f"source complete, mask minus full; {label}; "
                     "generated demonstration set", oaks_open("mask_vs_full"), grader == PRIMARY_GRADER)
                for grader, label in OAKS_OPEN_GRADERS),
          reference="full access", units="components"),
    Claim("oaks-open.protocols", "oaks-open", "Reference agreement credits more masked answers than source "
          "completeness (same grader)",
          Paper("The paired difference between the two protocols using the same grader is itself resolved",
                (4679, 4680), "Open Answers on Natural Source Excerpts", "Qwen3-32B +12.0 [+2.1, +22.1] pp",
                (4675, 4680)),
          "up",
          tuple(Test(f"oaks-open/smollm2-135m-instruct-{grader}", f"agreement minus completeness, mask minus full; "
                     f"{label}; generated demonstration set", oaks_open("agreement_minus_complete"),
                     grader == PRIMARY_GRADER)
                for grader, label in OAKS_OPEN_GRADERS),
          reference="full access", units="components"),
)
