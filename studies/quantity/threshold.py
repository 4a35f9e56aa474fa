"""Held-out-model warning threshold for lost answers (paper partC 5, L4147-4160).

The warning signal of one replacement case is D_c, the drop of log p(current
answer) under the whole-source mask against its matched control. A case is
flagged when D_c > tau. With several models run, tau for model M is fitted on
the *other* models only (pooled cases, both information conditions): the grid
0, 0.25, ..., 10 nats, maximizing Youden's J = sensitivity - false-alarm rate,
ties broken toward the largest tau (``readouts.stats.youden_thresholds``). It is
then applied to M, whose sensitivity (lost answers flagged) and false-alarm rate
(kept answers flagged) are reported with exact Clopper-Pearson 95 % intervals, per
model and pooled over the held-out models.

Bootstrap variant (paper L4154-4155: "when the group bootstrap also refits the
threshold"): 10,000 draws of the groups (seed ``PAPER_SEED``), the same multiplicities
for every model, tau refit on each draw's training cases and applied to the draw's
held-out cases; percentile 95 % intervals over the draws in which tau and the rate
are defined (the kept draws are counted).

Lost / kept follow ``summary.warning_signal``: complete under full access and
incomplete (lost) or complete (kept) under the whole-source mask, current query,
replacement groups. The default rule is the paper's complete answer (``complete``,
rule 3); the lenient rule is reported beside it, because a small model rarely writes
the JSON answer. Not implemented: the midpoint-grid sensitivity check (paper L4206).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kvprobe.files import atomic_write_text
from kvprobe.readouts.stats import DRAWS, PAPER_SEED, clopper_pearson, group_bootstrap_indices, \
    percentile_interval, youden_thresholds
from kvprobe.studies.common.runner import read_rows

#: The paper's grid: 0-10 nats in 0.25-nat steps.
TAU_GRID = tuple(float(x) for x in np.arange(0.0, 10.0 + 1e-9, 0.25))
#: The grading rules lost / kept are labeled with: the paper's complete answer first (the default), then lenient.
RULES = ("complete", "lenient_complete")
#: How the reports define the labels.
LABELS = ("replacements, current query; lost = complete under full access and incomplete under the whole-source "
          "mask, kept = complete under both (cases incomplete under full access are excluded), by the paper's "
          "complete answers and, beside them, by the lenient rule")


@dataclass(frozen=True)
class SignalCases:
    """The D_c values and lost labels of one run's replacement cases."""

    model: str
    groups: np.ndarray  # Str[n]: each case's group id (the bootstrap unit, the same across models)
    d_c: np.ndarray  # Float[n]
    lost: np.ndarray  # Bool[n]


#: The rows of one case the warning signal reads: current query, replacement group.
SIGNAL_CONDITIONS = ("full", "source", "source-control")


def signal(full: dict[str, Any], source: dict[str, Any], control: dict[str, Any], rule: str
           ) -> tuple[float, float, bool] | None:
    """``(D_c, Delta m, lost)`` of one case from its full, source-mask and control rows; None when the
    answer is incomplete under full access (excluded, paper L4135-4137).

    D_c = -(log p(current | source mask) - log p(current | control)); Delta m = m(source mask) - m(control),
    the source row's ``margin_change_vs_control``; lost: incomplete under the source mask (else kept).
    """
    if not full[rule]:
        return None
    return -(source["logp_right"] - control["logp_right"]), source["margin_change_vs_control"], not source[rule]


def signal_cases(out_dir: Path | str, rule: str = RULES[0]) -> SignalCases:
    """Collect (group, D_c, lost) for every current-query replacement case complete under full access."""
    by_case: dict[str, dict[str, dict[str, Any]]] = {}
    for row in read_rows(out_dir):
        if row["query"] == "current" and row["relation"] == "replacement" and row["condition"] in SIGNAL_CONDITIONS:
            by_case.setdefault(row["case_id"], {})[row["condition"]] = row
    groups, d_c, lost = [], [], []
    for case in sorted(by_case):
        rows = by_case[case]
        found = signal(*(rows[c] for c in SIGNAL_CONDITIONS), rule) if len(rows) == 3 else None
        if found is not None:
            groups.append(rows["full"]["group_id"])
            d_c.append(found[0])
            lost.append(found[2])
    model = json.loads((Path(out_dir) / "config.json").read_text())["model"]["name"]
    return SignalCases(model, np.array(groups, dtype=str), np.array(d_c, dtype=float), np.array(lost, dtype=bool))


def youden(d_c: np.ndarray, lost: np.ndarray, tau: float) -> float:
    """J = P(flag | lost) - P(flag | kept) for the rule D_c > tau (nan if a class is empty)."""
    return float(youden_thresholds(d_c, lost, (tau,))[1][0])


def midpoint_grid(scores: np.ndarray) -> tuple[float, ...]:
    """Every midpoint between consecutive distinct scores (the paper's sensitivity grid, seed ~4206).

    Example: ``midpoint_grid(np.array([1.0, 3.0, 3.0, 4.0]))`` is ``(2.0, 3.5)``.
    """
    distinct = np.unique(np.asarray(scores, dtype=float))
    return tuple(float(x) for x in (distinct[:-1] + distinct[1:]) / 2)


def fit_tau(d_c: np.ndarray, lost: np.ndarray, grid: tuple[float, ...] = TAU_GRID) -> tuple[float, float]:
    """(tau, J): the grid value maximizing Youden's J, ties toward the largest tau."""
    tau, j = youden_thresholds(d_c, lost, grid)
    if np.isnan(tau[0]):
        raise ValueError("cannot fit tau: the training cases hold only lost or only kept answers")
    return float(tau[0]), float(j[0])


def _rates(held: SignalCases, weights: np.ndarray, tau: np.ndarray) -> dict[str, np.ndarray]:
    """Weighted flagged and total lost / kept cases of ``held`` per draw: each row of ``weights`` with its tau."""
    flagged = held.d_c[None, :] > tau[:, None]
    lost, kept = weights * held.lost, weights * ~held.lost
    return {"flagged_lost": (lost * flagged).sum(axis=1), "lost": lost.sum(axis=1),
            "flagged_kept": (kept * flagged).sum(axis=1), "kept": kept.sum(axis=1)}


def bootstrap_held_out(runs: list[SignalCases], draws: int = DRAWS, seed: int = PAPER_SEED, refit: bool = True
                       ) -> dict[str, dict[str, np.ndarray]]:
    """Per-draw tau, sensitivity and false-alarm rate of every held-out model and pooled (``"pooled"``).

    Groups are resampled once for all models (shared multiplicities). ``refit``: tau is fitted on each
    draw's training cases (the paper's bootstrap variant); otherwise each model keeps the tau of the
    original cases. A rate is NaN in a draw where tau or the rate is undefined. The pool holds the models
    whose tau is defined on the original cases; its rates are NaN in a draw where one of their taus is not.
    """
    names = sorted({g for r in runs for g in r.groups})
    index = {g: i for i, g in enumerate(names)}
    counts = group_bootstrap_indices(names, n_draws=draws, seed=seed).group_counts()  # [draws, groups]
    weights = [counts[:, [index[g] for g in r.groups]].astype(float) for r in runs]
    out: dict[str, dict[str, np.ndarray]] = {}
    totals: dict[str, Any] = {}
    for i, held in enumerate(runs):
        train = [j for j in range(len(runs)) if j != i]
        d_c = np.concatenate([runs[j].d_c for j in train])
        lost = np.concatenate([runs[j].lost for j in train])
        fixed = youden_thresholds(d_c, lost, TAU_GRID)[0][0]
        if refit:
            tau = youden_thresholds(d_c, lost, TAU_GRID, np.concatenate([weights[j] for j in train], axis=1))[0]
        else:
            tau = np.full(draws, fixed)
        rates = _rates(held, weights[i], tau)
        if not np.isnan(fixed):
            for key, value in rates.items():
                totals[key] = totals.get(key, 0.0) + np.where(np.isnan(tau), np.nan, value)
        out[held.model] = _per_draw(rates, tau)
    nothing = np.full(draws, np.nan)
    out["pooled"] = _per_draw({k: totals.get(k, nothing) for k in ("flagged_lost", "lost", "flagged_kept", "kept")},
                              nothing)
    return out


def _per_draw(rates: dict[str, np.ndarray], tau: np.ndarray) -> dict[str, np.ndarray]:
    with np.errstate(invalid="ignore", divide="ignore"):
        return {"tau": tau,
                "sensitivity": np.where(rates["lost"] > 0, rates["flagged_lost"] / rates["lost"], np.nan),
                "false_alarm": np.where(rates["kept"] > 0, rates["flagged_kept"] / rates["kept"], np.nan)}


def _rate_entry(flagged_lost: int | None, lost: int, flagged_kept: int | None, kept: int,
                draws: dict[str, np.ndarray]) -> dict[str, Any]:
    """Counts, rates, exact intervals and the refit bootstrap intervals of one held-out model (or the pool);
    the flagged counts are None when no tau could be fitted."""
    fitted = flagged_lost is not None and flagged_kept is not None
    entry: dict[str, Any] = {
        "lost": lost, "kept": kept, "flagged_lost": flagged_lost, "flagged_kept": flagged_kept,
        "sensitivity": flagged_lost / lost if fitted and lost else None,
        "sensitivity_ci": clopper_pearson(flagged_lost, lost) if fitted else None,
        "false_alarm": flagged_kept / kept if fitted and kept else None,
        "false_alarm_ci": clopper_pearson(flagged_kept, kept) if fitted else None}
    for key in ("sensitivity", "false_alarm"):
        values = draws[key][~np.isnan(draws[key])]
        entry[f"{key}_ci_refit"] = percentile_interval(values, points="alpha") if len(values) else None
        entry[f"{key}_refit_draws_kept"] = int(len(values))
    return entry


def held_out_thresholds(runs: list[SignalCases], draws: int = DRAWS, seed: int = PAPER_SEED) -> dict[str, Any]:
    """For each model: tau fitted on the others, then its sensitivity and false-alarm rate; and pooled.

    ``{"models": [...], "pooled": {...}}``; a model whose training cases hold only lost or only kept
    answers (or none) has ``tau`` None, no flagged counts, and is left out of the pool.
    """
    if len(runs) < 2:
        raise ValueError("a held-out threshold needs runs of at least two models")
    names = [r.model for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"each run must be a different model, got {names}")
    boot = bootstrap_held_out(runs, draws=draws, seed=seed)
    models, pooled = [], np.zeros(4, dtype=int)
    for i, held in enumerate(runs):
        train = [r for j, r in enumerate(runs) if j != i]
        try:
            tau, j_train = fit_tau(np.concatenate([r.d_c for r in train]), np.concatenate([r.lost for r in train]))
        except ValueError:
            tau, j_train = None, None
        lost, kept = int(held.lost.sum()), int((~held.lost).sum())
        flagged_lost = flagged_kept = None
        if tau is not None:
            flagged = held.d_c > tau
            flagged_lost, flagged_kept = int(flagged[held.lost].sum()), int(flagged[~held.lost].sum())
            pooled += [flagged_lost, lost, flagged_kept, kept]
        models.append({"model": held.model, "tau": tau, "train_models": [r.model for r in train],
                       "train_youden_j": j_train, "midpoints": _midpoint_sensitivity(train, held),
                       **_rate_entry(flagged_lost, lost, flagged_kept, kept, boot[held.model])})
    return {"models": models, "pooled": _rate_entry(*map(int, pooled), boot["pooled"])}


def _midpoint_sensitivity(train: list[SignalCases], held: SignalCases) -> dict[str, Any] | None:
    """tau on every midpoint between distinct training scores instead of the 0.25-nat grid, and the
    held-out model's flagged lost / kept counts under it (None when the training cases hold one class)."""
    d_c, lost = np.concatenate([r.d_c for r in train]), np.concatenate([r.lost for r in train])
    grid = midpoint_grid(d_c)
    if not grid:
        return None
    try:
        tau, j = fit_tau(d_c, lost, grid)
    except ValueError:
        return None
    flagged = held.d_c > tau
    return {"tau": tau, "train_youden_j": j, "flagged_lost": int(flagged[held.lost].sum()),
            "flagged_kept": int(flagged[~held.lost].sum())}


def format_thresholds(results: dict[str, dict[str, Any]]) -> str:
    """Markdown tables of :func:`held_out_thresholds`, one per grading rule (``{rule: result}``)."""

    def rate(k: int | None, n: int, ci: list[float] | None, refit: list[float] | None) -> str:
        if k is None:
            return f"n/a (no tau) of {n}"
        text = "n/a (no cases)" if ci is None else f"{k}/{n} [{ci[0]:.2f}, {ci[1]:.2f}]"
        return text if refit is None else f"{text}; refit [{refit[0]:.2f}, {refit[1]:.2f}]"

    lines = ["# Held-out-model warning threshold (flag when D_c > tau)", "",
             "tau fitted on the other models (grid 0-10 nats, step 0.25, max Youden J, ties to the largest tau); "
             f"exact Clopper-Pearson 95 % intervals, then the group bootstrap that refits tau in each draw "
             f"(percentile 95 %). Cases: {LABELS}.", ""]
    for rule, result in results.items():
        lines += [f"## Rule: {rule}", "",
                  "| held-out model | tau | flagged lost (sensitivity) | flagged kept (false alarm) |", "|---|---|---|---|"]
        for r in [*result["models"], {"model": "pooled", "tau": None, **result["pooled"]}]:
            tau = "" if r["model"] == "pooled" else "n/a (one class)" if r["tau"] is None else f"{r['tau']:.2f}"
            lines.append(f"| {r['model']} | {tau} | "
                         f"{rate(r['flagged_lost'], r['lost'], r['sensitivity_ci'], r['sensitivity_ci_refit'])} | "
                         f"{rate(r['flagged_kept'], r['kept'], r['false_alarm_ci'], r['false_alarm_ci_refit'])} |")
        mids = [(r["model"], r["midpoints"]) for r in result["models"] if r.get("midpoints")]
        if mids:
            lines += ["", "Sensitivity, tau on every midpoint between distinct training scores (seed ~4206): " +
                      "; ".join(f"{m} tau {x['tau']:.3f}, flagged lost {x['flagged_lost']}, flagged kept "
                                f"{x['flagged_kept']}" for m, x in mids) + "."]
        lines.append("")
    return "\n".join(lines)


def write_thresholds(run_dirs: list[Path | str], out_dir: Path | str, seed: int = PAPER_SEED
                     ) -> dict[str, dict[str, Any]]:
    """Write ``thresholds.json`` and ``thresholds.md`` for several runs (one model each), for every rule."""
    results = {rule: held_out_thresholds([signal_cases(d, rule) for d in run_dirs], seed=seed) for rule in RULES}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "thresholds.json",
                      json.dumps({"runs": [str(d) for d in run_dirs], "grid": list(TAU_GRID), "draws": DRAWS,
                                  "seed": seed, "rules": results}, indent=2) + "\n")
    atomic_write_text(out / "thresholds.md", format_thresholds(results))
    return results
