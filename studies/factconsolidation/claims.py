"""The paper's claims the factconsolidation study tests, with measures of the factconsolidation runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvprobe.readouts.stats import MIN_HISTORIES
from kvprobe.studies.common.claims import (PAPER_RULE, Claim, Measurement, Paper, Test, count_pp, find_entry,
                                           floor_reason, join_reasons, pp_measurement, read_summary)

__all__ = ["CLAIMS", "REPORT_CLAIMS", "factconsolidation_fallback", "factconsolidation_source",
           "token_ratio_measurement"]


def factconsolidation_source(run: Path) -> Measurement:
    """Source mask minus full access, complete answers with EOS (pp of the source-answerable questions)."""
    s = read_summary(run)
    cell, full = find_entry(s["cells"], policy="source"), find_entry(s["cells"], policy="full")
    n = cell.get("answerable", cell["n"])
    value, ci = count_pp(cell["complete_change_vs_full"], n)
    histories = len(s["histories"])
    no_interval = None if ci is not None else f"no interval: {histories} histories, fewer than {MIN_HISTORIES} to resample"
    return pp_measurement(value, ci, f"{n} questions, {histories} histories",
                          f"full {full['complete_eos']}/{n}; source {cell['complete_eos']}/{n}",
                          join_reasons(floor_reason(full["complete_eos"], n, "full access"), no_interval),
                          units=histories, answers=n)


def factconsolidation_fallback(run: Path) -> Measurement:
    """The re-answer fallback (source mask; recompute after a capped answer) minus recompute alone, complete
    answers with EOS (pp of the source-answerable questions)."""
    f = read_summary(run)["fallback"]
    value, ci = count_pp(f["change"], f["n"])
    no_interval = (None if ci is not None else
                   f"no interval: {f['histories']} histories, fewer than {MIN_HISTORIES} to resample")
    return pp_measurement(value, ci, f"{f['n']} questions, {f['histories']} histories",
                          f"recompute {f['recompute']}/{f['n']}; fallback {f['fallback']}/{f['n']} "
                          f"({f['fallbacks']} fallbacks)",
                          join_reasons(floor_reason(f["recompute"], f["n"], "recompute"), no_interval),
                          units=f["histories"], answers=f["n"])


def token_ratio_measurement(ratio: dict[str, Any] | None, full_complete: int, n: int,
                            floor: bool = True) -> Measurement:
    """One history's generated tokens under the source mask over full access (an entry of the summary's
    ``unfinished.ratios[...]["ratios"]``), null 1: not testable without an interval and, with ``floor``, when full
    access (``full_complete`` of ``n`` complete answers with EOS) is at the floor.

    The run's report (``unfinished.ratio_verdict``) judges it by the claim of :data:`REPORT_CLAIMS`.
    """
    if ratio is None or ratio["ci"] is None:
        return Measurement(None if ratio is None else ratio["ratio"], None, "ratio", ".2f", f"{n} questions",
                           null=1.0, not_testable="no interval")
    return Measurement(ratio["ratio"], (ratio["ci"][0], ratio["ci"][1]), "ratio", ".2f", f"{n} questions",
                       f"full {full_complete}/{n}", null=1.0,
                       not_testable=floor_reason(full_complete, n, "full access") if floor else None)


CLAIMS: tuple[Claim, ...] = (
    Claim("factconsolidation.source", "factconsolidation", "Hiding superseded facts changes complete answers "
          "(down for Qwen, up for Gemma)",
          Paper("Qwen's complete-answer rate falls from 90.1% (336) to 80.4% (300) under source masking.",
                (1670, 1671), "Why Net Accuracy Changes Differ between the Two Models",
                "Qwen net -9.7 pp; Gemma +20.1 pp", (1672, 1675)),
          "either",
          (Test("factconsolidation/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer with EOS (rule grader); "
                "source mask vs full", factconsolidation_source),),
          reference="full access", units="histories"),
    Claim("factconsolidation.fallback", "factconsolidation", "Re-answering from the recomputed cache after a "
          "capped source-masked answer does not beat recompute alone",
          Paper("a fallback that re-answers from the recomputed cache after a capped source-masked answer does not "
                "exceed recomputation alone", (4317, 4319), "Retained Text and Routing on Contextual MQuAKE",
                "Qwen 349 vs 355 (5 gains, 11 losses, p = 0.21); Gemma 265 vs 266 (13 and 14, p = 1.0)",
                (4319, 4322)),
          "none",
          (Test("factconsolidation/smollm2-135m-instruct", f"{PAPER_RULE}: complete answer with EOS (rule grader); "
                "fallback vs recompute", factconsolidation_fallback),),
          reference="recompute", units="histories"),
)

#: Claims only the run's report judges (the scorecard lists :data:`CLAIMS`): the source mask's token ratio per
#: history (``unfinished.py``).
REPORT_CLAIMS: tuple[Claim, ...] = (
    Claim("factconsolidation.lengthens", "factconsolidation", "Masking lengthens generation: source-masked outputs "
          "hold more generated tokens than full access",
          Paper("Masking lengthens generation.", (4393, 4393), "Unfinished Generation under Masking",
                "Qwen3.8-27B 1.29 [1.18, 1.42] and 1.26 [1.16, 1.40], Gemma 4 26B-A4B 1.77 [1.53, 2.09] and 1.71 "
                "[1.48, 2.01] times the full-access tokens", (4394, 4397)),
          "up", ()),
)
