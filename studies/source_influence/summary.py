"""Summary and report of a source-influence, prompt-format or OAKS run, recomputed from ``results.jsonl``
alone (paper L1794-1812, L1861-1890, L1912-1960, L2092-2122; spec partA sections 5-7).

Per event and condition c: the margin ``m_c = log p(current) - log p(other)`` (nats), whether
the current option is chosen (strictly higher score) and whether the earlier source's value is.
Every estimate averages the strata (the eight wording patterns; OAKS: the books) with equal
weight; intervals come from ``draws`` bootstrap draws of groups (role-matched groups; OAKS:
questions) resampled within stratum (one set of draws for every estimate and prompt format, so
they are paired), percentile method:

* ``m_F`` (full), ``Delta_A = m_source - m_full``, ``Delta_N = m_control - m_full`` and
  ``Delta_m = m_source - m_control = Delta_A - Delta_N``;
* candidate accuracy under full access, the control and the source mask (%); the old-choice
  change, source minus control (pp); control minus full accuracy (pp) with its one-sided 95 %
  lower bound ``L.95``;
* ``R_obs``, old choices under the control minus under the source mask (pp; OAKS' metric);
* per stratum, Delta_m and the old-choice change (points), and how many strata are favorable;
* with raw and native formats, native minus raw.

The paper's three criteria (L1912-1924, "inferred" in the spec): (1) the Delta_m interval lies
above 0; (2) L.95 > -3 pp; (3) Delta_m > 0 in at least 6 of 8 patterns. For OAKS (L2098-2101):
fewer obsolete choices (the old-choice change interval below 0), L.95 > -3 pp, a favorable
old-choice change in at least 4 of 5 books. The report prints them with pass/fail beside the
paper's own rows (``paper.py``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, balanced_mean, group_bootstrap_weights, one_sided_lower, \
    percentile_interval
from kvprobe.files import atomic_write_text
from kvprobe.studies.datasets.oaks import items as oaks_items
from kvprobe.studies.datasets.recognition.role_pairs import ITEMS as PAIR_ITEMS
from kvprobe.studies.registry import items_lines
from kvprobe.studies.common.report import Items, estimate, heading, run_time, table_head
from kvprobe.studies.common.runner import read_rows
from . import paper
from .study import CONDITIONS, FORMATS

#: Criterion 2: the control may cost at most this much accuracy (pp) at its one-sided lower bound.
PRESERVATION_PP = -3.0
#: Criterion 3: strata with a positive Delta_m needed: 6 of 8 wording patterns, 4 of 5 books (spec partB 2).
STRATA_NEEDED = {8: 6, 5: 4}


def strata_needed(n: int) -> int:
    """Positive strata criterion 3 needs: the paper's 6 of 8 patterns or 4 of 5 books, else three quarters."""
    return STRATA_NEEDED.get(n, -(-3 * n // 4))


def _estimate(values: np.ndarray, patterns: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    draws = balanced_mean(values, patterns, weights)
    return {"value": balanced_mean(values, patterns), "ci": percentile_interval(draws),
            "lower_one_sided": one_sided_lower(draws)}


Table = dict[str, dict[str, np.ndarray]]


def event_tables(rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, Table], np.ndarray, np.ndarray]:
    """(event ids, format -> condition -> column -> values per event, strata, groups): the events every
    format and condition scored, in event order (so every format shares the same bootstrap draws).
    Strata are the wording patterns (OAKS: the books), groups the resampled units (role-matched
    groups; OAKS: questions)."""
    formats = sorted({r.get("format", "segments") for r in rows}, key=lambda f: FORMATS.index(f))
    by = {(f, c): {r.get("event", r["group"]): r for r in rows
                   if r.get("format", "segments") == f and r["condition"] == c}
          for f in formats for c in CONDITIONS}
    events = sorted(set.intersection(*(set(v) for v in by.values()))) if rows else []
    tables = {f: {c: {col: np.array([float(by[(f, c)][e][col]) for e in events])
                      for col in ("margin", "correct", "old_choice")} for c in CONDITIONS} for f in formats}
    first = by[(formats[0], "full")] if events else {}
    strata = np.array([first[e]["pattern"] for e in events])
    groups = np.array([first[e]["group"] for e in events])
    return events, tables, strata, groups


def estimates(t: Table, patterns: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """Every estimate of one format (pattern-balanced means with their intervals)."""
    full, source, control = (t[c] for c in CONDITIONS)
    return {
        "m_F": _estimate(full["margin"], patterns, weights),
        "delta_A": _estimate(source["margin"] - full["margin"], patterns, weights),
        "delta_N": _estimate(control["margin"] - full["margin"], patterns, weights),
        "delta_m": _estimate(source["margin"] - control["margin"], patterns, weights),
        **{f"accuracy_{c}": _estimate(100 * t[c]["correct"], patterns, weights) for c in CONDITIONS},
        "old_choice_change_pp": _estimate(100 * (source["old_choice"] - control["old_choice"]), patterns, weights),
        "r_obs_pp": _estimate(100 * (control["old_choice"] - source["old_choice"]), patterns, weights),
        "source_minus_control_pp": _estimate(100 * (source["correct"] - control["correct"]), patterns, weights),
        "control_minus_full_pp": _estimate(100 * (control["correct"] - full["correct"]), patterns, weights),
    }


def format_summary(t: Table, patterns: np.ndarray, weights: np.ndarray, oaks: bool = False) -> dict[str, Any]:
    """One format's estimates, Delta_m (and the old-choice change) per stratum and the three criteria.

    Role-matched events (seed L1912-1924): the Delta_m interval above 0, L.95 above -3 pp, Delta_m > 0 in
    6 of 8 patterns. OAKS (seed L2098-2101): fewer obsolete choices (the source - control old-choice change
    interval below 0), L.95 above -3 pp, a favorable old-choice change in 4 of 5 books.
    """
    est = estimates(t, patterns, weights)
    dm = t["source"]["margin"] - t["control"]["margin"]
    old = 100 * (t["source"]["old_choice"] - t["control"]["old_choice"])
    per_pattern = {str(p): {"events": int((patterns == p).sum()), "delta_m": float(dm[patterns == p].mean()),
                            "old_choice_change_pp": float(old[patterns == p].mean())} for p in np.unique(patterns)}
    if oaks:
        positive = sum(v["old_choice_change_pp"] < 0 for v in per_pattern.values())
        first = est["old_choice_change_pp"]["ci"][1] < 0
    else:
        positive = sum(v["delta_m"] > 0 for v in per_pattern.values())
        first = est["delta_m"]["ci"][0] > 0
    criteria = {"effect_interval_excludes_0": first,
                "l95_above_minus_3pp": est["control_minus_full_pp"]["lower_one_sided"] > PRESERVATION_PP,
                "favorable_strata": positive >= strata_needed(len(per_pattern))}
    return {"estimates": est, "per_pattern": per_pattern, "patterns": len(per_pattern),
            "positive_patterns": positive, "criteria": criteria, "passed": sum(criteria.values())}


class _SummaryKeys(TypedDict):
    events: int
    groups: int
    rows: int
    seed: int
    draws: int
    #: Per prompt format (raw text, the native chat template): the answer changes under the mask and its control.
    formats: dict[str, Any]


class Summary(_SummaryKeys, total=False):
    """A source-influence, prompt-format or OAKS run's ``summary.json``."""

    #: Runs with both formats: the native template's changes minus the raw text's, paired over events.
    native_minus_raw: dict[str, Any]


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> Summary:
    rows = list(read_rows(out_dir))
    events, tables, patterns, groups = event_tables(rows)
    out: dict[str, Any] = {"events": len(events), "groups": len(set(groups)), "rows": len(rows), "seed": seed,
                           "draws": draws}
    if not events:
        return out
    weights = group_bootstrap_weights(groups, n_draws=draws, seed=seed, strata=patterns)
    oaks = any(r.get("variant") == "oaks" for r in rows)  # OAKS events have their own criteria
    formats = {f: format_summary(t, patterns, weights, oaks) for f, t in tables.items()}
    out["formats"] = formats
    if set(formats) == {"raw", "native"}:
        raw, native = tables["raw"], tables["native"]
        dm = {f: t["source"]["margin"] - t["control"]["margin"] for f, t in (("raw", raw), ("native", native))}
        out["native_minus_raw"] = {
            "delta_m": _estimate(dm["native"] - dm["raw"], patterns, weights),
            "accuracy_full_pp": _estimate(100 * (native["full"]["correct"] - raw["full"]["correct"]), patterns,
                                          weights)}
    return out


def criteria_cells(summary: dict[str, Any]) -> list[str]:
    """The panel columns of one model: Delta_m [CI], L.95, favorable strata, criteria passed."""
    e = summary["estimates"]
    c = summary["criteria"]
    marks = "".join("y" if c[k] else "n" for k in ("effect_interval_excludes_0", "l95_above_minus_3pp",
                                                    "favorable_strata"))
    return [estimate(e["delta_m"]["value"], e["delta_m"]["ci"]), f"{e['control_minus_full_pp']['lower_one_sided']:+.2f}",
            f"{summary['positive_patterns']}/{summary['patterns']}", f"{summary['passed']}/3 ({marks})"]


#: Report rows: summary key, label, number format.
ESTIMATE_ROWS = (("m_F", "m_F, full-access margin (nats)", "+.2f"),
                 ("delta_A", "Delta_A = m_source - m_full", "+.2f"),
                 ("delta_N", "Delta_N = m_control - m_full", "+.2f"),
                 ("delta_m", "Delta_m = m_source - m_control", "+.2f"),
                 ("accuracy_full", "accuracy, full (%)", ".2f"),
                 ("accuracy_control", "accuracy, control (%)", ".2f"),
                 ("accuracy_source", "accuracy, source mask (%)", ".2f"),
                 ("old_choice_change_pp", "old-choice change, source - control (pp)", "+.2f"),
                 ("r_obs_pp", "R_obs, old choices under control - under source mask (pp)", "+.2f"),
                 ("source_minus_control_pp", "accuracy, source - control (pp)", "+.2f"),
                 ("control_minus_full_pp", "accuracy, control - full (pp)", "+.2f"))
FORMAT_NAMES = {"segments": "segments encoded one by one", "whole": "prefix encoded at once",
                "raw": "raw text, encoded at once", "native": "native chat template, one user message"}


def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: the role-matched pairs, or OAKS questions (``datasets.oaks.items``)."""
    return oaks_items(config.get("study_config", {}).get("source")) if config.get("study") == "oaks" else PAIR_ITEMS


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    study = config.get("study_config", {})
    formats = summary.get("formats", {})
    oaks = config.get("study") == "oaks"
    title = ("OAKS candidate decisions" if oaks else "Prompt-format sensitivity" if len(formats) > 1
             else "Role-matched source influence")
    data = ((f"OAKS-schema demonstration set GENERATED from the PG-19 novel (not the OAKS data), "
             if study.get("source") == "demonstration" else f"OAKS file `{study.get('source')}`, ")
            + f"{summary['events']} changes of {summary.get('groups')} questions in the {study.get('split')} books; "
            "strata are books, questions are resampled within book ("
            if oaks else f"{summary['events']} {study.get('split')} events ({study.get('variant')} later sources; ")
    lines = [*heading(title, config, items(config)),
             data +
             f"{'; '.join(FORMAT_NAMES[f] for f in formats) or 'no format yet'}; no special tokens outside a chat "
             "template). Options scored teacher-forced, no continuation. Every estimate averages the "
             f"{max((f['patterns'] for f in formats.values()), default=0)} {'books' if oaks else 'wording patterns'} "
             f"equally; 95% intervals from {summary['draws']:,} draws "
             "of groups resampled within stratum, the same draws for every estimate and format.", ""]
    if timing:
        lines += [run_time(timing, unit="events x formats" if len(formats) > 1 else "events"), ""]
    if not summary["events"]:
        return "\n".join(lines + ["No event has all three conditions yet.", ""])
    lines += table_head(["estimate", *(f"{f} [95% CI]" for f in formats)])
    for key, label, fmt in ESTIMATE_ROWS:
        cells = [estimate(f["estimates"][key]["value"], f["estimates"][key]["ci"], fmt) for f in formats.values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| L.95, control - full (pp) | " + " | ".join(
        f"{f['estimates']['control_minus_full_pp']['lower_one_sided']:+.2f}" for f in formats.values()) + " |")
    if "native_minus_raw" in summary:
        c = summary["native_minus_raw"]
        lines += ["", "Native minus raw (paired, same draws): Delta_m "
                  f"{estimate(c['delta_m']['value'], c['delta_m']['ci'])} nats; full-access accuracy "
                  f"{estimate(c['accuracy_full_pp']['value'], c['accuracy_full_pp']['ci'])} pp."]
    for name, f in formats.items():
        crit = f["criteria"]
        yes = {k: "yes" if v else "no" for k, v in crit.items()}
        strata = "book" if oaks else "wording pattern"
        lines += ["", f"{name}: by {strata}, Delta_m (nats) / old-choice change (pp): " + ", ".join(
            f"{p} {v['delta_m']:+.2f} / {v['old_choice_change_pp']:+.2f}" for p, v in f["per_pattern"].items()) + "."]
        if oaks:
            lines += ["", f"{name}: the paper's OAKS requirements (seed L2098-2101): fewer obsolete choices "
                      f"(old-choice change interval below 0) {yes['effect_interval_excludes_0']}; L.95 above -3 pp "
                      f"{yes['l95_above_minus_3pp']}; favorable in at least {strata_needed(f['patterns'])} of "
                      f"{f['patterns']} books {yes['favorable_strata']} ({f['positive_patterns']}/"
                      f"{f['patterns']}). Passed: {f['passed']}/3."]
        else:
            lines += ["", f"{name}: the paper's three criteria (seed L1912-1924): Delta_m interval above 0 "
                      f"{yes['effect_interval_excludes_0']}; L.95 above -3 pp {yes['l95_above_minus_3pp']}; Delta_m > 0 "
                      f"in at least {strata_needed(f['patterns'])} of {f['patterns']} patterns "
                      f"{yes['favorable_strata']} ({f['positive_patterns']}/{f['patterns']}). "
                      f"Criteria passed: {f['passed']}/3."]
    lines += [""] + (paper_oaks_lines() if oaks else paper_format_lines() if len(formats) > 1 else paper_lines())
    return "\n".join(lines)


def paper_oaks_lines() -> list[str]:
    """The paper's OAKS rows (336 events from 116 questions in five books, seed L2118-2122)."""
    lines = ["The paper's OAKS rows (seed L2118-2122; accuracy %, obsolete-choice change source - control in pp):", "",
             *table_head(["paper checkpoint", "full", "control", "source", "obsolete change [95% CI]", "books"])]
    for name, (full, control, source, change, ci, books) in paper.OAKS.items():
        lines.append(f"| {name} | {full:.2f} | {control:.2f} | {source:.2f} | {estimate(change, ci)} | {books}/5 |")
    return lines + [""]


def paper_format_lines() -> list[str]:
    """The paper's raw/native contrasts (its three models, seed L1883-1890)."""
    lines = ["The paper's native - raw contrasts (seed L1883-1890; 320 events, seed 20260910):", "",
             *table_head(["paper checkpoint", "native - raw Delta_m [95% CI]", "native source - control (pp) [95% CI]",
                          "native L.95 (pp)"])]
    for name, (dm, dm_ci, acc, acc_ci, l95) in paper.FORMAT_CONTRASTS.items():
        lines.append(f"| {name} | {estimate(dm, dm_ci, '+.3f')} | {estimate(acc, acc_ci)} | {l95:+.2f} |")
    return lines + [""]


def paper_lines() -> list[str]:
    """The paper's own rows (its checkpoints, 320 events), labelled as such."""
    lines = ["The paper's rows (seed L1976-2000, 320 events; nats):", "",
             *table_head(["paper checkpoint", "m_F", "Delta_A [95% CI]", "Delta_N [95% CI]", "Delta_A - Delta_N"])]
    for name, (m_f, d_a, ci_a, d_n, ci_n, diff) in paper.DECOMPOSITION.items():
        lines.append(f"| {name} | {m_f:+.2f} | {estimate(d_a, ci_a)} | {estimate(d_n, ci_n)} | {diff:+.2f} |")
    return lines + [""]


def panel(run_dirs: list[Path | str], seed: int = 0, draws: int = DRAWS) -> list[dict[str, Any]]:
    """One row per run and prompt format: model, events, estimates and criteria, recomputed from its rows
    with the bootstrap seed its ``summary.json`` records (``seed`` for a run without one), so the panel
    and the run's own report agree."""
    out = []
    for d in run_dirs:
        config = json.loads((Path(d) / "config.json").read_text())
        recorded = Path(d) / "summary.json"
        run_seed = json.loads(recorded.read_text()).get("seed", seed) if recorded.exists() else seed
        summary = summarize(d, seed=run_seed, draws=draws)
        if not summary["events"]:
            raise ValueError(f"{d}: no event has all three conditions")
        for name, fmt in summary["formats"].items():
            out.append({"run": str(d), "study": config.get("study"), "model": config["model"]["name"],
                        "format": name, "seed": run_seed,
                        "events": summary["events"], **fmt})
    return out


def format_panel(rows: list[dict[str, Any]]) -> str:
    """The paper's panel table: this library's models (one row per run and format), then the paper's rows."""
    oaks = bool(rows) and all(r["study"] == "oaks" for r in rows)
    lines = [f"# {'OAKS candidate decisions' if oaks else 'Role-matched source influence'}: panel", "",
             f"Each row is one model's run ({', '.join(sorted({str(r['events']) for r in rows}))} events, recomputed "
             "at the seed its summary records); Delta_m in nats, the old-choice change (source - control) in pp, "
             "each with its 95% interval, L.95 in pp, favorable strata, and the paper's three criteria "
             + ("(fewer obsolete choices; L.95 above -3 pp; favorable in 4 of 5 books" if oaks else
                "(Delta_m interval above 0; L.95 above -3 pp; Delta_m > 0 in 6 of 8 patterns")
             + "; y/n in that order).", "",
             *table_head(["model", "m_F", "Delta_A [95% CI]", "Delta_N [95% CI]", "Delta_m [95% CI]",
                          "old-choice change (pp) [95% CI]", "L.95 (pp)", "favorable strata", "criteria passed"])]
    lines[2:2] = items_lines(json.loads((Path(r["run"]) / "config.json").read_text()) for r in rows)
    for r in rows:
        e = r["estimates"]
        dm, l95, strata, passed = criteria_cells(r)
        old = estimate(e["old_choice_change_pp"]["value"], e["old_choice_change_pp"]["ci"])
        lines.append(f"| {r['model']} ({r['format']}) | {e['m_F']['value']:+.2f} | "
                     f"{estimate(e['delta_A']['value'], e['delta_A']['ci'])} | "
                     f"{estimate(e['delta_N']['value'], e['delta_N']['ci'])} | {dm} | {old} | {l95} | {strata} | {passed} |")
    if oaks:
        return "\n".join(lines + ["", *paper_oaks_lines()])
    lines += ["", "The paper's checkpoints with all five columns (seed L1946-1950; accuracy %):", "",
              *table_head(["paper checkpoint", "full", "control", "source", "Delta_m [95% CI]", "patterns", "L.95"])]
    for name, (full, control, source, dm, ci, pos, l95) in paper.CONTROLLED.items():
        lines.append(f"| {name} | {full:.2f} | {control:.2f} | {source:.2f} | {estimate(dm, ci)} | {pos}/8 | "
                     f"{l95:+.2f} |")
    return "\n".join(lines + ["", *paper_lines()])


def write_panel(run_dirs: list[Path | str], out_dir: Path | str, seed: int = 0) -> str:
    """``kvprobe report source-influence RUN RUN ... --out DIR``: ``panel.json`` and ``panel.md``."""
    rows = panel(run_dirs, seed=seed)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "panel.json", json.dumps({"seed": seed, "rows": rows}, indent=2) + "\n")
    text = format_panel(rows)
    atomic_write_text(out / "panel.md", text)
    return text
