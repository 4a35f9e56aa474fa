"""The paper's claims the detection study tests, with measures of the detection runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import Claim, Measurement, Paper, Test, find_entry, read_summary

__all__ = ["CLAIMS", "detection_json", "detection_yes_no"]


def detection_yes_no(dataset: str) -> Callable[[Path], Measurement]:
    """AUC of the paper's YES/NO score on the test pairs (replacements above non-replacements)."""
    def measure(run: Path) -> Measurement:
        e = find_entry(read_summary(run)["yes_no"], dataset=dataset, split="test")
        a = e["auc"]
        return Measurement(a["auc"], (a["lo"], a["hi"]), "AUC", ".3f", f"{e['n']} pairs, {e['groups']} groups",
                           "chance 0.5", null=0.5, units=e["groups"])
    return measure


def detection_json(detector: str) -> Callable[[Path], Measurement]:
    """Accuracy of a JSON detector on the record test pairs; not testable when it never decides. The interval
    resamples the pairs' groups (those of the YES/NO score's entry on the same pairs)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        e = find_entry(s["text_detectors"], dataset="records", split="test", detector=detector)
        groups = find_entry(s["yes_no"], dataset="records", split="test")["groups"]
        unresolved = e["decisions"].get("unresolved", 0)
        n = f"{e['n']} pairs, {groups} groups"
        if unresolved == e["n"]:
            return Measurement(None, None, "share", ".3f", n, null=0.5, units=groups,
                               not_testable=f"no decision: {unresolved} of {e['n']} outputs unresolved "
                               f"({e['capped']} at the token cap)")
        return Measurement(e["accuracy"], tuple(e["accuracy_ci"]), "share", ".3f", n, "chance 0.5", null=0.5,
                           units=groups)
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("detection.yes-no", "detection", "A detector reading A and B recognizes replacements",
          Paper("the detector in each Qwen model selects all 120 strict-replacement current-query conditions",
                (3476, 3477), "Answering Quantity Questions and Selecting Masks",
                "all 120 strict replacements selected (Qwen)"),
          "up",
          (Test("detection/smollm2-135m-instruct", "AUC of the paper's YES/NO score; quantity test pairs",
                detection_yes_no("quantity")),
           Test("detection/smollm2-135m-instruct", "AUC of the paper's YES/NO score; record test pairs",
                detection_yes_no("records"), primary=False),
           Test("detection/smollm2-135m-instruct", "accuracy of the asserted-value JSON detector; record test pairs",
                detection_json("asserted-value"), primary=False)),
          reference="chance 0.5", units="groups"),
)
