"""Summary and report of a session-bias run (paper Tables v18 and v41_public_hard; spec partE E1-E3).

Per condition and subset (all questions; answerable updates; other answerable;
abstention; the active subset, where the bias applies, and its three parts;
inactive; and, when some exist, all questions without the groups that cross the
development/validation split, the paper's sensitivity analysis): questions,
correct (count and %), EOS-restricted correct (correct *and* ended by EOS; paper
E2/E3), token-cap hits. Paired changes Soft-Full and Hard-Full: net change,
corrections / reversals, and the change in percentage points with a 95 %
percentile interval over a paired bootstrap of question groups (an answerable
question and its ``_abs`` variant move together; the same draws for every cell;
``readouts.stats.paired_change``). Also: how many inactive questions gave identical answers in
every condition (the paper: all), and accuracy per question type.

``grades``: a ``grades.jsonl`` from ``grading.grade_run`` (e.g. an LLM judge)
replaces the rows' rule-based ``correct``.
"""

from __future__ import annotations

import functools
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from kvprobe.readouts.stats import DRAWS, group_bootstrap_weights, paired_change, percentile_interval
from kvprobe.studies.common.report import Items, corrections_reversals, data_items, estimate, heading, ordered, run_time, table_head, table_row
from kvprobe.studies.common.runner import read_rows, write_run_summary
from .history import CONDITIONS
from .data import QUESTION_TYPES

Case = dict[str, Any]
#: (key, label, membership of a case); a case is its full-access (or first) row.
SUBSETS: list[tuple[str, str, Callable[[Case], bool]]] = [
    ("all", "all questions", lambda c: True),
    ("answerable_updates", "answerable updates", lambda c: c["update"] and not c["is_abstention"]),
    ("other_answerable", "other answerable", lambda c: not c["update"] and not c["is_abstention"]),
    ("abstention", "abstention", lambda c: c["is_abstention"]),
    ("active", "active (bias applied)", lambda c: c["active"]),
    ("active_answerable_updates", "active: answerable updates",
     lambda c: c["active"] and c["update"] and not c["is_abstention"]),
    ("active_other_answerable", "active: other answerable",
     lambda c: c["active"] and not c["update"] and not c["is_abstention"]),
    ("active_abstention", "active: abstention", lambda c: c["active"] and c["is_abstention"]),
    ("inactive", "inactive (gate off or one session)", lambda c: not c["active"]),
    ("without_crossing_groups", "all, without groups crossing the split", lambda c: not c["group_crosses_split"]),
]


def read_grades(path: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """``(case_id, arm) -> {"correct", "grader", ...}`` from a ``grades.jsonl``."""
    out = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            g = json.loads(line)
            out[(g["case_id"], g["arm"])] = g
    return out


def _pp(diff: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """Mean paired difference in pp and its bootstrap percentile interval (draws with no case dropped)."""
    counts = weights.sum(axis=1)
    keep = counts > 0
    draws = 100.0 * (weights[keep] @ diff) / counts[keep]
    return {"pp": float(100.0 * diff.mean()), "ci": percentile_interval(draws)}


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS, grades: str | Path | None = None
              ) -> dict[str, Any]:
    """Recompute the summary from the rows on disk (module docstring)."""
    override = read_grades(grades) if grades is not None else None
    by_case: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    skipped: set[str] = set()
    n_rows = 0
    graders: set[str] = set()
    for row in read_rows(out_dir):
        n_rows += 1
        if row.get("skipped"):
            skipped.add(row["case_id"])
            continue
        if override is not None:
            key = (row["case_id"], row["condition"])
            if key not in override:
                raise ValueError(f"{grades}: no grade for case {key[0]!r}, arm {key[1]!r}")
            row = {**row, "correct": bool(override[key]["correct"]), "grader": override[key]["grader"]}
        graders.add(str(row.get("grader")))
        by_case[row["case_id"]][row["condition"]] = row
    case_ids = sorted(by_case)
    conditions = ordered({a for rows in by_case.values() for a in rows}, CONDITIONS)
    cases = [rows.get("full") or next(iter(rows.values())) for rows in (by_case[c] for c in case_ids)]
    groups = [c["group"] for c in cases]
    weights = (group_bootstrap_weights(groups, n_draws=draws, seed=seed).astype(float)
               if cases else np.zeros((draws, 0)))

    def vec(condition: str, key: Callable[[dict[str, Any]], float]) -> np.ndarray:
        return np.array([key(by_case[c][condition]) if condition in by_case[c] else np.nan for c in case_ids],
                        dtype=float)

    correct = {a: vec(a, lambda r: float(r["correct"])) for a in conditions}
    eos_correct = {a: vec(a, lambda r: float(r["correct"] and r["stop_reason"] == "eos")) for a in conditions}
    cap = {a: vec(a, lambda r: float(r["stop_reason"] == "cap")) for a in conditions}
    tokens = {a: vec(a, lambda r: float(r["output_tokens"])) for a in conditions}
    subsets = []
    for key, label, member in SUBSETS:
        m = np.array([bool(member(c)) for c in cases], dtype=bool)
        if key == "without_crossing_groups" and (m.all() or all(c["split"] == "all" for c in cases)):
            continue  # no group crosses the split (or no split was taken): nothing to exclude
        entry: dict[str, Any] = {"key": key, "label": label, "questions": int(m.sum()),
                                 "groups": len({g for g, keep in zip(groups, m) if keep}), "arms": {}}
        for condition in conditions:
            present = m & ~np.isnan(correct[condition])
            n = int(present.sum())
            cell: dict[str, Any] = {
                "n": n, "correct": int(np.nansum(correct[condition][present])),
                "eos_correct": int(np.nansum(eos_correct[condition][present])),
                "cap": int(np.nansum(cap[condition][present])),
            }
            cell["pct"] = 100.0 * cell["correct"] / n if n else None
            cell["mean_tokens"] = float(tokens[condition][present].mean()) if n else None
            if condition != "full" and "full" in conditions:
                both = present & ~np.isnan(correct["full"])
                if both.any():
                    w = weights[:, both]
                    for name, table in (("vs_full", correct), ("eos_vs_full", eos_correct)):
                        diff = table[condition][both] - table["full"][both]
                        cell[name] = {**paired_change(table[condition][both], table["full"][both], w), **_pp(diff, w)}
            entry["arms"][condition] = cell
        subsets.append(entry)
    return {
        "questions": len(cases), "groups": len(set(groups)), "rows": n_rows, "skipped_questions": len(skipped),
        "arms": conditions, "draws": draws, "seed": seed, "graders": sorted(graders),
        "grades_file": None if grades is None else str(grades),
        "subsets": subsets, "by_type": _by_type(cases, by_case, case_ids, conditions),
        "inactive_identical": _inactive_identical(cases, by_case, case_ids, conditions),
    }


def _by_type(cases: list[Case], by_case: dict, case_ids: list[str], conditions: list[str]
             ) -> list[dict[str, Any]]:
    out = []
    kinds = ordered({(c["question_type"], c["is_abstention"]) for c in cases},
                   tuple((t, a) for a in (False, True) for t in QUESTION_TYPES))
    for qtype, abstention in kinds:
        ids = [cid for cid, c in zip(case_ids, cases) if (c["question_type"], c["is_abstention"]) == (qtype, abstention)]
        out.append({"question_type": qtype, "abstention": abstention, "questions": len(ids),
                    "active": sum(by_case[cid].get("full", next(iter(by_case[cid].values())))["active"] for cid in ids),
                    "correct": {a: sum(bool(by_case[cid][a]["correct"]) for cid in ids if a in by_case[cid])
                                for a in conditions}})
    return out


def _inactive_identical(cases: list[Case], by_case: dict, case_ids: list[str], conditions: list[str]
                        ) -> dict[str, int]:
    ids = [cid for cid, c in zip(case_ids, cases) if not c["active"] and len(by_case[cid]) > 1]
    same = sum(len({by_case[cid][a]["output"] for a in conditions if a in by_case[cid]}) == 1 for cid in ids)
    copied = sum(any(r.get("copied_from_full") for r in by_case[cid].values()) for cid in ids)
    return {"inactive_questions": len(ids), "identical_answers": same, "copied_from_full": copied}


# ----------------------------------------------------------------------------- report

def _pct(cell: dict[str, Any]) -> str:
    return f"{cell['pct']:.1f} ({cell['correct']}/{cell['n']})" if cell["n"] else "-"


def _delta(change: dict[str, Any] | None) -> str:
    if not change:
        return ""
    return f"{estimate(change['pp'], change['ci'])} ({corrections_reversals(change, '/')})"


def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: LongMemEval-Oracle, or seeded fixtures in its schema."""
    source = config.get("study_config", {}).get("source")
    return data_items("generated" if source == "fixtures" else source, "seeded conversation fixtures in the "
                      "LongMemEval schema", "LongMemEval-Oracle questions")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """Markdown report: accuracy and paired changes per subset, termination, question types, run time."""
    study = config.get("study_config", {})
    conditions = summary["arms"]
    others = [a for a in conditions if a != "full"]
    lines = [
        *heading("Session-order bias and hard mask", config, items(config)),
        f"Source `{study.get('source')}`, split {study.get('split')}, {summary['questions']} questions in "
        f"{summary['groups']} groups ({summary['skipped_questions']} skipped as too long), {summary['rows']} rows. "
        f"Greedy answers of at most {study.get('max_new_tokens')} tokens, EOS stop; oldest-session weight "
        f"{study.get('oldest_weight')}. Grader: {', '.join(summary['graders'])}"
        f"{' (from ' + summary['grades_file'] + ')' if summary['grades_file'] else ''}. "
        "Correct = % (count/questions); changes = arm minus full in percentage points [95 % interval] "
        f"(corrections/reversals); paired bootstrap of question groups, {summary['draws']:,} draws, seed "
        f"{summary['seed']}.", "",
        "## Accuracy", "",
        *table_head(["subset", "questions", *conditions, *(f"{a} - full, pp" for a in others)]),
    ]
    for s in summary["subsets"]:
        cells = [_pct(s["arms"][a]) for a in conditions] + [_delta(s["arms"][a].get("vs_full")) for a in others]
        lines.append(table_row([s["label"], s["questions"], *cells]))
    lines += ["", "## Termination", "",
              "EOS-restricted correct = correct and ended by EOS (the paper reports it beside the judge score).", "",
              *table_head(["subset", "arm", "EOS-restricted correct", "vs full, pp", "cap hits", "mean tokens"])]
    for s in summary["subsets"]:
        if s["key"] not in ("all", "active") or not s["questions"]:
            continue
        for a in conditions:
            c = s["arms"][a]
            lines.append(f"| {s['label']} | {a} | {c['eos_correct']}/{c['n']} | {_delta(c.get('eos_vs_full'))} "
                         f"| {c['cap']} | {c['mean_tokens']:.1f} |")
    ident = summary["inactive_identical"]
    lines += ["", f"Inactive questions with identical answers in every arm: {ident['identical_answers']} of "
              f"{ident['inactive_questions']}" + (f" ({ident['copied_from_full']} copied from full, not generated)"
                                                   if ident["copied_from_full"] else "") + ".",
              "", "## By question type", "",
              *table_head(["question type", "questions", "active", *conditions])]
    for t in summary["by_type"]:
        name = t["question_type"] + (" (abstention)" if t["abstention"] else "")
        lines.append(table_row([name, t["questions"], t["active"], *(t["correct"][a] for a in conditions)]))
    if timing:
        per = f", {timing['seconds_per_case']:.1f} s per question" if timing.get("seconds_per_case") else ""
        lines += ["", run_time(timing, "questions", per)]
    return "\n".join(lines) + "\n"


def write_summary(out_dir: Path | str, seed: int = 0, grades: str | Path | None = None) -> dict[str, Any]:
    """Write ``summary.json`` and ``report.md`` of a run directory; ``grades``: a ``grades.jsonl`` to use."""
    return write_run_summary(out_dir, functools.partial(summarize, grades=grades), format_report, seed)
