"""One verdict rule in the tree: a study's report judges the claims of its own ``claims.py``
(``studies.common.claims.judge`` / ``verdict_text`` on a measurement its claims module builds from the summary),
never the rule itself; claims only a report judges (a module's ``REPORT_CLAIMS``) quote the paper as the
scorecard's do; and :func:`kvprobe.studies.common.summary.run_claims` gives the scorecard's rows of one run
folder.

No model is loaded; the runs read are the committed ones.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from kvprobe.studies.common.claims import claims_module, evaluate_run, is_run
from kvprobe.studies.common.summary import run_claims
from kvprobe.studies.factorial.claims import CLAIMS as FACTORIAL_CLAIMS
from kvprobe.studies.registry import study_anchors
from paper_text import PAPER, _plain

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"
#: The rule's functions in ``studies.common.report``: only the claims layer (``studies.common.claims``) and the
#: scorecard (which cites the rule by name) call them.
RULE = {"claim_verdict", "above_chance"}
ALLOWED = {"studies/common/claims.py", "studies/scorecard.py"}


def _rule_users() -> set[str]:
    found = set()
    for path in sorted((ROOT / "studies").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("studies/common/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("studies.common.report") \
                    and RULE & {a.name for a in node.names}:
                found.add(rel)
    return found - ALLOWED


def test_no_report_applies_the_verdict_rule_itself():
    found = _rule_users()
    assert not found, f"judge a claim of claims.py instead (studies.common.claims.verdict_text): {sorted(found)}"


def test_run_claims_are_the_scorecards_rows_of_the_run():
    rows = json.loads((ROOT / "docs" / "scorecard.json").read_text())["rows"]
    run = "factorial/smollm2-135m-instruct"
    got = run_claims("factorial", ARTIFACTS / run)
    want = [r for r in rows if r["run"] == run]
    assert [(r.claim.key, r.test.rule, r.verdict) for r in got] == [(r["claim"], r["rule"], r["verdict"])
                                                                     for r in want]
    assert [r.index for r in got] == list(range(1, len(got) + 1)) and got


def test_run_claims_of_a_folder_no_test_reads_are_none(tmp_path):
    copy = tmp_path / "factorial" / "another-name"
    copy.mkdir(parents=True)
    shutil.copy(ARTIFACTS / "factorial" / "smollm2-135m-instruct" / "summary.json", copy / "summary.json")
    assert run_claims("factorial", copy) == []
    same = tmp_path / "factorial" / "smollm2-135m-instruct"  # the run's name under any artifacts folder
    shutil.copytree(ARTIFACTS / "factorial" / "smollm2-135m-instruct", same)
    assert [r.verdict for r in evaluate_run(same, FACTORIAL_CLAIMS)] == \
        [r.verdict for r in run_claims("factorial", ARTIFACTS / "factorial" / "smollm2-135m-instruct")]


@pytest.mark.parametrize("folder, expected", [("artifacts/quantity/smollm2-135m-instruct", True),
                                              ("quantity/smollm2-135m-instruct", True),
                                              ("artifacts/quantity/smollm2-135m-instruct-dev", False),
                                              ("artifacts/other/smollm2-135m-instruct", False)])
def test_a_test_reads_the_folder_its_run_names(folder, expected):
    test = FACTORIAL_CLAIMS[0].tests[0]
    test = type(test)("quantity/smollm2-135m-instruct", test.rule, test.measure)
    assert is_run(test, ROOT / folder) is expected


def _report_claims() -> list:
    """Every claims module's ``REPORT_CLAIMS`` (claims only its study's reports judge)."""
    modules = dict.fromkeys(claims_module(a) for a in study_anchors().values())
    return [c for m in modules if importlib.util.find_spec(m)
            for c in getattr(importlib.import_module(m), "REPORT_CLAIMS", ())]


REPORT_CLAIMS = _report_claims()


def test_report_claims_are_keyed_by_their_study_and_read_no_run():
    from kvprobe.studies import scorecard

    keys = [c.key for c in REPORT_CLAIMS]
    assert REPORT_CLAIMS and len(set(keys)) == len(keys)
    assert not set(keys) & {c.key for c in scorecard.claims()}
    assert all(c.key.startswith(c.study + ".") and not c.tests for c in REPORT_CLAIMS)


@pytest.mark.parametrize("claim", REPORT_CLAIMS, ids=lambda c: c.key)
def test_a_report_claim_quotes_the_paper_at_its_lines_and_section(claim):
    """As the scorecard's claims (tests/test_scorecard.py): the quote verbatim at its lines, under its section,
    every number of ``numbers`` on its lines."""
    if not PAPER.exists():
        pytest.skip(f"the paper's source is not on this machine ({PAPER})")
    raw = PAPER.read_text().split("\n")
    lines = [_plain(line, latex=True).replace(" %", "%") for line in raw]
    first, last = claim.paper.lines
    quote = _plain(claim.paper.quote, latex=False).replace(" %", "%")
    assert quote in " ".join(lines[first - 1:last]) and quote not in " ".join(lines[first:last])
    section = re.compile(r"\\(?:sub){0,2}section\*?\{(.*)\}")
    heads = [m.group(1) for line in raw[:first] if (m := section.match(line.strip()))]
    assert heads[-1] == claim.paper.section
    first, last = claim.paper.numbers_lines or claim.paper.lines
    text = " ".join(lines[first - 1:last])
    for number in re.findall(r"\d+(?:\.\d+)?", claim.paper.numbers):
        assert re.search(rf"(?<![\d.]){re.escape(number)}(?!\d)", text), f"{number} not in L{first}-{last}"


def test_the_mquake_and_note_controls_tables_name_their_claims():
    """Every verdict row of the MQuAKE and note-controls summaries names a claim of its study's ``claims.py``
    (``CLAIMS`` or ``REPORT_CLAIMS``), so a row a run lacks cannot hide a misspelled key."""
    from kvprobe.studies.mquake import summary as mquake
    from kvprobe.studies.note_controls import summary as notes

    assert {key for *_, key, _ in mquake.CLAIMS} | {key for key, _ in mquake.DIRECT_CLAIMS.values()} \
        | {"mquake.retained-loss", "mquake.strata", "mquake.current-value", "mquake.routing"} <= set(mquake._CLAIMS)
    assert {e[3] for e in notes.EFFECTS} | {notes.MARGIN_CLAIM} <= set(notes._CLAIMS)
