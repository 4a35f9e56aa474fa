"""The answer-level table of the scorecard: the paper's central answer-level claims on the best local model.

Each line of :data:`LINES` is one central claim of the paper's abstract (quoted verbatim with its lines) or of
its main answer-level results, tied to the study claims that test it (keys of ``studies/<study>/claims.py``).
A line's verdicts are read from the scorecard's own rows (:func:`kvprobe.studies.common.claims.evaluate`) on
:data:`BEST_MODEL`, the largest local model that writes the paper's answer formats: the primary row of each
claim (its declared primary test, ``Test.primary``: the paper's grading rule, arm and setting). A claim with no
row on that model says so, with the line's declared reason (``pending``) and the verdicts of the smaller models that were run.
Nothing here is chosen from results: the lines, their claims and the primary rule are fixed.

Example::

    from kvprobe.studies.answer_level import answer_level, format_answer_level
    from kvprobe.studies.common.claims import evaluate
    from kvprobe.studies.scorecard import claims

    lines = format_answer_level(answer_level(evaluate("artifacts", claims())))
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kvprobe.studies.common.claims import Row, lines_text
from kvprobe.studies.common.report import table_head, table_row

__all__ = ["BEST_MODEL", "LINES", "Line", "answer_level", "format_answer_level"]

#: The model whose runs the table reports (bfloat16 runs on the CPU).
BEST_MODEL = "qwen2.5-coder-1.5b-instruct"


@dataclass(frozen=True)
class Line:
    """One central claim: the paper's words, the study claims that test it, and why a claim may have no run yet.

    Attributes:
        quote: the abstract, verbatim; None: the first claim's own quote (from its study's ``claims.py``, where
            the abstract names no such result).
        lines: the quote's lines in the paper's LaTeX source (None with ``quote``).
        claims: keys of the study claims that test it (``quantity.unit-loss``).
        pending: why a claim without a run on :data:`BEST_MODEL` has none (shown only then).
    """

    quote: str | None
    lines: tuple[int, int] | None
    claims: tuple[str, ...]
    pending: str = ""


#: The paper's central answer-level claims: the abstract's, in its order, then main results the abstract does not
#: name (FactConsolidation, detection, note controls, the factorial), quoted by their study's claims.
LINES: tuple[Line, ...] = (
    Line("In a controlled quantity task, masking makes all eight models prefer the new value more strongly",
         (159, 161), ("quantity.margin",)),
    Line("yet six lose complete answers through unit errors or failure to stop", (161, 162),
         ("quantity.unit-loss", "quantity.unit-loss-full")),
    Line("keeping the unit preserves all current answers", (162, 162), ("quantity.number-only",)),
    Line("Hiding the old record is cheap, but it may still contain needed details or answer questions about the "
         "past", (156, 158), ("matched-scores.all-answers", "matched-scores.replacement-answers",
                              "matched-scores.margin")),
    Line("on multi-hop updates, rebuilding these states at unchanged positions lowers historical accuracy by "
         "20--41 percentage points", (164, 165), ("mquake.rebuild", "quantity.rebuild")),
    Line("whereas moving the existing states has little effect", (165, 166), ("mquake.compact", "quantity.compact")),
    Line("Keeping object dependencies and unchanged revision passages prevents many losses", (166, 167),
         ("babilong.qa3-dependency", "revisions.changed-text"),
         pending="the BABILong and revision-history runs on 1.5B are queued (one model job at a time on 2 CPU cores)"),
    Line(None, None, ("factconsolidation.source", "factconsolidation.fallback"),
         pending="the FactConsolidation run on 1.5B is queued"),
    Line(None, None, ("detection.yes-no",),
         pending="the detection run (YES/NO score with its development run) on 1.5B is queued"),
    Line(None, None, ("note-controls.early", "note-controls.occurrence"),
         pending="the note-control run on 1.5B is queued"),
    Line(None, None, ("factorial.explicit-request", "factorial.scope"),
         pending="the factorial run on 1.5B is queued"),
)


def _primary(rows: Sequence[Row]) -> Row | None:
    """The row a claim is read by on one model: its primary test's (``Test.primary``, declared in its claims.py)."""
    return next((r for r in rows if r.test.primary), None)


def answer_level(rows: Sequence[Row], model: str = BEST_MODEL) -> list[dict[str, Any]]:
    """Each line of :data:`LINES` with, per claim, the primary row's verdict on ``model`` (or the other models'
    verdicts and the line's pending reason when ``model`` has no row of it)."""
    known = {r.claim.key for r in rows}
    missing = sorted({k for line in LINES for k in line.claims} - known)
    if missing:
        raise ValueError(f"answer-level lines name claims the scorecard has no rows of: {missing}")
    out = []
    for line in LINES:
        cells = []
        for key in line.claims:
            mine = [r for r in rows if r.claim.key == key]
            row = _primary([r for r in mine if r.model == model])
            others = {}
            for r in mine:
                if r.model != model and r.model not in others:
                    others[r.model] = _primary([x for x in mine if x.model == r.model]).verdict
            cells.append({"claim": key, "row": row.index if row else None, "verdict": row.verdict if row else None,
                          "estimate": row.estimate_text if row else None, "rule": row.test.rule if row else None,
                          "run": row.test.run if row else None, "other_models": others})
        first = next(r.claim.paper for r in rows if r.claim.key == line.claims[0])
        quote, where = (line.quote, line.lines) if line.quote is not None else (first.quote, first.lines)
        out.append({"quote": quote, "lines": list(where), "claims": cells,
                    "pending": line.pending if any(c["row"] is None for c in cells) else ""})
    return out


def _claim_cell(cell: dict[str, Any], model: str) -> str:
    if cell["row"] is None:
        smaller = ", ".join(f"{m}: {v}" for m, v in cell["other_models"].items()) or "none"
        return f"{cell['claim']}: not run on {model} (smaller models: {smaller})"
    return f"{cell['claim']}: **{cell['verdict']}**, {cell['estimate']} (row {cell['row']})"


def format_answer_level(lines: Sequence[dict[str, Any]], model: str = BEST_MODEL) -> list[str]:
    """The markdown section of :func:`answer_level` (for ``docs/scorecard.md``)."""
    out = ["## Answer-level claims on the best local model", "",
           f"One line per central answer-level claim of the paper, read on {model} (bfloat16), the largest local "
           "model that writes the paper's answer formats: each claim's primary row (its declared primary test: "
           "the paper's grading rule, arm and setting) below, its verdict by the rule above. Where a claim has no "
           "run on this model, the verdicts of the smaller models and the reason.", ""]
    out += table_head(["the paper", f"verdict on {model}", "why not run"])
    for line in lines:
        quote = f'"{line["quote"]}" ({lines_text(tuple(line["lines"]))})'
        claims = "; ".join(_claim_cell(c, model) for c in line["claims"])
        out.append(table_row([quote, claims, line["pending"]]))
    return out
