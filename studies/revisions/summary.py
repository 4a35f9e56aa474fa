"""Summary and report of a revision-history run, recomputed from ``results.jsonl`` (and ``grades.jsonl``,
``source_review.jsonl``).

On the source-answerable questions (label ``answerable`` or not assessed; the paper:
853 of 1,161): per operation the mutually exclusive outcomes (complete with EOS, partial,
wrong, abstain, unverifiable, capped), the change of complete answers against full access
(questions paired; 95% percentile interval from 10,000 bootstrap resamples of whole
articles, the same draws for every operation: seed L6860-6862), and the history tokens
each operation hides; the same change per question type. The paper's anchors (Qwen3.8-27B
and Gemma 4 26B-A4B, seed L6864-6872, L6888-6889) are printed beside.

Reference agreement (seed L6848-6850, L6856-6857: "Reference agreement uses all 1,161 questions"), its own
metric on every question, answerable or not: per operation the answers that agree with the original
reference and end with EOS (``grading.reference_agreement``: the judge's ``reference`` verdict, else the rule
grader's match), their rate with a 95% interval from the same article bootstrap (``readouts.stats.bootstrap_mean``)
and the paired change against full access.

Target time (seed L6830, L6895-6907): each question is historical, change-aggregation or current
(``review.target_time``: the source review's verdict when the run has one, else the data's ``target_time``
field, else the generated family's, else ``strings.TARGET_TIME_DEFAULT``); per stratum the questions, the
source-answerable ones, each operation's complete answers with their change against full access, and the
reference agreement, with intervals.

Source review (seed L6807-6816): with a ``source_review.jsonl`` (``review.review_run``, judged before grading)
its verdicts set which questions are source-answerable; without one the data's ``source_answerable`` field
does (generated questions: answerable by construction) and the summary says no review was judged. The
verdict counts per question type (the paper's table) and the questions not answerable, with their outcomes,
are reported apart.

Grades: the rows' rule outcomes, or, when the run directory holds ``grades.jsonl`` from
``grading.grade_run`` (an LLM judge) and ``grades`` is ``"auto"``, those labels (capped
still takes precedence); any grades file may be given. The report names the grader either way.

``summary.json`` is a :class:`Summary` (its cells, all questions and per question type, :class:`Cell`).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, PairedChange, bootstrap_mean, group_bootstrap_weights, paired_change, \
    percentile_interval
from kvprobe.studies.common.report import Items, data_items, estimate, heading, ordered, run_time, table_head, table_row
from kvprobe.studies.common.grades import grade_of
from kvprobe.studies.common.runner import CONFIG, read_rows
from . import strings
from kvprobe.studies.common.answers import capped_first

from .grading import GRADES, OUTCOMES, read_grades, reference_agreement
from .review import REVIEW, read_review, target_time
from .rule_grader import RULE_GRADER
from .schema import QUESTION_TYPES, SOURCE_LABELS
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
#: The paper's target-time strata (seed L6895-6903): analyzed and source-answerable questions, and complete
#: answers with EOS full -> whole-source of the answerable ones (the current stratum's are not given).
PAPER_STRATA = {"questions": {"historical": 416, "change-aggregation": 741, "current": 4},
                "answerable": {"historical": 413, "change-aggregation": 436, "current": 4},
                "complete": {"Qwen3.8-27B": {"historical": (295, 43), "change-aggregation": (284, 73)},
                             "Gemma 4 26B-A4B": {"historical": (261, 55), "change-aggregation": (205, 30)}}}
#: The paper's source review per original type (seed L6822-6828, table tab:v43_wiki_source_quality): questions,
#: answerable, partial, unanswerable, ambiguous, of the original 1,168.
PAPER_REVIEW = {"Simple": (249, 113, 0, 136, 0), "History": (409, 404, 0, 0, 5), "Multi-hop": (268, 134, 0, 130, 4),
                "Counting": (46, 43, 1, 0, 2), "Ordering": (196, 163, 0, 0, 33), "All": (1168, 857, 1, 266, 44)}
#: Answerability of a question with no label (the data's ``source_answerable`` null): kept in the denominator.
NOT_ASSESSED = "not assessed"
#: Report order of the strata (the default last).
STRATA = (*strings.TARGET_TIMES, strings.TARGET_TIME_DEFAULT)

Key = tuple[str, str]


def _question_labels(rows: list[dict[str, Any]], review: dict[Key, dict[str, Any]] | None, generated: bool,
                     review_name: str = REVIEW) -> dict[Key, dict[str, Any]]:
    """Per question: its type, ``answerable`` (the review's verdict, else the data's label; None = not
    assessed), ``data_answerable``, ``target_time`` and ``time_source`` (module docstring)."""
    out: dict[Key, dict[str, Any]] = {}
    for r in rows:
        key = (r["case_id"], r["question_id"])
        if key in out:
            continue
        if review is not None and key not in review:
            raise ValueError(f"{review_name} has no verdict for question {key}")
        time, source = ((review[key]["target_time"], "review") if review is not None else target_time(r, generated))
        out[key] = {"type": r["question_type"], "data_answerable": r["source_answerable"],
                    "answerable": review[key]["answerable"] if review is not None else r["source_answerable"],
                    "target_time": time, "time_source": source}
    return out


def _is_answerable(label: str | None) -> bool:
    return label in (None, "answerable")


def _outcomes(rows: list[dict[str, Any]], grades: dict[tuple[str, str, str], dict[str, Any]] | None
              ) -> tuple[dict[tuple[str, str, str], str], list[str]]:
    """Each row's outcome keyed by (case, question, operation), and the graders that gave them."""
    out, graders = {}, set()
    for r in rows:
        key = (r["case_id"], r["question_id"], r["condition"])
        if grades is None:
            out[key], grader = r["outcome"], r["grader"]
        else:
            g = grade_of(grades, key, GRADES, ("case", "question", "condition"))
            out[key], grader = capped_first(r["stop_reason"], g["label"]), g["grader"]
        graders.add(grader)
    return out, sorted(graders)


class PointsChange(PairedChange):
    """A paired change in complete answers with its value and interval in points of the questions."""

    pp: float
    pp_ci: list[float]


class _CellKeys(TypedDict):
    operation: str
    n: int
    #: The answers of each outcome (``grading.OUTCOMES``; capped first).
    complete: int
    partial: int
    wrong: int
    abstain: int
    unverifiable: int
    capped: int


class Cell(_CellKeys, total=False):
    """One operation over a set of questions: its answers by outcome."""

    #: An operation answering every question: complete answers against full access, paired over articles.
    change_vs_full: PointsChange


class Summary(TypedDict):
    """A revision-history run's ``summary.json``."""

    seed: int
    draws: int
    rows: int
    graders: list[str]
    #: The grades file's name in the run folder (None: the rule grader's outcomes).
    grades_file: str | None
    articles: int
    skipped_articles: int
    questions: int
    #: Questions counted in the cells (source-answerable).
    answerable: int
    history_tokens_mean: float | None
    hidden_tokens_mean: dict[str, float]
    cells: list[Cell]
    by_type: dict[str, list[Cell]]
    complete_all_questions: dict[str, int]
    #: Reference agreement per operation (:func:`agreement_cells`) and where its verdicts come from.
    reference_agreement: dict[str, Any]
    source_review: dict[str, Any]
    #: Per target-time stratum: questions, answerable ones, cells and reference agreement.
    target_time: dict[str, Any]


def _cells(keys: list[tuple[str, str]], outcome: dict[tuple[str, str, str], str], operations: list[str],
           draws: int, seed: int) -> list[Cell]:
    """Per operation: outcome counts and the paired change of complete answers against full access (questions
    ``keys``; bootstrap draws of their articles, the same for every operation)."""
    cells = []
    weights = group_bootstrap_weights([c for c, _ in keys], n_draws=draws, seed=seed) if keys else None
    full = [int(outcome.get((c, q, "full")) == "complete") for c, q in keys]
    for op in operations:
        got = [outcome.get((c, q, op)) for c, q in keys]
        cell: Cell = {"operation": op, "n": sum(g is not None for g in got),
                                **{o: sum(g == o for g in got) for o in OUTCOMES}}
        if op != "full" and "full" in operations and cell["n"] == len(keys) and weights is not None:
            ch = paired_change([int(g == "complete") for g in got], full, weights)
            ch["pp"], ch["pp_ci"] = 100 * ch["change"] / len(keys), [100 * x / len(keys) for x in ch["ci"]]
            cell["change_vs_full"] = ch
        cells.append(cell)
    return cells


def agreement_cells(keys: list[Key], agree: dict[tuple[str, str, str], bool], operations: list[str],
                    draws: int = DRAWS, seed: int = 0) -> list[dict[str, Any]]:
    """Per operation: answers agreeing with the reference (with EOS) of the questions ``keys``, their rate with
    a 95% percentile interval and the paired change against full access (count and points, with intervals),
    from bootstrap draws of whole articles (``group_bootstrap_weights`` over the keys' articles, the same draws
    for every operation).

    Example: articles a (2 questions) and b (1): full agrees on a1, a2; whole-source on a2 only. Then full
    2/3 [0, 1] (a draw of b twice has rate 0, of a twice 1) and whole-source's change -1 [-2, 0] (-33.3 pp).
    """
    weights = group_bootstrap_weights([c for c, _ in keys], n_draws=draws, seed=seed) if keys else None
    full = [int(bool(agree.get((c, q, "full")))) for c, q in keys]
    cells = []
    for op in operations:
        got = [agree.get((c, q, op)) for c, q in keys]
        n, k = sum(g is not None for g in got), sum(bool(g) for g in got)
        cell: dict[str, Any] = {"operation": op, "n": n, "agree": k, "rate": k / n if n else None, "rate_ci": None}
        if weights is not None and n == len(keys):
            cell["rate_ci"] = percentile_interval(bootstrap_mean([int(bool(g)) for g in got], weights))
            if op != "full" and "full" in operations:
                ch = paired_change([int(bool(g)) for g in got], full, weights)
                ch["pp"], ch["pp_ci"] = 100 * ch["change"] / len(keys), [100 * x / len(keys) for x in ch["ci"]]
                cell["change_vs_full"] = ch
        cells.append(cell)
    return cells


def _review_summary(labels: dict[Key, dict[str, Any]], outcome: dict[tuple[str, str, str], str],
                    operations: list[str], review: Path | None, reviewers: list[str]) -> dict[str, Any]:
    """The source review's verdict counts (all and per question type), how many differ from the data's labels,
    and the questions not source-answerable with their outcomes per operation, apart."""
    names = [*SOURCE_LABELS, NOT_ASSESSED]

    def counts(ks: list[Key]) -> dict[str, int]:
        return {"questions": len(ks), **{v: sum((labels[k]["answerable"] or NOT_ASSESSED) == v for k in ks)
                                         for v in names}}

    keys = sorted(labels)
    apart = [k for k in keys if not _is_answerable(labels[k]["answerable"])]
    return {"judged": review is not None, "file": None if review is None else review.name, "reviewers": reviewers,
            "labels_from": "review" if review is not None else "data field source_answerable",
            "answerability": counts(keys),
            "by_type": {t: counts([k for k in keys if labels[k]["type"] == t])
                        for t in ordered({v["type"] for v in labels.values()}, QUESTION_TYPES)},
            "differ_from_data": None if review is None else
            sum(labels[k]["answerable"] != labels[k]["data_answerable"] for k in keys),
            "apart": [{"case_id": c, "question_id": q, "question_type": labels[(c, q)]["type"],
                       "verdict": labels[(c, q)]["answerable"]} for c, q in apart],
            "apart_outcomes": {op: {o: sum(outcome.get((c, q, op)) == o for c, q in apart) for o in OUTCOMES}
                               for op in operations}}


def _strata(labels: dict[Key, dict[str, Any]], outcome: dict[tuple[str, str, str], str],
            agree: dict[tuple[str, str, str], bool], operations: list[str], draws: int, seed: int) -> dict[str, Any]:
    """Per target-time stratum: questions, answerable ones, complete answers (``_cells``) and reference
    agreement (:func:`agreement_cells`), each with its own article bootstrap."""
    sources: dict[str, int] = defaultdict(int)
    for v in labels.values():
        sources[v["time_source"]] += 1
    strata = {}
    for stratum in ordered({v["target_time"] for v in labels.values()}, STRATA):
        mine = sorted(k for k, v in labels.items() if v["target_time"] == stratum)
        answerable = [k for k in mine if _is_answerable(labels[k]["answerable"])]
        strata[stratum] = {"questions": len(mine), "answerable": len(answerable),
                           "cells": _cells(answerable, outcome, operations, draws, seed),
                           "reference_agreement": agreement_cells(mine, agree, operations, draws, seed)}
    return {"sources": dict(sorted(sources.items())), "strata": strata}


def _generated(out: Path) -> bool:
    path = out / CONFIG
    return path.exists() and json.loads(path.read_text()).get("study_config", {}).get("data") == "generated"


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS, grades: str | Path | None = "auto",
              review: str | Path | None = "auto") -> Summary:
    """The summary (module docstring); ``grades``: "auto" (``grades.jsonl`` if present), a path, or None;
    ``review``: "auto" (``source_review.jsonl`` if present), a path, or None (the data's labels)."""
    out = Path(out_dir)
    if grades == "auto":
        grades = out / GRADES if (out / GRADES).exists() else None
    if review == "auto":
        review = out / REVIEW if (out / REVIEW).exists() else None
    review = None if review is None else Path(review)
    all_rows = list(read_rows(out))
    rows = [r for r in all_rows if not r.get("skipped")]
    lines = read_grades(grades) if grades is not None else None
    outcome, graders = _outcomes(rows, lines)
    agree = {(r["case_id"], r["question_id"], r["condition"]):
             reference_agreement(r, None if lines is None else lines[(r["case_id"], r["question_id"], r["condition"])])
             for r in rows}
    reviewed = read_review(review) if review is not None else None
    labels = _question_labels(rows, reviewed, _generated(out), review.name if review is not None else REVIEW)
    operations = ordered({r["condition"] for r in rows}, CONDITIONS)
    keys = sorted(k for k, v in labels.items() if _is_answerable(v["answerable"]))
    by_type = {}
    for qtype in ordered({r["question_type"] for r in rows}, QUESTION_TYPES):
        by_type[qtype] = _cells([k for k in keys if labels[k]["type"] == qtype], outcome, operations, draws, seed)
    all_keys = sorted(labels)
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
        "reference_agreement": {
            "source": "judge" if lines is not None and any("reference" in g for g in lines.values()) else "rule",
            "questions": len(all_keys), "cells": agreement_cells(all_keys, agree, operations, draws, seed)},
        "source_review": _review_summary(labels, outcome, operations, review,
                                         sorted({g["reviewer"] for g in (reviewed or {}).values()})),
        "target_time": _strata(labels, outcome, agree, operations, draws, seed),
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
        lines.append(table_row([qtype, *[_complete_cell(c) for c in cells]]))
    if "reference_agreement" in summary:
        lines += ["", *_agreement_lines(summary), *_strata_lines(summary), *_review_lines(summary)]
    return "\n".join(lines) + "\n"


def _complete_cell(c: dict[str, Any]) -> str:
    return f"{c['complete']}/{c['n']}" + (f" {_change(c)}" if _change(c) else "")


def _agree_cell(c: dict[str, Any]) -> str:
    """``3/7 = 42.9 % [0.0, 66.7]`` and the change against full access, if any."""
    if c["rate"] is None:
        return f"{c['agree']}/{c['n']}"
    ci = "" if c["rate_ci"] is None else f" [{100 * c['rate_ci'][0]:.1f}, {100 * c['rate_ci'][1]:.1f}]"
    ch = c.get("change_vs_full")
    change = "" if not ch else (f"; {estimate(ch['change'], ch['ci'], '+d', '+.0f')} "
                                f"({estimate(ch['pp'], ch['pp_ci'], '+.1f')} pp)")
    return f"{c['agree']}/{c['n']} = {100 * c['rate']:.1f} %{ci}{change}"


def _agreement_lines(summary: dict[str, Any]) -> list[str]:
    ra = summary["reference_agreement"]
    how = ("the LLM judge's separate reference verdict" if ra["source"] == "judge" else
           f"the rule grader's match ({RULE_GRADER}: a reference and no other offered option in the displayed answer; "
           "so its count is the rule grader's complete count, over every question)")
    lines = [f"Reference agreement with EOS on all {ra['questions']} questions, answerable or not (the paper's own "
             f"metric, on all 1,161 of its questions; its values are shown only in its figure): {how}; rate with a 95% "
             f"interval and change vs full [95% CI] from {summary['draws']:,} bootstrap resamples of whole articles.",
             "", *table_head(["operation", "agree / n = rate [95% CI]", "change vs full [95% CI]"])]
    for c in ra["cells"]:
        ch = c.get("change_vs_full")
        lines.append(table_row([c["operation"], _agree_cell({**c, "change_vs_full": None}),
                                "" if not ch else f"{estimate(ch['change'], ch['ci'], '+d', '+.0f')} "
                                f"({estimate(ch['pp'], ch['pp_ci'], '+.1f')} pp)"]))
    return lines + [""]


def _paper_stratum(stratum: str) -> str:
    q, a = PAPER_STRATA["questions"].get(stratum), PAPER_STRATA["answerable"].get(stratum)
    if q is None:
        return ""
    parts = [f"{a} of {q} answerable"]
    for model, by in PAPER_STRATA["complete"].items():
        if stratum in by:
            parts.append(f"{model.split()[0]} full {by[stratum][0]} -> whole-source {by[stratum][1]}")
    return "; ".join(parts)


def _strata_lines(summary: dict[str, Any]) -> list[str]:
    tt = summary["target_time"]
    sources = ", ".join(f"{n} by {src}" for src, n in tt["sources"].items())
    ops = [c["operation"] for c in summary["cells"]]
    lines = [f"By target time (questions classified {sources}; the family rule: Simple current, the History word "
             "and deleted-sentence questions historical, the others change-aggregation). Complete of the "
             "source-answerable questions and change vs full [95% CI], each stratum its own article bootstrap; "
             "the paper's counts beside (741 change-aggregation, 416 historical, 4 current of 1,161):", "",
             *table_head(["target time", "questions", "answerable", *ops, "paper"])]
    for stratum, st in tt["strata"].items():
        lines.append(table_row([stratum, st["questions"], st["answerable"], *[_complete_cell(c) for c in st["cells"]],
                                _paper_stratum(stratum)]))
    lines += ["", "Reference agreement with EOS by target time (all questions of the stratum; rate [95% CI]; change "
              "vs full [95% CI]):", "", *table_head(["target time", *ops])]
    for stratum, st in tt["strata"].items():
        lines.append(table_row([stratum, *[_agree_cell(c) for c in st["reference_agreement"]]]))
    return lines + [""]


def _review_lines(summary: dict[str, Any]) -> list[str]:
    r = summary["source_review"]
    if r["judged"]:
        head = (f"Source review (`{r['file']}`, {', '.join(r['reviewers'])}; judged before grading from the history, "
                f"questions and references, without answers or operations): its verdicts set the source-answerable "
                f"questions ({r['differ_from_data']} differ from the data's labels).")
    else:
        head = (f"Source review: none judged in this run (no `{REVIEW}`; `review.review_run` writes one before "
                "grading). The data's `source_answerable` labels set the "
                "source-answerable questions (generated questions: answerable by construction; null: not assessed, "
                "kept in the denominator).")
    names = [*SOURCE_LABELS, NOT_ASSESSED]
    lines = [head, "", *table_head(["type", "questions", *names, "paper: questions, answerable / partial / "
                                    "unanswerable / ambiguous"])]
    for t, c in [*r["by_type"].items(), ("All", r["answerability"])]:
        p = PAPER_REVIEW.get(t)
        lines.append(table_row([t, c["questions"], *[c[v] for v in names],
                                "" if p is None else f"{p[0]:,}: {p[1]} / {p[2]} / {p[3]} / {p[4]}"]))
    n = len(r["apart"])
    lines += ["", f"Questions not source-answerable, reported apart ({n}"
              + ("" if not n else ": " + ", ".join(f"{q['case_id']}/{q['question_id']} {q['verdict']}"
                                                   for q in r["apart"])) + ")."]
    if n:
        lines += ["", *table_head(["operation", *OUTCOMES])]
        lines += [table_row([op, *[counts[o] for o in OUTCOMES]]) for op, counts in r["apart_outcomes"].items()]
    return lines
