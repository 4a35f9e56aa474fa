"""Summary and report of a BABILong run, recomputed from ``results.jsonl`` alone.

Per (task, length, policy): correct answers under the official-style parser
(EOS required), without the EOS requirement, and under the strict bare-location
rule; answers stopped by EOS; and the paired difference in official correct
answers against full access with a 95 % interval from 10,000 bootstrap draws of
whole source stories (the paper's clusters), the same draws for every cell.

``summary.json`` is a :class:`Summary` (its cells :class:`Cell`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, PairedChange, bootstrap_stream, group_bootstrap_weights, paired_change
from kvprobe.studies.common.formatting import stops
from kvprobe.studies.common.claims import verdict_text
from kvprobe.studies.common.report import NO_CHANGE_RULE, VERDICT_RULE, Items, corrections_reversals, data_items, estimate, \
    heading, run_time, table_head, table_row
from kvprobe.studies.common.runner import read_rows
from .claims import CLAIMS as PAPER_CLAIMS
from .claims import PAPER_MODELS, babilong_measurement, paper_counts
from .study import CONDITIONS

RULES = ("official", "official_no_eos", "strict")

#: The paper's claims the report judges in every (task, length) cell (paper partA 2; anchors at 32k, counts of 100):
#: (the claim in ``claims.py``, whose direction and rule judge it; task; condition; what the paper reports).
CLAIMS = (("babilong.qa3-naive", "qa3", "naive", f"{paper_counts('qa3', 'naive')} ({', '.join(PAPER_MODELS)})"),
          ("babilong.qa3-dependency", "qa3", "dependency", paper_counts("qa3", "dependency")),
          ("babilong.qa2-naive", "qa2", "naive", paper_counts("qa2", "naive")))
#: A no-change claim's tolerance: 5 % of the questions (the scorecard's 5 pp).
TOLERANCE = 0.05


class _CellKeys(TypedDict):
    task: str
    length: int
    policy: str
    n: int
    eos: int
    capped: int
    masked_tokens_mean: float
    official: int
    official_no_eos: int
    strict: int


class Cell(_CellKeys, total=False):
    """One (task, length, policy): its answers correct under each rule, how they stopped, the tokens it hid."""

    #: Full access only: how many gold locations its questions have, and the most common one's count (chance).
    locations: int
    majority: int
    #: Every other policy answering every question: official correct answers against full access, paired.
    official_change_vs_full: PairedChange


class Summary(TypedDict):
    """A BABILong run's ``summary.json``."""

    cells: list[Cell]
    draws: int
    seed: int
    rows: int


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> Summary:
    """Cells and paired differences of a run directory."""
    rows = list(read_rows(out_dir))
    by_cell: dict[tuple[str, int], dict[str, dict[str, dict]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        by_cell[(r["task"], r["length"])][r["condition"]][r["case_id"]] = r
    cells = []
    rng = bootstrap_stream(seed)  # one stream: each cell's draws follow the previous cell's
    for (task, length), per_condition in sorted(by_cell.items()):
        full = per_condition.get("full", {})
        case_ids = sorted(full)
        # Chance: what always giving the most common gold location scores (every answer is a location).
        answers = Counter(r["answer"] for r in full.values())
        weights = group_bootstrap_weights([full[c]["group"] for c in case_ids], n_draws=draws, seed=rng)
        for condition in [p for p in CONDITIONS if p in per_condition]:
            mine = per_condition[condition]
            cell: Cell = {"task": task, "length": length, "policy": condition, "n": len(mine),
                    **stops(mine.values()),
                    "masked_tokens_mean": float(np.mean([r["masked_tokens"] for r in mine.values()]))}
            for rule in RULES:
                cell[rule] = sum(bool(r[rule]) for r in mine.values())
            if condition == "full":
                cell["locations"] = len(answers)
                cell["majority"] = max(answers.values()) if answers else 0
            if condition != "full" and all(c in mine for c in case_ids):
                cell["official_change_vs_full"] = paired_change([int(mine[c]["official"]) for c in case_ids],
                                                                [int(full[c]["official"]) for c in case_ids],
                                                                weights)
            cells.append(cell)
    return {"cells": cells, "draws": draws, "seed": seed, "rows": len(rows)}


def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: the published samples, or inputs generated in their schema."""
    return data_items(config.get("study_config", {}).get("source"), "BABILong qa2/qa3 inputs built from the "
                      "bAbI test release and PG-19 filler", "the published BABILong samples")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    study = config.get("study_config", {})
    source = study.get("source", "generated")
    if source == "generated":
        inputs = (f"context lengths {study.get('lengths')} (estimated tokens of filler + facts; inputs **generated** "
                  "from the bAbI test release and PG-19 text, not the published samples)")
    else:
        inputs = f"the published samples at {', '.join(study.get('released_lengths', []))} (from `{source}`)"
    conditions = study.get("condition_set", list(CONDITIONS[:4]))
    dynamic = [p for p in conditions if p in ("quest", "finch", "refreshkv")]
    lines = [*heading("BABILong object dependencies", config, items(config)),
             f"Tasks {', '.join(study.get('tasks', []))}, {inputs}, {study.get('n')} questions per task, greedy "
             "answers of at most "
             f"{study.get('max_new_tokens')} tokens, official prompt "
             f"({'templateless' if study.get('chat') is False else 'through the chat template when the model has one'}). Policies: full access; naive (hide all but each person's last movement); "
             "dependency (also keep the movements that place pickups and drops and carry objects); neutral "
             "(hide as many filler tokens as the dependency rule hides)"
             + (f"; {', '.join(dynamic)} at a fixed capacity of {study.get('capacity')} tokens" if dynamic else "")
             + ". Correct = official-style location "
             "parser with EOS required; change vs full with a 95% interval from "
             f"{summary['draws']:,} bootstrap draws of source stories.", ""]
    if timing:
        lines += [run_time(timing, "inputs", machine=True), ""]
    lines += table_head(["task", "length", "policy", "n", "correct (official)", "change vs full [95% CI]",
                         "corrections / reversals", "no-EOS parser", "strict", "EOS", "capped", "masked tokens"])
    for c in summary["cells"]:
        ch = c.get("official_change_vs_full")
        change = estimate(ch["change"], ch["ci"], "+d", "+.0f") if ch else ""
        cr = corrections_reversals(ch)
        lines.append(f"| {c['task']} | {c['length']} | {c['policy']} | {c['n']} | {c['official']} | {change} | {cr} "
                     f"| {c['official_no_eos']} | {c['strict']} | {c['eos']} | {c.get('capped', '')} "
                     f"| {c['masked_tokens_mean']:.0f} |")
    lines.append("")
    lines += claim_lines(summary)
    return "\n".join(lines)


def claim_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Each claim of :data:`CLAIMS` in each (task, length) cell with its verdict against full access, the paper's
    reference condition: the scorecard's measurement of the claim (``claims.babilong_measurement``) judged by its
    rule (``studies.common.claims.verdict_text``), not testable when full access answers no better than always
    giving the most common location, or below the 10 % floor."""
    out = []
    cells = {(c["task"], c["length"], c["policy"]): c for c in summary["cells"]}
    claims = {c.key: c for c in PAPER_CLAIMS}
    for key, task, condition, paper in CLAIMS:
        for length in sorted({c["length"] for c in summary["cells"] if c["task"] == task}):
            full, mine = cells.get((task, length, "full")), cells.get((task, length, condition))
            if full is None or mine is None or "official_change_vs_full" not in mine or "majority" not in full:
                continue
            ch = mine["official_change_vs_full"]
            m = babilong_measurement(summary["cells"], task, length, condition, (full["majority"], full["n"], "?"))
            out.append({"task": task, "length": length, "policy": condition, "paper": paper,
                        "estimate": estimate(ch["change"], ch["ci"], "+d", "+.0f"),
                        "reference": f"full {full['official']} of {full['n']}; majority answer {full['majority']}",
                        "verdict": verdict_text(claims[key], m)})
    return out


def claim_lines(summary: dict[str, Any]) -> list[str]:
    claims = claim_rows(summary)
    if not claims:
        return []
    return ["## The paper's effects at this size", "",
            f"Verdicts against full access, the paper's reference arm: {VERDICT_RULE}; "
            f"{NO_CHANGE_RULE.format(tolerance=f'{TOLERANCE:.0%} of the questions')}. Chance: always "
            "answering the most common gold location (one of the story's locations); full access must beat it by an exact "
            "test (its Clopper-Pearson 95% interval above the majority answer's share). "
            "Paper anchors: 32k tokens, counts of 100.", "",
            *table_head(["task", "length", "policy vs full", "paper (full -> policy)", "ours [95% CI]",
                         "reference: full, chance", "verdict"]),
            *(table_row([c["task"], c["length"], c["policy"], c["paper"], c["estimate"], c["reference"], c["verdict"]])
              for c in claims), ""]
