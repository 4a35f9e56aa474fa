"""The paper's claims the minteval study tests, with measures of the minteval runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from pathlib import Path

from kvprobe.studies.common.claims import (PAPER_RULE, Claim, Measurement, Paper, Test, find_entry, floor_reason,
                                           pp_measurement, read_summary)

__all__ = ["CLAIMS", "CURRENT_LOCATION_GAIN", "HISTORY_FALL", "PAPER_MODELS", "minteval_source"]

#: The paper's models of its MINTEval numbers, in the order of :data:`HISTORY_FALL`.
PAPER_MODELS = ("Qwen3-4B", "Llama-3.2-3B", "Qwen3-32B")
#: Whole-source mask minus full access on current-location questions: the paper gives one model's, the only
#: interval above 0 of the three (pp, L1365-1366).
CURRENT_LOCATION_GAIN = {"model": "Llama-3.2-3B", "pp": 9.72, "ci": (5.75, 13.90), "lines": (1365, 1366)}
#: How far history answers fall under the whole-source mask, per model (pp, L1366-1367).
HISTORY_FALL = {"pp": (12.86, 15.39, 13.02), "lines": (1366, 1367)}


def minteval_source(run: Path) -> Measurement:
    """Source mask minus full access, exact match with EOS, all questions (component bootstrap)."""
    s = read_summary(run)
    cell = find_entry(s["cells"], scope="all", policy="source")
    full = find_entry(s["cells"], scope="all", policy="full")
    ch = cell["change_component"]
    return pp_measurement(ch["pp"], ch["ci"], f"{cell['n']} questions, {s['components']} components",
                          f"full {full['em']}/{full['n']}", floor_reason(full["em"], full["n"], "full access"),
                          units=s["components"], answers=cell["n"])


CLAIMS: tuple[Claim, ...] = (
    Claim("minteval.source", "minteval", "Hiding every superseded movement lowers all-question accuracy",
          Paper("Under this resampling, whole-source masking lowers all-question accuracy in all three models",
                (1361, 1362), "Repeated Updates and Contextual Multi-Hop Questions",
                "-6.79 [-8.35, -5.31], -5.80 [-7.04, -4.62], -10.68 [-12.89, -8.61] pp", (1362, 1364)),
          "down",
          (Test("minteval/smollm2-135m-instruct", f"{PAPER_RULE}: normalized exact match with EOS; source mask vs "
                "full; all questions", minteval_source),),
          reference="full access", units="components"),
)
