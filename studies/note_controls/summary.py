"""Summary and report of a note-control run, recomputed from ``results.jsonl``.

The unit is an information condition of a group (the paper's 240 conditions); every interval
resamples the groups (both information conditions and all configurations of a drawn group
together: seed L3829-3830), 10,000 draws with the paper's seed 20260919 by default, the same
draws for every comparison. Per configuration: correct labels (count and %), the paired change
against full access in points with corrections / reversals, the change against the full access
of its own profile and question, the mean first-value margin and its change. Then the paper's
comparisons: far minus near, the gray->plain interaction, the early-mask loss under the repeated
and the varied note, and how often the margin's sign disagrees with the greedy answer. The
paper's Llama-3.2-3B numbers stand beside ours (:mod:`.anchors`).

``summary.json`` is a :class:`Summary`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, PAPER_SEED, bootstrap_mean, group_bootstrap_weights, paired_change, \
    percentile_interval
from kvprobe.studies.common.formatting import cap_count, count_share, pp_change
from kvprobe.studies.common.claims import TOLERANCE, Claim, verdict_text
from kvprobe.studies.common.report import NO_CHANGE_RULE, VERDICT_RULE, Items, corrections_reversals, estimate, heading, \
    interval, run_time, small_sample_note, table_head, table_row
from kvprobe.studies.datasets.quantity_task.tasks import ITEMS as TASK
from kvprobe.studies.common.runner import read_rows

from . import anchors
from .claims import CLAIMS as PAPER_CLAIMS
from .claims import REPORT_CLAIMS, note_change, note_change_measurement, note_margin_measurement
from .configurations import CATALOG, CONFIGURATIONS, CURRENT

Unit = tuple[str, str]
#: The row columns of the two answer rules: the paper's (strict single answer field equal to the label, EOS)
#: and the lenient one (``grading.grade_label``: the first answer field, or else the label as a whole word).
RULES = {"label_correct": "paper rule", "lenient_correct": "lenient"}


class PointsChange(TypedDict):
    """:func:`_paired`: a paired change (``readouts.stats.paired_change``) over the ``n`` units both conditions
    answered, and the change and its interval in points of those units."""

    change: int | float
    corrections: int
    reversals: int
    ci: list[float]
    n: int
    pp: float
    pp_ci: list[float]


class Mean(TypedDict):
    """:func:`_mean`: the mean of the present values and its bootstrap percentile interval."""

    mean: float
    ci: list[float]


class Disagreement(TypedDict):
    """:func:`_disagreement`: outputs whose first-value margin's sign disagrees with the answer's correctness
    (nonzero margins), zero margins and the correct ones among them, the disagreeing margins' range."""

    outputs: int
    nonzero_disagreements: int
    zero_ties: int
    zero_ties_correct: int
    nonzero_range: list[float] | None


class _ConfigurationKeys(TypedDict):
    configuration: str
    profile: str
    question: str
    access: str
    reference: str
    n: int
    categories: dict[str, int]
    capped: int
    #: The fewest and the most masked tokens over the units.
    masked_tokens: list[int]
    margin: Mean | None
    #: Per rule (:data:`RULES`): correct answers, the changes against full access and against the configuration's
    #: reference (None where no unit answered in both), the margin's disagreement with correctness.
    correct: dict[str, int]
    vs_full: dict[str, PointsChange | None]
    vs_reference: dict[str, PointsChange | None]
    disagreement: dict[str, Disagreement]


class ConfigurationCell(_ConfigurationKeys, total=False):
    """One configuration (:data:`.configurations.CATALOG`) over the units."""

    #: Configurations other than full (and than their reference): the first-value margin's change.
    margin_vs_full: Mean | None
    margin_vs_reference: Mean | None


class EffectRule(TypedDict):
    """One rule's change for a paper effect, the reference configuration's (correct, n) and the verdict."""

    ci: list[float]
    pp: float
    reference: list[int] | None
    verdict: str


class EffectMargin(TypedDict):
    ci: list[float]
    verdict: str


class _EffectKeys(TypedDict):
    effect: str
    paper: str
    sign: int
    reference: str | None


class Effect(_EffectKeys, total=False):
    """One of the paper's effects (:data:`EFFECTS`): per rule where the run has its change, or (the margin effect)
    the first-value margin's change."""

    rules: dict[str, EffectRule]
    margin: EffectMargin


class RuleEffects(TypedDict, total=False):
    """Per rule: near - far (runs with both notes), the plain-note interaction, the note profiles and the margin's
    disagreement over every label row."""

    near_far: PointsChange | None
    plain_interaction: PointsChange | None
    note_profiles: dict[str, Any]
    disagreement: Disagreement


def _paired(condition: np.ndarray, ref: np.ndarray, weights: np.ndarray) -> PointsChange | None:
    """:func:`paired_change` of the units both conditions answered, with the change in points of those units."""
    both = ~np.isnan(condition) & ~np.isnan(ref)
    n = int(both.sum())
    if n == 0:
        return None
    out = paired_change(condition[both], ref[both], weights[:, both])
    out["n"], out["pp"], out["pp_ci"] = n, 100 * out["change"] / n, [100 * x / n for x in out["ci"]]
    return out


def _mean(values: np.ndarray, weights: np.ndarray) -> Mean | None:
    """Mean of the present values with its bootstrap percentile interval (None when none is present)."""
    if np.isnan(values).all():
        return None
    return {"mean": float(np.nanmean(values)), "ci": percentile_interval(bootstrap_mean(values, weights))}


def _disagreement(margins: np.ndarray, correct: np.ndarray) -> Disagreement:
    """How the first-value margin's sign disagrees with the greedy answer's correctness."""
    ok = ~np.isnan(margins) & ~np.isnan(correct)
    m, c = margins[ok], correct[ok].astype(bool)
    nonzero = ((m > 0) & ~c) | ((m < 0) & c)
    ties = m == 0
    return {"outputs": int(ok.sum()), "nonzero_disagreements": int(nonzero.sum()), "zero_ties": int(ties.sum()),
            "zero_ties_correct": int((ties & c).sum()),
            "nonzero_range": [float(m[nonzero].min()), float(m[nonzero].max())] if nonzero.any() else None}


class _Cells:
    """The label rows of a run as vectors over the units (NaN where a configuration has no row)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = {(r["group_id"], r["information"], r["configuration"]): r for r in rows}
        self.units: list[Unit] = sorted({(r["group_id"], r["information"]) for r in rows})
        self.configs = [c.name for c in CONFIGURATIONS if any(r["configuration"] == c.name for r in rows)]

    def vector(self, config: str, key: str) -> np.ndarray:
        out = np.full(len(self.units), np.nan)
        for i, (g, info) in enumerate(self.units):
            row = self.rows.get((g, info, config))
            if row is not None and row[key] is not None:
                out[i] = float(row[key])
        return out

    def has(self, *configs: str) -> bool:
        return all(c in self.configs for c in configs)


def _configuration(cells: _Cells, name: str, weights: np.ndarray) -> ConfigurationCell:
    config = CATALOG[name]
    rows = [r for (_, _, c), r in cells.rows.items() if c == name]
    margin = cells.vector(name, "first_token_margin")
    masked = [r["n_masked"] for r in rows]
    entry: dict[str, Any] = {
        "configuration": name, "profile": config.profile, "question": config.question, "access": config.access,
        "reference": config.reference, "n": len(rows), "categories": dict(Counter(r["category"] for r in rows)),
        "capped": cap_count(rows), "masked_tokens": [min(masked), max(masked)],
        "margin": _mean(margin, weights), "correct": {}, "vs_full": {}, "vs_reference": {}, "disagreement": {},
    }
    bases = {"full": "full", "reference": config.reference}
    for rule in RULES:
        correct = cells.vector(name, rule)
        entry["correct"][rule] = int(np.nansum(correct))
        entry["disagreement"][rule] = _disagreement(margin, correct)
        for label, base in bases.items():
            if name != base and cells.has(base) and (label == "full" or base != "full"):
                entry[f"vs_{label}"][rule] = _paired(correct, cells.vector(base, rule), weights)
    for label, base in bases.items():
        if name != base and cells.has(base) and (label == "full" or base != "full"):
            entry[f"margin_vs_{label}"] = _mean(margin - cells.vector(base, "first_token_margin"), weights)
    return entry


def _interaction(cells: _Cells, pair: tuple[str, str], ref: tuple[str, str], weights: np.ndarray, rule: str
                 ) -> PointsChange | None:
    """Change of (pair[1] - pair[0]) against (ref[1] - ref[0]) per unit, in points (two condition pairs)."""
    if not cells.has(*pair, *ref):
        return None
    v = {c: cells.vector(c, rule) for c in (*pair, *ref)}
    return _paired(v[pair[1]] - v[pair[0]], v[ref[1]] - v[ref[0]], weights)


def _note_profiles(cells: _Cells, weights: np.ndarray, rule: str) -> dict[str, Any]:
    """tab:v41_note_controls: the five cells, the early-mask loss and the preserve-first-four gain per note."""
    out: dict[str, Any] = {}
    for profile, prefix in (("repeated", ""), ("varied", "varied-")):
        names = {a: prefix + a for a in ("full", "early", "preserve-first-four", "first-four", "last-four")}
        if not cells.has(names["full"], names["early"]):
            continue
        v = {a: cells.vector(n, rule) for a, n in names.items() if cells.has(n)}
        out[profile] = {"counts": {a: int(np.nansum(x)) for a, x in v.items()},
                        "loss": _paired(v["early"], v["full"], weights),
                        "preserve": (_paired(v["preserve-first-four"], v["early"], weights)
                                     if "preserve-first-four" in v else None)}
    if len(out) == 2:
        out["loss_difference"] = _interaction(cells, ("varied-full", "varied-early"), ("full", "early"), weights,
                                              rule)
    return out


def _current(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Complete current answers per current configuration (unit-dependent replacement cases)."""
    out = {}
    for c in CURRENT:
        mine = [r for r in rows if r["configuration"] == c.name]
        if mine:
            out[c.name] = {"n": len(mine), "complete": sum(bool(r["quantity_complete"]) for r in mine),
                           "categories": dict(Counter(r["category"] for r in mine))}
    return out


def _profiles(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per profile: the note's and the history's token counts and the shift against the original history."""
    by: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by[r["profile"]].append(r)
    return {p: {"note_tokens": sorted({r["note_tokens"] for r in rs}),
                "history_tokens": [min(r["history_tokens"] for r in rs), max(r["history_tokens"] for r in rs)],
                "position_shift": sorted({r["position_shift"] for r in rs}),
                "a_tokens": sorted({r["a_tokens"] for r in rs})} for p, rs in by.items()}


#: The paper's effects (:func:`_effects`): name, the paper's number, where our change is
#: (``claims.note_change``), the claim of ``claims.py`` that judges it, and the configuration that must answer for
#: the effect to show (the paper's reference arm: full access of the effect's note and question).
EFFECTS = (
    ("early-note control loses correct labels (early - full)", "-57.5 pp", ("early", "vs_full"),
     "note-controls.early", "full"),
    ("the occurrence matters (far - near)", "+57.5 pp [49.58, 65.42]", ("near_far",), "note-controls.occurrence",
     "full"),
    ("gray is not necessary (gray->plain interaction)", "+2.5 pp [-0.42, 5.42]", ("plain_interaction",),
     "note-controls.plain-note", "plain-full"),
    ("the explicit question keeps the label under the early mask", "+0 pp (240 -> 240)",
     ("explicit-early", "vs_reference"), "note-controls.explicit-question", "explicit-full"),
    ("without the UNKNOWN clause the early mask keeps the label", "+0 pp (240 -> 240)",
     ("no-unknown-early", "vs_reference"), "note-controls.no-unknown", "no-unknown-full"),
    ("the varied note loses less under the early mask (loss difference)", "+44.2 pp (-13.33 vs -57.50)",
     ("note_profiles", "loss_difference"), "note-controls.varied", "varied-full"),
)
#: The first-value margin's effect: its claim in ``claims.py``.
MARGIN_CLAIM = "note-controls.margin"
#: The half-width (pp) within which a no-change effect's interval must lie: the verdict rule's default for a change
#: in pp (``studies.common.claims.TOLERANCE``), which judges the claims.
TOLERANCE_PP = TOLERANCE["pp"]
#: Every claim the summary judges, by key: the scorecard's (``claims.CLAIMS``) and the summary's own
#: (``claims.REPORT_CLAIMS``).
_CLAIMS: dict[str, Claim] = {c.key: c for c in (*PAPER_CLAIMS, *REPORT_CLAIMS)}
#: A claim's direction as the summary's ``sign`` (+1, -1, 0 for no change).
_SIGN = {"up": 1, "down": -1, "none": 0}


def _effects(s: dict[str, Any]) -> list[Effect]:
    """Each of the paper's effects with, per rule, our interval and its verdict: the effect's claim of
    ``claims.py`` judged (``studies.common.claims.verdict_text``) on ``claims.note_change_measurement``, not
    testable when the effect's reference configuration is at the floor or not in the run; the margin effect on
    ``claims.note_margin_measurement``."""
    by = {c["configuration"]: c for c in s["configurations"]}
    out = []
    for effect, paper, where, key, reference in EFFECTS:
        claim = _CLAIMS[key]
        per_rule = {}
        for rule in RULES:
            change = note_change(s, where, rule)
            if change:
                ref = by.get(reference)
                per_rule[rule] = {"ci": change["pp_ci"], "pp": change["pp"],
                                  "reference": None if ref is None else [ref["correct"][rule], ref["n"]],
                                  "verdict": verdict_text(claim, note_change_measurement(s, where, rule, (reference,)))}
        if per_rule:
            out.append({"effect": effect, "paper": paper, "sign": _SIGN[claim.direction], "reference": reference,
                        "rules": per_rule})
    margin = by.get("early", {}).get("margin_vs_full")
    if margin:
        claim = _CLAIMS[MARGIN_CLAIM]
        out.append({"effect": "the early mask lowers the first-value margin (nats)",
                    "paper": "+0.205 -> -3.050 nats", "sign": _SIGN[claim.direction], "reference": None,
                    "margin": {"ci": margin["ci"], "verdict": verdict_text(claim, note_margin_measurement(s))}})
    return out


class _SummaryKeys(TypedDict):
    seed: int
    draws: int
    #: Units (group, information condition), their groups (the resampled clusters) and all rows.
    units: int
    groups: int
    rows: int
    #: Per configuration: its counts under each rule, its changes against full access and its reference.
    configurations: list[ConfigurationCell]
    #: Per rule: near - far, the plain-note interaction, the note profiles, the margin's disagreement.
    by_rule: dict[str, RuleEffects]
    current: dict[str, Any]
    profiles: dict[str, Any]
    effects: list[Effect]


class Summary(_SummaryKeys, total=False):
    """A note-controls run's ``summary.json``."""

    #: Runs with the near and far notes: the far note's first-token margin against the near one's.
    near_far_margin: Mean | None


def summarize(out_dir: Path | str, seed: int = PAPER_SEED, draws: int = DRAWS) -> Summary:
    """The summary of a run directory (module docstring)."""
    rows = list(read_rows(out_dir))
    label = [r for r in rows if r["question_kind"] != "current"]
    cells = _Cells(label)
    weights = group_bootstrap_weights([g for g, _ in cells.units], n_draws=draws, seed=seed)
    summary: Summary = {
        "seed": seed, "draws": draws, "units": len(cells.units), "groups": len({g for g, _ in cells.units}),
        "rows": len(rows), "configurations": [_configuration(cells, c, weights) for c in cells.configs],
        "by_rule": {},
    }
    margins = np.array([np.nan if r["first_token_margin"] is None else r["first_token_margin"] for r in label])
    for rule in RULES:
        entry: dict[str, Any] = {}
        if cells.has("near", "far"):
            entry["near_far"] = _paired(cells.vector("far", rule), cells.vector("near", rule), weights)
        entry["plain_interaction"] = _interaction(cells, ("plain-full", "plain-early"), ("full", "early"), weights,
                                                  rule)
        entry["note_profiles"] = _note_profiles(cells, weights, rule)
        entry["disagreement"] = _disagreement(margins, np.array([float(r[rule]) for r in label]))
        summary["by_rule"][rule] = entry
    if cells.has("near", "far"):
        summary["near_far_margin"] = _mean(cells.vector("far", "first_token_margin")
                                           - cells.vector("near", "first_token_margin"), weights)
    summary["current"] = _current(rows)
    summary["profiles"] = _profiles(rows)
    summary["effects"] = _effects(summary)
    return summary


# ----------------------------------------------------------------------------- report

def _nats(mean: dict[str, Any] | None) -> str:
    return "" if not mean else estimate(mean["mean"], mean["ci"], "+.2f")


def _paper_count(name: str) -> str:
    n = anchors.COUNTS.get(name)
    return "" if n is None else count_share(n, anchors.N)


def _paper_margin(name: str) -> str:
    m = anchors.MARGINS.get(name)
    return "" if m is None else f"{m:+.3f}"


def _configuration_lines(summary: dict[str, Any]) -> list[str]:
    paper, lenient = "label_correct", "lenient_correct"
    lines = table_head(["configuration", "profile", "question", "masked tokens", "correct", "vs full, pp [95% CI]",
                        "C / R", "vs own full, pp [95% CI]", "lenient", "lenient vs full, pp [95% CI]",
                        "lenient C / R", "first-value margin [95% CI]", "margin change vs full",
                        f"paper {anchors.MODEL}", "paper margin"])
    for c in summary["configurations"]:
        lo, hi = c["masked_tokens"]
        masked = "0" if hi == 0 else (f"{lo}" if lo == hi else f"{lo}-{hi}")
        own = c["vs_reference"].get(paper)
        lines.append(table_row([
            c["configuration"], c["profile"], c["question"], masked, count_share(c["correct"][paper], c["n"]),
            pp_change(c["vs_full"].get(paper)),
            corrections_reversals(c["vs_full"].get(paper)), f"{pp_change(own)} vs {c['reference']}" if own else "",
            count_share(c["correct"][lenient], c["n"]), pp_change(c["vs_full"].get(lenient)),
            corrections_reversals(c["vs_full"].get(lenient)),
            _nats(c["margin"]), _nats(c.get("margin_vs_full")), _paper_count(c["configuration"]),
            _paper_margin(c["configuration"])]))
    return lines + [""]


def _comparison_lines(summary: dict[str, Any]) -> list[str]:
    by_rule = summary["by_rule"]
    lines = []
    if by_rule["label_correct"].get("near_far"):
        p = anchors.NEAR_FAR
        lines += ["## Matched occurrence: far minus near", ""]
        for rule, name in RULES.items():
            nf = by_rule[rule]["near_far"]
            lines.append(f"- {name}: {pp_change(nf)} pp ({nf['corrections']} corrections / {nf['reversals']} "
                         "reversals)")
        lines += [f"- first-value margin change: {_nats(summary.get('near_far_margin'))} nats",
                  f"- paper ({anchors.MODEL}): {p['pp']:+.1f} pp {interval(p['ci'], '.2f')} (table: "
                  f"{interval(p['ci_table'], '.1f')}), {p['corrections']} corrections / {p['reversals']} reversals; "
                  f"margin change {p['margin']:+.2f} {interval(p['margin_ci'], '.2f')} nats", ""]
    if by_rule["label_correct"].get("plain_interaction"):
        p = anchors.PLAIN_INTERACTION
        lines += ["## gray -> plain: change of the early-control effect", "",
                  "(plain-early - plain-full) - (early - full): " + "; ".join(
                      f"{name} {pp_change(by_rule[rule]['plain_interaction'])} pp" for rule, name in RULES.items())
                  + f"; paper {p['pp']:+.1f} pp {interval(p['ci'], '.2f')}.", ""]
    cells = ("full", "early", "preserve-first-four", "first-four", "last-four")
    if any(by_rule[r]["note_profiles"] for r in RULES):
        lines += ["## Repeated vs varied note (tab:v41_note_controls)", "",
                  *table_head(["note", "rule", *cells, "early - full, pp [95% CI]", "preserve - early, pp [95% CI]"])]
        for profile in ("repeated", "varied"):
            for rule, name in RULES.items():
                e = by_rule[rule]["note_profiles"].get(profile)
                if e:
                    lines.append(table_row([profile, name, *[e["counts"].get(c, "") for c in cells],
                                            pp_change(e["loss"]), pp_change(e["preserve"])]))
            if profile in by_rule["label_correct"]["note_profiles"]:
                prefix, p = "" if profile == "repeated" else "varied-", anchors.NOTE_PROFILES[profile]
                lines.append(table_row([profile, f"paper {anchors.MODEL}", *[anchors.COUNTS[prefix + c] for c in cells],
                                        f"{p['loss'][0]:+.2f} [{p['loss'][1]:+.2f}, {p['loss'][2]:+.2f}]",
                                        f"{p['preserve'][0]:+.2f} [{p['preserve'][1]:+.2f}, {p['preserve'][2]:+.2f}]"]))
        diffs = [f"{name} {pp_change(by_rule[rule]['note_profiles']['loss_difference'])} pp"
                 for rule, name in RULES.items()
                 if by_rule[rule]["note_profiles"].get("loss_difference")]
        if diffs:
            lines += ["", "Varied minus repeated early-mask loss: " + "; ".join(diffs)
                      + " (paper: -13.33 - (-57.50) = +44.2 pp, no interval printed)."]
        lines.append("")
    p = anchors.DISAGREEMENT
    lines += ["## First-value margin against the greedy answer", "",
              "How often the margin's sign disagrees with the greedy outcome (positive but not correct, or negative "
              "but correct), and how many margins are exactly zero:", ""]
    for rule, name in RULES.items():
        d = by_rule[rule]["disagreement"]
        rng = "" if d["nonzero_range"] is None else \
            f", between {d['nonzero_range'][0]:+.3f} and {d['nonzero_range'][1]:+.3f} nats"
        lines.append(f"- {name}: {d['nonzero_disagreements']} of {d['outputs']} outputs{rng}; {d['zero_ties']} zero "
                     f"margins ({d['zero_ties_correct']} with a correct answer)")
    lines += [f"- paper ({anchors.MODEL}, BF16): {p['disagreements']} disagreements of {p['outputs']:,}, "
              f"{p['zero_ties_among_them']} of them zero ties; the {p['nonzero']} nonzero ones between "
              f"{p['nonzero_range'][0]:+.3f} and {p['nonzero_range'][1]:+.3f} nats; {p['zero_ties']} zero ties "
              "overall", ""]
    return lines


def _current_lines(summary: dict[str, Any]) -> list[str]:
    cur = summary.get("current")
    if not cur:
        return []
    lines = ["## Current question on the unit-dependent replacement cases", "",
             *table_head(["configuration", "complete", "categories"])]
    for name, c in cur.items():
        lines.append(table_row([name, f"{c['complete']}/{c['n']}",
                                ", ".join(f"{k} {v}" for k, v in sorted(c["categories"].items()))]))
    paper = "; ".join(f"{m} full/whole/number {r['repeated']} repeated, {r['varied']} varied"
                      for m, r in anchors.CURRENT.items())
    return lines + ["", f"Paper (of 60): {paper}.", ""]


def _effect_lines(summary: dict[str, Any]) -> list[str]:
    def reference(e: dict[str, Any], rule: str) -> str:
        ref = e.get("rules", {}).get(rule, {}).get("reference")
        return "" if ref is None else f"{ref[0]}/{ref[1]}"

    lines = ["## The paper's effects at this size", "",
             f"Verdicts: {VERDICT_RULE}; {NO_CHANGE_RULE.format(tolerance=f'{TOLERANCE_PP:g} pp')}. The "
             "reference arm of each effect is full access with the effect's note and question (its correct answers "
             "per rule are listed); the lenient rule is ours. The margin effect does not depend on the answer rule.",
             "", *small_sample_note(summary["groups"], "groups"),
             *table_head(["effect", f"paper ({anchors.MODEL})",
                          f"reference arm: correct ({' / '.join(RULES.values())})",
                          *(f"ours, {n}: 95% CI" for n in RULES.values()),
                          *(f"verdict ({n})" for n in RULES.values())])]
    for e in summary["effects"]:
        per = e.get("rules") or {rule: e["margin"] for rule in RULES}
        refs = " / ".join(filter(None, (reference(e, r) for r in RULES)))
        lines.append(table_row([e["effect"], e["paper"], f"{e['reference']} {refs}" if e["reference"] else "margins",
                                *(interval(per[r]["ci"], "+.2f") if r in per else "" for r in RULES),
                                *(per[r]["verdict"] if r in per else "" for r in RULES)]))
    return lines + [""]


def _profile_lines(summary: dict[str, Any]) -> list[str]:
    lines = ["## Histories per profile", "",
             *table_head(["profile", "note tokens", "history tokens", "shift vs original history", "record A tokens"])]
    for p, e in summary["profiles"].items():
        lines.append(table_row([p, ", ".join(map(str, e["note_tokens"])), "-".join(map(str, e["history_tokens"])),
                                ", ".join(f"{x:+d}" for x in e["position_shift"]),
                                ", ".join(map(str, e["a_tokens"]))]))
    return lines + [""]


#: Where this study's items come from (the report's Items line).
ITEMS = Items(TASK.kind, TASK.detail + ", with the paper's inspection-label question")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    study = config.get("study_config", {})
    lines = [*heading("Note controls", config, ITEMS),
             f"Unrelated-label question (\"What is the inspection label on ...?\") on {summary['units']} information "
             f"conditions of {summary['groups']} quantity-task groups, {summary['rows']} rows. Greedy answers of at "
             f"most {study.get('max_new_tokens')} tokens; correct (the paper's rule) = the strict single answer field "
             "equals the label (one outer fence allowed) and the answer ends with EOS; lenient = EOS and the first "
             "answer field, or without one the label as a whole word, equals the label. First-value margin = "
             "log p(label's first token) - log p(UNKNOWN's first token) after the canonical prefix `{\"answer\": \"`, teacher-forced, nats. "
             f"Changes are paired over the conditions; 95% intervals from {summary['draws']:,} draws of whole groups "
             f"(seed {summary['seed']}), the same draws for every comparison. Masks hide record A's token count "
             "unless named otherwise. Paper numbers are Llama-3.2-3B's (BF16, 40 tokens).", ""]
    if timing:
        lines += [run_time(timing, machine=True), ""]
    lines += ["## Configurations", "", *_configuration_lines(summary), *_effect_lines(summary),
              *_comparison_lines(summary), *_current_lines(summary), *_profile_lines(summary),
              "![changes in correct labels against full access](figure.png)", ""]
    return "\n".join(lines)
