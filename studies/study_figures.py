"""Each study's figure, drawn from its ``summary.json`` alone.

Every figure shows its reference arm's level and n (each panel's note line), the arm's own count at the
right of each row where the study counts answers, a chance line where one exists (BABILong: a uniform
guess among bAbI's six locations), one shared scale per figure, and no overlapping labels
(:mod:`kvprobe.studies.common.figures`). The studies' ``write_summary`` call these functions, so a fresh run
and a redraw give the same figure.

:data:`STUDY_FIGURES` maps a run's study to its figure; ``kvprobe.tools.figures`` redraws every
committed figure from its committed data (``python -m kvprobe.tools.figures``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .common.figures import Panel, plot_changes, plot_heatmaps

#: bAbI qa1-qa3 answers are one of six locations (bathroom, bedroom, garden, hallway, kitchen, office).
BABI_LOCATIONS = 6


def _count(correct: int, n: int) -> str:
    return f"{correct}/{n}"


# ----------------------------------------------------------------------------------------------- studies


def babilong(summary: dict[str, Any], path: Path | str, model: str = "") -> Path:
    """Each policy's change in correct answers against full access, one panel per (task, length); full
    access's count and n in each panel's note, and the change a uniform guess among the six locations
    would make (n/6 - full) as the chance line."""
    full = {(c["task"], c["length"]): c for c in summary["cells"] if c["policy"] == "full"}
    panels: dict[str, Panel] = {}
    for c in summary["cells"]:
        if (ch := c.get("official_change_vs_full")) is None:
            continue
        f = full[(c["task"], c["length"])]
        name = f"{c['task']}, {c['length']} tokens"
        if name not in panels:
            panels[name] = Panel([], note=f"full access {_count(f['official'], f['n'])}; n = {f['n']} inputs",
                                 chance=f["n"] / BABI_LOCATIONS - f["official"],
                                 chance_label=f"a uniform guess among {BABI_LOCATIONS} locations (n/6 correct)")
        panels[name].rows.append((c["policy"], ch["change"], ch["ci"], _count(c["official"], c["n"])))
    return plot_changes(panels, path, title=f"BABILong{': ' + model if model else ''}",
                        xlabel="change in correct answers vs full access (95% CI)")


def minteval(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """EM change against full access (pp, component intervals), one panel per question scope; full access's
    exact matches and n in each note, each policy's count at the right."""
    full = {c["scope"]: c for c in summary["cells"] if c["policy"] == "full"}
    panels: dict[str, Panel] = {}
    for c in summary["cells"]:
        if (ch := c.get("change_component")) is None:
            continue
        f = full.get(c["scope"])
        name = c["scope"].replace("_", " ")
        if name not in panels:
            note = (f"full access {_count(f['em'], f['n'])} exact ({100 * f['em'] / f['n']:.2f}%); n = {f['n']} "
                    "questions") if f else ""
            panels[name] = Panel([], note=note)
        panels[name].rows.append((c["policy"], ch["pp"], ch["ci"], _count(c["em"], c["n"])))
    if not panels:
        return None
    return plot_changes(panels, path, title=f"MINTEval: {model}",
                        xlabel="exact-match change vs full, pp (95% CI over components)",
                        footer=f"{summary.get('components', '?')} components resampled; a change of one answer "
                               "is 100/n pp")


def note_controls(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """Changes in correct labels (paper rule and lenient), pp, against original full access and against the
    full access of each configuration's own profile; the reference's count and n in each note, each arm's
    count at the right."""
    from kvprobe.studies.note_controls.summary import RULES

    configs = summary["configurations"]
    full = next((c for c in configs if c["configuration"] == "full"), None)
    by_name = {c["configuration"]: c for c in configs}
    panels: dict[str, Panel] = {}
    for rule, name in RULES.items():
        for key, title in (("vs_full", "vs original full"), ("vs_reference", "vs its profile's full")):
            rows = []
            for c in configs:
                if not c[key].get(rule):
                    continue
                label = _count(c["correct"][rule], c["n"])
                if key == "vs_reference":
                    ref = by_name.get(c.get("reference"))
                    label += f" (ref {ref['correct'][rule]})" if ref else ""
                rows.append((c["configuration"], c[key][rule]["pp"], c[key][rule]["pp_ci"], label))
            near_far = summary["by_rule"][rule].get("near_far")
            if key == "vs_reference" and near_far:
                rows.append(("far - near", near_far["pp"], near_far["pp_ci"], ""))
            if not rows:
                continue
            n = configs[0]["n"]
            note = (f"original full {_count(full['correct'][rule], full['n'])}; n = {n} per arm" if key == "vs_full"
                    and full else f"reference: the profile's full access; n = {n} per arm")
            panels[f"{name}: {title}"] = Panel(rows, note=note)
    if not panels:
        return None
    return plot_changes(panels, path, title=f"Note controls: {model}", columns=2,
                        xlabel="change in correct labels, pp (95% CI)")


def factorial(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """The factor contrasts of (mask - control), exact and lenient rules; n in each note."""
    from kvprobe.studies.factorial.summary import _contrast_name

    panels: dict[str, Panel] = {}
    for matrix, s in summary["matrices"].items():
        for metric in ("exact", "lenient"):
            rows = [(_contrast_name(k, s["narrow"]), e["estimate"], e["ci"])
                    for k, e in s["factors"][metric].items() if e["estimate"] is not None]
            if rows:
                panels[f"{matrix}, {metric} rule"] = Panel(
                    rows, note=f"n = {s['records']} record cases, {s['groups']} groups")
    if not panels:
        return None
    return plot_changes(panels, path, columns=2, title=f"Factorial: {model}",
                        xlabel="change in (mask - control), pp (95% CI)",
                        footer="each contrast: the change in (mask - matched control) when one factor changes")


def matched_scores(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """The paired accuracy changes (pp) of every subset and rule; each arm's count and n in each note."""
    from kvprobe.studies.matched_scores.summary import CONTRASTS

    if not summary.get("cases"):
        return None
    panels: dict[str, Panel] = {}
    for name, s in summary["subsets"].items():
        for rule in ("exact", "complete", "lenient"):
            r = s["rules"][rule]
            k = r["correct"]
            panels[f"{name}, {rule} rule"] = Panel(
                [(c.replace("_vs_", " - "), r[c]["pp"], r[c]["ci"]) for c in CONTRASTS],
                note=f"n = {s['n']}; correct: full {k['full']}, control {k['control']}, mask {k['mask']}")
    return plot_changes(panels, path, columns=3, xlabel="accuracy change, pp (95% CI)",
                        title=f"Matched scores ({summary['dataset']}) on {model}")


def revisions(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """Complete-answer change against full access (pp), all questions and by question type; full access's
    count and n in each note, each operation's count at the right."""
    def panel(cells: list[dict[str, Any]]) -> Panel:
        full = next((c for c in cells if c["operation"] == "full"), None)
        rows = [(c["operation"], c["change_vs_full"]["pp"], c["change_vs_full"]["pp_ci"],
                 _count(c["complete"], c["n"])) for c in cells if "change_vs_full" in c]
        return Panel(rows, note=f"full access {_count(full['complete'], full['n'])}; n = {full['n']} questions"
                     if full else "")

    panels = {"all questions": panel(summary["cells"])}
    panels.update({qtype: panel(cells) for qtype, cells in summary["by_type"].items()})
    panels = {k: v for k, v in panels.items() if v.rows}
    if not panels:
        return None
    return plot_changes(panels, path, title=f"Revision histories: {model}",
                        xlabel="complete-answer change vs full, pp (95% CI)")


#: Recovery ratios beyond this are drawn saturated (their numbers are still written in the cells).
RECOVERY_LIMIT = 1.5


def fact_map(summary: dict[str, Any], path: Path | str, model: str = "") -> Path | None:
    """Recovery of the recompute effect by later piece x layer band, all histories and by variant, on one
    colour scale. A panel whose recompute effect has an interval including 0 shows no ratios (the report
    does not give them either): a ratio over an effect that may be 0 is not a recovery."""
    from kvprobe.studies.fact_map.summary import heatmap

    if not summary["bands"]:
        return None
    bands = [f"{lo}-{hi}" for lo, hi in summary["bands"]]
    blocks = {f"{summary['dataset']}, all": summary["all"], **summary["by_variant"]}
    grid, notes = {}, {}
    for name, stats in blocks.items():
        matrix = heatmap(stats, summary["pieces"], summary["bands"])
        effect = stats.get("target_effect") or {}
        shown = stats.get("target_effect_excludes_zero", True)
        notes[name] = (f"n = {stats.get('n_cases', '?')} histories, {stats.get('n_groups', '?')} groups; recompute "
                       f"effect {effect.get('change', math.nan):+.2f} [{effect.get('change_ci', [math.nan] * 2)[0]:+.2f}, "
                       f"{effect.get('change_ci', [math.nan] * 2)[1]:+.2f}]" + ("" if shown else "\nincludes 0: no ratios"))
        grid[name] = ([[math.nan if (x is None or not shown) else x for x in row] for row in matrix],
                      summary["pieces"], bands)
    return plot_heatmaps(grid, path, title=f"Fact map on {model}: recovery of the recompute effect by later "
                         "piece x layer band", colorbar="recovered (share of the recompute effect)",
                         xlabel="layers where the piece cannot see the source", notes=notes, limit=RECOVERY_LIMIT,
                         footer=f"one colour scale, saturated beyond +/-{RECOVERY_LIMIT}; hatched: not reported")


def records_coverage(summary: dict[str, Any], path: Path | str) -> Path | None:
    """coverage.png of a records run: net corrections when A is hidden in the top-ranked histories (lenient
    rule), with the random ranking's line; n and the net of hiding A everywhere in the title."""
    from kvprobe.studies.common.detectors.coverage import plot_coverage

    if "coverage" not in summary:
        return None
    curves = summary["coverage"]["lenient"]
    first = next(iter(curves.values()))
    return plot_coverage(curves, path, title="Record histories: hiding A in the top-ranked histories (lenient "
                         f"rule)\nn = {first['n']} histories; hiding A in all: net {first['total_utility']:+g}")


def calibration_coverage(cell: dict[str, Any], path: Path | str, model: str) -> Path:
    """One coverage figure of ``kvprobe calibrate`` (a rule x mask cell), with n and the total net."""
    from kvprobe.studies.common.detectors.coverage import plot_coverage

    first = next(iter(cell["coverage"].values()))
    return plot_coverage(cell["coverage"], path, title=f"{model}: {cell['mask']} mask, {cell['rule']} rule\n"
                         f"n = {first['n']} test cases; acting on all: net {first['total_utility']:+g}")


def fact_map_example(data: dict[str, Any], path: Path | str) -> Path:
    """``kvprobe map --out``'s map.png from its map.json."""
    return plot_heatmaps({data["input"]: (data["heatmap"], [p["label"] for p in data["pieces"]],
                                          [f"{lo}-{hi}" for lo, hi in data["bands"]])},
                         path, title=f"Fact map on {data['model']}: recovery by later piece x layer band",
                         colorbar="recovered", xlabel="layers where the piece cannot see the source",
                         notes={data["input"]: f"one history; recompute effect {data['target_effect']:+.2f} nats"},
                         limit=RECOVERY_LIMIT)


def cross_benchmark(data: dict[str, Any], path: Path | str) -> Path:
    """Current (left) and historical (right) answers under whole-source masking: per row (benchmark, model,
    metric), full access (grey) and masked (blue) rates in percent with exact 95% intervals and counts; n on
    each label; a dashed chance line where one is defined (BABILong). ``data``: ``cross-benchmark.json``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .common.figures import UP, save_figure

    blocks = {q: [r for r in data["rows"] if r["question"] == q] for q in ("current", "historical")}
    height = 1.6 + 0.55 * max(len(b) for b in blocks.values())
    fig, axes = plt.subplots(1, 2, figsize=(12.5, height), sharex=True, layout="constrained")
    chance_drawn = False
    for ax, (question, block) in zip(axes, blocks.items()):
        y = list(range(len(block)))[::-1]
        for yi, r in zip(y, block):
            for offset, arm, color in ((0.18, "full", "#999999"), (-0.18, "masked", UP)):
                rate = r[arm]
                ax.barh(yi + offset, rate["pct"], height=0.34, color=color)
                ax.errorbar(rate["pct"], yi + offset, xerr=[[rate["pct"] - rate["ci"][0]], [rate["ci"][1] - rate["pct"]]],
                            fmt="none", ecolor="black", capsize=2, lw=0.8)
                ax.text(101, yi + offset, f"{rate['k']}/{rate['n']}", va="center", fontsize=7)
            if r["chance_pct"] is not None:
                ax.plot([r["chance_pct"]] * 2, [yi - 0.45, yi + 0.45], color="#c07000", lw=1.0, ls="--")
                chance_drawn = True
        labels = [f"{r['benchmark']} {r['metric']}{', ' + r['label'] if r['label'] else ''}\n{r['model']}, "
                  f"n = {r['n']}; change {r['change_pp']:+.1f} pp" for r in block]
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_ylim(-0.7, len(block) - 0.3)
        ax.set_xlim(0, 112)
        ax.set_title(f"{question} questions", fontsize=9)
        ax.set_xlabel("answers correct, % (95% exact CI)", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("Current and historical answers under whole-source masking", fontsize=10)
    legend = "grey: full access; blue: whole-source mask; right: counts"
    if chance_drawn:
        legend += f"; dashed orange: a uniform guess among {BABI_LOCATIONS} locations (BABILong)"
    fig.supxlabel(legend, fontsize=7.5, color="#444444")
    return save_figure(fig, path)


# ----------------------------------------------------------------------------------------------- committed

def _config_model(run: Path) -> str:
    return json.loads((run / "config.json").read_text()).get("model", {}).get("name", "?")


def _summary(run: Path) -> dict[str, Any]:
    return json.loads((run / "summary.json").read_text())


def _study(fn: Callable) -> Callable[[Path, Path], Any]:
    return lambda run, out: fn(_summary(run), out, _config_model(run))


def _quantity(run: Path, out: Path):
    from kvprobe.studies.quantity.figure import plot_summary

    return plot_summary(_summary(run), out, model=_config_model(run))


def _records(run: Path, out: Path):
    return records_coverage(_summary(run), out)


def _calibration(name: str) -> Callable[[Path, Path], Any]:
    def draw(folder: Path, out: Path):
        rule, mask = name.removeprefix("coverage-").removesuffix(".png").rsplit("-", 1)
        action = json.loads((folder / "action.json").read_text())
        (cell,) = [c for c in action["cells"] if (c["rule"], c["mask"]) == (rule, mask)]
        return calibration_coverage(cell, out, action.get("model") or _calibration_model(action))
    return draw


def _calibration_model(action: dict[str, Any]) -> str:
    """The model of a calibration (its test run's config)."""
    root = Path(__file__).resolve().parents[1]
    for key in ("test_dir", "test", "sources"):
        value = action.get(key)
        if isinstance(value, dict):
            value = value.get("test") or value.get("test_dir")
        if isinstance(value, str) and (root / value / "config.json").is_file():
            return _config_model(root / value)
    return "?"


def _cross_benchmark(folder: Path, out: Path):
    return cross_benchmark(json.loads((folder / "cross-benchmark.json").read_text()), out)


def _recognition(folder: Path, out: Path):
    from kvprobe.readouts.report import plot_readouts

    return plot_readouts(json.loads((folder / "readouts.json").read_text()), out)


#: Study name (config.json's ``study``) -> figure of a run directory.
STUDY_FIGURES: dict[str, Callable[[Path, Path], Any]] = {
    "babilong": _study(babilong), "minteval": _study(minteval), "note-controls": _study(note_controls),
    "factorial": _study(factorial), "matched-scores": _study(matched_scores), "revisions": _study(revisions),
    "fact-map": _study(fact_map), "quantity": _quantity, "records": _records,
}
