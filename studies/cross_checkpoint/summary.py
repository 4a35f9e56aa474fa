"""Summary and report of a cross-checkpoint run, recomputed from ``results.jsonl`` alone (spec E8).

Per reader and query: complete answers (strict JSON, equivalent units, EOS; and
the lenient rule for small models that answer in prose) own / cross x full /
mask; cross minus own under each access and the difference in masking effects
((cross mask - cross full) - (own mask - own full)), each a paired change with a
95 % percentile interval over 10,000 bootstrap draws of base groups resampled
within relation (both support conditions of a group move together); Invalid
(cap or format failure), Changed (cross content differs from the own read,
ignoring JSON whitespace and one outer fence) and Top-1 (first generated token
equals the own read's). State similarity: per-layer K/V cosine and relative L2
means over cases, whole history and record A. If the run directory holds
``transfer.json`` (:func:`studies.cross_checkpoint.transfer.write_transfer`), the
report adds the readout-transfer table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, group_bootstrap_weights, paired_change
from kvprobe.studies.common.formatting import cap_count, pp_change, share
from kvprobe.studies.datasets.quantity_task.tasks import ITEMS
from kvprobe.studies.common.report import estimate, table_head
from kvprobe.studies.common.runner import read_rows
from .study import ACCESS, CACHES, ROLES

QUERY_ORDER = ("current", "historical", "unrelated")
RULES = ("complete", "lenient_complete")
SIMILARITY_KEYS = ("k_cos", "v_cos", "k_rel_l2", "v_rel_l2")


def _pp(change: dict[str, Any], n: int) -> dict[str, Any]:
    """A paired change in counts plus its value and interval in percentage points of ``n`` cases."""
    scale = 100.0 / n if n else float("nan")
    return {**change, "pp": change["change"] * scale, "pp_ci": [x * scale for x in change["ci"]]}


def _similarity(states: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """Means over cases of a state row's per-layer similarity block."""
    blocks = [s[key] for s in states if s.get(key)]
    if not blocks:
        return None
    layers = blocks[0]["layers"]
    out: dict[str, Any] = {"layers": layers, "cases": len(blocks)}
    for k in SIMILARITY_KEYS:
        per_layer = np.mean([b[k] for b in blocks], axis=0)
        out[k] = [float(x) for x in per_layer]
        out[f"{k}_mean"] = float(per_layer.mean())
    return out


class _SummaryKeys(TypedDict):
    draws: int
    seed: int
    cases: int
    groups: int
    groups_per_relation: dict[str, int]
    #: The checkpoint pair (main model and sibling).
    pair: dict[str, Any]
    #: Per reader and query: the arms (cache x access) and their paired changes.
    readers: dict[str, Any]
    #: Per-layer K/V similarity between the two caches.
    similarity: dict[str, Any]
    verify_max_abs_diff: float | None


class Summary(_SummaryKeys, total=False):
    """A cross-checkpoint run's ``summary.json``."""

    #: Runs with ``--transfer``: the joint K/V readout trained on the sibling's cache (``transfer.json``).
    transfer: dict[str, Any]


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> Summary:
    """Recompute the summary from the rows on disk."""
    cells: dict[tuple[str, str, str, str], dict[str, dict[str, Any]]] = defaultdict(dict)
    states: list[dict[str, Any]] = []
    group_of: dict[str, str] = {}
    relation_of: dict[str, str] = {}
    for row in read_rows(out_dir):
        if row.get("kind") == "state":
            states.append(row)
            continue
        cells[(row["reader"], row["query"], row["cache"], row["access"])][row["case_id"]] = row
        group_of[row["case_id"]], relation_of[row["case_id"]] = row["group_id"], row["relation"]
    weights_of: dict[tuple[str, ...], np.ndarray] = {}  # per set of case ids: groups resampled within relation
    summary: Summary = {"draws": draws, "seed": seed, "cases": len(group_of),
                               "groups": len(set(group_of.values())),
                               "groups_per_relation": {r: len({g for c, g in group_of.items() if relation_of[c] == r})
                                                       for r in sorted(set(relation_of.values()))},
                               "pair": {k: states[0][k] for k in ("main_model", "main_weight_hash", "sibling_model",
                                                                  "sibling_weight_hash", "sibling_recipe")}
                               if states else {},
                               "readers": {}}
    readers = [r for r in ROLES if any(k[0] == r for k in cells)]
    for reader in readers:
        per_query: dict[str, Any] = {}
        for query in [q for q in QUERY_ORDER if any(k[:2] == (reader, q) for k in cells)]:
            reads = {(c, a): cells.get((reader, query, c, a), {}) for c in CACHES for a in ACCESS}
            ids = tuple(sorted(set.intersection(*(set(v) for v in reads.values()))))
            entry: dict[str, Any] = {"n": len(ids), "arms": {}}
            for (cache, access), cell in reads.items():
                rows = [cell[i] for i in ids]
                entry["arms"][f"{cache}/{access}"] = {
                    **{rule: sum(bool(r[rule]) for r in rows) for rule in RULES},
                    "invalid": sum(bool(r["invalid"]) for r in rows),
                    "capped": cap_count(rows),
                    "changed": None if cache == "own" else sum(bool(r["changed"]) for r in rows),
                    "top1_agree": None if cache == "own" else sum(bool(r["top1_agree"]) for r in rows),
                    "first_token_checks": dict(sorted(_count(r["first_token_check"] for r in rows).items())),
                    "categories": dict(sorted(_count(r["category"] for r in rows).items())),
                }
            if ids:
                if ids not in weights_of:
                    weights_of[ids] = group_bootstrap_weights([group_of[i] for i in ids], n_draws=draws, seed=seed,
                                                              strata=[relation_of[i] for i in ids])
                w = weights_of[ids]
                for rule in RULES:
                    v = {(c, a): np.array([float(reads[(c, a)][i][rule]) for i in ids]) for c in CACHES for a in ACCESS}
                    entry[f"{rule}_cross_minus_own"] = {
                        a: _pp(paired_change(v[("cross", a)], v[("own", a)], w), len(ids)) for a in ACCESS}
                    entry[f"{rule}_mask_minus_full"] = {
                        c: _pp(paired_change(v[(c, "source")], v[(c, "full")], w), len(ids)) for c in CACHES}
                    entry[f"{rule}_masking_effect_difference"] = _pp(paired_change(
                        v[("cross", "source")] - v[("cross", "full")], v[("own", "source")] - v[("own", "full")], w),
                        len(ids))
            per_query[query] = entry
        summary["readers"][reader] = per_query
    summary["similarity"] = {"history": _similarity(states, "similarity"),
                             "record_a": _similarity(states, "similarity_record_a")}
    recurrent = [s["recurrent_similarity"] for s in states if s.get("recurrent_similarity")]
    if recurrent:
        summary["similarity"]["recurrent"] = {
            k: float(np.mean([r[k] for r in recurrent if r[k] is not None]))
            for k in ("conv_cos_mean", "recurrent_cos_mean") if any(r[k] is not None for r in recurrent)}
    verified = [d for s in states if s.get("verify_max_abs_diff") for d in s["verify_max_abs_diff"].values()]
    summary["verify_max_abs_diff"] = max(verified) if verified else None
    transfer = Path(out_dir) / "transfer.json"
    if transfer.exists():
        summary["transfer"] = json.loads(transfer.read_text())
    return summary


def _count(values) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for v in values:
        if v is not None:
            out[str(v)] += 1
    return dict(out)


# ----------------------------------------------------------------------------- report


def _pct(k: int | None, n: int) -> str:
    """``12.5 (1)``; empty for no count or no cases."""
    return "" if k is None else share(k, n, percent="", empty="")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """A markdown report: the paper's outcome table per reader, paired changes, states and transfer."""
    pair = summary.get("pair", {})
    main = pair.get("main_model", config.get("model", {}).get("name", "?"))
    sibling = pair.get("sibling_model", "?")
    names = {"main": main, "sibling": sibling}
    lines = [f"# Cross-checkpoint cache reading: {main} / {sibling}", "", ITEMS.line(), "",
             f"Sibling recipe: `{pair.get('sibling_recipe', '?')}`; weight hashes {pair.get('main_weight_hash', '?')[:12]}"
             f" / {pair.get('sibling_weight_hash', '?')[:12]}. {summary['cases']} cases ({summary['groups']} base groups x "
             "support conditions). Each reader answers from its own cache and from its sibling's (cross), with full "
             "access and with record A hidden (mask); greedy, stopping on the union of both EOS sets. Complete = "
             "strict JSON (one outer fence allowed), equivalent units, EOS; lenient = first complete quantity "
             "anywhere, EOS. Intervals: paired bootstrap over base groups within relation, "
             f"{summary['draws']} draws, 95 % percentile, in percentage points.", ""]
    if timing:
        lines += [f"Run time {timing['seconds']:.0f} s for {timing['cases_run']} cases "
                  f"({timing['seconds_per_case']:.2f} s per case).", ""]
    for rule, label in (("complete", "strict complete"), ("lenient_complete", "lenient complete")):
        lines += [f"## Outcomes, {label} (% (count), own / cross)", "",
                  *table_head(["reader", "current", "current, masked", "historical", "unrelated",
                               "Invalid (current full)", "Changed (current full)", "Top-1 (current full)"])]
        for reader, per_query in summary["readers"].items():
            def cell(query: str, access: str) -> str:
                e = per_query.get(query)
                if not e:
                    return ""
                own, cross = e["arms"][f"own/{access}"], e["arms"][f"cross/{access}"]
                return f"{_pct(own[rule], e['n'])} / {_pct(cross[rule], e['n'])}"
            cur = per_query.get("current")
            inv = chg = top = ""
            if cur:
                own, cross = cur["arms"]["own/full"], cur["arms"]["cross/full"]
                inv = f"{_pct(own['invalid'], cur['n'])} / {_pct(cross['invalid'], cur['n'])}"
                chg, top = _pct(cross["changed"], cur["n"]), _pct(cross["top1_agree"], cur["n"])
            lines.append(f"| {names.get(reader, reader)} | {cell('current', 'full')} | {cell('current', 'source')} | "
                         f"{cell('historical', 'full')} | {cell('unrelated', 'full')} | {inv} | {chg} | {top} |")
        lines.append("")
    lines += ["## Paired changes (percentage points [95% CI])", "",
              *table_head(["reader", "query", "rule", "cross - own, full", "cross - own, masked", "mask - full, own",
                           "mask - full, cross", "difference in masking effects"])]
    for reader, per_query in summary["readers"].items():
        for query, e in per_query.items():
            for rule in RULES:
                if f"{rule}_cross_minus_own" not in e:
                    continue
                cmo, mmf = e[f"{rule}_cross_minus_own"], e[f"{rule}_mask_minus_full"]
                lines.append(f"| {names.get(reader, reader)} | {query} | {rule} | {pp_change(cmo['full'])} | "
                             f"{pp_change(cmo['source'])} | {pp_change(mmf['own'])} | {pp_change(mmf['cross'])} | "
                             f"{pp_change(e[f'{rule}_masking_effect_difference'])} |")
    lines.append("")
    lines += ["## Answer changes per cell (cross reads vs the same reader's own read)", "",
              *table_head(["reader", "query", "access", "Changed", "Top-1", "Invalid own / cross",
                           "capped own / cross", "first-token checks (own)"])]
    for reader, per_query in summary["readers"].items():
        for query, e in per_query.items():
            for access in ACCESS:
                own, cross = e["arms"][f"own/{access}"], e["arms"][f"cross/{access}"]
                checks = ", ".join(f"{k} {v}" for k, v in own["first_token_checks"].items()) or "-"
                lines.append(f"| {names.get(reader, reader)} | {query} | {access} | {cross['changed']}/{e['n']} | "
                             f"{cross['top1_agree']}/{e['n']} | {own['invalid']} / {cross['invalid']} | "
                             f"{own['capped']} / {cross['capped']} | {checks} |")
    lines.append("")
    sim = summary.get("similarity", {})
    if sim.get("history"):
        lines += ["## State similarity (identical token ids; main cache is the relative-L2 reference)", "",
                  "Per token: cosine and |a - b| / |a| of the layer's cached K (after RoPE) or V, KV heads flattened; "
                  "mean over tokens, then over cases.", "",
                  *table_head(["tokens", "K cos", "V cos", "K rel-L2", "V rel-L2"])]
        for label, key in (("whole history", "history"), ("record A", "record_a")):
            s = sim.get(key)
            if s:
                lines.append(f"| {label} | {s['k_cos_mean']:.4f} | {s['v_cos_mean']:.4f} | {s['k_rel_l2_mean']:.4f} | "
                             f"{s['v_rel_l2_mean']:.4f} |")
        if sim.get("recurrent"):
            lines += ["", "Carried recurrent states (hybrid layers), cosine of the whole state: "
                      + ", ".join(f"{k.replace('_mean', '')} {v:.4f}" for k, v in sim["recurrent"].items()) + "."]
        s = sim["history"]
        lines += ["", "Per layer (whole history):", "", *table_head(["layer", "K cos", "V cos", "K rel-L2", "V rel-L2"])]
        for i, layer in enumerate(s["layers"]):
            lines.append(f"| {layer} | {s['k_cos'][i]:.4f} | {s['v_cos'][i]:.4f} | {s['k_rel_l2'][i]:.4f} | "
                         f"{s['v_rel_l2'][i]:.4f} |")
        lines.append("")
    if summary.get("verify_max_abs_diff") is not None:
        lines += [f"No-op and intervention checks (each reader's traced logits on its sibling's cache vs a plain "
                  f"transformers forward, first case of each batch): max |diff| {summary['verify_max_abs_diff']:.2e}.",
                  ""]
    if summary.get("transfer"):
        lines += format_transfer(summary["transfer"])
    return "\n".join(lines)


def format_transfer(t: dict[str, Any]) -> list[str]:
    """Report lines of a readout-transfer result (``transfer.json``)."""
    lines = ["## Readout transfer (joint K/V probe, role swaps vs role confirmations, test split)", "",
             f"Trained on {t['sibling']} (C chosen on its dev split) and tested on {t['main']}; own = trained and "
             "tested on the main model.", "", *table_head(["readout", "C", "role AUC [95% CI]", "all-test AUC"])]
    for name in ("own", "transfer", "transfer_main_dev_C"):
        r = t.get(name)
        if r:
            lines.append(f"| {name} | {r['C']:g} | {estimate(r['role_auc'], (r['role_lo'], r['role_hi']), '.3f')} | "
                         f"{r['all_test_auc']:.3f} |")
    return lines + [""]
