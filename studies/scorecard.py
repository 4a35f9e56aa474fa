"""The scorecard: every claim of the paper a committed study tests, with a verdict computed by one rule.

``kvprobe report scorecard`` reads the committed runs under ``artifacts/`` and writes ``docs/scorecard.md``
and ``docs/scorecard.json``. This module only gathers and renders: each study folder's ``claims.py`` holds
its claims (the paper's words, lines and numbers) and the measures of its own runs, and
:mod:`kvprobe.studies.common.claims` holds the claim types, the readers and the verdict rule (the rule
itself is :func:`verdict`, ``kvprobe.studies.common.report.claim_verdict``).

A study's claims are the ``claims`` module beside its anchor module in the registry
(``kvprobe.studies.registry.study_anchors``: ``quantity.claims`` for ``quantity.study:QuantityStudy``,
``recognition.claims`` for the command study ``recognition.commands``), so a study with claims is its folder plus
its registry line. The studies come in :data:`ORDER`, then any other registered study in registry order.

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
from kvprobe.studies.common.claims import (CHECK_VERDICTS, FEW_UNITS, FLOOR, INCONCLUSIVE, NOT_TESTABLE, TOLERANCE,
                                           VERDICTS, Claim, ClaimResult, Row, claim_results, claims_module, evaluate,
                                           lines_text)
# The rule, under the name docs/scorecard.md cites (``kvprobe.studies.scorecard.verdict``).
from kvprobe.studies.common.report import claim_verdict as verdict
from kvprobe.studies.common.report import table_head, table_row

__all__ = ["ORDER", "PAPER_TITLE", "RULE_TEXT", "claims", "claims_module", "format_markdown", "scorecard_json",
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


def _counts(rows: Sequence[Row] | Sequence[ClaimResult], verdicts: Sequence[str] = VERDICTS) -> dict[str, int]:
    found = Counter(r.verdict for r in rows)
    return {v: found.get(v, 0) for v in verdicts}


def _tallied(rows: Sequence[Row]) -> list[Row]:
    """The rows the tallies count: every claim's but a construction check's."""
    return [r for r in rows if r.claim.kind != "construction"]


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "/").replace("\n", " ")


def _run_link(row: Row, artifacts_link: str) -> str:
    target = f"{artifacts_link}/{row.test.run}/report.md"
    return f"[{row.model}]({target}) (`{row.test.run}`)"


RULE_TEXT = f"""\
Each claim is declared before the data in its study's `claims.py`: the primary measure and grading rule (its
**primary** test, the paper's rule, arm and setting, one per model), the reference arm (the paper's; a claim the
paper states against two arms is two claims) and the resampled unit. Secondary tests (another grading rule, arm,
length or grader) are shown beside the primary one and never make a claim replicate. No reference arm is chosen
from the results: against an equal-token control, the control's own change against full access is given in the
row's note ("not neutral" when its interval excludes 0), so a control that moves the answers is visible.

A row's verdict, from its 95 % interval and the null:

- **replicates**: the interval excludes the null on the side the paper found;
- **opposite**: it excludes the null on the other side;
- **inconclusive**: it includes the null;
- **not testable here**: the run cannot show the effect: the arm the effect needs (the reference arm of a loss,
  full access of a gain) answers fewer than {FLOOR:.0%} correctly (floor), or not above chance by a test (its exact
  Clopper-Pearson 95 % interval, or the run's bootstrap interval where the summary gives a rate without counts,
  must lie above the chance level: BABILong, always answering the task's most common gold location; two-way
  choices, 50 %), or no answer differs between the arms (an interval of zero width at the null, never a
  replication), or the estimate is undefined (an AUC with an empty class, a recovery ratio whose recompute effect
  has an interval including 0, a detector that never decided, a positive control that does not show);
- **no effect found**: for a claim that something fails or carries no signal (a score below the paper's
  criterion, no advantage over a surface baseline), the interval on the paper's side; a score without any signal
  gives it too, so it is reported apart, beside the claim's positive control where one exists, and never tallied
  as a replication.

Claims without a sign ("either") replicate when the interval excludes the null. Claims of no change ("none")
replicate when the whole interval lies strictly within the null +- {TOLERANCE['pp']:g} pp ({TOLERANCE['AUC']:g} for
AUCs): an interval reaching the band's edge does not; opposite when it excludes the null, else inconclusive. Where
one answer is {TOLERANCE['pp']:g} pp or more (20 answers or fewer) no interval but the degenerate one fits strictly
inside the band, so such a row is not testable; with 21-24 answers (one answer 4.2-4.8 pp) the interval must stay
within one answer of the null. The null is 0 for changes, 0.5 for AUCs and shares against chance, and 0.60 for the
paper's recognition criterion. Every row states its resampled units; a row resting on fewer than {FEW_UNITS} says so
in its n.

A claim replicates when its primary row replicates on at least one model (the models are listed); otherwise it
takes the first of no effect found, opposite, inconclusive and not testable here among its primary rows.
Construction checks (properties of our templates, no model involved) are listed apart, outside every tally."""


def _against_paper(row: Row) -> str:
    """For an inconclusive row of a signed claim whose point estimate lies on the other side of the null."""
    m, direction = row.measurement, row.claim.direction
    if row.verdict != INCONCLUSIVE or direction not in ("up", "down") or m.value is None:
        return ""
    if (m.value - m.null) * (1 if direction == "up" else -1) < 0:
        return "the point estimate lies on the other side of the paper's"
    return ""


def _positive_control(row: Row, rows: Sequence[Row]) -> str:
    """For a row of a no-effect claim: its positive control's primary row on the same model."""
    if not row.claim.control:
        return ""
    found = next((r for r in rows if r.claim.key == row.claim.control and r.model == row.model and r.test.primary),
                 None)
    if found is None:
        return f"positive control {row.claim.control}: no row on {row.model}"
    return f"positive control {row.claim.control} (row {found.index}): {found.verdict}, {found.estimate_text}"


def _study_rows(rows: Sequence[Row], all_rows: Sequence[Row], artifacts_link: str) -> list[str]:
    """The rows table of one study (or of the construction checks)."""
    lines = table_head(["#", "claim", "model (run)", "test", "rule; reference arm", "ours [95% CI]", "n", "verdict",
                        "why / note"])
    shown: set[str] = set()
    for r in rows:
        c, m = r.claim, r.measurement
        first = c.key not in shown
        shown.add(c.key)
        claim = (f"**{c.key}**: {c.claim} (paper: {c.paper.numbers}; {c.paper.where})" if first
                 else f"{c.key} (cont.)")
        rule = r.test.rule + (f"; {m.reference}" if m.reference else "")
        why = "; ".join(x for x in (r.reason if r.verdict == NOT_TESTABLE else None, m.note, _against_paper(r),
                                    _positive_control(r, all_rows)) if x)
        lines.append(table_row([r.index, _cell(claim), _run_link(r, artifacts_link),
                                "primary" if r.test.primary else "secondary", _cell(rule), r.estimate_text,
                                _cell(r.n_text), f"**{r.verdict}**", _cell(why)]))
    return lines


def _claims_table(results: Sequence[ClaimResult]) -> list[str]:
    """One line per claim: what it declares and its verdict over models."""
    lines = table_head(["claim", "kind", "reference arm", "resampled", "primary rows", "claim verdict"])
    for res in results:
        c = res.claim
        kind = c.kind + (f" (positive control: {c.control})" if c.control else "")
        primary = "; ".join(f"{r.model}: {r.verdict} (row {r.index})" for r in res.rows)
        # the claim's verdict and the models whose primary row gives it
        verdict_text = f"**{res.verdict}**" + (f" on {', '.join(res.models)}" if res.models else "")
        lines.append(table_row([f"**{c.key}**", kind, _cell(c.reference), _cell(c.units), _cell(primary),
                                verdict_text]))
    return lines


def _verbatim(claims: Sequence[Claim]) -> list[str]:
    lines = ["", "The paper, verbatim:", ""]
    for c in claims:
        lines.append(f'- **{c.key}** ({c.paper.section}, {lines_text(c.paper.lines)}; the paper\'s direction: '
                     f'{c.direction}): "{c.paper.quote}"')
    return lines


def format_markdown(rows: Sequence[Row], artifacts_link: str = "../artifacts") -> str:
    """The scorecard as markdown (``docs/scorecard.md``); links to runs are relative to ``artifacts_link``."""
    results = claim_results(rows)
    tallied = [res for res in results if res.claim.kind != "construction"]
    checks = [r for r in rows if r.claim.kind == "construction"]
    counted = _tallied(rows)
    lines = ["# Scorecard: the paper's claims against the committed runs", "",
             "<!-- generated by `kvprobe report scorecard` (studies/scorecard.py); do not edit: "
             "tests/test_scorecard.py regenerates it from the committed runs and fails on any difference -->", "",
             f'Each claim of the paper ("{PAPER_TITLE}") is declared in its study\'s `claims.py` with its primary '
             "measure, grading rule, reference arm and resampled unit; each row tests it on one committed run under "
             "one grading rule and reference arm, the primary test or a secondary one beside it. Every estimate is "
             "read from the run's `summary.json` (recognition: `readouts.json` and `scores.json`); every verdict is "
             "computed by the rule below (`kvprobe.studies.scorecard.verdict`), never written by hand. `L357-358` "
             "are lines of the paper's LaTeX source. Our models have 135M-1.5B parameters, the paper's 3B-70B; a "
             "verdict says what these runs show, not whether the paper is right.", "",
             "## Verdict rule", "", RULE_TEXT, "", "## Summary", "",
             f"{len(tallied)} claims ({len(counted)} rows; {len(checks)} construction-check rows apart). Claims, by "
             "the verdict of their primary rows (a claim replicates when its primary row does on at least one "
             "model):", ""]
    lines += table_head(["study", "claims", *VERDICTS])
    studies = list(dict.fromkeys(r.claim.study for r in counted))
    for study in studies:
        counts = _counts([res for res in tallied if res.claim.study == study])
        lines.append(table_row([study, sum(counts.values()), *counts.values()]))
    total = _counts(tallied)
    lines.append(table_row(["**all**", len(tallied), *total.values()]))
    lines += ["", "Rows (primary and secondary tests; secondary rows never make a claim replicate):", ""]
    lines += table_head(["study", "rows", "primary rows", *VERDICTS])
    for study in studies:
        mine = [r for r in counted if r.claim.study == study]
        counts = _counts(mine)
        lines.append(table_row([study, len(mine), sum(r.test.primary for r in mine), *counts.values()]))
    lines.append(table_row(["**all**", len(counted), sum(r.test.primary for r in counted),
                            *_counts(counted).values()]))
    lines += ["", *format_answer_level(answer_level(rows))]
    for study in studies:
        mine = [r for r in counted if r.claim.study == study]
        lines += ["", f"## {study}", "", *_claims_table([res for res in tallied if res.claim.study == study]), ""]
        lines += _study_rows(mine, rows, artifacts_link)
        lines += _verbatim(list(dict.fromkeys(r.claim for r in mine)))
    if checks:
        lines += ["", "## Construction checks (outside the tally)", "",
                  "Properties of our templates, true of the construction itself (no model is involved), checked by "
                  "the same interval rule (a zero-width interval is expected here) and counted in no tally.", ""]
        lines += _study_rows(checks, rows, artifacts_link)
        lines += _verbatim(list(dict.fromkeys(r.claim for r in checks)))
    return "\n".join(lines) + "\n"


def scorecard_json(rows: Sequence[Row]) -> dict[str, Any]:
    """The scorecard as JSON (``docs/scorecard.json``): the rule's constants, the counts of claims and of rows
    (construction checks apart), every claim's verdict, the answer-level table (:mod:`kvprobe.studies.answer_level`)
    and every row."""
    results = claim_results(rows)
    counted = _tallied(rows)
    return {
        "paper": PAPER_TITLE,
        "rule": {"floor": FLOOR, "few_units": FEW_UNITS, "tolerance": TOLERANCE, "verdicts": list(VERDICTS),
                 "check_verdicts": list(CHECK_VERDICTS)},
        "counts": {"claims": _counts([res for res in results if res.claim.kind != "construction"]),
                   "rows": _counts(counted),
                   "primary_rows": _counts([r for r in counted if r.test.primary]),
                   "construction_checks": _counts([r for r in rows if r.claim.kind == "construction"],
                                                  CHECK_VERDICTS)},
        "claims": [{
            "claim": res.claim.key, "study": res.claim.study, "kind": res.claim.kind,
            "direction": res.claim.direction, "reference": res.claim.reference, "units": res.claim.units,
            "control": res.claim.control, "verdict": res.verdict, "models": list(res.models),
            "primary_rows": [r.index for r in res.rows],
        } for res in results],
        "answer_level": {"model": BEST_MODEL, "lines": answer_level(rows)},
        "rows": [{
            "index": r.index, "claim": r.claim.key, "study": r.claim.study, "statement": r.claim.claim,
            "direction": r.claim.direction, "kind": r.claim.kind,
            "paper": {"quote": r.claim.paper.quote, "lines": list(r.claim.paper.lines),
                      "section": r.claim.paper.section, "numbers": r.claim.paper.numbers},
            "run": r.test.run, "model": r.model, "rule": r.test.rule, "primary": r.test.primary,
            "reference": r.measurement.reference,
            "value": r.measurement.value, "ci": list(r.measurement.ci) if r.measurement.ci else None,
            "null": r.measurement.null, "unit": r.measurement.unit, "n": r.measurement.n,
            "resampled_units": r.measurement.units, "verdict": r.verdict,
            "not_testable": r.reason if r.verdict == NOT_TESTABLE else None, "note": r.measurement.note or None,
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
