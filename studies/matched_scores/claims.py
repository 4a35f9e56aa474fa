"""The paper's claims the matched-scores study tests, with measures of the matched-scores runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, chance_reason,
                                           excludes_zero, floor_reason, join_reasons, pp_measurement, read_summary)
from kvprobe.studies.common.report import estimate

__all__ = ["CLAIMS", "MATCHED_QWEN", "MATCHED_QWEN_15", "MATCHED_SMOL", "MATCHED_SMOL_OAKS", "matched_accuracy",
           "matched_accuracy_measurement", "matched_margin", "matched_margin_measurement"]


MATCHED_SMOL, MATCHED_QWEN = "matched-scores/smollm2-135m-instruct", "matched-scores/qwen2.5-coder-0.5b-instruct"
MATCHED_QWEN_15 = "matched-scores/qwen2.5-coder-1.5b-instruct"
MATCHED_SMOL_OAKS = "matched-scores/smollm2-135m-instruct-oaks"


def matched_margin_measurement(sub: dict[str, Any]) -> Measurement:
    """Delta m = m(mask) - m(control), nats, of one subset ``sub`` of a summary's ``subsets``; no interval when
    it gives none.

    The run's report (``summary.claim_rows``) and the scorecard (:func:`matched_margin`) both judge this
    measurement.
    """
    d = sub["delta_m"]
    return Measurement(d["value"], tuple(d["ci"]) if d["ci"] else None, "nats", "+.2f",
                       f"{sub['n']} cases, {sub['groups']} groups", "control", units=sub["groups"])


def matched_margin(subset: str) -> Callable[[Path], Measurement]:
    """:func:`matched_margin_measurement` of a committed run's ``subset``."""
    def measure(run: Path) -> Measurement:
        return matched_margin_measurement(read_summary(run)["subsets"][subset])
    return measure


def matched_accuracy_measurement(sub: dict[str, Any], rule: str, chance: float | None = None,
                                 switch: bool = True) -> Measurement:
    """Mask minus control accuracy (pp) of one subset ``sub`` of a summary's ``subsets`` under ``rule``;
    ``switch``: mask minus full access when the control is not inert (its change against full access has an
    interval excluding 0; the scorecard's choice), else the control always (the run's report). ``chance``: the
    share a random pick gets right (OAKS: one of two answer texts), checked on the reference; the floor always is.

    The run's report (``summary.claim_rows``, ``switch=False``) and the scorecard (:func:`matched_accuracy`) both
    judge this measurement.
    """
    r = sub["rules"][rule]
    change, ref_name, note = r["mask_vs_control"], "control", ""
    own, masked = r["control_vs_full"], r["mask_vs_control"]
    if switch and excludes_zero(own["ci"]):
        change, ref_name = r["mask_vs_full"], "full"
        note = (f"the control is not neutral: control - full {estimate(own['pp'], own['ci'], '+.1f')} pp, so full "
                f"access is the reference (mask - control: {estimate(masked['pp'], masked['ci'], '+.1f')} pp)")
    correct = r["correct"][ref_name]
    reason = join_reasons(floor_reason(correct, sub["n"], ref_name),
                          None if chance is None else chance_reason(correct, sub["n"], chance * sub["n"], ref_name,
                                                                    "a random pick of the two answer texts"))
    return pp_measurement(change["pp"], change["ci"], f"{sub['n']} cases, {sub['groups']} groups",
                          f"{ref_name} {correct}/{sub['n']}; mask {r['correct']['mask']}/{sub['n']}", reason,
                          units=sub["groups"], note=note)


def matched_accuracy(subset: str, rule: str, chance: float | None = None) -> Callable[[Path], Measurement]:
    """:func:`matched_accuracy_measurement` of a committed run's ``subset`` (full access the reference where the
    control is not inert)."""
    def measure(run: Path) -> Measurement:
        return matched_accuracy_measurement(read_summary(run)["subsets"][subset], rule, chance)
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("matched-scores.margin", "matched-scores",
          "On replacements, hiding A raises the candidate margin beyond the equal-token control",
          Paper("The margin increase is positive for every model as a point estimate, but its interval crosses "
                "zero for Llama-3.1-70B.", (4948, 4949),
                "Candidate Preference and Generated Answers on Synthetic Records",
                "Qwen3-4B +1.38 [1.16, 1.62], Qwen3-8B +1.72 [1.41, 2.05] nats", (4968, 4968)),
          "up",
          (Test(MATCHED_SMOL, "Delta m = m(mask) - m(control); 150 replacement cases", matched_margin("replacement")),
           *(Test(run, "Delta m = m(mask) - m(control); 150 replacement cases", matched_margin("replacement"))
             for run in (MATCHED_QWEN, MATCHED_QWEN_15)))),
    Claim("matched-scores.replacement-answers", "matched-scores",
          "On replacements, hiding A loses exact-field answers against the control",
          Paper("Qwen3-4B and Qwen3-8B lose eight and 17 correct answers relative to their controls.", (4950, 4951),
                "Candidate Preference and Generated Answers on Synthetic Records",
                "Qwen3-4B -5.3 [-8.7, -2.0], Qwen3-8B -11.3 [-18.7, -4.7] pp", (4968, 4968)),
          "down",
          (Test(MATCHED_SMOL, f"{PAPER_RULE}: exact answer field; mask vs control; 150 replacement cases",
                matched_accuracy("replacement", "exact")),
           Test(MATCHED_SMOL, f"{LENIENT}: first value mentioned; mask vs control; 150 replacement cases",
                matched_accuracy("replacement", "lenient")),
           *(Test(run, f"{PAPER_RULE}: exact answer field; mask vs control; 150 replacement cases",
                  matched_accuracy("replacement", "exact")) for run in (MATCHED_QWEN, MATCHED_QWEN_15)))),
    Claim("matched-scores.all-answers", "matched-scores",
          "Over all 300 cases (A still needed in confirmations and other-entity updates), hiding A loses answers",
          Paper("Qwen3.8 and both Gemma models score 300/300 with full or control access but 250/300 after masking "
                "A.", (4982, 4984), "Candidate Preference and Generated Answers on Synthetic Records",
                "Qwen3-4B -19.3 [-21.7, -17.3], Qwen3-8B -24.3 [-29.0, -20.0], Qwen3-32B -16.0 [-17.7, -14.3] pp",
                (5002, 5002)),
          "down",
          (Test(MATCHED_SMOL, f"{PAPER_RULE}: exact answer field; mask vs control; all 300 cases",
                matched_accuracy("all", "exact")),
           Test(MATCHED_SMOL, f"{LENIENT}: first value mentioned; mask vs control; all 300 cases",
                matched_accuracy("all", "lenient")),
           *(Test(run, f"{PAPER_RULE}: exact answer field; mask vs control; all 300 cases",
                  matched_accuracy("all", "exact")) for run in (MATCHED_QWEN, MATCHED_QWEN_15)))),
    Claim("matched-scores.oaks-choices", "matched-scores", "On natural text (OAKS), hiding the earlier source "
          "improves the choice between the supplied answers",
          Paper("Masking improves selection among supplied OAKS narrative answers in many models", (400, 401),
                "Preferring the New Value Does Not Ensure a Complete Answer", "Qwen3-32B -16.77 [-21.16, -12.78] pp "
                "obsolete choices", (2118, 2118)),
          "up",
          (Test(MATCHED_SMOL_OAKS, f"{PAPER_RULE}: exact JSON choice; mask vs control; generated demonstration "
                "set, all books", matched_accuracy("all", "exact", chance=0.5)),
           Test(MATCHED_SMOL_OAKS, f"{LENIENT}: first answer text mentioned; mask vs control; generated "
                "demonstration set", matched_accuracy("all", "lenient", chance=0.5)))),
)
