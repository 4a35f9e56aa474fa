"""Current and historical answers under whole-source masking across MINTEval, MQuAKE and BABILong
(the paper's cross-benchmark figure, seed L1444-1453, referenced at L1420-1421), from committed runs.

``kvprobe report cross-benchmark RUN [RUN ...] --out DIR`` reads each run's ``config.json`` and
``summary.json`` (nothing is rerun) and writes, under DIR:

- ``cross-benchmark.json``: one row per (run, question block, metric), the data of the figure;
- ``report.md``: the table (full access and whole-source mask, each answer rate with its exact 95%
  Clopper-Pearson interval and count, the paired change with the study's own interval, n, and the
  paper's numbers beside ours, quoted with their line numbers);
- ``figure.png``: paired bars (full access grey, masked blue) per row, n on each label, the chance line
  where one is defined (BABILong: always answering the task and length's most common gold location, the
  chance level of the scorecard and of the BABILong report).

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

from .babilong import claims as babilong
from .common.claims import Claim, count_pp, lines_text
from .common.report import estimate, interval, table_head, table_row
from .minteval import claims as minteval
from .mquake import claims as mquake

__all__ = ["PAPER", "PAPER_CHANGE", "PAPER_METRIC", "PAPER_MODELS", "QUESTIONS", "plot", "rows", "table",
           "write_cross_benchmark"]

QUESTIONS = ("current", "historical")

#: The paper's models behind every benchmark's numbers (the same three in each study's claims).
PAPER_MODELS = mquake.PAPER_MODELS


def _claim_lines(claims: tuple[Claim, ...], key: str) -> str:
    """``L1495-1497``: where the paper states the claim ``key`` of a study's claims."""
    return lines_text(next(c for c in claims if c.key == key).paper.lines)


def _mquake_rates(question: str) -> str:
    table = mquake.TABLE[question]
    rates = ", ".join(f"{full:.1f} -> {masked:.1f}% ({model})"
                      for model, full, masked in zip(PAPER_MODELS, table["full"], table["source-mask"]))
    return f"full -> source {rates}; N = {table['n']:,} (table, {lines_text(mquake.TABLE_LINES)})"


def _mquake_changes(question: str) -> str:
    table = mquake.TABLE[question]
    changes = ", ".join(f"{masked - full:+.1f}" for full, masked in zip(table["full"], table["source-mask"]))
    return f"{changes} pp ({lines_text(mquake.TABLE_LINES)})"


def _babilong_changes(task: str, lines: str) -> str:
    counts = {"qa3": babilong.QA3_32K, "qa2": babilong.QA2_32K}[task]
    return ", ".join(f"{masked - full:+d}" for full, masked in zip(counts["full"], counts["naive"])) + \
        f" of 100, 32k ({lines})"


_GAIN, _FALL = minteval.CURRENT_LOCATION_GAIN, minteval.HISTORY_FALL
_QA2 = _claim_lines(babilong.CLAIMS, "babilong.qa2-naive")
_QA3 = _claim_lines(babilong.CLAIMS, "babilong.qa3-naive")
_QA3_LOSS = [full - masked for full, masked in zip(babilong.QA3_32K["full"], babilong.QA3_32K["naive"])]

#: The paper's whole-source-vs-full numbers for each (benchmark, question) with their lines, read from the
#: studies' claims (``studies/<study>/claims.py``, where each is quoted once).
PAPER: dict[tuple[str, str], str] = {
    ("MINTEval", "current"): f"current-location source - full: {_GAIN['model']} {_GAIN['pp']:+.2f} pp "
                             f"[{_GAIN['ci'][0]:.2f}, {_GAIN['ci'][1]:.2f}], the only interval above 0 of three "
                             f"models ({lines_text(_GAIN['lines'])})",
    ("MINTEval", "historical"): f"history answers fall by {', '.join(f'{x:.2f}' for x in _FALL['pp'])} pp "
                                f"({', '.join(minteval.PAPER_MODELS)}; {lines_text(_FALL['lines'])})",
    ("MQuAKE", "current"): _mquake_rates("current"),
    ("MQuAKE", "historical"): _mquake_rates("historical"),
    ("BABILong", "current"): f"qa2 at 32k, full -> naive: {babilong.paper_counts('qa2', 'naive')} of 100 "
                             f"({', '.join(babilong.PAPER_MODELS)}; {_QA2})",
    ("BABILong", "historical"): f"qa3 at 32k, full -> source: {babilong.paper_counts('qa3', 'naive')} of 100 "
                                f"({', '.join(babilong.PAPER_MODELS)}; {_QA3}; {min(_QA3_LOSS)}-{max(_QA3_LOSS)} "
                                f"lost, L{babilong.QA3_LOSS_LINE})",
}

#: The paper's whole-source-minus-full changes per model, in the order of :data:`PAPER_MODELS`, for the table's
#: column beside ours (points; BABILong: answers of 100): from the numbers :data:`PAPER` quotes (MQuAKE: the
#: differences of its table's rounded percentages; MINTEval current: only Llama-3.2-3B is given in the text).
PAPER_CHANGE: dict[tuple[str, str], str] = {
    ("MINTEval", "current"): f"{_GAIN['model']} {_GAIN['pp']:+.2f} [{_GAIN['ci'][0]:.2f}, {_GAIN['ci'][1]:.2f}] pp "
                             f"(L{_GAIN['lines'][0]})",
    ("MINTEval", "historical"): f"{', '.join(f'{-x:+.2f}' for x in _FALL['pp'])} pp ({lines_text(_FALL['lines'])})",
    ("MQuAKE", "current"): _mquake_changes("current"),
    ("MQuAKE", "historical"): _mquake_changes("historical"),
    ("BABILong", "current"): _babilong_changes("qa2", _QA2),
    ("BABILong", "historical"): _babilong_changes("qa3", _QA3),
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
            chance = 100.0 * full["majority"] / full["n"]  # the majority answer, as the scorecard's and the report's
            out.append(_row("BABILong", model, run, question, "official", full, masked, "official", pp, ci,
                            "stories", chance=chance, label=f"{task}, {length} tokens"))
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
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    found = rows(runs)
    (out / "cross-benchmark.json").write_text(json.dumps({"rows": found}, indent=1) + "\n")
    (out / "report.md").write_text(report(found))
    plot({"rows": found}, out / "figure.png")
    return found


def plot(data: dict[str, Any], path: Path | str) -> Path:
    """Current (left) and historical (right) answers under whole-source masking: per row (benchmark, model,
    metric), full access (grey) and masked (blue) rates in percent with exact 95% intervals and counts; n on
    each label; a dashed chance line where one is defined (BABILong). ``data``: ``cross-benchmark.json``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .common.figures import UP, save_figure

    blocks = {q: [r for r in data["rows"] if r["question"] == q] for q in ("current", "historical")}
    height = 1.6 + 0.55 * max(len(b) for b in blocks.values())
    fig, axes = plt.subplots(1, 2, figsize=(12.5, height), sharex=True, layout="constrained")
    chance_drawn = False
    for ax, (question, block) in zip(axes, blocks.items()):
        y = list(range(len(block)))[::-1]
        for yi, r in zip(y, block):
            for offset, arm, color in ((0.18, "full", "#999999"), (-0.18, "masked", UP)):
                rate = r[arm]
                ax.barh(yi + offset, rate["pct"], height=0.34, color=color)
                ax.errorbar(rate["pct"], yi + offset, xerr=[[rate["pct"] - rate["ci"][0]], [rate["ci"][1] - rate["pct"]]],
                            fmt="none", ecolor="black", capsize=2, lw=0.8)
                ax.text(101, yi + offset, f"{rate['k']}/{rate['n']}", va="center", fontsize=7)
            if r["chance_pct"] is not None:
                ax.plot([r["chance_pct"]] * 2, [yi - 0.45, yi + 0.45], color="#c07000", lw=1.0, ls="--")
                chance_drawn = True
        labels = [f"{r['benchmark']} {r['metric']}{', ' + r['label'] if r['label'] else ''}\n{r['model']}, "
                  f"n = {r['n']}; change {r['change_pp']:+.1f} pp" for r in block]
        ax.set_yticks(y, labels, fontsize=7)
        ax.set_ylim(-0.7, len(block) - 0.3)
        ax.set_xlim(0, 112)
        ax.set_title(f"{question} questions", fontsize=9)
        ax.set_xlabel("answers correct, % (95% exact CI)", fontsize=8)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("Current and historical answers under whole-source masking", fontsize=10)
    legend = "grey: full access; blue: whole-source mask; right: counts"
    if chance_drawn:
        legend += "; dashed orange: always answering the most common gold location (BABILong)"
    fig.supxlabel(legend, fontsize=7.5, color="#444444")
    return save_figure(fig, path)
