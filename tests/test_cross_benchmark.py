"""``kvprobe report cross-benchmark``: current and historical answers under whole-source masking across the
committed MINTEval, MQuAKE and BABILong runs (seed L1444-1453), checked against values read by hand from
the committed summaries; the committed table and data are what the committed summaries give."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies import cross_benchmark
from kvprobe.studies.commands import CROSS_BENCHMARK_RUNS

ROOT = Path(__file__).resolve().parents[1]
RUNS = [ROOT / r for r in CROSS_BENCHMARK_RUNS]
OUT = ROOT / "artifacts" / "cross-benchmark"


@pytest.fixture(scope="module")
def found():
    return cross_benchmark.rows(RUNS)


def _row(found, benchmark, question, metric, label=""):
    (r,) = [r for r in found if (r["benchmark"], r["question"], r["metric"], r["label"])
            == (benchmark, question, metric, label)]
    return r


# Hand-read from the committed summary.json files (cells full / source-mask / naive and their paired changes).
HAND = [
    # benchmark, question, metric, label, full k/n, masked k/n, change in counts, its interval in counts
    ("MINTEval", "current", "em", "", (0, 80), (0, 80), None, None),
    ("MINTEval", "historical", "em", "", (0, 80), (0, 80), None, None),
    ("MQuAKE", "current", "em", "", (0, 180), (0, 180), 0, (0, 0)),
    ("MQuAKE", "current", "contains", "", (73, 180), (94, 180), 21, (8, 35)),
    ("MQuAKE", "historical", "contains", "", (9, 60), (4, 60), -5, (-10, 0)),
    ("BABILong", "current", "official", "qa2, 0 tokens", (12, 50), (15, 50), 3, (-1, 7)),
    ("BABILong", "historical", "official", "qa3, 0 tokens", (15, 50), (8, 50), -7, (-13, -2)),
    ("BABILong", "historical", "official", "qa3, 1000 tokens", (13, 50), (6, 50), -7, (-14, 0)),
    ("BABILong", "historical", "official", "qa3, 7500 tokens", (5, 64), (1, 64), -4, (-8, -1)),
]


@pytest.mark.parametrize("name,question,metric,label,full,masked,change,ci", HAND,
                         ids=[f"{h[0]}-{h[1]}-{h[2]}-{h[3]}" for h in HAND])
def test_rows_match_the_hand_read_summaries(found, name, question, metric, label, full, masked, change, ci):
    r = _row(found, name, question, metric, label)
    assert (r["full"]["k"], r["full"]["n"]) == full and (r["masked"]["k"], r["masked"]["n"]) == masked
    assert r["n"] == full[1]
    assert r["full"]["pct"] == pytest.approx(100 * full[0] / full[1])
    assert r["masked"]["ci"][0] <= r["masked"]["pct"] <= r["masked"]["ci"][1]
    if change is not None:  # counts -> percentage points of n
        assert r["change_pp"] == pytest.approx(100 * change / full[1])
        assert r["change_ci"] == pytest.approx([100 * c / full[1] for c in ci])
    assert (r["chance_pct"] is not None) == (name == "BABILong")


def test_minteval_change_is_the_component_interval(found):
    assert _row(found, "MINTEval", "current", "em")["interval_unit"] == "shared-source components"
    assert _row(found, "MINTEval", "current", "em")["change_ci"] == [0.0, 0.0]


def test_clopper_pearson_interval_hand_checked(found):
    # 0/80: the exact upper bound is 1 - 0.025 ** (1/80) = 4.51%
    r = _row(found, "MINTEval", "current", "em")
    assert r["full"]["ci"] == pytest.approx([0.0, 100 * (1 - 0.025 ** (1 / 80))])


def test_blocks_are_current_then_historical_and_cover_every_run(found):
    assert [r["question"] for r in found] == sorted((r["question"] for r in found), key=cross_benchmark.QUESTIONS.index)
    assert {r["run"] for r in found} == {p.as_posix() for p in RUNS}
    assert len(found) == 12


def test_table_quotes_the_paper_with_line_numbers(found):
    text = "\n".join(cross_benchmark.table(found))
    assert "| current | MQuAKE | smollm2-135m-instruct | all | contains | 180 | 40.6 [33.3, 48.1] (73/180) | " \
           "52.2 [44.7, 59.7] (94/180) | +11.7 [+4.4, +19.4] (cases) |  |" in text
    for quoted in ("33 -> 16", "36 -> 43", "+9.72 pp", "12.86", "88.2 -> 74.0%", "(table, L436)", "L1495-1497"):
        assert quoted in text


def test_committed_report_and_data_are_what_the_committed_summaries_give(found):
    data = json.loads((OUT / "cross-benchmark.json").read_text())
    relative = [{**r, "run": Path(r["run"]).relative_to(ROOT).as_posix()} for r in found]
    assert data["rows"] == relative
    assert (OUT / "report.md").read_text() == cross_benchmark.report(data["rows"])


def test_rejects_another_study(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"study": "quantity"}))
    with pytest.raises(ValueError, match="not one of"):
        cross_benchmark.rows([tmp_path])


def test_figure_shows_counts_n_and_the_chance_line(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from kvprobe.studies.common import figures

    kept = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, dpi=110: (fig.canvas.draw(), kept.append(fig)))
    data = json.loads((OUT / "cross-benchmark.json").read_text())
    cross_benchmark.plot(data, tmp_path / "f.png")
    (fig,) = kept
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    labels = [t.get_text() for ax in fig.axes for t in ax.get_yticklabels()]
    assert "94/180" in texts and "1/64" in texts
    assert any("n = 64" in label for label in labels)
    babilong = sum(r["benchmark"] == "BABILong" for r in data["rows"])
    dashed = [line for ax in fig.axes for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(dashed) == babilong
    # chance: the majority answer's share of the row's task and length (the scorecard's and the BABILong report's)
    chance = sorted(r["chance_pct"] for r in data["rows"] if r["benchmark"] == "BABILong")
    assert sorted(line.get_xdata()[0] for line in dashed) == pytest.approx(chance)
    assert pytest.approx(100 * 14 / 64) in chance and pytest.approx(100 * 12 / 50) in chance
    from test_figures import _overlaps

    assert not _overlaps(fig)
    plt.close(fig)


@pytest.mark.parametrize("key", [k for k in cross_benchmark.PAPER if k[0] in ("MQuAKE", "BABILong")])
def test_paper_column_is_the_difference_of_the_quoted_numbers(key):
    """MQuAKE and BABILong: the column's changes are mask minus full of the quoted pairs, model by model."""
    import re

    pairs = re.findall(r"(\d+(?:\.\d+)?) -> (\d+(?:\.\d+)?)", cross_benchmark.PAPER[key])
    assert len(pairs) == len(cross_benchmark.PAPER_MODELS)
    column = re.findall(r"[+-]\d+(?:\.\d+)?", cross_benchmark.PAPER_CHANGE[key].split("(")[0])
    assert [float(c) for c in column] == pytest.approx([float(b) - float(a) for a, b in pairs])


def test_paper_column_only_on_the_paper_metric(found):
    lines = cross_benchmark.table(found)
    contains = [line for line in lines if "| contains |" in line]
    assert contains and all(line.endswith("|  |") for line in contains)
    assert sum("(L436)" in line for line in lines if line.startswith("| ")) == 2
