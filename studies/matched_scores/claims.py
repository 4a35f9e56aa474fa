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

__all__ = ["CLAIMS", "OAKS_CHANCE", "MATCHED_QWEN", "MATCHED_QWEN_15", "MATCHED_QWEN_OAKS", "MATCHED_SMOL",
           "MATCHED_SMOL_OAKS", "matched_accuracy", "matched_accuracy_measurement", "matched_margin",
           "matched_margin_measurement"]


MATCHED_SMOL, MATCHED_QWEN = "matched-scores/smollm2-135m-instruct", "matched-scores/qwen2.5-coder-0.5b-instruct"
MATCHED_QWEN_15 = "matched-scores/qwen2.5-coder-1.5b-instruct"
MATCHED_SMOL_OAKS = "matched-scores/smollm2-135m-instruct-oaks"
MATCHED_QWEN_OAKS = "matched-scores/qwen2.5-coder-0.5b-instruct-oaks"


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


#: Chance on the OAKS demonstration set: a random pick of the two supplied answer texts (the share it gets right).
OAKS_CHANCE = 0.5


def matched_accuracy_measurement(sub: dict[str, Any], rule: str, chance: float | None = None,
                                 reference: str = "control") -> Measurement:
    """Mask minus a fixed reference arm's accuracy (pp) of one subset ``sub`` of a summary's ``subsets`` under
    ``rule``. ``reference``: ``control`` (the equal-token control, the paper's) or ``full`` (full access, the
    paper's second reference), a property of the claim, never chosen from the results; against the control the
    note gives the control's own change against full access (flagged "not neutral" when its interval excludes 0).
    ``chance``: the share a random pick gets right (OAKS: :data:`OAKS_CHANCE`), which the reference arm must exceed
    by an exact test; the floor always applies.

    The run's report (``summary.claim_rows``) and the scorecard (:func:`matched_accuracy`) both judge this
    measurement.
    """
    if reference not in ("control", "full"):
        raise ValueError(f"reference {reference!r} is not 'control' or 'full'")
    r = sub["rules"][rule]
    own = r["control_vs_full"]
    if reference == "control":
        change = r["mask_vs_control"]
        note = (f"control - full {estimate(own['pp'], own['ci'], '+.1f')} pp"
                + (" (not neutral)" if excludes_zero(own["ci"]) else ""))
    else:
        change, note = r["mask_vs_full"], ""
    correct = r["correct"][reference]
    reason = join_reasons(floor_reason(correct, sub["n"], reference),
                          None if chance is None else chance_reason(correct, sub["n"], chance * sub["n"], reference,
                                                                    "a random pick of the two answer texts"))
    return pp_measurement(change["pp"], change["ci"], f"{sub['n']} cases, {sub['groups']} groups",
                          f"{reference} {correct}/{sub['n']}; mask {r['correct']['mask']}/{sub['n']}", reason,
                          units=sub["groups"], note=note, answers=sub["n"])


def matched_accuracy(subset: str, rule: str, chance: float | None = None,
                     reference: str = "control") -> Callable[[Path], Measurement]:
    """:func:`matched_accuracy_measurement` of a committed run's ``subset`` against the claim's ``reference``."""
    def measure(run: Path) -> Measurement:
        return matched_accuracy_measurement(read_summary(run)["subsets"][subset], rule, chance, reference)
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
             for run in (MATCHED_QWEN, MATCHED_QWEN_15))),
          reference="control", units="groups"),
    Claim("matched-scores.replacement-answers", "matched-scores",
          "On replacements, hiding A loses exact-field answers against the control",
          Paper("Qwen3-4B and Qwen3-8B lose eight and 17 correct answers relative to their controls.", (4950, 4951),
                "Candidate Preference and Generated Answers on Synthetic Records",
                "Qwen3-4B -5.3 [-8.7, -2.0], Qwen3-8B -11.3 [-18.7, -4.7] pp", (4968, 4968)),
          "down",
          (Test(MATCHED_SMOL, f"{PAPER_RULE}: exact answer field; mask vs control; 150 replacement cases",
                matched_accuracy("replacement", "exact")),
           Test(MATCHED_SMOL, f"{LENIENT}: first value mentioned; mask vs control; 150 replacement cases",
                matched_accuracy("replacement", "lenient"), primary=False),
           *(Test(run, f"{PAPER_RULE}: exact answer field; mask vs control; 150 replacement cases",
                  matched_accuracy("replacement", "exact")) for run in (MATCHED_QWEN, MATCHED_QWEN_15))),
          reference="control", units="groups"),
    Claim("matched-scores.all-answers", "matched-scores",
          "Over all 300 cases (A still needed in confirmations and other-entity updates), hiding A loses answers",
          Paper("Qwen3.8 and both Gemma models score 300/300 with full or control access but 250/300 after masking "
                "A.", (4982, 4984), "Candidate Preference and Generated Answers on Synthetic Records",
                "Qwen3-4B -19.3 [-21.7, -17.3], Qwen3-8B -24.3 [-29.0, -20.0], Qwen3-32B -16.0 [-17.7, -14.3] pp",
                (5002, 5002)),
          "down",
          (Test(MATCHED_SMOL, f"{PAPER_RULE}: complete answer (one JSON answer field, unit, EOS); mask vs control; "
                "all 300 cases", matched_accuracy("all", "complete")),
           Test(MATCHED_SMOL, f"{LENIENT}: first value mentioned; mask vs control; all 300 cases",
                matched_accuracy("all", "lenient"), primary=False),
           Test(MATCHED_SMOL, f"{PAPER_RULE}: complete answer; mask vs full access; all 300 cases",
                matched_accuracy("all", "complete", reference="full"), primary=False),
           *(t for run in (MATCHED_QWEN, MATCHED_QWEN_15) for t in (
               Test(run, f"{PAPER_RULE}: complete answer (one JSON answer field, unit, EOS); mask vs control; "
                    "all 300 cases", matched_accuracy("all", "complete")),
               Test(run, f"{PAPER_RULE}: complete answer; mask vs full access; all 300 cases",
                    matched_accuracy("all", "complete", reference="full"), primary=False)))),
          reference="control", units="groups"),
    Claim("matched-scores.oaks-choices", "matched-scores", "On natural text (OAKS), hiding the earlier source "
          "improves the choice between the supplied answers",
          Paper("Masking improves selection among supplied OAKS narrative answers in many models", (400, 401),
                "Preferring the New Value Does Not Ensure a Complete Answer", "Qwen3-32B -16.77 [-21.16, -12.78] pp "
                "obsolete choices", (2118, 2118)),
          "up",
          tuple(t for run in (MATCHED_SMOL_OAKS, MATCHED_QWEN_OAKS) for t in (
              Test(run, f"{PAPER_RULE}: complete answer (one JSON answer field, EOS); mask vs control; generated "
                   "demonstration set, all books", matched_accuracy("all", "complete", chance=OAKS_CHANCE)),
              Test(run, f"{LENIENT}: first answer text mentioned; mask vs control; generated demonstration set",
                   matched_accuracy("all", "lenient", chance=OAKS_CHANCE), primary=False))),
          reference="control", units="groups"),
)
