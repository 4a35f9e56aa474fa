"""The scorecard: every claim of the paper a committed study tests, with a verdict computed by one rule.

``kvprobe report scorecard`` reads the committed runs under ``artifacts/`` and writes ``docs/scorecard.md``
and ``docs/scorecard.json``. This module only gathers and renders: each study folder's ``claims.py`` holds
its claims (the paper's words, lines and numbers) and the measures of its own runs, and
:mod:`kvprobe.studies.common.claims` holds the claim types, the readers and the verdict rule (the rule
itself is :func:`verdict`, ``kvprobe.studies.common.report.claim_verdict``).

A study's claims are found through the study registry by convention: the ``claims`` module beside the
study's anchor module (``kvprobe.studies.registry.study_anchors``: a run study's study module,
``kvprobe.studies.quantity.claims`` for ``quantity.study:QuantityStudy``; a command study's commands module,
``kvprobe.studies.recognition.claims`` for ``recognition.commands:add_commands``), so a study with claims is
its folder plus its registry line. The studies come in :data:`ORDER`, then any other registered study in
registry order.

Example::

    from kvprobe.studies.common.claims import evaluate
    from kvprobe.studies.scorecard import claims, format_markdown

    rows = evaluate("artifacts", claims())
    text = format_markdown(rows)        # what docs/scorecard.md holds
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvprobe.studies.answer_level import BEST_MODEL, answer_level, format_answer_level
from kvprobe.studies.common.claims import (FEW_UNITS, FLOOR, INCONCLUSIVE, TOLERANCE, VERDICTS, Claim, Row,
                                           claims_module, evaluate, lines_text)
# The rule, under the name docs/scorecard.md cites (``kvprobe.studies.scorecard.verdict``).
from kvprobe.studies.common.report import claim_verdict as verdict
from kvprobe.studies.common.report import table_head, table_row

__all__ = ["ORDER", "PAPER_TITLE", "claims", "claims_module", "format_markdown", "scorecard_json",
           "verdict", "write_scorecard"]

#: The paper, cited by title (docs never point at a local copy).
PAPER_TITLE = "Positions Are Not Facts: The Mismatch Between KV Caches and Memory"

#: The order of the studies in the scorecard (a registered study not named here follows them).
ORDER = ("quantity", "matched-scores", "mquake", "babilong", "note-controls", "detection", "recognition", "fact-map",
         "components", "derived-note", "factconsolidation", "factorial", "minteval", "query-aware", "records",
         "requests", "revisions", "session-bias", "source-influence", "oaks-open", "oaks", "prompt-format",
         "question-relevance", "native-pairs", "cross-checkpoint")


def claims() -> tuple[Claim, ...]:
    """Every study's ``CLAIMS``, each claims module once, studies in :data:`ORDER` (then registry order),
    each study's claims in the order its module lists them."""
    from kvprobe.studies.registry import study_anchors

    anchors = study_anchors()
    names = [*ORDER, *(name for name in anchors if name not in ORDER)]
    modules = list(dict.fromkeys(claims_module(anchor) for anchor in anchors.values()))
    found = [c for m in modules if importlib.util.find_spec(m) for c in importlib.import_module(m).CLAIMS]
    unknown = {c.study for c in found} - set(names)
    if unknown:
        raise ValueError(f"claims of unregistered studies: {sorted(unknown)}")
    return tuple(sorted(found, key=lambda c: names.index(c.study)))


# --------------------------------------------------------------------------- output


def _counts(rows: Sequence[Row]) -> dict[str, int]:
    found = Counter(r.verdict for r in rows)
    return {v: found.get(v, 0) for v in VERDICTS}


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "/").replace("\n", " ")


def _run_link(row: Row, artifacts_link: str) -> str:
    target = f"{artifacts_link}/{row.test.run}/report.md"
    return f"[{row.model}]({target}) (`{row.test.run}`)"


RULE_TEXT = f"""\
- **replicates**: the 95 % interval excludes the null on the side the paper found;
- **opposite**: it excludes the null on the other side;
- **inconclusive**: it includes the null;
- **not testable here**: the run cannot show the effect: the arm the effect needs (the reference arm of a loss,
  full access of a gain) answers fewer than {FLOOR:.0%} correctly (floor), or at or below chance (BABILong: always
  answering the most common gold location; two-way choices: 50 %), or the estimate is undefined (an AUC with an
  empty class, a recovery ratio whose recompute effect has an interval including 0, a detector that never decided).

Claims without a sign ("either") replicate when the interval excludes the null. Claims of no change ("none")
replicate when the whole interval lies within the null +- {TOLERANCE['pp']:g} pp ({TOLERANCE['AUC']:g} for AUCs),
are opposite when it excludes the null, else inconclusive. The null is 0 for changes, 0.5 for AUCs and
shares against chance, and 0.60 for the paper's recognition criterion. Reference arms are the paper's: a mask
against its equal-token control, recompute, rebuild and compaction against the source mask; where the
control itself moves the answers (its change against full access has an interval excluding 0) full access
is the reference, as the paper does ("We also use full access, since control masks can change answers.").
A row whose interval rests on fewer than {FEW_UNITS} resampled units says so in its n."""


def _against_paper(row: Row) -> str:
    """For an inconclusive row of a signed claim whose point estimate lies on the other side of the null."""
    m, direction = row.measurement, row.claim.direction
    if row.verdict != INCONCLUSIVE or direction not in ("up", "down") or m.value is None:
        return ""
    if (m.value - m.null) * (1 if direction == "up" else -1) < 0:
        return "the point estimate lies on the other side of the paper's"
    return ""


def format_markdown(rows: Sequence[Row], artifacts_link: str = "../artifacts") -> str:
    """The scorecard as markdown (``docs/scorecard.md``); links to runs are relative to ``artifacts_link``."""
    lines = ["# Scorecard: the paper's claims against the committed runs", "",
             "<!-- generated by `kvprobe report scorecard` (studies/scorecard.py); do not edit: "
             "tests/test_scorecard.py regenerates it from the committed runs and fails on any difference -->", "",
             f'Each row tests one claim of the paper ("{PAPER_TITLE}") on one committed run, under one grading rule '
             "and reference arm. Every estimate is read from the run's `summary.json` (recognition: `readouts.json` "
             "and `scores.json`); every verdict is computed by the rule below "
             "(`kvprobe.studies.scorecard.verdict`), never written by hand. `L357-358` are lines of the paper's "
             "LaTeX source. Our models have 135M-1.5B parameters, the paper's 3B-70B; a verdict says what these "
             "runs show, not whether the paper is right.", "",
             "## Verdict rule", "", RULE_TEXT, "", "## Summary", ""]
    lines += table_head(["study", "rows", *VERDICTS])
    studies = list(dict.fromkeys(r.claim.study for r in rows))
    for study in studies:
        counts = _counts([r for r in rows if r.claim.study == study])
        lines.append(table_row([study, sum(counts.values()), *counts.values()]))
    total = _counts(rows)
    lines.append(table_row(["**all**", len(rows), *total.values()]))
    lines += ["", *format_answer_level(answer_level(rows))]
    for study in studies:
        mine = [r for r in rows if r.claim.study == study]
        lines += ["", f"## {study}", ""]
        lines += table_head(["#", "claim", "model (run)", "rule; reference arm", "ours [95% CI]", "n", "verdict",
                             "why / note"])
        shown: set[str] = set()
        for r in mine:
            c, m = r.claim, r.measurement
            first = c.key not in shown
            shown.add(c.key)
            claim = (f"**{c.key}**: {c.claim} (paper: {c.paper.numbers}; {c.paper.where})" if first
                     else f"{c.key} (cont.)")
            rule = r.test.rule + (f"; {m.reference}" if m.reference else "")
            why = "; ".join(x for x in (m.not_testable, m.note, _against_paper(r)) if x)
            lines.append(table_row([r.index, _cell(claim), _run_link(r, artifacts_link), _cell(rule),
                                    r.estimate_text, _cell(r.n_text), f"**{r.verdict}**", _cell(why)]))
        lines += ["", "The paper, verbatim:", ""]
        for c in dict.fromkeys(r.claim for r in mine):
            lines.append(f'- **{c.key}** ({c.paper.section}, {lines_text(c.paper.lines)}; the paper\'s direction: '
                         f'{c.direction}): "{c.paper.quote}"')
    return "\n".join(lines) + "\n"


def scorecard_json(rows: Sequence[Row]) -> dict[str, Any]:
    """The scorecard as JSON (``docs/scorecard.json``): the rule's constants, the counts, the answer-level table
    (:mod:`kvprobe.studies.answer_level`) and every row."""
    return {
        "paper": PAPER_TITLE,
        "rule": {"floor": FLOOR, "few_units": FEW_UNITS, "tolerance": TOLERANCE, "verdicts": list(VERDICTS)},
        "counts": _counts(rows),
        "answer_level": {"model": BEST_MODEL, "lines": answer_level(rows)},
        "rows": [{
            "index": r.index, "claim": r.claim.key, "study": r.claim.study, "statement": r.claim.claim,
            "direction": r.claim.direction, "paper": {"quote": r.claim.paper.quote, "lines": list(r.claim.paper.lines),
                                                      "section": r.claim.paper.section,
                                                      "numbers": r.claim.paper.numbers},
            "run": r.test.run, "model": r.model, "rule": r.test.rule, "reference": r.measurement.reference,
            "value": r.measurement.value, "ci": list(r.measurement.ci) if r.measurement.ci else None,
            "null": r.measurement.null, "unit": r.measurement.unit, "n": r.measurement.n,
            "resampled_units": r.measurement.units, "verdict": r.verdict,
            "not_testable": r.measurement.not_testable, "note": r.measurement.note or None,
        } for r in rows],
    }


def write_scorecard(artifacts: Path | str = "artifacts", out: Path | str = "docs/scorecard.md") -> list[Row]:
    """Evaluate every claim on ``artifacts`` and write ``out`` (markdown) and the JSON beside it.

    Links in the markdown point from ``out``'s folder to ``artifacts``.
    """
    import os

    out = Path(out)
    rows = evaluate(artifacts, claims())
    link = Path(os.path.relpath(Path(artifacts).resolve(), out.parent.resolve())).as_posix()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(format_markdown(rows, link))
    out.with_suffix(".json").write_text(json.dumps(scorecard_json(rows), indent=1) + "\n")
    return rows
