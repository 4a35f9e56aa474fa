"""Summary and report of a FactConsolidation run, recomputed from ``results.jsonl`` (and a grades file).

Per operation (paper app:v43_mab, Table tab:v43_mab_termination): the official full-response
substring match, the final-answer substring match with EOS, complete answers with EOS, termination
(EOS with a valid box, capped, only a box with EOS). Then the net-accuracy analysis
(app:v45_mab_analysis; :mod:`outcomes`): transitions full -> source, full -> value,
full -> recompute and source -> recompute, capped answers first; strata by hop type, by the
full-access answer's length, and by old-alias-in-box; the capped answers' own labels, apart.

The paper's counts are descriptive (no intervals). Ours add one column: the change in complete
answers with EOS against full access, with a 95% percentile interval from paired bootstrap draws of
whole histories (:func:`kvprobe.readouts.stats.paired_change`; a history's questions are not
independent) when the run has at least ``readouts.stats.MIN_HISTORIES`` histories, and without an
interval otherwise (questions are never resampled inside so few histories). Labels come from the rule grader unless
``grades`` names a grades file (``grading.grade_run``); every question counts as source-answerable
(the generated set is answerable by construction; the paper's grader judged 373 of 400 answerable).
"""

from __future__ import annotations

import functools
from collections import defaultdict
from pathlib import Path
from typing import Any

from kvprobe.readouts.stats import DRAWS, group_bootstrap_weights, may_resample_within, paired_change
from kvprobe.studies.common.report import Items, data_items, estimate, heading, nested_note, run_time, small_sample_note, \
    table_head, table_row
from kvprobe.studies.common.runner import read_rows, write_run_summary

from .grading import RULE_GRADER, read_grades
from .histories import HOPS
from .outcomes import OUTCOMES, capped_labels, losses_by_length, old_alias_group, outcome, transitions
from .study import CONDITIONS

#: Transitions the report shows (paper Figure fig:v45_mab_outcomes and L1740-1748).
TRANSITIONS = (("full", "source"), ("full", "value"), ("full", "recompute"), ("source", "recompute"))

Key = tuple[str, str]


def _metrics(rows: list[dict[str, Any]]) -> dict[str, Any]:
    eos = [r for r in rows if r["stop_reason"] == "eos"]
    return {"n": len(rows), "official_match": sum(r["official_match"] for r in rows),
            "final_match_eos": sum(r["final_match"] for r in rows),
            "complete_eos": sum(r["outcome"] == "complete" for r in rows), "eos": len(eos),
            "eos_valid_box": sum(r["valid_box"] for r in eos), "capped": len(rows) - len(eos),
            "only_box_eos": sum(r["only_box"] for r in eos),
            "outcomes": {o: sum(r["outcome"] == o for r in rows) for o in OUTCOMES}}


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS, grades: str | Path | None = None
              ) -> dict[str, Any]:
    """The summary dict (module docstring) of a run directory."""
    override = read_grades(grades) if grades is not None else None
    by: dict[str, dict[Key, dict[str, Any]]] = defaultdict(dict)
    graders = set()
    for r in read_rows(out_dir):
        key = (r["case_id"], r["qa_pair_id"])
        if override is not None:
            g = override.get((r["case_id"], r["qa_pair_id"], r["condition"]))
            if g is None:
                raise ValueError(f"{grades}: no grade for {key} under {r['condition']!r}")
            r = {**r, "label": g["label"], "grader": g["grader"]}
        graders.add(r["grader"])
        by[r["condition"]][key] = {**r, "outcome": outcome(r["stop_reason"], r["label"])}
    conditions = [p for p in CONDITIONS if p in by]
    full = by.get("full", {})
    keys = sorted(full)
    histories = sorted({c for c, _ in keys})
    # Whole histories are the bootstrap units; with fewer than MIN_HISTORIES there is no interval.
    boot = (group_bootstrap_weights([c for c, _ in keys], n_draws=draws, seed=seed)
            if keys and may_resample_within(len(histories)) else None)
    cells = []
    for p in conditions:
        cell = {"policy": p, **_metrics(list(by[p].values()))}
        if p != "full" and keys and all(k in by[p] for k in keys):
            mine, ref = ([int(rows[k]["outcome"] == "complete") for k in keys] for rows in (by[p], full))
            cell["complete_change_vs_full"] = (paired_change(mine, ref, boot) if boot is not None else
                                               _change_without_interval(mine, ref))
        cell["capped_labels"] = capped_labels({k: r["stop_reason"] for k, r in by[p].items()},
                                              {k: r["label"] for k, r in by[p].items()})
        cells.append(cell)
    outcomes = {p: {k: r["outcome"] for k, r in by[p].items()} for p in conditions}
    return {"cells": cells, "transitions": _transitions(outcomes, by), "by_hop": _by_hop(outcomes, by),
            "graders": sorted(graders), "grades_file": None if grades is None else str(grades),
            "histories": sorted({c for c, _ in keys}), "questions": len(keys), "draws": draws, "seed": seed}


def _change_without_interval(mine: list[int], reference: list[int]) -> dict[str, Any]:
    """A paired change's count, corrections and reversals, with no interval (``ci`` None)."""
    diff = [a - r for a, r in zip(mine, reference)]
    return {"change": sum(diff), "corrections": sum(d > 0 for d in diff), "reversals": sum(d < 0 for d in diff),
            "ci": None}


def _transitions(outcomes: dict[str, dict[Key, str]], by: dict[str, dict[Key, dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for a, b in TRANSITIONS:
        if a not in outcomes or b not in outcomes:
            continue
        before, after = outcomes[a], outcomes[b]
        out.append({"before": a, "after": b, **transitions(before, after),
                    "by_length": losses_by_length(before, after, {k: r["output_tokens"] for k, r in by[a].items()}),
                    "old_alias": old_alias_group(before, after, {k: bool(r["old_in_box"]) for k, r in by[a].items()})})
    return out


def _by_hop(outcomes: dict[str, dict[Key, str]], by: dict[str, dict[Key, dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for hop in HOPS:
        mine = {p: {k: o for k, o in outcomes[p].items() if by[p][k]["hop"] == hop} for p in outcomes}
        if not mine.get("full"):
            continue
        entry = {"hop": hop, "n": len(mine["full"]),
                 "complete_eos": {p: sum(o == "complete" for o in mine[p].values()) for p in mine},
                 "capped": {p: sum(o == "capped" for o in mine[p].values()) for p in mine}}
        entry["transitions"] = [{"before": a, "after": b, **{k: v for k, v in transitions(mine[a], mine[b]).items()
                                                           if k != "table"}}
                                for a, b in TRANSITIONS if a in mine and b in mine]
        out.append(entry)
    return out


def _pct(k: int, n: int) -> str:
    return f"{100 * k / n:.1f}% ({k})" if n else f"- ({k})"


def _split(counts: dict[str, int]) -> str:
    return ", ".join(f"{o} {counts[o]}" for o in OUTCOMES if counts.get(o)) or "-"


def items(config: dict[str, Any]) -> Items:
    """Where a run's items come from: released histories, or fictional ones generated in their schema."""
    return data_items(config.get("study_config", {}).get("data"), "fictional histories in the FactConsolidation "
                      "(MemoryAgentBench) schema, built from MQuAKE relation templates",
                      "released FactConsolidation histories")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    study = config.get("study_config", {})
    generated = study.get("data", "generated") == "generated"
    data = (f"Generated fictional histories (\"generated\": MQuAKE relation templates, fictional entities; "
            f"{study.get('n_histories')} per tier)" if generated else f"Released histories from `{Path(study.get('source', '?')).name}`")
    rule = summary["graders"] == [RULE_GRADER]
    grader = (f"Labels: the offline rule grader ({RULE_GRADER}: a reference or alias in the displayed text and no "
              "previous answer = complete; a decline = abstain; else wrong), not the paper's LLM judge (GPT-5.6 "
              "with a source-aware rubric)." if rule else
              f"Labels: {', '.join(summary['graders'])} (from {summary['grades_file']}); the paper's judge was GPT-5.6.")
    lines = [*heading("FactConsolidation", config, items(config)),
             f"{data}, tiers {', '.join(study.get('run_tiers', []))}: {len(summary['histories'])} histories, "
             f"{summary['questions']} questions (single- and multi-hop), each asked under "
             f"{', '.join(c['policy'] for c in summary['cells'])}; greedy answers of at most "
             f"{study.get('max_new_tokens')} tokens, each question followed by \"{study.get('boxed_instruction')}\". "
             + grader + " Every question counts as source-answerable.", ""]
    if timing:
        lines += [run_time(timing, unit="histories", machine=True), ""]
    n = summary["questions"]
    histories = len(summary["histories"])
    if not may_resample_within(histories):
        lines += nested_note(histories)
        extra = "change in complete answers with EOS against full, without an interval (the paper reports none)"
    else:
        lines += small_sample_note(histories, "histories")
        extra = (f"change in complete answers with EOS against full, 95% interval from {summary['draws']:,} paired "
                 "bootstrap draws of whole histories (the paper reports none)")
    lines += ["Per operation (counts of all questions; displayed text = the final box, else the whole response). "
              f"Our extra column: {extra}.", "",
              *table_head(["operation", "official match", "final-answer match + EOS", "complete + EOS",
                           "change vs full [95% CI]" if may_resample_within(histories) else "change vs full", "EOS, valid box", "capped", "only box + EOS"])]
    for c in summary["cells"]:
        ch = c.get("complete_change_vs_full")
        lines.append(table_row([c["policy"], _pct(c["official_match"], c["n"]), _pct(c["final_match_eos"], c["n"]),
                                _pct(c["complete_eos"], c["n"]), "" if not ch else f"{ch['change']:+d}"
                                if ch["ci"] is None else estimate(ch["change"], ch["ci"], "+d", "+.0f"), _pct(c["eos_valid_box"], c["n"]), _pct(c["capped"], c["n"]),
                                _pct(c["only_box_eos"], c["n"])]))
    lines += ["", "Net accuracy (capped answers assigned first, then complete / wrong / abstain among EOS answers; "
              f"rates of the {n} paired questions; transition counts are not added to capped counts):", "",
              *table_head(["transition", "complete before", "complete after", "gains (from)", "losses (to)",
                           "net pp"])]
    for t in summary["transitions"]:
        lines.append(table_row([f"{t['before']} -> {t['after']}", _pct(t["complete_before"], t["n"]),
                                _pct(t["complete_after"], t["n"]), f"{t['gains']} ({_split(t['gains_from'])})",
                                f"{t['losses']} ({_split(t['losses_to'])})",
                                "" if t["net_pp"] is None else f"{t['net_pp']:+.1f}"]))
    lines += _hop_lines(summary) + _length_lines(summary) + _alias_lines(summary)
    capped = ", ".join(f"{c['policy']}: {_split(c['capped_labels'])}" for c in summary["cells"] if c["capped"])
    lines += ["", "Labels of the capped answers, kept apart (a capped answer may also hold a wrong claim): "
              + (capped or "no capped answers") + ".", ""]
    return "\n".join(lines)


def _hop_lines(summary: dict[str, Any]) -> list[str]:
    lines = ["", "By hop type (complete + EOS / capped, and the transitions' gains / losses / net pp):", "",
             *table_head(["hop", "n", *[c["policy"] for c in summary["cells"]],
                          *[f"{t['before']} -> {t['after']}" for t in summary["transitions"]]])]
    for h in summary["by_hop"]:
        trans = [f"{t['gains']} / {t['losses']} / {t['net_pp']:+.1f}" for t in h["transitions"]]
        lines.append(table_row([h["hop"], h["n"], *[f"{h['complete_eos'][c['policy']]} / {h['capped'][c['policy']]}"
                                                     for c in summary["cells"]], *trans]))
    return lines


def _length_lines(summary: dict[str, Any]) -> list[str]:
    ts = [t for t in summary["transitions"] if t["before"] == "full"]
    if not ts:
        return []
    lines = ["", "Loss of initially complete full-access answers by their length in tokens (lost / complete):", "",
             *table_head(["full-answer length", *[f"full -> {t['after']}" for t in ts]])]
    for i, b in enumerate(ts[0]["by_length"]):
        lines.append(table_row([b["bin"], *[f"{t['by_length'][i]['lost']} / {t['by_length'][i]['complete']}"
                                            for t in ts]]))
    return lines


def _alias_lines(summary: dict[str, Any]) -> list[str]:
    ts = [t for t in summary["transitions"] if t["before"] == "full"]
    if not ts:
        return []
    g = ts[0]["old_alias"]
    lines = ["", f"Full-access wrong answers with EOS: {g['wrong']}; of them {g['old_alias']} have a final box with a "
             "previous-answer alias and no current alias. What those become, and their share of all wrong -> "
             "complete corrections:", "", *table_head(["transition", "outcomes of the old-alias group",
                                                        "corrections from the group / all"])]
    for t in ts:
        a = t["old_alias"]
        lines.append(table_row([f"full -> {t['after']}", _split(a["after"]),
                                f"{a['corrections_from_group']} / {a['corrections']}"]))
    return lines


def write_summary(out_dir: Path | str, seed: int = 0, grades: str | Path | None = None) -> dict[str, Any]:
    """Write ``summary.json`` and ``report.md`` of a run directory; ``grades``: a grades file to use instead of
    the rule labels (``grading.grade_run``).

    Example: ``write_summary("runs/factconsolidation")["cells"][0]["complete_eos"]``.
    """
    return write_run_summary(out_dir, functools.partial(summarize, grades=grades), format_report, seed)
