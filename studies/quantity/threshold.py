"""Held-out-model warning threshold for lost answers (paper partC 5, L4147-4160).

The warning signal of one replacement case is D_c, the drop of log p(current
answer) under the whole-source mask against its matched control. A case is
flagged when D_c > tau. With several models run, tau for model M is fitted on
the *other* models only (pooled cases, both information conditions): the grid
0, 0.25, ..., 10 nats, maximizing Youden's J = sensitivity - false-alarm rate,
ties broken toward the largest tau. It is then applied to M, whose
sensitivity (lost answers flagged) and false-alarm rate (kept answers flagged)
are reported with exact Clopper-Pearson 95 % intervals.

Lost / kept follow ``summary.warning_signal``: complete under full access and
incomplete (lost) or complete (kept) under the whole-source mask, current query,
replacement groups. Not implemented: the bootstrap variant that refits tau in
each draw, and the midpoint-grid sensitivity check (paper L4206).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvprobe.files import atomic_write_text
from kvprobe.readouts.stats import clopper_pearson
from kvprobe.studies.runner import read_rows

#: The paper's grid: 0-10 nats in 0.25-nat steps.
TAU_GRID = tuple(float(x) for x in np.arange(0.0, 10.0 + 1e-9, 0.25))


@dataclass(frozen=True)
class SignalCases:
    """The D_c values and lost labels of one run's replacement cases."""

    model: str
    d_c: np.ndarray  # Float[n]
    lost: np.ndarray  # Bool[n]


def signal_cases(out_dir: Path | str, rule: str = "lenient_complete") -> SignalCases:
    """Collect (D_c, lost) for every current-query replacement case complete under full access."""
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for row in read_rows(out_dir):
        if row["query"] == "current" and row["relation"] == "replacement" and \
                row["condition"] in ("full", "source", "source-control"):
            by_case.setdefault(row["case_id"], {})[row["condition"]] = row
    d_c, lost = [], []
    for case in sorted(by_case):
        rows = by_case[case]
        if len(rows) < 3 or not rows["full"][rule]:
            continue
        d_c.append(-(rows["source"]["logp_right"] - rows["source-control"]["logp_right"]))
        lost.append(not rows["source"][rule])
    model = json.loads((Path(out_dir) / "config.json").read_text())["model"]["name"]
    return SignalCases(model, np.array(d_c, dtype=float), np.array(lost, dtype=bool))


def youden(d_c: np.ndarray, lost: np.ndarray, tau: float) -> float:
    """J = P(flag | lost) - P(flag | kept) for the rule D_c > tau (nan if a class is empty)."""
    if not lost.any() or lost.all():
        return float("nan")
    flagged = d_c > tau
    return float(flagged[lost].mean() - flagged[~lost].mean())


def fit_tau(d_c: np.ndarray, lost: np.ndarray, grid: tuple[float, ...] = TAU_GRID) -> tuple[float, float]:
    """(tau, J): the grid value maximizing Youden's J, ties toward the largest tau."""
    scores = [youden(d_c, lost, t) for t in grid]
    if all(np.isnan(s) for s in scores):
        raise ValueError("cannot fit tau: the training cases hold only lost or only kept answers")
    best = max(s for s in scores if not np.isnan(s))
    tau = max(t for t, s in zip(grid, scores) if s == best)
    return tau, best


def held_out_thresholds(runs: list[SignalCases]) -> list[dict[str, Any]]:
    """For each model: tau fitted on the others, then its sensitivity and false-alarm rate."""
    if len(runs) < 2:
        raise ValueError("a held-out threshold needs runs of at least two models")
    names = [r.model for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"each run must be a different model, got {names}")
    out = []
    for i, held in enumerate(runs):
        train = [r for j, r in enumerate(runs) if j != i]
        tau, j_train = fit_tau(np.concatenate([r.d_c for r in train]), np.concatenate([r.lost for r in train]))
        flagged = held.d_c > tau
        tp, n_lost = int(flagged[held.lost].sum()), int(held.lost.sum())
        fp, n_kept = int(flagged[~held.lost].sum()), int((~held.lost).sum())
        out.append({
            "model": held.model, "tau": tau, "train_models": [r.model for r in train], "train_youden_j": j_train,
            "lost": n_lost, "kept": n_kept, "flagged_lost": tp, "flagged_kept": fp,
            "sensitivity": tp / n_lost if n_lost else None, "sensitivity_ci": clopper_pearson(tp, n_lost),
            "false_alarm": fp / n_kept if n_kept else None, "false_alarm_ci": clopper_pearson(fp, n_kept),
        })
    return out


def format_thresholds(rows: list[dict[str, Any]]) -> str:
    """Markdown table of :func:`held_out_thresholds`."""

    def rate(k: int, n: int, ci: list[float] | None) -> str:
        return "n/a (no cases)" if ci is None else f"{k}/{n} [{ci[0]:.2f}, {ci[1]:.2f}]"

    lines = ["# Held-out-model warning threshold (flag when D_c > tau)", "",
             "tau fitted on the other models (grid 0-10 nats, step 0.25, max Youden J, ties to the largest tau); "
             "exact Clopper-Pearson 95 % intervals.", "",
             "| held-out model | tau | flagged lost (sensitivity) | flagged kept (false alarm) |", "|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['tau']:.2f} | {rate(r['flagged_lost'], r['lost'], r['sensitivity_ci'])} | "
                     f"{rate(r['flagged_kept'], r['kept'], r['false_alarm_ci'])} |")
    return "\n".join(lines) + "\n"


def write_thresholds(run_dirs: list[Path | str], out_dir: Path | str) -> list[dict[str, Any]]:
    """Write ``thresholds.json`` and ``thresholds.md`` for several runs (one model each)."""
    rows = held_out_thresholds([signal_cases(d) for d in run_dirs])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "thresholds.json",
                      json.dumps({"runs": [str(d) for d in run_dirs], "grid": list(TAU_GRID), "models": rows},
                                 indent=2) + "\n")
    atomic_write_text(out / "thresholds.md", format_thresholds(rows))
    return rows


def write_comparison(run_dirs: list[Path | str], out_dir: Path | str) -> str:
    """``kvprobe report quantity RUN RUN ... --out DIR``: :func:`write_thresholds`, as a markdown table."""
    return format_thresholds(write_thresholds(run_dirs, out_dir))
