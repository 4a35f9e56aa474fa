"""Summary and report of a component-study run, recomputed from ``results.jsonl`` alone
(paper appendix "Component Interventions and Accuracy Preservation", L5694-5760; spec
partD section 7).

Component effect, for c in K, V, K+V and the Q-K mask (positive control), per cluster::

    d_s   = [m(c at old) - m(none)] - [m(c at matched) - m(none)]     (target query, state s)
    Delta = d_SUPERSEDED - d_CURRENT

(the ``m(none)`` terms cancel algebraically; they are kept to follow the paper's wording),
m = logp(expected) - logp(alternative). Delta_c is the mean over clusters; intervals come
from ``draws`` bootstrap resamples of whole clusters (``readouts.stats.group_bootstrap_weights``),
percentile method (``points="alpha"``). K, V and K+V get Bonferroni intervals for 3 comparisons (two-sided
1 - 0.05/3, i.e. the 0.83 and 99.17 percentiles) and pointwise 95 % ones; the Q-K control and
Delta_V - Delta_K (paired, same draws) get pointwise 95 % intervals (UNCLEAR: the paper's
"separately specified two-sided interval" for V - K is not specified further).

Accuracy preservation, per component: accuracy (the expected option scored strictly
higher) at the old span minus at the matched span, (i) on CURRENT-state target queries,
(ii) on unrelated queries (per cluster, the mean over both states). A component passes iff
both lower bounds are >= -0.03. The paper is inconsistent about which bound: its
4-model table uses Bonferroni-adjusted bounds, its 9-model table paired 95 % intervals;
both verdicts are reported.

Clusters missing a state, a query or a condition (an interrupted run, or a model that
refuses K- or V-only zeroing) are left out of the components they lack.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import ALPHA, DRAWS, bootstrap_mean, group_bootstrap_weights, percentile_interval
from kvprobe.studies.common.report import Items, estimate, heading, interval, run_time, table_head
from kvprobe.studies.common.runner import read_rows
from .data import FAMILIES, QUERIES, STATES
from .study import CONDITIONS

#: Comparisons of the Bonferroni correction (K, V, K+V within one model).
BONFERRONI = 3
#: Accuracy-preservation threshold on the lower bounds (paper L5712).
THRESHOLD = -0.03
#: Report label -> condition component.
COMPONENTS = {"K": "k", "V": "v", "K+V": "kv", "QK": "qk"}
TESTED = ("K", "V", "K+V")


def _condition(component: str, span: str) -> str:
    return f"mask-{span}" if component == "qk" else f"zero-{component}-{span}"


def _cluster_means(values: dict[str, float], draws: int, seed: int) -> tuple[float, np.ndarray]:
    """Mean over clusters and its per-draw means (whole clusters resampled)."""
    keys = sorted(values)
    x = np.array([values[k] for k in keys], dtype=np.float64)
    weights = group_bootstrap_weights(keys, n_draws=draws, seed=seed)  # [draws, n]
    return float(x.mean()), bootstrap_mean(x, weights)


class Summary(TypedDict):
    """A components run's ``summary.json`` (:func:`summarize_rows`)."""

    effects: dict[str, Any]
    v_minus_k: dict[str, Any]
    accuracy: dict[str, Any]
    cells: list[dict[str, Any]]
    families: list[str]
    clusters: int
    rows: int
    draws: int
    seed: int
    #: The interval's alpha and the comparisons a Bonferroni interval splits it over.
    alpha: float
    bonferroni_comparisons: int
    #: The accuracy-preservation threshold on the lower bounds (paper L5712).
    threshold: float


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> Summary:
    """Component effects, accuracy preservation and per-cell accuracy of a run directory."""
    by: dict[tuple[str, str, str, str], dict] = {}
    families: dict[str, str] = {}
    for r in read_rows(out_dir):
        by[(r["cluster_id"], r["state"], r["query"], r["condition"])] = r
        families[r["cluster_id"]] = r["family"]
    return summarize_rows(by, families, seed=seed, draws=draws)


def summarize_rows(by: dict[tuple[str, str, str, str], dict], families: dict[str, str], seed: int = 0,
                   draws: int = DRAWS) -> Summary:
    """:func:`summarize` on rows keyed by (cluster_id, state, query, condition)."""
    clusters = sorted(families)

    def margin(c: str, s: str, q: str, cond: str) -> float:
        return by[(c, s, q, cond)]["margin"]

    def correct(c: str, s: str, q: str, cond: str) -> float:
        return float(by[(c, s, q, cond)]["correct"])

    def has(c: str, query: str, states: tuple[str, ...], conditions: tuple[str, ...]) -> bool:
        return all((c, s, query, cond) in by for s in states for cond in conditions)

    effects: dict[str, Any] = {}
    per_cluster: dict[str, dict[str, float]] = {}
    draws_of: dict[str, np.ndarray] = {}
    for label, comp in COMPONENTS.items():
        old, matched = _condition(comp, "old"), _condition(comp, "matched")
        values = {}
        for c in clusters:
            if not has(c, "target", STATES, ("none", old, matched)):
                continue
            d = {s: (margin(c, s, "target", old) - margin(c, s, "target", "none"))
                 - (margin(c, s, "target", matched) - margin(c, s, "target", "none")) for s in STATES}
            values[c] = d["superseded"] - d["current"]
        if not values:
            continue
        mean, boot = _cluster_means(values, draws, seed)
        per_cluster[label], draws_of[label] = values, boot
        cell = {"delta": mean, "n_clusters": len(values), "ci_95": percentile_interval(boot, ALPHA, "alpha")}
        if label in TESTED:
            cell["ci_bonferroni"] = percentile_interval(boot, ALPHA / BONFERRONI, "alpha")
        bound = cell.get("ci_bonferroni", cell["ci_95"])
        cell["excludes_zero"] = bound[0] > 0 or bound[1] < 0
        effects[label] = cell
    v_minus_k = None
    if "V" in per_cluster and "K" in per_cluster:
        common = sorted(set(per_cluster["V"]) & set(per_cluster["K"]))
        diff = {c: per_cluster["V"][c] - per_cluster["K"][c] for c in common}
        mean, boot = _cluster_means(diff, draws, seed)
        v_minus_k = {"delta": mean, "n_clusters": len(diff), "ci_95": percentile_interval(boot, ALPHA, "alpha")}

    accuracy: dict[str, Any] = {}
    for label, comp in COMPONENTS.items():
        old, matched = _condition(comp, "old"), _condition(comp, "matched")
        target = {c: correct(c, "current", "target", old) - correct(c, "current", "target", matched)
                  for c in clusters if has(c, "target", ("current",), (old, matched))}
        unrelated = {c: float(np.mean([correct(c, s, "unrelated", old) - correct(c, s, "unrelated", matched)
                                       for s in STATES]))
                     for c in clusters if has(c, "unrelated", STATES, (old, matched))}
        if not target or not unrelated:
            continue
        cell: dict[str, Any] = {}
        for name, values in (("target_current", target), ("unrelated", unrelated)):
            mean, boot = _cluster_means(values, draws, seed)
            ci95 = percentile_interval(boot, ALPHA, "alpha")
            cib = percentile_interval(boot, ALPHA / BONFERRONI, "alpha")
            cell[name] = {"change": mean, "n_clusters": len(values), "ci_95": ci95, "ci_bonferroni": cib,
                          "lower_95": ci95[0], "lower_bonferroni": cib[0]}
        cell["passes_bonferroni"] = all(cell[k]["lower_bonferroni"] >= THRESHOLD for k in ("target_current",
                                                                                           "unrelated"))
        cell["passes_95"] = all(cell[k]["lower_95"] >= THRESHOLD for k in ("target_current", "unrelated"))
        cell["tested"] = label in TESTED
        accuracy[label] = cell

    cells = []
    for s in STATES:
        for q in QUERIES:
            for cond in CONDITIONS:
                rows = [by[(c, s, q, cond)] for c in clusters if (c, s, q, cond) in by]
                if rows:
                    cells.append({"state": s, "query": q, "condition": cond, "n": len(rows),
                                  "accuracy": float(np.mean([r["correct"] for r in rows])),
                                  "mean_margin": float(np.mean([r["margin"] for r in rows]))})
    by_family = []
    for fam in [f for f in FAMILIES if f in families.values()]:
        entry: dict[str, Any] = {"family": fam}
        for label, values in per_cluster.items():
            mine = [v for c, v in values.items() if families[c] == fam]
            entry[label] = float(np.mean(mine)) if mine else None
            entry["n_clusters"] = max(entry.get("n_clusters", 0), len(mine))
        by_family.append(entry)
    return {"effects": effects, "v_minus_k": v_minus_k, "accuracy": accuracy, "cells": cells,
            "families": by_family, "clusters": len(clusters), "rows": len(by), "draws": draws, "seed": seed,
            "alpha": ALPHA, "bonferroni_comparisons": BONFERRONI, "threshold": THRESHOLD}


#: Where this study's items come from (the report's Items line).
ITEMS = Items("reconstruction", "controlled history clusters in the paper's five update families; our cluster texts")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """report.md of a run: effects, accuracy preservation, per-cell accuracy and margins."""
    study = config.get("study_config", {})
    budget = study.get("budget")
    lines = [*heading("Component interventions", config, ITEMS),
             f"{summary['clusters']} controlled history clusters ({study.get('n_per_family')} per family x "
             f"{len(study.get('families', []))} families), 2 states x 2 queries x {len(CONDITIONS)} conditions = "
             f"{summary['rows']:,} rows. Raw prompt `History:\\n ... \\nQuestion:\\n ... \\nReasoning:\\n`, "
             f"exactly {budget} greedy tokens without EOS stopping, `\\nAnswer:\\n`, both options scored by "
             "summed log-probability (nats). Zeroing: all layers, all heads, on the condition's cache copy "
             "before the question and continuation. Matched span: as many tokens from the start of the "
             f"neutral note. Intervals: {summary['draws']:,} bootstrap draws of whole clusters (seed "
             f"{summary['seed']}), percentile.", ""]
    if timing:
        per_case = f" ({timing['seconds_per_case']:.2f} s per case of {len(CONDITIONS) * 2} rows)"
        lines += [run_time(timing, detail=per_case), ""]
    lines += ["## Component effects", "",
              "Delta_c = [(margin change under c at the old span) - (change at the matched span)] on "
              "SUPERSEDED minus the same on CURRENT, target queries, mean over clusters (nats). K, V and K+V: "
              f"Bonferroni interval for {summary['bonferroni_comparisons']} comparisons (two-sided "
              f"{1 - summary['alpha'] / summary['bonferroni_comparisons']:.4f}); the Q-K mask (positive control) and "
              "V - K: pointwise 95 %.", "",
              *table_head(["component", "Delta (nats)", "Bonferroni interval", "pointwise 95 %", "excludes 0",
                           "clusters"])]
    names = {"K": "zero K", "V": "zero V", "K+V": "zero K+V", "QK": "Q-K mask (positive control)"}
    for label, e in summary["effects"].items():
        lines.append(f"| {names[label]} | {e['delta']:+.3f} | {interval(e.get('ci_bonferroni'), '+.3f') or 'n/a'} | "
                     f"{interval(e['ci_95'], '+.3f')} | {'yes' if e['excludes_zero'] else 'no'} | {e['n_clusters']} |")
    vk = summary.get("v_minus_k")
    if vk:
        excl = vk["ci_95"][0] > 0 or vk["ci_95"][1] < 0
        lines.append(f"| Delta_V - Delta_K (paired) | {vk['delta']:+.3f} | n/a | {interval(vk['ci_95'], '+.3f')} | "
                     f"{'yes' if excl else 'no'} | {vk['n_clusters']} |")
    lines += ["", "## Accuracy preservation", "",
              "Accuracy change, old span minus matched span, under the same component: (i) CURRENT-state target "
              "queries, (ii) unrelated queries (both states). A component passes iff both lower bounds are "
              f">= {summary['threshold']}. **The paper is inconsistent here**: its 4-model table uses "
              "Bonferroni-adjusted bounds, its 9-model table paired 95 % intervals; both verdicts are shown.", "",
              *table_head(["component", "target CURRENT: change [Bonferroni]", "unrelated: change [Bonferroni]",
                           "passes (Bonferroni)", "lower bounds 95 %: target / unrelated", "passes (95 %)"])]
    for label, a in summary["accuracy"].items():
        t, u = a["target_current"], a["unrelated"]
        verdict = (lambda ok: "yes" if ok else "no") if a["tested"] else (lambda ok: f"({'yes' if ok else 'no'})")
        lines.append(f"| {names[label]} | {estimate(t['change'], t['ci_bonferroni'], '+.3f')} | "
                     f"{estimate(u['change'], u['ci_bonferroni'], '+.3f')} | {verdict(a['passes_bonferroni'])} | "
                     f"{t['lower_95']:+.3f} / {u['lower_95']:+.3f} | {verdict(a['passes_95'])} |")
    lines += ["", "(Verdicts in parentheses: the Q-K mask is the positive control, not a tested edit.)", "",
              "## Accuracy and mean margin per cell", "",
              *table_head(["condition", "acc. CURRENT target", "acc. SUPERSEDED target", "acc. unrelated (CUR / SUP)",
                           "margin CURRENT target", "margin SUPERSEDED target", "margin unrelated (CUR / SUP)"])]
    cell = {(c["state"], c["query"], c["condition"]): c for c in summary["cells"]}

    def get(s: str, q: str, cond: str, key: str, fmt: str) -> str:
        c = cell.get((s, q, cond))
        return format(c[key], fmt) if c else "-"

    for cond in CONDITIONS:
        if not any(k[2] == cond for k in cell):
            continue
        lines.append(
            f"| {cond} | {get('current', 'target', cond, 'accuracy', '.3f')} | "
            f"{get('superseded', 'target', cond, 'accuracy', '.3f')} | "
            f"{get('current', 'unrelated', cond, 'accuracy', '.3f')} / "
            f"{get('superseded', 'unrelated', cond, 'accuracy', '.3f')} | "
            f"{get('current', 'target', cond, 'mean_margin', '+.2f')} | "
            f"{get('superseded', 'target', cond, 'mean_margin', '+.2f')} | "
            f"{get('current', 'unrelated', cond, 'mean_margin', '+.2f')} / "
            f"{get('superseded', 'unrelated', cond, 'mean_margin', '+.2f')} |")
    if summary["families"]:
        labels = list(summary["effects"])
        lines += ["", "## Delta by family (point estimates, nats)", "",
                  *table_head(["family", "clusters", *(f"Delta {names[k]}" for k in labels)])]
        for f in summary["families"]:
            vals = " | ".join("-" if f.get(k) is None else f"{f[k]:+.2f}" for k in labels)
            lines.append(f"| {f['family']} | {f['n_clusters']} | {vals} |")
    lines += ["", "Paper anchors (3B-8B models, budget not stated): Delta_K / Delta_V / Delta_K+V between 0.91 and "
              "3.18 nats, Q-K control 1.98-2.47; only Qwen3-8B V meets the accuracy criterion (-0.025 / 0.000).",
              ""]
    return "\n".join(lines)
