"""Every committed figure is what its committed summary draws, and the figures carry what a reader needs.

Each PNG under ``artifacts/`` is drawn again from its committed data (``summary.json``, ``action.json``,
``readouts.json``, ``map.json``, the benchmark JSON) by its study's ``figure.py`` (found by
:mod:`kvprobe.tools.figures`) into a temporary folder (matplotlib Agg) and must be byte-identical to the
committed file: a figure whose code or summary changed without a redraw fails (redraw with ``python -m kvprobe.tools.figures``).
The content rules of issue 31 are checked on the drawn matplotlib figures: baselines and n in the panel
notes, a chance line where one exists, one scale per figure, no overlapping text.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies.babilong import figure as babilong_figure
from kvprobe.studies.fact_map import figure as fact_map_figure
from kvprobe.studies.minteval import figure as minteval_figure
from kvprobe.studies.note_controls import figure as note_controls_figure
from kvprobe.tools import figures

ROOT = Path(__file__).resolve().parents[1]
FIGURES = figures.committed(ROOT)


def test_every_committed_figure_has_a_drawer():
    assert len(FIGURES) >= 30
    for png in FIGURES:
        figures.drawer(png)  # raises LookupError for a figure nothing draws


@pytest.mark.parametrize("png", FIGURES, ids=[str(p.relative_to(ROOT / "artifacts")) for p in FIGURES])
def test_committed_figure_is_what_its_summary_draws(png, tmp_path):
    out = figures.redraw(png, tmp_path / png.name)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert out.read_bytes() == png.read_bytes(), (
        f"{png.relative_to(ROOT)} is not what its committed data draws; redraw it with "
        "`python -m kvprobe.tools.figures`")


# ------------------------------------------------------------------------------------ content rules


@pytest.fixture
def captured(monkeypatch):
    """The matplotlib figures drawn during a test, kept open for inspection."""
    import matplotlib

    matplotlib.use("Agg")
    from kvprobe.studies.common import figures

    kept = []

    def keep(fig, path, dpi=110):
        fig.canvas.draw()
        kept.append(fig)
        return Path(path)

    monkeypatch.setattr(figures, "save_figure", keep)
    from kvprobe.studies.quantity import figure as quantity_figure

    monkeypatch.setattr(quantity_figure, "save_figure", keep)
    yield kept
    import matplotlib.pyplot as plt

    for fig in kept:
        plt.close(fig)


def _texts(fig) -> list:
    """Every visible, non-empty text artist of a drawn figure (titles, labels, tick labels, cell text)."""
    from matplotlib.text import Text

    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def _overlaps(fig) -> list[tuple[str, str]]:
    """Pairs of text boxes that overlap (tick labels of one axis are distinct boxes; a text inside an axes
    cell is not compared with the axes' own titles and labels)."""
    renderer = fig.canvas.get_renderer()
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in _texts(fig)]
    out = []
    for i, (a, ba) in enumerate(boxes):
        for b, bb in boxes[i + 1:]:
            if ba.overlaps(bb) and ba.intersection(ba, bb).width > 1 and ba.intersection(ba, bb).height > 1:
                out.append((a, b))
    return out


def _summary(run: str) -> tuple[dict, str]:
    d = ROOT / "artifacts" / run
    return json.loads((d / "summary.json").read_text()), json.loads((d / "config.json").read_text())["model"]["name"]


def test_minteval_shows_its_baseline_and_n(captured, tmp_path):
    """The +1.5 pp that looked significant rests on 1/400 exact answers under full access: the panel says so."""
    summary, model = _summary("minteval/smollm2-135m-instruct")
    minteval_figure.draw(summary, tmp_path / "f.png", model)
    (fig,) = captured
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    full = next(c for c in summary["cells"] if c["scope"] == "all" and c["policy"] == "full")
    source = next(c for c in summary["cells"] if c["scope"] == "all" and c["policy"] == "source")
    assert any(f"full access {full['em']}/{full['n']}" in t and f"n = {full['n']}" in t for t in titles), titles
    assert f"{source['em']}/{source['n']}" in [t.get_text() for t in _texts(fig)]
    assert not _overlaps(fig)


def test_babilong_draws_the_chance_line_where_full_access_sits_below_it(captured, tmp_path):
    summary, model = _summary("babilong/smollm2-135m-instruct-8k")
    babilong_figure.draw(summary, tmp_path / "f.png", model)
    (fig,) = captured
    qa3 = next(ax for ax in fig.axes if ax.get_title().startswith("qa3"))
    full = next(c for c in summary["cells"] if c["task"] == "qa3" and c["policy"] == "full")
    chance = full["majority"] - full["official"]  # the majority answer, the study's chance level
    dashed = [line for line in qa3.get_lines() if line.get_linestyle() == "--"]
    assert [line.get_xdata()[0] for line in dashed] == [pytest.approx(chance)]
    assert chance > 0  # full access (5/64) answers fewer than always giving the most common location (14/64)
    assert f"full access {full['official']}/{full['n']}" in qa3.get_title()
    assert not _overlaps(fig)


def test_note_controls_title_clears_the_panels(captured, tmp_path):
    summary, model = _summary("note-controls/smollm2-135m-instruct")
    note_controls_figure.draw(summary, tmp_path / "f.png", model)
    (fig,) = captured
    renderer = fig.canvas.get_renderer()
    title = fig._suptitle.get_window_extent(renderer)
    for ax in fig.axes:
        if ax.get_visible() and ax.get_title():
            assert not title.overlaps(ax.title.get_window_extent(renderer)), ax.get_title()
            assert title.y0 >= ax.get_window_extent(renderer).y1 - 1
    assert not _overlaps(fig)


@pytest.mark.parametrize("run", ["fact-map/smollm2-135m-instruct-quantity", "fact-map/smollm2-135m-instruct-records",
                                 "fact-map/qwen2.5-coder-0.5b-instruct-quantity"])
def test_fact_map_panels_share_one_colour_scale_and_readable_cells(captured, tmp_path, run):
    from matplotlib.image import AxesImage

    summary, model = _summary(run)
    fact_map_figure.draw(summary, tmp_path / "f.png", model)
    (fig,) = captured
    images = fig.findobj(AxesImage)
    assert len(images) == 1 + len(summary["by_variant"])
    assert len({(im.norm.vmin, im.norm.vmax) for im in images}) == 1
    assert sum(1 for ax in fig.axes if ax.get_label() == "<colorbar>") == 1
    for im in images:
        for t in im.axes.texts:
            value = float(t.get_text())
            r, g, b, _ = im.cmap(im.norm(value))
            luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
            assert (t.get_color() == "white") == (luminance <= 0.45), (t.get_text(), t.get_color())
    # a panel whose recompute effect interval includes 0 shows no ratios
    for name, stats in {f"{summary['dataset']}, all": summary["all"], **summary["by_variant"]}.items():
        ax = next(a for a in fig.axes if a.get_title().startswith(name + "\n"))
        assert bool(ax.texts) == bool(stats["target_effect_excludes_zero"]), name
    assert not _overlaps(fig)


def test_quantity_margins_are_against_the_matched_control(captured, tmp_path):
    """The paper's comparison: the source mask against its matched control, not against full access."""
    summary, model = _summary("quantity/smollm2-135m-instruct")
    from kvprobe.studies.quantity.figure import plot_summary

    plot_summary(summary, tmp_path / "f.png", model=model)
    (fig,) = captured
    right = [ax for ax in fig.axes if "margin change" in ax.get_xlabel()]
    assert right
    for ax in right:
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert "source vs control" in labels and "number vs control" in labels
        info = "unit_from_a" if ax is right[0] else "unit_stated"
        cell = next(c for c in summary["cells"] if (c["relation"], c["information"], c["query"], c["condition"])
                    == ("replacement", info, "current", "source"))
        y = len(labels) - 1 - labels.index("source vs control")
        points = [line.get_xdata()[0] for line in ax.get_lines() if len(line.get_xdata()) == 1
                  and line.get_ydata()[0] == y]
        assert cell["margin_change_vs_control"]["mean"] in points
    assert not _overlaps(fig)
