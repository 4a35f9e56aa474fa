"""Learned and fixed readouts as detectors: per-case scores from a ``kvprobe readout`` run.

``kvprobe readout`` writes ``scores.json`` beside each records group's report: for
every development and test case, the score of every readout (fixed d_V, the
dev-selected sign and head, surface baselines, the K/V and hidden-state probes;
larger = more likely a replacement). A detection analysis ranks cases by them
exactly as by a text detector's decision or the YES/NO score.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

#: Readouts used when none are named: the fixed distance and the paper's three probes.
DEFAULT_READOUTS = ("fixed d_V", "separate K/V probe", "joint K/V probe", "joint hidden probe")


def load_readout_scores(path: str | Path, names: Sequence[str] | None = None, split: str = "test"
                        ) -> dict[str, dict[str, float]]:
    """``{readout: {case_id: score}}`` of the cases of ``split`` in a ``scores.json``."""
    path = Path(path)
    if path.is_dir():
        path = path / "scores.json"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no readout scores (run `kvprobe readout` on a records group first)")
    data = json.loads(path.read_text())
    wanted = list(names) if names else [n for n in DEFAULT_READOUTS if n in data["scores"]]
    unknown = [n for n in wanted if n not in data["scores"]]
    if unknown:
        raise ValueError(f"{path}: no readout {unknown[0]!r}; available: {', '.join(sorted(data['scores']))}")
    keep = [i for i, s in enumerate(data["split"]) if s == split]
    return {name: {data["case_id"][i]: data["scores"][name][i] for i in keep} for name in wanted}
