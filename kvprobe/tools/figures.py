"""Redraw every committed figure from its committed data (a summary, ``readouts.json``, ``map.json``, a
benchmark's JSON) without touching anything else::

    python -m kvprobe.tools.figures            # every figure under artifacts/
    python -m kvprobe.tools.figures --check    # draw into a temporary folder, list figures that differ

:func:`drawer` says how each committed PNG is drawn; ``tests/test_figures.py`` draws every one.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvprobe.studies.registry import STUDIES, Entry
from kvprobe.tools.bench import long, operations

#: The repository root: a calibration's ``action.json`` names its test run relative to it.
ROOT = Path(__file__).resolve().parents[2]


def _read(folder: Path, name: str) -> dict[str, Any]:
    return json.loads((folder / name).read_text())


def _run_model(folder: Path) -> str:
    return _read(folder, "config.json").get("model", {}).get("name", "?")


def _study_figure(entry: Entry) -> Callable[[Path, Path], Any]:
    """A run's figure as its study draws it (the registry's ``figure``), from the run's summary and model."""
    return lambda run, out: entry.figure_function()(_read(run, "summary.json"), out, _run_model(run))


def _calibration(name: str) -> Callable[[Path, Path], Any]:
    """``kvprobe calibrate``'s ``coverage-RULE-MASK.png`` from its folder's ``action.json``."""
    from kvprobe.studies.detection.figure import draw_calibration

    def draw(folder: Path, out: Path):
        rule, mask = name.removeprefix("coverage-").removesuffix(".png").rsplit("-", 1)
        action = _read(folder, "action.json")
        (cell,) = [c for c in action["cells"] if (c["rule"], c["mask"]) == (rule, mask)]
        return draw_calibration(cell, out, action.get("model") or _calibration_model(action))
    return draw


def _calibration_model(action: dict[str, Any]) -> str:
    """The model of a calibration (its test run's config)."""
    for key in ("test_dir", "test", "sources"):
        value = action.get(key)
        if isinstance(value, dict):
            value = value.get("test") or value.get("test_dir")
        if isinstance(value, str) and (ROOT / value / "config.json").is_file():
            return _run_model(ROOT / value)
    return "?"


def _cross_benchmark(folder: Path, out: Path):
    from kvprobe.studies.cross_benchmark import plot

    return plot(_read(folder, "cross-benchmark.json"), out)


def _recognition(folder: Path, out: Path):
    from kvprobe.readouts.report import plot_readouts

    return plot_readouts(_read(folder, "readouts.json"), out)


def _fact_map_example(folder: Path, out: Path):
    from kvprobe.studies.fact_map.figure import draw_map

    return draw_map(_read(folder, "map.json"), out)


def _panel_models(folder: Path) -> list[dict[str, Any]]:
    return json.loads((folder / "panel.json").read_text())["models"]


def _quantity_panel() -> dict[str, Callable[[Path, Path], Any]]:
    """The quantity cross-model panel's figures (``kvprobe report quantity RUN RUN --out DIR``), from panel.json."""
    from kvprobe.studies.quantity.figure import plot_margins, plot_preservation

    return {"preservation.png": lambda f, out: plot_preservation(_panel_models(f), out, rule="complete"),
            "preservation-lenient.png": lambda f, out: plot_preservation(_panel_models(f), out,
                                                                         rule="lenient_complete"),
            "margins.png": lambda f, out: plot_margins(_panel_models(f), out)}


#: The figure names of the quantity panel (their drawers are built, and the study imported, on first use).
_QUANTITY_PANEL_FIGURES = ("preservation.png", "preservation-lenient.png", "margins.png")


def drawer(png: Path) -> Callable[[Path, Path], Any]:
    """How the committed ``png`` is drawn: a function of (its folder, output path)."""
    folder, name = png.parent, png.name
    if (folder / "config.json").is_file():
        entry = STUDIES.get(_read(folder, "config.json").get("study"))
        if entry is not None and entry.figure is not None and name == entry.figure_file:
            return _study_figure(entry)
    if name.startswith("coverage-") and (folder / "action.json").is_file():
        return _calibration(name)
    if name == "figure.png" and (folder / "cross-benchmark.json").is_file():
        return _cross_benchmark
    if name == "figure.png" and (folder / "readouts.json").is_file():
        return _recognition
    if name in _QUANTITY_PANEL_FIGURES and (folder / "panel.json").is_file():
        return _quantity_panel()[name]
    if name == "map.png" and (folder / "map.json").is_file():
        return _fact_map_example
    if name == "long.png":
        return lambda f, out: long.plot_long(json.loads((f / "long.json").read_text()), out)
    if name == "operations.png":
        return lambda f, out: operations.plot(json.loads((f / "operations.json").read_text()), out)
    raise LookupError(f"{png}: no known way to draw it from committed data")


def committed(root: Path) -> list[Path]:
    """Every committed PNG under ``root/artifacts`` (git's list; the folder's files without git)."""
    import subprocess

    try:
        out = subprocess.run(["git", "ls-files", "artifacts/*.png", "artifacts/**/*.png"], cwd=root,
                             capture_output=True, text=True, check=True).stdout.split()
        if out:
            return sorted(root / p for p in out)
    except (OSError, subprocess.CalledProcessError):
        pass
    return sorted((root / "artifacts").glob("**/*.png"))


def redraw(png: Path, out: Path | None = None) -> Path:
    """Draw ``png`` again from its committed data, to ``out`` (default: in place)."""
    out = Path(out) if out is not None else png
    drawer(png)(png.parent, out)
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=str(ROOT))
    p.add_argument("--check", action="store_true", help="draw into a temporary folder; list figures that differ")
    args = p.parse_args(argv)
    root = Path(args.root)
    differ = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, png in enumerate(committed(root)):
            target = Path(tmp) / f"{i}.png" if args.check else png
            redraw(png, target)
            if args.check and target.read_bytes() != png.read_bytes():
                differ.append(png)
            print(("differs " if png in differ else "drawn   ") + str(png.relative_to(root)))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
