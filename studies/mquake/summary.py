"""Summary and report of an MQuAKE run, recomputed from ``results.jsonl`` alone.

Per (question kind, policy): normalized exact matches with EOS, lenient
contains-answer matches (a small model answers in sentences), and the change of
both against full access with a 95 % interval from 10,000 bootstrap draws of whole cases (a case's
paraphrases stay together). The historical question is also split by the
retained-text stratum, and the offline routing (historical prefix -> full
access, every other question -> text recompute) is scored.

Recompute against the source mask (paper L4228-4270): per retained-text stratum,
the historical question's discordant cases with the exact McNemar test; and
whether a case's historical loss under recompute goes with a gain on a current
paraphrase (2 x 2 table of cases, conditional odds ratio, Fisher exact test).
Both on the exact-match and the contains-answer rules.

No-context baseline (runs with ``--no-context``; paper app:v52_weights, L4552-4562): per rule, the
historical and the current questions' rates on the questions the no-context model answers wrongly,
with the change against the source mask (``studies/common/no_context.py``). Runs without the baseline
summarize as before.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any


from kvprobe.readouts.stats import DRAWS, fisher_exact, group_bootstrap_weights, mcnemar_exact, paired_change
from kvprobe.studies.common.no_context import NO_CONTEXT, Outcome, conditional_on_baseline, conditional_table
from kvprobe.studies.common.report import NO_CHANGE_RULE, VERDICT_RULE, Items, corrections_reversals, data_items, estimate, \
    heading, run_time, table_head, table_row, testable, verdict_cell
from kvprobe.studies.common.runner import read_rows, write_run_summary
from .strings import NO_CONTEXT_ANCHORS
from .study import CONDITIONS as STUDY_CONDITIONS

#: Row conditions in report order: the seven of the study, then the no-context baseline (``--no-context`` runs).
CONDITIONS = (*STUDY_CONDITIONS, NO_CONTEXT)

KINDS = ("current", "historical", "single_hop")
#: Scoring rules counted per cell: exact match with EOS, boxed content only, answer contained.
RULES = ("em", "em_strict_boxed", "contains")
#: The source mask: the paper's reference condition for text recompute, state rebuild and row compaction.
SOURCE = "source-mask"
#: Conditions also compared against the source mask.
AGAINST_SOURCE = ("recompute", "rebuild", "compact")
#: The paper's claims (partA 1b anchors, %, current N=1,800 / historical N=600; partC 7 for rebuild and compact):
#: (question, condition, reference, sign, what the paper reports). Sign 0: no change.
CLAIMS = (("current", "source-mask", "full", 1, "+3.0, +19.7, +1.4 pp (Qwen3-4B, Llama-3.2-3B, Qwen3-32B)"),
          ("historical", "source-mask", "full", -1, "-14.2, -5.6, -14.7 pp"),
          ("current", "recompute", SOURCE, 1, "+4.1, +6.7, +9.6 pp"),
          ("historical", "recompute", SOURCE, -1, "-40.5, -20.2, -41.0 pp"),
          ("historical", "rebuild", SOURCE, -1, "-41.3, -19.8, -37.5 pp"),
          ("historical", "compact", SOURCE, 0, "444 vs 444, 488 vs 481, 493 vs 494 of 600"))
#: A no-change claim's tolerance (pp; the scorecard's).
TOLERANCE_PP = 5.0
#: Row columns the tables are stratified by (paper L1397-1398: "hop count and edit count remain stratified").
STRATA = ("hops", "edits")


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> dict[str, Any]:
    rows = list(read_rows(out_dir))
    by_key: dict[tuple[str, str], dict[tuple[str, int], dict]] = defaultdict(dict)
    for r in rows:
        by_key[(r["query"], r["condition"])][(r["case_id"], r["question_index"])] = r
    cells = []
    for kind in KINDS:
        full = by_key.get((kind, "full"), {})
        keys = sorted(full)
        if not keys:
            continue
        boot = group_bootstrap_weights([k[0] for k in keys], n_draws=draws, seed=seed)  # [draws, n]
        for condition in [p for p in CONDITIONS if (kind, p) in by_key]:
            mine = by_key[(kind, condition)]
            cell = {"kind": kind, "policy": condition, "n": len(mine),
                    **{rule: sum(bool(r[rule]) for r in mine.values()) for rule in RULES},
                    "eos": sum(r["stop_reason"] == "eos" for r in mine.values())}
            if kind == "historical":
                cell["em_retained"] = sum(r["em"] for r in mine.values() if r["retained_text"])
                cell["n_retained"] = sum(bool(r["retained_text"]) for r in mine.values())
            if condition != "full" and all(k in mine for k in keys):
                for rule in ("em", "contains"):
                    cell[f"{rule}_change_vs_full"] = paired_change([int(mine[k][rule]) for k in keys],
                                                                   [int(full[k][rule]) for k in keys], boot)
            source = by_key.get((kind, SOURCE), {})
            if condition in AGAINST_SOURCE and all(k in mine and k in source for k in keys):
                for rule in ("em", "contains"):  # the paper's reference for the cache operations
                    cell[f"{rule}_change_vs_source"] = paired_change([int(mine[k][rule]) for k in keys],
                                                                     [int(source[k][rule]) for k in keys], boot)
            cells.append(cell)
    routed = [r for r in rows if (r["query"] == "historical") == (r["condition"] == "full")
              and r["condition"] in ("full", "recompute")]
    routing = {"n": len(routed), "em": sum(r["em"] for r in routed), "contains": sum(r["contains"] for r in routed),
               "rule": "historical prefix -> full access; other questions -> text recompute"}
    summary = {"cells": cells, "any_paraphrase": any_paraphrase(by_key), "strata": strata(rows), "routing": routing,
               "recompute_vs_source": recompute_vs_source(by_key), "draws": draws, "seed": seed, "rows": len(rows)}
    if any(r["condition"] == NO_CONTEXT for r in rows):
        summary["no_context"] = no_context_tables(rows, seed, draws)
    return summary


#: The no-context tables' rules (the paper's exact match with EOS first) and question kinds (the paper's first).
NO_CONTEXT_RULES = ("em", "contains")
NO_CONTEXT_KINDS = ("historical", "current")
#: The condition the no-context tables' changes are measured against (the paper's reference operation).
NO_CONTEXT_REFERENCE = "source-mask"


def no_context_tables(rows: list[dict[str, Any]], seed: int, draws: int = DRAWS) -> list[dict[str, Any]]:
    """Per rule and question kind, every condition on the questions the no-context baseline answers wrongly.

    A unit is one question of a case (each current paraphrase its own, as a row is), paired with the
    no-context answer to the same question; the case is its bootstrap group.
    """
    out = []
    for rule in NO_CONTEXT_RULES:
        outcomes = [Outcome((r["case_id"], r["question_index"]), r["query"], r["condition"], bool(r[rule]),
                            r["case_id"]) for r in rows]
        for kind in NO_CONTEXT_KINDS:
            table = conditional_on_baseline(outcomes, kind, seed, draws, reference=NO_CONTEXT_REFERENCE,
                                            order=CONDITIONS)
            if table is not None:
                out.append({"rule": rule, **table})
    return out


def any_paraphrase(by_key: dict[tuple[str, str], dict[tuple[str, int], dict]]) -> list[dict[str, Any]]:
    """Per condition: cases answered correctly on at least one of the three current paraphrases."""
    out = []
    for condition in CONDITIONS:
        mine = by_key.get(("current", condition))
        if not mine:
            continue
        cases = sorted({k[0] for k in mine})
        out.append({"policy": condition, "cases": len(cases),
                    **{rule: sum(any(r[rule] for k, r in mine.items() if k[0] == c) for c in cases)
                       for rule in ("em", "contains")}})
    return out


def strata(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per stratum column (hops, edits) and value: per (kind, policy) the rows and exact / contains matches."""
    out: dict[str, list[dict[str, Any]]] = {}
    for column in STRATA:
        counts: dict[tuple[int, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
        for r in rows:
            c = counts[(r[column], r["query"], r["condition"])]
            c[0] += 1
            c[1] += bool(r["em"])
            c[2] += bool(r["contains"])
        order = {p: i for i, p in enumerate(CONDITIONS)}
        out[column] = [{column: v, "kind": kind, "policy": condition, "n": n, "em": em, "contains": contains}
                       for (v, kind, condition), (n, em, contains) in
                       sorted(counts.items(), key=lambda kv: (kv[0][0], KINDS.index(kv[0][1]), order[kv[0][2]]))]
    return out


#: The two operations the paper's stratified comparison contrasts (the operation, its reference).
CONTRAST = ("recompute", "source-mask")


def recompute_vs_source(by_key: dict[tuple[str, str], dict[tuple[str, int], dict]]) -> dict[str, Any] | None:
    """Exact tests of recompute against the source mask (None when a run lacks either operation)."""
    operation, ref = CONTRAST
    hist_operation, hist_ref = by_key.get(("historical", operation)), by_key.get(("historical", ref))
    if not hist_operation or not hist_ref:
        return None
    cases = sorted(k for k in hist_ref if k in hist_operation)
    out: dict[str, Any] = {"arm": operation, "reference": ref}
    for rule in ("em", "contains"):
        strata = {}
        for name, retained in (("retained", True), ("masked_only", False)):
            keys = [k for k in cases if bool(hist_ref[k]["retained_text"]) == retained]
            b = sum(bool(hist_operation[k][rule]) and not hist_ref[k][rule] for k in keys)
            c = sum(bool(hist_ref[k][rule]) and not hist_operation[k][rule] for k in keys)
            strata[name] = {"n": len(keys), "arm_correct": sum(bool(hist_operation[k][rule]) for k in keys),
                            "reference_correct": sum(bool(hist_ref[k][rule]) for k in keys),
                            "arm_only": b, "reference_only": c, "mcnemar_p": mcnemar_exact(b, c)}
        current_operation, current_ref = by_key.get(("current", operation), {}), by_key.get(("current", ref), {})
        gains = {k[0] for k, r in current_operation.items()
                 if r[rule] and k in current_ref and not current_ref[k][rule]}
        losses = {k[0] for k in cases if hist_ref[k][rule] and not hist_operation[k][rule]}
        ids = {k[0] for k in cases}
        table = [[len(losses & gains), len(losses - gains)], [len((ids - losses) & gains), len(ids - losses - gains)]]
        out[rule] = {"strata": strata, "loss_and_current_gain": fisher_exact(table)}
    return out


def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: cases sampled from a released file, or fictional cases in its schema."""
    return data_items(config.get("study_config", {}).get("source"), "fictional multi-hop cases in the MQuAKE schema",
                      "cases sampled from the released MQuAKE data")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    study = config.get("study_config", {})
    source = study.get("source", "generated")
    data = ("Generated fictional cases" if source == "generated" else
            f"Cases sampled from `{Path(source).name}` (seed {study.get('sample_seed')} + hop count)")
    boxed = study.get("boxed_instruction")
    lines = [*heading("Contextual MQuAKE", config, items(config)),
             f"{data}, hops {study.get('hops')}, {study.get('n_per_hop')} per hop count, greedy answers of at most "
             f"{study.get('max_new_tokens')} tokens" + (f", each question followed by \"{boxed}\"" if boxed else "")
             + ". Exact match = normalized answer or alias with EOS (the whole answer or its last box); strict "
             f"boxed = the box only; change vs full with a 95% interval from {summary['draws']:,} bootstrap draws "
             "of whole cases (paraphrases together).", ""]
    if timing:
        lines += [run_time(timing), ""]
    lines += table_head(["question", "policy", "n", "exact match", "change vs full [95% CI]", "strict boxed",
                         "contains answer", "change vs full [95% CI]", "corrections / reversals (contains)", "EOS"])

    def change(c: dict[str, Any], rule: str) -> str:
        ch = c.get(f"{rule}_change_vs_full")
        return estimate(ch["change"], ch["ci"], "+d", "+.0f") if ch else ""

    for c in summary["cells"]:
        cr = corrections_reversals(c.get("contains_change_vs_full"))
        lines.append(f"| {c['kind']} | {c['policy']} | {c['n']} | {c['em']} | {change(c, 'em')} | "
                     f"{c['em_strict_boxed']} | {c['contains']} | {change(c, 'contains')} | {cr} | {c['eos']} |")
    hist = [c for c in summary["cells"] if c["kind"] == "historical"]
    if hist:
        lines += ["", "Historical question, retained-text stratum (the historical answer still occurs in the text "
                  "that remains after deleting the superseded records), exact matches: " +
                  ", ".join(f"{c['policy']} {c['em_retained']}/{c['n_retained']}" for c in hist) + "."]
    anyp = summary.get("any_paraphrase")
    if anyp:
        lines += ["", "Current question, success on any of the three paraphrases (cases): " +
                  ", ".join(f"{a['policy']} {a['em']}/{a['cases']} exact, {a['contains']}/{a['cases']} contains"
                            for a in anyp) + "."]
    for column, cells in summary.get("strata", {}).items():
        lines += _stratum_lines(column, cells)
    lines += _source_lines(summary)
    lines += _claim_lines(summary)
    lines += _no_context_lines(summary.get("no_context"), source)
    lines += _contrast_lines(summary.get("recompute_vs_source"))
    r = summary["routing"]
    lines += ["", f"Offline routing ({r['rule']}): {r['em']}/{r['n']} exact matches, {r['contains']}/{r['n']} "
              "containing the answer.", ""]
    return "\n".join(lines)


def _source_lines(summary: dict[str, Any]) -> list[str]:
    """Recompute, rebuild and compact against the source mask, the paper's reference for the cache operations."""
    cells = [c for c in summary["cells"] if "contains_change_vs_source" in c]
    if not cells:
        return []
    source = {c["kind"]: c for c in summary["cells"] if c["policy"] == SOURCE}
    lines = ["", "Against the source mask (the paper's reference arm for recompute, rebuild and compact), paired over "
             "the same questions:", "",
             *table_head(["question", "policy", "exact match (source mask)", "change vs source [95% CI]",
                          "contains (source mask)", "change vs source [95% CI]", "corrections / reversals (contains)"])]
    for c in cells:
        em, co = c["em_change_vs_source"], c["contains_change_vs_source"]
        src = source[c["kind"]]
        lines.append(table_row([c["kind"], c["policy"], f"{c['em']} ({src['em']})",
                                estimate(em["change"], em["ci"], "+d", "+.0f"), f"{c['contains']} ({src['contains']})",
                                estimate(co["change"], co["ci"], "+d", "+.0f"), corrections_reversals(co)]))
    return lines


def claim_verdicts(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each claim of :data:`CLAIMS` per rule (the paper's exact match; contains, ours) with its verdict
    (``studies.common.report.verdict``) against the paper's reference arm: not testable when that arm answers fewer than
    10 % correctly."""
    cells = {(c["kind"], c["policy"]): c for c in summary["cells"]}
    out = []
    for kind, condition, reference, sign, paper in CLAIMS:
        cell, ref = cells.get((kind, condition)), cells.get((kind, reference))
        versus = "full" if reference == "full" else "source"
        if cell is None or ref is None or f"em_change_vs_{versus}" not in cell:
            continue
        for rule in ("em", "contains"):
            ch = cell[f"{rule}_change_vs_{versus}"]
            out.append({"question": kind, "claim": f"{condition} - {reference}", "paper": paper, "rule": rule,
                        "estimate": f"{estimate(ch['change'], ch['ci'], '+d', '+.0f')} of {ref['n']}",
                        "reference": f"{ref[rule]} of {ref['n']}",
                        "verdict": verdict_cell(ch["change"], ch["ci"], sign, testable(ref[rule], ref["n"]),
                                                TOLERANCE_PP / 100 * ref["n"])})
    return out


def _claim_lines(summary: dict[str, Any]) -> list[str]:
    claims = claim_verdicts(summary)
    if not claims:
        return []
    return ["", "## The paper's effects at this size", "",
            f"Verdicts against the paper's reference arm (full access for the masks, the source mask for the cache "
            f"operations): {VERDICT_RULE}; {NO_CHANGE_RULE.format(tolerance=f'{TOLERANCE_PP:g} pp')}. Rules: em = "
            "the paper's exact match with EOS; contains (ours) = the answer occurs in the response.", "",
            *table_head(["question", "change", "paper", "rule", "ours [95% CI]", "reference arm correct", "verdict"]),
            *(table_row([c["question"], c["claim"], c["paper"], c["rule"], c["estimate"], c["reference"],
                         c["verdict"]]) for c in claims)]


def _stratum_lines(column: str, cells: list[dict[str, Any]]) -> list[str]:
    """One table per stratum column: rows (value, policy), cells exact / contains of n per question kind."""
    name = {"hops": "hop count", "edits": "edit count"}.get(column, column)
    table: dict[tuple[int, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    for c in cells:
        table[(c[column], c["policy"])][c["kind"]] = c
    lines = ["", f"By {name} (exact / contains / n):", "", *table_head([name, "policy", *KINDS])]
    for (value, condition), kinds in table.items():
        cols = [f"{k['em']} / {k['contains']} / {k['n']}" if (k := kinds.get(kind)) else "" for kind in KINDS]
        lines.append(f"| {value} | {condition} | " + " | ".join(cols) + " |")
    return lines


def _no_context_lines(tables: list[dict[str, Any]] | None, source: str) -> list[str]:
    """The no-context section: one table per (rule, question kind), the paper's anchors beside the
    historical exact-match table (the paper's wording and rule)."""
    if not tables:
        return []
    rules = {"em": "exact match with EOS", "contains": "contains the answer (a sensitivity rule)"}
    lines = ["", f"No-context baseline (paper app:v52_weights): every question is also asked with the same chat "
             "framing and no history (weights only); each table counts the policies' correct answers on the "
             "questions the no-context model answers wrongly (denominator = the no-context-wrong subset), with "
             f"the change against {NO_CONTEXT_REFERENCE}."]
    if source == "generated":
        lines[-1] += (" The cases are generated fictional facts, so the weights alone should rarely know an "
                      "answer and the subset holds nearly every question; on the released MQuAKE facts the "
                      "subset leaves out what the weights recall.")
    for t in tables:
        paper = t["rule"] == "em" and t["query"] == "historical"
        label = (f"{t['query'].capitalize()} question"
                 + (" (each paraphrase; not in the paper)" if t["query"] == "current" else "")
                 + f", {rules.get(t['rule'], t['rule'])}"
                 + (": the paper's table, its range over three models in the last column:" if paper else ":"))
        lines += ["", label, "", *conditional_table(t, NO_CONTEXT_ANCHORS if paper else None,
                                                    "paper, 3 models (%)")]
    return lines


def _contrast_lines(contrast: dict[str, Any] | None) -> list[str]:
    if not contrast:
        return []
    lines = ["", f"{contrast['arm']} vs {contrast['reference']} on the historical question, by retained-text "
             "stratum (exact McNemar test of the discordant cases):", "",
             *table_head(["rule", "stratum", "n", contrast["arm"], contrast["reference"],
                          f"only {contrast['arm']} / only {contrast['reference']}", "McNemar p"])]
    for rule in ("em", "contains"):
        for name, st in contrast[rule]["strata"].items():
            lines.append(f"| {rule} | {name} | {st['n']} | {st['arm_correct']} | {st['reference_correct']} | "
                         f"{st['arm_only']} / {st['reference_only']} | {st['mcnemar_p']:.3g} |")
    lines += ["", f"Cases whose historical answer {contrast['arm']} loses against {contrast['reference']}, and whether "
              "it gains a current paraphrase (rows: historical loss yes/no; columns: current gain yes/no; "
              "conditional odds ratio with its exact 95% interval, Fisher exact test):", "",
              *table_head(["rule", "loss & gain", "loss, no gain", "no loss, gain", "neither", "odds ratio [95% CI]",
                           "Fisher p"])]
    for rule in ("em", "contains"):
        f = contrast[rule]["loss_and_current_gain"]
        (a, b), (c, d) = f["table"]
        odds = "n/a" if f["odds_ratio"] is None else f"{f['odds_ratio']:.3g}"
        lo, hi = ("n/a" if x is None else f"{x:.3g}" for x in f["ci"])
        lines.append(f"| {rule} | {a} | {b} | {c} | {d} | {odds} [{lo}, {hi}] | {f['p']:.3g} |")
    return lines


def write_summary(out_dir: Path | str, seed: int = 0) -> dict[str, Any]:
    """summary.json and report.md of a run directory."""
    return write_run_summary(out_dir, summarize, format_report, seed)
