"""Summary and report of a detection run, recomputed from ``results.jsonl`` alone.

* JSON detectors, per (dataset, split, detector): decisions, every parse or field
  failure by reason (nothing dropped), capped outputs, true and false triggers with
  and without the lexical filter, and accuracy (unresolved = no trigger) with a
  95 % interval over whole groups; decisions per variant on the test split.
* YES/NO score, per (dataset, split): AUC over all pairs (and role swaps vs role
  confirmations on the records) with group-bootstrap intervals; thresholds fitted
  on the development split for balanced accuracy (ties to the fewest actions)
  against the fixed 0.5, always and never baselines, applied to the test split.
* Natural text (``oaks`` rows, :mod:`.natural_summary`): TP/FP/FN/TN and accuracy per asserted-value
  variant with question-group intervals, recall / false triggers against source annotations when the
  file has them, and (``matched_scores``) the detection x action join with matched-scores oaks runs.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import (DRAWS, MIN_RESAMPLED_UNITS, PAPER_SEED, bootstrap_auc, bootstrap_mean,
                                    group_bootstrap_weights, percentile_interval, small_sample)
from kvprobe.studies.common.formatting import cap_count, proportion_pct
from kvprobe.studies.common.detectors.text import REPLACEMENT, TEXT_DETECTORS, YES_NO
from kvprobe.studies.datasets.oaks import items as oaks_items
from kvprobe.studies.common.report import Items, estimate, small_sample_note, heading, interval, model_name, run_time, table_head
from kvprobe.studies.common.runner import read_rows
from .calibration import calibrate
from .natural_summary import DetectionAction, Natural, action_report, detection_action, natural_report, \
    summarize_natural
from .natural_action import NaturalAction, natural_action, natural_action_report


def _by(rows: list[dict[str, Any]], *keys: str) -> dict[tuple, list[dict[str, Any]]]:
    out: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        out[tuple(r[k] for k in keys)].append(r)
    return out


class TextDetectorStats(TypedDict):
    """:func:`text_detector_cell`: one text detector's rows; ``filtered_*``: with the lexical filter."""

    n: int
    positives: int
    negatives: int
    decisions: dict[str, int]
    parse: dict[str, int]
    capped: int
    true_triggers: int
    false_triggers: int
    accuracy: float
    accuracy_ci: list[float]
    filtered_true_triggers: int
    filtered_false_triggers: int
    filtered_accuracy: float
    filtered_accuracy_ci: list[float]
    #: Per relation: the decisions' counts.
    per_relation: dict[str, dict[str, int]]


class TextDetectorCell(TextDetectorStats):
    """A summary's ``text_detectors`` entry: one (dataset, split, detector)."""

    dataset: str
    split: str
    detector: str


class Auc(TypedDict):
    """``readouts.stats.bootstrap_auc``'s entry of one score: the AUC, its interval and one-sided lower bound."""

    auc: float
    lo: float
    hi: float
    lower_one_sided: float


class _YesNoKeys(TypedDict):
    n: int
    single_token: bool
    score_range: list[float]
    distinct_scores: int
    groups: int


class YesNoStats(_YesNoKeys, total=False):
    """:func:`yes_no_cell`: the YES/NO score's rows; the AUCs where both labels (and role pairs) occur."""

    auc: Auc
    role_auc: Auc


class YesNoCell(YesNoStats):
    """A summary's ``yes_no`` entry: one (dataset, split)."""

    dataset: str
    split: str


def text_detector_cell(rows: list[dict[str, Any]], seed: int, draws: int) -> TextDetectorStats:
    """Decision counts, failures and accuracy of one detector on one (dataset, split)."""
    labels = np.array([r["label"] for r in rows])
    cell: dict[str, Any] = {"n": len(rows), "positives": int(labels.sum()), "negatives": int((1 - labels).sum()),
                            "decisions": dict(Counter(r["decision"] for r in rows)),
                            "parse": dict(Counter(r["parse"] for r in rows)),
                            "capped": cap_count(rows)}
    weights = group_bootstrap_weights([r["group"] for r in rows], n_draws=draws, seed=seed)
    for key in ("decision", "filtered"):
        fired = np.array([r[key] == REPLACEMENT for r in rows])
        correct = (fired == labels.astype(bool)).astype(float)
        prefix = "" if key == "decision" else "filtered_"
        cell[f"{prefix}true_triggers"] = int((fired & (labels == 1)).sum())
        cell[f"{prefix}false_triggers"] = int((fired & (labels == 0)).sum())
        cell[f"{prefix}accuracy"] = float(correct.mean())
        cell[f"{prefix}accuracy_ci"] = percentile_interval(bootstrap_mean(correct, weights))
    cell["per_relation"] = {rel: dict(Counter(r["decision"] for r in rs))
                            for (rel,), rs in sorted(_by(rows, "relation").items())}
    return cell


def yes_no_cell(rows: list[dict[str, Any]], seed: int, draws: int) -> YesNoStats:
    """AUC of the YES/NO score (all pairs; role swaps vs role confirmations on the records)."""
    scores = np.array([r["score"] for r in rows])
    cell: dict[str, Any] = {"n": len(rows), "single_token": all(r["single_token"] for r in rows),
                            "score_range": [float(scores.min()), float(scores.max())],
                            "distinct_scores": int(len(np.unique(scores))), "groups": len({r["group"] for r in rows})}
    labels = [r["label"] for r in rows]
    if 0 < sum(labels) < len(labels):
        cell["auc"] = bootstrap_auc({"yes-no": scores}, labels, [r["group"] for r in rows], n_draws=draws,
                                    seed=seed)["auc"]["yes-no"]
    role = [r for r in rows if r["relation"] in ("role_swap", "role_confirmation")]
    if role:
        cell["role_auc"] = bootstrap_auc({"yes-no": [r["score"] for r in role]}, [r["label"] for r in role],
                                         [r["group"] for r in role], n_draws=draws, seed=seed)["auc"]["yes-no"]
    return cell


class _SummaryKeys(TypedDict):
    text_detectors: list[TextDetectorCell]
    yes_no: list[YesNoCell]
    calibration: dict[str, Any]
    draws: int
    seed: int
    rows: int


class Summary(_SummaryKeys, total=False):
    """A detection run's ``summary.json``."""

    #: Runs with OAKS rows: the natural-text detections (:func:`.natural_summary.summarize_natural`).
    natural: Natural
    #: With ``matched_scores``: the detections joined with those runs' outcomes, and (OAKS) their full analysis.
    detection_action: list[DetectionAction]
    natural_action: NaturalAction


def summarize(out_dir: Path | str, seed: int = PAPER_SEED, draws: int = DRAWS, matched_scores: str | None = None,
              join_rule: str = "complete") -> Summary:
    """The run's summary; ``matched_scores``: comma-separated matched-scores ``oaks`` run folders (one per
    generator) whose full / mask outcomes are joined with the oaks detections
    (:func:`.natural_summary.detection_action`, graded by ``join_rule``) and analysed in full
    (:func:`.natural_action.natural_action`: equal-coverage excess, coverage curves, source relations,
    leave-one-book-out; its ``sources`` record the folders as given)."""
    summary = _detections(out_dir, seed, draws)
    if matched_scores:
        dirs = [d for d in matched_scores.split(",") if d]
        summary["detection_action"] = detection_action(out_dir, dirs, join_rule)
        if any(r["dataset"] == "oaks" for r in read_rows(out_dir)):
            summary["natural_action"] = natural_action(out_dir, dirs, join_rule, seed=seed)
    return summary


def _detections(out_dir: Path | str, seed: int, draws: int) -> dict[str, Any]:
    """The summary of the detections alone (no join)."""
    rows = list(read_rows(out_dir))
    natural = [r for r in rows if r["dataset"] == "oaks"]
    rows = [r for r in rows if r["dataset"] != "oaks"]
    text, yes_no = [], []
    for (dataset, split, detector), rs in sorted(_by(rows, "dataset", "split", "detector").items()):
        if detector in TEXT_DETECTORS:
            text.append({"dataset": dataset, "split": split, "detector": detector,
                         **text_detector_cell(rs, seed, draws)})
        elif detector == YES_NO:
            yes_no.append({"dataset": dataset, "split": split, **yes_no_cell(rs, seed, draws)})
    calibration = {}
    for (dataset, detector), rs in _by(rows, "dataset", "detector").items():
        dev = [r for r in rs if r["split"] == "dev"]
        test = [r for r in rs if r["split"] == "test"]
        if detector == YES_NO and dev and test:
            calibration[dataset] = calibrate(
                [r["score"] for r in dev], [r["score"] for r in test], dev_groups=[r["group"] for r in dev],
                test_groups=[r["group"] for r in test], dev_labels=[r["label"] for r in dev],
                test_labels=[r["label"] for r in test], n_draws=draws, seed=seed)
    out = {"text_detectors": text, "yes_no": yes_no, "calibration": calibration, "draws": draws, "seed": seed,
           "rows": len(rows) + len(natural)}
    if natural:
        out["natural"] = summarize_natural(natural, seed, draws)
    return out


def _text_table(cells: list[dict[str, Any]]) -> list[str]:
    lines = table_head(["dataset", "split", "detector", "n", "replacement / no / unresolved", "true triggers",
                        "false triggers", "accuracy % [95% CI]", "with lexical filter: true / false",
                        "parse failures (reason: count)", "capped"])
    for c in cells:
        d = c["decisions"]
        fails = ", ".join(f"{k}: {v}" for k, v in sorted(c["parse"].items()) if k != "ok") or "none"
        lines.append(
            f"| {c['dataset']} | {c['split']} | {c['detector']} | {c['n']} | {d.get(REPLACEMENT, 0)} / "
            f"{d.get('no_replacement', 0)} / {d.get('unresolved', 0)} | {c['true_triggers']}/{c['positives']} | "
            f"{c['false_triggers']}/{c['negatives']} | {proportion_pct(c['accuracy'], c['accuracy_ci'])} | "
            f"{c['filtered_true_triggers']} / {c['filtered_false_triggers']} | {fails} | {c['capped']} |")
    return lines


def _auc(a: dict[str, Any] | None) -> str:
    return estimate(a["auc"], (a["lo"], a["hi"]), ".3f") if a else ""


#: Where the record and quantity pairs come from (the report's Items line).
ITEMS = Items("reconstruction", "record pairs of the synthetic record histories and of the quantity task: our "
              "templates for the paper's families and the quantity task's quoted strings")


def items(config: dict[str, Any]) -> list[Items]:
    """Where a run's pairs come from: the record and quantity pairs, and OAKS questions when the run has them."""
    sc = config["study_config"]
    return [*([ITEMS] if {"records", "quantity"} & set(sc["datasets"]) else []),
            *([oaks_items(sc["oaks_source"])] if "oaks" in sc["datasets"] else [])]


def _against_chance(a: dict[str, Any] | None) -> str:
    """Where an AUC's 95% interval lies against chance (0.5)."""
    if not a:
        return "undefined"
    if a["hi"] < 0.5:
        return f"significantly below chance ({interval((a['lo'], a['hi']), '.3f')})"
    if a["lo"] > 0.5:
        return f"significantly above chance ({interval((a['lo'], a['hi']), '.3f')})"
    return f"not distinguishable from chance ({interval((a['lo'], a['hi']), '.3f')})"


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    sc = config["study_config"]
    lines = [*heading("Detection", config, items(config)),
             f"Detectors on record pairs: the paper's direct, expanded and asserted-value JSON classifiers "
             f"(greedy, at most {sc['max_new_tokens']} tokens, verbatim prompts) and a YES/NO score "
             f"(P(YES) / (P(YES) + P(NO)) of the answer's first token(s); the paper's pair-score prompt and system "
             "message, byte for byte). Datasets: "
             f"{', '.join(sc['datasets'])}"
             + (f"; splits {', '.join(sc['splits'])}" if {"records", "quantity"} & set(sc["datasets"]) else "")
             + (f" (oaks: the {sc['oaks_split']} books of {sc['oaks_source']}, the asserted-value prompt plain and "
                f"question-conditioned, at most {sc['oaks_max_new_tokens']} tokens)" if "oaks" in sc['datasets'] else "")
             + f". Unresolved verdicts (parse or field "
             f"failures) never trigger and are counted by reason. Intervals: {summary['draws']:,} draws of whole "
             f"groups, seed {summary['seed']}.", ""]
    if timing:
        lines += [run_time(timing, "pairs", machine=True), ""]
    if summary["text_detectors"]:
        lines += ["## JSON classifiers", ""] + _text_table(summary["text_detectors"]) + [""]
    if summary["yes_no"]:
        lines += ["## YES/NO score", "", *table_head(["dataset", "split", "n", "AUC [95% CI]",
                                                        "role swap vs role confirmation AUC", "score range",
                                                        "distinct scores", "single tokens"])]
        for c in summary["yes_no"]:
            lo, hi = c["score_range"]
            lines.append(f"| {c['dataset']} | {c['split']} | {c['n']} | {_auc(c.get('auc'))} | "
                         f"{_auc(c.get('role_auc'))} | {lo:.4f} - {hi:.4f} | {c['distinct_scores']} | "
                         f"{'yes' if c['single_token'] else 'no'} |")
        lines += ["", "Against chance (AUC 0.5): " + "; ".join(
            f"{c['dataset']} {c['split']} {_against_chance(c.get('auc'))}" for c in summary["yes_no"])
            + ". An AUC significantly below 0.5 ranks replacements below non-replacements: the score carries "
            "signal in the wrong direction, so acting on high scores, as the paper's rule does, flags "
            "non-replacements first.", ""]
        few = [c for c in summary["yes_no"] if small_sample(c.get("groups", MIN_RESAMPLED_UNITS))]
        if few:
            lines += small_sample_note(min(c["groups"] for c in few), "groups", "intervals of "
                                       + ", ".join(f"{c['dataset']} {c['split']} ({c['groups']} groups)" for c in few))
    for dataset, cal in summary["calibration"].items():
        lines += [f"## YES/NO thresholds on {dataset} (fitted on dev, applied to test)", "",
                  *table_head(["rule", "threshold", "dev balanced accuracy", "test actions",
                               "test balanced accuracy [conditional 95% CI]", "[joint 95% CI, threshold refit]",
                               "notes"])]
        for name, r in cal["rules"].items():
            t = "-inf" if r["threshold"] is None else f"{r['threshold']:.6g}"
            cond = r["conditional"].get("balanced_accuracy")
            joint = r.get("joint", {}).get("balanced_accuracy")
            fmt = (lambda ci: interval(ci, ".3f") if ci else "")
            dev_ba = r.get("dev_balanced_accuracy")
            lines.append(f"| {name} | {t} | {'' if dev_ba is None else f'{dev_ba:.3f}'} | {r['test_actions']} | "
                         f"{r['test_balanced_accuracy']:.3f} {fmt(cond)} | {fmt(joint)} | {'; '.join(r['notes'])} |")
        lines.append("")
    if "natural" in summary:
        lines += natural_report(summary["natural"], model_name(config))
    lines += action_report(summary.get("detection_action", []))
    lines += natural_action_report(summary.get("natural_action", {}))
    return "\n".join(lines)
