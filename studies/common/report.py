"""Markdown pieces every study's ``report.md`` is built from (``kvprobe.studies.common.report``).

Estimates with intervals, paired changes, table heads and rows, the run-time sentence and
the known-first order of report rows. Each helper reproduces, character for character, what
the summaries wrote by hand before (the committed reports are byte-identical; see
``tests/test_committed_summaries.py``). Formats are ``format()`` specs: ``"+.2f"`` writes
``+0.25``, ``"+g"`` writes ``+3``.

Three things every report says the same way, from one place:

- **what its items are** (:class:`Items`): the released data the paper evaluates, items generated
  in a released schema, or our reconstruction of the paper's synthetic templates; every study's summary
  module declares its ``ITEMS`` (or ``items(config)`` where the run's data decide) and passes it to
  :func:`heading`;
- **a verdict no stronger than the interval** (:func:`verdict`): replicates, opposite, inconclusive or not
  testable here (or, for a claim that something fails, no effect found), against the paper's own reference arm
  (:func:`testable`: the reference arm must answer at least :data:`FLOOR` correctly and, by an exact test, above
  chance), the rule of ``docs/scorecard.md``;
- **small samples** (:func:`small_sample_note`): an interval over fewer than
  ``readouts.stats.MIN_RESAMPLED_UNITS`` resampled units is flagged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kvprobe.readouts.stats import MIN_HISTORIES, MIN_RESAMPLED_UNITS, clopper_pearson, small_sample

__all__ = ["COVERAGE_COLUMNS", "DOES_NOT_HOLD", "FLOOR", "HOLDS", "INCONCLUSIVE", "ITEM_KINDS", "Items", "KINDS",
           "NOT_TESTABLE", "NO_CHANGE_RULE", "NO_EFFECT", "OPPOSITE", "REPLICATES", "VERDICT_RULE", "above_chance",
           "corrections_reversals", "coverage_rows", "data_items",
           "estimate", "exact_rules", "format_change", "format_exact_rules", "heading", "interval", "model_name",
           "nested_note", "ordered", "percent_count", "rate_interval", "run_time", "small_sample_note", "table_head",
           "table_row"]


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


def percent_count(k: int, n: int, count: bool = True) -> str:
    """``k`` of ``n`` as the paper prints it: ``11.1 % (1)`` (``count=False``: ``11.1 %``); ``-`` when n is 0."""
    if not n:
        return "-"
    return f"{100 * k / n:.1f} %" + (f" ({k})" if count else "")


def rate_interval(k: int, n: int, ci: Sequence[float] | None) -> str:
    """``k/n = 25.0 % [0.15, 0.38]`` (an interval of the proportion, e.g. ``readouts.stats.clopper_pearson``);
    ``k/n`` alone when ``ci`` is None (n = 0)."""
    return f"{k}/{n}" + ("" if ci is None else f" = {100 * k / n:.1f} % [{ci[0]:.2f}, {ci[1]:.2f}]")


def table_row(cells: Iterable[Any]) -> str:
    """``| a | b | c |``."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table_head(columns: Sequence[str]) -> list[str]:
    """A markdown table's header row and its ``|---|---|`` rule."""
    return [table_row(columns), "|" + "---|" * len(columns)]


#: Columns of :func:`coverage_rows`.
COVERAGE_COLUMNS = ("coverage", "net [95% CI]", "random", "excess pp [95% CI]")


def coverage_rows(curve: dict[str, Any]) -> list[list[str]]:
    """Table cells (:data:`COVERAGE_COLUMNS`) of a coverage curve (``studies.common.detectors.coverage.coverage_curve``)
    at every 20 % of coverage."""
    rows = []
    for i, cov in enumerate(curve["coverage"]):
        if round(cov * 10) % 2 == 0:
            rows.append([f"{cov:.0%}", estimate(curve["net"][i], (curve["net_lo"][i], curve["net_hi"][i])),
                         f"{curve['random'][i] + 0.0:+.2f}",
                         estimate(curve["excess_pp"][i], (curve["excess_lo"][i], curve["excess_hi"][i]), "+.1f")])
    return rows


# --------------------------------------------------------------------------- provenance of the items

#: What a report's items are, by kind (:class:`Items`).
ITEM_KINDS = {
    "released": "the released data the paper evaluates",
    "released-schema": "generated in a released schema (not the released items)",
    "reconstruction": "our reconstruction of the paper's synthetic templates (our templates, not the paper's items)",
}


@dataclass(frozen=True)
class Items:
    """Where a report's items come from: ``kind`` (a key of :data:`ITEM_KINDS`) and what they are (``detail``)."""

    kind: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.kind not in ITEM_KINDS:
            raise ValueError(f"unknown item provenance {self.kind!r}; known: {', '.join(ITEM_KINDS)}")

    def line(self) -> str:
        """``Items: <kind>: <detail>.``"""
        return f"Items: {ITEM_KINDS[self.kind]}" + (f": {self.detail}" if self.detail else "") + "."


def data_items(data: str | None, generated: str, released: str) -> Items:
    """The items of a study that reads a released file or generates its own in that file's schema: ``data``
    ``"generated"`` (or None) gives ``released-schema`` with ``generated``; a file gives ``released`` with
    ``released`` and the file's name."""
    if data in (None, "generated"):
        return Items("released-schema", generated)
    return Items("released", f"{released} (`{str(data).rstrip('/').rsplit('/', 1)[-1]}`)")


# --------------------------------------------------------------------------- verdicts

REPLICATES, OPPOSITE, INCONCLUSIVE, NOT_TESTABLE = "replicates", "opposite", "inconclusive", "not testable here"
#: The verdict of a claim that something fails or carries no signal when the interval lies on the paper's side: a
#: score without any signal would give it too, so it is reported apart and never tallied as a replication.
NO_EFFECT = "no effect found"
#: The verdicts of a construction check (a property of our templates, no model involved), listed apart.
HOLDS, DOES_NOT_HOLD = "holds", "does not hold"
#: What a claim asserts (:func:`claim_verdict`): an effect of a model (the default), that something fails or
#: carries no signal (``no-effect``), or a property of the construction itself (``construction``).
KINDS = ("effect", "no-effect", "construction")
#: The rule :func:`verdict` applies, in one sentence a report can quote.
VERDICT_RULE = ("replicates: the paper's direction and the 95% interval excludes 0; opposite: the interval excludes 0 "
                "the other way; inconclusive: the interval includes 0; not testable here: the paper's reference arm "
                "answers fewer than 10% correctly or its exact 95% interval does not lie above chance, or no answer "
                "differs between the arms, so the change cannot show")
#: The same rule for a claim that nothing changes (``verdict`` with ``paper_sign`` 0).
NO_CHANGE_RULE = ("where the paper found no change: replicates when the interval lies strictly within +-{tolerance}, "
                  "opposite when it excludes 0, else inconclusive")


#: The floor: a reference arm answering fewer than this share correctly cannot show a change (the scorecard's
#: rule, ``docs/scorecard.md``).
FLOOR = 0.10


def above_chance(correct: int, n: int, chance: float) -> bool:
    """Whether ``correct`` of ``n`` lies above ``chance`` correct answers by an exact test: the lower bound of the
    Clopper-Pearson 95 % interval of ``correct / n`` lies above ``chance / n`` (the majority answer's or a random
    pick's share). A point above chance is not enough: 15/50 against a majority answer's 12/50 is not."""
    ci = clopper_pearson(correct, n)
    return ci is not None and ci[0] > chance / n


#: The directions a claim can state: the paper's effect is positive, negative, nonzero of either sign, or absent.
DIRECTIONS = ("up", "down", "either", "none")


def claim_verdict(direction: str, ci: Sequence[float] | None, null: float = 0.0, tolerance: float | None = None,
                  not_testable: str | None = None, kind: str = "effect") -> str:
    """The one verdict rule of every report and of the scorecard (``kvprobe.studies.scorecard``).

    ``not_testable`` (a reason) gives :data:`NOT_TESTABLE`; so does an interval of zero width at the null (no
    answer differs between the arms: nothing was measured), except for a construction check. Otherwise, for a
    direction the paper found (``up``/``down``): replicates when the 95% interval ``ci`` excludes ``null`` on the
    paper's side, opposite when on the other side, inconclusive when it includes it; ``either``: replicates when
    it excludes the null, else inconclusive; ``none`` (no change): replicates when the whole interval lies
    strictly within ``null +- tolerance`` (an interval reaching the band's edge does not), opposite when it
    excludes the null, else inconclusive.

    ``kind`` (:data:`KINDS`): for a claim that something fails or carries no signal (``no-effect``) the paper's
    side gives :data:`NO_EFFECT` instead of replicates; for a construction check (``construction``) it gives
    :data:`HOLDS`, and any other outcome :data:`DOES_NOT_HOLD`.

    Example: ``claim_verdict("down", (-28.7, -15.0))`` is ``"replicates"``; ``claim_verdict("down",
    (-2.7, 16.0))`` is ``"inconclusive"``; ``claim_verdict("none", (-5.0, 5.0), tolerance=5.0)`` is
    ``"inconclusive"``; ``claim_verdict("none", (0.0, 0.0), tolerance=5.0)`` is ``"not testable here"``.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r} is not one of {DIRECTIONS}")
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    if not_testable:
        return NOT_TESTABLE
    if ci is None:
        raise ValueError("a testable measurement needs an interval")
    lo, hi = float(ci[0]), float(ci[1])
    if lo > hi:
        raise ValueError(f"interval [{lo}, {hi}] is reversed")
    if direction == "none" and tolerance is None:
        raise ValueError("a no-change claim needs a tolerance")
    if lo == hi == null and kind != "construction":
        return NOT_TESTABLE
    side = 1 if lo > null else -1 if hi < null else 0
    if direction == "none":
        found = OPPOSITE if side else REPLICATES if null - tolerance < lo and hi < null + tolerance else INCONCLUSIVE
    elif not side:
        found = INCONCLUSIVE
    elif direction == "either":
        found = REPLICATES
    else:
        found = REPLICATES if side == (1 if direction == "up" else -1) else OPPOSITE
    if kind == "construction":
        return HOLDS if found == REPLICATES else DOES_NOT_HOLD
    if kind == "no-effect" and found == REPLICATES:
        return NO_EFFECT
    return found


# --------------------------------------------------------------------------- exact rules side by side


def exact_rules(rows: Iterable[dict[str, Any]], primary: str = "correct", beside: str = "correct_fenced"
                ) -> dict[str, int]:
    """Counts of the exact answer-field rule (``primary``) and the strict fenced rule kept beside it
    (``beside``) over ``rows``: each rule's correct answers and the rows only one of them accepts."""
    pairs = [(bool(r[primary]), bool(r[beside])) for r in rows]
    return {"rows": len(pairs), "answer_field": sum(a for a, _ in pairs), "fenced": sum(b for _, b in pairs),
            "answer_field_only": sum(a and not b for a, b in pairs), "fenced_only": sum(b and not a for a, b in pairs)}


def format_exact_rules(counts: dict[str, int]) -> str:
    """One sentence on :func:`exact_rules` (paper L5453-5454, L5841: answer-field equality is the score)."""
    n = counts["rows"]
    return (f"Exact rules over all {n:,} rows: answer field (the score; the paper's parser rules 1-2: one JSON "
            f"object, extra fields permitted, no fence) {counts['answer_field']:,}/{n:,} correct; strict fenced "
            f"rule beside it (one string field, one outer code fence allowed) {counts['fenced']:,}/{n:,}; "
            f"{counts['answer_field_only']:,} rows correct only by the answer field, {counts['fenced_only']:,} only "
            "by the fenced rule.")


# --------------------------------------------------------------------------- small samples


def small_sample_note(units: int, unit: str = "groups", what: str = "intervals") -> list[str]:
    """A warning paragraph (and a blank line) when ``what`` rest on fewer than
    ``readouts.stats.MIN_RESAMPLED_UNITS`` resampled ``unit``; nothing otherwise."""
    if not small_sample(units):
        return []
    return [f"**Small sample:** these {what} rest on {units} resampled {unit} (fewer than {MIN_RESAMPLED_UNITS}); "
            f"a percentile bootstrap over so few units understates the uncertainty, so read them as descriptive.",
            ""]


def nested_note(histories: int, unit: str = "questions") -> list[str]:
    """Why a report gives no interval: its ``unit`` sit inside fewer than ``readouts.stats.MIN_HISTORIES``
    histories (they are not resampled inside so few; the histories are too few to resample)."""
    return [f"**No intervals:** the {unit} sit inside {histories} histories, fewer than {MIN_HISTORIES}; {unit} of "
            "one history are not independent, so they are not resampled inside so few histories, and so few "
            "histories cannot be resampled either. The counts are descriptive.", ""]


# --------------------------------------------------------------------------- headings


def model_name(config: dict[str, Any]) -> str:
    """The run's model name from its ``config.json`` (``?`` when missing)."""
    return config.get("model", {}).get("name", "?")


def heading(title: str, config: dict[str, Any], items: Items | Sequence[Items]) -> list[str]:
    """A report's first lines: ``# TITLE: MODEL``, a blank line, where its items come from (one line per
    :class:`Items` when a report mixes sources) and a blank line."""
    lines = [items] if isinstance(items, Items) else items
    return [f"# {title}: {model_name(config)}", "", *(i.line() for i in lines), ""]


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
