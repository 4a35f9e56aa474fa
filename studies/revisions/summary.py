"""Summary and report of a revision-history run, recomputed from ``results.jsonl`` (and ``grades.jsonl``).

On the source-answerable questions (label ``answerable`` or not assessed; the paper:
853 of 1,161): per operation the mutually exclusive outcomes (complete with EOS, partial,
wrong, abstain, unverifiable, capped), the change of complete answers against full access
(questions paired; 95% percentile interval from 10,000 bootstrap resamples of whole
articles, the same draws for every operation: seed L6860-6862), and the history tokens
each operation hides; the same change per question type. Complete answers on all
questions are counted too. The paper's anchors (Qwen3.8-27B and Gemma 4 26B-A4B,
seed L6864-6872, L6888-6889) are printed beside.

Grades: the rows' rule outcomes, or, when the run directory holds ``grades.jsonl`` from
``grading.grade_run`` (an LLM judge) and ``grades`` is ``"auto"``, those labels (capped
still takes precedence). The report names the grader either way.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from kvprobe.readouts.stats import DRAWS, group_bootstrap_weights, paired_change
from kvprobe.studies.common.figures import run_model
from kvprobe.studies.common.report import Items, data_items, estimate, heading, ordered, run_time, table_head, table_row
from kvprobe.studies.common.runner import read_rows, write_run_summary
from . import strings
from kvprobe.studies.common.answers import capped_first

from .grading import GRADES, OUTCOMES, RULE_GRADER, read_grades
from .schema import QUESTION_TYPES
from .study import CONDITIONS

#: The paper's anchors: complete answers with EOS out of 853 source-answerable questions, the change
#: against full access in points with its 95% interval, and capped answers (seed L6864-6872, L6888-6889).
PAPER_N = 853
PAPER_ANCHORS = {
    "Qwen3.8-27B": {"complete": {"full": 583, "whole-source": 120, "changed-text": 565, "recompute": 182},
                    "pp": {"whole-source": (-54.3, -58.0, -50.5), "changed-text": (-2.1, -4.1, -0.1)},
                    "capped": {"full": 101, "whole-source": 347}},
    "Gemma 4 26B-A4B": {"complete": {"full": 468, "whole-source": 89, "changed-text": 444, "recompute": 189},
                        "pp": {"whole-source": (-44.4, -48.3, -40.6), "changed-text": (-2.8, -5.0, -0.6)},
                        "capped": {"full": 161, "whole-source": 549}},
}


def _answerable(row: dict[str, Any]) -> bool:
    return row["source_answerable"] in (None, "answerable")


def _outcomes(rows: list[dict[str, Any]], grades: dict[tuple[str, str, str], dict[str, Any]] | None
              ) -> tuple[dict[tuple[str, str, str], str], list[str]]:
    """Each row's outcome keyed by (case, question, operation), and the graders that gave them."""
    out, graders = {}, set()
    for r in rows:
        key = (r["case_id"], r["question_id"], r["condition"])
        if grades is None:
            out[key], grader = r["outcome"], r["grader"]
        else:
            if key not in grades:
                raise ValueError(f"{GRADES} has no grade for {key}")
            out[key], grader = capped_first(r["stop_reason"], grades[key]["label"]), grades[key]["grader"]
        graders.add(grader)
    return out, sorted(graders)


def _cells(keys: list[tuple[str, str]], outcome: dict[tuple[str, str, str], str], operations: list[str],
           draws: int, seed: int) -> list[dict[str, Any]]:
    """Per operation: outcome counts and the paired change of complete answers against full access (questions
    ``keys``; bootstrap draws of their articles, the same for every operation)."""
    cells = []
    weights = group_bootstrap_weights([c for c, _ in keys], n_draws=draws, seed=seed) if keys else None
    full = [int(outcome.get((c, q, "full")) == "complete") for c, q in keys]
    for op in operations:
        got = [outcome.get((c, q, op)) for c, q in keys]
        cell: dict[str, Any] = {"operation": op, "n": sum(g is not None for g in got),
                                **{o: sum(g == o for g in got) for o in OUTCOMES}}
        if op != "full" and "full" in operations and cell["n"] == len(keys) and weights is not None:
            ch = paired_change([int(g == "complete") for g in got], full, weights)
            ch["pp"], ch["pp_ci"] = 100 * ch["change"] / len(keys), [100 * x / len(keys) for x in ch["ci"]]
            cell["change_vs_full"] = ch
        cells.append(cell)
    return cells


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS, grades: str | Path | None = "auto"
              ) -> dict[str, Any]:
    """The summary (module docstring); ``grades``: "auto" (``grades.jsonl`` if present), a path, or None."""
    out = Path(out_dir)
    if grades == "auto":
        grades = out / GRADES if (out / GRADES).exists() else None
    all_rows = list(read_rows(out))
    rows = [r for r in all_rows if not r.get("skipped")]
    outcome, graders = _outcomes(rows, read_grades(grades) if grades is not None else None)
    operations = ordered({r["condition"] for r in rows}, CONDITIONS)
    keys = sorted({(r["case_id"], r["question_id"]) for r in rows if _answerable(r)})
    by_type = {}
    for qtype in ordered({r["question_type"] for r in rows}, QUESTION_TYPES):
        typed = [k for k in keys if k in {(r["case_id"], r["question_id"]) for r in rows if r["question_type"] == qtype}]
        by_type[qtype] = _cells(typed, outcome, operations, draws, seed)
    all_keys = sorted({(r["case_id"], r["question_id"]) for r in rows})
    hidden: dict[str, list[int]] = defaultdict(list)
    for (_, op), n in {(r["case_id"], r["condition"]): r["hidden_tokens"] for r in rows}.items():
        hidden[op].append(n)
    return {
        "seed": seed, "draws": draws, "rows": len(all_rows), "graders": graders,
        "grades_file": None if grades is None else Path(grades).name,
        "articles": len({r["case_id"] for r in rows}),
        "skipped_articles": len({r["case_id"] for r in all_rows if r.get("skipped")}),
        "questions": len(all_keys), "answerable": len(keys),
        "history_tokens_mean": float(np.mean([r["history_tokens"] for r in rows])) if rows else None,
        "hidden_tokens_mean": {op: float(np.mean(v)) for op, v in hidden.items()},
        "cells": _cells(keys, outcome, operations, draws, seed),
        "by_type": by_type,
        "complete_all_questions": {op: sum(outcome.get((c, q, op)) == "complete" for c, q in all_keys)
                                   for op in operations},
    }


# ----------------------------------------------------------------------------- report

def _change(cell: dict[str, Any]) -> str:
    ch = cell.get("change_vs_full")
    if not ch:
        return ""
    return f"{estimate(ch['change'], ch['ci'], '+d', '+.0f')} ({estimate(ch['pp'], ch['pp_ci'], '+.1f')} pp)"


def _paper(op: str) -> str:
    parts = []
    for model, a in PAPER_ANCHORS.items():
        pp = a["pp"].get(op)
        text = f"{a['complete'][op]}/{PAPER_N}" + (f" ({pp[0]:+.1f} [{pp[1]:+.1f}, {pp[2]:+.1f}] pp)" if pp else "")
        parts.append(f"{model.split()[0]} {text}")
    return "; ".join(parts)


def _grader_sentence(summary: dict[str, Any]) -> str:
    if summary["grades_file"] is None:
        return (f"Graded by the rule grader ({RULE_GRADER}: capped without EOS; else complete when a reference "
                "occurs in the displayed answer, the last \\boxed{} or the whole response; abstain when it "
                "declines; else wrong; it never gives partial or unverifiable). The paper graded with an LLM "
                "judge (GPT-5.6) against the complete history.")
    return (f"Graded by the LLM judge {', '.join(summary['graders'])} (`{summary['grades_file']}`); capped answers "
            "are read from the decode record and take precedence. The paper's judge was GPT-5.6.")


def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: released revision histories, or a demonstration set in their schema."""
    return data_items(config.get("study_config", {}).get("data"), "PG-19 paragraphs with seeded edits in the "
                      "revision-history schema, not the paper's Wikipedia articles", "released revision histories")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    study = config.get("study_config", {})
    data = study.get("data", "generated")
    source = ("Generated demonstration set (PG-19 paragraphs with seeded edits; not the paper's MINTEval Wikipedia "
              "histories)" if data == "generated" else f"Articles from `{data}`")
    lines = [*heading("Revision histories", config, items(config)),
             f"{source}: {summary['articles']} articles ({summary['skipped_articles']} skipped as too long), "
             f"{summary['questions']} questions, {summary['answerable']} source-answerable; mean history "
             f"{summary['history_tokens_mean'] or 0:.0f} tokens. Greedy answers of at most "
             f"{study.get('max_new_tokens')} tokens" + (f", each question followed by \"{study['boxed_instruction']}\""
                                                         if study.get("boxed_instruction") else "")
             + f". Changed-text diff unit: {study.get('diff_unit')} (difflib; insertions hide nothing).", "",
             _grader_sentence(summary), "",
             f"Complete = complete with EOS on the source-answerable questions; change vs full with a 95% interval "
             f"from {summary['draws']:,} bootstrap resamples of whole articles. {strings.PAPER_PRECEDENCE}", ""]
    if timing:
        lines += [run_time(timing, unit="articles", machine=True), ""]
    lines += table_head(["operation", "n", "complete", "change vs full [95% CI]", "partial", "wrong", "abstain",
                         "unverifiable", "capped", "hidden tokens (mean)", f"paper, complete of {PAPER_N}"])
    for c in summary["cells"]:
        op = c["operation"]
        lines.append(table_row([op, c["n"], c["complete"], _change(c), c["partial"], c["wrong"], c["abstain"],
                                c["unverifiable"], c["capped"], f"{summary['hidden_tokens_mean'].get(op, 0):.0f}",
                                _paper(op) if op in CONDITIONS else ""]))
    capped = "; ".join(f"{m.split()[0]} {a['capped']['full']} -> {a['capped']['whole-source']}"
                       for m, a in PAPER_ANCHORS.items())
    lines += ["", f"Paper, capped answers full -> whole-source: {capped} (of {PAPER_N}).", "",
              "Complete answers on all questions: " + ", ".join(
                  f"{op} {n}" for op, n in summary["complete_all_questions"].items()) + ".", "",
              "By question type (complete of n; change vs full [95% CI]):", "",
              *table_head(["type", *[c["operation"] for c in summary["cells"]]])]
    for qtype, cells in summary["by_type"].items():
        lines.append(table_row([qtype, *[f"{c['complete']}/{c['n']}" + (f" {_change(c)}" if _change(c) else "")
                                         for c in cells]]))
    return "\n".join(lines) + "\n"


def write_summary(out_dir: Path | str, seed: int = 0) -> dict[str, Any]:
    """summary.json and report.md of a run directory (``grades.jsonl`` used when present).

    Example: ``write_summary("runs/revisions")["cells"][0]["complete"]``.
    """
    summary = write_run_summary(out_dir, summarize, format_report, seed)
    from kvprobe.studies.study_figures import revisions

    revisions(summary, Path(out_dir) / "figure.png", run_model(out_dir))
    return summary
