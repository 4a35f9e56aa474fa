"""Markdown pieces every study's ``report.md`` is built from (``kvprobe.studies.report``).

Estimates with intervals, paired changes, table heads and rows, the run-time sentence and
the known-first order of report rows. Each helper reproduces, character for character, what
the summaries wrote by hand before (the committed reports are byte-identical; see
``tests/test_committed_summaries.py``). Formats are ``format()`` specs: ``"+.2f"`` writes
``+0.25``, ``"+g"`` writes ``+3``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["COVERAGE_COLUMNS", "corrections_reversals", "coverage_rows", "estimate", "format_change", "heading",
           "interval", "model_name", "ordered", "run_time", "table_head", "table_row"]


def interval(ci: Sequence[float] | None, fmt: str = "+.2f") -> str:
    """``[lo, hi]`` (empty for None)."""
    return "" if ci is None else f"[{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def estimate(value: float, ci: Sequence[float], fmt: str = "+.2f", ci_fmt: str | None = None) -> str:
    """``value [lo, hi]``; the bounds in ``ci_fmt`` when given, else in ``fmt``."""
    return f"{value:{fmt}} {interval(ci, fmt if ci_fmt is None else ci_fmt)}"


def format_change(change: dict[str, Any] | None) -> str:
    """A paired change (``readouts.stats.paired_change``) as ``+3 [-1, +7]`` (empty for the reference arm)."""
    if not change:
        return ""
    return estimate(change["change"], change["ci"], "+g")


def corrections_reversals(change: dict[str, Any] | None, sep: str = " / ") -> str:
    """``corrections / reversals`` of a paired change (empty for None)."""
    return f"{change['corrections']}{sep}{change['reversals']}" if change else ""


def table_row(cells: Iterable[Any]) -> str:
    """``| a | b | c |``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table_head(columns: Sequence[str]) -> list[str]:
    """A markdown table's header row and its ``|---|---|`` rule."""
    return [table_row(columns), "|" + "---|" * len(columns)]


#: Columns of :func:`coverage_rows`.
COVERAGE_COLUMNS = ("coverage", "net [95% CI]", "random", "excess pp [95% CI]")


def coverage_rows(curve: dict[str, Any]) -> list[list[str]]:
    """Table cells (:data:`COVERAGE_COLUMNS`) of a coverage curve (``studies.detectors.coverage.coverage_curve``)
    at every 20 % of coverage."""
    rows = []
    for i, cov in enumerate(curve["coverage"]):
        if round(cov * 10) % 2 == 0:
            rows.append([f"{cov:.0%}", estimate(curve["net"][i], (curve["net_lo"][i], curve["net_hi"][i])),
                         f"{curve['random'][i] + 0.0:+.2f}",
                         estimate(curve["excess_pp"][i], (curve["excess_lo"][i], curve["excess_hi"][i]), "+.1f")])
    return rows


def model_name(config: dict[str, Any]) -> str:
    """The run's model name from its ``config.json`` (``?`` when missing)."""
    return config.get("model", {}).get("name", "?")


def heading(title: str, config: dict[str, Any]) -> list[str]:
    """A report's first lines: ``# TITLE: MODEL`` and a blank line."""
    return [f"# {title}: {model_name(config)}", ""]


def run_time(timing: dict[str, Any], unit: str = "cases", detail: str = "", machine: bool = False) -> str:
    """``Run time: 12.3 min for 60 cases.`` from the runner's timing totals; ``detail`` goes before the period.
    ``machine``: add where it ran (`` on 2 CPUs (x86_64, 2 torch threads)``)."""
    where = ""
    if machine and (m := timing.get("machine")):
        where = f" on {m['cpus']} CPUs ({m['processor']}, {m['threads']} torch thread{'' if m['threads'] == 1 else 's'})"
    return f"Run time: {timing['seconds'] / 60:.1f} min for {timing['cases_run']} {unit}{where}{detail}."


def ordered(values: Iterable[str], known: Sequence[str]) -> list[str]:
    """``values`` in the order of ``known``, unknown ones after them, alphabetically."""
    return sorted(values, key=lambda x: (known.index(x) if x in known else len(known), x))
