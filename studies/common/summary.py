"""One summary contract for every registered study: :func:`write_summary` (``kvprobe report NAME DIR`` calls it).

A study's summary module (its registry entry's ``summary``) provides

* ``summarize(out_dir, seed=..., **options) -> dict``: the summary, recomputed from the rows on disk; it
  takes the entry's summary options (``Entry.command_options``: the declared ones, and ``grades`` for a graded
  study) as keywords;
* ``format_report(summary, config, timing) -> str``: ``report.md`` (``timing``: the runner's totals, or None);
* optionally ``SUMMARY_INDENT``: the indent of ``summary.json`` (default 1).

:func:`write_summary` reads nothing else: it grades the run first when a judge model is given (``Entry.graded``),
writes ``summary.json`` and ``report.md``, and draws the study's figure (``Entry.figure``, the study's
``figure.py``) into the run folder. Its default seed is the entry's (``Entry.seed``), the one ``kvprobe report``
uses, so the Python call reproduces a committed summary byte for byte.

:func:`run_claims` judges the study's claims (its ``claims.py``, as the scorecard gathers them) on a run folder
just written: the scorecard's rows of that run, by the one verdict rule. :func:`write_summary` does not call it:
it writes and returns what it always did (a run in progress, or under another folder name, need not hold what a
claim reads), and ``docs/scorecard.md`` is written by ``kvprobe report scorecard`` alone.

Example::

    from kvprobe.studies.common.summary import write_summary

    summary = write_summary("minteval", "runs/minteval")   # the registry's seed, REPORT_SEED
    write_summary("session-bias", "runs/session-bias", grades="runs/session-bias/grades.jsonl")
    rows = run_claims("factorial", "artifacts/factorial/smollm2-135m-instruct")   # [Row(..., verdict=...)]
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvprobe.files import atomic_write_text

from .report import model_name
from .runner import CONFIG, read_timing

if TYPE_CHECKING:
    from .claims import Row
    from kvprobe.studies.registry import Entry

__all__ = ["SUMMARY_FILES", "run_claims", "write_summary"]

#: The files :func:`write_summary` writes into a run folder (and the figure, where the study draws one).
SUMMARY_FILES = ("summary.json", "report.md")


def _entry(entry: Entry | str) -> Entry:
    from kvprobe.studies.registry import entry as registered

    return registered(entry) if isinstance(entry, str) else entry


def _summary_options(entry: Entry, out_dir: Path, options: dict[str, Any]) -> dict[str, Any]:
    """The options ``summarize`` takes: those given (None: the study's default), with a graded study's judge
    run first (``judge_model``: its grades file becomes ``grades``)."""
    known = {o.name for o in entry.command_options if o.to == "summary"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise TypeError(f"{entry.name}: unknown summary option(s) {', '.join(unknown)}; known: "
                        f"{', '.join(sorted(known)) or 'none'}")
    given = {k: v for k, v in options.items() if v is not None}
    judge_model, judge_dtype = given.pop("judge_model", None), given.pop("judge_dtype", None)
    if judge_model is not None:
        if "grades" in given:
            raise ValueError("give grades or judge_model, not both")
        given["grades"] = entry.judge_function()(out_dir, judge_model, judge_dtype)
    elif judge_dtype is not None:
        raise ValueError("judge_dtype needs judge_model")
    return given


def write_summary(entry: Entry | str, out_dir: Path | str, seed: int | None = None, **options: Any) -> dict[str, Any]:
    """Write ``summary.json``, ``report.md`` and the study's figure of a run folder; return the summary.

    ``entry``: a registry entry or its name (``kvprobe.studies.registry.STUDIES``); ``seed``: the bootstrap
    seed (None: the entry's, as ``kvprobe report`` uses); ``options``: the entry's summary options
    (``Entry.command_options``; None keeps the study's default), e.g. ``grades=`` or ``judge_model=`` for a
    graded study, ``readout_scores=`` for records, ``matched_scores=`` for detection.

    Example: ``write_summary("babilong", "runs/babilong")["cells"][0]["official"]``.
    """
    entry = _entry(entry)
    out = Path(out_dir)
    seed = entry.seed if seed is None else seed
    module = importlib.import_module(entry.summary)
    summary = module.summarize(out, seed=seed, **_summary_options(entry, out, options))
    config = json.loads((out / CONFIG).read_text())
    indent = getattr(module, "SUMMARY_INDENT", 1)
    atomic_write_text(out / "summary.json", json.dumps(summary, indent=indent) + "\n")
    atomic_write_text(out / "report.md", module.format_report(summary, config, read_timing(out)))
    if (draw := entry.figure_function()) is not None:
        draw(summary, out / entry.figure_file, model_name(config))
    return summary


def run_claims(entry: Entry | str, out_dir: Path | str) -> list[Row]:
    """The scorecard's rows of one run folder: every claim of the study (its folder's ``claims.py``, found as the
    scorecard finds it, ``studies.common.claims.claims_module``) whose test reads ``out_dir`` (its run names the
    folder's last parts, e.g. ``factorial/smollm2-135m-instruct``), measured on the files there and judged by the
    one rule (``studies.common.claims.evaluate_run``); empty for a folder no test reads. Writes nothing.

    Example: ``[r.verdict for r in run_claims("factorial", "artifacts/factorial/smollm2-135m-instruct")]``.
    """
    from .claims import claims_module, evaluate_run

    entry = _entry(entry)
    module = claims_module(entry.study)
    if importlib.util.find_spec(module) is None:
        return []
    return evaluate_run(out_dir, [c for c in importlib.import_module(module).CLAIMS if c.study == entry.name])
