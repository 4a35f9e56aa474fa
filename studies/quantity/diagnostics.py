"""Answer outcomes of a quantity run beyond correct / incorrect: failure categories, units, capped outputs.

Three tables of the paper, each from the rows' stored grading (``quantity_task/grading.py``; nothing is
decoded again):

* **Failure diagnostics** (tab:v33_failure_diagnostics_dependent, L4083: "separates quantity, format and
  termination outcomes"): per condition, every answer's ``category`` under the paper's complete rule (rule 3):
  the token cap (termination), a format failure, or a quantity outcome (UNKNOWN, complete, missing, generic or
  wrong unit, old, auxiliary or other value). The counts are the summary cells' ``categories``.
* **Per-unit breakdown** (tab:v23_unit_breakdown, L3509-3537): replacements, current query, whole-source
  mask, per unit: n, exact (rule 1), equivalent (rule 2), complete (rule 3), missing, generic and wrong unit,
  and how many labels the equivalent-units rule changes against exact (L3515-3516).
* **Capped outputs** (L4425-4457): the same cases' outputs that hit the token cap: how many, how many begin
  with a correct first answer (exact Clopper-Pearson 95 % interval), hold a re-check or a missing-referent
  phrase (``quantity_task/strings.py``), or a second, different answer object.

:func:`unit_breakdown` and :func:`capped_outputs` read the summary's ``cells[(information, query,
condition)][group] = row``; the ``*_lines`` functions format a summary's entries for ``report.md`` and the
cross-model panel (``panel.py``).
"""

from __future__ import annotations

from typing import Any

from kvprobe.readouts.stats import clopper_pearson
from kvprobe.studies.common.report import percent_count, rate_interval, table_head, table_row
from kvprobe.studies.datasets.quantity_task.grading import CATEGORIES

#: The rows the per-unit and capped tables read: the paper's subset (replacements, current query,
#: whole-source mask; L3509-3510, L4426-4427, L4442).
SUBSET = {"relation": "replacement", "query": "current", "condition": "source"}
#: Unit order of the paper's table (L3511-3513, tab:v23_unit_breakdown); units not in it follow, alphabetically.
UNIT_ORDER = ("minutes", "meters", "liters", "volts", "grams", "hours")
#: The paper's per-unit counts of its 60 unit-dependent replacements (L3511-3513).
PAPER_UNIT_COUNTS = {"minutes": 9, "meters": 14, "liters": 10, "volts": 10, "grams": 11, "hours": 6}
#: Unit outcomes of the per-unit table: the row ``category`` (rule 3) they count.
UNIT_OUTCOMES = ("missing_unit", "generic_unit", "wrong_unit")
#: Termination and format failures, counted apart from the unit outcomes (ours; the paper's models had none there).
UNIT_FAILURES = ("capped", "format_failure")
#: Rule columns of the per-unit table: rules 1, 2 and 3 and the lenient rule (ours).
UNIT_RULES = ("complete_exact", "complete_equivalent", "complete", "lenient_complete")
#: Row fields of the capped-output table (``study.DIAGNOSTIC_COLUMNS`` and rule 3's first answer).
CAPPED_FIELDS = ("first_answer_correct", "recheck_phrase", "missing_referent_phrase", "second_different_answer")
#: The paper's numbers beside ours.
PAPER = {
    "changed": "4 Qwen3-4B and 41 Qwen3-8B labels, no Llama label (L3515-3517)",
    "capped": "Gemma 4 26B-A4B: stopped at the limit 57/60, first answer correct 56/57 = 98.2 % [91, 100] %, "
              "re-check phrase 57/57, missing-referent phrase 42/57; Gemma 4 31B: 60/60, 47/60 = 78.3 % [66, 88] %, "
              "60/60, 57/60 (L4449-4451); no second, different answer object in 0 of 117 (L4431-4432)",
}
#: How the failure-diagnostics table groups the categories: (heading, category) in report order.
FAILURE_COLUMNS = (("token cap", "capped"), ("format failure", "format_failure"), ("UNKNOWN", "unknown"),
                   ("complete", "complete"), ("missing unit", "missing_unit"), ("generic unit", "generic_unit"),
                   ("wrong unit", "wrong_unit"), ("old value", "old_value"), ("auxiliary value", "auxiliary_value"),
                   ("other value", "other_value"))
assert sorted(c for _, c in FAILURE_COLUMNS) == sorted(CATEGORIES)


def _subset(cells, info: str, subset: dict[str, str]) -> list[dict[str, Any]]:
    rows = cells.get((info, subset["query"], subset["condition"]), {})
    return [rows[g] for g in sorted(rows) if rows[g]["relation"] == subset["relation"]]


def unit_order(units) -> list[str]:
    """``units`` in the paper's order (:data:`UNIT_ORDER`), any others after it, sorted."""
    return [u for u in UNIT_ORDER if u in units] + sorted(set(units) - set(UNIT_ORDER))


def unit_breakdown(cells, subset: dict[str, str] = SUBSET) -> dict[str, Any]:
    """Per information condition and unit: n, the four rules' complete answers and the unit outcomes.

    ``{information: {"n", "changed_equivalent_vs_exact", "units": [{"unit", "n", <rule>..., <outcome>...,
    "capped", "format_failure", "other"}]}}``; ``other`` counts the remaining categories (UNKNOWN, a wrong value),
    so complete + missing + generic + wrong + capped + format failure + other = n.
    ``changed_equivalent_vs_exact``: rows whose rule-2 label differs from their rule-1 label (the paper's
    "changes 4 Qwen3-4B and 41 Qwen3-8B labels", L3515-3516).
    """
    out: dict[str, Any] = {}
    for info in sorted({k[0] for k in cells}):
        rows = _subset(cells, info, subset)
        if not rows:
            continue
        units = []
        for unit in unit_order({r["unit"] for r in rows}):
            mine = [r for r in rows if r["unit"] == unit]
            entry: dict[str, Any] = {"unit": unit, "n": len(mine)}
            entry.update({rule: sum(bool(r[rule]) for r in mine) for rule in UNIT_RULES})
            entry.update({cat: sum(r["category"] == cat for r in mine) for cat in UNIT_OUTCOMES})
            entry.update({cat: sum(r["category"] == cat for r in mine) for cat in UNIT_FAILURES})
            entry["other"] = sum(r["category"] not in ("complete", *UNIT_OUTCOMES, *UNIT_FAILURES) for r in mine)
            units.append(entry)
        out[info] = {"n": len(rows), "units": units,
                     "changed_equivalent_vs_exact": sum(bool(r["complete_exact"]) != bool(r["complete_equivalent"])
                                                        for r in rows)}
    return out


def capped_outputs(cells, subset: dict[str, str] = SUBSET) -> dict[str, Any] | None:
    """Per information condition: the outputs that hit the token cap and what they hold (paper L4425-4457).

    ``{information: {"n", "capped", "first_answer_correct", "first_answer_correct_ci", "recheck_phrase",
    "missing_referent_phrase", "second_different_answer"}}``; the last four count capped outputs, the interval
    is exact (Clopper-Pearson 95 %, None with no capped output). None when a row lacks one of
    :data:`CAPPED_FIELDS` (a run graded before they existed: regrade it with
    ``python -m kvprobe.studies.quantity.study RUN``).
    """
    out: dict[str, Any] = {}
    for info in sorted({k[0] for k in cells}):
        rows = _subset(cells, info, subset)
        if not rows:
            continue
        if any(field not in r for r in rows for field in CAPPED_FIELDS):
            return None
        capped = [r for r in rows if r["stop_reason"] == "cap"]
        entry: dict[str, Any] = {"n": len(rows), "capped": len(capped)}
        entry.update({field: sum(bool(r[field]) for r in capped) for field in CAPPED_FIELDS})
        entry["first_answer_correct_ci"] = clopper_pearson(entry["first_answer_correct"], len(capped))
        out[info] = entry
    return out


# ----------------------------------------------------------------------------------------------- report


def failure_head(first: list[str]) -> list[str]:
    """The failure-diagnostics table's header: ``first`` columns, n, then the categories."""
    return table_head([*first, "n", *(name for name, _ in FAILURE_COLUMNS)])


def failure_cells(cell: dict[str, Any]) -> list[Any]:
    """n and the category counts of one summary cell (they sum to n)."""
    return [cell["n"], *(cell["categories"][c] for _, c in FAILURE_COLUMNS)]


FAILURE_NOTE = ("Failure diagnostics (the paper's tab:v33_failure_diagnostics_dependent, L4083): every answer's "
                "outcome under the complete rule (rule 3): termination (the token cap, whatever the prefix holds), "
                "format (no single string answer field, one outer fence allowed), or the quantity in the answer "
                "field. Each row sums to n.")


def failure_lines(entries: list[dict[str, Any]]) -> list[str]:
    """The failure-diagnostics table of one (relation, information, query): a row per condition."""
    return [FAILURE_NOTE, "", *failure_head(["condition"]),
            *(table_row([c["condition"], *failure_cells(c)]) for c in entries), ""]


UNIT_COLUMNS = ["n", "exact", "equivalent", "complete", "missing unit", "generic unit", "wrong unit", "token cap",
                "format failure", "other", "lenient"]


def unit_cells(u: dict[str, Any]) -> list[Any]:
    """One unit's row: n, then percentages (counts) of the per-unit n."""
    n = u["n"]
    return [n, *(percent_count(u[k], n) for k in (*UNIT_RULES[:3], *UNIT_OUTCOMES, *UNIT_FAILURES, "other",
                                                  "lenient_complete"))]


UNIT_NOTE = ("Percentages (counts) of each unit's n. exact, equivalent, complete: the paper's rules 1-3; missing, "
             "generic and wrong unit, token cap, format failure and other (UNKNOWN, a wrong value): the answer's "
             "category under rule 3, so complete and these six sum to n; lenient: ours.")


def unit_lines(breakdown: dict[str, Any]) -> list[str]:
    """The per-unit section of ``report.md`` (one table per information condition)."""
    lines = ["## Units: replacements, current query, whole-source mask", "",
             "The paper's tab:v23_unit_breakdown (L3509-3537; its subset: B refers to A for the unit, "
             f"`unit_from_a`). {UNIT_NOTE}", ""]
    for info, b in breakdown.items():
        lines += [f"{info}: {b['n']} cases; the equivalent-units rule changes {b['changed_equivalent_vs_exact']} "
                  "labels against exact.", "", *table_head(["unit", *UNIT_COLUMNS]),
                  *(table_row([u["unit"], *unit_cells(u)]) for u in b["units"]), ""]
    paper_counts = ", ".join(f"{n} {u}" for u, n in PAPER_UNIT_COUNTS.items())
    return lines + [f"Paper: {paper_counts} (L3511-3513); the equivalent-units rule changes {PAPER['changed']}.", ""]


CAPPED_COLUMNS = ["cases", "stopped at the limit", "first answer correct [95% CI]", "re-check phrase",
                  "missing-referent phrase", "second, different answer"]


def capped_cells(e: dict[str, Any]) -> list[Any]:
    """One row of the capped-output table: the stop count of all cases, the rest of the capped outputs."""
    k = e["capped"]
    return [e["n"], f"{percent_count(k, e['n'], count=False)} ({k}/{e['n']})",
            rate_interval(e["first_answer_correct"], k, e["first_answer_correct_ci"]),
            *(f"{e[f]}/{k}" for f in CAPPED_FIELDS[1:])]


CAPPED_NOTE = ("The first answer is the first JSON object with a string answer field, right when it has the current "
               "number and an accepted form of its unit; re-check phrase: \"Wait\", \"re-read\" or \"misread\"; "
               "missing-referent phrase: \"not specified\", \"does not mention\" or \"missing\" (whole words, any "
               "case; `quantity_task/strings.py`). The last four columns count the capped outputs; exact binomial "
               "95 % interval.")


def capped_lines(capped: dict[str, Any] | None) -> list[str]:
    """The capped-output section of ``report.md``: a row per information condition."""
    lines = ["## Outputs that hit the token cap: replacements, current query, whole-source mask", "",
             "The paper's table of capped outputs (L4425-4457). " + CAPPED_NOTE, ""]
    if capped is None:
        return lines + ["Not in this run: its rows were graded before the phrase flags existed (regrade them with "
                        "`python -m kvprobe.studies.quantity.study RUN`).", ""]
    return lines + [*table_head(["information", *CAPPED_COLUMNS]),
                    *(table_row([info, *capped_cells(e)]) for info, e in capped.items()), "",
                    f"Paper: {PAPER['capped']}.", ""]
