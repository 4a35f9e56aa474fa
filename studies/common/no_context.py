"""The no-context (weights-only) baseline: the question asked with the history's framing and no history.

Paper: appendix "A no-context baseline for historical questions" (label app:v52_weights, seed
~4552-4563): "A weights-only baseline makes the operation comparison conditional. Among
historical-wording cases that the no-context model answers incorrectly, full access answers ...
The denominator is the no-context-wrong subset". Two pieces, shared by every study that asks it:

* :class:`NoContext` (``kvprobe.interventions.text``, re-exported here), the condition ``no-context``: the row starts from a fresh prefill of the
  history prompt's framing alone (chat template, system message, start of the user turn) with
  every segment and the question separator removed, so the question reads exactly as in a chat
  holding the system message and the question only. The history's cache is not read (its own
  prefill, like ``TextRecompute``); the question suffix is the history's own.
* :func:`conditional_on_baseline` and :func:`conditional_table`: per condition, correct answers
  on the units the baseline answers wrongly (denominator = the no-context-wrong subset), with
  paired group-bootstrap intervals (the same draws for every condition) and the change against a
  reference condition, as a markdown table.

Why not ``TextRecompute`` of every segment: it refuses to delete every segment, a
:class:`kvprobe.Prompt` needs at least one, and deleting the segments would keep the separator
between the history and the question (``"\\n\\n"`` at the start of the user turn). Raw (non-chat)
prompts keep their question separator, which is part of the question suffix there.
"""

from __future__ import annotations

from typing import Any, Hashable, Iterable, Mapping, NamedTuple, Sequence

import numpy as np

from kvprobe.interventions.text import NoContext, no_context_prompt
from kvprobe.readouts.stats import DRAWS, bootstrap_mean, group_bootstrap_weights, percentile_interval
from .report import estimate, table_head, table_row

__all__ = ["NO_CONTEXT", "NoContext", "no_context_prompt", "Outcome", "conditional_on_baseline", "conditional_table"]

#: The condition's name in rows and reports.
NO_CONTEXT = "no-context"


# --------------------------------------------------------------------------- the conditional table


class Outcome(NamedTuple):
    """One graded answer: ``key`` pairs it with the baseline's answer to the same question (a case, or a
    case and paraphrase); ``group`` is its bootstrap unit (default: the key)."""

    key: Hashable
    query: str
    condition: str
    correct: bool
    group: Hashable | None = None


def _rate(values: np.ndarray, weights: np.ndarray) -> tuple[float | None, list[float] | None]:
    """Mean of ``values`` (NaN = not counted) and its percentile interval over the draws ``weights``."""
    present = ~np.isnan(values)
    if not present.any():
        return None, None
    draws = bootstrap_mean(values, weights)
    return float(values[present].mean()), percentile_interval(draws)


def conditional_on_baseline(outcomes: Iterable[Outcome], query: str, seed: int, draws: int = DRAWS,
                            baseline: str = NO_CONTEXT, reference: str | None = None,
                            order: Sequence[str] = ()) -> dict[str, Any] | None:
    """Per condition, correct answers to ``query`` on the units the ``baseline`` answers wrongly.

    Units are the keys with a baseline outcome; the subset is those it answers wrongly (the
    denominator). Each condition's rate on the subset and its change against ``reference`` (the
    units both answered) get 95 % percentile intervals from ``draws`` group-bootstrap draws of every
    unit's group (``seed``), the same draws for every condition (paired); a draw's rate is over the
    subset units it holds. Conditions come in ``order``, others after, alphabetically. None when no
    unit has a baseline outcome.

    Example (two cases, the baseline wrong on ``c1`` only)::

        rows = [Outcome("c0", "historical", "no-context", True), Outcome("c1", "historical", "no-context", False),
                Outcome("c0", "historical", "full", True), Outcome("c1", "historical", "full", True),
                Outcome("c1", "historical", "source-mask", False)]
        t = conditional_on_baseline(rows, "historical", seed=0, reference="full")
        [(c["condition"], c["correct"], c["n"]) for c in t["conditions"]]  # [('full', 1, 1), ('source-mask', 0, 1)]
        t["subset"], t["units"]                                               # (1, 2)
    """
    outcomes = [o for o in outcomes if o.query == query]
    base = {o.key: o for o in outcomes if o.condition == baseline}
    if not base:
        return None
    keys = sorted(base, key=repr)
    index = {k: i for i, k in enumerate(keys)}
    groups = [base[k].group if base[k].group is not None else k for k in keys]
    wrong = np.array([not base[k].correct for k in keys])
    weights = group_bootstrap_weights([str(g) for g in groups], n_draws=draws, seed=seed)
    values: dict[str, np.ndarray] = {}
    for o in outcomes:
        if o.condition != baseline and o.key in index:
            v = values.setdefault(o.condition, np.full(len(keys), np.nan))
            v[index[o.key]] = float(bool(o.correct))
    names = sorted(values, key=lambda c: (order.index(c) if c in order else len(order), c))
    ref = values.get(reference) if reference is not None else None
    conditions = []
    for name in names:
        mine = np.where(wrong, values[name], np.nan)
        rate, ci = _rate(mine, weights)
        entry: dict[str, Any] = {"condition": name, "correct": int(np.nansum(mine)),
                                 "n": int((~np.isnan(mine)).sum()), "rate": rate, "ci": ci}
        if ref is not None and name != reference:
            diff = mine - np.where(wrong, ref, np.nan)
            change, change_ci = _rate(diff, weights)
            entry["change_vs_reference"] = {"change": change, "ci": change_ci, "n": int((~np.isnan(diff)).sum())}
        conditions.append(entry)
    return {"query": query, "baseline": baseline, "reference": reference, "units": len(keys),
            "groups": len(set(map(str, groups))), "baseline_correct": int((~wrong).sum()),
            "subset": int(wrong.sum()), "subset_groups": len({str(g) for g, w in zip(groups, wrong) if w}),
            "draws": draws, "seed": seed, "conditions": conditions}


def _percent(value: float | None, ci: Sequence[float] | None, fmt: str = ".1f") -> str:
    return "n/a" if value is None else estimate(100 * value, [100 * ci[0], 100 * ci[1]], fmt)


def conditional_table(result: Mapping[str, Any], anchors: Mapping[str, str] | None = None,
                      anchor_label: str = "paper") -> list[str]:
    """Markdown lines of a :func:`conditional_on_baseline` result: one sentence naming the subset, then
    condition | correct / subset | rate % [95% CI] | change vs reference (pp) [95% CI] (| ``anchor_label``
    when ``anchors`` maps conditions to quoted values).

    Example (the result of the :func:`conditional_on_baseline` example)::

        conditional_table(t)[2]   # '| condition | correct / subset | rate % [95% CI] | change vs full (pp) [95% CI] |'
    """
    r = result
    ref = r.get("reference")
    lines = [f"No-context-wrong subset: {r['subset']} of {r['units']} {r['query']} questions ({r['subset_groups']} "
             f"of {r['groups']} bootstrap groups); the {r['baseline']} baseline answers {r['baseline_correct']} "
             f"correctly. Intervals: {r['draws']:,} paired group-bootstrap draws (seed {r['seed']}).", ""]
    columns = ["condition", "correct / subset", "rate % [95% CI]"]
    if ref:
        columns.append(f"change vs {ref} (pp) [95% CI]")
    if anchors:
        columns.append(anchor_label)
    lines += table_head(columns)
    for c in r["conditions"]:
        cells = [c["condition"], f"{c['correct']} / {c['n']}", _percent(c["rate"], c["ci"])]
        if ref:
            ch = c.get("change_vs_reference")
            cells.append("" if ch is None else "n/a" if ch["change"] is None else
                         estimate(100 * ch["change"], [100 * ch["ci"][0], 100 * ch["ci"][1]], "+.1f"))
        if anchors:
            cells.append(anchors.get(c["condition"], ""))
        lines.append(table_row(cells))
    return lines
