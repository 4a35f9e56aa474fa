"""Every committed records, derived-note, mquake and quantity row carries the current grading (paper L5453-5454, L5841;
quantity: the three rules, the lenient rule and the capped-output diagnostics, L4029-4040, L4425-4457).

The exact score of both studies is answer-field equality (the shared answer-field parser, the paper's rules
1-2), with the strict fenced rule beside it as ``correct_fenced``. Grading does not depend on generation, so
the committed rows were regraded in place (``python -m kvprobe.studies.records.errors RUN...``, ``python -m kvprobe.studies.mquake.study RUN...`` and
``python -m kvprobe.studies.derived_note.grading RUN...``, through
:func:`kvprobe.studies.common.runner.regrade_results`); these tests fail when a grading rule changes and the
committed rows are not regraded with it. The quantity rows were regraded the same way
(``python -m kvprobe.studies.quantity.study RUN...``, which regenerates each run's groups from its config).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvprobe.studies.common.answers import grade
from kvprobe.studies.common.runner import read_rows, regrade_results, rewrite_rows
from kvprobe.studies.derived_note import grading as derived
from kvprobe.studies.mquake import study as mquake
from kvprobe.studies.quantity import study as quantity
from kvprobe.studies.records import errors as records

ROOT = Path(__file__).resolve().parents[1]
RUNS = {"records": (records.regrade_row, (*records.GRADE_COLUMNS, *records.VALUE_COLUMNS)),
        "derived-note": (derived.regrade_row, derived.GRADE_COLUMNS),
        "mquake": (mquake.regrade_row, mquake.GRADE_COLUMNS)}
COMMITTED = sorted((study, p.parent) for study in RUNS for p in (ROOT / "artifacts" / study).glob("*/results.jsonl*"))


def test_there_are_committed_runs_of_both_studies():
    assert {study for study, _ in COMMITTED} == set(RUNS)


@pytest.mark.parametrize("study,run", COMMITTED, ids=[f"{s}/{r.name}" for s, r in COMMITTED])
def test_every_committed_row_matches_the_current_grading(study, run):
    regrade, columns = RUNS[study]
    for i, row in enumerate(read_rows(run)):
        now = regrade(row)
        assert {c: row.get(c, "<missing>") for c in columns} == {c: now[c] for c in columns}, (run, i)


QUANTITY = sorted(p.parent for p in (ROOT / "artifacts" / "quantity").glob("*/results.jsonl*"))


@pytest.mark.parametrize("run", QUANTITY, ids=lambda p: f"quantity/{p.name}")
def test_every_committed_quantity_row_matches_the_current_grading(run):
    """Generation does not depend on grading: every stored grade and diagnostic column equals a regrade of the
    stored output and stop reason."""
    assert len(QUANTITY) >= 3
    columns = (*quantity.GRADE_COLUMNS, *quantity.DIAGNOSTIC_COLUMNS)
    rows = list(read_rows(run))
    again = quantity.regrade_rows(iter(rows), json.loads((run / "config.json").read_text()))
    stale = [(row["case_id"], row["query"], row["condition"], c)
             for row, now in zip(rows, again) for c in columns if row.get(c, "<missing>") != now[c]]
    assert not stale, f"{len(stale)} stale grade cells, e.g. {stale[:3]}"


def test_answer_field_rule_with_the_fenced_rule_beside_it():
    values = ["Tunis", "Miami"]
    extra = grade('{"answer": "Miami", "why": "B"}', "miami", values, rule="answer-field")
    fenced = grade('```json\n{"answer": "Miami"}\n```', "Miami", values, rule="answer-field")
    plain = grade('{"answer": " MIAMI "}', "Miami", values, rule="answer-field")
    assert (extra["correct"], extra["correct_fenced"], extra["parse"]) == (True, False, "ok")
    assert (fenced["correct"], fenced["correct_fenced"], fenced["parse"]) == (False, True, "fenced")
    assert plain["correct"] and plain["correct_fenced"]
    assert "correct_fenced" not in grade('{"answer": "Miami"}', "Miami", values)  # the fenced rule alone
    with pytest.raises(ValueError, match="rule must be"):
        grade("{}", "Miami", values, rule="lenient")


def test_derived_note_grades_by_the_answer_field():
    g = derived.grade('{"answer": "R-45", "route": 1}', "eos", "R-45", "R-81")
    assert (g.correct, g.category, g.correct_fenced) == (True, "correct", False)
    g = derived.grade('```\n{"answer": "R-45"}\n```', "eos", "R-45", "R-81")
    assert (g.correct, g.category, g.parse_reason, g.correct_fenced) == (False, "format_failure", "fenced", True)
    g = derived.grade('{"answer": "R-45"}', "cap", "R-45", "R-81")
    assert (g.correct, g.category, g.correct_fenced) == (False, "capped", False)


def test_regrade_rewrites_results_in_place_keeping_the_format(tmp_path):
    rows = [{"case_id": "c", "output": '{"answer": "Miami", "x": 1}', "reference": "Miami", "old_value": "Tunis",
             "correct": False}]
    for name in ("results.jsonl", "results.jsonl.gz"):
        d = tmp_path / name.replace(".", "_")
        d.mkdir()
        data = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode()
        (d / name).write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)
        assert regrade_results(d, records.regrade_row) == 1
        (row,) = read_rows(d)
        assert row["correct"] and not row["correct_fenced"] and row["value_category"] == "correct"
        assert regrade_results(d, records.regrade_row) == 0  # idempotent
        assert sorted(p.name for p in d.iterdir()) == [name]
    rewrite_rows(d, [row])
    assert gzip.decompress((d / "results.jsonl.gz").read_bytes()).decode() == json.dumps(row, sort_keys=True) + "\n"
