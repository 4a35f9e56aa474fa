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

from . import strings

# The worked example's fields (paper L3795-3815).
EXAMPLE = {
    "entity": "Assembly-TEST-000",
    "attribute": "cycle duration",
    "old_num": "159",
    "new_num": "628",
    "unit": "minutes",
    "envelope": "Envelope-TEST-000",
    "color": "amber",
}
# UNCLEAR (paper): user-message layout and record order; we use A, inspection record,
# neutral note, B, separated by blank lines.
SEGMENT_ORDER = ("A", "inspection", "note", "B")
# Paper section 1.3: template date fixed to 16 Sep 2026, thinking disabled.
TEMPLATE_KWARGS = {"enable_thinking": False, "date_string": "16 Sep 2026"}


def build_prompt(unit_from_a: bool = True, example: dict[str, str] = EXAMPLE) -> kvprobe.Prompt:
    """The example history as a chat prompt with segments A, inspection, note, B."""
    b_template = strings.RECORD_B_UNIT_FROM_A if unit_from_a else strings.RECORD_B_UNIT_STATED
    texts = {
        "A": strings.RECORD_A.format(**example),
        "inspection": strings.INSPECTION_RECORD.format(**example),
        "note": strings.neutral_note(),
        "B": b_template.format(**example),
    }
    return kvprobe.Prompt(
        [(name, texts[name]) for name in SEGMENT_ORDER],
        chat=True,
        system=strings.SYSTEM,
        template_kwargs=TEMPLATE_KWARGS,
    )


def conditions(history: kvprobe.History, example: dict[str, str] = EXAMPLE) -> dict[str, kvprobe.Access]:
    """Full, whole-source mask + control, number-only mask + control (all layers)."""
    source = kvprobe.Mask(history.span("A"), name="source")
    # Number-only: the old number followed by its unit; digits inside the entity id are
    # never matched because the search text includes the unit.
    number_with_unit = f"{example['old_num']} {example['unit']}"
    a_text = history.text[slice(*history.rendered.segments["A"])]
    lo = a_text.index(number_with_unit)
    number = kvprobe.Mask(history.span("A", chars=(lo, lo + len(example["old_num"]))), name="number")
    return {
        "full": kvprobe.Full(),
        "source": source,
        "source-control": kvprobe.matched_control(history, source, "note"),
        "number": number,
        "number-control": kvprobe.matched_control(history, number, "note"),
    }


def run_demo(model: kvprobe.Model, max_new_tokens: int = 40, unit_from_a: bool = True,
             extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Rows (query x condition) with candidate log-probabilities, margin and greedy answer.

    ``extra`` adds conditions by name (``interventions.parse_condition``), e.g.
    ``("compact:A", "rebuild:A", "recompute:A")``.
    """
    history = model.prefill(build_prompt(unit_from_a))
    conds = conditions(history)
    if extra:
        from interventions import parse_condition

        for spec in extra:
            conds[spec] = parse_condition(spec, history)
    e = EXAMPLE
    queries = {
        "current": (strings.CURRENT_QUESTION.format(**e), f"{e['new_num']} {e['unit']}", f"{e['old_num']} {e['unit']}"),
        "unrelated": (strings.UNRELATED_QUESTION.format(**e), e["color"], "UNKNOWN"),
    }
    gens = model.generate(history, [q for q, _, _ in queries.values()], access=conds, max_new_tokens=max_new_tokens)
    rows = []
    for qi, (query, (question, right, other)) in enumerate(queries.items()):
        cands = [f'{{"answer": "{right}"}}', f'{{"answer": "{other}"}}']
        scores = model.score(history, question, cands, access=conds)
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
