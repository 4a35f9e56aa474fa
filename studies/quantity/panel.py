"""The quantity study across models: ``kvprobe report quantity RUN RUN ... --out DIR``.

Each run (one model each) contributes its summary (``summary.json`` when it holds every table below, else
recomputed in memory from its rows with the same seed; nothing is written into the run). ``DIR`` gets:

* ``thresholds.json``, ``thresholds.md``: the held-out-model warning threshold (``threshold.py``, unchanged);
* ``panel.md``, ``panel.json``: one table per claim, models side by side: complete-answer rates per
  information, query and condition with exact 95 % intervals (the paper's fig:v33_preservation cells: the
  current query over the replacements, the others over all groups); the whole-source mask against its control
  with verdicts; margin changes; failure diagnostics; the per-unit breakdown; the capped outputs;
* ``preservation.png`` (and ``preservation-lenient.png``): the paper's fig:v33_preservation (L4106-4110),
  complete answers per condition x query, rows B states the unit / B refers to A, one panel per model,
  each tile stacked correct / wrong or malformed / at the token limit; ``margins.png``: the margin changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvprobe.files import atomic_write_text
from kvprobe.readouts.stats import PAPER_SEED, clopper_pearson
from kvprobe.studies.common.report import estimate, ordered, rate_interval, table_head, table_row
from . import diagnostics
from .cells import INFO_NAMES, INFO_ORDER, by_cell, cell_keys
from .summary import RULE_NAMES, claim_rows, summarize
from .threshold import format_thresholds, write_thresholds

#: Rules of the rate tables and figures: the paper's complete answer, then the lenient rule.
PANEL_RULES = ("complete", "lenient_complete")
#: Which relation a query's cells cover (the paper's fig:v33_preservation: "Current cells contain 60
#: replacement groups; other cells contain all 120 groups per B condition").
QUERY_RELATION = {"current": "replacement"}
#: Summary keys a committed summary must hold to be read as it is.
NEEDED = ("cells", "unit_breakdown", "capped_outputs")


def run_summary(run_dir: Path | str, seed: int = PAPER_SEED) -> dict[str, Any]:
    """The run's ``summary.json`` when it has every table of the panel and ``seed``; else recomputed (in memory)."""
    path = Path(run_dir) / "summary.json"
    if path.is_file():
        summary = json.loads(path.read_text())
        if all(k in summary for k in NEEDED) and summary.get("seed") == seed:
            return summary
    return summarize(run_dir, seed=seed)


def model_entry(model: str, summary: dict[str, Any]) -> dict[str, Any]:
    """The panel's view of one model's summary: rates, claims, margins, failures, units, capped outputs."""
    rates, margins, failures = [], [], []
    for c in summary["cells"]:
        if c["relation"] != QUERY_RELATION.get(c["query"], "all"):
            continue
        key = {"information": c["information"], "query": c["query"], "condition": c["condition"], "n": c["n"]}
        rates.append({**key, "capped": c["categories"]["capped"],
                      **{r: c[r] for r in PANEL_RULES},
                      **{f"{r}_ci": clopper_pearson(c[r], c["n"]) for r in PANEL_RULES}})
        if c["query"] != "current":
            continue
        failures.append({**key, "categories": c["categories"]})
        against = "control" if c.get("margin_change_vs_control") else "full"
        m = c.get(f"margin_change_vs_{against}")
        if c["condition"] != "full" and m is not None:
            margins.append({**key, "against": against, "mean": m["mean"], "ci": m["ci"]})
    return {"model": model, "groups": summary["groups"], "rates": rates, "claims": claim_rows(summary),
            "margins": margins, "failures": failures, "unit_breakdown": summary.get("unit_breakdown") or {},
            "capped_outputs": summary.get("capped_outputs")}


def panel(run_dirs: list[Path | str], seed: int = PAPER_SEED) -> list[dict[str, Any]]:
    """:func:`model_entry` of every run, in the order given (a model named twice gets its folder beside it)."""
    names = [json.loads((Path(d) / "config.json").read_text())["model"]["name"] for d in run_dirs]
    return [model_entry(name if names.count(name) == 1 else f"{name} ({Path(d).name})", run_summary(d, seed))
            for name, d in zip(names, run_dirs)]


def _rate_lines(entries: list[dict[str, Any]], rule: str) -> list[str]:
    models = [e["model"] for e in entries]
    found = [by_cell(e, "rates") for e in entries]
    lines = [f"### {RULE_NAMES[rule]} answers", "", *table_head(["information", "query", "condition", *models])]
    for key in cell_keys(entries, "rates"):
        cells = [rate_interval(f[key][rule], f[key]["n"], f[key][f"{rule}_ci"]) if key in f else "" for f in found]
        lines.append(table_row([INFO_NAMES.get(key[0], key[0]), *key[1:], *cells]))
    return lines + [""]


def _claim_cell(c: dict[str, Any]) -> str:
    """Our estimate, the control's level (answer claims) and the verdict."""
    level = "" if c["reference"] == "margins" else f" ({c['reference']})"
    return f"{c['estimate']}{level}: {c['verdict']}"


def _claim_lines(entries: list[dict[str, Any]]) -> list[str]:
    models = [e["model"] for e in entries]
    keys = list(dict.fromkeys((c["claim"], c["information"], c["paper"]) for e in entries for c in e["claims"]))
    found = [{(c["claim"], c["information"], c["paper"]): c for c in e["claims"]} for e in entries]
    lines = table_head(["the paper's claim", "information", "paper", *models])
    for key in keys:
        cells = [_claim_cell(f[key]) if key in f else "" for f in found]
        lines.append(table_row([key[0], INFO_NAMES.get(key[1], key[1]), key[2], *cells]))
    return lines + [""]


def _margin_lines(entries: list[dict[str, Any]]) -> list[str]:
    models = [e["model"] for e in entries]
    found = [by_cell(e, "margins") for e in entries]
    lines = table_head(["information", "condition", *models])
    for key in cell_keys(entries, "margins"):
        cells = [f"{estimate(f[key]['mean'], f[key]['ci'])} vs {f[key]['against']}" if key in f else "" for f in found]
        lines.append(table_row([INFO_NAMES.get(key[0], key[0]), key[2], *cells]))
    return lines + [""]


def _failure_lines(entries: list[dict[str, Any]]) -> list[str]:
    lines = [diagnostics.FAILURE_NOTE, ""]
    found = [by_cell(e, "failures") for e in entries]
    for info in ordered({k[0] for k in cell_keys(entries, "failures")}, INFO_ORDER):
        lines += [f"{INFO_NAMES.get(info, info)} (`{info}`):", "", *diagnostics.failure_head(["condition", "model"])]
        for key in (k for k in cell_keys(entries, "failures") if k[0] == info):
            lines += [table_row([key[2], e["model"], *diagnostics.failure_cells(f[key])])
                      for e, f in zip(entries, found) if key in f]
        lines.append("")
    return lines


def _unit_lines(entries: list[dict[str, Any]]) -> list[str]:
    lines = [diagnostics.UNIT_NOTE, ""]
    for info in ordered({i for e in entries for i in e["unit_breakdown"]}, ("unit_from_a", "unit_stated")):
        lines += [f"{INFO_NAMES.get(info, info)} (`{info}`):", "",
                  *table_head(["model", "unit", *diagnostics.UNIT_COLUMNS])]
        for e in entries:
            b = e["unit_breakdown"].get(info)
            if b:
                lines += [table_row([e["model"] if i == 0 else "", u["unit"], *diagnostics.unit_cells(u)])
                          for i, u in enumerate(b["units"])]
        changed = "; ".join(f"{e['model']} {e['unit_breakdown'][info]['changed_equivalent_vs_exact']} of "
                            f"{e['unit_breakdown'][info]['n']}" for e in entries if info in e["unit_breakdown"])
        lines += ["", f"Labels the equivalent-units rule changes against exact: {changed}.", ""]
    paper_counts = ", ".join(f"{n} {u}" for u, n in diagnostics.PAPER_UNIT_COUNTS.items())
    return lines + [f"Paper: {paper_counts} (L3511-3513); the equivalent-units rule changes "
                    f"{diagnostics.PAPER['changed']}.", ""]


def _capped_lines(entries: list[dict[str, Any]]) -> list[str]:
    lines = [diagnostics.CAPPED_NOTE, "", *table_head(["model", "information", *diagnostics.CAPPED_COLUMNS])]
    for e in entries:
        if e["capped_outputs"] is None:
            lines.append(table_row([e["model"], "not in this run (rows graded before the phrase flags)"]))
            continue
        lines += [table_row([e["model"], INFO_NAMES.get(info, info), *diagnostics.capped_cells(c)])
                  for info, c in e["capped_outputs"].items()]
    return lines + ["", f"Paper: {diagnostics.PAPER['capped']}.", ""]


def format_panel(entries: list[dict[str, Any]], figures: list[str] = ()) -> str:
    """``panel.md``: a section per claim, the models side by side."""
    lines = ["# Quantity study across models", "",
             "Models: " + ", ".join(f"{e['model']} ({e['groups']} groups)" for e in entries) + ". The held-out "
             "warning threshold is in [thresholds.md](thresholds.md).", "",
             "## Complete answers per information, query and condition", "",
             "Current query: the replacement groups; historical and unrelated queries: all groups (the paper's "
             "fig:v33_preservation cells). k/n = rate [exact 95 % interval]. complete: the paper's rule 3; lenient: "
             "ours.", "", *(line for rule in PANEL_RULES for line in _rate_lines(entries, rule)),
             "## The whole-source mask against its matched control", "",
             "Replacements, current query: answer changes C/R, net (C - R) / groups [95 % CI] with the control's "
             "level, and the margin change (nats) [95 % CI]; verdicts as in each model's report.", "",
             *_claim_lines(entries),
             "## Margin changes: log p(current) - log p(old), replacements, current query", "",
             "Mean change (nats) [paired 95 % group-bootstrap interval] against the matched control where the "
             "condition has one, else against full access.", "", *_margin_lines(entries),
             "## Failure diagnostics: replacements, current query", "", *_failure_lines(entries),
             "## Units: replacements, current query, whole-source mask", "", *_unit_lines(entries),
             "## Outputs that hit the token cap: replacements, current query, whole-source mask", "",
             *_capped_lines(entries)]
    lines += [f"![{name}]({name})" for name in figures]
    return "\n".join(lines) + "\n"


def write_panel(run_dirs: list[Path | str], out_dir: Path | str, seed: int = PAPER_SEED) -> str:
    """Write ``panel.md``, ``panel.json`` and the figures under ``out_dir``; returns ``panel.md``'s text."""
    from .figure import plot_margins, plot_preservation

    entries = panel(run_dirs, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = [plot_preservation(entries, out / "preservation.png", rule="complete").name,
               plot_preservation(entries, out / "preservation-lenient.png", rule="lenient_complete").name,
               plot_margins(entries, out / "margins.png").name]
    atomic_write_text(out / "panel.json", json.dumps({"runs": [str(d) for d in run_dirs], "seed": seed,
                                                      "models": entries}, indent=1) + "\n")
    text = format_panel(entries, figures)
    atomic_write_text(out / "panel.md", text)
    return text


def write_comparison(run_dirs: list[Path | str], out_dir: Path | str, seed: int = PAPER_SEED) -> str:
    """``kvprobe report quantity RUN RUN ... --out DIR``: the held-out thresholds (``thresholds.{json,md}``) and
    the cross-model panel (:func:`write_panel`); returns the thresholds' tables and where the panel is."""
    thresholds = format_thresholds(write_thresholds(run_dirs, out_dir, seed=seed))
    write_panel(run_dirs, out_dir, seed=seed)
    return thresholds + f"\nCross-model panel: {Path(out_dir) / 'panel.md'} (figures beside it).\n"
