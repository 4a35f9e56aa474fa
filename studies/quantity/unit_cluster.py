"""The unit as the resampled level (issue 46 item 9): the headline answer changes under a unit-cluster bootstrap,
and the warning signal within unit.

The paper's intervals resample groups (each replacement group its own unit of the bootstrap); in the quantity task
every group asks for one of six units (minutes, meters, liters, volts, grams, hours), and whether a masked answer
keeps its unit can be set by the unit rather than by the group (Qwen-1.5B keeps every gram and volt answer and
loses every meter, minute and hour one). Two readouts show how much of an effect rests on that:

* **unit-cluster bootstrap**: the same paired change (source mask minus its control, and minus full access; net =
  (corrections - reversals) / groups) with an interval from draws that resample whole units with replacement
  (``readouts.stats.group_bootstrap_weights`` with the unit as the group, ``bootstrap_mean`` per draw), beside the
  group bootstrap's interval of the same cell. With six units the interval rests on six resampled units, far fewer
  than :data:`kvprobe.readouts.stats.MIN_RESAMPLED_UNITS`: it says how far the group interval leans on the units,
  not a better interval.
* **warning signal within unit**: the AUC of D_c (lost above kept answers, as ``summary.warning_signal``) taken
  within units only: the macro AUC over the units holding both lost and kept answers
  (``readouts.stats.macro_auc``; its interval from the summary's group draws, ``bootstrap_auc_draws`` with the
  units as strata, draws with an empty class in a unit dropped and counted), with each such unit's own AUC. A
  pooled AUC can be high because lost answers sit in some units and kept ones in others; the within-unit AUC asks
  whether D_c ranks answers of the same unit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from kvprobe.readouts.stats import (GroupBootstrap, auc, bootstrap_auc_draws, bootstrap_mean, group_bootstrap_weights,
                                    macro_auc, percentile_interval)
from kvprobe.studies.common.report import estimate, interval, table_head, table_row

from .diagnostics import unit_order
from .threshold import RULES as SIGNAL_RULES, SIGNAL_CONDITIONS, signal

__all__ = ["CONTRASTS", "UNIT_RULES", "unit_cluster", "unit_cluster_lines", "within_unit_auc"]

#: The paired contrasts read under both bootstraps: name -> (condition, reference), replacements, current query.
CONTRASTS = {"source_vs_control": ("source", "source-control"), "source_vs_full": ("source", "full")}
#: The rules they are read under (the paper's complete answer first, then ours).
UNIT_RULES = ("complete", "lenient_complete")


def within_unit_auc(d_c: np.ndarray, lost: np.ndarray, units: np.ndarray, groups: np.ndarray,
                    boot: GroupBootstrap) -> dict[str, Any]:
    """The macro AUC of ``d_c`` (lost above kept) over the units holding both classes, with each unit's AUC and the
    interval from ``boot``'s draws (``groups``: each case's index into ``boot.groups``); ``auc`` None when no unit
    holds both classes.

    Example: units a (lost 3, 1; kept 2) and b (lost only): only a counts, its AUC 0.5 (3 > 2, 1 < 2).
    """
    per_unit = []
    for unit in unit_order(set(units.tolist())):
        mine = units == unit
        n_lost, n_kept = int((lost & mine).sum()), int((~lost & mine).sum())
        per_unit.append({"unit": unit, "lost": n_lost, "kept": n_kept,
                         "auc": auc(d_c[mine], lost[mine]) if n_lost and n_kept else None})
    mixed = [u["unit"] for u in per_unit if u["auc"] is not None]
    out: dict[str, Any] = {"units_with_both": mixed, "per_unit": per_unit, "auc": None, "auc_ci": None,
                           "draws_kept": 0}
    if not mixed:
        return out
    cases = np.isin(units, mixed)
    out["auc"] = macro_auc(d_c[cases], lost[cases], units[cases])
    draws = bootstrap_auc_draws({"d_c": d_c[cases]}, lost[cases],
                                GroupBootstrap(boot.groups, groups[cases], boot.draws), strata=units[cases])["d_c"]
    kept = ~np.isnan(draws)
    out["draws_kept"] = int(kept.sum())
    out["auc_ci"] = percentile_interval(draws[kept], points="alpha") if kept.any() else None
    return out


def unit_cluster(cells, order: list[str], boot: GroupBootstrap, seed: int, draws: int,
                 summary_cells: list[dict[str, Any]]) -> dict[str, Any]:
    """Per information condition (replacements, current query): the units, the :data:`CONTRASTS` under each of
    :data:`UNIT_RULES` with the unit-cluster interval beside the group interval (read from ``summary_cells``, the
    summary's cells), and the warning signal within unit (:func:`within_unit_auc`) under each rule of the warning
    signal. ``cells``: (information, query, condition) -> group -> row, as ``summary.summarize`` collects them;
    ``boot``: its group draws; ``seed``, ``draws``: the unit-cluster draws' (a fresh generator from the summary's
    seed: the group draws are not disturbed)."""
    index = {g: i for i, g in enumerate(order)}
    out: dict[str, Any] = {"level": "unit", "draws": draws, "seed": seed, "per_information": {}}
    for info in sorted({k[0] for k in cells}):
        rows = {c: cells.get((info, "current", c), {}) for c in SIGNAL_CONDITIONS}
        groups = [g for g in order if all(g in rows[c] and rows[c][g]["relation"] == "replacement" for c in rows)]
        if not groups:
            continue
        units = np.array([rows["source"][g]["unit"] for g in groups])
        weights = group_bootstrap_weights(units, n_draws=draws, seed=seed)
        entry: dict[str, Any] = {"n": len(groups), "units": len(set(units.tolist())), "rules": {}}
        for rule in UNIT_RULES:
            entry["rules"][rule] = {}
            for name, (condition, reference) in CONTRASTS.items():
                mine = np.array([float(bool(rows[condition][g][rule])) for g in groups])
                base = np.array([float(bool(rows[reference][g][rule])) for g in groups])
                net = mine - base
                cell = next(c for c in summary_cells if (c["relation"], c["information"], c["query"],
                                                         c["condition"]) == ("replacement", info, "current", condition))
                group = cell[f"{rule}_vs_control" if reference != "full" else f"{rule}_vs_full"]
                entry["rules"][rule][name] = {"net": float(net.mean()),
                                              "unit_ci": percentile_interval(bootstrap_mean(net, weights),
                                                                             points="alpha"),
                                              "group_ci": group["net_ci"]}
        entry["warning_within_unit"] = {}
        for rule in SIGNAL_RULES:
            found = [(index[g], rows["source"][g]["unit"], signal(*(rows[c][g] for c in SIGNAL_CONDITIONS), rule))
                     for g in groups]
            found = [(i, u, s) for i, u, s in found if s is not None]
            entry["warning_within_unit"][rule] = within_unit_auc(
                np.array([s[0] for _, _, s in found]), np.array([s[2] for _, _, s in found], dtype=bool),
                np.array([u for _, u, _ in found]), np.array([i for i, _, _ in found], dtype=np.intp), boot)
        out["per_information"][info] = entry
    return out


def unit_cluster_lines(uc: dict[str, Any], rule_names: dict[str, str]) -> list[str]:
    """The report section: each contrast's net change with the group and the unit-cluster intervals side by side,
    then the warning signal within unit, per rule (``rule_names``: the report's rule labels)."""
    per_info = uc.get("per_information") or {}
    if not per_info:
        return []
    lines = ["## Units as the resampled level: replacements, current query", "",
             f"The same paired changes (net = (C - R) / groups) with two intervals: the group bootstrap above "
             f"(each group resampled) and a unit-cluster bootstrap ({uc['draws']} draws, seed {uc['seed']}) that "
             "resamples whole units (minutes, meters, ...) with replacement; few units, so the unit interval shows how "
             "far the group interval leans on the units rather than replacing it. Warning signal within unit: the "
             "macro AUC of D_c over the units holding both lost and kept answers (each unit's own AUC beside), its "
             "interval from the group draws with the units as strata.", "",
             *table_head(["information", "rule", "contrast", "groups", "units", "net [group 95% CI]",
                          "net [unit-cluster 95% CI]"])]
    for info, e in per_info.items():
        for rule, contrasts in e["rules"].items():
            for name, c in contrasts.items():
                lines.append(table_row([info, rule_names.get(rule, rule), name.replace("_", " "), e["n"], e["units"],
                                        estimate(c["net"], c["group_ci"], "+.3f"),
                                        estimate(c["net"], c["unit_ci"], "+.3f")]))
    lines += ["", *table_head(["information", "rule", "units with lost and kept answers",
                               "AUC of D_c within unit [95% CI]", "draws kept"])]
    for info, e in per_info.items():
        for rule, w in e["warning_within_unit"].items():
            mixed = ", ".join(f"{u['unit']} ({u['lost']} lost, {u['kept']} kept: {u['auc']:.2f})"
                              for u in w["per_unit"] if u["auc"] is not None) or "none"
            value = ("undefined (no unit holds both classes)" if w["auc"] is None else
                     f"{w['auc']:.2f}" + (f" {interval(w['auc_ci'], '.2f')}" if w["auc_ci"] else ""))
            lines.append(table_row([info, rule_names.get(rule, rule), mixed, value, w["draws_kept"]]))
    return lines + [""]
