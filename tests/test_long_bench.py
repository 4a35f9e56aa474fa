"""``kvprobe bench long`` (kvprobe vs plain transformers on long histories) on the tiny Llama.

Small histories (240 and 369 tokens, 64-token chunks so every prefill runs several
chunks), one warm-up, one repeat, two decode steps, 1 and 3 rows: every cell is
written, every agreement check holds, a rerun reuses every cell, other settings are
refused by name, and bad command-line input fails before any model loads.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvprobe
from kvprobe.tools.bench import long as long_bench
from kvprobe.tools.bench.long import SettingsMismatch, run_long_bench

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
SETTINGS = dict(lengths=(256, 384), rows=(1, 3), warmups=1, repeats=1, decode_steps=2, chunk_size=64)

pytestmark = pytest.mark.skipif(not (DATA / "pg19").is_dir(), reason="needs ../shared/data/pg19")


@pytest.fixture(scope="module")
def model(one_thread):
    return kvprobe.load_model("tiny-llama")


@pytest.fixture(scope="module")
def first_run(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("long")
    return out, run_long_bench(model, out, DATA, progress=False, **SETTINGS)


def test_every_cell_written_and_every_check_holds(first_run):
    out, result = first_run
    for name in ("long.json", "long.md", "long.png"):
        assert (out / name).stat().st_size > 0
    saved = json.loads((out / "long.json").read_text())
    names = ["prefill", "decode-1", "decode-3", "mask", "rebuild", "recompute", "recompute-prefix"]
    assert sorted(saved["cells"], key=int) == ["256", "384"]
    for cell in saved["cells"].values():
        assert list(cell["measures"]) == names
        assert cell["history_unchanged"]
        for name, entry in cell["measures"].items():
            assert entry["check"]["passed"], (name, entry["check"])
            assert entry["kvprobe"]["median_ms"] > 0 and entry["plain"]["median_ms"] > 0
            assert entry["speedup"] == pytest.approx(entry["plain"]["median_ms"] / entry["kvprobe"]["median_ms"])
        assert cell["measures"]["decode-3"]["memory"]["per_row_copies_bytes"] > \
            cell["measures"]["decode-1"]["memory"]["per_row_copies_bytes"]
    assert len(result["runs"][-1]["ran"]) == 14 and result["runs"][-1]["reused"] == []
    assert saved["settings"]["repeats"] == 1 and saved["machine"]["torch"]
    assert [g["met"] for g in saved["goals"]][2:] == [None, None]  # no 8192-token, 15-row cells here
    md = (out / "long.md").read_text()
    assert "| 256 | " in md and "| 384 | " in md and "Agreement checks (kvprobe vs plain): all passed." in md


def test_rerun_reuses_every_cell(first_run, model, capsys):
    out, _ = first_run
    before = (out / "long.json").read_text()
    again = run_long_bench(model, out, DATA, **SETTINGS)
    assert again["runs"][-1]["ran"] == [] and len(again["runs"][-1]["reused"]) == 14
    assert "reusing 14 finished cells" in capsys.readouterr().out
    old, new = json.loads(before)["cells"], json.loads((out / "long.json").read_text())["cells"]
    assert new == old


def test_an_interrupted_run_resumes_with_the_missing_cells(model, tmp_path, monkeypatch):
    measure = long_bench.measure_operation

    def interrupted(model, history, name, *args, **kwargs):
        if name == "recompute":
            raise KeyboardInterrupt
        return measure(model, history, name, *args, **kwargs)

    settings = {**SETTINGS, "lengths": (256,)}
    monkeypatch.setattr(long_bench, "measure_operation", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_long_bench(model, tmp_path, DATA, progress=False, **settings)
    saved = json.loads((tmp_path / "long.json").read_text())
    assert list(saved["cells"]["256"]["measures"]) == ["prefill", "decode-1", "decode-3", "mask", "rebuild"]
    monkeypatch.setattr(long_bench, "measure_operation", measure)
    result = run_long_bench(model, tmp_path, DATA, progress=False, **settings)
    assert result["runs"][-1]["ran"] == ["256/recompute", "256/recompute-prefix"]
    assert len(result["runs"][-1]["reused"]) == 5 and len(result["runs"]) == 2


def test_other_settings_are_refused_by_name(first_run, model):
    out, _ = first_run
    with pytest.raises(SettingsMismatch, match="repeats=1.*repeats=2"):
        run_long_bench(model, out, DATA, progress=False, **{**SETTINGS, "repeats": 2})
    with pytest.raises(SettingsMismatch, match="decode_steps"):
        long_bench.preflight("tiny-llama", out, DATA, (256,), 1, 1, 8)


def test_bad_command_line_fails_before_loading(first_run, monkeypatch, capsys):
    from kvprobe import cli

    def no_load(*args, **kwargs):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(cli, "_load", no_load)
    assert cli.main(["bench", "long", "--lengths", "abc"]) == 2
    assert "--lengths" in capsys.readouterr().err
    assert cli.main(["bench", "long", "--model", "tiny-llama", "--lengths", "1024,4096", "--data", str(DATA)]) == 2
    err = capsys.readouterr().err
    assert "--lengths: [4096] exceed the context of tiny-llama (max_position_embeddings 2048)" in err
    assert cli.main(["bench", "long", "--model", "tiny-llama", "--data", str(DATA / "missing")]) == 2
    assert "no PG-19 text" in capsys.readouterr().err
    out, _ = first_run
    assert cli.main(["bench", "long", "--model", "tiny-llama", "--data", str(DATA), "--out", str(out),
                     "--lengths", "256", "--warmups", "1", "--repeats", "2", "--decode-steps", "2"]) == 2
    assert "repeats=1" in capsys.readouterr().err


def test_default_lengths_stop_at_the_context():
    assert long_bench.choose_lengths(None, 8192, "m") == ((1024, 2048, 4096, 8192), [16384])
    assert long_bench.choose_lengths(None, None, "m") == (long_bench.DEFAULT_LENGTHS, [])
    with pytest.raises(ValueError, match="--lengths"):
        long_bench.choose_lengths((16384,), 8192, "m")
    assert long_bench.model_context_length("tiny-llama") == 2048


def test_peak_memory_falls_back_to_ru_maxrss(monkeypatch):
    from kvprobe.tools.bench import measure

    _, stats = measure.measured(lambda: bytearray(1 << 20))
    assert stats["peak_bytes"] > 0 and stats["increment_bytes"] >= 0
    monkeypatch.setattr(measure, "reset_peak", lambda: False)
    assert measure.memory_method() == "ru_maxrss"
    result, stats = measure.measured(lambda: 7)
    assert result == 7 and stats["seconds"] >= 0 and stats["peak_bytes"] > 0


def test_interleave_alternates_and_frees_the_last_result():
    from kvprobe.tools.bench.measure import interleave, median_time, schedule

    assert list(schedule("ab", 3)) == [(0, "a"), (0, "b"), (1, "b"), (1, "a"), (2, "a"), (2, "b")]
    assert list(schedule("ab", 2, alternate=False)) == [(0, "a"), (0, "b"), (1, "a"), (1, "b")]
    calls = []
    runs, last = interleave({"a": lambda: calls.append("a") or 1, "b": lambda: calls.append("b") or 2}, 1, 2)
    assert calls == ["a", "b", "a", "b", "b", "a"] and last == {"a": 1, "b": 2}
    assert [len(runs[k]["seconds"]) for k in "ab"] == [2, 2]
    seconds, result = median_time(lambda: 7, 0, 3)
    assert result == 7 and seconds >= 0


def test_measures_restrict_the_cells(model, tmp_path):
    result = run_long_bench(model, tmp_path, DATA, progress=False, measures=["prefill", "decode-1"],
                            **{**SETTINGS, "lengths": (256,)})
    assert list(result["cells"]["256"]["measures"]) == ["prefill", "decode-1"]
    with pytest.raises(ValueError, match="--measures: unknown \\['decode-7'\\]"):
        long_bench.select_measures(["decode-7"], (1, 3))
