"""One quantity-task history under the five access conditions of the paper's section 3.

This is the quick-start job: it prefills the paper's worked example once
(Llama-3.2-3B, test-000, B refers to A for its unit; paper L3795-3815), then
for the current and unrelated questions scores the current and old canonical
JSON answers and generates a greedy answer under full access, the
whole-source mask, its matched control, the number-only mask and its control.
The full study (120 groups, statistics, report) is the [quantity] issue.
"""

from __future__ import annotations

from typing import Any

import kvprobe
from kvprobe.studies.datasets.quantity_task import tasks
# The example lives with the task (the fact map uses it too); re-exported for the CLI and tests.
from kvprobe.studies.datasets.quantity_task.example import EXAMPLE, build_prompt, example_case  # noqa: F401


def run_demo(model: kvprobe.Model, max_new_tokens: int = 40, unit_from_a: bool = True,
             extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Rows (query x condition) with candidate log-probabilities, margin and greedy answer.

    ``extra`` adds conditions by name (``interventions.parse_condition``), e.g.
    ``("compact:A", "rebuild:A", "recompute:A")``.
    """
    case = example_case(unit_from_a)
    history = model.prefill(tasks.build_prompt(case))
    conds = tasks.study_conditions(history, case, operations=False)
    if extra:
        from kvprobe.interventions import parse_condition

        for spec in extra:
            conds[spec] = parse_condition(spec, history)
    asked = [q for q in tasks.queries(case) if q.role in ("current", "unrelated")]
    gens = model.generate(history, [q.question for q in asked], access=conds, max_new_tokens=max_new_tokens)
    rows = []
    for qi, q in enumerate(asked):
        query = q.role
        scores = model.score(history, q.question, list(q.candidates), access=conds)
        full_margin = scores["full"].margin()
        for name, access in conds.items():
            g = gens[name][qi]
            rows.append({
                "query": query,
                "condition": name,
                "masked_tokens": getattr(access, "n_tokens", 0) if isinstance(access, kvprobe.Mask) else 0,
                "logp_right": round(scores[name][0], 4),
                "logp_other": round(scores[name][1], 4),
                "margin": round(scores[name].margin(), 4),
                "margin_change_vs_full": round(scores[name].margin() - full_margin, 4),
                "answer": g.text,
                "stop": g.stop_reason,
                "tokens": g.n_tokens,
            })
    if not history.check_digest():
        raise RuntimeError("the shared history K/V changed during the demo")
    return rows


def format_table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width table a person can scan."""
    header = f"{'query':<10} {'condition':<18} {'hidden':>6} {'margin':>8} {'d vs full':>9} {'stop':<4}  answer"
    lines = [header, "-" * len(header)]
    for r in rows:
        answer = r["answer"].replace("\n", " ")
        answer = answer if len(answer) <= 60 else answer[:57] + "..."
        lines.append(
            f"{r['query']:<10} {r['condition']:<18} {r['masked_tokens']:>6} {r['margin']:>8.3f} "
            f"{r['margin_change_vs_full']:>9.3f} {r['stop']:<4}  {answer}"
        )
    return "\n".join(lines)
