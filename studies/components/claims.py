"""The paper's claims the components and question-relevance studies test, with measures of their runs'
``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import Claim, Measurement, Paper, Test, read_summary

__all__ = ["CLAIMS", "component_delta", "question_relevance"]


def component_delta(component: str) -> Callable[[Path], Measurement]:
    """Delta_c of zeroing a component at the old span beyond the matched span, with the Bonferroni interval."""
    def measure(run: Path) -> Measurement:
        e = read_summary(run)["effects"][component]
        return Measurement(e["delta"], tuple(e["ci_bonferroni"]), "nats", "+.2f", f"{e['n_clusters']} clusters",
                           "matched span", units=e["n_clusters"])
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


CLAIMS: tuple[Claim, ...] = (
    Claim("components.effects", "components", "Zeroing K, V or K+V at the old span moves the margin toward the "
          "current value",
          Paper("Seven of nine models have positive effects for each of K, V, and K + V.", (5772, 5772),
                "Component Effects Do Not Establish Answer Preservation",
                "Qwen3-4B K 2.60 [2.25, 2.93], V 1.79 [1.41, 2.15], K+V 2.25 [1.90, 2.59] nats", (5789, 5789)),
          "up",
          tuple(Test(f"components/{model}", f"Delta_c of zeroing {comp} beyond the matched span; Bonferroni "
                     "interval (3 comparisons)", component_delta(comp))
                for model in ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct") for comp in ("K", "V", "K+V"))),
    Claim("question-relevance.lexical-replacement", "question-relevance", "Lexical overlap recognizes replacement "
          "only at chance",
          Paper("Lexical overlap identifies which question requires the target information in this construction, "
                "but recognizes replacement at chance.", (2294, 2294), "Attention, Lexical Relevance, and "
                "Leave-One-Out Signals", "replacement AUC 0.500", (2284, 2284)),
          "none",
          (Test("question-relevance/smollm2-135m-instruct-budget8", "replacement AUC of lexical overlap; vs 0.5",
                question_relevance("replacement_auc", "lexical")),)),
    Claim("question-relevance.lexical-relevance", "question-relevance", "Lexical overlap tells the relevant "
          "question apart",
          Paper("Lexical overlap identifies which question requires the target information in this construction, "
                "but recognizes replacement at chance.", (2294, 2294), "Attention, Lexical Relevance, and "
                "Leave-One-Out Signals", "question relevance 1.000", (2284, 2284)),
          "up",
          (Test("question-relevance/smollm2-135m-instruct-budget8", "question relevance of lexical overlap; vs 0.5",
                question_relevance("question_relevance", "lexical")),)),
)
