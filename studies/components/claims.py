"""The paper's claims the components and question-relevance studies test, with measures of their runs'
``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from kvprobe.readouts.stats import clopper_pearson
from kvprobe.studies.common.claims import Claim, Measurement, Paper, Test, excludes_zero, read_summary
from kvprobe.studies.common.report import estimate

__all__ = ["CLAIMS", "REPORT_CLAIMS", "component_delta", "criterion_measurement", "question_relevance"]


def component_delta(component: str) -> Callable[[Path], Measurement]:
    """Delta_c of zeroing a component at the old span beyond the matched span, with the Bonferroni interval. Not
    testable when the run's positive control, the Q-K mask, does not show (its pointwise interval includes 0: the
    run cannot show a component effect). The note gives the unedited two-way target accuracy with its exact
    interval (both states pooled), so a margin on a choice the model makes at chance is visible."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        e, qk = s["effects"][component], s["effects"]["QK"]
        reason = None
        if not excludes_zero(qk["ci_95"]):
            reason = (f"the positive control (Q-K mask) does not show: {estimate(qk['delta'], qk['ci_95'], '+.2f')} "
                      "nats includes 0")
        base = [c for c in s["cells"] if c["condition"] == "none" and c["query"] == "target"]
        right, n = sum(round(c["accuracy"] * c["n"]) for c in base), sum(c["n"] for c in base)
        lo, hi = clopper_pearson(right, n)
        note = (f"Q-K positive control {estimate(qk['delta'], qk['ci_95'], '+.2f')} nats; unedited target choice "
                f"{right}/{n} right [{100 * lo:.1f}, {100 * hi:.1f}] % (two-way, chance 50 %)")
        return Measurement(e["delta"], tuple(e["ci_bonferroni"]), "nats", "+.2f", f"{e['n_clusters']} clusters",
                           "matched span", units=e["n_clusters"], not_testable=reason, note=note)
    return measure


def question_relevance(table: str, signal: str) -> Callable[[Path], Measurement]:
    """``replacement_auc`` or ``question_relevance`` of one signal (null 0.5)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        e = s[table][signal]
        value, ci = (e["auc"], (e["lo"], e["hi"])) if table == "replacement_auc" else (e["value"], tuple(e["ci"]))
        return Measurement(value, ci, "AUC" if table == "replacement_auc" else "share", ".3f",
                           f"{s['clusters']} clusters", "chance 0.5", null=0.5, units=s["clusters"])
    return measure


def criterion_measurement(ci: Sequence[float], criterion: float, unit: str = "AUC") -> Measurement:
    """A question-relevance run's interval against a criterion (the null): a within-family replacement AUC
    (``unit`` ``AUC``) or a question relevance (``share``).

    The run's summary (``relevance_summary.replacement_verdict`` and ``relevance_verdict``) judges it by the
    claims of :data:`REPORT_CLAIMS`.
    """
    return Measurement(None, (ci[0], ci[1]), unit, ".3f", "", f"criterion {criterion:.2f}", null=criterion)


CLAIMS: tuple[Claim, ...] = (
    *(Claim(f"components.effects-{slug}", "components", f"Zeroing {comp} at the old span moves the margin toward "
            "the current value",
            Paper("Seven of nine models have positive effects for each of K, V, and K + V.", (5772, 5772),
                  "Component Effects Do Not Establish Answer Preservation", numbers, (5789, 5789)),
            "up",
            tuple(Test(f"components/{model}", f"Delta_c of zeroing {comp} beyond the matched span; Bonferroni "
                       "interval (3 comparisons)", component_delta(comp))
                  for model in ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct")),
            reference="matched span", units="clusters")
      for slug, comp, numbers in (("k", "K", "Qwen3-4B K 2.60 [2.25, 2.93] nats"),
                                  ("v", "V", "Qwen3-4B V 1.79 [1.41, 2.15] nats"),
                                  ("kv", "K+V", "Qwen3-4B K+V 2.25 [1.90, 2.59] nats"))),
    Claim("question-relevance.lexical-replacement", "question-relevance", "Lexical overlap recognizes replacement "
          "only at chance",
          Paper("Lexical overlap identifies which question requires the target information in this construction, "
                "but recognizes replacement at chance.", (2294, 2294), "Attention, Lexical Relevance, and "
                "Leave-One-Out Signals", "replacement AUC 0.500", (2284, 2284)),
          "none",
          (Test("question-relevance/smollm2-135m-instruct-budget8", "replacement AUC of lexical overlap; vs 0.5",
                question_relevance("replacement_auc", "lexical")),),
          reference="chance 0.5", units="clusters", kind="construction"),
    Claim("question-relevance.lexical-relevance", "question-relevance", "Lexical overlap tells the relevant "
          "question apart",
          Paper("Lexical overlap identifies which question requires the target information in this construction, "
                "but recognizes replacement at chance.", (2294, 2294), "Attention, Lexical Relevance, and "
                "Leave-One-Out Signals", "question relevance 1.000", (2284, 2284)),
          "up",
          (Test("question-relevance/smollm2-135m-instruct-budget8", "question relevance of lexical overlap; vs 0.5",
                question_relevance("question_relevance", "lexical")),),
          reference="chance 0.5", units="clusters", kind="construction"),
)

#: Claims only the question-relevance report judges (the scorecard lists :data:`CLAIMS`): each signal's replacement
#: AUC within update families against the recognition criterion, and its question relevance against ours.
REPORT_CLAIMS: tuple[Claim, ...] = (
    Claim("question-relevance.within-family-replacement", "question-relevance", "Within update families, a signal "
          "recognizes replacement poorly (its replacement AUC below the recognition criterion)",
          Paper("Twenty-six satisfy the criterion for poor replacement recognition, eight support the opposite "
                "conclusion, and five are inconclusive.", (2299, 2300), "Attention, Lexical Relevance, and "
                "Leave-One-Out Signals", "twenty-six of 39 combinations poor, eight opposite, five inconclusive",
                (2296, 2300)),
          "down", (), kind="no-effect"),
    Claim("question-relevance.relevance-criterion", "question-relevance", "A signal's question relevance lies above "
          "the criterion (ours: the recognition criterion's 0.60; the paper states none)",
          Paper("Of 36 question-relevance comparisons, lexical overlap satisfies the criterion in 12/12, attention in "
                "4/12, and leave-one-out sensitivity in 1/12.", (2302, 2303), "Attention, Lexical Relevance, and "
                "Leave-One-Out Signals", "lexical 12/12, attention 4/12, leave-one-out 1/12"),
          "up", ()),
)
