"""Summary and report of a question-relevance run (one continuation budget), and the comparison of
runs at several budgets (``kvprobe report question-relevance RUN RUN ... --out DIR``).

Per signal (``relevance.py``): the replacement AUC, ``P(s(SUPERSEDED) > s(CURRENT)) + P(tie)/2``
over target queries, clusters resampled (:func:`kvprobe.readouts.stats.bootstrap_auc`), and the
question relevance, the fraction of cluster states whose target query scores above its unrelated
query (ties count one half; ``loo`` by magnitude), with a cluster-bootstrap percentile interval.
The paper's ranges over four models and three budgets (seed L2283-2287) are printed beside.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from kvprobe.files import atomic_write_text
from kvprobe.readouts.stats import DRAWS, bootstrap_auc, bootstrap_mean, group_bootstrap_weights, \
    percentile_interval
from kvprobe.studies.common.report import Items, estimate, heading, run_time, table_head
from kvprobe.studies.common.runner import read_rows, write_run_summary

SIGNALS = ("lexical", "attention_old", "loo")
#: The paper's ranges (replacement AUC, question relevance) over four models and budgets 8/32/128 (L2283-2287).
PAPER_RANGES = {"lexical": ("0.500", "1.000"), "attention_old": ("0.356-0.525", "0.316-0.953"),
                "loo": ("0.466-0.724", "0.350-0.636")}
NAMES = {"lexical": "lexical overlap", "attention_old": "attention to the old source",
         "loo": "signed leave-one-out"}


def signal_table(rows: list[dict[str, Any]]) -> dict[tuple[str, str, str], dict[str, float]]:
    """(cluster, state, query) -> signal values (``loo`` from the ``none`` and ``mask-old`` rows)."""
    by = {(r["cluster_id"], r["state"], r["query"], r["condition"]): r for r in rows}
    out = {}
    for (cluster, state, query, condition), r in by.items():
        masked = by.get((cluster, state, query, "mask-old"))
        if condition != "none" or masked is None:
            continue
        out[(cluster, state, query)] = {"lexical": r["lexical"], "attention_old": r["attention_old"],
                                        "loo": masked["margin"] - r["margin"], "family": r["family"]}
    return out


def summarize(out_dir: Path | str, seed: int = 0, draws: int = DRAWS) -> dict[str, Any]:
    rows = list(read_rows(out_dir))
    table = signal_table(rows)
    pairs = sorted({(c, s) for c, s, q in table if (c, s, "target") in table and (c, s, "unrelated") in table})
    result: dict[str, Any] = {"rows": len(rows), "cluster_states": len(pairs), "seed": seed, "draws": draws}
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
        relevance[k] = {"value": float(hit.mean()), "ci": percentile_interval(bootstrap_mean(hit, weights))}
    result.update({"clusters": len(clusters), "replacement_auc": auc, "question_relevance": relevance})
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
    return "\n".join(lines + ["", "Paper ranges: four models at budgets 8, 32 and 128 (seed L2283-2287).", ""])


def write_summary(out_dir: Path | str, seed: int = 0) -> dict[str, Any]:
    """summary.json and report.md of a run directory."""
    return write_run_summary(out_dir, summarize, format_report, seed)


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
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "relevance.json", json.dumps({"seed": seed, "runs": rows}, indent=2) + "\n")
    text = "\n".join(lines)
    atomic_write_text(out / "relevance.md", text)
    return text
