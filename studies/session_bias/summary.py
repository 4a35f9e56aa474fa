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
replaces the rows' rule-based ``correct``; the summary then also compares the two graders, arm by
arm (``grader_agreement``). ``judge_model`` (``kvprobe report session-bias RUN --judge-model M``)
first grades the run with that local model and the official LongMemEval prompts
(``grading.OfficialJudge`` over ``local_judge.LocalJudgeClient``), into ``grades.jsonl``, and uses it.

Grader validity (every run): ``judge_validation``, why the run's model judge cannot test a claim (its audit on the
session-bias set in ``artifacts/judge-audit`` fails the bar or is missing; None for the rule grader or a judge that
passes), and ``rule_audit``, how the rule grader fares on the same audit set. A run graded from a grades file also
holds ``rule_subsets``: the rule grader's labels of the same answers (stored in the rows) on the main subsets and
the split exclusion, with the same draws, so every judged count has the rule grader's beside it.

Sections a run gets only when its rows hold them (a run of the three primary arms without them
keeps its summary as before):

* ``development`` (the development policies ran; paper L5980-5986): each policy's correct answers
  and change against retention (``full``) overall, on answerable updates, other answerable and
  abstention questions, the questions it is active on, and the policy :func:`choose_policy` picks
  by the rule it states (:data:`SELECTION_RULE`, ours: the paper says only that the rule and
  strength are "chosen retrospectively from these development outputs");
* ``query_aware`` (Quest, FINCH, RefreshKV or the recent-page control ran; paper L6258-6388): per
  subset each method's correct, EOS-restricted correct and cap hits, its change against full and
  against the source mask (``hard``), and the capacity accounting (K, how many histories fit in K,
  key slots kept resident);
* ``publisher`` (rows carry ``session_ids``; paper L6012-6024): the same paired changes with the
  bootstrap over publisher components (questions linked by a shared session id or base question,
  ``data.publisher_components``) beside the base-question grouping, and the exclusion sensitivity
  without the questions whose component crosses the development/validation split.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, group_bootstrap_weights, mean_change_pp, paired_change
from kvprobe.studies.common.report import (Items, corrections_reversals, data_items, heading, ordered, run_time, table_head,
                                           table_row)
from kvprobe.studies.common.claims import grader_validity
from kvprobe.studies.common.formatting import pp_change, share_of
from kvprobe.studies.common.judge_audit import AUDIT_DIR
from kvprobe.studies.common.grades import grade_of, read_grade_lines
from kvprobe.studies.common.runner import read_rows
from .history import CONDITIONS, DEVELOPMENT, PRIMARY, QUERY_AWARE
from .data import QUESTION_TYPES, publisher_components
from .grading import RuleGrader

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
#: The subsets of the query-aware, development and publisher tables.
MAIN_SUBSETS = ("all", "answerable_updates", "other_answerable", "abstention")
#: The subsets the rule grader's labels are summarized on beside a judge's.
RULE_SUBSETS = (*MAIN_SUBSETS, "without_crossing_groups")
#: The audit task of this study's graders (``kvprobe report judge-audit MODEL session-bias``).
TASK = "session-bias"
#: The publisher exclusion sensitivity: the questions whose component does not cross the split.
PUBLISHER_EXCLUSION = [(f"{key}_without_publisher_crossing", f"{label}, without publisher-crossing questions",
                        lambda c, member=member: member(c) and not c.get("publisher_crosses_split"))
                       for key, label, member in SUBSETS if key in MAIN_SUBSETS]
#: How the development policy is chosen (ours; UNCLEAR in the paper, docs/fidelity.md).
SELECTION_RULE = ("among the attenuating policies, the largest net change in correct answers against retention "
                  "over all development questions; ties: the larger net change on answerable updates, then the "
                  "weaker attenuation (1/2 before 1/4), then the gate on")


def read_grades(path: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """``(case_id, arm) -> {"correct", "grader", ...}`` from a ``grades.jsonl``."""
    return read_grade_lines(path, ("case_id", "arm"))


class ArmChange(TypedDict):
    """An arm's paired change against a reference arm (``readouts.stats.paired_change``), with the change as a mean
    in percentage points (``mean_change_pp``, whose interval ``ci`` is: in points)."""

    change: int | float
    corrections: int
    reversals: int
    ci: list[float]
    pp: float


class _ArmCellKeys(TypedDict):
    n: int
    correct: int
    #: Correct and ended by EOS; answers that hit the token cap.
    eos_correct: int
    cap: int
    #: 100 correct / n, and the answers' mean length in tokens (None for no question).
    pct: float | None
    mean_tokens: float | None


class ArmCell(_ArmCellKeys, total=False):
    """One arm over one subset of questions."""

    #: Against full access (every arm but full), and against the source mask ``hard`` (the query-aware arms):
    #: correct and EOS-restricted correct.
    vs_full: ArmChange
    eos_vs_full: ArmChange
    vs_hard: ArmChange
    eos_vs_hard: ArmChange


class Subset(TypedDict):
    """One subset of the questions (:data:`SUBSETS`) and its cell per arm."""

    key: str
    label: str
    questions: int
    #: The resampled clusters (base questions; publisher components in ``publisher``).
    groups: int
    arms: dict[str, ArmCell]


class TypeRow(TypedDict):
    """The questions of one type (answerable or abstention): how many, how many active, correct per arm."""

    question_type: str
    abstention: bool
    questions: int
    active: int
    correct: dict[str, int]


class InactiveIdentical(TypedDict):
    """Inactive questions whose unchanged arms all gave one answer (:func:`_inactive_identical`)."""

    inactive_questions: int
    identical_answers: int
    copied_from_full: int


class PolicySubset(TypedDict):
    correct: int
    n: int
    vs_full: ArmChange | None


class Policy(TypedDict):
    """One development policy (retention is ``full``): its weight and gate, its active questions, its cells on
    :data:`MAIN_SUBSETS` (None where it did not run) and its net changes against retention."""

    name: str
    policy: str
    weight: float
    gated: bool
    active: int
    all: PolicySubset | None
    answerable_updates: PolicySubset | None
    other_answerable: PolicySubset | None
    abstention: PolicySubset | None
    change_all: int | float
    change_updates: int | float


class Development(TypedDict):
    """The development table and the policy :data:`SELECTION_RULE` chose (None: no candidate)."""

    rule: str
    policies: list[Policy]
    chosen: str | None
    oldest_weight: float | None
    gated: bool | None
    beats_retention: bool | None


class Capacity(TypedDict):
    """One query-aware arm's capacity accounting: its K values, the histories (with their question windows) that
    fit in K, history tokens (min, median, max) and the median of the key slots kept resident."""

    arm: str
    capacity: list[int]
    n: int
    fits_in_capacity: int
    history_tokens: list[float]
    resident_median: float


class QueryAware(TypedDict):
    capacity: list[Capacity]


class Publisher(TypedDict):
    """The paired changes with publisher-component draws and the exclusion sensitivity."""

    components: int
    base_groups: int
    crossing_questions: int
    crossing_components: int
    subsets: list[Subset]


class GraderAgreement(TypedDict):
    """One arm's (or all arms') model-grader labels against the rule grader's, as a 2x2 count table."""

    arm: str
    n: int
    both_correct: int
    judge_only: int
    rule_only: int
    both_wrong: int
    #: (both correct + both wrong) / n; None for no answer.
    agreement: float | None


class _SummaryKeys(TypedDict):
    questions: int
    groups: int
    rows: int
    skipped_questions: int
    arms: list[str]
    draws: int
    seed: int
    graders: list[str]
    #: The grades file's name (None: the rule grader's labels).
    grades_file: str | None
    subsets: list[Subset]
    by_type: list[TypeRow]
    inactive_identical: InactiveIdentical


class Summary(_SummaryKeys, total=False):
    """A session-bias run's ``summary.json``; the optional keys where the run has what they describe."""

    #: Runs with development policies; runs with query-aware methods; runs whose cases carry session ids.
    development: Development
    query_aware: QueryAware
    publisher: Publisher
    #: Runs graded from a grades file: the model grader's labels against the rule grader's, and the rule grader's
    #: subsets (:data:`RULE_SUBSETS`).
    grader_agreement: list[GraderAgreement]
    rule_subsets: list[Subset]
    #: Why the run's model judge cannot test a claim (None: the rule grader, or a judge that passes its audit); the
    #: rule grader's own audit (empty: none, or it passes).
    judge_validation: str | None
    rule_audit: str


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS, grades: str | Path | None = None
              ) -> Summary:
    """Recompute the summary from the rows on disk (module docstring)."""
    override = read_grades(grades) if grades is not None else None
    by_case: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    rule: dict[tuple[str, str], dict[str, Any]] = {}
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
            g = grade_of(override, key, grades, ("case", "arm"))
            rule[key] = row
            row = {**row, "correct": bool(g["correct"]), "grader": g["grader"]}
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
    tables = {"correct": correct, "eos_correct": eos_correct, "cap": cap, "tokens": tokens}
    query_aware = [a for a in conditions if a in QUERY_AWARE]
    subsets = []
    for key, label, m in _subset_masks(cases):
        subsets.append(_subset(key, label, m, groups, conditions, tables, weights,
                               versus_hard=query_aware if "hard" in conditions else []))
    out: Summary = {
        "questions": len(cases), "groups": len(set(groups)), "rows": n_rows, "skipped_questions": len(skipped),
        "arms": conditions, "draws": draws, "seed": seed, "graders": sorted(graders),
        "grades_file": None if grades is None else _grades_name(out_dir, grades),
        "subsets": subsets, "by_type": _by_type(cases, by_case, case_ids, conditions),
        "inactive_identical": _inactive_identical(cases, by_case, case_ids, conditions),
    }
    if any(a in DEVELOPMENT for a in conditions):
        out["development"] = _development(subsets, cases, by_case, case_ids, conditions)
    if query_aware:
        out["query_aware"] = _query_aware(query_aware, by_case, case_ids)
    if cases and all("session_ids" in c for c in cases):
        out["publisher"] = _publisher(cases, groups, conditions, tables, draws, seed)
    if override is not None:
        out["grader_agreement"] = _agreement(by_case, rule, conditions)
        out["rule_subsets"] = _rule_subsets(rule, cases, case_ids, groups, conditions, tables, weights)
    out.update(grader_validity(out_dir, TASK, out["graders"], RuleGrader.name, root=AUDIT_DIR))
    return out


def _rule_subsets(rule: dict[tuple[str, str], dict[str, Any]], cases: list[Case], case_ids: list[str],
                  groups: list[str], conditions: list[str], tables: dict[str, dict[str, np.ndarray]],
                  weights: np.ndarray) -> list[Subset]:
    """The rule grader's labels (``rule``: the rows as stored, by case and arm) on :data:`RULE_SUBSETS`: correct and
    EOS-restricted correct with their changes against full, over the judged summary's draws."""
    def vec(arm: str, key: Callable[[dict[str, Any]], float]) -> np.ndarray:
        return np.array([key(rule[(c, arm)]) if (c, arm) in rule else np.nan for c in case_ids], dtype=float)

    ruled = {**tables, "correct": {a: vec(a, lambda r: float(r["correct"])) for a in conditions},
             "eos_correct": {a: vec(a, lambda r: float(r["correct"] and r["stop_reason"] == "eos"))
                             for a in conditions}}
    return [_subset(key, label, m, groups, conditions, ruled, weights)
            for key, label, m in _subset_masks(cases) if key in RULE_SUBSETS]


def _subset_masks(cases: list[Case]) -> list[tuple[str, str, np.ndarray]]:
    """Each subset of :data:`SUBSETS` with its membership mask; the split exclusion only where a group crosses the
    split."""
    out = []
    for key, label, member in SUBSETS:
        m = np.array([bool(member(c)) for c in cases], dtype=bool)
        if key == "without_crossing_groups" and (m.all() or all(c["split"] == "all" for c in cases)):
            continue  # no group crosses the split (or no split was taken): nothing to exclude
        out.append((key, label, m))
    return out


def _grades_name(out_dir: Path | str, grades: str | Path) -> str:
    """The grades file as recorded: its name when it lies in the run directory (the summary then reproduces
    from a copy of the directory), else the path as given."""
    g = Path(grades)
    return g.name if g.resolve().parent == Path(out_dir).resolve() else str(grades)


def _subset(key: str, label: str, m: np.ndarray, groups: list[str], conditions: list[str],
            tables: dict[str, dict[str, np.ndarray]], weights: np.ndarray, versus_hard: list[str] = ()
            ) -> Subset:
    """One subset's cells: per arm, questions, correct, EOS-restricted correct, cap hits, mean tokens, and the
    paired changes against full (and, for the arms in ``versus_hard``, against the source mask ``hard``) over
    the bootstrap ``weights``."""
    correct, eos_correct, cap, tokens = (tables[k] for k in ("correct", "eos_correct", "cap", "tokens"))
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
        for reference in ["full"] + (["hard"] if condition in versus_hard else []):
            if condition == reference or reference not in conditions:
                continue
            both = present & ~np.isnan(correct[reference])
            if both.any():
                w = weights[:, both]
                for name, table in ((f"vs_{reference}", correct), (f"eos_vs_{reference}", eos_correct)):
                    diff = table[condition][both] - table[reference][both]
                    cell[name] = {**paired_change(table[condition][both], table[reference][both], w), **mean_change_pp(diff, w @ diff, w.sum(axis=1))}
        entry["arms"][condition] = cell
    return entry


def choose_policy(candidates: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The development policy :data:`SELECTION_RULE` picks from ``candidates`` (each with ``name``, ``weight``,
    ``gated``, ``change_all`` and ``change_updates``: net changes in correct answers against retention); None
    when there is none.

    Example: of ``soft-half`` (+1 overall, 0 on updates) and ``soft-quarter`` (+1, +2), ``soft-quarter`` (the
    tie on overall goes to the larger change on updates).
    """
    if not candidates:
        return None
    return min(candidates, key=lambda c: (-c["change_all"], -c["change_updates"], -c["weight"], not c["gated"]))


def _development(subsets: list[dict[str, Any]], cases: list[Case], by_case: dict, case_ids: list[str],
                 conditions: list[str]) -> Development:
    """The development table (retention = ``full``) and the chosen policy (module docstring)."""
    cells = {s["key"]: s for s in subsets}
    policies = ["full"] * ("full" in conditions) + [a for a in conditions if a in DEVELOPMENT]
    rows = []
    for name in policies:
        weight, gated = DEVELOPMENT.get(name, (1.0, True))
        row: dict[str, Any] = {"name": name, "policy": "retention" if name == "full" else name, "weight": weight,
                               "gated": gated, "active": sum(bool(by_case[c].get(name, {}).get("biased_tokens"))
                                                             for c in case_ids)}
        for key in MAIN_SUBSETS:
            cell = cells[key]["arms"].get(name)
            row[key] = None if cell is None else {"correct": cell["correct"], "n": cell["n"],
                                                  "vs_full": cell.get("vs_full")}
        change = {k: (row[k] or {}).get("vs_full") for k in ("all", "answerable_updates")}
        row["change_all"] = change["all"]["change"] if change["all"] else 0
        row["change_updates"] = change["answerable_updates"]["change"] if change["answerable_updates"] else 0
        rows.append(row)
    chosen = choose_policy([r for r in rows if r["name"] != "full"])
    return {"rule": SELECTION_RULE, "policies": rows, "chosen": None if chosen is None else chosen["name"],
            "oldest_weight": None if chosen is None else chosen["weight"],
            "gated": None if chosen is None else chosen["gated"],
            "beats_retention": None if chosen is None else chosen["change_all"] > 0}


def _query_aware(methods: list[str], by_case: dict, case_ids: list[str]) -> QueryAware:
    """Capacity accounting of the query-aware arms: K, histories (and question windows) that fit in K, key
    slots kept resident."""
    out = []
    for method in methods:
        rows = [by_case[c][method] for c in case_ids if method in by_case[c]]
        K = sorted({r["capacity"] for r in rows})
        history = np.array([r["history_tokens"] for r in rows], dtype=float)
        window = np.array([r["observation_tokens"] for r in rows], dtype=float)
        resident = np.array([r["resident_tokens"] for r in rows], dtype=float)
        fits = int(sum(h + w <= r["capacity"] for h, w, r in zip(history, window, rows)))
        out.append({"arm": method, "capacity": K, "n": len(rows), "fits_in_capacity": fits,
                    "history_tokens": [int(history.min()), float(np.median(history)), int(history.max())],
                    "resident_median": float(np.median(resident))})
    return {"capacity": out}


def _publisher(cases: list[Case], groups: list[str], conditions: list[str], tables: dict[str, dict[str, np.ndarray]],
               draws: int, seed: int) -> Publisher:
    """Paired changes with publisher-component draws beside the base-question ones, and the exclusion
    sensitivity (module docstring)."""
    component = publisher_components({c["case_id"]: (c["group"], c["session_ids"]) for c in cases})
    units = [component[c["case_id"]] for c in cases]
    weights = group_bootstrap_weights(units, n_draws=draws, seed=seed).astype(float)
    subsets = []
    for key, label, member in [s for s in SUBSETS if s[0] in MAIN_SUBSETS] + PUBLISHER_EXCLUSION:
        m = np.array([bool(member(c)) for c in cases], dtype=bool)
        subsets.append(_subset(key, label, m, units, conditions, tables, weights))
    return {"components": len(set(units)), "base_groups": len(set(groups)),
            "crossing_questions": sum(bool(c.get("publisher_crosses_split")) for c in cases),
            "crossing_components": len({u for u, c in zip(units, cases) if c.get("publisher_crosses_split")}),
            "subsets": subsets}


def _agreement(by_case: dict, rule: dict[tuple[str, str], dict[str, Any]], conditions: list[str]
               ) -> list[GraderAgreement]:
    """Per arm (and all arms): the judge's labels against the rule grader's, as a 2x2 count table."""
    out = []
    for arm in [*conditions, "all arms"]:
        pairs = [(bool(rows[a]["correct"]), bool(rule[(cid, a)]["correct"]))
                 for cid, rows in by_case.items() for a in rows if arm in (a, "all arms")]
        cell = {"arm": arm, "n": len(pairs), "both_correct": sum(j and r for j, r in pairs),
                "judge_only": sum(j and not r for j, r in pairs), "rule_only": sum(r and not j for j, r in pairs),
                "both_wrong": sum(not j and not r for j, r in pairs)}
        cell["agreement"] = (cell["both_correct"] + cell["both_wrong"]) / cell["n"] if cell["n"] else None
        out.append(cell)
    return out


def _by_type(cases: list[Case], by_case: dict, case_ids: list[str], conditions: list[str]
             ) -> list[TypeRow]:
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


def _unchanged_arms(rows: dict[str, dict[str, Any]]) -> list[str]:
    """The arms of a question that change no position: full, and every session-order arm without a biased or
    hidden position (the query-aware methods act on every question)."""
    return [a for a, r in rows.items()
            if a not in QUERY_AWARE and not r.get("biased_tokens") and not r.get("hidden_tokens")]


def _inactive_identical(cases: list[Case], by_case: dict, case_ids: list[str], conditions: list[str]
                        ) -> InactiveIdentical:
    """Inactive questions (the primary policy changes nothing) whose unchanged arms all gave one answer."""
    ids = [cid for cid, c in zip(case_ids, cases) if not c["active"] and len(_unchanged_arms(by_case[cid])) > 1]
    same = sum(len({by_case[cid][a]["output"] for a in _unchanged_arms(by_case[cid])}) == 1 for cid in ids)
    copied = sum(any(r.get("copied_from_full") for r in by_case[cid].values()) for cid in ids)
    return {"inactive_questions": len(ids), "identical_answers": same, "copied_from_full": copied}


# ----------------------------------------------------------------------------- report

def _correct(cell: dict[str, Any]) -> str:
    """An arm cell's correct answers as the share of its questions: ``12.5 (1/8)``; ``-`` for none."""
    return share_of(cell["correct"], cell["n"], percent="")


def _delta(change: dict[str, Any] | None) -> str:
    """A paired change as the reports spell a change in pp (``formatting.pp_change``) with its corrections and
    reversals: ``-12.5 [-26.3, +2.0] (2/7)``; empty for none (the reference arm)."""
    return f"{pp_change(change, ci='ci')} ({corrections_reversals(change, '/')})" if change else ""


def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: LongMemEval-Oracle, or seeded fixtures in its schema."""
    source = config.get("study_config", {}).get("source")
    return data_items("generated" if source == "fixtures" else source, "seeded conversation fixtures in the "
                      "LongMemEval schema", "LongMemEval-Oracle questions")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    """Markdown report: accuracy and paired changes per subset, termination, question types, run time."""
    study = config.get("study_config", {})
    conditions = summary["arms"]
    primary = [a for a in conditions if a in PRIMARY]
    others = [a for a in primary if a != "full"]
    lines = [
        *heading("Session-order bias and hard mask", config, items(config)),
        f"Source `{study.get('source')}`, split {study.get('split')}, {summary['questions']} questions in "
        f"{summary['groups']} groups ({summary['skipped_questions']} skipped as too long), {summary['rows']} rows. "
        f"Greedy answers of at most {study.get('max_new_tokens')} tokens, EOS stop; oldest-session weight "
        f"{study.get('oldest_weight')}. Grader: {', '.join(summary['graders'])}"
        f"{' (from ' + summary['grades_file'] + ')' if summary['grades_file'] else ''}. "
        "Correct = % (count/questions); changes = arm minus full in percentage points [95 % interval] "
        f"(corrections/reversals); paired bootstrap of question groups, {summary['draws']:,} draws, seed "
        f"{summary['seed']}." + _settings(summary, study), "",
        *_audit_lines(summary),
        "## Accuracy", "",
        *table_head(["subset", "questions", *primary, *(f"{a} - full, pp" for a in others)]),
    ]
    for s in summary["subsets"]:
        cells = [_correct(s["arms"][a]) for a in primary] + [_delta(s["arms"][a].get("vs_full")) for a in others]
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
                                                   if ident["copied_from_full"] else "") + ".", ""]
    lines += _development_lines(summary) + _query_aware_lines(summary) + _publisher_lines(summary)
    lines += _agreement_lines(summary) + _rule_lines(summary)
    lines += ["## By question type", "",
              *table_head(["question type", "questions", "active", *conditions])]
    for t in summary["by_type"]:
        name = t["question_type"] + (" (abstention)" if t["abstention"] else "")
        lines.append(table_row([name, t["questions"], t["active"], *(t["correct"][a] for a in conditions)]))
    if timing:
        per = f", {timing['seconds_per_case']:.1f} s per question" if timing.get("seconds_per_case") else ""
        lines += ["", run_time(timing, "questions", per)]
    return "\n".join(lines) + "\n"


def _settings(summary: dict[str, Any], study: dict[str, Any]) -> str:
    """The sentence on the gate and the capacity, for runs that change them or run the query-aware arms."""
    out = ""
    if study.get("gated") is False:
        out += " The soft bias and the hard mask are ungated (g(q) = 1 for every question)."
    if "query_aware" in summary:
        out += (f" Query-aware arms at a fixed capacity K = {study.get('capacity')} tokens; the source mask is the "
                "hard mask (the same session spans).")
    return out


def _development_lines(summary: dict[str, Any]) -> list[str]:
    dev = summary.get("development")
    if not dev:
        return []
    lines = ["## Development: choosing the bias weight", "",
             "Retention (full access, oldest-session weight 1) against half and quarter weight for the oldest "
             "session, with the question gate on and off. Changes against retention, pp [95 % interval] "
             f"(corrections/reversals). Selection rule (ours, fixed before the run): {dev['rule']}.", "",
             *table_head(["policy", "weight", "gate", "active", "all", "answerable updates", "other answerable",
                          "abstention", "all - retention, pp", "updates - retention, pp"])]
    for p in dev["policies"]:
        cells = [p["policy"], f"{p['weight']:g}", "on" if p["gated"] else "off", p["active"]]
        cells += [f"{p[k]['correct']}/{p[k]['n']}" if p[k] else "-" for k in MAIN_SUBSETS]
        cells += [_delta(_pp_change(p[k])) for k in ("all", "answerable_updates")]
        lines.append(table_row(cells))
    if dev["chosen"]:
        lines += ["", f"Chosen: {dev['chosen']} (oldest-session weight {dev['oldest_weight']:g}, gate "
                  f"{'on' if dev['gated'] else 'off'}); against retention it "
                  + ("gains answers on development." if dev["beats_retention"] else
                     "gains no answer on development (the development outputs favour retention; the chosen "
                     "attenuation is what validation tests).")]
    return lines + [""]


def _pp_change(cell: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if not cell else cell.get("vs_full")


def _query_aware_lines(summary: dict[str, Any]) -> list[str]:
    qa = summary.get("query_aware")
    if not qa:
        return []
    methods = [c["arm"] for c in qa["capacity"]]
    arms = [a for a in ("full", "hard") if a in summary["arms"]] + methods
    lines = ["## Query-aware methods at fixed capacity", "",
             "Full access, the source mask (`hard`: the guard's session spans) and the query-aware methods at one "
             "fixed capacity. EOS = correct and ended by EOS; cap = answers that hit the token limit. Changes in pp "
             "[95 % interval] (corrections/reversals).", "",
             *table_head(["subset", "arm", "correct", "EOS-restricted", "cap", "vs full, pp", "vs source mask, pp",
                          "EOS-restricted vs full, pp"])]
    for s in summary["subsets"]:
        if s["key"] not in (*MAIN_SUBSETS, "without_crossing_groups") or not s["questions"]:
            continue
        for a in arms:
            c = s["arms"][a]
            lines.append(table_row([s["label"], a, _correct(c), f"{c['eos_correct']}/{c['n']}", c["cap"],
                                    _delta(c.get("vs_full")), _delta(c.get("vs_hard")),
                                    _delta(c.get("eos_vs_full"))]))
    lines += ["", "Capacity: K, histories whose history and question window fit in K (the method then keeps "
              "every key), history tokens (min / median / max) and key slots kept resident before the final "
              "question token (median; FINCH keeps K per KV head, the others keep every slot and read fewer).", "",
              *table_head(["arm", "K", "fit in K", "history tokens", "resident (median)"])]
    for c in qa["capacity"]:
        h = c["history_tokens"]
        lines.append(table_row([c["arm"], "/".join(map(str, c["capacity"])), f"{c['fits_in_capacity']}/{c['n']}",
                                f"{h[0]} / {h[1]:g} / {h[2]}", f"{c['resident_median']:g}"]))
    return lines + [""]


def _publisher_lines(summary: dict[str, Any]) -> list[str]:
    pub = summary.get("publisher")
    if not pub:
        return []
    base = {s["key"]: s for s in summary["subsets"]}
    others = ([a for a in summary["arms"] if a in ("soft", "hard")]
              or [a for a in summary["arms"] if a in DEVELOPMENT])
    lines = ["## Publisher-session grouping", "",
             f"Bootstrap units: {pub['components']} components of questions linked by a shared publisher session id "
             f"or base question, against {pub['base_groups']} base-question groups. {pub['crossing_questions']} "
             f"questions ({pub['crossing_components']} components) are linked to questions of the other "
             "development/validation side; the exclusion rows leave them out. Changes against full in pp "
             f"[95 % interval], publisher grouping beside the base-question grouping ({', '.join(others)}; "
             "summary.json holds every arm).", "",
             *table_head(["subset", "questions", "units", "arm", "correct", "full", "change, publisher units",
                          "change, base groups"])]
    for s in pub["subsets"]:
        if not s["questions"]:
            continue
        for a in others:
            c, b = s["arms"][a], base.get(s["key"], {}).get("arms", {}).get(a, {})
            lines.append(table_row([s["label"], s["questions"], s["groups"], a, _correct(c),
                                    _correct(s["arms"]["full"]),
                                    _delta(c.get("vs_full")), _delta(b.get("vs_full"))]))
    return lines + [""]


def _agreement_lines(summary: dict[str, Any]) -> list[str]:
    agree = summary.get("grader_agreement")
    if not agree:
        return []
    lines = ["## Judge against the rule grader", "",
             "The judge's labels (the counts above) against the rule grader's labels stored in the rows.", "",
             *table_head(["arm", "answers", "both correct", "judge only", "rule only", "both wrong", "agreement"])]
    for c in agree:
        lines.append(table_row([c["arm"], c["n"], c["both_correct"], c["judge_only"], c["rule_only"], c["both_wrong"],
                                "-" if c["agreement"] is None else f"{100 * c['agreement']:.1f} %"]))
    return lines + [""]


def _audit_lines(summary: dict[str, Any]) -> list[str]:
    """The graders' audits (``judge_validation``, ``rule_audit``) in one sentence; none when neither says anything."""
    said = [s for s in (summary.get("judge_validation"), summary.get("rule_audit")) if s]
    if not said:
        return []
    judged = (" The scorecard's judged rows are not testable here; the rule grader's counts stand beside them "
              "(\"The rule grader beside the judge\")." if summary.get("judge_validation") else "")
    return [f"Grader audits (`artifacts/judge-audit/{TASK}`): {'; '.join(said)}.{judged}", ""]


def _rule_lines(summary: dict[str, Any]) -> list[str]:
    """The rule grader's counts and changes of a judged run (``rule_subsets``)."""
    subsets = summary.get("rule_subsets")
    if not subsets:
        return []
    lines = ["## The rule grader beside the judge", "",
             "The rule grader's labels (reference containment; refusals for abstention questions), stored in the rows, "
             "of the same answers and with the same draws: correct, EOS-restricted correct and their changes against "
             "full in pp [95 % interval] (corrections/reversals).", "",
             *table_head(["subset", "arm", "correct", "vs full, pp", "EOS-restricted", "EOS-restricted vs full, pp"])]
    for s in subsets:
        if not s["questions"]:
            continue
        for a in summary["arms"]:
            c = s["arms"][a]
            lines.append(table_row([s["label"], a, _correct(c), _delta(c.get("vs_full")), f"{c['eos_correct']}/{c['n']}",
                                    _delta(c.get("eos_vs_full"))]))
    return lines + [""]


def judge_run(out_dir: Path | str, judge_model: str, judge_dtype: str | None = None) -> Path:
    """Grade every answered row of a run with a local model and the official LongMemEval prompts
    (``grading.OfficialJudge``, ``local_judge.LocalJudgeClient``); returns ``grades.jsonl``'s path. Every prompt
    and reply goes to ``judge.jsonl`` as it is answered; a second call with the same judge model reuses them (a
    killed grading run resumes)."""
    from kvprobe.studies.common.local_judge import LocalJudgeClient
    from .grading import GRADES, OfficialJudge, grade_run

    client = LocalJudgeClient(judge_model, **({"dtype": judge_dtype} if judge_dtype else {}))
    judge = OfficialJudge(client, log_path=Path(out_dir) / "judge.jsonl", resume=True, progress=True)
    return grade_run(out_dir, judge, GRADES)
