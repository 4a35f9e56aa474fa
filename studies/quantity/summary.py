"""Summary statistics and report of a quantity run, recomputed from ``results.jsonl`` alone.

For every (information, query, condition) cell: complete answers under the paper's
three rules (``complete_exact``, ``complete_equivalent``, ``complete``: rules 1-3 of
``quantity_task/grading.py``) and the lenient rule; corrections, reversals and net
change against full access and (for the two masks) against their matched controls;
and the mean margin change against full access and against the control. A matched
control's net change against full access (control minus full accuracy) also has its
one-sided 95 % lower bound L.95 (paper L1939-1941: the preservation criterion asks
L.95 > -3 pp). Intervals: paired group bootstrap (paper partC 6) with 10,000 draws of
groups, seeded with the paper's 20260919 by default (``PAPER_SEED``, seed L4929), the
same draws for every cell, percentile 95 %.

No-context baseline (runs with ``--no-context``; paper app:v52_weights, there on MQuAKE): the
historical query's complete (and lenient) answers of every condition on the cases the no-context
model answers wrongly (``studies/common/no_context.py``); groups are the bootstrap units.

Warning signal (paper partC 5): how well D_c, and the paper's Delta m variant, rank
lost above kept answers, labeled with the paper's complete answers and, beside them,
with the lenient rule. Its decomposition (paper L4085-4212, :func:`candidate_decomposition`):
D_c, D_o and Delta m = D_o - D_c with intervals, Spearman(Delta m, D_o) with an interval, and the
lost answers split into content losses and failures to stop after a complete first answer, each
flagged at the paper's tau.

Answer outcomes (``diagnostics.py``): every cell's answer categories (the failure diagnostics), the per-unit
breakdown and the capped outputs of the replacements' current query under the whole-source mask.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, PAPER_SEED, GroupBootstrap, auc, bootstrap_auc_draws, bootstrap_mean, \
    bootstrap_spearman, clopper_pearson, group_bootstrap_indices, one_sided_lower, percentile_interval, spearman, \
    zero_failure_bound
from kvprobe.studies.common.no_context import NO_CONTEXT, Outcome, conditional_on_baseline, conditional_table
from kvprobe.studies.datasets.quantity_task.grading import CATEGORIES
from kvprobe.studies.common.claims import judge, verdict_text
from kvprobe.studies.common.report import VERDICT_RULE, estimate, heading, interval, rate_interval, \
    small_sample_note, table_head, table_row
from kvprobe.studies.datasets.quantity_task.tasks import ITEMS
from kvprobe.studies.common.runner import read_rows, read_timing
from .claims import CLAIMS as PAPER_CLAIMS
from .claims import quantity_change_measurement, quantity_margin_measurement, quantity_spearman
from .diagnostics import capped_lines, capped_outputs, failure_lines, unit_breakdown, unit_lines
from .threshold import LABELS, RULES as SIGNAL_RULES, SIGNAL_CONDITIONS, signal
from .unit_cluster import unit_cluster, unit_cluster_lines

#: ``summary.json``'s indent (``kvprobe.studies.common.summary``; the other studies write 1).
SUMMARY_INDENT = 2
#: Report order of conditions (unknown names sort after these, alphabetically).
RELATION_ORDER = ("replacement", "confirmation", "other_attribute", "other_entity")
CONDITION_ORDER = ("full", "source", "source-control", "number", "number-control", "recompute", "recompute-control",
                   "rebuild", "rebuild-control", "compact", "compact-control", NO_CONTEXT)
#: Operations compared with masking in the deletion panel (paper tab:v52_compact_headline, L4526-4546), the
#: rules it counts, and the paper's Qwen3-32B row for B referring to A's unit (complete n/60, unit omitted,
#: margin change vs the operation's own control [CI] nats, change from masking pp [CI] (gains/losses)).
DELETIONS = ("compact", "recompute", "rebuild")
DELETION_RULES = ("complete", "lenient_complete")
PAPER_DELETION = {"source": "36/60, 24 omitted, +7.35 [+6.62, +8.15]",
                  "compact": "40/60, 20 omitted, +7.86 [+7.09, +8.70]; +6.7 [+1.7, +13.3] (4/0)",
                  "recompute": "3/60, 57 omitted, +2.31 [+1.45, +3.14]; -55.0 [-66.7, -41.7]"}
QUERY_ORDER = ("current", "historical", "unrelated")


def _cell_order(key: tuple[str, str, str]) -> tuple:
    info, query, cond = key
    q = QUERY_ORDER.index(query) if query in QUERY_ORDER else len(QUERY_ORDER)
    c = CONDITION_ORDER.index(cond) if cond in CONDITION_ORDER else len(CONDITION_ORDER)
    return (info, q, query, c, cond)
#: Row columns of the paper's rules 1, 2, 3 and of the lenient rule.
RULES = ("complete_exact", "complete_equivalent", "complete", "lenient_complete")
#: How the report names them.
RULE_NAMES = {"complete_exact": "exact", "complete_equivalent": "equivalent", "complete": "complete",
              "lenient_complete": "lenient"}


def _draw_means(values: np.ndarray, draws: np.ndarray) -> np.ndarray:
    """Mean of ``values`` (NaN = not in the cell) in every bootstrap draw: ``np.nanmean(values[draws], axis=1)``
    to the bit (the same sums over the same zero-filled rows), without its copies of the drawn matrix."""
    present = ~np.isnan(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(present, values, 0.0)[draws].sum(axis=1) / present[draws].sum(axis=1)


def _interval(values: np.ndarray, draws: np.ndarray) -> list[float]:
    """Percentile 95 % interval of the mean of ``values`` (NaN = not in the cell) over bootstrap draws."""
    return percentile_interval(_draw_means(values, draws), points="alpha")


def warning_signal(cells, order: list[str], boot: GroupBootstrap, rule: str = SIGNAL_RULES[0]) -> dict[str, Any]:
    """How well D_c and Delta m rank lost above kept answers (AUC, paper partC 5, L4130-4145).

    D_c = -(logp_current(source) - logp_current(control)); Delta m = m(source) - m(control). Lost:
    complete under full access, incomplete under the whole-source mask; kept: complete under both; cases
    incomplete under full access are excluded (:func:`threshold.signal`). Current query, replacement
    groups, per information condition and pooled over both (``"both"``: each drawn group brings its cases
    of both conditions). Both AUCs use the same draws of ``boot``; draws with an empty class are dropped
    and counted (``draws_kept``).
    """
    index = {g: i for i, g in enumerate(order)}
    per_info: dict[str, list[tuple[int, float, float, bool]]] = {}
    for info in sorted({k[0] for k in cells}):
        full, src, ctrl = (cells.get((info, "current", c), {}) for c in SIGNAL_CONDITIONS)
        per_info[info] = []
        for g, row in src.items():
            if row["relation"] == "replacement" and g in full and g in ctrl:
                found = signal(full[g], row, ctrl[g], rule)
                if found is not None:
                    per_info[info].append((index[g], *found))
    if len(per_info) > 1:
        per_info["both"] = [case for cases in list(per_info.values()) for case in cases]
    out: dict[str, Any] = {}
    for info, cases in per_info.items():
        group = np.array([c[0] for c in cases], dtype=np.intp)
        scores = {"d_c": np.array([c[1] for c in cases]), "delta_m": np.array([c[2] for c in cases])}
        lost = np.array([c[3] for c in cases], dtype=bool)
        draws = bootstrap_auc_draws(scores, lost, GroupBootstrap(boot.groups, group, boot.draws))
        kept = ~np.isnan(draws["d_c"])
        entry: dict[str, Any] = {"rule": rule, "lost": int(lost.sum()), "kept": int((~lost).sum())}
        for name, key in (("d_c", "auc"), ("delta_m", "auc_delta_m")):
            value = auc(scores[name], lost)
            entry[key] = None if np.isnan(value) else value  # undefined with an empty class
            entry[f"{key}_ci"] = percentile_interval(draws[name][kept], points="alpha") if kept.any() else None
            for cls, members in (("lost", lost), ("kept", ~lost)):
                entry[f"mean_{name}_{cls}"] = float(scores[name][members].mean()) if members.any() else None
        entry["draws_kept"] = int(kept.sum())
        out[info] = entry
    return out


#: Flag threshold of the loss split (nats): the paper's held-out tau for five of its eight models (L4199-4201).
#: One model cannot hold itself out, so the paper's value is applied, not refit (docs/fidelity.md).
PAPER_TAU = 0.75
#: Kinds of lost answers (paper L4150-4157): the first answer of the masked output is wrong (wrong, generic or
#: missing unit, other value, or none: ``content``), or right and the output runs to the token cap (``stop``), or
#: right and the output ends with EOS but is not complete (``other``, e.g. a second, different answer).
LOSS_KINDS = ("content", "stop", "other")
#: The row fields the decomposition and the loss split read (besides the grading columns).
DECOMPOSITION_FIELDS = ("logp_right", "logp_other", "margin", "first_answer_correct", "stop_reason")


def loss_kind(source: dict[str, Any]) -> str:
    """The kind of a lost answer from its source-mask row (:data:`LOSS_KINDS`)."""
    if not source["first_answer_correct"]:
        return "content"
    return "stop" if source["stop_reason"] == "cap" else "other"


def _decomposition_entry(cases: list[dict[str, Any]], boot: GroupBootstrap) -> dict[str, Any]:
    """D_c, D_o, Delta m and Spearman(Delta m, D_o) of one set of cases (dicts with group, d_c, d_o); see
    :func:`candidate_decomposition`."""
    bootstrap = GroupBootstrap(boot.groups, np.array([c["group"] for c in cases], dtype=np.intp), boot.draws)
    weights = bootstrap.weights()
    values = {k: np.array([c[k] for c in cases], dtype=float) for k in ("d_c", "d_o")}
    values["delta_m"] = values["d_o"] - values["d_c"]
    entry: dict[str, Any] = {"n": len(cases)}
    for name, v in values.items():
        entry[f"mean_{name}"] = float(v.mean()) if len(v) else None
        entry[f"mean_{name}_ci"] = percentile_interval(bootstrap_mean(v, weights), points="alpha") if len(v) else None
    entry["delta_m_positive"] = int((values["delta_m"] > 0).sum())
    entry["d_c_smaller"] = int((values["d_c"] < values["d_o"]).sum())
    rho = spearman(values["delta_m"], values["d_o"])
    draws = bootstrap_spearman(values["delta_m"], values["d_o"], bootstrap) if len(cases) >= 2 else np.empty(0)
    kept = ~np.isnan(draws)
    entry["spearman_delta_m_d_o"] = None if np.isnan(rho) else rho
    entry["spearman_ci"] = percentile_interval(draws[kept], points="alpha") if kept.any() else None
    entry["spearman_draws_kept"] = int(kept.sum())
    return entry


def _split_entry(cases: list[dict[str, Any]], tau: float) -> dict[str, Any]:
    """Lost / kept counts, flagged (D_c > tau) with exact intervals, and the lost answers by kind (cases: dicts
    with d_c, d_o, margin_source, label, kind); see :func:`candidate_decomposition`."""
    entry: dict[str, Any] = {}
    for label in ("lost", "kept"):
        members = [c for c in cases if c["label"] == label]
        flagged = sum(c["d_c"] > tau for c in members)
        entry[label] = len(members)
        entry[f"flagged_{label}"] = flagged
        entry[f"flagged_{label}_ci"] = clopper_pearson(flagged, len(members))
    lost = [c for c in cases if c["label"] == "lost"]
    entry["lost_current_above_old"] = sum(c["margin_source"] > 0 for c in lost)
    entry["lost_delta_m_positive"] = sum(c["d_o"] > c["d_c"] for c in lost)
    for kind in LOSS_KINDS:
        members = [c for c in lost if c["kind"] == kind]
        flagged = sum(c["d_c"] > tau for c in members)
        entry[f"lost_{kind}"] = len(members)
        entry[f"flagged_lost_{kind}"] = flagged
        entry[f"flagged_lost_{kind}_ci"] = clopper_pearson(flagged, len(members))
    return entry


def candidate_decomposition(cells, order: list[str], boot: GroupBootstrap, rules: tuple[str, ...] = SIGNAL_RULES,
                            tau: float = PAPER_TAU) -> dict[str, Any] | None:
    """The candidate-probability decomposition and the loss split of the warning signal (paper L4085-4212).

    ``per_information``: over every replacement case of the current query with a source-mask and a control row
    (per information condition and pooled, ``"both"``): D_c = -(log p_c(source) - log p_c(control)), D_o the
    same for the old candidate, Delta m = D_o - D_c (the margin change against the control), their means with
    group-bootstrap intervals, how many cases have Delta m > 0 and D_c < D_o, and Spearman(Delta m, D_o) with a
    bootstrap interval (draws with a constant variable dropped and counted). ``loss_split[rule]``: lost / kept
    as in :func:`warning_signal`; lost answers split by :func:`loss_kind`; each class flagged when D_c > ``tau``
    with exact 95 % intervals; lost answers whose current candidate still outscores the old under the mask
    (margin > 0) and whose Delta m > 0. None when a source or control row lacks one of
    :data:`DECOMPOSITION_FIELDS` (the statistic is not in that run).
    """
    index = {g: i for i, g in enumerate(order)}
    per_info: dict[str, list[dict[str, Any]]] = {}
    for info in sorted({k[0] for k in cells}):
        full, src, ctrl = (cells.get((info, "current", c), {}) for c in SIGNAL_CONDITIONS)
        per_info[info] = []
        for g, row in src.items():
            if row["relation"] != "replacement" or g not in ctrl:
                continue
            if any(k not in r for r in (row, ctrl[g]) for k in DECOMPOSITION_FIELDS):
                return None  # not in this run
            case = {"group": index[g], "d_c": -(row["logp_right"] - ctrl[g]["logp_right"]),
                    "d_o": -(row["logp_other"] - ctrl[g]["logp_other"]), "margin_source": row["margin"]}
            for rule in rules:
                label = None
                if g in full and full[g][rule]:
                    label = "kept" if row[rule] else "lost"
                case[rule] = {"label": label, "kind": loss_kind(row) if label == "lost" else None}
            per_info[info].append(case)
    if len(per_info) > 1:
        per_info["both"] = [case for cases in list(per_info.values()) for case in cases]
    return {"tau": tau,
            "per_information": {info: _decomposition_entry(cases, boot) for info, cases in per_info.items()},
            "loss_split": {rule: {info: _split_entry([{**c, **c[rule]} for c in cases], tau)
                                  for info, cases in per_info.items()} for rule in rules}}


class _SummaryKeys(TypedDict):
    groups: int
    draws: int
    seed: int
    groups_per_relation: dict[str, int]
    #: Per (relation, information, query, condition): complete answers under each rule, changes, margins.
    cells: list[dict[str, Any]]
    unit_breakdown: dict[str, Any]
    capped_outputs: dict[str, Any]
    #: Per rule: how well D_c and Delta m rank lost above kept answers.
    warning_signal: dict[str, Any]
    #: The unit as the resampled level: headline changes under a unit-cluster bootstrap beside the group
    #: bootstrap, and the warning signal within unit (:func:`.unit_cluster.unit_cluster`).
    unit_cluster: dict[str, Any]


class Summary(_SummaryKeys, total=False):
    """A quantity run's ``summary.json``."""

    #: The warning signal's decomposition (:func:`candidate_decomposition`), where the run allows it.
    candidate_decomposition: dict[str, Any]
    #: Runs with the no-context baseline: the tables conditional on it (``common.no_context``).
    no_context: list[dict[str, Any]]
    #: The runner's timing totals (``timing.json``), when present.
    timing: dict[str, Any]


def summarize(out_dir: Path | str, seed: int = PAPER_SEED, draws: int = DRAWS) -> Summary:
    """Recompute the summary from the rows on disk (streamed).

    Cells are (relation, information, query, condition); relation ``"all"`` pools
    the four relations, the others restrict to one (the paper's headline is the
    replacements' current query). ``timing``: the runner's totals (``timing.json``), when present.
    """
    cells: dict[tuple[str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    relation_of: dict[str, str] = {}
    for row in read_rows(out_dir):
        cells[(row["information"], row["query"], row["condition"])][row["group_id"]] = row
        relation_of[row["group_id"]] = row["relation"]
    order = sorted(relation_of)
    index = {g: i for i, g in enumerate(order)}
    # Long[draws, groups]: indices into ``order`` (each group its own bootstrap unit), resampled within
    # each relation, so a statistic restricted to one relation sees a full resample of it (paper partC 6).
    boot = group_bootstrap_indices(order, n_draws=draws, seed=seed, strata=[relation_of[g] for g in order])
    sample = boot.draws
    relations = ("all",) + tuple(r for r in RELATION_ORDER if r in relation_of.values())

    def vector(cell: dict[str, dict[str, Any]], key: str, members: np.ndarray) -> np.ndarray:
        v = np.full(len(order), np.nan)
        for g, row in cell.items():
            value = row[key]
            v[index[g]] = np.nan if value is None else float(value)
        return np.where(members, v, np.nan)

    def versus(mine: np.ndarray, base: np.ndarray, members: np.ndarray, lower: bool = False) -> dict[str, Any]:
        corrections, reversals = (mine == 1) & (base == 0), (mine == 0) & (base == 1)
        net = np.where(members, corrections.astype(float) - reversals.astype(float), np.nan)
        per_draw = _draw_means(net, sample)
        out = {"corrections": int(corrections.sum()), "reversals": int(reversals.sum()),
               "net": float(np.nanmean(net)), "net_ci": percentile_interval(per_draw, points="alpha")}
        if lower:  # L.95 of a matched control's accuracy minus full access's
            out["net_lower_one_sided"] = one_sided_lower(per_draw)
        return out

    summary: Summary = {"groups": len(order), "draws": draws, "seed": seed,
                        "groups_per_relation": {r: sum(v == r for v in relation_of.values()) for r in relations[1:]},
                        "cells": []}
    for (info, query, cond), cell in sorted(cells.items(), key=lambda kv: _cell_order(kv[0])):
        full = cells[(info, query, "full")]
        control = cells.get((info, query, f"{cond}-control"))
        masking = cells.get((info, query, "source")) if cond in DELETIONS else None
        for relation in relations:
            members = np.array([g in cell and relation in ("all", relation_of[g]) for g in order])
            entry: dict[str, Any] = {"relation": relation, "information": info, "query": query,
                                     "condition": cond, "n": int(members.sum())}
            for rule in RULES:
                mine, base = vector(cell, rule, members), vector(full, rule, members)
                entry[rule] = int(np.nansum(mine))
                entry[f"{rule}_vs_full"] = versus(mine, base, members, lower=cond.endswith("-control"))
                if control is not None:
                    entry[f"{rule}_vs_control"] = versus(mine, vector(control, rule, members), members)
                if masking is not None and rule in DELETION_RULES:
                    entry[f"{rule}_vs_source"] = versus(mine, vector(masking, rule, members), members)
            for key in ("margin_change_vs_full", "margin_change_vs_control"):
                v = vector(cell, key, members)
                if not np.isnan(v[members]).any():
                    entry[key] = {"mean": float(np.nanmean(v)), "ci": _interval(v, sample)}
            chosen = [row for g, row in cell.items() if relation in ("all", relation_of[g])]
            entry["stop_reasons"] = {reason: sum(row["stop_reason"] == reason for row in chosen)
                                     for reason in ("eos", "cap")}
            entry["categories"] = {cat: sum(row["category"] == cat for row in chosen) for cat in CATEGORIES}
            if entry["lenient_complete_vs_full"]["reversals"] == 0 and cond != "full":
                entry["zero_reversal_upper_bound"] = zero_failure_bound(entry["n"])
            summary["cells"].append(entry)
    summary["unit_breakdown"] = unit_breakdown(cells)
    summary["capped_outputs"] = capped_outputs(cells)
    summary["warning_signal"] = {rule: warning_signal(cells, order, boot, rule) for rule in SIGNAL_RULES}
    summary["unit_cluster"] = unit_cluster(cells, order, boot, seed, draws, summary["cells"])
    decomposition = candidate_decomposition(cells, order, boot)
    if decomposition is not None:
        summary["candidate_decomposition"] = decomposition
    if any(k[2] == NO_CONTEXT for k in cells):
        summary["no_context"] = no_context_tables(cells, seed, draws)
    if timing := read_timing(out_dir):
        summary["timing"] = timing
    return summary


#: The no-context tables' query, rules (the paper's complete rule first) and reference condition.
NO_CONTEXT_QUERY = "historical"
NO_CONTEXT_RULES = ("complete", "lenient_complete")
NO_CONTEXT_REFERENCE = "source"


def no_context_tables(cells: dict[tuple[str, str, str], dict[str, dict[str, Any]]], seed: int,
                      draws: int = DRAWS) -> list[dict[str, Any]]:
    """Per rule, every condition's historical answers on the cases (both information conditions) the
    no-context model answers wrongly; a case's group is its bootstrap unit."""
    rows = [row for (_, query, _), cell in cells.items() if query == NO_CONTEXT_QUERY for row in cell.values()]
    out = []
    for rule in NO_CONTEXT_RULES:
        outcomes = [Outcome(r["case_id"], r["query"], r["condition"], bool(r[rule]), r["group_id"]) for r in rows]
        table = conditional_on_baseline(outcomes, NO_CONTEXT_QUERY, seed, draws, reference=NO_CONTEXT_REFERENCE,
                                        order=CONDITION_ORDER)
        if table is not None:
            out.append({"rule": rule, **table})
    return out


def _no_context_lines(tables: list[dict[str, Any]] | None) -> list[str]:
    """The no-context section: one table per rule (no paper anchor: the paper's baseline is on MQuAKE)."""
    if not tables:
        return []
    lines = ["## No-context baseline: historical query on the cases the no-context model answers wrongly", "",
             "Every query is also asked with the system message and the question only (weights only). The "
             "paper reports this baseline on MQuAKE only (app:v52_weights), so there is no quantity anchor; "
             "the old value is generated, so the weights alone can hardly state it.", ""]
    for t in tables:
        lines += [f"Rule: {RULE_NAMES.get(t['rule'], t['rule'])}", "", *conditional_table(t), ""]
    return lines


def _cells(summary: dict[str, Any], relation: str, info: str, query: str) -> list[dict[str, Any]]:
    return [c for c in summary["cells"] if (c["relation"], c["information"], c["query"]) == (relation, info, query)]


def _table(entries: list[dict[str, Any]]) -> list[str]:
    def fmt(m: dict[str, Any] | None) -> str:
        return "" if m is None else estimate(m["mean"], m["ci"])

    def net(v: dict[str, Any] | None) -> str:
        if v is None:
            return ""
        return f"{v['corrections']}/{v['reversals']}, {estimate(v['net'], v['net_ci'], '+.3f')}"

    lines = table_head(["condition", *RULE_NAMES.values(), "lenient C/R, net vs full [95% CI]",
                        "lenient C/R, net vs control", "margin change vs full", "margin change vs control"])
    for c in entries:
        counts = " | ".join(f"{c[rule]}/{c['n']}" for rule in RULES)
        lines.append(f"| {c['condition']} | {counts} | {net(c['lenient_complete_vs_full'])} | "
                     f"{net(c.get('lenient_complete_vs_control'))} | {fmt(c.get('margin_change_vs_full'))} | "
                     f"{fmt(c.get('margin_change_vs_control'))} |")
    return lines + [""]


#: The paper's quantity claims the report gives a verdict on (paper partC 7, L3431-3436, L4087-4145): the
#: whole-source mask against its equal-token control, replacements, current query, B referring to A for the unit.
#: (name, the claim in ``claims.py`` whose direction judges it, rule (None: the margin), what the paper reports).
CLAIMS = (("the whole-source mask loses complete answers against its control (unit from A)", "quantity.unit-loss",
           "complete", "complete 23, 44, 55 of 60 against controls at 60 (Qwen3-4B, Qwen3-8B, Llama-3.2-3B)"),
          ("the same, lenient rule (ours)", "quantity.unit-loss", "lenient_complete", "-"),
          ("the whole-source mask raises the margin against its control (nats)", "quantity.margin", None,
           "Delta m +7.06 to +22.81 nats (eight models)"))


def claim_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each claim of :data:`CLAIMS` with our estimate and its verdict against the paper's reference arm, the
    whole-source control: the claim of ``claims.py`` judged (``studies.common.claims.verdict_text``) on its
    measurement (``claims.quantity_change_measurement`` with the control as the reference, not testable when the
    control is at the floor under the rule; ``claims.quantity_margin_measurement``); answer changes for B
    referring to A's unit only, the margin for every information."""
    out = []
    claims = {c.key: c for c in PAPER_CLAIMS}
    for info in sorted({c["information"] for c in summary["cells"]}):
        cells = {c["condition"]: c for c in _cells(summary, "replacement", info, "current")}
        source, control = cells.get("source"), cells.get("source-control")
        if source is None or control is None:
            continue
        for name, key, rule, paper in CLAIMS:
            if rule is None:
                m = source["margin_change_vs_control"]
                out.append({"claim": name, "information": info, "paper": paper,
                            "estimate": estimate(m["mean"], m["ci"]), "reference": "margins",
                            "verdict": verdict_text(claims[key], quantity_margin_measurement(summary, info))})
            elif info == "unit_from_a":
                v = source[f"{rule}_vs_control"]
                measured = quantity_change_measurement(summary, info, "source", rule)
                change = f"{v['corrections']}/{v['reversals']}, {estimate(v['net'], v['net_ci'], '+.3f')}"
                out.append({"claim": name, "information": info, "paper": paper, "estimate": change,
                            "reference": f"control {control[rule]} of {control['n']}",
                            "verdict": verdict_text(claims[key], measured)})
    return out


def _claim_lines(summary: dict[str, Any]) -> list[str]:
    claims = claim_rows(summary)
    if not claims:
        return []
    lines = ["## The paper's effects at this size", "",
             f"Verdicts against the paper's reference arm, the whole-source control (replacements, current query): "
             f"{VERDICT_RULE}. Answer changes are C/R and net = (C - R) / groups [95% CI].", "",
             *table_head(["the paper's claim", "information", "paper", "ours", "reference arm", "verdict"]),
             *(table_row([c["claim"], c["information"], c["paper"], c["estimate"], c["reference"], c["verdict"]])
               for c in claims), ""]
    stops = {c["condition"]: c["stop_reasons"] for c in _cells(summary, "replacement", "unit_from_a", "current")}
    if "source" in stops and "source-control" in stops:
        lines += [f"How the answers stop (unit from A; every rule requires EOS): under the whole-source mask "
                  f"{stops['source']['eos']} end with EOS and {stops['source']['cap']} hit the token cap; under its "
                  f"control {stops['source-control']['eos']} and {stops['source-control']['cap']}. The paper counts "
                  "token-limit stops apart from wrong values.", ""]
    return lines


def _warning_lines(warn: dict[str, dict[str, Any]]) -> list[str]:
    """The warning-signal tables, one per rule (the paper's complete answers first)."""

    def auc_cell(w: dict[str, Any], key: str) -> str:
        if w[key] is None:
            return "undefined (a class is empty)"
        return f"{w[key]:.2f}" + ("" if not w[f"{key}_ci"] else f" {interval(w[f'{key}_ci'], '.2f')}")

    def means(w: dict[str, Any], name: str) -> str:
        return " / ".join("-" if w[f"mean_{name}_{c}"] is None else f"{w[f'mean_{name}_{c}']:+.2f}"
                          for c in ("lost", "kept"))

    lines = ["## Warning signal: D_c = drop of log p(current) under the source mask vs its control", "",
             f"Cases: {LABELS}. AUC: lost ranked above kept, by D_c and by the paper's variant "
             "Delta m = m(source) - m(control) (nats).", ""]
    for rule, per_info in warn.items():
        lines += [f"Rule: {RULE_NAMES.get(rule, rule)}", "",
                  *table_head(["information", "lost", "kept", "mean D_c lost / kept", "AUC of D_c [95% CI]",
                               "mean Delta m lost / kept", "AUC of Delta m [95% CI]"])]
        for info, w in per_info.items():
            lines.append(f"| {info} | {w['lost']} | {w['kept']} | {means(w, 'd_c')} | {auc_cell(w, 'auc')} | "
                         f"{means(w, 'delta_m')} | {auc_cell(w, 'auc_delta_m')} |")
        lines.append("")
    return lines


#: The paper's decomposition and loss-split numbers beside ours (eight models pooled unless said).
PAPER_DECOMPOSITION = {
    "delta_m_positive": "479 of 480 unit-dependent cases, D_c the smaller change in each (L4127-4129)",
    "spearman": "0.91-0.99 in seven models, 0.67 in Qwen3-4B (L4129-4131)",
    "lost_current_above_old": "all 198 lost cases; Delta m > 0 on every lost answer but one (L4131-4133)",
    "content": "86/95 = 90.5 % [0.83, 0.96] (L377-378, L4150-4153)",
    "stop": "1/103 = 1.0 % [0.00, 0.05] (L378, L4153-4155)",
    "kept": "115/280 = 41.1 % (L379); 120 kept answers flagged across models (L4155-4157)",
}


def _decomposition_lines(dec: dict[str, Any]) -> list[str]:
    """The candidate-probability decomposition and the loss split (paper L4085-4212), the paper's numbers
    beside ours; the Spearman verdict is the scorecard's claim ``quantity.margin-follows-old`` (``claims.py``: the
    paper found it positive) judged on the same measurement (``claims.quantity_spearman``)."""
    follows_old = next(c for c in PAPER_CLAIMS if c.key == "quantity.margin-follows-old")
    lines = ["## Candidate-probability decomposition: D_c, D_o and Delta m = D_o - D_c", "",
             "Replacements, current query, whole-source mask minus its matched control (nats): D_c = drop of log "
             "p(current answer), D_o = drop of log p(old answer). Means and Spearman with paired 95 % group-bootstrap "
             f"intervals; verdicts: {VERDICT_RULE}.", "",
             *table_head(["information", "n", "mean D_c", "mean D_o", "mean Delta m", "Delta m > 0", "D_c < D_o",
                          "Spearman(Delta m, D_o)", "verdict (paper: positive)"])]
    for info, e in dec["per_information"].items():
        rho = "-" if e["spearman_delta_m_d_o"] is None else estimate(e["spearman_delta_m_d_o"], e["spearman_ci"], ".2f")
        verdict = judge(follows_old, quantity_spearman(dec, info))
        lines.append(table_row([info, e["n"], estimate(e["mean_d_c"], e["mean_d_c_ci"]),
                                estimate(e["mean_d_o"], e["mean_d_o_ci"]),
                                estimate(e["mean_delta_m"], e["mean_delta_m_ci"]),
                                f"{e['delta_m_positive']}/{e['n']}", f"{e['d_c_smaller']}/{e['n']}", rho, verdict]))
    lines += ["", f"Paper: Delta m > 0 in {PAPER_DECOMPOSITION['delta_m_positive']}; Spearman "
                  f"{PAPER_DECOMPOSITION['spearman']}.", "",
              f"### Loss split: flagged when D_c > tau = {dec['tau']:.2f} nats (the paper's held-out tau, not refit)", "",
              "Lost answers by the first answer of the masked output (the row's first JSON answer object): content = "
              "the first answer is wrong or absent (wrong, generic or missing unit, other value, no answer object); "
              "stop = a complete first answer, then the output runs to the token cap; other = a complete first answer, "
              "EOS, yet incomplete. Exact 95 % intervals.", "",
              *table_head(["rule", "information", "lost (content / stop / other)", "content flagged", "stop flagged",
                           "kept flagged", "lost: current above old", "lost: Delta m > 0"])]
    for rule, per_info in dec["loss_split"].items():
        for info, e in per_info.items():
            lines.append(table_row([
                RULE_NAMES.get(rule, rule), info,
                f"{e['lost']} ({e['lost_content']} / {e['lost_stop']} / {e['lost_other']})",
                rate_interval(e["flagged_lost_content"], e["lost_content"], e["flagged_lost_content_ci"]),
                rate_interval(e["flagged_lost_stop"], e["lost_stop"], e["flagged_lost_stop_ci"]),
                rate_interval(e["flagged_kept"], e["kept"], e["flagged_kept_ci"]),
                f"{e['lost_current_above_old']}/{e['lost']}", f"{e['lost_delta_m_positive']}/{e['lost']}"]))
    lines += ["", f"Paper (held-out tau, eight models): content losses flagged {PAPER_DECOMPOSITION['content']}; "
                  f"stopping failures {PAPER_DECOMPOSITION['stop']}; kept answers {PAPER_DECOMPOSITION['kept']}; "
                  f"current candidate above the old under the mask in {PAPER_DECOMPOSITION['lost_current_above_old']}.",
              ""]
    return lines


def _deletion_lines(summary: dict[str, Any]) -> list[str]:
    """Deleting instead of masking the old record (paper L4526-4546): masking and each operation on the
    replacements' current query, their change from masking, margins against each one's own control."""
    head = ["## Deleting instead of masking: replacements, current query", "",
             "Masking keeps the gap left by record A; compaction deletes its rows and rotates later keys back "
             "(later states kept); recomputation prefills the history without A (later states rebuilt); rebuild "
             "recomputes the later states at the original positions. Margin change: current-minus-old candidate "
             "log-probability against the condition's own equal-token control where the run has one "
             "(`--operation-controls`), else against full access (marked). Change from masking: paired, in pp of "
             "the groups, gains/losses in brackets. The paper's column: Qwen3-32B, B refers to A's unit "
             "(L4541-4546).", ""]
    lines: list[str] = []
    for info in sorted({c["information"] for c in summary["cells"]}):
        entries = {c["condition"]: c for c in _cells(summary, "replacement", info, "current")}
        if not any(op in entries for op in DELETIONS) or "source" not in entries:
            continue
        lines += [f"{info}:", "", *table_head(["condition", "complete", "unit omitted", "lenient",
                                               "margin change [95% CI]", "complete vs masking",
                                               "lenient vs masking", "paper (Qwen3-32B, unit from A)"])]
        for cond in ("source", *DELETIONS):
            c = entries.get(cond)
            if c is None:
                continue
            own = c.get("margin_change_vs_control")
            margin = (estimate(own["mean"], own["ci"]) if own else
                      f"{estimate(c['margin_change_vs_full']['mean'], c['margin_change_vs_full']['ci'])} (vs full)"
                      if c.get("margin_change_vs_full") else "")
            changes = []
            for rule in DELETION_RULES:
                v = c.get(f"{rule}_vs_source")
                changes.append("" if v is None else f"{100 * v['net']:+.1f} {interval([100 * x for x in v['net_ci']], '+.1f')} "
                               f"({v['corrections']}/{v['reversals']})")
            lines.append(table_row([cond, f"{c['complete']}/{c['n']}", c["categories"].get("missing_unit", 0),
                                    f"{c['lenient_complete']}/{c['n']}", margin, *changes,
                                    PAPER_DELETION.get(cond, "") if info == "unit_from_a" else ""]))
        lines.append("")
    return head + lines if lines else []


def _control_lines(summary: dict[str, Any]) -> list[str]:
    """Control minus full accuracy with its L.95 for every matched control, all groups."""
    rules = ("complete", "lenient_complete")
    lines = [f"## Matched controls: accuracy minus full access, all {summary['groups']} groups", "",
             "Control minus full complete rate (pp) and its one-sided 95 % lower bound L.95 (the paper's "
             "preservation criterion: L.95 > -3 pp).", "",
             *table_head(["query", "information", "control",
                          *(f"{RULE_NAMES[r]}: control - full (pp) [L.95]" for r in rules)])]
    for c in summary["cells"]:
        if c["relation"] == "all" and c["condition"].endswith("-control"):
            cells = [f"{100 * c[f'{r}_vs_full']['net']:+.2f} [{100 * c[f'{r}_vs_full']['net_lower_one_sided']:+.2f}]"
                     for r in rules]
            lines.append(f"| {c['query']} | {c['information']} | {c['condition']} | " + " | ".join(cells) + " |")
    return lines + [""]


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """A markdown report: replacements' current query first (the paper's headline), then the warning
    signal, the matched controls, the other relations, and all groups for the historical and unrelated
    queries."""
    lines = [*heading("Quantity study", config, ITEMS),
             f"{summary['groups']} groups; paired group bootstrap, {summary['draws']} draws (seed "
             f"{summary['seed']}), 95 % percentile intervals. The paper's three rules: exact and equivalent = "
             "the answer field of one JSON object (extra fields allowed), normalized exact match or equivalent "
             "unit forms; complete = exactly one string answer field, one outer code fence allowed, equivalent "
             "unit forms. lenient = first complete quantity anywhere in the answer. Every rule requires EOS. "
             "C/R = corrections / reversals; net = (C - R) / groups. Bootstrap draws resample groups within "
             "each relation.", ""]
    if timing:
        m = timing["machine"]
        lines += [f"Run time {timing['seconds']:.0f} s ({timing['seconds'] / 60:.1f} min) for "
                  f"{timing['cases_run']} cases and {timing['rows_written']} rows (each row: one greedy answer "
                  f"and two candidate scores): {timing['seconds_per_case']:.2f} s per case, "
                  f"{timing['rows_per_second']:.2f} rows/s; {timing['cases_per_batch']} cases per batch, "
                  f"{config.get('model', {}).get('attn_implementation', '?')} attention, {m['threads']} threads "
                  f"on {m['cpus']} CPUs ({m['processor']}), {timing['invocations']} invocation(s).", ""]
    per_relation = summary.get("groups_per_relation", {})
    infos = sorted({c["information"] for c in summary["cells"]})
    for info in infos:
        head = _cells(summary, "replacement", info, "current")
        if head:
            lines += [f"## Replacements ({per_relation.get('replacement', '?')} groups), {info}, current query", ""]
            lines += small_sample_note(per_relation.get("replacement", 0), "groups")
            lines += _table(head)
            lines += failure_lines(head)
    lines += _claim_lines(summary)
    if summary.get("unit_breakdown"):
        lines += unit_lines(summary["unit_breakdown"])
    if "capped_outputs" in summary:
        lines += capped_lines(summary["capped_outputs"])
    if summary.get("warning_signal"):
        lines += _warning_lines(summary["warning_signal"])
    if summary.get("unit_cluster"):
        lines += unit_cluster_lines(summary["unit_cluster"], RULE_NAMES)
    if summary.get("candidate_decomposition"):
        lines += _decomposition_lines(summary["candidate_decomposition"])
    lines += _deletion_lines(summary)
    if any(c["condition"].endswith("-control") for c in summary["cells"]):
        lines += _control_lines(summary)
    others = [r for r in RELATION_ORDER[1:] if r in per_relation]
    if others:
        lines += ["## Other relations, current query: lenient complete answers", "",
                  "| condition | " + " | ".join(f"{r}, {i}" for i in infos for r in others) + " |",
                  "|---|" + "---|" * (len(others) * len(infos))]
        conds = [c["condition"] for c in _cells(summary, others[0], infos[0], "current")]
        for cond in conds:
            counts = []
            for info in infos:
                for r in others:
                    c = next(c for c in _cells(summary, r, info, "current") if c["condition"] == cond)
                    counts.append(f"{c['lenient_complete']}/{c['n']}")
            lines.append(f"| {cond} | " + " | ".join(counts) + " |")
        lines.append("")
    for query in QUERY_ORDER[1:]:
        for info in infos:
            entries = _cells(summary, "all", info, query)
            if entries:
                lines += [f"## All {summary['groups']} groups, {info}, {query} query", ""]
                lines += small_sample_note(summary["groups"], "groups")
                lines += _table(entries)
    lines += _no_context_lines(summary.get("no_context"))
    return "\n".join(lines) + "\n![complete answers and margin change](figure.png)\n"
