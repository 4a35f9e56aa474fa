"""The paper's claims the fact-map study tests, with measures of the fact-map runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvprobe.studies.common.claims import Claim, Measurement, Paper, Test, excludes_zero, read_summary
from kvprobe.studies.common.report import estimate

__all__ = ["CLAIMS", "fact_map_recovery", "fact_map_target"]


def _fact_scope(run: Path, variant: str | None) -> dict[str, Any]:
    s = read_summary(run)
    return s["all"] if variant is None else s["by_variant"][variant]


def fact_map_target(variant: str | None = None) -> Callable[[Path], Measurement]:
    """Recompute minus mask margin change (nats): what states formed with A visible still carry."""
    def measure(run: Path) -> Measurement:
        scope = _fact_scope(run, variant)
        t = scope["target_effect"]
        return Measurement(t["change"], tuple(t["change_ci"]), "nats", "+.3f",
                           f"{scope['n_cases']} histories, {scope['n_groups']} groups", "source mask",
                           units=scope["n_groups"])
    return measure


def fact_map_recovery(condition: str, variant: str | None = None) -> Callable[[Path], Measurement]:
    """Share of the recompute effect a rebuild at fixed positions recovers; undefined when the recompute
    effect's interval includes 0."""
    def measure(run: Path) -> Measurement:
        scope = _fact_scope(run, variant)
        t, c = scope["target_effect"], scope["conditions"][condition]
        n = f"{scope['n_cases']} histories, {scope['n_groups']} groups"
        if not excludes_zero(t["change_ci"]):
            return Measurement(None, None, "recovery", "+.2f", n, "recompute", units=scope["n_groups"],
                               not_testable="recovery undefined: the recompute effect "
                               f"{estimate(t['change'], t['change_ci'], '+.3f')} nats has an interval including 0")
        return Measurement(c["recovered"], tuple(c["recovered_ci"]), "recovery", "+.2f", n, "recompute",
                           units=scope["n_groups"])
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("fact-map.later-states", "fact-map", "Recomputing without the hidden record raises the current answer "
          "beyond the source mask: the later states formed with it favour the old answer (current-minus-old margin, "
          "recompute minus mask)",
          Paper("Recomputing the history after deleting the same records improves current matches by a further "
                "4.2--9.6 percentage points", (504, 505), "Later Cache States Can Preserve Earlier Relations",
                "MQuAKE current answers +4.2 to +9.6 pp, recompute vs source mask"),
          "up",
          (Test("fact-map/smollm2-135m-instruct-quantity", "candidate margin; recompute vs source mask; quantity",
                fact_map_target()),
           Test("fact-map/smollm2-135m-instruct-records", "candidate margin; recompute vs source mask; records",
                fact_map_target(), primary=False),
           Test("fact-map/qwen2.5-coder-0.5b-instruct-quantity", "candidate margin; recompute vs source mask; "
                "quantity", fact_map_target()),
           Test("fact-map/qwen2.5-coder-0.5b-instruct-quantity", "candidate margin; recompute vs source mask; "
                "quantity, B refers to A's unit", fact_map_target("unit_from_a"), primary=False)),
          reference="source mask", units="groups"),
    Claim("fact-map.fixed-positions", "fact-map", "Rebuilding the later states at fixed positions reproduces the "
          "recompute effect",
          Paper("Thus historical loss persists at fixed positions.", (543, 543),
                "Later Cache States Can Preserve Earlier Relations", "rebuild -19.8 to -41.3 pp vs recompute "
                "-20.2 to -41.0 pp", (505, 540)),
          "up",
          (Test("fact-map/smollm2-135m-instruct-quantity", "share of the recompute effect recovered by rebuilding "
                "every later row (rebuild:..end); quantity", fact_map_recovery("rebuild:..end")),
           Test("fact-map/smollm2-135m-instruct-records", "share recovered by rebuild:..end; records",
                fact_map_recovery("rebuild:..end"), primary=False),
           Test("fact-map/qwen2.5-coder-0.5b-instruct-quantity", "share recovered by rebuild:..B (all later rows); "
                "quantity", fact_map_recovery("rebuild:..B")),
           Test("fact-map/qwen2.5-coder-0.5b-instruct-quantity", "share recovered by rebuild:..B; quantity, B refers "
                "to A's unit", fact_map_recovery("rebuild:..B", "unit_from_a"), primary=False)),
          reference="recompute", units="groups"),
)
