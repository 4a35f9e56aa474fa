"""Summary and report of a MINTEval run, recomputed from ``results.jsonl`` alone.

Per question type (and all questions) and policy: questions, normalized reference exact
matches with EOS (count and %), the paired change against full access in percentage
points with a 95% percentile interval from 10,000 bootstrap draws of connected components
(sessions sharing a bAbI source story; every question and policy of a component moves
together, paper L1357-1360) and, as the paper's sensitivity, of sessions; corrections /
reversals; strict-boxed and contains-answer counts; EOS and capped answers. Full access
gets its accuracy with the component interval (the paper's gray column). The component and
session draws come from one stream (``readouts.stats.bootstrap_stream``), shared by every
cell. The paper's anchors stand beside the source-minus-full row.

``grades``: a ``grades.jsonl`` from ``grading.grade_run`` (an LLM judge) adds a ``judge`` rule
(a "yes" verdict and EOS) to every cell.

``summary.json`` is a :class:`Summary` (its cells :class:`Cell`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, GroupBootstrap, MeanChangePP, bootstrap_stream, group_bootstrap_indices, \
    mean_change_pp
from kvprobe.studies.common.formatting import stops
from kvprobe.studies.common.report import Items, corrections_reversals, data_items, estimate, heading, run_time, table_head, table_row
from kvprobe.studies.common.grades import grade_of
from kvprobe.studies.common.runner import read_rows

from . import strings
from .grading import read_grades
from .schema import QUESTION_TYPES
from .study import CONDITIONS

#: Rows of the tables: every question, then each type.
SCOPES = ("all", *QUESTION_TYPES)
Key = tuple[str, str]


def group_mean_change(values: np.ndarray, boot: GroupBootstrap, counts: np.ndarray) -> MeanChangePP:
    """Mean of ``values`` (one per question) x 100 and its percentile interval over the group draws
    (:func:`kvprobe.readouts.stats.mean_change_pp`, summed per group: ``boot`` stores groups, not cases).

    ``counts``: ``boot.group_counts()``; a draw's mean is its drawn groups' value sum over their
    question count (draws holding no question are dropped).

    Example: ``group_mean_change(np.array([1.0, 0.0]), boot, boot.group_counts())["pp"]`` is ``50.0``.
    """
    n_groups = len(boot.groups)
    sums = np.bincount(boot.case_group, weights=values, minlength=n_groups)
    sizes = np.bincount(boot.case_group, minlength=n_groups).astype(float)
    return mean_change_pp(values, counts @ sums, counts @ sizes)


def _rules(graded: bool) -> tuple[str, ...]:
    return ("em", "em_strict_boxed", "contains", *(("judge",) if graded else ()))


def _cell(scope: str, condition: str, mine: list[dict[str, Any]], rules: tuple[str, ...]) -> Cell:
    return {"scope": scope, "policy": condition, "n": len(mine), **{r: sum(bool(x[r]) for x in mine) for r in rules},
            **stops(mine)}


class _CellKeys(TypedDict):
    scope: str
    policy: str
    n: int
    em: int
    em_strict_boxed: int
    contains: int
    eos: int
    capped: int


class Cell(_CellKeys, total=False):
    """One (question scope, policy): its questions, their answers correct under each rule and how they stopped."""

    #: With ``grades``: answers the judge labels correct (and that stopped at EOS).
    judge: int
    #: Full access: its exact-match rate with the component interval; another policy: its rate alone.
    em_pct: MeanChangePP | dict[str, float]
    #: A policy answering every question: its exact-match change against full access, pp, with the interval
    #: of each resampled unit, and the questions it gained and lost.
    change_component: MeanChangePP
    change_session: MeanChangePP
    corrections: int
    reversals: int


class Summary(TypedDict):
    """A MINTEval run's ``summary.json``."""

    cells: list[Cell]
    draws: int
    seed: int
    grader: str
    grades_file: str | None
    rows: int
    questions: int
    sessions: int
    components: int


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS, grades: str | Path | None = None
              ) -> Summary:
    """Recompute the summary from the rows on disk (module docstring)."""
    verdicts = read_grades(grades) if grades is not None else None
    by_condition: dict[str, dict[Key, dict[str, Any]]] = defaultdict(dict)
    for r in read_rows(out_dir):
        if verdicts is not None:
            verdict = grade_of(verdicts, (r["case_id"], r["question_id"], r["condition"]), grades,
                               ("case", "question", "condition"))
            r = {**r, "judge": verdict and r["stop_reason"] == "eos"}
        by_condition[r["condition"]][(r["case_id"], r["question_id"])] = r
    full = by_condition.get("full", {})
    keys = sorted(full)
    rules = _rules(verdicts is not None)
    out: Summary = {"cells": [], "draws": draws, "seed": seed, "grader": "rule" if verdicts is None else
                           "rule + judge", "grades_file": None if grades is None else str(grades),
                           "rows": sum(len(v) for v in by_condition.values()), "questions": len(keys),
                           "sessions": len({k[0] for k in keys}), "components": len({full[k]["group"] for k in keys})}
    if not keys:
        return out
    rng = bootstrap_stream(seed)
    boots = {"component": group_bootstrap_indices([full[k]["group"] for k in keys], n_draws=draws, seed=rng),
             "session": group_bootstrap_indices([full[k]["session"] for k in keys], n_draws=draws, seed=rng)}
    counts = {unit: b.group_counts() for unit, b in boots.items()}
    types = np.array([full[k]["query"] for k in keys])
    for scope in SCOPES:
        members = np.ones(len(keys), bool) if scope == "all" else types == scope
        if not members.any():
            continue
        reference = np.array([float(full[k]["em"]) for k in keys])
        for condition in [p for p in CONDITIONS if p in by_condition]:
            mine = by_condition[condition]
            cell = _cell(scope, condition, [mine[k] for k, m in zip(keys, members) if m and k in mine], rules)
            if condition == "full":
                sub = _subset(boots["component"], members)
                cell["em_pct"] = group_mean_change(reference[members], sub, counts["component"])
            elif all(k in mine for k in keys):
                diff = np.array([float(mine[k]["em"]) for k in keys]) - reference
                cell["em_pct"] = {"pp": 100.0 * float(np.mean([mine[k]["em"] for k, m in zip(keys, members) if m]))}
                for unit, boot in boots.items():
                    cell[f"change_{unit}"] = group_mean_change(diff[members], _subset(boot, members), counts[unit])
                cell["corrections"] = int((diff[members] > 0).sum())
                cell["reversals"] = int((diff[members] < 0).sum())
            out["cells"].append(cell)
    return out


def _subset(boot: GroupBootstrap, members: np.ndarray) -> GroupBootstrap:
    """The same draws restricted to some questions (their groups keep their ids, so counts still apply)."""
    return GroupBootstrap(groups=boot.groups, case_group=boot.case_group[members], draws=boot.draws)


# ----------------------------------------------------------------------------- report

def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: released sessions, or sessions generated in their schema."""
    return data_items(config.get("study_config", {}).get("data"), "sessions in the MINTEval schema, built from "
                      "bAbI test stories", "released MINTEval sessions")


def _data_line(config: dict[str, Any], summary: dict[str, Any]) -> str:
    study = config.get("study_config", {})
    generated = study.get("data", "generated") == "generated"
    tasks = "/".join(study.get("tasks", []))
    data = (f"**Generated** sessions: built from the bAbI test stories ({tasks}) in the released schema, not the "
            "released MINTEval sessions" if generated else f"Sessions of `{study.get('data')}`")
    per_type = study.get("questions_per_type")
    boxed = study.get("boxed_instruction")
    return (f"{data}: {summary['sessions']} sessions in {summary['components']} connected component(s) (shared "
            f"bAbI source story), {summary['questions']} questions"
            + (f" (at most {per_type} per type and session)" if per_type else "") + ", greedy answers of at most "
            f"{study.get('max_new_tokens')} tokens" + (f", each question followed by \"{boxed}\"" if boxed else "")
            + ".")


def _grader_line(summary: dict[str, Any]) -> str:
    line = ("Grader: the rule grader, normalized reference exact match with EOS (the whole answer or its last "
            "box; the paper's MINTEval metric, L1431). The paper graded open answers of other benchmarks with an "
            "LLM judge (GPT-5.6); `studies/minteval/grading.py` offers one as a sensitivity")
    if summary.get("grades_file"):
        return line + f"; the judge column comes from `{summary['grades_file']}` (a \"yes\" verdict and EOS)."
    return line + " (not used in this report)."


def _interval_cell(change: dict[str, Any] | None, fmt: str = "+.2f") -> str:
    return estimate(change["pp"], change["ci"], fmt) if change else ""


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    lines = [*heading("MINTEval state tracking", config, items(config)), _data_line(config, summary), "", _grader_line(summary),
             "", f"Change vs full: percentage points of exact matches with EOS, 95% percentile intervals from "
             f"{summary['draws']:,} bootstrap draws of connected components (primary) and of sessions "
             "(sensitivity); the same draws for every cell.", ""]
    if timing:
        lines += [run_time(timing, unit="sessions", machine=True), ""]
    judged = summary["grader"] != "rule"
    lines += table_head(["questions", "policy", "n", "exact match", "% [95% CI] / change vs full, pp [95% CI]",
                         "session-level CI", "corrections / reversals", "strict boxed", "contains answer",
                         *(["judge"] if judged else []), "EOS", "capped"])
    for c in summary["cells"]:
        main = (_interval_cell(c.get("em_pct"), ".2f") if c["policy"] == "full"
                else _interval_cell(c.get("change_component")))
        session = c.get("change_session")
        lines.append(table_row([c["scope"].replace("_", " "), c["policy"], c["n"], c["em"], main,
                                "" if not session else f"[{session['ci'][0]:+.2f}, {session['ci'][1]:+.2f}]",
                                corrections_reversals(c) if "corrections" in c else "", c["em_strict_boxed"],
                                c["contains"], *([c["judge"]] if judged else []), c["eos"], c["capped"]]))
    lines += ["", *_anchor_lines(summary), ""]
    return "\n".join(lines)


def _anchor_lines(summary: dict[str, Any]) -> list[str]:
    """The paper's anchors beside this run's source - full changes (all questions, historical, current)."""
    ours = {c["scope"]: c.get("change_component") for c in summary["cells"] if c["policy"] == "source"}
    out = ["Paper anchors (spec partA 1a, source - full, pp [95% CI over 83 components]) beside this run:", "",
           *table_head(["questions", *[m for m, *_ in strings.ANCHORS_ALL], "this run"])]
    out.append(table_row(["all", *[estimate(v, ci) for _, v, ci in strings.ANCHORS_ALL],
                          _interval_cell(ours.get("all"))]))
    out.append(table_row(["historical location", *[f"{v:+.2f}" for _, v in strings.ANCHORS_HISTORICAL],
                          _interval_cell(ours.get("historical_location"))]))
    model, scope, value, ci = strings.ANCHOR_LLAMA_CURRENT
    current = ["" if m != model else estimate(value, ci) for m, *_ in strings.ANCHORS_ALL]
    out.append(table_row(["current location", *current, _interval_cell(ours.get(scope))]))
    return out
