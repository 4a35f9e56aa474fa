"""Summary, report and cross-model panel of a matched-scores run, recomputed from ``results.jsonl`` alone.

Per case the three arms' rows are paired (cases missing an arm are left out). Intervals: 10,000
paired bootstrap draws seeded with the paper's 20260919 (``PAPER_SEED``, seed L4927-4929), one set of
draws for every estimate of a run, percentile 95 %. Records resample the base groups with their six
variants (seed L5627); OAKS resamples questions within each book (seed L5628-5630), question-weighted.

Estimates per subset (records: the 150 cases whose current answer differs from A's, and all 300;
OAKS: all questions) and scoring rule (``exact``: the paper's exact field; ``complete``: the
complete-correct rule; ``unit_lenient``: exact, or the right magnitude with the unit left out, the
paper's sensitivity calculation; ``lenient``: ours, the first value the answer mentions):

* correct answers per arm; corrections / reversals and the accuracy change (pp) of mask - control,
  mask - full and control - full, with intervals;
* the margin m = log p(current) - log p(old) per arm, Delta m = m(mask) - m(control) and mask - full;
* among mask-vs-control reversals: the masked answers' value categories (unit omitted = ``magnitude_only``,
  UNKNOWN, old value...) and complete-rule categories, and how many reversals have a rising margin;
* per relation variant (records) or book (OAKS), and by the current answer's position (OAKS);
* generation limits: per budget and arm, correct answers and truncated traces, and whether every
  correctness indicator is the same at every budget.

``summary.json`` is a :class:`Summary`.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.files import atomic_write_text
from kvprobe.readouts.stats import DRAWS, PAPER_SEED, bootstrap_mean, group_bootstrap_weights, percentile_interval
from kvprobe.studies.datasets.oaks import items as oaks_items
from kvprobe.studies.datasets.record_histories import ITEMS as RECORD_ITEMS
from kvprobe.studies.common.answers import echoes_note
from kvprobe.studies.common.detectors.strings import NOTEBOOK_NOTE
from kvprobe.studies.common.formatting import cap_count, pp, share
from kvprobe.studies.registry import items_lines
from kvprobe.studies.common.claims import reason, verdict_text
from kvprobe.studies.common.report import VERDICT_RULE, Items, estimate, heading, model_name, run_time, table_head, \
    table_row
from kvprobe.studies.common.runner import read_rows
from kvprobe.studies.datasets.values import VALUE_CATEGORIES
from kvprobe.studies.datasets.quantity_task.grading import CATEGORIES as COMPLETE_CATEGORIES

from . import paper
from .claims import CLAIMS as PAPER_CLAIMS
from .claims import OAKS_CHANCE, matched_accuracy_measurement, matched_margin_measurement
from .study import CONDITIONS

#: The conditions in the paper's column order (full, control, mask), for every table of the report.
COLUMN_CONDITIONS = ("full", "control", "mask")

#: Scoring rules of the summary: row column -> how the report names it.
RULES = {"exact": "exact field", "complete": "complete", "unit_lenient": "exact, unit omission accepted",
         "lenient": "lenient (ours: first value mentioned)"}
#: Paired contrasts: name -> (condition, reference).
CONTRASTS = {"mask_vs_control": ("mask", "control"), "mask_vs_full": ("mask", "full"),
             "control_vs_full": ("control", "full")}
#: The paper's OAKS failure columns (tab:v35_oaks_failures) from the complete rule's categories.
OAKS_OUTCOMES = {"complete": "correct", "other_value": "wrong", "unknown": "UNKNOWN", "format_failure": "format",
                 "capped": "limit"}


# ----------------------------------------------------------------------------- pairing the rows


def case_table(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, dict[str, dict[str, Any]]]]:
    """(case ids answered under all three conditions, in run order; condition -> case id -> row)."""
    by: dict[str, dict[str, dict[str, Any]]] = {c: {} for c in CONDITIONS}
    order: list[str] = []
    for r in rows:
        if r["condition"] in by:
            by[r["condition"]][r["case_id"]] = r
            if r["case_id"] not in order:
                order.append(r["case_id"])
    cases = [c for c in order if all(c in by[a] for a in COLUMN_CONDITIONS)]
    return cases, by


def unit_lenient(row: dict[str, Any]) -> bool:
    """Exact, or the reference magnitude with its unit left out (the paper's sensitivity rule, seed L5592-5594).

    >>> unit_lenient({"exact": False, "value_category": "magnitude_only"})
    True
    """
    return bool(row["exact"]) or row["value_category"] == "magnitude_only"


def indicator(row: dict[str, Any], rule: str) -> float:
    """A row's 0/1 outcome under one of :data:`RULES`."""
    return float(unit_lenient(row) if rule == "unit_lenient" else row[rule])


# ----------------------------------------------------------------------------- estimates


def paired(condition: np.ndarray, reference: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """Accuracy change condition - reference: pp with its interval, corrections and reversals (0/1 outcomes).

    Example: ``paired(np.array([1., 0.]), np.array([1., 1.]), weights)["pp"]`` is ``-50.0`` with 0 / 1 C/R.
    """
    diff = condition - reference
    return {"pp": float(100 * diff.mean()), "ci": percentile_interval(100 * bootstrap_mean(diff, weights)),
            "corrections": int((diff > 0).sum()), "reversals": int((diff < 0).sum())}


def mean_with_interval(values: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """The mean of ``values`` and its percentile interval over the bootstrap ``weights``."""
    return {"value": float(values.mean()), "ci": percentile_interval(bootstrap_mean(values, weights))}


def reversal_profile(mask_rows: list[dict[str, Any]], mask: np.ndarray, reference: np.ndarray,
                     delta_m: np.ndarray) -> dict[str, Any]:
    """What the masked answer is where the control was right and the mask wrong (seed L5589-5597)."""
    lost = np.flatnonzero((reference == 1) & (mask == 0))
    return {"n": int(len(lost)),
            "value_categories": dict(Counter(mask_rows[i]["value_category"] for i in lost)),
            "complete_categories": dict(Counter(mask_rows[i]["complete_category"] for i in lost)),
            "unit_omitted": int(sum(mask_rows[i]["value_category"] == "magnitude_only" for i in lost)),
            "unknown": int(sum(mask_rows[i]["value_category"] == "unknown" for i in lost)),
            "old_value": int(sum(mask_rows[i]["value_category"] == "old_value" for i in lost)),
            "margin_rose": int((delta_m[lost] > 0).sum())}


def subset_summary(cases: list[str], by: dict[str, dict[str, dict[str, Any]]], weights: np.ndarray
                   ) -> dict[str, Any]:
    """Every estimate of one subset of cases (``weights``: its bootstrap columns). Records: per arm, how many
    answers loop on the notebook note (``answers.echoes_note``: the note sentence at least twice)."""
    rows = {a: [by[a][c] for c in cases] for a in COLUMN_CONDITIONS}
    margin = {a: np.array([r["margin"] for r in rows[a]]) for a in COLUMN_CONDITIONS}
    delta_m = margin["mask"] - margin["control"]
    out: dict[str, Any] = {
        "n": len(cases), "groups": len({by["full"][c]["group"] for c in cases}),
        "margin": {a: float(margin[a].mean()) for a in COLUMN_CONDITIONS},
        "delta_m": mean_with_interval(delta_m, weights),
        "mask_minus_full_margin": mean_with_interval(margin["mask"] - margin["full"], weights),
        "control_minus_full_margin": mean_with_interval(margin["control"] - margin["full"], weights),
        "rules": {}}
    for rule in RULES:
        ok = {a: np.array([indicator(r, rule) for r in rows[a]]) for a in COLUMN_CONDITIONS}
        out["rules"][rule] = {
            "correct": {a: int(ok[a].sum()) for a in COLUMN_CONDITIONS},
            **{name: paired(ok[condition], ok[ref], weights) for name, (condition, ref) in CONTRASTS.items()},
            "reversals_vs_control": reversal_profile(rows["mask"], ok["mask"], ok["control"], delta_m)}
    out["value_categories"] = {a: dict(Counter(r["value_category"] for r in rows[a])) for a in COLUMN_CONDITIONS}
    out["complete_categories"] = {a: dict(Counter(r["complete_category"] for r in rows[a]))
                                  for a in COLUMN_CONDITIONS}
    out["capped"] = {a: cap_count(rows[a]) for a in COLUMN_CONDITIONS}
    if rows["full"] and rows["full"][0].get("dataset") == "records":
        out["note_echo"] = {a: int(sum(echoes_note(r["output"], NOTEBOOK_NOTE) for r in rows[a]))
                            for a in COLUMN_CONDITIONS}
    return out


def breakdown(cases: list[str], by: dict[str, dict[str, dict[str, Any]]], key: str) -> dict[str, Any]:
    """Per value of a row column (variant, book, current position): n, correct per arm and rule, mean Delta m."""
    out: dict[str, Any] = {}
    for value in dict.fromkeys(str(by["full"][c][key]) for c in cases):
        sub = [c for c in cases if str(by["full"][c][key]) == value]
        dm = [by["mask"][c]["margin"] - by["control"][c]["margin"] for c in sub]
        out[value] = {"n": len(sub), "delta_m": float(np.mean(dm)),
                      **{rule: {a: int(sum(indicator(by[a][c], rule) for c in sub)) for a in COLUMN_CONDITIONS}
                         for rule in ("exact", "complete", "lenient")}}
    return out


#: The rules whose per-budget indicators are compared.
BUDGET_RULES = ("exact", "complete", "lenient")


def budget_summary(cases: list[str], by: dict[str, dict[str, dict[str, Any]]]) -> dict[str, Any]:
    """Per prefix budget and arm: correct answers per rule and truncated traces; how many indicators change with
    the budget (the paper's "every individual complete-correctness indicator is identical", seed L5347-5349)."""
    budgets = sorted({int(k) for c in cases for k in by["full"][c]["budgets"]})
    table = {str(k): {a: {**dict.fromkeys(BUDGET_RULES, 0), "truncated": 0, "outputs": 0}
                      for a in COLUMN_CONDITIONS} for k in budgets}
    changed = dict.fromkeys(BUDGET_RULES, 0)
    for a in COLUMN_CONDITIONS:
        for c in cases:
            grades = by[a][c]["budgets"]
            for k in budgets:
                g, cell = grades[str(k)], table[str(k)][a]
                cell["outputs"] += 1
                cell["truncated"] += g["stop_reason"] == "cap"
                for rule in BUDGET_RULES:
                    cell[rule] += bool(g[rule])
            for rule in BUDGET_RULES:
                changed[rule] += len({bool(grades[str(k)][rule]) for k in budgets}) > 1
    return {"budgets": budgets, "table": table, "changed_indicators": changed,
            "identical": {rule: n == 0 for rule, n in changed.items()}}


class _SummaryKeys(TypedDict):
    #: ``records`` or ``oaks``.
    dataset: str
    cases: int
    rows: int
    seed: int
    draws: int


class Summary(_SummaryKeys, total=False):
    """A matched-scores run's ``summary.json`` (a run without cases has only the counts)."""

    groups: int
    #: Per subset (all; records also the replacements): :func:`subset_summary`'s rules, margins and reversals.
    subsets: dict[str, dict[str, Any]]
    #: :func:`breakdown` per relation variant (records) or per book (OAKS), and by the current answer's position
    #: (OAKS).
    by_variant: dict[str, Any]
    by_book: dict[str, Any]
    by_current_position: dict[str, Any]
    #: :func:`budget_summary`: per budget and arm, correct answers and truncated traces.
    generation_limits: dict[str, Any]


def summarize(out_dir: Path | str, seed: int = PAPER_SEED, draws: int = DRAWS) -> Summary:
    """Every estimate of a run (module docstring), from its rows; ``seed`` and ``draws`` set the bootstrap.

    Example: ``summarize("runs/matched-scores/records")["subsets"]["replacement"]["delta_m"]``.
    """
    rows = list(read_rows(out_dir))
    cases, by = case_table(rows)
    dataset = rows[0]["dataset"] if rows else json.loads((Path(out_dir) / "config.json").read_text()
                                                        )["study_config"]["dataset"]
    out: Summary = {"dataset": dataset, "cases": len(cases), "rows": len(rows), "seed": seed, "draws": draws}
    if not cases:
        return out
    first = [by["full"][c] for c in cases]
    groups = np.array([r["group"] for r in first])
    strata = np.array([r["stratum"] for r in first]) if dataset == "oaks" else None
    weights = group_bootstrap_weights(groups, n_draws=draws, seed=seed, strata=strata)
    out["groups"] = len(set(groups.tolist()))
    subsets = {"all": np.arange(len(cases))}
    if dataset == "records":
        subsets = {"replacement": np.flatnonzero([r["replacement"] for r in first]), **subsets}
    out["subsets"] = {name: subset_summary([cases[i] for i in idx], by, weights[:, idx])
                      for name, idx in subsets.items() if len(idx)}
    out["by_variant" if dataset == "records" else "by_book"] = breakdown(cases, by, "variant" if dataset == "records"
                                                                        else "stratum")
    if dataset == "oaks":
        out["by_current_position"] = breakdown(cases, by, "current_position")
    out["generation_limits"] = budget_summary(cases, by)
    return out


# ----------------------------------------------------------------------------- report


def count_cell(k: int, n: int) -> str:
    """A count as the paper prints it.

    >>> count_cell(142, 150)
    '94.7% (142)'
    """
    return share(k, n, empty="-")


def change_cell(change: dict[str, Any]) -> str:
    """A :func:`paired` change as ``-5.3 [-8.7, -2.0]`` (pp)."""
    return pp(change["pp"], change["ci"])


def main_table(s: dict[str, Any], rule: str) -> list[str]:
    """One subset's arms and contrasts under one rule (the paper's tab:v7_bridge / tab:v35_r570 columns)."""
    r, n = s["rules"][rule], s["n"]
    rev = r["reversals_vs_control"]
    return [table_row([RULES[rule], *(count_cell(r["correct"][a], n) for a in COLUMN_CONDITIONS),
                       change_cell(r["mask_vs_control"]),
                       f"{r['mask_vs_control']['corrections']}/{r['mask_vs_control']['reversals']}",
                       f"{rev['unit_omitted']}/{rev['unknown']}/{rev['old_value']}", f"{rev['margin_rose']}/{rev['n']}",
                       change_cell(r["mask_vs_full"]), change_cell(r["control_vs_full"])])]


MAIN_COLUMNS = ["rule", "full", "control", "mask", "mask - control (pp) [95% CI]", "C/R", "reversals: unit / UNK / old",
                "reversals with rising margin", "mask - full (pp) [95% CI]", "control - full (pp) [95% CI]"]
SUBSET_NAMES = {"replacement": "{n} cases whose current answer differs from A's (replacement, role swap, explicit "
                               "rejection; {groups} groups)",
                "all": "all {n} cases ({groups} groups)"}


def subset_lines(name: str, s: dict[str, Any], oaks: bool) -> list[str]:
    title = (f"{s['n']} questions ({s['groups']} groups)" if oaks else SUBSET_NAMES[name].format(**s))
    dm, mf, cf = s["delta_m"], s["mask_minus_full_margin"], s["control_minus_full_margin"]
    lines = [f"### {title}", "",
             f"Margin m = log p(current) - log p(old), nats: full {s['margin']['full']:+.2f}, control "
             f"{s['margin']['control']:+.2f}, mask {s['margin']['mask']:+.2f}. Delta m = m(mask) - m(control) "
             f"{estimate(dm['value'], dm['ci'])}; mask - full {estimate(mf['value'], mf['ci'])}; control - full "
             f"{estimate(cf['value'], cf['ci'])}.", "",
             "Correct answers per arm, then the paired changes; C/R: corrections / reversals of mask against "
             "control; the reversals' masked answers by value category (unit omitted / UNKNOWN / old value).", "",
             *table_head(MAIN_COLUMNS)]
    for rule in RULES:
        lines += main_table(s, rule)
    if oaks:
        outcomes = s["complete_categories"]["mask"]
        change = s["rules"]["complete"]["mask_vs_control"]
        lines += ["", "Source-mask outcomes in the paper's columns (tab:v35_oaks_failures): " + ", ".join(
            f"{label} {outcomes.get(category, 0)}" for category, label in OAKS_OUTCOMES.items())
            + f"; C/R against the control {change['corrections']}/{change['reversals']}."]
    capped = ", ".join(f"{a} {s['capped'][a]}" for a in COLUMN_CONDITIONS)
    if "note_echo" in s:
        lines += ["", "Answers that loop on the notebook note (its sentence at least twice): " + ", ".join(
            f"{a} {s['note_echo'][a]}" for a in COLUMN_CONDITIONS) + f" of {s['n']}."]
    lines += ["", f"Answers by value category (exact-field parse; capped traces: {capped}):", "",
              *table_head(["arm", *VALUE_CATEGORIES])]
    lines += [table_row([a, *(s["value_categories"][a].get(c, 0) for c in VALUE_CATEGORIES)])
              for a in COLUMN_CONDITIONS]
    lines += ["", "Answers by complete-rule category:", "", *table_head(["arm", *COMPLETE_CATEGORIES])]
    lines += [table_row([a, *(s["complete_categories"][a].get(c, 0) for c in COMPLETE_CATEGORIES)])
              for a in COLUMN_CONDITIONS]
    return lines + [""]


def breakdown_lines(title: str, table: dict[str, Any]) -> list[str]:
    rules = ("exact", "complete", "lenient")
    lines = [f"### {title}", "", *table_head(["", "n", *(f"{r} full / control / mask" for r in rules),
                                              "mean Delta m (nats)"])]
    for value, t in table.items():
        lines.append(table_row([value, t["n"], *(" / ".join(str(t[r][a]) for a in COLUMN_CONDITIONS)
                                                 for r in rules), f"{t['delta_m']:+.2f}"]))
    return lines + [""]


def budget_lines(g: dict[str, Any]) -> list[str]:
    lines = ["### Generation limits", "",
             "Each greedy trace re-scored at its first k tokens (a trace still running at k is capped): correct "
             "answers (exact / complete / lenient) and truncated traces per arm.", "",
             *table_head(["budget", *(f"{a}: exact / complete / lenient / truncated" for a in COLUMN_CONDITIONS)])]
    for k in g["budgets"]:
        cells = [" / ".join(str(c[r]) for r in (*BUDGET_RULES, "truncated")) + f" of {c['outputs']}"
                 for c in (g["table"][str(k)][a] for a in COLUMN_CONDITIONS)]
        lines.append(table_row([k, *cells]))
    if len(g["budgets"]) < 2:
        return lines + ["", "One budget: no indicator to compare across budgets.", ""]
    same = ", ".join(f"{r} {'yes' if g['identical'][r] else 'no'} ({g['changed_indicators'][r]} changed)"
                     for r in BUDGET_RULES)
    return lines + ["", f"Every individual correctness indicator identical across budgets: {same}.", ""]


def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: the record histories, or OAKS questions (``datasets.oaks.items``)."""
    study = config.get("study_config", {})
    return oaks_items(study.get("oaks_source")) if study.get("dataset") == "oaks" else RECORD_ITEMS


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """report.md: the data, the run time, each subset's tables, breakdowns, limits, effects, the paper's rows."""
    study = config.get("study_config", {})
    oaks = summary["dataset"] == "oaks"
    lines = [*heading("Candidate scores and generated answers under matched conditions", config, items(config))]
    if oaks:
        source = study.get("oaks_source")
        data = (("OAKS-schema demonstration set GENERATED from the PG-19 novel (not the OAKS data)"
                 if source == "demonstration" else f"OAKS file `{source}`")
                + f", {study.get('oaks_split')} books: one answer transition per question (its earliest kept change), "
                "candidates shown as A/B with the current answer alternating between them; the model answers JSON "
                "A/B/UNKNOWN. Mask: the earlier source; control: as many tokens from the start of the unrelated "
                "source. Intervals resample questions within books.")
    else:
        data = (f"Synthetic record histories ({study.get('split')} split, deadlines in {study.get('deadline_unit')}), "
                f"the notebook note ({study.get('note_repeats')} sentences) before Time 2 in every arm. Mask: every "
                "token overlapping A (applied unconditionally); control: as many tokens from the start of the note. "
                "Intervals resample base groups with their variants.")
    lines += [data + f" Per arm: the canonical current and old JSON answers scored teacher-forced, and a greedy "
              f"answer of at most {study.get('max_new_tokens')} tokens. {summary['cases']} cases, {summary['rows']} "
              f"rows; 95% intervals from {summary['draws']:,} paired draws, seed {summary['seed']}.", ""]
    if timing:
        lines += [run_time(timing, machine=True), ""]
    if not summary["cases"]:
        return "\n".join(lines + ["No case has all three arms yet.", ""])
    for name, s in summary["subsets"].items():
        lines += subset_lines(name, s, oaks)
    if oaks:
        lines += breakdown_lines("By book", summary["by_book"])
        lines += breakdown_lines("By the current answer's position", summary["by_current_position"])
    else:
        lines += breakdown_lines("By relation variant", summary["by_variant"])
    lines += budget_lines(summary["generation_limits"])
    lines += effects_lines(summary)
    lines += paper_lines(summary["dataset"])
    return "\n".join(lines)


#: The paper's answer-level claims the report gives a verdict on: (subset, rule, the claim in ``claims.py`` whose
#: direction judges it, how the report names it, what the paper reports). Records: its Qwen3 exact-field losses on
#: the 150 replacement cases (tab:v7_bridge) and its complete-rule losses over all 300 (tab:v35_r570_all); OAKS: the
#: mask's gain in complete answers (tab:v35_oaks).
CLAIMS = {
    "records": (("replacement", "exact", "matched-scores.replacement-answers",
                 "higher margin, fewer exact answers on the 150 replacement cases",
                 "Qwen3-4B -5.3 [-8.7, -2.0], Qwen3-8B -11.3 [-18.7, -4.7]"),
                ("all", "complete", "matched-scores.all-answers",
                 "masking A costs the answers A alone holds (all 300 cases)", "-16.0 to -24.3 (Qwen3, Gemma 4)")),
    "oaks": (("all", "complete", "matched-scores.oaks-choices", "the mask gains complete answers over the control",
              "+22.4 (Qwen3-4B)"),),
}
#: The claim of ``claims.py`` that judges the margin row (records: the replacement cases; OAKS: all cases).
MARGIN_CLAIM = "matched-scores.margin"


def claim_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The margin and each paper claim of :data:`CLAIMS` with its estimate and verdict against the paper's
    reference arm, the equal-token control: the claim of ``claims.py`` judged
    (``studies.common.claims.verdict_text``) on its measurement (``claims.matched_margin_measurement``;
    ``claims.matched_accuracy_measurement`` with the control as the reference, not testable when the control is
    at the floor under the rule or, on OAKS, not above a random pick of the two answer texts by an exact test)."""
    dataset = summary["dataset"]
    claims = {c.key: c for c in PAPER_CLAIMS}
    margin_subset = "all" if dataset == "oaks" else "replacement"
    margins = summary["subsets"][margin_subset]
    dm = margins["delta_m"]
    out = [{"claim": "the old-source mask raises the margin over its equal-token control (Delta m, nats)",
            "subset": margin_subset, "paper": "positive for every model", "estimate": estimate(dm["value"], dm["ci"]),
            "reference": "margins", "verdict": verdict_text(claims[MARGIN_CLAIM], matched_margin_measurement(margins))}]
    chance = OAKS_CHANCE if dataset == "oaks" else None  # the study's chance level, as the scorecard's
    for subset, rule, key, claim, paper_value in CLAIMS[dataset]:
        s = summary["subsets"][subset]
        change = s["rules"][rule]["mask_vs_control"]
        control = s["rules"][rule]["correct"]["control"]
        out.append({"claim": f"{claim} ({RULES[rule]} rule, pp)", "subset": subset, "paper": paper_value,
                    "estimate": change_cell(change), "reference": f"control {control} of {s['n']}",
                    "verdict": verdict_text(claims[key], matched_accuracy_measurement(s, rule, chance))})
    return out


#: The claim the lenient rule is a secondary test of, per dataset, and the subset the report reads it on.
LENIENT_CLAIMS = {"records": ("replacement", "matched-scores.replacement-answers"),
                  "oaks": ("all", "matched-scores.oaks-choices")}


def lenient_verdict(summary: dict[str, Any]) -> str:
    """The lenient rule's verdict (a secondary test of :data:`LENIENT_CLAIMS`' claim, the scorecard's secondary
    rows' rule: the control as the reference, on OAKS above a random pick of the two answer texts by an exact
    test), with the reason when it is not testable."""
    subset, key = LENIENT_CLAIMS[summary["dataset"]]
    claim = next(c for c in PAPER_CLAIMS if c.key == key)
    chance = OAKS_CHANCE if summary["dataset"] == "oaks" else None
    m = matched_accuracy_measurement(summary["subsets"][subset], "lenient", chance)
    why = reason(claim, m)
    return verdict_text(claim, m) + (f": {why}" if why else "")


def effects_lines(summary: dict[str, Any]) -> list[str]:
    """The paper's claims with their verdicts (:func:`claim_rows`), then the lenient rule beside full access."""
    oaks = summary["dataset"] == "oaks"
    lines = ["### The paper's effects at this size", "", f"Verdicts: {VERDICT_RULE}. The paper's reference arm is "
             "the equal-token control (mask - control).", "",
             *table_head(["the paper's claim", "paper", "ours [95% CI]", "reference arm", "verdict"])]
    lines += [table_row([c["claim"], c["paper"], c["estimate"], c["reference"], c["verdict"]])
              for c in claim_rows(summary)]
    if not oaks:
        s = summary["subsets"]["replacement"]
        rev = s["rules"]["exact"]["reversals_vs_control"]
        exact = s["rules"]["exact"]["mask_vs_control"]
        lines += ["", f"Exact-field reversals of the mask against the control on the replacement cases: "
                  f"{exact['corrections']}/{exact['reversals']} C/R, {rev['margin_rose']} of {rev['n']} on cases "
                  f"whose margin rose, {rev['unit_omitted']} omit the unit, {rev['unknown']} UNKNOWN (paper, "
                  "Qwen3-4B: 0/8, all eight on rising margins, 5 omit the unit)."]
    s = summary["subsets"]["all" if oaks else "replacement"]
    lenient = s["rules"]["lenient"]
    lines += ["", f"Lenient rule (ours, not a paper rule: a secondary row, its verdict shown but never making the "
              f"claim replicate): mask - control {change_cell(lenient['mask_vs_control'])} pp "
              f"({lenient['mask_vs_control']['corrections']}/{lenient['mask_vs_control']['reversals']} C/R; "
              f"{lenient_verdict(summary)}); against full access, mask - full "
              f"{change_cell(lenient['mask_vs_full'])} pp and control - full {change_cell(lenient['control_vs_full'])} "
              "pp."]
    if any(s.get("note_echo", {}).values()):
        echo = s["note_echo"]
        lines[-1] += (f" Answers looping on the notebook note: full {echo['full']}, control {echo['control']}, mask "
                      f"{echo['mask']} of {s['n']}; the control hides the note's first tokens, so a mask - control "
                      "difference here measures the control breaking that loop as much as the mask.")
    return lines + [""]


def paper_lines(dataset: str) -> list[str]:
    """The paper's rows for this dataset, labelled by model (its checkpoints, not ours)."""
    if dataset == "oaks":
        lines = ["### The paper's rows", "", "tab:v35_oaks (seed L5028-5042; complete answers of 116 questions):", "",
                 *table_head(["paper model", "full", "control", "mask", "Delta m [95% CI]",
                              "mask - control (pp) [95% CI]"])]
        for m, (f, c, k, dm, dci, acc, aci) in paper.OAKS.items():
            lines.append(table_row([m, f, c, k, estimate(dm, dci), estimate(acc, aci, "+.1f")]))
        lines += ["", "tab:v35_oaks_failures (seed L5068-5080; source-mask outcomes of 116 questions):", "",
                  *table_head(["paper model", "wrong", "UNKNOWN", "format", "limit", "C/R vs control"])]
        for m, (w, u, fm, lim, c, r) in paper.OAKS_FAILURES.items():
            lines.append(table_row([m, w, u, fm, lim, f"{c}/{r}"]))
        return lines + ["", "Mask - full (seed L5655-5656): " + ", ".join(
            f"{m} {v:+.2f} pp" for m, v in paper.OAKS_MASK_MINUS_FULL.items()) + "; control - full (seed L5633-5635): "
            + ", ".join(f"{m} {v:+.2f}" for m, v in paper.CONTROL_MINUS_FULL["oaks"].items()) + " pp.", ""]
    lines = ["### The paper's rows", "", "tab:v7_bridge (seed L5615-5624; exact field, 150 replacement cases):", "",
             *table_head(["paper model", "Delta m [95% CI]", "Delta exact (pp) [95% CI]", "C/R", "unit / UNK"])]
    for m, (dm, dci, ex, eci, c, r, unit, unk) in paper.V7_BRIDGE.items():
        lines.append(table_row([m, estimate(dm, dci), estimate(ex, eci, "+.1f"), f"{c}/{r}", f"{unit}/{unk}"]))
    lines += ["", "tab:v35_r570 (seed L4961-4975; complete answers of 150 replacement cases):", "",
              *table_head(["paper model", "full", "control", "mask", "Delta m [95% CI]", "mask - control (pp) [95% CI]"])]
    for m, (f, c, k, dm, dci, acc, aci) in paper.R570.items():
        lines.append(table_row([m, f, c, k, estimate(dm, dci), estimate(acc, aci, "+.1f")]))
    lines += ["", "tab:v35_r570_all (seed L4995-5007; complete answers of all 300 cases):", "",
              *table_head(["paper model", "full", "control", "mask", "C/R", "mask - control (pp) [95% CI]"])]
    for m, (f, c, k, corr, rev, acc, aci) in paper.R570_ALL.items():
        lines.append(table_row([m, f, c, k, f"{corr}/{rev}", estimate(acc, aci, "+.1f")]))
    rose = ", ".join(f"{m} {k} of {n}" for m, (k, n) in paper.REVERSALS_MARGIN_ROSE.items())
    return lines + ["", f"Reversals on cases whose margin rose (seed L5595-5597): {rose}. Control - full (seed "
                    "L5633-5635): " + ", ".join(f"{m} {v:+.2f}" for m, v in paper.CONTROL_MINUS_FULL["records"].items())
                    + " pp.", ""]


# ----------------------------------------------------------------------------- cross-model panel


def panel(run_dirs: list[Path | str], seed: int = PAPER_SEED) -> list[dict[str, Any]]:
    """One row per run: model, dataset and its summary, recomputed at the seed its ``summary.json`` records."""
    out = []
    for d in run_dirs:
        config = json.loads((Path(d) / "config.json").read_text())
        recorded = Path(d) / "summary.json"
        run_seed = json.loads(recorded.read_text()).get("seed", seed) if recorded.exists() else seed
        summary = summarize(d, seed=run_seed)
        if not summary["cases"]:
            raise ValueError(f"{d}: no case has all three arms")
        out.append({"run": str(d), "model": model_name(config), "seed": run_seed, "summary": summary,
                    "max_new_tokens": config["study_config"]["max_new_tokens"]})
    return out


def panel_rows(entry: dict[str, Any]) -> list[list[str]]:
    """The table cells of one run: the paper's tab:v35_r570 (+ _all) or tab:v35_oaks columns."""
    s, model = entry["summary"], f"{entry['model']} ({entry['max_new_tokens']} tokens)"
    cells = []
    for name, sub in s["subsets"].items():
        r = sub["rules"]["complete"]
        rev = sub["rules"]["exact"]["reversals_vs_control"]
        cells.append([model, name, str(sub["n"]),
                      *(count_cell(r["correct"][a], sub["n"]) for a in COLUMN_CONDITIONS),
                      estimate(sub["delta_m"]["value"], sub["delta_m"]["ci"]), change_cell(r["mask_vs_control"]),
                      f"{r['mask_vs_control']['corrections']}/{r['mask_vs_control']['reversals']}",
                      change_cell(sub["rules"]["exact"]["mask_vs_control"]),
                      f"{rev['unit_omitted']}/{rev['unknown']}"])
    return cells


def format_panel(entries: list[dict[str, Any]]) -> str:
    """The panel's markdown: a table per dataset (one row per run and subset), the paper's rows after each."""
    lines = ["# Matched candidate scores and generated answers: panel", "",
             "One row per run and subset: complete answers per arm, Delta m = m(mask) - m(control) in nats, the "
             "complete and exact-field accuracy changes mask - control in pp with 95% intervals (each run at the "
             "seed its summary records), C/R of the complete rule, and the exact-field reversals that omit the unit "
             "or answer UNKNOWN.", "",
             *items_lines(json.loads((Path(e["run"]) / "config.json").read_text()) for e in entries)]
    for dataset in ("records", "oaks"):
        chosen = [e for e in entries if e["summary"]["dataset"] == dataset]
        if not chosen:
            continue
        lines += [f"## {'Synthetic records' if dataset == 'records' else 'OAKS'}", "",
                  *table_head(["model", "subset", "n", "full", "control", "mask", "Delta m [95% CI]",
                               "complete mask - control (pp)", "C/R", "exact mask - control (pp)",
                               "exact reversals: unit / UNK"])]
        for e in chosen:
            lines += [table_row(c) for c in panel_rows(e)]
        lines += ["", *paper_lines(dataset)]
    return "\n".join(lines)


def write_panel(run_dirs: list[Path | str], out_dir: Path | str, seed: int = PAPER_SEED) -> str:
    """``kvprobe report matched-scores RUN RUN ... --out DIR``: ``panel.json`` and ``panel.md``; returns the table."""
    entries = panel(run_dirs, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "panel.json", json.dumps({"seed": seed, "runs": entries}, indent=1) + "\n")
    text = format_panel(entries)
    atomic_write_text(out / "panel.md", text)
    return text
