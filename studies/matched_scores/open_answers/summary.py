"""Summary and report of an open-OAKS-answers run (paper app:v41_oaks_open, tab:v41_oaks_open,
tab:v43_oaks_error_types, tab:v52_oaks_protocols), recomputed from ``results.jsonl`` and the grades.

Grades: ``grades`` names a grades file (``grading.grade_run``, the source-aware model grader); by default the
run's own ``grades.jsonl`` when present, else the rule grader's labels (``grading.rule_verdicts``). The report
names the grader.

Per question the three arms are paired (questions missing an arm are left out). A question's verdicts
(answerability, reference support) are those of its full-access row's judgment (the per-question prompts hold no
answer, so every arm's judgment of them is one judgment). Outcomes per row, each requiring EOS (L4622, L4653):

* ``complete``: source-complete (the completeness verdict ``complete``);
* ``agreement``: the same grader's reference agreement (``yes``);
* ``reference_only``: the reference-only protocol (``yes``).

Panels: the questions judged answerable (the paper's 92) and all questions (116). Per panel and protocol: the
count and percentage per arm, and the paired changes mask - full and mask - control in percentage points; the
protocol difference (reference agreement minus source completeness, of mask - full). Intervals: 10,000 draws of
reused-source components (questions linked by a shared earlier or later source text,
``readouts.stats.connected_components``) resampled within books, seed 20260919, percentile 95 %; a draw's change
is its weighted sum of paired differences over its weighted question count (L4612-4613, L4725-4731). Judge
labels are held fixed.

Grader validity: ``judge_validation`` says why the run's model judge cannot test a claim (its audit on the oaks-open
set, ``artifacts/judge-audit``, fails the bar or is missing; None for the rule grader or a judge that passes),
``rule_audit`` how the rule grader fares on the same audit set, and a run graded by a model judge also holds
``rule_grader``: the rule grader's answerable panel on the same answers (its own answerability), so that the
report gives the rule grader's verdict beside every judged one.

Also: the outcomes of full-complete answers under the mask (complete, partial, abstain, wrong, capped; against
full access and against the control; tab:v43_oaks_error_types), answers the two same-grader protocols disagree
on (and how many of them on questions whose reference is partially supported), justified and unjustified
abstentions, and literal quotations of the masked record per arm.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import (DRAWS, PAPER_SEED, connected_components, group_bootstrap_weights,
                                    percentile_interval, weighted_sums)
from kvprobe.studies.common.formatting import eos_count
from kvprobe.studies.common.claims import grader_validity, join_reasons, verdict_text
from kvprobe.studies.common.judge_audit import AUDIT_DIR
from kvprobe.studies.common.report import (VERDICT_RULE, heading, percent_count, run_time, small_sample_note,
                                           table_head, table_row)
from kvprobe.studies.common.grades import grade_of
from kvprobe.studies.common.runner import read_rows
from kvprobe.studies.datasets.oaks import items as oaks_items

from . import grading, paper
from .claims import CLAIMS, oaks_open_measurement
from .study import CONDITIONS

#: The audit task of this study's graders (``kvprobe report judge-audit MODEL oaks-open``).
TASK = "oaks-open"
#: Outcome columns: name -> (verdict kind, the label that counts).
PROTOCOLS = {"complete": ("completeness", "complete"), "agreement": ("agreement", "yes"),
             "reference_only": ("reference_only", "yes")}
PROTOCOL_NAMES = {"complete": "Source complete", "agreement": "Reference agreement (same grader)",
                  "reference_only": "Reference only (no excerpts)"}
#: Paired contrasts: name -> (condition, reference).
CONTRASTS = {"mask_vs_full": ("mask", "full"), "mask_vs_control": ("mask", "control")}
#: What a full-complete baseline becomes under the mask.
OUTCOMES = ("complete", "partial", "abstain", "wrong", "capped", grading.UNPARSED)


def verdicts(rows: list[dict[str, Any]], grades: dict[tuple[str, str], dict[str, Any]] | None
             ) -> list[dict[str, Any]]:
    """Each row with its five verdicts and the grader (the grades file's, else the rule grader's)."""
    out = []
    for r in rows:
        g = (grade_of(grades, (r["case_id"], r["condition"]), "the grades file", ("case", "condition"))
             if grades is not None else None)
        v = {k: g[k] for k in grading.strings.PROMPTS} if g else grading.rule_verdicts(r)
        out.append({**r, **{f"v_{k}": x for k, x in v.items()}, "graded_by": g["grader"] if g else grading.RULE_GRADER})
    return out


def outcome(row: dict[str, Any], protocol: str) -> int:
    """1 when the row counts under ``protocol`` (its label and EOS), else 0."""
    kind, label = PROTOCOLS[protocol]
    return int(row[f"v_{kind}"] == label and row["stop_reason"] == "eos")


def components(first: list[dict[str, Any]]) -> list[str]:
    """Each question's reused-source component (questions sharing an earlier or later source text)."""
    links = connected_components({r["case_id"]: {r["earlier"], r["later"]} for r in first})
    return [str(links[r["case_id"]]) for r in first]


def paired_pp(diff: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """A paired change in percentage points: ``100 * mean(diff)`` and its interval over the draws (each draw's
    weighted sum over its weighted question count)."""
    n = len(diff)
    draws = 100 * weighted_sums(weights, diff) / weights.sum(axis=1)
    return {"pp": 100 * float(diff.sum()) / n, "change": int(diff.sum()), "corrections": int((diff > 0).sum()),
            "reversals": int((diff < 0).sum()), "ci": percentile_interval(draws, points="level")}


def panel_summary(by: dict[str, list[dict[str, Any]]], idx: np.ndarray, weights: np.ndarray) -> dict[str, Any]:
    """Counts, paired changes and the protocol difference on the questions ``idx``."""
    w = weights[:, idx]
    table = {p: {c: np.array([outcome(by[c][i], p) for i in idx]) for c in CONDITIONS} for p in PROTOCOLS}
    out: dict[str, Any] = {"n": int(len(idx)), "components": None, "protocols": {}}
    for p, arms in table.items():
        out["protocols"][p] = {"counts": {c: int(arms[c].sum()) for c in CONDITIONS},
                               **{name: paired_pp(arms[a] - arms[b], w) for name, (a, b) in CONTRASTS.items()}}
    comp, agr = table["complete"], table["agreement"]
    out["agreement_minus_complete"] = paired_pp((agr["mask"] - agr["full"]) - (comp["mask"] - comp["full"]), w)
    return out


def baseline_losses(by: dict[str, list[dict[str, Any]]], idx: np.ndarray, baseline: str) -> dict[str, Any]:
    """What the ``baseline`` arm's complete answers on ``idx`` become under the mask (:data:`OUTCOMES`)."""
    kept = [i for i in idx if outcome(by[baseline][i], "complete")]
    counts = Counter("capped" if by["mask"][i]["stop_reason"] != "eos" else by["mask"][i]["v_completeness"]
                     for i in kept)
    return {"baseline": len(kept), **{o: counts.get(o, 0) for o in OUTCOMES}}


class _SummaryKeys(TypedDict):
    questions: int
    rows: int
    seed: int
    draws: int
    graders: list[str]


class RuleGrader(TypedDict):
    """The rule grader's labels of a judged run's answers: its grader and its answerable panel."""

    graders: list[str]
    panels: dict[str, Any]


class Summary(_SummaryKeys, total=False):
    """An open-OAKS run's ``summary.json`` (a run without complete questions has only the counts)."""

    #: Why the run's model judge cannot test a claim (None: rule grader, or a judge that passes its audit); the
    #: rule grader's own audit (empty: none, or it passes); a judged run's answers under the rule grader.
    judge_validation: str | None
    rule_audit: str
    rule_grader: RuleGrader

    books: int
    answerability: dict[str, int]
    reference_support: dict[str, int]
    #: Per condition: answers that stopped at EOS.
    eos: dict[str, int]
    panels: dict[str, Any]
    protocol_disagreements: dict[str, Any]
    abstentions: dict[str, Any]
    quotes_old_source: dict[str, int]
    labels: dict[str, Any]
    unparsed: dict[str, Any]


def summarize(out_dir: Path | str, seed: int = PAPER_SEED, draws: int = DRAWS,
              grades: str | Path | None = None) -> Summary:
    """Every estimate of a run (module docstring)."""
    out_dir = Path(out_dir)
    if grades is None and (out_dir / grading.GRADES).is_file():
        grades = out_dir / grading.GRADES
    rows = verdicts(list(read_rows(out_dir)), None if grades is None else grading.read_grades(grades))
    cases = [c for c in dict.fromkeys(r["case_id"] for r in rows)
             if {r["condition"] for r in rows if r["case_id"] == c} >= set(CONDITIONS)]
    by = by_condition(rows, cases)
    out: Summary = {"questions": len(cases), "rows": len(rows), "seed": seed, "draws": draws,
                    "graders": sorted({r["graded_by"] for r in rows})}
    if not cases:
        return out
    first = by["full"]
    comps = components(first)
    books = [r["stratum"] for r in first]
    weights = group_bootstrap_weights(np.array(comps), n_draws=draws, seed=seed, strata=np.array(books))
    answerable = np.flatnonzero([r["v_answerability"] == "answerable" for r in first])
    out["books"] = len(set(books))
    out["answerability"] = dict(Counter(r["v_answerability"] for r in first))
    out["reference_support"] = dict(Counter(r["v_reference_support"] for r in first))
    out["eos"] = {c: eos_count(by[c]) for c in CONDITIONS}
    out["panels"] = {}
    for name, idx in (("answerable", answerable), ("all", np.arange(len(cases)))):
        if not len(idx):
            continue
        s = panel_summary(by, idx, weights)
        s["components"] = len({comps[i] for i in idx})
        s["losses"] = {b: baseline_losses(by, idx, b) for b in ("full", "control")}
        out["panels"][name] = s
    every = [r for c in CONDITIONS for r in by[c]]
    disagree = [r for r in every if outcome(r, "complete") != outcome(r, "agreement")]
    out["protocol_disagreements"] = {"answers": len(every), "disagree": len(disagree),
                                     "reference_partial": sum(r["v_reference_support"] == "partial" for r in disagree)}
    out["abstentions"] = {c: {"justified": sum(r["v_completeness"] == "abstain" and r["v_answerability"] != "answerable"
                                               for r in by[c]),
                              "unjustified": sum(r["v_completeness"] == "abstain"
                                                 and r["v_answerability"] == "answerable" for r in by[c])}
                          for c in CONDITIONS}
    out["quotes_old_source"] = {c: sum(r["quotes_old_source"] is not None for r in by[c]) for c in CONDITIONS}
    out["labels"] = {c: dict(Counter(r["v_completeness"] for r in by[c])) for c in CONDITIONS}
    out["unparsed"] = {k: sum(r[f"v_{k}"] == grading.UNPARSED for r in every) for k in grading.strings.PROMPTS}
    out.update(grader_validity(out_dir, TASK, out["graders"], grading.RULE_GRADER, root=AUDIT_DIR))
    if grades is not None and (rule := rule_grader(rows, cases, weights, comps)) is not None:
        out["rule_grader"] = rule
    return out


def by_condition(rows: list[dict[str, Any]], cases: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Each condition's rows in the order of ``cases``."""
    return {c: [next(r for r in rows if r["case_id"] == k and r["condition"] == c) for k in cases] for c in CONDITIONS}


def rule_grader(rows: list[dict[str, Any]], cases: list[str], weights: np.ndarray, comps: list[str]
                ) -> RuleGrader | None:
    """The rule grader's answerable panel on a judged run's answers (its own answerability; the same draws), or
    None when it finds no question answerable."""
    by = by_condition(verdicts([{k: v for k, v in r.items() if not k.startswith("v_")} for r in rows], None), cases)
    idx = np.flatnonzero([r["v_answerability"] == "answerable" for r in by["full"]])
    if not len(idx):
        return None
    panel = panel_summary(by, idx, weights)
    panel["components"] = len({comps[i] for i in idx})
    return {"graders": [grading.RULE_GRADER], "panels": {"answerable": panel}}


# ----------------------------------------------------------------------------- report

def change_cell(c: dict[str, Any]) -> str:
    lo, hi = c["ci"]
    return f"{c['pp']:+.1f} [{lo:+.1f}, {hi:+.1f}]"


def items(config: dict[str, Any]):
    return oaks_items(config.get("study_config", {}).get("oaks_source"))


def protocol_table(s: dict[str, Any]) -> list[str]:
    lines = table_head(["protocol", "full", "source mask", "control", "mask - full (pp) [95% CI]",
                        "mask - control (pp) [95% CI]"])
    for p, name in PROTOCOL_NAMES.items():
        t = s["protocols"][p]
        lines.append(table_row([name, *(percent_count(t["counts"][c], s["n"]) for c in ("full", "mask", "control")),
                                change_cell(t["mask_vs_full"]), change_cell(t["mask_vs_control"])]))
    return lines


def claim_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The paper's Qwen3-32B claims (``claims.py``) on the answerable panel with their verdicts: the source-complete
    loss (mask - full) and the protocol difference (reference agreement minus source completeness), each the
    scorecard's measurement (``claims.oaks_open_measurement``) judged by its claim's rule
    (``studies.common.claims.verdict_text``); not testable where the run's judge fails its audit
    (``judge_validation``, as the scorecard's rows). A judged run gives the rule grader's row on the same answers
    beside each claim (``rule_grader``)."""
    if summary["panels"].get("answerable") is None:
        return []
    claims = {c.key: c for c in CLAIMS}
    lost, protocols = claims["oaks-open.source-complete"], claims["oaks-open.protocols"]
    graded = [(summary, ", ".join(summary["graders"]), summary.get("judge_validation"))]
    if "rule_grader" in summary:
        graded.append((summary["rule_grader"], f"{grading.RULE_GRADER} (same answers)", None))
    rows = []
    for claim, quantity, text in ((lost, "mask_vs_full", "masking the old source loses source-complete answers "
                                   "(mask - full, pp)"),
                                  (protocols, "agreement_minus_complete", "reference agreement misses that loss "
                                   "(agreement minus completeness, pp)")):
        for s, grader, gate in graded:
            panel = s["panels"]["answerable"]
            d = panel["protocols"]["complete"]["mask_vs_full"] if quantity == "mask_vs_full" else \
                panel["agreement_minus_complete"]
            m = oaks_open_measurement(s, quantity)
            m = replace(m, not_testable=join_reasons(gate, m.not_testable))
            rows.append({"claim": text, "grader": grader, "paper": claim.paper.numbers.removesuffix(" pp"),
                         "estimate": change_cell(d),
                         "reference": f"full {panel['protocols']['complete']['counts']['full']} of {panel['n']}",
                         "verdict": verdict_text(claim, m) + (f" ({m.not_testable})" if m.not_testable else "")})
    return rows


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    study = config.get("study_config", {})
    source = study.get("oaks_source")
    lines = [*heading("Open answers on natural source excerpts", config, items(config))]
    data = (("OAKS-schema demonstration set GENERATED from the PG-19 novel (not the OAKS data)"
             if source == "demonstration" else f"OAKS file `{source}`")
            + f", {study.get('oaks_split')} books: one answer transition per question, the options and the "
            "A/B/UNKNOWN instruction removed; greedy answers of at most "
            f"{study.get('max_new_tokens')} tokens under full access, the old-source mask (the earlier source) and "
            "its equal-token control (the start of the unrelated source).")
    lines += [data + f" {summary['questions']} questions, {summary['rows']} rows.", ""]
    if timing:
        lines += [run_time(timing, unit="questions", machine=True), ""]
    if not summary["questions"]:
        return "\n".join(lines + ["No question has all three arms yet.", ""])
    graders = summary["graders"]
    rule_only = graders == [grading.RULE_GRADER]
    lines += [f"Graded by: {', '.join(graders)}" + (
        " (the offline rule grader: reference word present and old answer absent; it never says partial, every "
        "question whose later excerpt holds the reference counts as answerable, and its three protocols coincide)."
        if rule_only else " (the source-aware model grader, one prompt per verdict; see grading.py)."), ""]
    eos = summary["eos"]
    lines += [f"Answers ending at EOS: full {eos['full']}, mask {eos['mask']}, control {eos['control']} of "
              f"{summary['questions']} each. Question review: "
              + ", ".join(f"{k} {v}" for k, v in sorted(summary["answerability"].items()))
              + "; reference support: " + ", ".join(f"{k} {v}" for k, v in sorted(summary["reference_support"].items()))
              + ".", ""]
    for name, s in summary["panels"].items():
        title = f"{s['n']} questions judged answerable" if name == "answerable" else f"all {s['n']} questions"
        lines += [f"### Three grading protocols, {title}", "",
                  f"Each protocol requires EOS. Intervals: {summary['draws']:,} draws of {s['components']} "
                  f"reused-source components within {summary['books']} books, seed {summary['seed']}.", "",
                  *small_sample_note(s["components"], "reused-source components"),
                  *protocol_table(s), "",
                  f"Reference agreement minus source completeness (of mask - full): "
                  f"{change_cell(s['agreement_minus_complete'])} pp.", ""]
        lines += ["Full-complete (and control-complete) answers under the mask:", "",
                  *table_head(["baseline", "n", *OUTCOMES])]
        for b, t in s["losses"].items():
            lines.append(table_row([b, t["baseline"], *(t[o] for o in OUTCOMES)]))
        lines.append("")
    lines += ["Completeness labels per arm: " + "; ".join(
        f"{c} " + ", ".join(f"{k} {v}" for k, v in sorted(summary["labels"][c].items())) for c in CONDITIONS)
        + ". Replies giving no label (unparsed): " + ", ".join(f"{k} {v}" for k, v in summary["unparsed"].items())
        + ".", ""]
    d = summary["protocol_disagreements"]
    lines += [f"The two same-grader protocols disagree on {d['disagree']} of {d['answers']} answers, "
              f"{d['reference_partial']} of them on questions whose reference is partially supported.", ""]
    ab = summary["abstentions"]
    lines += ["Abstentions (justified: the question is not judged answerable): " + "; ".join(
        f"{c} {ab[c]['justified']} justified, {ab[c]['unjustified']} unjustified" for c in CONDITIONS) + ".", ""]
    q = summary["quotes_old_source"]
    lines += [f"Answers quoting the earlier (masked) source literally ({grading.QUOTE_WORDS} consecutive words found "
              "in no visible text): " + ", ".join(f"{c} {q[c]}" for c in CONDITIONS) + ".", ""]
    claims = claim_rows(summary)
    if claims:
        lines += ["### The paper's effects at this size", "", f"Verdicts: {VERDICT_RULE}. Reference arm: full access "
                  "on the answerable questions.", "",
                  *table_head(["the paper's claim", "grader", "paper", "ours [95% CI]", "reference arm", "verdict"])]
        lines += [table_row([c["claim"], c["grader"], c["paper"], c["estimate"], c["reference"], c["verdict"]])
                  for c in claims]
        lines.append("")
        if summary.get("rule_audit"):
            lines += [f"The rule grader is a baseline, not gated by its audit: {summary['rule_audit']}.", ""]
    lines += paper.lines()
    return "\n".join(lines)


def judge_run(out_dir: Path | str, judge_model: str, judge_dtype: str | None = None) -> Path:
    """Grade the run with that local model (``judge_dtype``: its dtype) and the source-aware rubric into its
    ``grades.jsonl`` (and ``judge.jsonl``, every prompt and reply); returns the grades file (the registry's
    ``Graded.judge``: ``kvprobe report oaks-open RUN --judge-model M``)."""
    client = grading.PrefixSharingClient(judge_model, **({"dtype": judge_dtype} if judge_dtype else {}))
    return grading.grade_run(out_dir, client, progress=True)
