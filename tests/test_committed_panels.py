"""Committed cross-run panels and readout reports are what their committed inputs recompute to.

``tests/test_committed_summaries.py`` recomputes every run's ``summary.json`` and ``report.md``; the
files here are written from several runs or from a readout evaluation, and READMEs quote them:

* ``artifacts/matched-scores/panel/`` (``kvprobe report matched-scores RUN RUN --out DIR``) and
  ``artifacts/oaks/panel/`` (``kvprobe report source-influence RUN ... --out DIR`` over the OAKS runs):
  rewritten from the runs their ``panel.json`` names, at its seed, byte for byte. (The source-influence
  panel has its own test in ``tests/test_source_influence.py``.)
* ``artifacts/recognition/*/*/report.md``: rewritten from the committed ``readouts.json`` (or
  ``edits.json``) and ``scores.json`` (:func:`kvprobe.readouts.report.rewrite_group_report`), byte for byte;
  and, independently of the evaluation code, every test-split AUC of the SmolLM2 records report is
  recounted from the per-case scores by hand (pairs counted, ties half) and the within-item role-swap
  counts likewise.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "artifacts"


def _runs(meta: dict, key: str) -> list[Path]:
    return [ROOT / r for r in dict.fromkeys(x["run"] for x in meta[key])]


def test_matched_scores_panel_recomputes(tmp_path):
    from kvprobe.studies.matched_scores.summary import write_panel

    committed = ARTIFACTS / "matched-scores" / "panel"
    meta = json.loads((committed / "panel.json").read_text())
    write_panel(_runs(meta, "runs"), tmp_path, seed=meta["seed"])
    assert (tmp_path / "panel.md").read_text() == (committed / "panel.md").read_text()


def test_oaks_panel_recomputes(tmp_path):
    from kvprobe.studies.source_influence.summary import write_panel

    committed = ARTIFACTS / "oaks" / "panel"
    meta = json.loads((committed / "panel.json").read_text())
    write_panel(_runs(meta, "rows"), tmp_path, seed=meta["seed"])
    assert (tmp_path / "panel.md").read_text() == (committed / "panel.md").read_text()


RECOGNITION = sorted(p.parent for p in ARTIFACTS.glob("recognition/*/*/report.md"))


@pytest.mark.parametrize("folder", RECOGNITION, ids=[str(p.relative_to(ARTIFACTS)) for p in RECOGNITION])
def test_recognition_report_rewrites_from_its_committed_inputs(folder, tmp_path):
    from kvprobe.readouts.report import rewrite_group_report

    copy = tmp_path / folder.name
    shutil.copytree(folder, copy, ignore=shutil.ignore_patterns("report.md", "*.png"))
    rewrite_group_report(copy)
    assert (copy / "report.md").read_text() == (folder / "report.md").read_text(), \
        f"{folder.relative_to(ROOT)}/report.md is not what its readouts.json/edits.json write (kvprobe.readouts.report.rewrite_group_report)"


# ---------------------------------------------------------------- hand recounts of the SmolLM2 records report

RECORDS = ARTIFACTS / "recognition" / "smollm2-135m-instruct" / "records"
POSITIVE = {"replacement", "role_swap", "explicit_rejection"}


def _auc(pos: list[float], neg: list[float]) -> float:
    """P(positive scores above negative), ties half: every pair counted."""
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg) / (len(pos) * len(neg))


def _test_cases():
    s = json.loads((RECORDS / "scores.json").read_text())
    variants = [re.sub(r"^.*-\d+-", "", c) for c in s["case_id"]]
    keep = [i for i, sp in enumerate(s["split"]) if sp == "test"]
    return s, variants, keep


def _report_aucs(section: str) -> dict[str, str]:
    """readout -> AUC cell of the first table under the heading starting with ``section``."""
    text = (RECORDS / "report.md").read_text()
    body = text[text.index("\n## " + section):]
    body = body[:body.index("\n## ", 4)] if "\n## " in body[4:] else body
    rows = [line.split("|")[1:3] for line in body.splitlines() if line.startswith("| ") and "AUC" not in line]
    return {name.strip(): auc.strip() for name, auc in rows if re.fullmatch(r"\d\.\d{3}", auc.strip())}


@pytest.mark.parametrize("section,negatives_of", [
    ("Primary", lambda v: v == "role_confirmation"),
    ("Secondary", lambda v: v not in POSITIVE),
])
def test_records_aucs_recount_from_the_case_scores(section, negatives_of):
    s, variants, keep = _test_cases()
    positive_of = (lambda v: v == "role_swap") if section == "Primary" else (lambda v: v in POSITIVE)
    quoted = _report_aucs(section)
    readouts = json.loads((RECORDS / "readouts.json").read_text())
    stored = readouts["role_auc" if section == "Primary" else "all_test_auc"]["auc"]
    assert len(quoted) >= 10, quoted
    n_pos = sum(positive_of(variants[i]) for i in keep)
    assert n_pos == (50 if section == "Primary" else 150)
    for name, values in s["scores"].items():
        pos = [values[i] for i in keep if positive_of(variants[i])]
        neg = [values[i] for i in keep if negatives_of(variants[i])]
        auc = _auc(pos, neg)
        assert stored[name]["auc"] == pytest.approx(auc, abs=1e-12), name
        if name in quoted:
            assert quoted[name] == f"{auc:.3f}", (section, name)


def test_within_item_role_swap_counts_recount_from_the_case_scores():
    """How often a readout scores an item's role swap above that item's own role confirmation, counted by hand;
    the report's within-item table (when it has one) says the same."""
    s, variants, keep = _test_cases()
    item = {i: re.sub(r"-(role_swap|role_confirmation)$", "", s["case_id"][i]) for i in keep}
    swaps = {item[i]: i for i in keep if variants[i] == "role_swap"}
    confirmations = {item[i]: i for i in keep if variants[i] == "role_confirmation"}
    assert set(swaps) == set(confirmations) and len(swaps) == 50
    text = (RECORDS / "report.md").read_text()
    counts = {}
    for name, values in s["scores"].items():
        counts[name] = sum(values[swaps[k]] > values[confirmations[k]] for k in swaps)
        row = re.search(rf"^\| {re.escape(name)} \| (\d+) of (\d+) \|", text, re.M)
        if row:
            assert (int(row.group(1)), int(row.group(2))) == (counts[name], 50), name
    # the oracle-informed signed LOO ranks every swap above its confirmation; the fixed d_V does not
    assert counts["signed LOO (oracle reference)"] == 50
    assert 0 < counts["fixed d_V"] < 50
