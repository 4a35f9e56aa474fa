"""The paper's claims the recognition groups test, with measures of their ``readouts.json`` and ``scores.json``
(``kvprobe readout``).

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvprobe.readouts.stats import clopper_pearson
from kvprobe.studies.common.claims import Claim, Measurement, Paper, Test, read_json

__all__ = ["CLAIMS", "REC_GEMMA", "REC_SMOL", "recognition_auc", "recognition_difference", "recognition_wins"]


REC_SMOL, REC_GEMMA = "recognition/smollm2-135m-instruct", "recognition/gemma3-270m"


def _readouts(run: Path) -> dict[str, Any]:
    return read_json(run / "readouts.json")


def recognition_auc(table: str, readout: str, null: float) -> Callable[[Path], Measurement]:
    """An AUC of a recognition group: ``role_auc`` (records: role swaps vs role confirmations),
    ``replacement_macro_auc`` or ``matching_macro_auc`` (role pairs), against ``null``."""
    def measure(run: Path) -> Measurement:
        r = _readouts(run)
        a = r[table]["auc"][readout]
        groups = r["n_cases"]["test_groups" if table == "role_auc" else "groups"]
        n = (f"{r['n_cases']['test_role']} cases, {groups} groups" if table == "role_auc"
             else f"{r['n_cases']['pairs']} pairs, {groups} groups")
        ref = "criterion 0.60" if null != 0.5 else "chance 0.5"
        return Measurement(a["auc"], (a["lo"], a["hi"]), "AUC", ".3f", n, ref, null=null, units=groups)
    return measure


def recognition_difference(readout: str, baseline: str) -> Callable[[Path], Measurement]:
    """Role AUC of ``readout`` minus ``baseline`` on the same group draws."""
    def measure(run: Path) -> Measurement:
        r = _readouts(run)
        d = r["role_auc"]["diff"][readout][baseline]
        return Measurement(d["diff"], (d["lo"], d["hi"]), "AUC difference", "+.3f",
                           f"{r['n_cases']['test_role']} cases, {r['n_cases']['test_groups']} groups", baseline,
                           units=r["n_cases"]["test_groups"])
    return measure


def recognition_wins(readout: str) -> Callable[[Path], Measurement]:
    """Share of matched test items whose role swap scores above its role confirmation (exact binomial
    interval; per-case scores from ``scores.json``)."""
    def measure(run: Path) -> Measurement:
        s = read_json(run / "scores.json")
        pairs: dict[str, dict[str, float]] = {}
        for case, score, split in zip(s["case_id"], s["scores"][readout], s["split"]):
            if split == "test":
                item, variant = case.rsplit("-", 1)
                pairs.setdefault(item, {})[variant] = score
        complete = [p for p in pairs.values() if "role_swap" in p and "role_confirmation" in p]
        wins = sum(p["role_swap"] > p["role_confirmation"] for p in complete)
        ties = sum(p["role_swap"] == p["role_confirmation"] for p in complete)
        k, n = wins + 0.5 * ties, len(complete)
        lo, hi = clopper_pearson(int(round(k)), n)
        return Measurement(k / n, (lo, hi), "share", ".3f", f"{n} matched pairs: {k:g} wins", "chance 0.5",
                           null=0.5, units=n, note=f"{k:g}/{n} items rank the role swap above its confirmation "
                           "(exact binomial interval)")
    return measure


def _role_tests(readout: str) -> tuple[Test, ...]:
    """A readout's pooled role AUC on both models (vs chance; primary, the paper's measure) and SmolLM2's
    matched-pair wins (secondary)."""
    pooled = f"pooled AUC of {readout}, role swaps vs role confirmations; vs chance 0.5"
    return (Test(f"{REC_SMOL}/records", pooled, recognition_auc("role_auc", readout, 0.5)),
            Test(f"{REC_SMOL}/records", f"matched pairs: role swap above its own role confirmation ({readout}); "
                 "vs 0.5", recognition_wins(readout), primary=False),
            Test(f"{REC_GEMMA}/records", pooled, recognition_auc("role_auc", readout, 0.5)))


def _both_recognition_models(group: str, rule: str, measure: Callable[[Path], Measurement],
                             primary: bool = True) -> tuple[Test, ...]:
    """The same readout test on SmolLM2's and Gemma 3's recognition group ``group``."""
    return tuple(Test(f"{model}/{group}", rule, measure, primary) for model in (REC_SMOL, REC_GEMMA))


CLAIMS: tuple[Claim, ...] = (
    Claim("recognition.fixed-v-criterion", "recognition", "Fixed value distance fails the 0.60 recognition "
          "criterion",
          Paper("Replacement recognition using the fixed V distance ranges from 0.454 to 0.493. None meets the 0.60 "
                "criterion or exceeds surface similarity.", (2200, 2201), "Fixed Scores on Role-Matched Record Pairs",
                "0.454-0.493"),
          "down",
          (*_both_recognition_models("role-pairs", "replacement macro-AUC of fixed d_V; role-matched pairs; vs 0.60",
                                     recognition_auc("replacement_macro_auc", "value distance d_V", 0.6)),
           *_both_recognition_models("records", "role swaps vs role confirmations AUC of fixed d_V; vs 0.60",
                                     recognition_auc("role_auc", "fixed d_V", 0.6), primary=False)),
          reference="criterion 0.60", units="groups", kind="no-effect", control="recognition.k-matching"),
    Claim("recognition.fixed-v-direction", "recognition", "Fixed d_V ranks role swaps below role confirmations",
          Paper("Its predefined direction gives AUC for role swaps versus role confirmations 0.336--0.463 across "
                "eight models", (2621, 2622), "Recognition Results on Held-Out Examples",
                "0.336-0.463 across eight models"),
          "down",
          _role_tests("fixed d_V"), reference="chance 0.5", units="groups"),
    Claim("recognition.k-matching", "recognition", "Key similarity matches records about the same entity and "
          "attribute (criterion 0.60)",
          Paper("Across 22 checkpoints, K-based entity--attribute matching AUC ranges from 0.558 to 0.879; 20 meet "
                "its specified lower-bound criterion", (2198, 2199), "Fixed Scores on Role-Matched Record Pairs",
                "0.558-0.879, 20 of 22 pass"),
          "up",
          _both_recognition_models("role-pairs", "matching macro-AUC of key similarity s_K; vs 0.60",
                                   recognition_auc("matching_macro_auc", "key similarity s_K", 0.6)),
          reference="criterion 0.60", units="groups"),
    Claim("recognition.joint-probe", "recognition", "A probe on jointly encoded K/V recognizes role swaps",
          Paper("Probes using jointly encoded KV representations obtain 0.508--0.862", (2625, 2626),
                "Recognition Results on Held-Out Examples", "0.508-0.862"),
          "up",
          _role_tests("joint K/V probe"), reference="chance 0.5", units="groups"),
    Claim("recognition.probe-vs-fixed", "recognition", "Jointly encoded representations improve on the fixed "
          "distance",
          Paper("Heads selected on development data and representations from jointly encoded records improve on "
                "the fixed distance.", (2620, 2621), "Recognition Results on Held-Out Examples",
                "fixed 0.336-0.463 vs joint K/V 0.508-0.862", (2622, 2626)),
          "up",
          _both_recognition_models("records", "role AUC, joint K/V probe minus fixed d_V (same group draws)",
                                   recognition_difference("joint K/V probe", "fixed d_V")),
          reference="fixed d_V", units="groups"),
)
