"""Summary and report of a fact-map run, recomputed from ``results.jsonl``.

Per condition, over the run's histories: the mean margin change against the A
mask, d = m(condition) - m(mask) (nats), with a 95% interval from 10,000 draws of
whole groups (quantity: a group's two information conditions together; records:
an item's variants together); and its *recovery*, the ratio of means
mean(d) / mean(m(recompute) - m(mask)), each draw's ratio giving the interval.
A ratio of means, not a mean of per-history ratios: single histories with a
near-zero recompute effect would otherwise dominate. When the recompute effect's
interval includes 0 the ratios are not interpreted (the report says so).

Tables: the target effect (recompute vs mask) and the mask's own effect (mask vs
full); the A mask restricted to the upper layers; every later piece rebuilt alone
and cumulatively; the heatmap of pieces x layer bands; the same per variant
(quantity: information condition). ``figure.png``: the recovery heatmap.

``summary.json`` is a :class:`Summary` (all histories and each variant a :class:`CaseStats`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, PAPER_SEED, group_bootstrap_weights, percentile_interval, weighted_sums
from kvprobe.studies.datasets.quantity_task.tasks import ITEMS as QUANTITY_ITEMS
from kvprobe.studies.datasets.record_histories import ITEMS as RECORD_ITEMS
from kvprobe.studies.common.report import Items, estimate, heading, run_time, small_sample_note, table_head, table_row
from kvprobe.studies.common.runner import read_rows

#: Kinds of rows, in report order.
KIND_ORDER = ("full", "mask", "mask-layers", "rebuild", "cumulative", "band", "recompute")


def _cell(d: np.ndarray, effect: np.ndarray, w: np.ndarray, ratio: bool) -> dict[str, Any]:
    """Mean change and (optionally) recovery ratio of means, with group-bootstrap intervals."""
    ok = ~np.isnan(d) & ~np.isnan(effect)
    d, effect, w = d[ok], effect[ok], w[:, ok]
    n_draws = w.sum(axis=1)
    change = weighted_sums(w, d) / n_draws
    out: dict[str, Any] = {"n": int(ok.sum()), "change": float(d.mean()), "change_ci": percentile_interval(change)}
    if ratio:
        with np.errstate(invalid="ignore", divide="ignore"):
            draws = change / (weighted_sums(w, effect) / n_draws)
        draws = draws[np.isfinite(draws)]
        out["recovered"] = float(d.mean() / effect.mean()) if effect.mean() else None
        out["recovered_ci"] = percentile_interval(draws) if draws.size else None
    return out


class CaseStats(TypedDict):
    """The statistics of one set of histories (all, or one variant)."""

    n_cases: int
    n_groups: int
    #: recompute - mask: the effect a rebuild's recovery is a share of.
    target_effect: dict[str, Any]
    mask_vs_full: dict[str, Any]
    #: Per condition (mask in the upper layers, each piece rebuilt alone, cumulatively, in one band): its kind,
    #: piece and band, its margin change against the mask, its recovery where the target effect excludes 0.
    conditions: dict[str, dict[str, Any]]
    target_effect_excludes_zero: bool


class Summary(TypedDict):
    """A fact-map run's ``summary.json``."""

    study: str
    dataset: str
    seed: int
    draws: int
    #: The later pieces in history order, the layer bands ``[lo, hi]`` and the variants.
    pieces: list[str]
    bands: list[list[int]]
    variants: list[str]
    all: CaseStats
    #: Per variant (empty with one variant).
    by_variant: dict[str, CaseStats]
    #: Recovery [pieces][bands] of all histories (None where undefined).
    heatmap: list[list[float | None]]


def _summarize_cases(cases: dict[str, dict[str, Any]], seed: int) -> CaseStats:
    """Statistics of one set of histories (all, or one variant)."""
    ids = sorted(cases)
    w = group_bootstrap_weights([cases[i]["group"] for i in ids], n_draws=DRAWS, seed=seed)
    names = list(dict.fromkeys(n for i in ids for n in cases[i]["margins"]))

    def margins(name: str) -> np.ndarray:
        return np.array([cases[i]["margins"].get(name, np.nan) for i in ids], dtype=float)

    mask = margins("mask")
    effect = margins("recompute") - mask
    target = _cell(effect, effect, w, ratio=False)
    # A recovery ratio divides by the recompute effect: with that effect's interval including 0 it is not
    # reported (docs/fidelity.md), so no ratio is computed at all.
    excludes_zero = bool(target["change_ci"][0] > 0 or target["change_ci"][1] < 0)
    out: CaseStats = {"n_cases": len(ids), "n_groups": len(set(cases[i]["group"] for i in ids)),
                           "target_effect": target,
                           "mask_vs_full": _cell(mask - margins("full"), effect, w, ratio=False),
                           "conditions": {}}
    for name in names:
        meta = cases[ids[0]]["meta"].get(name) or next(cases[i]["meta"][name] for i in ids if name in cases[i]["meta"])
        kind = meta["kind"]
        cell = _cell(margins(name) - mask, effect, w,
                     ratio=excludes_zero and kind in ("rebuild", "cumulative", "band"))
        tokens = [cases[i]["tokens"][name] for i in ids if name in cases[i]["tokens"]]
        out["conditions"][name] = {**meta, **cell, "margin": float(np.nanmean(margins(name))),
                                   "recomputed_tokens": float(np.mean(tokens)) if tokens else 0.0}
    out["target_effect_excludes_zero"] = excludes_zero
    return out


def summarize(out_dir: Path | str, seed: int = PAPER_SEED) -> Summary:
    """The summary of a run directory."""
    cases: dict[str, dict[str, Any]] = {}
    for row in read_rows(out_dir):
        c = cases.setdefault(row["case_id"], {"group": row["group"], "variant": row["variant"],
                                              "pieces": row["pieces"], "margins": {}, "meta": {}, "tokens": {}})
        c["margins"][row["condition"]] = row["margin"]
        c["meta"][row["condition"]] = {"kind": row["kind"], "piece": row["piece"], "band": row["band"]}
        c["tokens"][row["condition"]] = row["recomputed_tokens"]
    if not cases:
        raise ValueError(f"{out_dir}: no rows to summarize")
    config = json.loads((Path(out_dir) / "config.json").read_text())
    first = next(iter(cases.values()))
    pieces = sorted(first["pieces"], key=lambda label: first["pieces"][label][0])  # in history order
    bands = sorted({tuple(m["band"]) for c in cases.values() for m in c["meta"].values() if m["kind"] == "band"})
    variants = sorted({c["variant"] for c in cases.values()})
    summary: Summary = {"study": "fact-map", "dataset": config["study_config"]["dataset"], "seed": seed, "draws": DRAWS,
               "pieces": pieces, "bands": [list(b) for b in bands], "variants": variants,
               "all": _summarize_cases(cases, seed)}
    summary["by_variant"] = {v: _summarize_cases({k: c for k, c in cases.items() if c["variant"] == v}, seed)
                             for v in variants} if len(variants) > 1 else {}
    summary["heatmap"] = heatmap(summary["all"], pieces, bands)
    return summary


def heatmap(stats: dict[str, Any], pieces: list[str], bands: list[tuple[int, int]] | list[list[int]]) -> list[list]:
    """Recovery [pieces][bands] of each piece rebuilt in one band (None where undefined)."""
    conds = stats["conditions"]
    out = []
    for piece in pieces:
        row = []
        for lo, hi in bands:
            cell = conds.get(f"rebuild:{piece}@{lo}-{hi}") or {}
            row.append(cell.get("recovered"))
        out.append(row)
    return out


def _rows(stats: dict[str, Any], kinds: tuple[str, ...]) -> list[str]:
    lines = []
    for name, c in stats["conditions"].items():
        if c["kind"] not in kinds:
            continue
        rec = "" if c.get("recovered") is None else estimate(c["recovered"], c["recovered_ci"] or [np.nan] * 2)
        lines.append(table_row([name, f"{c['margin']:+.3f}", estimate(c["change"], c["change_ci"], "+.3f"), rec,
                                f"{c['recomputed_tokens']:.0f}"]))
    return lines


def _block(stats: dict[str, Any], title: str, pieces: list[str], bands: list[list[int]]) -> list[str]:
    te, mf = stats["target_effect"], stats["mask_vs_full"]
    lines = [f"## {title}", "",
             f"{stats['n_cases']} histories in {stats['n_groups']} groups. Recompute (the text without A) vs the A "
             f"mask: {estimate(te['change'], te['change_ci'], '+.3f')} nats; the A mask vs full access: "
             f"{estimate(mf['change'], mf['change_ci'], '+.3f')} nats.", ""]
    lines += small_sample_note(stats["n_groups"], "groups")
    if not stats["target_effect_excludes_zero"]:
        lines += ["The recompute effect's interval includes 0, so no recovery ratio is reported (a ratio over an "
                  "effect that may be 0 has no meaning); read the changes in nats.", ""]
    head = ["condition", "mean margin", "change vs mask [95% CI]", "recovered [95% CI]", "recomputed tokens"]
    lines += ["Pieces rebuilt alone and cumulatively (A hidden from the question in every row):", "",
              *table_head(head), *_rows(stats, ("full", "mask", "rebuild", "cumulative", "recompute")), "",
              "The A mask in the upper layers only (the question reads A in the layers below):", "",
              *table_head(head), *_rows(stats, ("mask-layers",)), ""]
    if bands and stats["target_effect_excludes_zero"]:
        grid = heatmap(stats, pieces, bands)
        lines += ["Recovery of each piece rebuilt with A hidden in one layer band only (ratio of means; point "
                  "estimates, their intervals in the table after):", "",
                  *table_head(["piece", *[f"layers {lo}-{hi}" for lo, hi in bands]]),
                  *[table_row([p, *["" if x is None else f"{x:+.2f}" for x in row]]) for p, row in zip(pieces, grid)],
                  ""]
    if bands:
        lines += ["Each piece rebuilt with A hidden in one layer band only, with 95% intervals:", "",
                  *table_head(head), *_rows(stats, ("band",)), ""]
    return lines


def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: the quantity task or the record histories."""
    return QUANTITY_ITEMS if config["study_config"]["dataset"] == "quantity" else RECORD_ITEMS


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None) -> str:
    """``report.md`` of a run."""
    pieces, bands = summary["pieces"], summary["bands"]
    lines = heading(f"Fact map ({summary['dataset']})", config, items(config))
    lines += ["Where does the old record's effect on the current answer live? m = log p(current) - log p(old) "
              "(canonical JSON candidates, nats). Every rebuild hides A from the question and recomputes the named "
              "later piece with A hidden (every other row as cached); `..X` rebuilds every piece up to X in order; "
              "`@l-h` hides A from the rebuilt piece in layers l-h only. Recovered = mean change vs mask / mean "
              "recompute effect. Intervals: 95% percentile, "
              f"{summary['draws']:,} whole-group draws, seed {summary['seed']}.", ""]
    if timing:
        lines += [run_time(timing, machine=True), ""]
    lines += _block(summary["all"], "All histories", pieces, bands)
    for variant, stats in summary["by_variant"].items():
        lines += _block(stats, f"Variant {variant}", pieces, bands)
    return "\n".join(lines).rstrip() + "\n"
