"""Tables and figures of readout evaluations (``kvprobe readout``): report.md, readouts.json, figure.png.

``rewrite_group_report(DIR)`` rewrites a committed ``report.md`` from its ``readouts.json`` (and ``scores.json``)
alone; readouts keep the evaluation's order (:data:`READOUT_ORDER`), since ``readouts.json`` is stored with sorted
keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvprobe.files import atomic_write_text

from .evaluate import AUC_CRITERION, LOO_NAME, PROBES, ROLE_VARIANTS
from .stats import mcnemar_exact

#: The order readouts are listed in (the order ``readouts.evaluate`` computes them), per table: records, then the
#: role-pair matching and replacement tables. Unknown names follow, alphabetically.
READOUT_ORDER = {
    "records": ("fixed d_V", "sign-chosen d_V", "head-chosen d_V", "surface token jaccard", "surface char distance",
                "key similarity s_K", LOO_NAME, *PROBES),
    "matching": ("key similarity s_K", "value distance d_V", "surface token jaccard", "surface char distance"),
    "replacement": ("value distance d_V", "reversed d_V", "key similarity s_K", LOO_NAME, "surface token jaccard",
                    "surface char distance"),
}


def _ordered(names, table: str) -> list[str]:
    known = READOUT_ORDER[table]
    return sorted(names, key=lambda x: (known.index(x) if x in known else len(known), x))


def _items_lines(r: dict[str, Any]) -> list[str]:
    """Where the group's cases come from (``r["items"]``, the line ``kvprobe readout`` stores from the study's
    ``studies.common.report.Items``), and a blank line; nothing when the evaluation stored none."""
    return [r["items"], ""] if r.get("items") else []


def pair_wins(case_scores: dict[str, Any], split: str = "test") -> dict[str, dict[str, int]]:
    """Within each matched item of ``split``: how often a readout scores the role swap above its own role
    confirmation (the two later records share words and length). Per readout: ``wins``, ``ties``, ``pairs``."""
    swap, confirmation = ROLE_VARIANTS
    where = {cid: i for i, (cid, sp) in enumerate(zip(case_scores["case_id"], case_scores["split"])) if sp == split}
    items = sorted(cid[:-len(swap) - 1] for cid in where if cid.endswith("-" + swap))
    items = [it for it in items if f"{it}-{confirmation}" in where]
    out = {}
    for name, values in case_scores["scores"].items():
        pairs = [(values[where[f"{it}-{swap}"]], values[where[f"{it}-{confirmation}"]]) for it in items]
        out[name] = {"wins": sum(a > b for a, b in pairs), "ties": sum(a == b for a, b in pairs), "pairs": len(pairs)}
    return out


def _pair_win_lines(case_scores: dict[str, Any] | None) -> list[str]:
    if case_scores is None:
        return ["Within-item counts (role swap above its own role confirmation) need the per-case scores "
                "(`scores.json`), which this run did not store.", ""]
    wins = pair_wins(case_scores)
    lines = ["Within matched items (the pooled AUC above also compares a swap with other items' confirmations): how "
             "often each readout scores a role swap above its own item's role confirmation; sign test = exact "
             "two-sided binomial test of wins against losses at 1/2.", "",
             "| readout | swap above its confirmation | ties | sign test p |", "|---|---|---|---|"]
    for name in _ordered(wins, "records"):
        w = wins[name]
        losses = w["pairs"] - w["wins"] - w["ties"]
        lines.append(f"| {name} | {w['wins']} of {w['pairs']} | {w['ties']} | {mcnemar_exact(w['wins'], losses):.2g} |")
    return lines + [""]


def _auc_rows(block: dict[str, Any], reference: str | None = None, table: str = "records") -> list[str]:
    lines = ["| readout | AUC | 95% CI | one-sided 95% LB |" + (f" minus {reference} [95% CI] |" if reference else ""),
             "|---|---|---|---|" + ("---|" if reference else "")]
    for name in _ordered(block["auc"], table):
        a = block["auc"][name]
        row = f"| {name} | {a['auc']:.3f} | [{a['lo']:.3f}, {a['hi']:.3f}] | {a['lower_one_sided']:.3f} |"
        if reference:
            if name == reference:
                row += " |"
            else:
                d = block["diff"][name][reference]
                row += f" {d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] |"
        lines.append(row)
    return lines


def _verdict(a: dict[str, Any], criterion: float = AUC_CRITERION) -> str:
    if a["lower_one_sided"] > criterion:
        return f"passes (lower bound {a['lower_one_sided']:.3f} > {criterion})"
    if a["lo"] > 0.5:
        return f"above chance but below the criterion (lower bound {a['lower_one_sided']:.3f})"
    if a["hi"] < 0.5:
        return f"below chance (interval [{a['lo']:.3f}, {a['hi']:.3f}])"
    return f"not distinguishable from chance (interval [{a['lo']:.3f}, {a['hi']:.3f}])"


def format_records_report(r: dict[str, Any], case_scores: dict[str, Any] | None = None) -> str:
    """report.md of a records group; ``case_scores`` (``scores.json``) adds the within-item counts."""
    role, every = r["role_auc"], r["all_test_auc"]
    n = r["n_cases"]
    best = max((k for k in role["auc"] if not k.startswith("signed LOO")), key=lambda k: role["auc"][k]["auc"])
    control = r.get("shuffled_label_control")
    lines = [
        f"# Recognition readouts: {r['model']}, synthetic record histories",
        "",
        *_items_lines(r),
        f"Store group `{r['group']}`. Probes trained on {n['train']} training cases, C and every sign or head "
        f"chosen on the {n['dev']} development cases (role swaps vs role confirmations); evaluated on "
        f"{n['test']} held-out test cases of {n['test_groups']} items with unseen entities, values and wording. "
        f"Intervals: {role['n_draws']:,} group-bootstrap draws of whole test items, paired differences on the "
        "same draws. K/V depths (layers with rows): " + ", ".join(map(str, r["depths"]["kv"])) +
        "; hidden-state depths: " + ", ".join(map(str, r["depths"]["hidden"])) + ".",
        "",
        f"## Primary: role swaps vs role confirmations ({n['test_role']} test cases)",
        "",
        "The two later records share their words and length and differ only in which value is affirmed.",
        "",
        *_auc_rows(role, "fixed d_V"),
        "",
        f"- Fixed value distance d_V: {_verdict(role['auc']['fixed d_V'])}.",
        f"- Best readout without the reference answer: {best}, {_verdict(role['auc'][best])}.",
    ]
    if control:
        c = control["role_auc"]
        lines.append(f"- Shuffled-label control (the joint K/V probe retrained on {c['permutations']} permutations "
                     f"of the training and dev labels): mean AUC {c['mean']:.3f}, 95% of permutations in "
                     f"[{c['lo']:.3f}, {c['hi']:.3f}]; a readout above {c['hi']:.3f} beats what this capacity "
                     "reaches on these cases by chance.")
    if any(k.startswith("signed LOO") for k in role["auc"]):
        lines.append("- The signed leave-one-out scores the expected answer, which the label decides (new value "
                     "after a replacement, old value otherwise); it is an oracle-informed signal, shown for "
                     "comparison with the paper, not a detector.")
    lines += ["", *_pair_win_lines(case_scores)]
    lines += [f"## Secondary: all {n['test']} test cases (6 variants; replacement, role swap and explicit "
              "rejection are positives)", "", *_auc_rows(every, "fixed d_V"), "",
              "## Choices made on the development split", "", "```", json.dumps({k: r["choices"][k] for k in _ordered(r["choices"], "records")}, indent=1), "```", "",
              "Mean test scores by variant (fixed scores):", "", "| variant | " +
              " | ".join(r["by_variant_mean"]) + " |", "|---|" + "---|" * len(r["by_variant_mean"])]
    variants = sorted(next(iter(r["by_variant_mean"].values())))
    for v in variants:
        lines.append(f"| {v} | " + " | ".join(f"{r['by_variant_mean'][k][v]:.4f}" for k in r["by_variant_mean"]) + " |")
    lines.append("")
    return "\n".join(lines)


def format_pairs_report(r: dict[str, Any]) -> str:
    m, rep = r["matching_macro_auc"], r["replacement_macro_auc"]
    n = r["n_cases"]
    lines = [
        f"# Recognition readouts: {r['model']}, role-matched pairs",
        "",
        *_items_lines(r),
        f"Store group `{r['group']}`: {n['pairs']} pairs in {n['groups']} groups, {n['matching']} matching. "
        f"Macro AUC over the five families; {m['n_draws']:,} bootstrap draws of whole groups within family; "
        f"criterion: one-sided 95% lower bound > {r['criterion_lower_bound']}.",
        "",
        "## Matching (same entity and attribute), all pairs",
        "",
        *_auc_rows(m, "surface token jaccard", "matching"),
        "",
        f"- Key similarity s_K: {_verdict(m['auc']['key similarity s_K'])}.",
        "",
        "## Replacement among matching pairs (supersedes vs duplicate: same words, roles exchanged)",
        "",
        *_auc_rows(rep, "value distance d_V", "replacement"),
        "",
        f"- Value distance d_V: {_verdict(rep['auc']['value distance d_V'])}.",
        f"- Reversed d_V (retrospective): {_verdict(rep['auc']['reversed d_V'])}.",
        "",
        "Per family (point AUCs): matching s_K "
        + ", ".join(f"{k} {v:.3f}" for k, v in r["matching_auc_by_family"].items())
        + "; replacement d_V " + ", ".join(f"{k} {v:.3f}" for k, v in r["replacement_auc_by_family"].items()) + ".",
        "",
    ]
    return "\n".join(lines)


def format_transfer(r: dict[str, Any]) -> str:
    lines = [f"# Probe transfer: {r['train_group']} -> {r['test_group']}", "",
             f"{r['feature']} probe, C = {r['C']} (chosen on the training group's dev role pairs).", "",
             "## Role swaps vs role confirmations", "", *_auc_rows(r["role_auc"], "in-checkpoint"), "",
             "## All test cases", "", *_auc_rows(r["all_test_auc"], "in-checkpoint"), ""]
    return "\n".join(lines)


#: What each edit does to B's stored rows, for the report's table (``records/edits`` actions).
EDIT_ACTION_TEXT = {"rebuilt": "recomputed at original positions, A hidden",
                    "re-rotated": "A's rows deleted, keys re-rotated by -len(A)",
                    "recomputed": "text without A prefilled again",
                    "zeroed": "rows zeroed", "kept": "unchanged (A's rows zeroed)"}


def _edit_rows(block: dict[str, Any], r: dict[str, Any], n: str) -> list[str]:
    lines = ["| operation | B's rows | AUC on original | AUC on edited [95% CI] | drop [95% CI] | n |",
             "|---|---|---|---|---|---|"]
    o = block["auc"]["original"]
    for name, edit in r["edits"].items():
        a, d = block["auc"][name], block["diff"]["original"][name]
        lines.append(f"| {name} (`{edit['condition']}`) | {EDIT_ACTION_TEXT.get(edit['action'], edit['action'])} | "
                     f"{o['auc']:.3f} [{o['lo']:.3f}, {o['hi']:.3f}] | {a['auc']:.3f} [{a['lo']:.3f}, {a['hi']:.3f}] | "
                     f"{d['diff']:+.3f} [{d['lo']:+.3f}, {d['hi']:+.3f}] | {n} |")
    return lines


def format_edit_transfer(r: dict[str, Any]) -> str:
    """report.md of :func:`readouts.evaluate.edit_transfer`: one row per cache edit, AUC drop with intervals."""
    n = r["n_cases"]
    role, every = r["role_auc"], r["all_test_auc"]
    lines = [f"# Readouts across cache edits: {r['model']}", "", *_items_lines(r),
             f"The joint K/V probe (B's pooled keys and values read after A, at the recognition depths) is trained "
             f"on the original caches of store group `{r['group']}` (C = {r['C']}, chosen on the original dev role "
             "pairs) and scores the same test cases read from edited caches (groups "
             + ", ".join(f"`{g}`" for g in r["edited_groups"].values()) + "). Drop = AUC on original minus AUC on "
             f"edited; intervals: {role['n_draws']:,} group-bootstrap draws of whole test items, every operation on "
             "the same draws (paired).", "",
             f"## Role swaps vs role confirmations ({n['test_role']} test cases, {n['test_groups']} items)", "",
             *_edit_rows(role, r, f"{n['test_role']} ({n['test_groups']} items)"), "",
             f"## All test cases ({n['test']})", "",
             *_edit_rows(every, r, f"{n['test']} ({n['test_groups']} items)"), "",
             "## How far each edit moved the probe's inputs and scores (all test cases)", "",
             "| operation | relative change of B's K/V features | correlation of probe scores with the original |",
             "|---|---|---|",
             *(f"| {name} | {c['feature_change']:.4f} | {c['score_correlation']:.4f} |"
               for name, c in r["test_change"].items()), ""]
    return "\n".join(lines)


def write_edit_report(r: dict[str, Any], out_dir: Path, items: str | None = None) -> Path:
    """edits.json and report.md of an edit transfer under ``out_dir``; ``items``: the report's line on where the
    cases come from (stored in edits.json)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    if items:
        r = {**r, "items": items}
    atomic_write_text(out_dir / "edits.json", json.dumps(r, indent=1, sort_keys=True) + "\n")
    atomic_write_text(out_dir / "report.md", format_edit_transfer(r))
    return out_dir


def plot_readouts(r: dict[str, Any], path: Path) -> Path:
    """Horizontal AUC bars with 95% intervals: the primary comparison of a records or role-pairs group."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = r.get("n_cases", {})
    panels = ([(f"role swaps vs role confirmations (test)\nn = {n.get('test_role', '?')} cases, "
                f"{n.get('test_groups', '?')} items", r["role_auc"]),
               (f"all test cases\nn = {n.get('test', '?')} cases, {n.get('test_groups', '?')} items",
                r["all_test_auc"])]
              if r["dataset"] == "records" else
              [(f"matching (all pairs)\nn = {n.get('pairs', '?')} pairs, {n.get('groups', '?')} groups",
                r["matching_macro_auc"]),
               (f"replacement (matching pairs)\nn = {n.get('matching', '?')} pairs", r["replacement_macro_auc"])])
    fig, axes = plt.subplots(1, 2, figsize=(12, 0.38 * max(len(p[1]["auc"]) for p in panels) + 1.6), sharey=False)
    for ax, (title, block) in zip(axes, panels):
        names = list(block["auc"])[::-1]
        for y, name in enumerate(names):
            a = block["auc"][name]
            color = "#999999" if name.startswith("signed LOO") else "#1f4e79"
            ax.errorbar(a["auc"], y, xerr=[[a["auc"] - a["lo"]], [a["hi"] - a["auc"]]], fmt="o", color=color,
                        capsize=3)
        ax.axvline(0.5, color="gray", lw=0.8, ls="--")
        control = r.get("shuffled_label_control", {}).get("role_auc" if "role" in title else "all_test_auc")
        if control:
            # explained in the footer line: a legend box inside the panel would hide rows near 0.5
            ax.axvspan(control["lo"], control["hi"], color="#dddddd", zorder=0)
        ax.axvline(AUC_CRITERION, color="#c0504d", lw=0.8, ls=":")
        ax.set_yticks(range(len(names)), names)
        ax.set_xlim(0, 1)
        ax.set_xlabel("AUC, 95% group-bootstrap CI")
        ax.set_title(title)
    fig.suptitle(f"{r['model']}: {r['dataset']}")
    fig.text(0.5, 0.005, "dashed: chance (0.5); dotted: 0.60 criterion; grey band: 95% of shuffled-label probes; "
             "grey point: oracle-informed signed LOO", ha="center", fontsize=8, color="#555555")
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_group_report(r: dict[str, Any], out_dir: Path, items: str | None = None) -> Path:
    """readouts.json, report.md and figure.png of one group's evaluation under ``out_dir``; ``items``: the report's
    line on where the cases come from (stored in readouts.json, so :func:`rewrite_group_report` keeps it).

    Per-case scores of the development and test cases (records only) go to ``scores.json``,
    where ``studies.common.detectors.readout_scores`` reads them as detector scores.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    r = dict(r)
    if items:
        r["items"] = items
    case_scores = r.pop("case_scores", None)
    if case_scores is not None:
        atomic_write_text(out_dir / "scores.json", json.dumps(case_scores, sort_keys=True) + "\n")
    atomic_write_text(out_dir / "readouts.json", json.dumps(r, indent=1, sort_keys=True) + "\n")
    _write_report(r, case_scores, out_dir)
    plot_readouts(r, out_dir / "figure.png")
    return out_dir


def _write_report(r: dict[str, Any], case_scores: dict[str, Any] | None, out_dir: Path) -> None:
    text = format_records_report(r, case_scores) if r["dataset"] == "records" else format_pairs_report(r)
    atomic_write_text(out_dir / "report.md", text)


def rewrite_group_report(out_dir: Path | str) -> Path:
    """Rewrite ``report.md`` of a written group (:func:`write_group_report`) from its ``readouts.json`` and, when
    present, ``scores.json``; nothing else is touched. Edit-transfer folders (``edits.json``) are rewritten from
    their ``edits.json``."""
    out_dir = Path(out_dir)
    if (out_dir / "edits.json").is_file():
        atomic_write_text(out_dir / "report.md", format_edit_transfer(json.loads((out_dir / "edits.json").read_text())))
        return out_dir
    r = json.loads((out_dir / "readouts.json").read_text())
    scores = out_dir / "scores.json"
    _write_report(r, json.loads(scores.read_text()) if scores.is_file() else None, out_dir)
    return out_dir
