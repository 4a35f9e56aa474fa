"""The paper's open-OAKS numbers, for reports (labelled as the paper's; its checkpoints, not ours).

Copied from the seed text, the table label and its line beside each. Counts out of the panel's n;
differences in percentage points with their 95 % intervals.
"""

from __future__ import annotations

from kvprobe.studies.common.report import table_head, table_row

Interval = tuple[float, float]

#: tab:v52_oaks_protocols (seed L4712-4728), source complete: panel -> model -> (full, source, control,
#: source - full pp, its interval).
SOURCE_COMPLETE: dict[str, dict[str, tuple[int, int, int, float, Interval]]] = {
    "answerable (92)": {"Qwen3-4B": (28, 21, 30, -7.6, (-16.9, 1.1)),
                        "Llama-3.2-3B": (23, 25, 26, 2.2, (-5.4, 10.0)),
                        "Qwen3-32B": (51, 42, 53, -9.8, (-18.5, -1.1))},
    "all (116)": {"Qwen3-4B": (28, 22, 30, -5.2, (-12.8, 1.8)),
                  "Llama-3.2-3B": (23, 28, 26, 4.3, (-2.5, 11.2)),
                  "Qwen3-32B": (53, 44, 57, -7.8, (-15.2, -0.8))},
}
#: tab:v41_oaks_open (seed L4615-4617): mask - control, pp, answerable panel.
MASK_MINUS_CONTROL: dict[str, tuple[float, Interval]] = {
    "Qwen3-4B": (-9.8, (-18.9, -1.1)), "Llama-3.2-3B": (-1.1, (-9.0, 6.7)), "Qwen3-32B": (-12.0, (-20.2, -4.3))}
#: Reference agreement minus source completeness (seed L4729-4733): panel -> model -> (pp, interval).
AGREEMENT_MINUS_COMPLETE: dict[str, dict[str, tuple[float, Interval]]] = {
    "answerable (92)": {"Qwen3-4B": (4.3, (-4.3, 13.2)), "Llama-3.2-3B": (4.3, (-3.2, 12.8)),
                        "Qwen3-32B": (12.0, (2.1, 22.1))},
    "all (116)": {"Qwen3-4B": (3.4, (-3.5, 10.6)), "Llama-3.2-3B": (0.9, (-5.8, 7.8)),
                  "Qwen3-32B": (10.3, (1.7, 19.1))},
}
#: Qwen3-32B mask - full under the other two protocols (seed L4697-4702): panel -> (agreement, reference-only).
QWEN32_OTHER_PROTOCOLS: dict[str, tuple[tuple[float, Interval], tuple[float, Interval]]] = {
    "answerable (92)": ((2.2, (-5.4, 9.5)), (2.2, (-6.5, 10.5))),
    "all (116)": ((2.6, (-3.4, 8.7)), (2.6, (-5.1, 10.3))),
}
#: tab:v43_oaks_error_types (seed L4641-4648): full-complete baseline -> masked (partial, abstain, wrong).
LOSSES: dict[str, tuple[int, int, int, int]] = {"Qwen3-4B": (28, 2, 7, 4), "Llama-3.2-3B": (23, 0, 2, 4),
                                                "Qwen3-32B": (51, 4, 6, 4)}
#: The question review (seed L4598-4601).
ANSWERABILITY = {"answerable": 92, "partial": 17, "unanswerable": 6, "ambiguous": 1}
REFERENCE_SUPPORT = {"supported": 54, "partial": 51, "unsupported": 7, "mismatched": 4}
#: Same-grader protocol disagreements (seed L4710-4712): (disagree, answers, of them reference partially supported).
DISAGREEMENTS = (179, 1044, 98)


def _ci(v: float, ci: Interval) -> str:
    return f"{v:+.1f} [{ci[0]:+.1f}, {ci[1]:+.1f}]"


def lines() -> list[str]:
    """The paper's rows, labelled by model."""
    out = ["### The paper's rows", "", "tab:v52_oaks_protocols (seed L4712-4728), source complete:", "",
           *table_head(["panel", "paper model", "full", "source mask", "control", "mask - full (pp) [95% CI]",
                        "agreement minus completeness (pp) [95% CI]"])]
    for panel, models in SOURCE_COMPLETE.items():
        for m, (f, s, c, d, ci) in models.items():
            out.append(table_row([panel, m, f, s, c, _ci(d, ci), _ci(*AGREEMENT_MINUS_COMPLETE[panel][m])]))
    out += ["", "Qwen3-32B mask - full under the other protocols (seed L4697-4702): " + "; ".join(
        f"{panel}: reference agreement {_ci(*a)}, reference only {_ci(*r)}"
        for panel, (a, r) in QWEN32_OTHER_PROTOCOLS.items()) + ". Mask - control, answerable (tab:v41_oaks_open): "
        + ", ".join(f"{m} {_ci(*v)}" for m, v in MASK_MINUS_CONTROL.items()) + ".", "",
        "Full-complete answers under the mask (tab:v43_oaks_error_types): " + ", ".join(
            f"{m} {b} -> partial {p}, abstain {a}, wrong {w}" for m, (b, p, a, w) in LOSSES.items()) + ". Question "
        "review: " + ", ".join(f"{k} {v}" for k, v in ANSWERABILITY.items()) + "; reference support: " + ", ".join(
            f"{k} {v}" for k, v in REFERENCE_SUPPORT.items()) + f". The same-grader protocols disagree on "
        f"{DISAGREEMENTS[0]} of {DISAGREEMENTS[1]} answers, {DISAGREEMENTS[2]} on partially supported references.", ""]
    return out
