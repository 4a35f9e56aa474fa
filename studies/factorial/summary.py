"""Summary and report of a factorial run, recomputed from ``results.jsonl`` alone.

Per matrix (quantity, endpoint):

* absolute counts per (information, note, wording, condition) under the exact answer-field rule and the
  complete-correct rule, with the value categories, missing-unit flags, caps and both validity
  definitions (the paper's figures and tables tab:v35_quantity_*, tab:v35_endpoint_*);
* per cell and mask: mask minus its matched control in correct answers (a paired change over the record
  cases: count, corrections / reversals, interval) and in the candidate scores (mean change of the
  current-minus-old margin and of each log-probability, nats);
* the factor contrasts of :mod:`.contrasts` (pp) beside the paper's anchors (:mod:`.anchors`).

Intervals: percentile 95 % over 10,000 group-bootstrap draws of the base groups (a group's three variants
kept together), seeded with the paper's 20260919 (``PAPER_SEED``); one set of draws per matrix, shared by
every statistic.

``summary.json`` is a :class:`Summary`.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, PAPER_SEED, group_bootstrap_weights, paired_change
from kvprobe.studies.common.answers import echoes_note
from kvprobe.studies.common.detectors.strings import NOTE_SENTENCES
from kvprobe.studies.common.claims import verdict_text
from kvprobe.studies.common.formatting import count, pp_change
from kvprobe.studies.common.report import VERDICT_RULE, Items, corrections_reversals, estimate, format_change, heading, \
    run_time, small_sample_note, table_head, table_row
from kvprobe.studies.common.runner import read_rows
from kvprobe.studies.datasets.values import VALUE_CATEGORIES

from . import anchors
from .claims import CLAIMS, arm_correct, factorial_contrast
from .contrasts import CONTRAST_NAMES, Table, cells, factor_contrasts, mask_minus_control, outcome_table, \
    summarize_values
from .data import MATRICES, NARROW, conditions_of

#: The correctness rules the summary counts: the paper's primary exact answer-field rule, the v35
#: complete-correct rule, and the lenient first-mentioned-value rule (ours, for small models).
METRICS = ("exact", "complete", "lenient")
#: Candidate-score columns compared mask minus control (nats).
SCORES = ("margin", "logp_current", "logp_old")


def _cell_key(cell: tuple[str, str, str]) -> str:
    return "/".join(cell)


def summarize_matrix(rows: list[dict[str, Any]], matrix: str, seed: int, draws: int = DRAWS) -> dict[str, Any]:
    """Counts, per-cell mask-minus-control changes and factor contrasts of one matrix's rows."""
    narrow = NARROW[matrix]
    group_of = {r["record_case"]: r["group"] for r in rows}
    records = sorted(group_of)
    weights = group_bootstrap_weights([group_of[r] for r in records], n_draws=draws, seed=seed)
    tables: dict[str, Table] = {m: outcome_table(rows, m) for m in (*METRICS, *SCORES)}
    counts: dict[str, dict[str, Any]] = defaultdict(lambda: {"n": 0, **{m: 0 for m in METRICS},
                                                             "categories": Counter(), "missing_unit": 0,
                                                             "capped": 0, "answer_field_valid": 0,
                                                             "strict_single_field": 0, "note_echo": 0})
    for r in rows:
        c = counts[_cell_key((r["information"], r["note"], r["query"])) + "/" + r["condition"]]
        c["n"] += 1
        for key in (*METRICS, "missing_unit", "answer_field_valid", "strict_single_field"):
            c[key] += int(bool(r[key]))
        c["capped"] += int(r["stop_reason"] == "cap")
        c["note_echo"] += int(echoes_note(r["output"], NOTE_SENTENCES[r["note"]]))
        c["categories"][r["value_category"]] += 1
    changes: dict[str, dict[str, Any]] = {}
    for cell in cells(tables["exact"]):
        for mask in ("whole", narrow):
            entry: dict[str, Any] = {}
            for metric in METRICS:
                diff = [mask_minus_control(tables[metric], rec, cell, mask) for rec in records]
                present = ~np.isnan(diff)
                if present.any():
                    entry[metric] = paired_change(np.nan_to_num(diff), np.zeros(len(diff)), weights)
                    entry[metric]["n"] = int(present.sum())
            for score in SCORES:
                entry[score] = summarize_values([mask_minus_control(tables[score], rec, cell, mask)
                                                 for rec in records], weights, scale=1.0)
            changes[f"{_cell_key(cell)}/{mask}"] = entry
    return {
        "narrow": narrow, "conditions": list(conditions_of(matrix)), "records": len(records),
        "groups": len(set(group_of.values())), "rows": len(rows),
        "counts": {k: {**v, "categories": {cat: v["categories"].get(cat, 0) for cat in VALUE_CATEGORIES}}
                   for k, v in counts.items()},
        "changes": changes,
        "factors": {m: factor_contrasts(tables[m], records, narrow, weights) for m in METRICS},
    }


class Summary(TypedDict):
    """A factorial run's ``summary.json``."""

    seed: int
    draws: int
    #: Per matrix the run holds (quantity, endpoint): :func:`summarize_matrix`'s counts, cells and contrasts.
    matrices: dict[str, dict[str, Any]]


def summarize(out_dir: Path | str, seed: int = PAPER_SEED) -> Summary:
    """The summary of a run directory (:func:`summarize_matrix` for each matrix it holds)."""
    by_matrix: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in read_rows(out_dir):
        by_matrix[r["matrix"]].append(r)
    return {"seed": seed, "draws": DRAWS,
            "matrices": {m: summarize_matrix(by_matrix[m], m, seed) for m in MATRICES if m in by_matrix}}


# ----------------------------------------------------------------------------- report
def _nats(entry: dict[str, Any] | None) -> str:
    if not entry or entry.get("estimate") is None:
        return ""
    return estimate(entry["estimate"], entry["ci"], "+.3f")


#: The contrasts the paper's Qwen models move one way, by (matrix, contrast key): the claim of ``claims.py`` that
#: judges each. The paper's signs differ across models for every other contrast of :data:`anchors.FACTOR_ANCHORS`.
CONTRAST_CLAIMS = {("quantity", "scope"): "factorial.scope", ("quantity", "wording/both"): "factorial.explicit-request"}


def effect_cell(s: dict[str, Any], matrix: str, key: str, metric: str) -> str:
    """The verdict cell of contrast ``key`` of a matrix summary ``s`` under ``metric``: its claim of
    :data:`CONTRAST_CLAIMS` judged (``studies.common.claims.verdict_text``) on its measurement
    (``claims.factorial_contrast``: not testable when the matched controls, the paper's reference arms, never
    answer correctly under the rule). No verdict where the paper's models share no direction (the interval is
    described), where the contrast was not run, or with one group (the bootstrap has nothing to resample)."""
    entry = s["factors"][metric].get(key)
    if not entry or entry.get("estimate") is None:
        return "not run"
    if s["groups"] < 2:
        return "no verdict (one group)"
    claim = CONTRAST_CLAIMS.get((matrix, key))
    if claim is None:
        lo, hi = entry["ci"]
        ours = "interval includes 0" if lo <= 0 <= hi else "positive" if lo > 0 else "negative"
        return f"no shared direction in the paper (ours: {ours})"
    return verdict_text(next(c for c in CLAIMS if c.key == claim), factorial_contrast(s, key, metric, "control"))


def _anchor_text(items: list[anchors.Anchor]) -> str:
    return "; ".join(f"{m} {v:+.1f}" + (f" [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else "") for m, v, ci in items)


def _contrast_name(key: str, narrow: str) -> str:
    factor, _, mask = key.partition("/")
    name = CONTRAST_NAMES[factor].format(narrow=narrow)
    return name if not mask else f"{name} ({'masks averaged' if mask == 'both' else mask + ' mask'})"


def _effects(matrix: str, s: dict[str, Any]) -> list[str]:
    lines = table_head(("effect", "paper (30 cases per cell, 10 groups)", *[f"this model, {m}" for m in METRICS],
                        "verdict (exact)", "verdict (lenient, ours)"))
    for (m, key), items in anchors.FACTOR_ANCHORS.items():
        if m != matrix:
            continue
        ours = {metric: s["factors"][metric].get(key) for metric in METRICS}
        verdicts = [effect_cell(s, matrix, key, metric) for metric in ("exact", "lenient")]
        lines.append(table_row((_contrast_name(key, s["narrow"]), _anchor_text(items),
                                *[pp_change(ours[metric], "estimate", "ci") for metric in METRICS], *verdicts)))
    return lines


def _counts_table(s: dict[str, Any], metric: str) -> list[str]:
    conds = s["conditions"]
    lines = table_head(("information", "note", *[f"{c} (orig / complete)" for c in conds]))
    infos = list(dict.fromkeys(k.split("/")[0] for k in s["counts"]))
    notes = list(dict.fromkeys(k.split("/")[1] for k in s["counts"]))
    for info in infos:
        for note in notes:
            cells_ = []
            for c in conds:
                parts = [s["counts"].get(f"{info}/{note}/{w}/{c}") for w in ("original", "complete")]
                got = [p for p in parts if p is not None]
                cells_.append(" / ".join(str(p[metric]) for p in got) + (f" of {got[0]['n']}" if got else ""))
            if any(cells_):
                lines.append(table_row((info, note, *cells_)))
    return lines


def _echo_table(s: dict[str, Any]) -> list[str]:
    """Answers that loop on the note (``answers.echoes_note``) per cell and condition, original / complete question."""
    return _counts_table(s, "note_echo")


def _change_cell(change: dict[str, Any] | None) -> str:
    return f"{format_change(change)} ({corrections_reversals(change, '/')})" if change else ""


def _changes_table(s: dict[str, Any]) -> list[str]:
    lines = table_head(("information / note / wording", "mask", *[f"{m} (C/R)" for m in METRICS],
                        "delta m (nats)", "delta log p current", "delta log p old"))
    for key, e in s["changes"].items():
        cell, mask = key.rsplit("/", 1)
        lines.append(table_row((cell, mask, *[_change_cell(e.get(m)) for m in METRICS], _nats(e["margin"]),
                                _nats(e["logp_current"]), _nats(e["logp_old"]))))
    return lines


def _factors_table(s: dict[str, Any]) -> list[str]:
    lines = table_head(("change in (mask - control), pp", *[f"{m} [95% CI]" for m in METRICS]))
    for key in s["factors"]["exact"]:
        lines.append(table_row((_contrast_name(key, s["narrow"]),
                                *[pp_change(s["factors"][m][key], "estimate", "ci") for m in METRICS])))
    return lines


def _categories_table(s: dict[str, Any]) -> list[str]:
    lines = table_head(("wording", "condition", "n", *VALUE_CATEGORIES, "missing unit", "capped",
                        "answer-field valid", "strict single field"))
    for wording in ("original", "complete"):
        for cond in s["conditions"]:
            parts = [v for k, v in s["counts"].items() if k.endswith(f"/{wording}/{cond}")]
            if not parts:
                continue
            total = lambda key: sum(p[key] for p in parts)  # noqa: E731
            cats = [sum(p["categories"][c] for p in parts) for c in VALUE_CATEGORIES]
            lines.append(table_row((wording, cond, total("n"), *cats, total("missing_unit"), total("capped"),
                                    total("answer_field_valid"), total("strict_single_field"))))
    return lines


def _count(c: dict[str, Any]) -> str:
    return f"{count(c['exact'], c['n'])} (lenient {c['lenient']})"


def _cell_anchors(s: dict[str, Any]) -> list[str]:
    """The paper's quoted quantity cells beside ours (counts out of the cell's record cases)."""
    out = []
    key = "stated/notebook/original"
    got = {c: s["counts"].get(f"{key}/{c}") for c in s["conditions"]}
    if all(got.values()):
        ours = ", ".join(f"{c} {_count(got[c])}" for c in ("whole", "whole-control", "number", "number-control"))
        paper = "; ".join(f"{m} whole {w}/30 (control {wc}), number {n}/30 (control {nc})"
                          for m, w, wc, n, nc in anchors.STATED_NOTEBOOK_ORIGINAL)
        out.append(f"- B stated, notebook, original question. Paper (complete answers): {paper}. "
                   f"This model: {ours}.")
        whole, number = s["changes"].get(f"{key}/whole"), s["changes"].get(f"{key}/number")
        if whole and number:
            paper = "; ".join(f"{m} log p(current) {c:+.3f}, log p(old) {o:+.3f}, number mask log p(current) {n:+.3f}"
                              for m, c, o, n in anchors.STATED_NOTEBOOK_ORIGINAL_SCORES)
            out.append(f"- Same cell, whole mask minus control, nats. Paper: {paper}. This model: log p(current) "
                       f"{_nats(whole['logp_current'])}, log p(old) {_nats(whole['logp_old'])}, delta m "
                       f"{_nats(whole['margin'])}; number mask log p(current) {_nats(number['logp_current'])}.")
    for note in ("notebook", "shelf"):
        w, wc = (s["counts"].get(f"refers-to-a/{note}/original/{c}") for c in ("whole", "whole-control"))
        if w and wc:
            paper = "; ".join(f"{m} {a}/30 (control {b})" for m, n_, a, b in anchors.REFERS_ORIGINAL_WHOLE
                              if n_ == note)
            out.append(f"- B refers to A, {note}, original question, whole mask. Paper: {paper}. This model: "
                       f"{_count(w)}; control {_count(wc)}.")
    return out


_TITLES = {"quantity": "Quantity matrix (deadline groups, values in hours)",
           "endpoint": "Endpoint matrix (api_endpoint groups)"}


#: Where this study's items come from (the report's Items line).
ITEMS = Items("reconstruction",
              "quantity and endpoint histories crossed with information, wording and note; our texts for the "
              "paper's factors")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None) -> str:
    study = config["study_config"]
    out = heading("Quantity and endpoint factorial", config, ITEMS)
    if timing:
        out += [run_time(timing, unit="histories", machine=True), ""]
    out += [f"Design: matrices {', '.join(study['matrices'])}; groups per family: {study['n_groups'] or 10} (x 3 "
            f"replacing variants); information {', '.join(study['information'])} (quantity only); notes "
            f"{', '.join(study['notes'])} (x16); wordings {', '.join(study['wordings'])}; five access conditions; "
            f"{study['max_new_tokens']}-token greedy answers. Exact = the answer-field parser with case- and "
            "whitespace-normalized equality (the paper's primary); complete = one JSON object, optionally in one "
            "clean fence, right number and accepted unit form, EOS; lenient (ours) = the first of the history's "
            "values the answer mentions is the current one (units included). Intervals: 95 % percentile, "
            f"{summary['draws']:,} group-bootstrap draws, seed {summary['seed']}. Paper numbers are the paper's "
            "models (Qwen3-4B/8B/32B, Llama-3.2-3B), not this one.", ""]
    for matrix, s in summary["matrices"].items():
        out += [f"## {_TITLES[matrix]}", "",
                f"{s['rows']} rows: {s['records']} record cases from {s['groups']} groups.", "",
                *small_sample_note(s["groups"], "groups"),
                "### The paper's effects at this size", "",
                f"Verdicts against the matched controls (the paper's reference arms): {VERDICT_RULE}. The lenient "
                "rule is ours; its verdict reads the same interval rule. Controls correct: "
                + ", ".join(f"{m} {'/'.join(map(str, arm_correct(s, m, 'control')))}" for m in METRICS) + ".", "",
                *_effects(matrix, s), ""]
        if matrix == "quantity":
            cell_lines = _cell_anchors(s)
            if cell_lines:
                out += ["Cells the paper quotes:", "", *cell_lines, ""]
        for metric in METRICS:
            out += [f"### Correct answers per cell, {metric} rule (original / complete question)", "",
                    *_counts_table(s, metric), ""]
        if any(c.get("note_echo") for c in s["counts"].values()):
            out += ["### Answers that loop on the note (its sentence at least twice; original / complete question)",
                    "", *_echo_table(s), ""]
        out += ["### Mask minus matched control per cell", "",
                "Change in correct answers (paired over record cases; C/R = corrections/reversals) and mean "
                "candidate-score changes (nats; margin = log p(current) - log p(old)).", "",
                *_changes_table(s), "",
                "### Factor contrasts", "",
                "Change in (mask - control) when one factor changes, averaged within record case over the other "
                "factors' levels (and over both masks where marked), pp.", "", *_factors_table(s), "",
                "### Value categories, missing units, caps and validity (summed over information and notes)", "",
                *_categories_table(s), ""]
    return "\n".join(out).rstrip("\n") + "\n"
