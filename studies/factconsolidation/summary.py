"""Summary and report of a FactConsolidation run, recomputed from ``results.jsonl`` (and a grades file).

Per operation (paper app:v43_mab, Table tab:v43_mab_termination): the official full-response
substring match, the final-answer substring match with EOS, complete answers with EOS, termination
(EOS with a valid box, capped, only a box with EOS). Then the net-accuracy analysis
(app:v45_mab_analysis; :mod:`outcomes`): transitions full -> source, full -> value,
full -> recompute and source -> recompute, capped answers first; strata by hop type, by the
full-access answer's length, and by old-alias-in-box; the capped answers' own labels, apart.

Source answerability (paper L1569-1572, L1586-1587): with an LLM judge's grades file, each judgment also
gives the source review's verdicts on its question (``grading.question_verdicts``: answerable / unanswerable
/ ambiguous, and whether the original reference is supported). Complete + EOS, its change, the net-accuracy
analysis, the fallback and the sensitivities use the source-answerable questions; the match and termination
metrics use all; the questions judged not answerable are reported apart. The rule grader gives no verdict:
every question counts as answerable there, and the report says so.

Fallback (paper L4301-4304, L4317-4322): the source-masked answer, or, when it reached the token cap, the
recompute answer to the same question: the paper re-answers from the recomputed cache, and greedy decoding
from that cache reproduces the recompute row's answer, so the fallback recombines existing answers (as the
paper does, L4325-4326). Against recompute alone: gains, losses and the exact McNemar p
(:func:`kvprobe.readouts.stats.mcnemar_exact`); its oracle takes the better of source mask and recompute.

Sensitivities (paper L1532-1533, L1648-1649, L1734-1740): the same complete + EOS counts without the questions
the run's config names ``exposed_questions`` (the exposure sensitivity), and on the questions whose original
reference the judge found supported; each change against full access is checked for the main analysis' sign.

Unfinished generation (paper L4331-4417, :mod:`unfinished`): the three lexical rules (search loop, verbatim loop,
quoting a masked record), the answer-style table, the losses under source masking, the style tests and the
generated-token ratios with a component bootstrap; the superseded records are rebuilt from the run's config.

The paper's counts are descriptive (no intervals). Ours add one column: the change in complete
answers with EOS against full access, with a 95% percentile interval from paired bootstrap draws of
whole histories (:func:`kvprobe.readouts.stats.paired_change`; a history's questions are not
independent) when the run has at least ``readouts.stats.MIN_HISTORIES`` histories, and without an
interval otherwise (questions are never resampled inside so few histories). Labels come from the rule grader unless
``grades`` names a grades file (``grading.grade_run``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path
from typing import Any, TypedDict

from kvprobe.readouts.stats import DRAWS, group_bootstrap_weights, may_resample_within, mcnemar_exact, paired_change
from kvprobe.studies.common.report import Items, data_items, estimate, heading, nested_note, run_time, small_sample_note, \
    table_head, table_row
from kvprobe.studies.common.grades import grade_of
from kvprobe.studies.common.formatting import share
from kvprobe.studies.common.runner import CONFIG, read_rows

from . import strings, unfinished
from .grading import question_verdicts, read_grades
from .histories import HOPS
from .outcomes import CAPPED, OUTCOMES, capped_labels, losses_by_length, old_alias_group, outcome, transitions
from .rule_grader import RULE_GRADER
from .study import CONDITIONS

#: Transitions the report shows (paper Figure fig:v45_mab_outcomes and L1740-1748).
TRANSITIONS = (("full", "source"), ("full", "value"), ("full", "recompute"), ("source", "recompute"))

Key = tuple[str, str]


def _metrics(rows: list[dict[str, Any]], answerable: list[dict[str, Any]]) -> dict[str, Any]:
    """The original-reference and termination metrics of all ``rows``; complete + EOS and the outcomes of the
    ``answerable`` ones (paper L1586-1587)."""
    eos = [r for r in rows if r["stop_reason"] == "eos"]
    return {"n": len(rows), "answerable": len(answerable), "official_match": sum(r["official_match"] for r in rows),
            "final_match_eos": sum(r["final_match"] for r in rows),
            "complete_eos": sum(r["outcome"] == "complete" for r in answerable), "eos": len(eos),
            "eos_valid_box": sum(r["valid_box"] for r in eos), "capped": len(rows) - len(eos),
            "only_box_eos": sum(r["only_box"] for r in eos),
            "outcomes": {o: sum(r["outcome"] == o for r in answerable) for o in OUTCOMES}}


def _exposed_questions(out_dir: Path | str) -> list[str] | None:
    """The run's ``exposed_questions`` (None: its config predates the parameter, or there is no config)."""
    path = Path(out_dir) / CONFIG
    if not path.exists():
        return None
    exposed = json.loads(path.read_text()).get("study_config", {}).get("exposed_questions")
    return None if exposed is None else list(exposed)


class Summary(TypedDict):
    """A FactConsolidation run's ``summary.json``."""

    #: Per policy: original-reference and termination metrics and complete + EOS of the answerable questions.
    cells: list[dict[str, Any]]
    transitions: list[dict[str, Any]]
    by_hop: list[dict[str, Any]]
    #: The source review of a judge's grades (None: the rule grader's labels).
    source_review: dict[str, Any] | None
    fallback: dict[str, Any]
    exposed_questions: list[str] | None
    sensitivities: list[dict[str, Any]]
    unfinished: dict[str, Any]
    graders: list[str]
    grades_file: str | None
    histories: list[str]
    questions: int
    all_questions: int
    draws: int
    seed: int


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS, grades: str | Path | None = None
              ) -> Summary:
    """The summary dict (module docstring) of a run directory."""
    override = read_grades(grades) if grades is not None else None
    by: dict[str, dict[Key, dict[str, Any]]] = defaultdict(dict)
    graders = set()
    for r in read_rows(out_dir):
        key = (r["case_id"], r["qa_pair_id"])
        if override is not None:
            g = grade_of(override, (*key, r["condition"]), grades, ("case", "question", "condition"))
            r = {**r, "label": g["label"], "grader": g["grader"]}
        graders.add(r["grader"])
        by[r["condition"]][key] = {**r, "outcome": outcome(r["stop_reason"], r["label"])}
    conditions = [p for p in CONDITIONS if p in by]
    full = by.get("full", {})
    review = _source_review(override, sorted(full), grades)
    keys = [k for k in sorted(full) if review is None or review["verdicts"][k] == "answerable"]
    keyset = set(keys)
    histories = sorted({c for c, _ in keys})
    # Whole histories are the bootstrap units; with fewer than MIN_HISTORIES there is no interval.
    boot = (group_bootstrap_weights([c for c, _ in keys], n_draws=draws, seed=seed)
            if keys and may_resample_within(len(histories)) else None)
    cells = []
    for p in conditions:
        cell = {"policy": p, **_metrics(list(by[p].values()), [r for k, r in by[p].items() if k in keyset])}
        if p != "full" and keys and all(k in by[p] for k in keys):
            mine, ref = ([int(rows[k]["outcome"] == "complete") for k in keys] for rows in (by[p], full))
            cell["complete_change_vs_full"] = (paired_change(mine, ref, boot) if boot is not None else
                                               _change_without_interval(mine, ref))
        cell["capped_labels"] = capped_labels({k: r["stop_reason"] for k, r in by[p].items()},
                                              {k: r["label"] for k, r in by[p].items()})
        cells.append(cell)
    everything = {p: {k: r["outcome"] for k, r in by[p].items()} for p in conditions}
    outcomes = {p: {k: o for k, o in mine.items() if k in keyset} for p, mine in everything.items()}
    exposed = _exposed_questions(out_dir)
    return {"cells": cells, "transitions": _transitions(outcomes, by), "by_hop": _by_hop(outcomes, by),
            "source_review": None if review is None else _review_summary(review, everything),
            "fallback": fallback(outcomes, draws, seed),
            "exposed_questions": exposed,
            "sensitivities": _sensitivities(outcomes, keys, exposed, review),
            "unfinished": unfinished.analyse(out_dir, by, keys, draws, seed),
            "graders": sorted(graders), "grades_file": None if grades is None else str(grades),
            "histories": sorted({c for c, _ in keys}), "questions": len(keys), "all_questions": len(full),
            "draws": draws, "seed": seed}


def _source_review(override: dict[tuple[str, str, str], dict[str, Any]] | None, keys: list[Key],
                   grades: str | Path | None) -> dict[str, Any] | None:
    """Per question, the judge's answerability and reference verdicts (``grading.question_verdicts``), or None
    when the labels carry none (the rule grader, a grades file written before the verdicts existed)."""
    if override is None:
        return None
    asked = set(keys)
    lines = [g for g in override.values() if (g["case_id"], g["qa_pair_id"]) in asked]
    answerable = question_verdicts(lines, "answerable")
    if answerable is None:
        return None
    reference = question_verdicts(lines, "reference")
    verdicts, disagree = answerable
    if missing := [k for k in keys if k not in verdicts]:
        raise ValueError(f"{grades}: no answerability verdict for {missing[0]} (of {len(missing)} questions)")
    return {"verdicts": verdicts, "disagreements": disagree,
            "references": None if reference is None else reference[0],
            "reference_disagreements": None if reference is None else reference[1]}


def _review_summary(review: dict[str, Any], outcomes: dict[str, dict[Key, str]]) -> dict[str, Any]:
    """Counts of the source review's verdicts, and the outcomes of the questions not judged answerable, apart."""
    verdicts, references = review["verdicts"], review["references"]
    apart = sorted(k for k, v in verdicts.items() if v != "answerable")
    return {"answerability": {v: sum(x == v for x in verdicts.values()) for v in strings.ANSWERABILITY},
            "disagreements": review["disagreements"],
            "references": None if references is None else
            {v: sum(x == v for x in references.values()) for v in strings.REFERENCE_SUPPORT},
            "reference_disagreements": review["reference_disagreements"],
            "apart": [{"case_id": c, "qa_pair_id": q, "verdict": verdicts[(c, q)]} for c, q in apart],
            "apart_outcomes": {p: {o: sum(mine.get(k) == o for k in apart) for o in OUTCOMES}
                               for p, mine in outcomes.items()}}


def fallback(outcomes: dict[str, dict[Key, str]], draws: int = DRAWS, seed: int = 0) -> dict[str, Any] | None:
    """The re-answer fallback against recompute alone (module docstring), over the questions both the source
    mask and recompute answered (None without both).

    Returns ``n``, ``fallbacks`` (capped source-masked answers, re-answered from the recomputed cache), the
    complete + EOS counts of ``source``, ``recompute``, the ``fallback`` and the ``oracle`` (the better of
    source and recompute per question), ``fallback_recovered`` (fallbacks complete under recompute), the best
    single operation (``best``, ``best_complete``: chosen after seeing the results, as the paper's), ``gains``
    / ``losses`` (complete under the fallback only / under recompute only), ``change`` (fallback minus
    recompute: a paired change over whole histories, without an interval below ``MIN_HISTORIES`` histories),
    ``net_pp`` and the exact McNemar ``p``.

    Example (paper L4320-4321): 300 source-complete, 58 fallbacks of which 49 recompute-complete, 5 gains and
    11 losses against recompute's 355 give 349, net -6, p = 0.21.
    """
    if "source" not in outcomes or "recompute" not in outcomes:
        return None
    source, recompute = outcomes["source"], outcomes["recompute"]
    keys = sorted(k for k in source if k in recompute)
    fell = {k for k in keys if source[k] == CAPPED}
    routed = {k: recompute[k] if k in fell else source[k] for k in keys}
    ok = {name: {k for k in keys if o[k] == "complete"} for name, o in (("source", source), ("recompute", recompute),
                                                                          ("fallback", routed))}
    best = max((p for p in outcomes if all(k in outcomes[p] for k in keys)),
               key=lambda p: sum(outcomes[p][k] == "complete" for k in keys))
    mine, ref = ([int(k in ok[name]) for k in keys] for name in ("fallback", "recompute"))
    histories = {c for c, _ in keys}
    change = (paired_change(mine, ref, group_bootstrap_weights([c for c, _ in keys], n_draws=draws, seed=seed))
              if keys and may_resample_within(len(histories)) else _change_without_interval(mine, ref))
    n = len(keys)
    return {"n": n, "histories": len(histories), "fallbacks": len(fell), "source": len(ok["source"]),
            "recompute": len(ok["recompute"]), "fallback": len(ok["fallback"]),
            "oracle": len(ok["source"] | ok["recompute"]), "fallback_recovered": len(ok["recompute"] & fell),
            "best": best, "best_complete": sum(outcomes[best][k] == "complete" for k in keys),
            "gains": change["corrections"], "losses": change["reversals"], "change": change,
            "net_pp": 100 * change["change"] / n if n else None,
            "p": mcnemar_exact(change["corrections"], change["reversals"])}


def _sensitivities(outcomes: dict[str, dict[Key, str]], keys: list[Key], exposed: list[str] | None,
                   review: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Complete + EOS per operation on a subset of the answerable questions, each change against full access
    beside the main analysis' (module docstring): without the exposed questions (when the run names any), and
    on the questions with judge-supported references (when the grades give reference verdicts)."""
    subsets = []
    if exposed:
        subsets.append(("exposure", "without the exposed questions", [k for k in keys if k[1] not in set(exposed)]))
    if review is not None and review["references"] is not None:
        subsets.append(("supported references", "questions whose original reference the judge found supported",
                        [k for k in keys if review["references"].get(k) == "supported"]))
    return [{"name": name, "what": what, **_subset(outcomes, keys, mine)} for name, what, mine in subsets]


def _subset(outcomes: dict[str, dict[Key, str]], keys: list[Key], mine: list[Key]) -> dict[str, Any]:
    """Complete counts on ``mine`` and on ``keys`` (the main analysis) per operation, the changes against full
    and whether each keeps the main change's sign (None where the main change is 0)."""
    def complete(p: str, ks: list[Key]) -> list[int]:
        return [int(outcomes[p].get(k) == "complete") for k in ks]

    rows = []
    for p in outcomes:
        row = {"policy": p, "complete": sum(complete(p, mine)), "main_complete": sum(complete(p, keys))}
        if p != "full" and "full" in outcomes:
            sub = _change_without_interval(complete(p, mine), complete("full", mine))["change"]
            main = _change_without_interval(complete(p, keys), complete("full", keys))["change"]
            row.update(change=sub, main_change=main,
                       same_sign=None if main == 0 else (sub != 0 and (sub > 0) == (main > 0)))
        rows.append(row)
    return {"n": len(mine), "main_n": len(keys), "excluded": len(keys) - len(mine), "policies": rows}


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
             f"{summary['all_questions']} questions (single- and multi-hop), each asked under "
             f"{', '.join(c['policy'] for c in summary['cells'])}; greedy answers of at most "
             f"{study.get('max_new_tokens')} tokens, each question followed by \"{study.get('boxed_instruction')}\". "
             + grader + " " + _prefill_sentence(study), "", _review_sentence(summary), ""]
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
    scope = ("" if summary["source_review"] is None else
             f"; complete + EOS and its change: of the {n} source-answerable questions")
    lines += [f"Per operation (counts of all questions{scope}; displayed text = the final box, else the whole "
              f"response). Our extra column: {extra}.", "",
              *table_head(["operation", "official match", "final-answer match + EOS", "complete + EOS",
                           "change vs full [95% CI]" if may_resample_within(histories) else "change vs full", "EOS, valid box", "capped", "only box + EOS"])]
    for c in summary["cells"]:
        ch = c.get("complete_change_vs_full")
        lines.append(table_row([c["policy"], share(c["official_match"], c["n"]), share(c["final_match_eos"], c["n"]),
                                share(c["complete_eos"], c["answerable"]), "" if not ch else f"{ch['change']:+d}"
                                if ch["ci"] is None else estimate(ch["change"], ch["ci"], "+d", "+.0f"), share(c["eos_valid_box"], c["n"]), share(c["capped"], c["n"]),
                                share(c["only_box_eos"], c["n"])]))
    lines += ["", "Net accuracy (capped answers assigned first, then complete / wrong / abstain among EOS answers; "
              f"rates of the {n} paired{'' if summary['source_review'] is None else ' source-answerable'} questions; "
              "transition counts are not added to capped counts):", "",
              *table_head(["transition", "complete before", "complete after", "gains (from)", "losses (to)",
                           "net pp"])]
    for t in summary["transitions"]:
        lines.append(table_row([f"{t['before']} -> {t['after']}", share(t["complete_before"], t["n"]),
                                share(t["complete_after"], t["n"]), f"{t['gains']} ({_split(t['gains_from'])})",
                                f"{t['losses']} ({_split(t['losses_to'])})",
                                "" if t["net_pp"] is None else f"{t['net_pp']:+.1f}"]))
    lines += _hop_lines(summary) + _length_lines(summary) + _alias_lines(summary)
    capped = ", ".join(f"{c['policy']}: {_split(c['capped_labels'])}" for c in summary["cells"] if c["capped"])
    lines += ["", "Labels of the capped answers, kept apart (a capped answer may also hold a wrong claim): "
              + (capped or "no capped answers") + ".", ""]
    lines += _apart_lines(summary) + _fallback_lines(summary) + _sensitivity_lines(summary)
    lines += unfinished.report_lines(summary.get("unfinished"), study.get("max_new_tokens"))
    return "\n".join(lines)


def _prefill_sentence(study: dict[str, Any]) -> str:
    if "prefill_chunk" not in study:
        return ("Prefill chunks: not in this run's config (a run made before `prefill_chunk` existed: the engine's "
                "default chunks; the paper's are 128 tokens).")
    chunk = study["prefill_chunk"]
    what = "the engine's default chunks" if chunk is None else f"{chunk}-token chunks"
    return f"History and recompute prefilled in {what} (the paper: 128)."


def _review_sentence(summary: dict[str, Any]) -> str:
    """How questions count as source-answerable (paper L1569-1572, L1586-1587)."""
    r = summary["source_review"]
    if r is None:
        return ("Source answerability: not judged in this run (the labels carry no source-review verdict), so "
                "every question counts as source-answerable (the paper's judge found 373 of 400).")
    a = r["answerability"]
    refs = ("" if r["references"] is None else
            "; original references: " + ", ".join(f"{r['references'][v]} {v}" for v in strings.REFERENCE_SUPPORT)
            + f" ({r['reference_disagreements']} with disagreeing judgments)")
    return (f"Source review (the judge's verdicts beside each label; per question the verdict most of its "
            f"judgments give, a tie ambiguous): {', '.join(f'{a[v]} {v}' for v in strings.ANSWERABILITY)} "
            f"({r['disagreements']} with disagreeing judgments){refs}. Complete + EOS, its changes, the net-accuracy "
            f"analysis, the fallback and the sensitivities use the {summary['questions']} source-answerable "
            f"questions; the match and termination metrics all {summary['all_questions']} (the paper: 373 "
            "answerable, 24 unanswerable, 3 ambiguous of 400).")


def _apart_lines(summary: dict[str, Any]) -> list[str]:
    r = summary["source_review"]
    if r is None:
        return []
    n = len(r["apart"])
    lines = [f"Questions judged not answerable, reported apart ({n}: "
             + (", ".join(f"{q['qa_pair_id']} {q['verdict']}" for q in r["apart"]) or "none") + ")."]
    if n:
        lines += ["", *table_head(["operation", *OUTCOMES])]
        lines += [table_row([p, *[counts[o] for o in OUTCOMES]]) for p, counts in r["apart_outcomes"].items()]
    return lines + [""]


def _fallback_lines(summary: dict[str, Any]) -> list[str]:
    f = summary["fallback"]
    if f is None:
        return ["Re-answer fallback: not in this run (it needs the source mask and recompute).", ""]
    ch = f["change"]
    change = f"{ch['change']:+d}" if ch["ci"] is None else estimate(ch["change"], ch["ci"], "+d", "+.0f")
    return [f"Re-answer fallback (the paper's FactConsolidation routing): the source-masked answer, or, where it "
            "reached the token cap, the answer from the recomputed cache (greedy, so the recompute row's own "
            f"answer); complete + EOS of {f['n']} questions, against recompute alone"
            + ("" if ch["ci"] is None else f" (95% interval from {summary['draws']:,} paired bootstrap draws of "
               "whole histories)") + ":", "",
            *table_head(["fallbacks", "fallbacks complete", "source", "recompute", "fallback", "fallback - recompute",
                         "gains / losses", "exact McNemar p", "oracle", "best single operation"]),
            table_row([f["fallbacks"], f["fallback_recovered"], share(f["source"], f["n"]), share(f["recompute"], f["n"]),
                       share(f["fallback"], f["n"]), change, f"{f['gains']} / {f['losses']}", f"{f['p']:.2f}",
                       share(f["oracle"], f["n"]), f"{f['best']} {share(f['best_complete'], f['n'])}"]), "",
            "Paper (complete + EOS of 373): Qwen3.8-27B 349 against recompute's 355 (58 fallbacks; 5 gains, 11 "
            "losses, p = 0.21), Gemma 4 26B-A4B 265 against 266 (157 fallbacks; 13 and 14, p = 1.0): the fallback "
            "does not exceed recomputation alone.", ""]


#: The paper's full -> source complete + EOS on each sensitivity subset (L1734-1740).
PAPER_SENSITIVITIES = {
    "exposure": "Paper (369 source-answerable questions without the four seen during development, L1737-1740): "
                "full -> source Qwen3.8-27B 332 -> 298, Gemma 4 26B-A4B 108 -> 184; both keep the main signs.",
    "supported references": "Paper (the 355 questions with source-supported references, L1735-1737): full -> "
                            "source Qwen3.8-27B 325 -> 294, Gemma 4 26B-A4B 109 -> 180; both keep the main signs.",
}


def _sensitivity_lines(summary: dict[str, Any]) -> list[str]:
    exposed = summary["exposed_questions"]
    lines = [("Exposure sensitivity: not in this run (its config predates `exposed_questions`; no questions are "
              "recorded as seen during development)." if exposed is None else
              "Exposure sensitivity: no question is recorded as seen during development (`exposed_questions` "
              "empty), so it is the main analysis." if not exposed else
              f"Exposure sensitivity: {len(exposed)} question(s) seen during development ({', '.join(exposed)}) stay "
              "in every analysis above and are left out below."), ""]
    for sub in summary["sensitivities"]:
        lines += [f"Complete + EOS {sub['what']} ({sub['name']} sensitivity: {sub['n']} of {sub['main_n']} "
                  "source-answerable questions) beside the main analysis, and whether each change against full "
                  "keeps the main analysis' sign:", "",
                  *table_head(["operation", "complete + EOS", "change vs full", "main analysis", "main change",
                               "same sign"])]
        for r in sub["policies"]:
            lines.append(table_row([r["policy"], share(r["complete"], sub["n"]),
                                    "" if "change" not in r else f"{r['change']:+d}",
                                    share(r["main_complete"], sub["main_n"]),
                                    "" if "change" not in r else f"{r['main_change']:+d}",
                                    "" if "change" not in r else
                                    "- (main change 0)" if r["same_sign"] is None else
                                    "yes" if r["same_sign"] else "no"]))
        lines += ["", PAPER_SENSITIVITIES[sub["name"]], ""]
    return lines


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
