"""Summary and report of an MQuAKE run, recomputed from ``results.jsonl`` alone.

Per (question kind, policy): normalized exact matches with EOS, lenient
contains-answer matches (a small model answers in sentences), and the change of
both against full access with a 95 % interval from 10,000 bootstrap draws of whole cases (a case's
paraphrases stay together). The historical question is also split by the
retained-text stratum.

Direct contrasts (paper app:v52_factorial, L4466-4527): rebuild, compact and recompute minus the source
mask on the first current paraphrase and the historical question, paired intervals, verdicts against the
paper's numbers.

Retained text and routing (paper app:v52_mquake_retained, L4216-4330), both on the exact-match and the
contains-answer rules: recompute against the source mask per retained-text stratum (and the single-edit
masked-only cases), every policy's correct answers, the change with a paired interval resampled within each
stratum, the exact McNemar test, and the difference between the strata; historical questions answered with
the current value (each stored historical answer regraded against the current answer), per policy with the
change against the source mask; whether a case's historical loss under recompute goes with a gain on a
current paraphrase (2 x 2 table of cases, conditional odds ratio, Fisher exact test); and the offline router
(historical prefix -> full access, every other question -> text recompute) against the best single policy
(paired interval, exact McNemar) and the two-cache oracle.

No-context baseline (runs with ``--no-context``; paper app:v52_weights, L4552-4562): per rule, the
historical and the current questions' rates on the questions the no-context model answers wrongly,
with the change against the source mask (``studies/common/no_context.py``). Runs without the baseline
summarize as before.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict


import numpy as np

from kvprobe.readouts.stats import DRAWS, bootstrap_mean, fisher_exact, group_bootstrap_weights, mcnemar_exact, \
    paired_change, percentile_interval
from kvprobe.studies.common.claims import TOLERANCE, Claim, verdict_text
from kvprobe.studies.common.formatting import eos_count, pp_of
from kvprobe.studies.common.no_context import NO_CONTEXT, Outcome, conditional_on_baseline, conditional_table
from kvprobe.studies.common.report import NO_CHANGE_RULE, VERDICT_RULE, Items, corrections_reversals, data_items, estimate, \
    heading, run_time, table_head, table_row
from kvprobe.studies.common.runner import read_rows
from .claims import CLAIMS as PAPER_CLAIMS
from .claims import REPORT_CLAIMS, cell_change_measurement, current_value_measurement, direct_contrast_measurement, \
    routing_measurement, strata_measurement
from .history import grade
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
#: (question, condition, reference, the claim of ``claims.py`` that judges it, what the paper reports).
CLAIMS = (("current", "source-mask", "full", "mquake.source-current",
           "+3.0, +19.7, +1.4 pp (Qwen3-4B, Llama-3.2-3B, Qwen3-32B)"),
          ("historical", "source-mask", "full", "mquake.source-historical", "-14.2, -5.6, -14.7 pp"),
          ("current", "recompute", SOURCE, "mquake.recompute-current", "+4.1, +6.7, +9.6 pp"),
          ("historical", "recompute", SOURCE, "mquake.recompute-historical", "-40.5, -20.2, -41.0 pp"),
          ("historical", "rebuild", SOURCE, "mquake.rebuild", "-41.3, -19.8, -37.5 pp"),
          ("historical", "compact", SOURCE, "mquake.compact", "444 vs 444, 488 vs 481, 493 vs 494 of 600"))
#: A no-change claim's tolerance (pp): the verdict rule's default for a change in pp
#: (``studies.common.claims.TOLERANCE``), which judges the claims above.
TOLERANCE_PP = TOLERANCE["pp"]
#: Every claim the report judges, by key: the scorecard's (``claims.CLAIMS``) and the report's own
#: (``claims.REPORT_CLAIMS``).
_CLAIMS: dict[str, Claim] = {c.key: c for c in (*PAPER_CLAIMS, *REPORT_CLAIMS)}
#: Row columns the tables are stratified by (paper L1397-1398: "hop count and edit count remain stratified").
STRATA = ("hops", "edits")


class _SummaryKeys(TypedDict):
    #: Per (kind, policy): its answers under each rule and their paired changes.
    cells: list[dict[str, Any]]
    any_paraphrase: list[dict[str, Any]]
    strata: dict[str, Any]
    direct_contrasts: list[dict[str, Any]]
    recompute_vs_source: dict[str, Any]
    current_value: dict[str, Any]
    routing: dict[str, Any]
    draws: int
    seed: int
    rows: int


class Summary(_SummaryKeys, total=False):
    """A MQuAKE run's ``summary.json``."""

    #: Runs with the no-context baseline: the tables conditional on it (``common.no_context``).
    no_context: list[dict[str, Any]]


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> Summary:
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
                    "eos": eos_count(mine.values())}
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
    summary: Summary = {"cells": cells, "any_paraphrase": any_paraphrase(by_key), "strata": strata(rows),
               "direct_contrasts": direct_contrasts(by_key, seed, draws),
               "recompute_vs_source": recompute_vs_source(by_key, seed, draws),
               "current_value": current_value_answers(by_key, seed, draws), "routing": routing(by_key, seed, draws),
               "draws": draws, "seed": seed, "rows": len(rows)}
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
#: The policies the retained-text table counts per stratum (the paper's columns, tab:v52_mquake_retained, L4282-4285).
STRATUM_POLICIES = ("full", "source-mask", "online-mask", "recompute")
#: The retained-text strata (L4219-4227), each a rule on a row: the historical answer occurs in the text kept after
#: deleting the superseded records, or only inside them; and the paper's sub-stratum of the masked-only cases with a
#: single edit (L4241-4244). Intervals resample cases within ``retained`` and ``masked_only`` (L4228-4229).
RETAINED_STRATA = (("retained", lambda r: bool(r["retained_text"])),
                   ("masked_only", lambda r: not r["retained_text"]),
                   ("masked_only_single_edit", lambda r: not r["retained_text"] and r.get("edits") == 1))


def recompute_vs_source(by_key: dict[tuple[str, str], dict[tuple[str, int], dict]], seed: int = 0,
                        draws: int = DRAWS) -> dict[str, Any] | None:
    """Recompute against the source mask by retained-text stratum (None when a run lacks either operation).

    Per rule and question kind (historical; current, every paraphrase), per stratum of :data:`RETAINED_STRATA`: the
    correct answers of every policy of :data:`STRATUM_POLICIES`, the discordant cases with the exact McNemar test, and
    the recompute-minus-source change in percentage points of the stratum with its 95% interval from ``draws`` paired
    case-bootstrap draws resampled within each stratum (a case's paraphrases together); the difference between the
    retained and the masked-only stratum's changes with its interval from the same draws (L4236-4238). And whether a
    case's historical loss goes with a current gain (2 x 2 table of cases, Fisher exact test, L4263-4270).
    """
    operation, ref = CONTRAST
    hist_operation, hist_ref = by_key.get(("historical", operation)), by_key.get(("historical", ref))
    if not hist_operation or not hist_ref:
        return None
    cases = sorted(k for k in hist_ref if k in hist_operation)
    out: dict[str, Any] = {"arm": operation, "reference": ref, "draws": draws}
    kinds = {}
    for kind in ("historical", "current"):
        arm_rows, ref_rows = by_key.get((kind, operation), {}), by_key.get((kind, ref), {})
        keys = sorted(k for k in ref_rows if k in arm_rows)
        if keys:
            flags = [bool(ref_rows[k]["retained_text"]) for k in keys]
            kinds[kind] = (keys, group_bootstrap_weights([k[0] for k in keys], n_draws=draws, seed=seed, strata=flags))
    for rule in ("em", "contains"):
        out[rule] = {kind: _strata_contrast(by_key, kind, keys, weights, rule)
                     for kind, (keys, weights) in kinds.items()}
        current_operation, current_ref = by_key.get(("current", operation), {}), by_key.get(("current", ref), {})
        gains = {k[0] for k, r in current_operation.items()
                 if r[rule] and k in current_ref and not current_ref[k][rule]}
        losses = {k[0] for k in cases if hist_ref[k][rule] and not hist_operation[k][rule]}
        ids = {k[0] for k in cases}
        table = [[len(losses & gains), len(losses - gains)], [len((ids - losses) & gains), len(ids - losses - gains)]]
        out[rule]["loss_and_current_gain"] = fisher_exact(table)
    return out


def _strata_contrast(by_key: dict[tuple[str, str], dict[tuple[str, int], dict]], kind: str,
                     keys: list[tuple[str, int]], weights: np.ndarray, rule: str) -> dict[str, Any]:
    """One question kind of :func:`recompute_vs_source` under one rule: its strata and their difference."""
    operation, ref = CONTRAST
    ref_rows = by_key[(kind, ref)]
    diff = np.array([int(by_key[(kind, operation)][k][rule]) - int(ref_rows[k][rule]) for k in keys], dtype=float)
    strata, per_draw = {}, {}
    for name, member in RETAINED_STRATA:
        inside = np.array([member(ref_rows[k]) for k in keys], dtype=bool)
        chosen = [k for k, i in zip(keys, inside) if i]
        correct = {p: sum(bool(by_key[(kind, p)][k][rule]) for k in chosen)
                   for p in STRATUM_POLICIES if all(k in by_key.get((kind, p), {}) for k in chosen)}
        b, c = int((diff[inside] > 0).sum()), int((diff[inside] < 0).sum())
        entry = {"n": len(chosen), "cases": len({k[0] for k in chosen}), "correct": correct, "arm_only": b,
                 "reference_only": c, "mcnemar_p": mcnemar_exact(b, c), "change": int(diff[inside].sum()),
                 "change_pp": None, "ci_pp": None}
        if chosen:
            draws_pp = 100 * bootstrap_mean(np.where(inside, diff, np.nan), weights)
            entry["change_pp"] = 100 * float(diff[inside].mean())
            entry["ci_pp"] = percentile_interval(draws_pp)
            per_draw[name] = draws_pp
        strata[name] = entry
    out: dict[str, Any] = {"strata": strata, "difference": None}
    first, second = RETAINED_STRATA[0][0], RETAINED_STRATA[1][0]
    if first in per_draw and second in per_draw:  # both resampled within their stratum: every draw has both
        out["difference"] = {"of": [first, second], "pp": strata[first]["change_pp"] - strata[second]["change_pp"],
                             "ci_pp": percentile_interval(per_draw[first] - per_draw[second])}
    return out


# --------------------------------------------------------------------------- direct contrasts (L4466-4527)

#: The operations the paper contrasts directly with the source mask (tab:mquake_direct_contrasts, L4489-4527: state
#: rebuild and row compaction; text recompute's changes are in tab:main_mquake_answers, L436-438).
DIRECT = ("rebuild", "compact", "recompute")
#: The current question of the direct contrasts: the first paraphrase only (L4521: "Current uses the first
#: paraphrase only").
FIRST_PARAPHRASE = 0
#: The paper's direct contrasts with the source mask per (question, operation): the claim of ``claims.py`` that
#: judges it and the paper's numbers, pp [95% CI] for Qwen3-4B, Llama-3.2-3B and Qwen3-32B (L4505-4516; recompute:
#: L436-438, all paraphrases for the current question, no interval).
DIRECT_CLAIMS = {
    ("current", "rebuild"): ("mquake.rebuild-current", "+7.3 [+4.7, +10.2], +3.3 [-0.2, +6.8], +11.5 [+8.5, +14.5]"),
    ("current", "compact"): ("mquake.compact-current", "-1.5 [-3.3, +0.3], +0.5 [-1.0, +2.0], -1.7 [-3.8, +0.5]"),
    ("current", "recompute"): ("mquake.recompute-current", "+4.1, +6.7, +9.6 (all three paraphrases)"),
    ("historical", "rebuild"): ("mquake.rebuild",
                                "-41.3 [-45.7, -37.0], -19.8 [-23.3, -16.3], -37.5 [-41.5, -33.3]"),
    ("historical", "compact"): ("mquake.compact", "0.0 [-2.0, +1.8], +1.2 [-0.2, +2.5], -0.2 [-1.8, +1.7]"),
    ("historical", "recompute"): ("mquake.recompute-historical", "-40.5, -20.2, -41.0"),
}
#: Rules of the new contrasts: the paper's exact match with EOS, and contains (ours).
COMPARED_RULES = ("em", "contains")


def direct_contrasts(by_key: dict[tuple[str, str], dict[tuple[str, int], dict]], seed: int = 0,
                     draws: int = DRAWS) -> list[dict[str, Any]]:
    """Each operation of :data:`DIRECT` minus the source mask, on the first current paraphrase and on the historical
    question, paired over the same cases (the paper's tab:mquake_direct_contrasts): per rule both arms' correct
    answers and the change with its 95% interval (answers; ``readouts.stats.paired_change`` over ``draws`` case
    bootstrap draws, the draws of the report's other tables)."""
    out = []
    for kind in ("current", "historical"):
        source = by_key.get((kind, SOURCE), {})
        keys = sorted(k for k in source if kind != "current" or k[1] == FIRST_PARAPHRASE)
        if not keys:
            continue
        boot = group_bootstrap_weights([k[0] for k in keys], n_draws=draws, seed=seed)
        for operation in DIRECT:
            mine = by_key.get((kind, operation), {})
            if not mine or not all(k in mine for k in keys):
                continue
            entry: dict[str, Any] = {"question": kind, "operation": operation, "n": len(keys)}
            for rule in COMPARED_RULES:
                arm, reference = [int(mine[k][rule]) for k in keys], [int(source[k][rule]) for k in keys]
                entry[rule] = {"operation": sum(arm), "source": sum(reference), **paired_change(arm, reference, boot)}
            out.append(entry)
    return out


# --------------------------------------------------------------------------- historical questions, current value

#: The paper's historical answers that give the current value, of 600 (Qwen3-4B, Qwen3-32B, Llama-3.2-3B; L4248-4251).
CURRENT_VALUE_ANCHORS = {"recompute": "244 (40.7% [36.8, 44.7]), 180 (30.0% [26.3, 33.7]), 56 (9.3% [7.2, 11.8])",
                         "source-mask": "61, 29, 21", "full": "12, 0, 0"}
#: The paper's recompute-minus-source differences in those answers (pp [95% CI], same models; L4251-4252).
CURRENT_VALUE_CHANGE = "+30.5 [26.7, 34.5], +25.2 [21.3, 29.0], +5.8 [3.5, 8.3]"


def current_value_answers(by_key: dict[tuple[str, str], dict[tuple[str, int], dict]], seed: int = 0,
                          draws: int = DRAWS) -> dict[str, Any] | None:
    """Historical questions answered with the current value (L4247-4252), per policy and rule.

    A stored historical answer is regraded (``history.grade``, the rules of every row) against its case's current
    answer and aliases (the references of the case's current questions). UNCLEAR (docs/fidelity.md): the paper names
    neither the matching rule nor the interval; ours are the run's rules and the case bootstrap. Per policy: the
    count, its rate with a 95% interval from ``draws`` case-bootstrap draws, and the change against the source mask
    (answers, paired, the same draws). ``current_full``: full access's correct answers to the first current
    paraphrase (whether the model can state the current value at all; the verdict's floor).
    """
    current = {}
    for (kind, _), rows in by_key.items():
        if kind == "current":
            for (case, _), r in rows.items():
                current.setdefault(case, r["answers"])
    reference = by_key.get(("historical", SOURCE), {})
    keys = sorted(k for k in reference if k[0] in current)
    if not keys:
        return None
    policies = [p for p in STUDY_CONDITIONS if all(k in by_key.get(("historical", p), {}) for k in keys)]
    boot = group_bootstrap_weights([k[0] for k in keys], n_draws=draws, seed=seed)
    first = by_key.get(("current", "full"), {})
    out: dict[str, Any] = {"n": len(keys), "policies": policies}
    for rule in COMPARED_RULES:
        hits = {p: [int(grade(r["output"], current[k[0]], r["stop_reason"] == "eos")[rule])
                    for k in keys for r in [by_key[("historical", p)][k]]] for p in policies}
        cells = []
        for p in policies:
            cell = {"policy": p, "count": sum(hits[p]), "rate": sum(hits[p]) / len(keys),
                    "ci": percentile_interval(bootstrap_mean(hits[p], boot))}
            if p != SOURCE:
                cell["change_vs_source"] = paired_change(hits[p], hits[SOURCE], boot)
            cells.append(cell)
        firsts = [r[rule] for k, r in first.items() if k[1] == FIRST_PARAPHRASE]
        out[rule] = {"cells": cells, "current_full": sum(map(bool, firsts)), "current_n": len(firsts)}
    return out


# --------------------------------------------------------------------------- offline routing (L4287-4317)

#: The policies the best single policy is chosen from: the paper's five access policies (tab:v41_mquake; its rebuild
#: and compaction runs answered two of the five questions only, so could not be chosen). UNCLEAR (docs/fidelity.md).
ROUTING_POLICIES = ("full", "value-mask", "source-mask", "recompute", "online-mask")
#: The offline router (L4309-4312): questions with the historical prefix read the full cache, all others the
#: recomputed cache. Its oracle picks the better of those two caches per question (L4297-4300).
ROUTES = {"historical": "full"}
ROUTE_DEFAULT = "recompute"
#: The paper's routing rows (exact match with EOS, of 3,000 questions; L4290, McNemar and gap L4314-4317).
ROUTING_ANCHORS = (("Qwen3-4B", "Full 2,402", "2,540", "+4.6 [3.1, 6.1]", "276 / 138", "2,682", "49%"),
                   ("Qwen3-32B", "Full 2,655", "2,853", "+6.6 [5.3, 7.9]", "239 / 41", "2,897", "82%"),
                   ("Llama-3.2-3B", "Online 2,225", "2,359", "+4.5 [2.9, 6.0]", "307 / 173", "2,447", "60%"))


def routing(by_key: dict[tuple[str, str], dict[tuple[str, int], dict]], seed: int = 0, draws: int = DRAWS,
            policies: tuple[str, ...] = ROUTING_POLICIES) -> dict[str, Any] | None:
    """The offline router over existing answers against the best single policy and the two-cache oracle.

    Over every question answered by both routed caches: per rule, each of ``policies``' correct answers (those
    answering every question), the best of them (most correct; ties to the earlier in ``policies``), the routed
    answers, the routed-minus-best change (answers) with its 95% interval from ``draws`` case-bootstrap draws (a case's
    five questions together) and the exact McNemar test of its discordant questions, the oracle (the better of the two
    routed caches per question, using the references) and the share of the best-to-oracle gap the router closes; and
    per question class (historical or not) the policy that class alone would pick.
    """
    questions: dict[tuple[str, int], tuple[str, dict[str, dict]]] = {}
    for (kind, condition), rows in by_key.items():
        for k, r in rows.items():
            questions.setdefault(k, (kind, {}))[1][condition] = r
    arms = {*ROUTES.values(), ROUTE_DEFAULT}
    keys = sorted(k for k, (_, got) in questions.items() if arms <= got.keys())
    if not keys:
        return None
    candidates = [p for p in policies if all(p in questions[k][1] for k in keys)]
    boot = group_bootstrap_weights([k[0] for k in keys], n_draws=draws, seed=seed)
    historical = [questions[k][0] == "historical" for k in keys]
    out: dict[str, Any] = {"rule": "historical prefix -> full access; other questions -> text recompute",
                           "n": len(keys), "historical": sum(historical), "candidates": candidates}
    for rule in COMPARED_RULES:
        def answered(condition: str) -> list[int]:
            return [int(questions[k][1][condition][rule]) for k in keys]

        correct = {p: answered(p) for p in candidates}
        routed = [int(questions[k][1][ROUTES.get(questions[k][0], ROUTE_DEFAULT)][rule]) for k in keys]
        oracle = [max(c) for c in zip(*(answered(a) for a in sorted(arms)))]
        best = max(candidates, key=lambda p: sum(correct[p]))
        change = paired_change(routed, correct[best], boot)
        gap = sum(oracle) - sum(correct[best])
        by_class = {cls: max(candidates, key=lambda p: sum(c for c, h in zip(correct[p], historical) if h == want))
                    for cls, want in (("historical", True), ("other", False))}
        out[rule] = {"policies": {p: sum(v) for p, v in correct.items()}, "best": best, "routed": sum(routed),
                     "oracle": sum(oracle), "change_vs_best": change,
                     "mcnemar_p": mcnemar_exact(change["corrections"], change["reversals"]),
                     "gap_closed": change["change"] / gap if gap > 0 else None, "class_best": by_class}
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
    lines += _direct_lines(summary.get("direct_contrasts"))
    lines += _retained_lines(summary.get("recompute_vs_source"), summary.get("current_value"))
    lines += _routing_lines(summary.get("routing"))
    return "\n".join(lines + [""])


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
    """Each claim of :data:`CLAIMS` per rule (the paper's exact match; contains, ours) with its verdict against the
    paper's reference arm: the claim of ``claims.py`` judged (``studies.common.claims.verdict_text``) on
    ``claims.cell_change_measurement``, not testable when that arm is at the floor."""
    cells = {(c["kind"], c["policy"]): c for c in summary["cells"]}
    out = []
    for kind, condition, reference, key, paper in CLAIMS:
        cell, ref = cells.get((kind, condition)), cells.get((kind, reference))
        versus = "full" if reference == "full" else "source"
        if cell is None or ref is None or f"em_change_vs_{versus}" not in cell:
            continue
        for rule in ("em", "contains"):
            ch = cell[f"{rule}_change_vs_{versus}"]
            out.append({"question": kind, "claim": f"{condition} - {reference}", "paper": paper, "rule": rule,
                        "estimate": f"{estimate(ch['change'], ch['ci'], '+d', '+.0f')} of {ref['n']}",
                        "reference": f"{ref[rule]} of {ref['n']}",
                        "verdict": verdict_text(_CLAIMS[key],
                                                cell_change_measurement(summary, kind, condition, reference, rule))})
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


def direct_verdicts(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each direct contrast per rule with the paper's numbers and its verdict against the source mask (the paper's
    reference arm): the claim of :data:`DIRECT_CLAIMS` judged (``studies.common.claims.verdict_text``) on
    ``claims.direct_contrast_measurement``, not testable when the source mask is at the floor."""
    out = []
    for c in summary.get("direct_contrasts") or []:
        key, paper = DIRECT_CLAIMS[(c["question"], c["operation"])]
        for rule in COMPARED_RULES:
            ch, n = c[rule], c["n"]
            out.append({"question": c["question"], "operation": c["operation"], "rule": rule, "n": n,
                        "operation_correct": ch["operation"], "source_correct": ch["source"],
                        "estimate": pp_of(ch["change"], ch["ci"], n), "cr": corrections_reversals(ch), "paper": paper,
                        "verdict": verdict_text(_CLAIMS[key], direct_contrast_measurement(c, rule))})
    return out


def _direct_lines(contrasts: list[dict[str, Any]] | None) -> list[str]:
    if not contrasts:
        return []
    rows = direct_verdicts({"direct_contrasts": contrasts})
    return ["", "## Direct contrasts with the source mask", "",
            "Each operation minus the source mask on the same cases (the paper's table of direct contrasts, "
            "L4489-4527): the current question is the first paraphrase only, as in the paper; changes in percentage "
            "points of the cases with paired 95% intervals (the case bootstrap of the tables above). Paper: "
            "Qwen3-4B, Llama-3.2-3B, Qwen3-32B, exact match with EOS (recompute: its changes in the paper's main "
            "table, current over all three paraphrases, no intervals). Verdicts as above (no-change claims within "
            f"+-{TOLERANCE_PP:g} pp).", "",
            *table_head(["question", "operation", "rule", "operation / source correct", "change (pp) [95% CI]",
                         "corrections / reversals", "paper (pp)", "verdict"]),
            *(table_row([r["question"], r["operation"], r["rule"],
                         f"{r['operation_correct']} / {r['source_correct']} of {r['n']}", r["estimate"], r["cr"],
                         r["paper"], r["verdict"]]) for r in rows)]


#: The paper's retained-text contrasts, exact match, historical question (Qwen3-4B, Qwen3-32B, Llama-3.2-3B): the
#: recompute-minus-source change per stratum and their difference, pp [95% CI] (L4236-4244, L4283-4285).
RETAINED_ANCHORS = {"retained": "-47.5 [-52.1, -42.9], -47.5 [-51.9, -43.1], -23.5 [-27.3, -19.6] (of 520)",
                    "masked_only": "+5.0 [-1.2, 11.2], +1.2 [-5.0, 7.5], +1.2 [-6.3, 8.8] (of 80)",
                    "masked_only_single_edit": "+7.8 [1.6, 15.6] (Qwen3-4B, 64 cases; 5 / 0, McNemar p = 0.06)",
                    "difference": "-52.5 [-60.3, -45.2], -48.8 [-56.8, -41.0], -24.7 [-33.8, -15.7]"}
#: The paper's current questions by stratum, source mask / recompute correct (L4258-4262).
RETAINED_CURRENT_ANCHORS = {"retained": "1,363/1,416, 1,306/1,449, 982/1,107 (of 1,560)",
                            "masked_only": "152/174, 192/222, 169/163 (of 240)"}


def retained_verdicts(contrast: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The paper's two retained-text findings per rule with their verdicts: recompute loses historical answers
    against the source mask in the retained stratum (the claim ``mquake.retained-loss``), and that loss exceeds the
    masked-only stratum's (difference below 0, ``mquake.strata``), each judged
    (``studies.common.claims.verdict_text``) on ``claims.strata_measurement`` with the reference arm the source
    mask in the retained stratum (not testable below the floor)."""
    out = []
    for rule in COMPARED_RULES:
        hist = (contrast or {}).get(rule, {}).get("historical")
        if not hist:
            continue
        retained = hist["strata"]["retained"]
        source = retained["correct"].get(SOURCE, 0)
        if retained["ci_pp"] is not None:
            out.append({"finding": "recompute - source-mask, historical, retained stratum", "rule": rule,
                        "estimate": estimate(retained["change_pp"], retained["ci_pp"], "+.1f"),
                        "paper": RETAINED_ANCHORS["retained"], "reference": f"{source} of {retained['n']}",
                        "verdict": verdict_text(_CLAIMS["mquake.retained-loss"],
                                                strata_measurement(hist, "retained", floor=SOURCE))})
        d = hist["difference"]
        if d is not None:
            out.append({"finding": "retained minus masked-only stratum", "rule": rule,
                        "estimate": estimate(d["pp"], d["ci_pp"], "+.1f"), "paper": RETAINED_ANCHORS["difference"],
                        "reference": f"{source} of {retained['n']}",
                        "verdict": verdict_text(_CLAIMS["mquake.strata"], strata_measurement(hist, floor=SOURCE))})
    return out


def current_value_verdicts(current: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Recompute answers historical questions with the current value more often than the source mask: per rule the
    change with its verdict, the claim ``mquake.current-value`` judged (``studies.common.claims.verdict_text``) on
    ``claims.current_value_measurement``; not testable when full access states the current value (first
    paraphrase) below the floor, since then no policy can be expected to give it."""
    out = []
    for rule in COMPARED_RULES:
        t = (current or {}).get(rule)
        cell = next((c for c in t["cells"] if c["policy"] == CONTRAST[0]), None) if t else None
        if cell is None:
            continue
        ch, n = cell["change_vs_source"], current["n"]
        out.append({"finding": "historical answered with the current value, recompute - source-mask", "rule": rule,
                    "estimate": pp_of(ch["change"], ch["ci"], n), "paper": CURRENT_VALUE_CHANGE,
                    "reference": f"full access, current (first paraphrase): {t['current_full']} of {t['current_n']}",
                    "verdict": verdict_text(_CLAIMS["mquake.current-value"],
                                            current_value_measurement(current, rule, full_floor=True))})
    return out


def _retained_lines(contrast: dict[str, Any] | None, current: dict[str, Any] | None) -> list[str]:
    """The retained-text section (paper app:v52_mquake_retained): strata, their difference, the current value on
    historical questions, the loss x gain table, and the verdicts."""
    if not contrast and not current:
        return []
    lines = ["", "## Retained text", ""]
    if contrast:
        arm, ref = contrast["arm"], contrast["reference"]
        lines += [f"{arm.capitalize()} against {ref} by retained-text stratum (retained: the historical answer or an "
                  "alias, normalized, at least three characters, word-bounded, still occurs in the history without the "
                  "superseded records; masked only: it occurs only inside them; single edit: the masked-only cases "
                  "with one edit). Correct answers per policy; the change in percentage points of the stratum with a "
                  f"95% interval from {contrast['draws']:,} paired case-bootstrap draws resampled within each stratum "
                  "(a case's paraphrases together); exact McNemar test of the discordant questions.", "",
                  *table_head(["rule", "question", "stratum", "n", *STRATUM_POLICIES, f"{arm} - {ref} (pp) [95% CI]",
                               f"only {arm} / only {ref}", "McNemar p"])]
        differences = []
        for rule in COMPARED_RULES:
            for kind in ("historical", "current"):
                part = contrast[rule].get(kind)
                if not part:
                    continue
                for name, st in part["strata"].items():
                    change = "" if st["ci_pp"] is None else estimate(st["change_pp"], st["ci_pp"], "+.1f")
                    lines.append(table_row([rule, kind, name, st["n"],
                                            *(st["correct"].get(p, "") for p in STRATUM_POLICIES), change,
                                            f"{st['arm_only']} / {st['reference_only']}", f"{st['mcnemar_p']:.3g}"]))
                if part["difference"]:
                    d = part["difference"]
                    differences.append(f"{rule}, {kind} {estimate(d['pp'], d['ci_pp'], '+.1f')}")
        if differences:
            lines += ["", "Difference between the strata's changes (retained minus masked only, pp, paired draws): "
                      + "; ".join(differences) + "."]
        lines += ["", "Paper (exact match; Qwen3-4B, Qwen3-32B, Llama-3.2-3B): historical recompute - source, retained "
                  f"{RETAINED_ANCHORS['retained']}; masked only {RETAINED_ANCHORS['masked_only']}; single edit "
                  f"{RETAINED_ANCHORS['masked_only_single_edit']}; difference {RETAINED_ANCHORS['difference']}. "
                  f"Current questions, source mask / recompute: retained {RETAINED_CURRENT_ANCHORS['retained']}; "
                  f"masked only {RETAINED_CURRENT_ANCHORS['masked_only']}."]
    if current:
        lines += ["", "Historical questions answered with the current value (each historical answer regraded "
                  "against its case's current answer and aliases under the same rule), per policy, with a 95% "
                  "interval from the case bootstrap and the change against the source mask (pp of the "
                  f"{current['n']} cases, paired):", "",
                  *table_head(["rule", "policy", "current value", "rate % [95% CI]", "change vs source-mask (pp) "
                               "[95% CI]", "paper, of 600 (Qwen3-4B, Qwen3-32B, Llama-3.2-3B)"])]
        for rule in COMPARED_RULES:
            for c in current[rule]["cells"]:
                ch = c.get("change_vs_source")
                lines.append(table_row([rule, c["policy"], f"{c['count']} of {current['n']}",
                                        estimate(100 * c["rate"], [100 * x for x in c["ci"]], ".1f"),
                                        pp_of(ch["change"], ch["ci"], current["n"]) if ch else "",
                                        CURRENT_VALUE_ANCHORS.get(c["policy"], "") if rule == "em" else ""]))
    if contrast:
        lines += ["", f"Cases whose historical answer {contrast['arm']} loses against {contrast['reference']}, and "
                  "whether it gains a current paraphrase (rows: historical loss yes/no; columns: current gain yes/no; "
                  "conditional odds ratio with its exact 95% interval, Fisher exact test):", "",
                  *table_head(["rule", "loss & gain", "loss, no gain", "no loss, gain", "neither",
                               "odds ratio [95% CI]", "Fisher p"])]
        for rule in COMPARED_RULES:
            f = contrast[rule]["loss_and_current_gain"]
            (a, b), (c, d) = f["table"]
            odds = "n/a" if f["odds_ratio"] is None else f"{f['odds_ratio']:.3g}"
            lo, hi = ("n/a" if x is None else f"{x:.3g}" for x in f["ci"])
            lines.append(f"| {rule} | {a} | {b} | {c} | {d} | {odds} [{lo}, {hi}] | {f['p']:.3g} |")
        lines += ["", "Paper: among cases with a historical loss, 31 of 258, 61 of 255 and 28 of 134 also gain a "
                  "current paraphrase, against 80 of 342, 80 of 345 and 143 of 466 of the other cases; odds ratios "
                  "0.45 [0.28, 0.71] (p = 0.0004), 1.04 [0.70, 1.55] (p = 0.85), 0.60 [0.36, 0.96] (p = 0.03)."]
    verdicts = retained_verdicts(contrast) + current_value_verdicts(current)
    if verdicts:
        lines += ["", f"The paper's retained-text findings at this size ({VERDICT_RULE}; for the current value on "
                  "historical questions the floor is full access stating the current value):", "",
                  *table_head(["finding", "rule", "ours (pp) [95% CI]", "paper (pp)", "reference", "verdict"]),
                  *(table_row([v["finding"], v["rule"], v["estimate"], v["paper"], v["reference"], v["verdict"]])
                    for v in verdicts)]
    return lines


def routing_verdicts(routed: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Routed minus the best single policy per rule, with its verdict: the claim ``mquake.routing`` (a gain)
    judged (``studies.common.claims.verdict_text``) on ``claims.routing_measurement`` (reference arm: the best
    single policy, not testable below the floor)."""
    out = []
    for rule in COMPARED_RULES:
        r = (routed or {}).get(rule)
        if not r:
            continue
        ch, n, best = r["change_vs_best"], routed["n"], r["best"]
        out.append({"rule": rule, "best": best, "estimate": pp_of(ch["change"], ch["ci"], n),
                    "verdict": verdict_text(_CLAIMS["mquake.routing"], routing_measurement(routed, rule))})
    return out


def _routing_lines(routed: dict[str, Any] | None) -> list[str]:
    if not routed:
        return []
    verdicts = {v["rule"]: v for v in routing_verdicts(routed)}
    lines = ["", "## Offline routing", "",
             f"Offline routing over the existing answers ({routed['rule']}; {routed['n']} questions, "
             f"{routed['historical']} historical): the router against the best single policy (the most correct of "
             f"{', '.join(routed['candidates'])}, chosen after seeing the results, as in the paper) with the paired "
             "change in percentage points of every question (95% interval from the case bootstrap, a case's "
             "questions together) and the exact McNemar test of the discordant questions; the oracle picks the "
             "better of the two routed caches per question using the references (an upper bound).", "",
             *table_head(["rule", "best single policy", "routed", "routed - best (pp) [95% CI]",
                          "only routed / only best", "McNemar p", "oracle", "gap closed", "best per class "
                          "(historical / other)", "verdict"])]
    for rule in COMPARED_RULES:
        r = routed[rule]
        ch = r["change_vs_best"]
        closed = "n/a (oracle not above best)" if r["gap_closed"] is None else f"{100 * r['gap_closed']:.0f}%"
        lines.append(table_row([rule, f"{r['best']} {r['policies'][r['best']]}", r["routed"],
                                verdicts[rule]["estimate"], f"{ch['corrections']} / {ch['reversals']}",
                                f"{r['mcnemar_p']:.3g}", r["oracle"], closed,
                                f"{r['class_best']['historical']} / {r['class_best']['other']}",
                                verdicts[rule]["verdict"]]))
    lines += ["", "Paper (exact match with EOS, 3,000 questions per model):", "",
              *table_head(["model", "best single policy", "routed", "routed - best (pp) [95% CI]",
                           "only routed / only best", "oracle", "gap closed"]),
              *(table_row(a) for a in ROUTING_ANCHORS)]
    return lines
