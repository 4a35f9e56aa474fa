"""Summary tables of the natural-text (``oaks``) detection rows, and the detection x action join.

* :func:`confusion_cell`: TP / FP / FN / TN and accuracy per detector variant, with a 95 % interval
  resampling whole questions (their three pair variants together), as tab:v5_natural (seed L2916-2931).
* :func:`annotation_cells`: on the positive pairs of annotated questions, recall on ``change`` pairs
  and false triggers on ``compatible`` pairs (``insufficient`` unscored), under the paper's two
  exclusion rules (seed L2990-3000, tab:v39_natural_reviewed).
* :func:`detection_action`: per detector variant, the positive questions split into detected and
  missed, and per generator run (a matched-scores ``oaks`` run) full-access vs old-mask outcomes
  (both correct, corrections, reversals, both wrong), as the paper's natural_detection_action table
  (app:natural_join, seed L2943-2962).

Only a ``replacement`` decision triggers; ``unresolved`` (missing or invalid extraction) never does.
"""

from __future__ import annotations

from collections import Counter
from functools import partial
from pathlib import Path
from typing import Any, Sequence, TypedDict

import json
import numpy as np

from kvprobe.readouts.stats import DRAWS, PAPER_SEED, PairedChange, bootstrap_mean, group_bootstrap_weights, \
    paired_change, percentile_interval
from kvprobe.studies.common.detectors.text import REPLACEMENT
from kvprobe.studies.common.formatting import cap_count, proportion_pct, share
from kvprobe.studies.common.report import model_name, table_head, table_row
from kvprobe.studies.common.runner import CONFIG, read_rows
from .natural import NATURAL_DETECTORS, PLAIN, WITH_QUESTION

#: tab:v5_natural (seed L2925-2928): (model, detector) -> (TP, FP, FN, TN, accuracy %) of 116 + 232 pairs.
PAPER_NATURAL = {("Qwen3-4B", "asserted-value"): (35, 11, 81, 221, 73.6),
                 ("Qwen3-4B", WITH_QUESTION): (71, 17, 45, 215, 82.2),
                 ("Qwen3-8B", "asserted-value"): (59, 28, 57, 204, 75.6),
                 ("Qwen3-8B", WITH_QUESTION): (78, 8, 38, 224, 86.8)}
#: tab:v39_natural_reviewed (seed L3180-3203): (exclusion, model, detector) -> (TP, FN, FP, TN); "none" is
#: the 22/53 resolvable pairs, "either" the 12/23 left after excluding ambiguity in either judgment.
PAPER_ANNOTATED = {("none", "Qwen3-4B", "asserted-value"): (10, 12, 18, 35),
                   ("none", "Qwen3-8B", "asserted-value"): (13, 9, 28, 25),
                   ("none", "Qwen3-4B", WITH_QUESTION): (18, 4, 35, 18),
                   ("none", "Qwen3-8B", WITH_QUESTION): (21, 1, 31, 22),
                   ("either", "Qwen3-4B", "asserted-value"): (7, 5, 9, 14),
                   ("either", "Qwen3-8B", "asserted-value"): (8, 4, 14, 9),
                   ("either", "Qwen3-4B", WITH_QUESTION): (10, 2, 17, 6),
                   ("either", "Qwen3-8B", WITH_QUESTION): (11, 1, 14, 9)}
#: Annotation exclusion rules: name -> which ambiguous pairs are dropped (seed L2993-2998).
EXCLUSIONS = {"none": "keep every annotated pair",
              "either": "drop pairs ambiguous in either judgment (the union)",
              "attribute_change": "drop only pairs ambiguous about attribute change"}
#: Outcomes of a question under full access vs the old mask.
OUTCOMES = ("both_correct", "corrections", "reversals", "both_wrong")


def fired(row: dict[str, Any]) -> bool:
    """Whether a detector row triggers replacement (only a ``replacement`` decision does)."""
    return row["decision"] == REPLACEMENT


class Confusion(TypedDict):
    """:func:`confusion`: TP / FP / FN / TN counts."""

    tp: int
    fp: int
    fn: int
    tn: int


class ConfusionCell(Confusion):
    """One natural detector's rows (:func:`confusion_cell`, with its ``detector``): counts, accuracy and its
    interval over whole questions, false triggers per negative relation, decisions, parse outcomes, capped."""

    detector: str
    n: int
    questions: int
    positives: int
    negatives: int
    accuracy: float
    accuracy_ci: list[float]
    false_triggers_by_negative: dict[str, int]
    decisions: dict[str, int]
    parse: dict[str, int]
    capped: int


class AnnotationCell(Confusion):
    """One (exclusion rule, detector) against the source annotations (:func:`annotation_cells`)."""

    exclusion: str
    detector: str
    insufficient: int
    correct: int
    scored: int
    by_description: dict[str, int]


class QuestionEffect(TypedDict):
    """:func:`question_effect`: adding the question, paired changes in true triggers, false triggers and correct
    decisions."""

    true_triggers: PairedChange
    false_triggers: PairedChange
    correct: PairedChange


class Natural(TypedDict):
    """:func:`summarize_natural`: a detection summary's ``natural`` (its OAKS rows)."""

    confusion: list[ConfusionCell]
    question_effect: QuestionEffect | None
    annotations: list[AnnotationCell]
    annotated_questions: int


class OutcomeCounts(TypedDict):
    """Full-access against old-mask outcomes of some questions (both correct, corrected, reversed, both wrong)."""

    n: int
    both_correct: int
    corrections: int
    reversals: int
    both_wrong: int


class DetectionAction(TypedDict):
    """:func:`detection_action`: one (generator run, detector) with the detected and the missed positives'
    outcomes, and the positives that run lacks."""

    generator: str
    run: str
    detector: str
    rule: str
    unmatched: int
    detected: OutcomeCounts
    missed: OutcomeCounts


def confusion(labels: Sequence[int], triggers: Sequence[bool]) -> Confusion:
    """TP / FP / FN / TN counts.

    >>> confusion([1, 1, 0, 0], [True, False, True, False])
    {'tp': 1, 'fp': 1, 'fn': 1, 'tn': 1}
    """
    y, t = np.asarray(labels, dtype=bool), np.asarray(triggers, dtype=bool)
    return {"tp": int((y & t).sum()), "fp": int((~y & t).sum()), "fn": int((y & ~t).sum()),
            "tn": int((~y & ~t).sum())}


def confusion_cell(rows: list[dict[str, Any]], seed: int = PAPER_SEED, draws: int = DRAWS) -> dict[str, Any]:
    """Confusion counts and accuracy of one detector's rows, the interval over whole question groups."""
    labels = [int(r["label"]) for r in rows]
    triggers = [fired(r) for r in rows]
    correct = (np.asarray(labels, dtype=bool) == np.asarray(triggers)).astype(float)
    weights = group_bootstrap_weights([r["group"] for r in rows], n_draws=draws, seed=seed)
    return {"n": len(rows), "questions": len({r["group"] for r in rows}), "positives": sum(labels),
            "negatives": len(labels) - sum(labels), **confusion(labels, triggers),
            "accuracy": float(correct.mean()), "accuracy_ci": percentile_interval(bootstrap_mean(correct, weights)),
            "false_triggers_by_negative": {rel: sum(fired(r) for r in rows if r["relation"] == rel)
                                           for rel in sorted({r["relation"] for r in rows if not r["label"]})},
            "decisions": dict(Counter(r["decision"] for r in rows)),
            "parse": dict(Counter(r["parse"] for r in rows)),
            "capped": cap_count(rows)}


def _kept(row: dict[str, Any], exclusion: str) -> bool:
    change_ambiguous = row.get("attribute_change_alternative") is not None
    either = change_ambiguous or row.get("description_alternative") is not None
    return {"none": True, "either": not either, "attribute_change": not change_ambiguous}[exclusion]


def annotation_cells(rows: list[dict[str, Any]]) -> list[AnnotationCell]:
    """Per (exclusion rule, detector): recall on annotated changes (TP/FN) and false triggers on compatible
    pairs (FP/TN) among the positive pairs; insufficient-context pairs are counted but unscored.
    Empty when no row carries an annotation."""
    annotated = [r for r in rows if r["relation"] == "positive" and r.get("attribute_change") is not None]
    out = []
    for exclusion in EXCLUSIONS:
        for detector in NATURAL_DETECTORS:
            rs = [r for r in annotated if r["detector"] == detector and _kept(r, exclusion)]
            if not rs:
                continue
            scored = [r for r in rs if r["attribute_change"] in ("change", "compatible")]
            c = confusion([r["attribute_change"] == "change" for r in scored], [fired(r) for r in scored])
            out.append({"exclusion": exclusion, "detector": detector, **c,
                        "insufficient": sum(r["attribute_change"] == "insufficient" for r in rs),
                        "correct": c["tp"] + c["tn"], "scored": len(scored),
                        "by_description": {d: sum(fired(r) for r in scored if r["description"] == d)
                                           for d in sorted({r["description"] for r in scored})}})
    return out


def question_effect(rows: list[dict[str, Any]], seed: int = PAPER_SEED, draws: int = DRAWS) -> QuestionEffect | None:
    """Adding the question, paired on the pairs both variants read: the change in true triggers (on
    positives), false triggers (on negatives) and correct decisions, each with a 95 % interval over whole
    questions (:func:`kvprobe.readouts.stats.paired_change`). None unless both variants ran.

    The paper's effect (tab:v5_natural): Qwen3-4B +36 true and +6 false triggers; Qwen3-8B +19 and -20.
    """
    by = {(r["case_id"], r["detector"]): r for r in rows}
    cases = [r for r in rows if r["detector"] == PLAIN and (r["case_id"], WITH_QUESTION) in by]
    if not cases:
        return None
    out = {}
    for name, keep in (("true_triggers", 1), ("false_triggers", 0), ("correct", None)):
        rs = [r for r in cases if keep is None or r["label"] == keep]
        weights = group_bootstrap_weights([r["group"] for r in rs], n_draws=draws, seed=seed)
        value = (lambda r: fired(r) == bool(r["label"])) if keep is None else fired
        out[name] = paired_change([value(by[(r["case_id"], WITH_QUESTION)]) for r in rs], [value(r) for r in rs],
                                  weights)
    return out


def summarize_natural(rows: list[dict[str, Any]], seed: int = PAPER_SEED, draws: int = DRAWS) -> Natural:
    """The natural-text section of the detection summary (``rows``: the run's ``oaks`` rows)."""
    cells = [{"detector": d, **confusion_cell([r for r in rows if r["detector"] == d], seed, draws)}
             for d in NATURAL_DETECTORS if any(r["detector"] == d for r in rows)]
    return {"confusion": cells, "question_effect": question_effect(rows, seed, draws),
            "annotations": annotation_cells(rows),
            "annotated_questions": len({r["group"] for r in rows if r.get("attribute_change") is not None})}


# ----------------------------------------------------------------------------- detection x action


def generator_outcomes(run_dir: str | Path, rule: str = "complete") -> dict[str, tuple[bool, bool]]:
    """A matched-scores ``oaks`` run's (full correct, mask correct) under ``rule`` per event (``case_id``)."""
    by: dict[str, dict[str, bool]] = {}
    for r in read_rows(run_dir):
        if r.get("dataset") == "oaks" and r["condition"] in ("full", "mask"):
            by.setdefault(r["case_id"], {})[r["condition"]] = bool(r[rule])
    return {case: (correct["full"], correct["mask"]) for case, correct in by.items() if len(correct) == 2}


def outcome_counts(pairs: Sequence[tuple[bool, bool]]) -> OutcomeCounts:
    """Both correct / corrections (mask right, full wrong) / reversals / both wrong of (full, mask) pairs.

    >>> outcome_counts([(True, True), (False, True), (True, False), (False, False), (False, True)])
    {'n': 5, 'both_correct': 1, 'corrections': 2, 'reversals': 1, 'both_wrong': 1}
    """
    return {"n": len(pairs), "both_correct": sum(f and m for f, m in pairs),
            "corrections": sum(m and not f for f, m in pairs), "reversals": sum(f and not m for f, m in pairs),
            "both_wrong": sum(not f and not m for f, m in pairs)}


def detection_action(detection_run_dir: str | Path, matched_scores_oaks_run_dirs: str | Path | Sequence[str | Path],
                     rule: str = "complete") -> list[DetectionAction]:
    """Per (generator run, detector variant, detected/missed): the positive questions' full-access vs old-mask
    outcomes. Questions are joined by their event id (``question_id@chunk``, both studies' selection);
    positives the generator run lacks are counted as ``unmatched``.

    Example: ``detection_action("runs/detection", ["runs/matched-scores-oaks"])[0]["detected"]["corrections"]``.
    """
    dirs = [matched_scores_oaks_run_dirs] if isinstance(matched_scores_oaks_run_dirs, (str, Path)) \
        else list(matched_scores_oaks_run_dirs)
    positives = [r for r in read_rows(detection_run_dir) if r["dataset"] == "oaks" and r["relation"] == "positive"]
    out = []
    for run_dir in dirs:
        outcomes = generator_outcomes(run_dir, rule)
        config_file = Path(run_dir) / CONFIG
        generator = model_name(json.loads(config_file.read_text())) if config_file.is_file() else str(run_dir)
        for detector in NATURAL_DETECTORS:
            rs = [r for r in positives if r["detector"] == detector]
            if not rs:
                continue
            cell: dict[str, Any] = {"generator": generator, "run": str(run_dir), "detector": detector, "rule": rule,
                                    "unmatched": sum(r["event"] not in outcomes for r in rs)}
            for part, want in (("detected", True), ("missed", False)):
                cell[part] = outcome_counts([outcomes[r["event"]] for r in rs
                                             if fired(r) == want and r["event"] in outcomes])
            out.append(cell)
    return out


# ----------------------------------------------------------------------------- report

#: This report's shares carry no percent sign: ``12.5 (1)``.
_pc = partial(share, percent="")


def natural_report(natural: dict[str, Any], model: str) -> list[str]:
    """The natural-text sections of the detection report."""
    lines = ["## Natural text (OAKS schema): asserted-value extraction, records vs records + question", "",
             "Per question its earliest answer change (positive) and two constructed negatives (repeated source; "
             "A followed by the later source of the next selected question from another book). TP/FN as % (count) "
             "of positives, FP/TN of negatives; accuracy over all pairs with a 95% interval resampling whole "
             "questions (their three pairs together). Unresolved extractions never trigger.", "",
             *table_head(["model", "inputs", "TP", "FP", "FN", "TN", "accuracy % [95% CI]",
                          "false triggers by negative", "unresolved (reason: count)", "capped"])]
    for c in natural["confusion"]:
        p, n = c["positives"], c["negatives"]
        fails = ", ".join(f"{k}: {v}" for k, v in sorted(c["parse"].items()) if k != "ok") or "none"
        lines.append(table_row([model, _inputs(c["detector"]), _pc(c["tp"], p), _pc(c["fp"], n), _pc(c["fn"], p),
                                _pc(c["tn"], n), proportion_pct(c["accuracy"], c["accuracy_ci"]),
                                ", ".join(f"{k}: {v}" for k, v in c["false_triggers_by_negative"].items()),
                                fails, c["capped"]]))
    for (m, d), (tp, fp, fn, tn, acc) in PAPER_NATURAL.items():
        lines.append(table_row([f"{m} (paper)", _inputs(d), _pc(tp, 116), _pc(fp, 232), _pc(fn, 116), _pc(tn, 232),
                                f"{acc}", "", "", ""]))
    lines.append("")
    if effect := natural.get("question_effect"):
        lines += ["Adding the question (paired over the same pairs, 95% interval over whole questions): " + "; ".join(
            f"{k.replace('_', ' ')} {v['change']:+d} [{v['ci'][0]:+g}, {v['ci'][1]:+g}] "
            f"({v['corrections']} up, {v['reversals']} down)" for k, v in effect.items())
                  + ". The paper: true triggers +36 (Qwen3-4B) and +19 (Qwen3-8B), false triggers +6 and -20, "
                  "correct decisions +30 and +39.", ""]
    if not natural["annotations"]:
        return lines + ["No question of this source carries an annotation (the generated demonstration set has "
                        "none), so detector recall against attribute-change labels is not reported.", ""]
    lines += [f"## Detection against source annotations ({natural['annotated_questions']} annotated questions)", "",
              "Positive pairs only: TP/FN on pairs annotated `change`, FP/TN on `compatible`; `insufficient` "
              "unscored. Exclusion rules: " + "; ".join(f"{k}: {v}" for k, v in EXCLUSIONS.items()) + ".", "",
              *table_head(["exclusion", "model", "inputs", "TP", "FN", "FP", "TN", "correct", "insufficient"])]
    for c in natural["annotations"]:
        pos, neg = c["tp"] + c["fn"], c["fp"] + c["tn"]
        lines.append(table_row([c["exclusion"], model, _inputs(c["detector"]), _pc(c["tp"], pos), _pc(c["fn"], pos),
                                _pc(c["fp"], neg), _pc(c["tn"], neg), _pc(c["correct"], c["scored"]),
                                c["insufficient"]]))
    for (ex, m, d), (tp, fn, fp, tn) in PAPER_ANNOTATED.items():
        lines.append(table_row([ex, f"{m} (paper)", _inputs(d), _pc(tp, tp + fn), _pc(fn, tp + fn), _pc(fp, fp + tn),
                                _pc(tn, fp + tn), _pc(tp + tn, tp + fn + fp + tn), ""]))
    return lines + [""]


def action_report(cells: list[dict[str, Any]]) -> list[str]:
    """The detection x action table: per generator and detector, detected / missed positives' outcomes."""
    if not cells:
        return []
    lines = ["## Detection and masking outcomes on the positive questions", "",
             f"Full access vs the old-source mask (matched-scores oaks runs, rule `{cells[0]['rule']}`); "
             "corrections: mask right where full access was wrong; reversals: the opposite. Questions the "
             "generator run lacks are counted as unmatched.", "",
             *table_head(["generator", "inputs", "partition", "N", "both correct", "corrections", "reversals",
                          "both wrong", "unmatched"])]
    for c in cells:
        for part in ("detected", "missed"):
            o = c[part]
            lines.append(table_row([c["generator"], _inputs(c["detector"]), part, o["n"],
                                    *(_pc(o[k], o["n"]) for k in OUTCOMES), c["unmatched"] if part == "detected" else ""]))
    return lines + [""]


def _inputs(detector: str) -> str:
    return "Records + question" if detector == WITH_QUESTION else "Records"
