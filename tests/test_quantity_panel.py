"""The quantity tables of issue 36 items 6-7: failure diagnostics, the per-unit breakdown, the capped outputs
(paper L3509-3537, L4083, L4425-4457) and the cross-model panel, each on hand-built rows with hand-computed
answers (statistics input, not a model stand-in)."""

from __future__ import annotations

import pytest

from kvprobe.studies.datasets.quantity_task import strings
from kvprobe.studies.datasets.quantity_task.grading import grade_quantity, phrase_pattern
from kvprobe.studies.quantity import diagnostics, panel


def _row(group, unit, category, exact=False, equivalent=False, stop="eos", **extra):
    row = {"group_id": group, "relation": "replacement", "unit": unit, "category": category, "stop_reason": stop,
           "complete_exact": exact, "complete_equivalent": equivalent, "complete": category == "complete",
           "lenient_complete": category == "complete", "first_answer_correct": False, "recheck_phrase": False,
           "missing_referent_phrase": False, "second_different_answer": False}
    return {**row, **extra}


def _cells(rows, info="unit_from_a", condition="source"):
    return {(info, "current", condition): {r["group_id"]: r for r in rows}}


def test_unit_breakdown_by_hand():
    rows = [_row("g1", "hours", "complete", exact=False, equivalent=True),  # "6 h": only the equivalent rule
            _row("g2", "minutes", "complete", exact=True, equivalent=True),
            _row("g3", "minutes", "missing_unit"),
            _row("g4", "hours", "wrong_unit"),  # days for hours (L3517-3518)
            _row("g5", "hours", "capped", stop="cap"),
            _row("g6", "grams", "unknown"),
            {**_row("g7", "grams", "complete"), "relation": "confirmation"}]  # not a replacement: left out
    other = {("unit_from_a", "current", "full"): {"g1": _row("g1", "hours", "format_failure")}}  # another condition
    (entry,) = diagnostics.unit_breakdown({**_cells(rows), **other}).values()
    assert entry["n"] == 6 and entry["changed_equivalent_vs_exact"] == 1
    units = {u["unit"]: u for u in entry["units"]}
    assert [u["unit"] for u in entry["units"]] == ["minutes", "grams", "hours"]  # the paper's order
    assert units["hours"] == {"unit": "hours", "n": 3, "complete_exact": 0, "complete_equivalent": 1, "complete": 1,
                              "lenient_complete": 1, "missing_unit": 0, "generic_unit": 0, "wrong_unit": 1,
                              "capped": 1, "format_failure": 0, "other": 0}
    assert (units["minutes"]["complete_exact"], units["minutes"]["missing_unit"]) == (1, 1)
    assert units["grams"]["other"] == 1  # UNKNOWN
    for u in entry["units"]:  # the categories of rule 3 sum to n
        assert u["complete"] + sum(u[k] for k in (*diagnostics.UNIT_OUTCOMES, *diagnostics.UNIT_FAILURES, "other")) \
            == u["n"]
    assert diagnostics.unit_cells(units["hours"])[:4] == [3, "0.0 % (0)", "33.3 % (1)", "33.3 % (1)"]


def test_capped_outputs_by_hand():
    # Three replacements under the source mask, two capped: one begins with a correct first answer and says
    # "Wait"; both state a missing referent. Exact interval of 1/2: [1 - 0.975 ** (1/2)... ] = [0.0126, 0.9874].
    rows = [_row("g1", "hours", "capped", stop="cap", first_answer_correct=True, recheck_phrase=True,
                 missing_referent_phrase=True),
            _row("g2", "hours", "capped", stop="cap", missing_referent_phrase=True),
            _row("g3", "hours", "format_failure", first_answer_correct=True, recheck_phrase=True)]
    (e,) = diagnostics.capped_outputs(_cells(rows)).values()
    assert (e["n"], e["capped"], e["first_answer_correct"], e["recheck_phrase"], e["missing_referent_phrase"],
            e["second_different_answer"]) == (3, 2, 1, 1, 2, 0)
    lo, hi = e["first_answer_correct_ci"]
    assert lo == pytest.approx(1 - 0.975 ** 0.5, abs=1e-9) and hi == pytest.approx(0.975 ** 0.5, abs=1e-9)
    assert diagnostics.capped_cells(e) == [3, "66.7 % (2/3)", "1/2 = 50.0 % [0.01, 0.99]", "1/2", "2/2", "0/2"]
    stale = [{k: v for k, v in r.items() if k != "recheck_phrase"} for r in rows]  # graded before the flags
    assert diagnostics.capped_outputs(_cells(stale)) is None
    assert "Not in this run" in "\n".join(diagnostics.capped_lines(None))


def test_phrases_are_the_papers_whole_words_any_case():
    assert strings.RECHECK_PHRASES == ("Wait", "re-read", "misread")
    assert strings.MISSING_REFERENT_PHRASES == ("not specified", "does not mention", "missing")
    recheck = phrase_pattern(strings.RECHECK_PHRASES)
    assert recheck.search("wait, the unit") and recheck.search("I MISREAD it") and recheck.search("(re-read)")
    assert not recheck.search("Waiting for B") and not recheck.search("let me reread") and not recheck.search("awaits")
    assert phrase_pattern(("Wait",), case_sensitive=True).search("wait") is None
    g = grade_quantity('{"answer": "628"} The unit is Missing from B.', "cap", "628 minutes")
    assert (g.recheck_phrase, g.missing_referent_phrase, g.first_answer_correct) == (False, True, False)


def test_failure_diagnostics_rows_sum_to_n():
    cats = {c: 0 for c in diagnostics.CATEGORIES}
    cats.update(capped=3, format_failure=1, missing_unit=2)
    lines = diagnostics.failure_lines([{"condition": "source", "n": 6, "categories": cats}])
    head, row = lines[2], lines[4]
    assert head.startswith("| condition | n | token cap | format failure | UNKNOWN | complete | missing unit")
    assert row == "| source | 6 | 3 | 1 | 0 | 0 | 2 | 0 | 0 | 0 | 0 | 0 |"


def _summary(complete_full, complete_source, capped_source, margin):
    """A minimal summary: replacements' current query (n 4) and all groups' historical query (n 8)."""
    def cell(relation, query, cond, k, n, capped=0, **extra):
        cats = {c: 0 for c in diagnostics.CATEGORIES}
        cats.update(complete=k, capped=capped, format_failure=n - k - capped)
        return {"relation": relation, "information": "unit_from_a", "query": query, "condition": cond, "n": n,
                "complete": k, "lenient_complete": k, "categories": cats, **extra}

    m = {"mean": margin, "ci": [margin - 1, margin + 1]}
    cells = [cell("replacement", "current", "full", complete_full, 4, margin_change_vs_full={"mean": 0, "ci": [0, 0]}),
             cell("replacement", "current", "source", complete_source, 4, capped_source, margin_change_vs_control=m,
                  margin_change_vs_full=m),
             cell("all", "current", "source", 0, 8),  # pooled relations: not a current-query panel cell
             cell("all", "historical", "full", 8, 8)]
    return {"groups": 8, "cells": cells, "unit_breakdown": {}, "capped_outputs": None}


def test_model_entry_rates_margins_and_failures():
    e = panel.model_entry("m", _summary(4, 1, 2, 9.5))
    rates = {(r["query"], r["condition"]): r for r in e["rates"]}
    assert set(rates) == {("current", "full"), ("current", "source"), ("historical", "full")}
    assert (rates["current", "source"]["complete"], rates["current", "source"]["n"]) == (1, 4)
    assert rates["current", "source"]["capped"] == 2
    lo, hi = rates["historical", "full"]["complete_ci"]  # 8/8: [0.025 ** (1/8), 1]
    assert lo == pytest.approx(0.025 ** (1 / 8), abs=1e-9) and hi == 1.0
    assert [(m["condition"], m["against"], m["mean"]) for m in e["margins"]] == [("source", "control", 9.5)]
    assert [f["condition"] for f in e["failures"]] == ["full", "source"]


def test_panel_tables_put_models_side_by_side():
    entries = [panel.model_entry("a", _summary(4, 1, 2, 9.5)), panel.model_entry("b", _summary(3, 3, 0, 0.25))]
    text = panel.format_panel(entries, ["preservation.png"])
    assert "| B refers to A | current | source | 1/4 = 25.0 % [0.01, 0.81] | 3/4 = 75.0 % [0.19, 0.99] |" in text
    assert "| B refers to A | source | +9.50 [+8.50, +10.50] vs control | +0.25 [-0.75, +1.25] vs control |" in text
    assert "| source | a | 4 | 2 | 1 | 0 | 1 |" in text and "| source | b | 4 | 0 | 1 | 0 | 3 |" in text
    assert "| a | not in this run" in text and "![preservation.png](preservation.png)" in text


def test_preservation_figure_stacks_and_does_not_overlap(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.patches import Rectangle

    from kvprobe.studies.quantity import figure
    from test_figures import _overlaps

    kept = []
    monkeypatch.setattr(figure, "save_figure", lambda fig, path: (fig.canvas.draw(), kept.append(fig)))
    entries = [panel.model_entry("a", _summary(4, 1, 2, 9.5)), panel.model_entry("b", _summary(3, 3, 0, 0.25))]
    figure.plot_preservation(entries, tmp_path / "p.png")
    (fig,) = kept
    assert not _overlaps(fig)
    top = fig.axes[0]
    heights = sorted(round(p.get_height() / 0.9, 6) for p in top.patches if isinstance(p, Rectangle)
                     and p.get_x() == pytest.approx(2.05))  # model a, source, current query: 1 / 1 / 2 of 4
    assert heights == [0.25, 0.25, 0.5]
    texts = [t.get_text() for t in top.texts]
    assert "25%\n(1)" in texts and "100%\n(8)" in texts
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_deletion_panel_changes_from_masking_by_hand(tmp_path):
    """Paper L4526-4546: each operation against the whole-source mask, paired within groups, and the margin
    against the operation's own control when the run has one. Four replacements, unit from A:
        group      g1 g2 g3 g4
        source      1  0  1  0      compact vs masking: g2 gained, g3 lost -> 1/1, net 0
        compact     1  1  0  0      recompute vs masking: g1, g3 lost -> 0/2, net -2/4 = -50 pp
        recompute   0  0  0  0
    """
    import json

    from kvprobe.studies.quantity.summary import format_report, summarize

    table = {"full": [1, 1, 1, 1], "source": [1, 0, 1, 0], "source-control": [1, 1, 1, 1], "compact": [1, 1, 0, 0],
             "compact-control": [1, 1, 1, 1], "recompute": [0, 0, 0, 0]}
    rows = []
    for cond, values in table.items():
        for i, ok in enumerate(values):
            rows.append({**_row(f"g{i + 1}", "minutes", "complete" if ok else "missing_unit"),
                         "information": "unit_from_a", "query": "current", "condition": cond,
                         "case_id": f"g{i + 1}/unit_from_a", "complete_exact": bool(ok), "complete_equivalent": bool(ok),
                         "complete": bool(ok), "lenient_complete": bool(ok), "logp_right": -1.0, "margin": 0.0,
                         "margin_change_vs_full": 0.5,
                         "margin_change_vs_control": 2.0 if cond in ("source", "compact") else None})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    summary = summarize(tmp_path, draws=200)
    cells = {c["condition"]: c for c in summary["cells"] if c["relation"] == "replacement"}
    compact, recompute = cells["compact"]["complete_vs_source"], cells["recompute"]["complete_vs_source"]
    assert (compact["corrections"], compact["reversals"], compact["net"]) == (1, 1, 0.0)
    assert (recompute["corrections"], recompute["reversals"], recompute["net"]) == (0, 2, -0.5)
    assert recompute["net_ci"][0] <= -0.5 <= recompute["net_ci"][1]
    assert "complete_vs_source" not in cells["source"] and "complete_vs_source" not in cells["compact-control"]
    assert cells["recompute"]["categories"]["missing_unit"] == 4
    report = format_report(summary, {"model": {"name": "hand"}, "study": "quantity"})
    section = report[report.index("## Deleting instead of masking"):]
    assert "| compact | 2/4 | 2 | 2/4 | +2.00 [+2.00, +2.00] | +0.0 " in section   # own control
    assert "| recompute | 0/4 | 4 | 0/4 | +0.50 [+0.50, +0.50] (vs full) | -50.0 " in section
    assert "(0/2)" in section
