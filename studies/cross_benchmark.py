"""Current and historical answers under whole-source masking across MINTEval, MQuAKE and BABILong
(the paper's cross-benchmark figure, seed L1444-1453, referenced at L1420-1421), from committed runs.

``kvprobe report cross-benchmark RUN [RUN ...] --out DIR`` reads each run's ``config.json`` and
``summary.json`` (nothing is rerun) and writes, under DIR:

- ``cross-benchmark.json``: one row per (run, question block, metric), the data of the figure;
- ``report.md``: the table (full access and whole-source mask, each answer rate with its exact 95%
  Clopper-Pearson interval and count, the paired change with the study's own interval, n, and the
  paper's numbers beside ours, quoted with their line numbers);
- ``figure.png``: paired bars (full access grey, masked blue) per row, n on each label, the chance line
  where one is defined (BABILong: a uniform guess among bAbI's six locations).

Which committed cells are "current", "historical" and "whole-source mask" in each study:

- MINTEval: scopes ``current_location`` / ``historical_location``, policy ``source``; normalized reference
  exact match with EOS (``em``); the change's interval resamples shared-source components
  (``change_component``);
- MQuAKE: kinds ``current`` / ``historical``, policy ``source-mask``; supplied-reference exact match with
  EOS (``em``, the paper's metric) and, as a sensitivity, reference containment (``contains``); paired
  case-bootstrap changes (``*_change_vs_full``);
- BABILong: qa2 (where a person is now) as current, qa3 (where an object was before a place) as
  historical, policy ``naive`` (hides every superseded movement: the whole-source mask), official location
  parser with EOS (``official``); one row per context length.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvprobe.readouts.stats import clopper_pearson

from .common.report import estimate, interval, table_head, table_row
from .common.claims import count_pp
from .study_figures import BABI_LOCATIONS

__all__ = ["PAPER", "PAPER_CHANGE", "PAPER_METRIC", "PAPER_MODELS", "QUESTIONS", "rows", "table", "write_cross_benchmark"]

QUESTIONS = ("current", "historical")

#: The paper's whole-source-vs-full numbers for each (benchmark, question), quoted with their lines.
PAPER: dict[tuple[str, str], str] = {
    ("MINTEval", "current"): "current-location source - full: Llama-3.2-3B +9.72 pp [5.75, 13.90], the only "
                             "interval above 0 of three models (L1365-1366)",
    ("MINTEval", "historical"): "history answers fall by 12.86, 15.39, 13.02 pp (Qwen3-4B, Llama-3.2-3B, "
                                "Qwen3-32B; L1366-1367)",
    ("MQuAKE", "current"): "full -> source 81.2 -> 84.2% (Qwen3-4B), 44.2 -> 63.9% (Llama-3.2-3B), "
                           "81.8 -> 83.2% (Qwen3-32B); N = 1,800 (table, L436)",
    ("MQuAKE", "historical"): "full -> source 88.2 -> 74.0% (Qwen3-4B), 85.8 -> 80.2% (Llama-3.2-3B), "
                              "97.0 -> 82.3% (Qwen3-32B); N = 600 (table, L436)",
    ("BABILong", "current"): "qa2 at 32k, full -> naive: 36 -> 43, 16 -> 20, 46 -> 47 of 100 (Qwen3-4B, "
                             "Llama-3.2-3B, Qwen3-32B; L1497-1499)",
    ("BABILong", "historical"): "qa3 at 32k, full -> source: 33 -> 16, 25 -> 6, 40 -> 15 of 100 (Qwen3-4B, "
                                "Llama-3.2-3B, Qwen3-32B; L1495-1497; 17-25 lost, L585)",
}

#: The paper's whole-source-minus-full changes per model, in the order of :data:`PAPER_MODELS`, for the table's
#: column beside ours (points; BABILong: answers of 100): read from the lines :data:`PAPER` quotes (MQuAKE: the
#: differences of its table's rounded percentages; MINTEval current: only Llama-3.2-3B is given in the text).
PAPER_MODELS = ("Qwen3-4B", "Llama-3.2-3B", "Qwen3-32B")
PAPER_CHANGE: dict[tuple[str, str], str] = {
    ("MINTEval", "current"): "Llama-3.2-3B +9.72 [5.75, 13.90] pp (L1365)",
    ("MINTEval", "historical"): "-12.86, -15.39, -13.02 pp (L1366-1367)",
    ("MQuAKE", "current"): "+3.0, +19.7, +1.4 pp (L436)",
    ("MQuAKE", "historical"): "-14.2, -5.6, -14.7 pp (L436)",
    ("BABILong", "current"): "+7, +4, +1 of 100, 32k (L1497-1499)",
    ("BABILong", "historical"): "-17, -19, -25 of 100, 32k (L1495-1497)",
}
#: The metric of each benchmark the paper reports (other metrics are sensitivities: no paper column).
PAPER_METRIC = {"MINTEval": "em", "MQuAKE": "em", "BABILong": "official"}


def _rate(k: int, n: int) -> dict[str, Any]:
    return {"k": k, "n": n, "pct": 100.0 * k / n, "ci": [100.0 * b for b in clopper_pearson(k, n)]}


def _row(benchmark: str, model: str, run: str, question: str, metric: str, full: dict, masked: dict,
         k: str, change_pp: float, change_ci: list[float], unit: str, chance: float | None = None,
         label: str = "") -> dict[str, Any]:
    return {"benchmark": benchmark, "model": model, "run": run, "question": question, "metric": metric,
            "label": label, "n": full["n"], "full": _rate(full[k], full["n"]),
            "masked": _rate(masked[k], masked["n"]), "change_pp": change_pp, "change_ci": change_ci,
            "interval_unit": unit, "chance_pct": chance}


def _counts_pp(change: dict[str, Any], n: int) -> tuple[float, list[float]]:
    """A paired change in counts (``readouts.stats.paired_change``) in percentage points of n (the scorecard's
    reading of a committed change)."""
    pp, ci = count_pp(change, n)
    return pp, list(ci)


def _minteval(summary: dict, model: str, run: str) -> list[dict]:
    cells = {(c["scope"], c["policy"]): c for c in summary["cells"]}
    out = []
    for question in QUESTIONS:
        full, masked = cells[(f"{question}_location", "full")], cells[(f"{question}_location", "source")]
        ch = masked["change_component"]
        out.append(_row("MINTEval", model, run, question, "em", full, masked, "em", ch["pp"], ch["ci"],
                        "shared-source components"))
    return out


def _mquake(summary: dict, model: str, run: str) -> list[dict]:
    cells = {(c["kind"], c["policy"]): c for c in summary["cells"]}
    out = []
    for metric in ("em", "contains"):
        for question in QUESTIONS:
            if (question, "source-mask") not in cells:
                continue
            full, masked = cells[(question, "full")], cells[(question, "source-mask")]
            pp, ci = _counts_pp(masked[f"{metric}_change_vs_full"], masked["n"])
            out.append(_row("MQuAKE", model, run, question, metric, full, masked, metric, pp, ci, "cases"))
    return out


def _babilong(summary: dict, model: str, run: str) -> list[dict]:
    cells = {(c["task"], c["length"], c["policy"]): c for c in summary["cells"]}
    out = []
    for task, question in (("qa2", "current"), ("qa3", "historical")):
        for length in sorted({c["length"] for c in summary["cells"] if c["task"] == task}):
            if (task, length, "naive") not in cells:
                continue
            full, masked = cells[(task, length, "full")], cells[(task, length, "naive")]
            pp, ci = _counts_pp(masked["official_change_vs_full"], masked["n"])
            out.append(_row("BABILong", model, run, question, "official", full, masked, "official", pp, ci,
                            "stories", chance=100.0 / BABI_LOCATIONS, label=f"{task}, {length} tokens"))
    return out


READERS = {"minteval": _minteval, "mquake": _mquake, "babilong": _babilong}


def rows(runs: list[str | Path]) -> list[dict[str, Any]]:
    """The table's rows from the committed runs, current questions first, then historical; within each, the
    runs in the order given."""
    found = []
    for run in runs:
        run = Path(run)
        config = json.loads((run / "config.json").read_text())
        study = config.get("study")
        if study not in READERS:
            raise ValueError(f"{run}: study {study!r} is not one of {', '.join(READERS)}")
        summary = json.loads((run / "summary.json").read_text())
        found += READERS[study](summary, config.get("model", {}).get("name", "?"), run.as_posix())
    return [r for q in QUESTIONS for r in found if r["question"] == q]


def _pct(rate: dict[str, Any]) -> str:
    return f"{estimate(rate['pct'], rate['ci'], '.1f')} ({rate['k']}/{rate['n']})"


COLUMNS = ("question", "benchmark", "model", "rows", "metric", "n", "full access % [95% CI] (count)",
           "whole-source mask % [95% CI] (count)", "change pp [95% CI] (resampled)", "chance %",
           f"paper: mask - full ({', '.join(PAPER_MODELS)})")


def table(found: list[dict[str, Any]]) -> list[str]:
    """The markdown table of ``found`` (:func:`rows`), then the paper's numbers for each block."""
    lines = table_head(COLUMNS)
    for r in found:
        lines.append(table_row([r["question"], r["benchmark"], r["model"], r["label"] or "all", r["metric"],
                                r["n"], _pct(r["full"]), _pct(r["masked"]),
                                f"{r['change_pp']:+.1f} {interval(r['change_ci'], '+.1f')} ({r['interval_unit']})",
                                "" if r["chance_pct"] is None else f"{r['chance_pct']:.1f}",
                                PAPER_CHANGE[(r["benchmark"], r["question"])]
                                if PAPER_METRIC[r["benchmark"]] == r["metric"] else ""]))
    lines += ["", "The paper's numbers behind its column (its models, lengths and sample sizes differ from these "
              "runs):", ""]
    for (benchmark, question), text in PAPER.items():
        if any((r["benchmark"], r["question"]) == (benchmark, question) for r in found):
            lines.append(f"- {benchmark}, {question}: {text}")
    return lines


def report(found: list[dict[str, Any]]) -> str:
    head = ["# Current and historical answers under whole-source masking", "",
            "Paper: seed L1444-1453 (figure), L1420-1421. Built by `kvprobe report cross-benchmark` from each "
            "run's committed summary.json (`kvprobe.studies.cross_benchmark`). Rates carry exact (Clopper-Pearson) "
            "95% intervals; changes carry each study's own paired bootstrap interval over the unit named. "
            "Current: MINTEval current_location, MQuAKE current, BABILong qa2; historical: MINTEval "
            "historical_location, MQuAKE historical, BABILong qa3. Whole-source mask: MINTEval `source`, "
            "MQuAKE `source-mask`, BABILong `naive`. MQuAKE `contains` is a sensitivity, not the paper's metric.",
            ""]
    return "\n".join(head + table(found)) + "\n"


def write_cross_benchmark(runs: list[str | Path], out: str | Path) -> list[dict[str, Any]]:
    """Write ``cross-benchmark.json``, ``report.md`` and ``figure.png`` under ``out``; returns the rows."""
    from .study_figures import cross_benchmark

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    found = rows(runs)
    (out / "cross-benchmark.json").write_text(json.dumps({"rows": found}, indent=1) + "\n")
    (out / "report.md").write_text(report(found))
    cross_benchmark({"rows": found}, out / "figure.png")
    return found
