"""Summary and report of a question-relevance run (one continuation budget), and the comparison of
runs at several budgets (``kvprobe report question-relevance RUN RUN ... --out DIR``).

Per signal (``relevance.py``): the replacement AUC, ``P(s(SUPERSEDED) > s(CURRENT)) + P(tie)/2``
over target queries, clusters resampled (:func:`kvprobe.readouts.stats.bootstrap_auc`), and the
question relevance, the fraction of cluster states whose target query scores above its unrelated
query (ties count one half; ``loo`` by magnitude), with a cluster-bootstrap percentile interval.
The paper's ranges over four models and three budgets (seed L2283-2287) are printed beside.

Within update families (L2296-2311): each signal's replacement AUC computed in every family and averaged with
equal weight (:func:`kvprobe.readouts.stats.macro_auc`; clusters resampled within family), checked against the
recognition criterion's 0.60 (:data:`CRITERION`) by the project's verdict rule on a claim of ``claims.py``
(``REPORT_CLAIMS``, :func:`kvprobe.studies.common.claims.judge`, 95% interval): *poor recognition* when the
interval lies below 0.60, *recognizes* (the paper's "opposite conclusion") when above, else *inconclusive*; the question
relevance of each signal *meets* the criterion when its interval lies above :data:`RELEVANCE_CRITERION`.
Where the rows carry the pair scores (``relevance.pair_scores``), the jointly encoded V distance is compared
with the token-Jaccard and character-distance surfaces on the same draws (each surface in its stronger
direction), unconditional and within families.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TypedDict

import numpy as np

from kvprobe.files import atomic_write_text
from kvprobe.readouts.evaluate import AUC_CRITERION
from kvprobe.readouts.stats import DRAWS, auc as plain_auc, bootstrap_auc, bootstrap_mean, \
    group_bootstrap_weights, macro_auc, percentile_interval
from kvprobe.studies.common.claims import Claim, judge
from kvprobe.studies.common.report import INCONCLUSIVE, NO_EFFECT, OPPOSITE, REPLICATES, Items, estimate, heading, \
    run_time, table_head
from kvprobe.studies.common.runner import read_rows
from .claims import REPORT_CLAIMS, criterion_measurement

SIGNALS = ("lexical", "attention_old", "loo")
#: The paper's ranges (replacement AUC, question relevance) over four models and budgets 8/32/128 (L2283-2287).
PAPER_RANGES = {"lexical": ("0.500", "1.000"), "attention_old": ("0.356-0.525", "0.316-0.953"),
                "loo": ("0.466-0.724", "0.350-0.636")}
NAMES = {"lexical": "lexical overlap", "attention_old": "attention to the old source",
         "loo": "signed leave-one-out", "v_distance": "V distance (jointly encoded)",
         "token_jaccard": "token Jaccard (surface)", "char_distance": "character distance (surface)"}
#: The recognition criterion: a replacement AUC above 0.60 (L2223-2224; ``readouts.evaluate.AUC_CRITERION``).
#: The within-family verdicts of L2296-2301 take it as the line between poor recognition and its opposite.
CRITERION = AUC_CRITERION
#: [UNCLEAR] the question-relevance criterion of L2302-2304 is not stated; ours: the same 0.60, on the
#: fraction of cluster states whose target query scores higher.
RELEVANCE_CRITERION = 0.60
#: The pair scores (one per cluster state, no question): the V distance and the two surface baselines.
PAIR_SCORES = ("v_distance", "token_jaccard", "char_distance")
SURFACES = ("token_jaccard", "char_distance")
#: Verdict words: the claim's verdict -> what it says about the signal.
#: (Poor recognition is a no-effect claim: its paper side reads "no effect found", never a replication.)
REPLACEMENT_WORDS = {NO_EFFECT: "poor recognition", OPPOSITE: "recognizes", INCONCLUSIVE: "inconclusive"}
RELEVANCE_WORDS = {REPLICATES: "met", OPPOSITE: "not met", INCONCLUSIVE: "inconclusive"}
#: The paper's within-family counts (L2296-2304) and the Qwen3-8B V-distance comparator (L2305-2310).
PAPER_COUNTS = {"combinations": 39, "poor recognition": 26, "recognizes": 8, "inconclusive": 5}
PAPER_RELEVANCE_MET = {"lexical": "12/12", "attention_old": "4/12", "loo": "1/12"}
PAPER_V = ("Qwen3-8B: V distance unconditional AUC 0.8542, within families 0.99909 (1.000 for location, "
           "endpoint, deadline and incident cause, 0.99547 for preference); token Jaccard and character "
           "distance 1.000 in every family (seed L2305-2310)")


def replacement_verdict(ci: list[float]) -> str:
    """Within-family replacement AUC interval against :data:`CRITERION`: poor recognition, recognizes or
    inconclusive (the claim ``question-relevance.within-family-replacement`` of ``claims.py``, the paper's
    direction: below the criterion, judged by ``studies.common.claims.judge``)."""
    return REPLACEMENT_WORDS[judge(_claim("question-relevance.within-family-replacement"),
                                   criterion_measurement(ci, CRITERION))]


def relevance_verdict(ci: list[float]) -> str:
    """Question-relevance interval against :data:`RELEVANCE_CRITERION`: met, not met or inconclusive (the claim
    ``question-relevance.relevance-criterion`` of ``claims.py``)."""
    return RELEVANCE_WORDS[judge(_claim("question-relevance.relevance-criterion"),
                                 criterion_measurement(ci, RELEVANCE_CRITERION, "share"))]


def _claim(key: str) -> Claim:
    return next(c for c in REPORT_CLAIMS if c.key == key)


def stronger_direction(scores: np.ndarray, labels: list[bool], families: list[str]) -> int:
    """+1 or -1, whichever gives the surface the higher within-family AUC (either direction allowed, L2226;
    ties +1, as ``readouts.evaluate``)."""
    return 1 if macro_auc(scores, labels, families) >= macro_auc(-scores, labels, families) else -1


def signal_table(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, float]]:
    """(cluster, state, query) -> signal values (``loo`` from the ``none`` and ``mask-old`` rows)."""
    by = {(r["cluster_id"], r["state"], r["query"], r["condition"]): r for r in rows}
    out = {}
    for (cluster, state, query, condition), r in by.items():
        masked = by.get((cluster, state, query, "mask-old"))
        if condition != "none" or masked is None:
            continue
        out[(cluster, state, query)] = {"lexical": r["lexical"], "attention_old": r["attention_old"],
                                        "loo": masked["margin"] - r["margin"], "family": r["family"],
                                        **{k: r[k] for k in PAIR_SCORES if r.get(k) is not None}}
    return out


def within_families(table: dict[tuple[str, str, str], dict[str, Any]], targets: list[tuple[str, str]],
                    draws: int, seed: int) -> dict[str, Any]:
    """Replacement AUC per family, their equal-weight mean with a within-family cluster bootstrap, the pooled
    (unconditional) AUC, and the verdict against :data:`CRITERION`, for every signal and stored pair score
    (surfaces in their stronger direction), all on the same draws; V minus each surface on those draws."""
    labels = [s == "superseded" for _, s in targets]
    families = [table[(c, s, "target")]["family"] for c, s in targets]
    names = [*SIGNALS, *(k for k in PAIR_SCORES if all(k in table[(c, s, "target")] for c, s in targets))]
    scores = {k: np.array([table[(c, s, "target")][k] for c, s in targets], dtype=float) for k in names}
    signs = {k: stronger_direction(scores[k], labels, families) for k in SURFACES if k in scores}
    scores.update({k: sign * scores[k] for k, sign in signs.items()})
    boot = bootstrap_auc(scores, labels, [c for c, _ in targets], n_draws=draws, seed=seed, strata=families)
    out: dict[str, Any] = {"criterion": CRITERION, "families": sorted(set(families)), "signals": {}}
    fam = np.array(families)
    y = np.array(labels)
    for k in names:
        a = boot["auc"][k]
        out["signals"][k] = {
            "auc": a["auc"], "ci": [a["lo"], a["hi"]], "lower_one_sided": a["lower_one_sided"],
            "unconditional": plain_auc(scores[k], labels),
            "by_family": {f: plain_auc(scores[k][fam == f], y[fam == f]) for f in out["families"]},
            "verdict": replacement_verdict([a["lo"], a["hi"]]), **({"direction": signs[k]} if k in signs else {})}
    if "v_distance" in names:
        out["v_minus_surface"] = {k: {"diff": boot["diff"]["v_distance"][k]["diff"],
                                      "ci": [boot["diff"]["v_distance"][k]["lo"], boot["diff"]["v_distance"][k]["hi"]]}
                                  for k in SURFACES if k in names}
    return out


class _SummaryKeys(TypedDict):
    rows: int
    #: (cluster, state) pairs with both a target and an unrelated question.
    cluster_states: int
    seed: int
    draws: int


class Summary(_SummaryKeys, total=False):
    """A question-relevance run's ``summary.json`` (a run without a complete pair has only the counts)."""

    clusters: int
    #: Per signal: the AUC of superseded against current targets (empty with one class).
    replacement_auc: dict[str, Any]
    #: Per signal: how often the target scores above the unrelated question, with its interval and verdict.
    question_relevance: dict[str, Any]
    within_families: dict[str, Any]


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> Summary:
    rows = list(read_rows(out_dir))
    table = signal_table(rows)
    pairs = sorted({(c, s) for c, s, q in table if (c, s, "target") in table and (c, s, "unrelated") in table})
    result: Summary = {"rows": len(rows), "cluster_states": len(pairs), "seed": seed, "draws": draws}
    if not pairs:
        return result
    clusters = sorted({c for c, _ in pairs})
    targets = [(c, s) for c in clusters for s in ("current", "superseded") if (c, s, "target") in table]
    labels = [s == "superseded" for _, s in targets]
    auc = bootstrap_auc({k: [table[(c, s, "target")][k] for c, s in targets] for k in SIGNALS}, labels,
                        [c for c, _ in targets], n_draws=draws, seed=seed)["auc"] if len(set(labels)) == 2 else {}
    weights = group_bootstrap_weights([c for c, _ in pairs], n_draws=draws, seed=seed)
    relevance = {}
    for k in SIGNALS:
        t = np.array([table[(c, s, "target")][k] for c, s in pairs], dtype=float)
        u = np.array([table[(c, s, "unrelated")][k] for c, s in pairs], dtype=float)
        if k == "loo":
            t, u = np.abs(t), np.abs(u)
        hit = (t > u) + 0.5 * (t == u)
        ci = percentile_interval(bootstrap_mean(hit, weights))
        relevance[k] = {"value": float(hit.mean()), "ci": ci, "criterion": relevance_verdict(ci)}
    result.update({"clusters": len(clusters), "replacement_auc": auc, "question_relevance": relevance})
    if len(set(labels)) == 2:
        result["within_families"] = within_families(table, targets, draws, seed)
    return result


def _cells(summary: dict[str, Any], k: str) -> list[str]:
    a = summary.get("replacement_auc", {}).get(k)
    r = summary["question_relevance"][k]
    return [estimate(a["auc"], [a["lo"], a["hi"]], ".3f") if a else "n/a", estimate(r["value"], r["ci"], ".3f")]


#: Where this study's items come from (the report's Items line).
ITEMS = Items("reconstruction", "controlled history clusters in the paper's five update families; our cluster texts")


def format_report(summary: dict[str, Any], config: dict[str, Any], timing: dict[str, Any] | None = None) -> str:
    study = config.get("study_config", {})
    lines = [*heading("Question relevance on controlled histories", config, ITEMS),
             f"{summary.get('clusters', 0)} clusters x 2 states, continuation budget {study.get('budget')} tokens. "
             f"Replacement AUC: SUPERSEDED above CURRENT on target queries; question relevance: target above "
             f"unrelated query (|LOO| for the leave-one-out score); 95% intervals from {summary['draws']:,} "
             "cluster-bootstrap draws.", ""]
    if timing:
        lines += [run_time(timing), ""]
    if not summary["cluster_states"]:
        return "\n".join(lines + ["No cluster state has both queries under both conditions yet.", ""])
    lines += table_head(["signal", "replacement AUC [95% CI]", "question relevance [95% CI]",
                         "paper: replacement AUC", "paper: question relevance"])
    for k in SIGNALS:
        lines.append(f"| {NAMES[k]} | " + " | ".join(_cells(summary, k)) + f" | {PAPER_RANGES[k][0]} | "
                     f"{PAPER_RANGES[k][1]} |")
    lines += ["", "Paper ranges: four models at budgets 8, 32 and 128 (seed L2283-2287).", ""]
    if "within_families" in summary:
        lines += within_family_section(summary)
    return "\n".join(lines)


def _fmt(x: float) -> str:
    return f"{x:.3f}"


def within_family_section(summary: dict[str, Any]) -> list[str]:
    """The report's within-family AUCs and criterion verdicts, and the V-distance comparator."""
    w = summary["within_families"]
    fams = w["families"]
    lines = ["## Replacement recognition within update families", "",
             f"Replacement AUC in each family, averaged with equal weight; 95% intervals from "
             f"{summary['draws']:,} draws of clusters resampled within family (the same draws for every score). "
             f"Verdict against the recognition criterion {CRITERION:.2f} (seed L2223, L2296-2301): poor "
             "recognition when the interval lies below it, recognizes when above, else inconclusive. Surface "
             "baselines in their stronger direction (L2226).", "",
             *table_head(["score", "within families [95% CI]", "verdict", "unconditional", *fams])]
    for k, v in w["signals"].items():
        name = NAMES[k] + (", lower = replacement" if v.get("direction") == -1 else "")
        lines.append(f"| {name} | {estimate(v['auc'], v['ci'], '.3f')} | {v['verdict']} | "
                     f"{_fmt(v['unconditional'])} | " + " | ".join(_fmt(v['by_family'][f]) for f in fams) + " |")
    lines += ["", "## Question-relevance criterion", "",
              f"Met when the 95% interval of the question relevance lies above {RELEVANCE_CRITERION:.2f} "
              "(the paper states no threshold; ours, as the recognition criterion), not met when below.", "",
              *table_head(["signal", "question relevance [95% CI]", "criterion", "paper: met"])]
    for k in SIGNALS:
        r = summary["question_relevance"][k]
        lines.append(f"| {NAMES[k]} | {estimate(r['value'], r['ci'], '.3f')} | {r['criterion']} | "
                     f"{PAPER_RELEVANCE_MET[k]} |")
    lines += ["", "## V distance against surface baselines", ""]
    if "v_minus_surface" in w:
        lines += ["V distance of the old and later records read from the one history cache (no question) minus "
                  "each surface baseline, within families, on the same draws:", "",
                  *table_head(["comparison", "difference [95% CI]"])]
        for k, d in w["v_minus_surface"].items():
            lines.append(f"| V distance - {NAMES[k]} | {estimate(d['diff'], d['ci'], '+.3f')} |")
        lines.append("")
    else:
        lines += ["The rows hold no V distance (`v_distance`): the run predates the column. A new "
                  "`kvprobe run question-relevance` run writes it (the history cache, no extra forward).", ""]
    return lines + [f"Paper: {PAPER_V}.", ""]


def combination_section(rows: list[dict[str, Any]]) -> list[str]:
    """Every (model, budget, score) combination's within-family verdict and question-relevance criterion, and
    the counts beside the paper's (L2296-2304)."""
    lines = ["## Per-combination criteria", "",
             f"Replacement AUC within update families against {CRITERION:.2f}; question relevance against "
             f"{RELEVANCE_CRITERION:.2f} (95% intervals; each run's report gives the rule).", "",
             *table_head(["model", "budget", "score", "replacement AUC within families [95% CI]", "verdict",
                          "question relevance [95% CI]", "criterion"])]
    verdicts: list[str] = []
    met: dict[str, list[bool]] = {k: [] for k in SIGNALS}
    for row in rows:
        w = row.get("within_families", {}).get("signals", {})
        for k, v in w.items():
            if k in SURFACES:
                continue
            verdicts.append(v["verdict"])
            r = row["question_relevance"].get(k)
            if r:
                met[k].append(r["criterion"] == "met")
            lines.append(f"| {row['model']} | {row['budget']} | {NAMES[k]} | {estimate(v['auc'], v['ci'], '.3f')} | "
                         f"{v['verdict']} | " + (f"{estimate(r['value'], r['ci'], '.3f')} | {r['criterion']} |"
                                                 if r else "n/a | n/a |"))
    counts = ", ".join(f"{verdicts.count(w)} {w}" for w in ("poor recognition", "recognizes", "inconclusive"))
    paper = ", ".join(f"{PAPER_COUNTS[w]} {w}" for w in ("poor recognition", "recognizes", "inconclusive"))
    lines += ["", f"Replacement within families, {len(verdicts)} combinations: {counts} (paper, "
              f"{PAPER_COUNTS['combinations']} over four models, three budgets and three Qwen3-8B V-distance "
              f"scores: {paper}). Question relevance criterion met: " +
              ", ".join(f"{NAMES[k]} {sum(m)}/{len(m)}" for k, m in met.items()) + " (paper: " +
              ", ".join(f"{NAMES[k]} {PAPER_RELEVANCE_MET[k]}" for k in SIGNALS) + ").", ""]
    return lines


def write_comparison(run_dirs: list[Path | str], out_dir: Path | str, seed: int = 0) -> str:
    """``kvprobe report question-relevance RUN RUN ... --out DIR``: one row per (model, budget) and signal."""
    lines = ["# Question relevance across budgets", "", ITEMS.line(), "",
             *table_head(["model", "budget", "signal", "replacement AUC [95% CI]", "question relevance [95% CI]"])]
    rows = []
    for d in run_dirs:
        config = json.loads((Path(d) / "config.json").read_text())
        summary = summarize(d, seed=seed)
        if not summary["cluster_states"]:
            raise ValueError(f"{d}: no complete cluster state")
        model, budget = config["model"]["name"], config["study_config"]["budget"]
        rows.append({"run": str(d), "model": model, "budget": budget, **summary})
        for k in SIGNALS:
            lines.append(f"| {model} | {budget} | {NAMES[k]} | " + " | ".join(_cells(summary, k)) + " |")
    lines += ["", "The paper's ranges over four models and budgets 8/32/128 (seed L2283-2287): " +
              "; ".join(f"{NAMES[k]} AUC {a}, relevance {r}" for k, (a, r) in PAPER_RANGES.items()) + ".", ""]
    lines += combination_section(rows)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "relevance.json", json.dumps({"seed": seed, "runs": rows}, indent=2) + "\n")
    text = "\n".join(lines)
    atomic_write_text(out / "relevance.md", text)
    return text
