"""The fact map: segment-restricted rebuilds against one-pass references, and the map itself.

References are plain transformers forwards (no nnsight, transformers' own eager attention):

* a later segment S rebuilt with A hidden: an uncached forward of the history up to S's end whose
  explicit 4-D mask hides A from S's tokens (the rows before S are the cached ones), then the cached
  rows after S; the question's logits on that stitched cache under an explicit mask hiding A;
* every later segment rebuilt in order: ``SelectiveRefresh(A)`` (bit-identical);
* a segment rebuilt with A hidden in some layers only: the decoder layers run one by one with a
  per-layer explicit mask (tiny-llama).
"""

from __future__ import annotations

import json

import numpy as np

import pytest
import torch

import kvprobe
from kvprobe.access import LayerError
from kvprobe.access import positions_of
from kvprobe.forward import traced_forward
from kvprobe.rows import RowState, fork_rows
from kvprobe.interventions import OperationError, SegmentRebuild, SelectiveRefresh, TextRecompute, parse_condition
from kvprobe.studies.fact_map.analysis import fact_map, later_pieces, layer_bands
from kvprobe.reference import cached_explicit_logits, reference_hidden_kv, transformers_eager, uncached_mask
from kvprobe.tools.verify import scaled_tolerance

from conftest import ATTENTION_MODELS, QUESTIONS, make_history

pytestmark = pytest.mark.usefixtures("one_thread")


def _max_diff(a, b) -> float:
    return max(max(float((x - y).abs().max()) for x, y in zip(p, q)) for p, q in zip(a, b) if p[0] is not None)


def _stitched(history: kvprobe.History, rebuilt: list, end: int) -> RowState:
    """Reference rows [0, end) followed by the history's cached rows [end, T), as a row state."""
    T = len(history)
    kv = [(None, None) if k is None else (torch.cat([rk, k[:, :, end:]], 2), torch.cat([rv, v[:, :, end:]], 2))
          for (rk, rv), (k, v) in zip(rebuilt, history.kv)]
    return RowState(kv=kv, key_pos=torch.arange(T), key_valid=torch.ones(T, dtype=torch.bool),
                    input_ids=history.input_ids, slot_of=torch.arange(T))


@pytest.mark.parametrize("name", ATTENTION_MODELS)
@pytest.mark.parametrize("segment", ["note", "B"])
def test_segment_rebuild_equals_a_one_pass_forward_hiding_a_from_that_segment(name, segment):
    model = kvprobe.load_model(name)
    h = make_history(model)
    A, S = h.span("A"), h.span(segment)
    state = SegmentRebuild(A, [S]).prepare(model, h)
    hidden = positions_of([A], len(h))
    # Rows before S as cached, S's rows with A hidden from them (one uncached forward up to S's end).
    ref = _stitched(h, reference_hidden_kv(model, h.input_ids[:S.end], hidden[:S.end], S.start), S.end)
    tol = scaled_tolerance(*[k for k, _ in ref.kv if k is not None])
    assert _max_diff(state.kv, ref.kv) <= tol
    # Rows after S are the cached ones, bit for bit; S's rows did change.
    for (k, v), (hk, hv) in zip(state.kv, h.kv):
        if k is not None:
            assert torch.equal(k[:, :, S.end:], hk[:, :, S.end:]) and torch.equal(k[:, :, :S.start], hk[:, :, :S.start])
    assert _max_diff([(k[:, :, S.start:S.end], v) for k, v in state.kv if k is not None],
                     [(k[:, :, S.start:S.end], v) for k, v in h.kv if k is not None]) > 1e-3
    # The question reads the rebuilt cache with A hidden: equal to a plain forward on the stitched cache.
    q = model.tokenizer.encode(QUESTIONS[0], add_special_tokens=False)
    expected = cached_explicit_logits(model, ref, q, hidden=hidden)
    got = traced_forward(model, fork_rows([state]), torch.tensor([q])).logits[0]
    assert float((got - expected).abs().max()) <= scaled_tolerance(expected)


def test_cumulative_rebuild_of_every_later_piece_equals_selective_refresh(llama):
    h = make_history(llama)
    A = h.span("A")
    pieces = [s for _, s in later_pieces(h, A)]
    assert pieces[0].start == A.end and pieces[-1].end == len(h)
    assert all(a.end == b.start for a, b in zip(pieces, pieces[1:]))  # they tile the rest of the history
    cumulative = SegmentRebuild(A, pieces).prepare(llama, h)
    refresh = SelectiveRefresh(A).prepare(llama, h)
    # Equal up to float rounding: one forward per piece vs one forward of every later token (5e-6 seen).
    assert _max_diff(cumulative.kv, refresh.kv) <= 1e-5
    assert _max_diff(cumulative.kv, h.kv) > 1e-3
    assert torch.equal(cumulative.hidden[0], refresh.hidden[0])
    assert cumulative.info["recomputed_tokens"] == refresh.info["recomputed_tokens"] == len(h) - A.end


def _layerwise_kv(model: kvprobe.Model, ids: torch.Tensor, layer_masks: list[torch.Tensor]) -> list:
    """K/V of an uncached forward run decoder layer by decoder layer, each with its own 4-D mask (Llama)."""
    inner = model.hf.model
    cache = fork_rows([model.empty_state()]).cache
    pos = torch.arange(ids.shape[0])[None]
    with torch.inference_mode(), transformers_eager(model):
        x = inner.embed_tokens(ids[None])
        rope = inner.rotary_emb(x, position_ids=pos)
        for layer, mask in zip(inner.layers, layer_masks):
            x = layer(x, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True, position_embeddings=rope)
    return [(layer.keys, layer.values) for layer in cache.layers]


def test_rebuild_in_one_layer_band_equals_a_per_layer_masked_reference(llama):
    h = make_history(llama)
    A, S = h.span("A"), h.span("B")
    band = (0, 0)
    state = SegmentRebuild(A, [S], layers=range(band[0], band[1] + 1)).prepare(llama, h)
    hidden = positions_of([A], len(h))
    causal = uncached_mask(llama, S.end, S.end, None)
    masked = uncached_mask(llama, S.end, S.end, hidden[:S.end], S.start)
    masks = [masked if band[0] <= i <= band[1] else causal for i in range(llama.arch.num_layers)]
    ref = _stitched(h, _layerwise_kv(llama, h.input_ids[:S.end], masks), S.end)
    assert _max_diff(state.kv, ref.kv) <= 1e-4
    # A layer's K/V come from its input: the band's own rows are the cached ones, the next layer's differ.
    assert torch.equal(state.kv[0][0], h.kv[0][0])
    assert float((state.kv[1][0] - h.kv[1][0]).abs().max()) > 1e-3
    # The plain per-layer reference is not the all-layer rebuild (the test can tell them apart).
    everywhere = SegmentRebuild(A, [S]).prepare(llama, h)
    assert _max_diff(everywhere.kv, ref.kv) > 1e-3


def test_segment_rebuild_refuses_what_it_cannot_do(llama, hybrid):
    h = make_history(llama)
    A, note, B = h.span("A"), h.span("note"), h.span("B")
    with pytest.raises(kvprobe.SpanError, match="starts before the source"):
        SegmentRebuild(B, [note])
    with pytest.raises(kvprobe.SpanError, match="in order and disjoint"):
        SegmentRebuild(A, [B, note])
    with pytest.raises(LayerError, match="layers \\[99\\] do not exist"):
        SegmentRebuild(A, [B], layers=[99]).prepare(llama, h)
    hh = make_history(hybrid)
    with pytest.raises(OperationError, match="recurrent \\(linear-attention\\) layers carry one state"):
        SegmentRebuild(hh.span("A"), [hh.span("B")]).prepare(hybrid, hh)


def test_rebuild_segments_by_name(llama):
    h = make_history(llama)
    op = parse_condition("rebuild-segments:A>note,B@0-1", h)
    assert isinstance(op, SegmentRebuild) and op.segments == (h.span("note"), h.span("B")) and op.layers == (0, 1)
    with pytest.raises(kvprobe.SpanError, match="SOURCE>SEGMENTS"):
        parse_condition("rebuild-segments:A", h)


def test_layer_bands_cover_the_attention_layers_in_order(llama):
    bands = layer_bands(llama.arch, 2)
    assert bands[0][0] == 0 and bands[-1][1] == llama.arch.num_layers - 1
    assert all(a[1] + 1 == b[0] for a, b in zip(bands, bands[1:]))
    assert len(layer_bands(llama.arch, 99)) == len(llama.arch.attention_layers)


def test_fact_map_entries_are_the_scores_of_their_conditions(llama):
    h = make_history(llama)
    cands = ["Room 18", "Room 12"]
    fm = fact_map(llama, h, "A", QUESTIONS[0], cands, n_bands=2)
    labels = [label for label, _ in fm.pieces]
    assert labels == ["note", "B", "end"]
    # Each entry's margin is what scoring its condition on its own gives.
    direct = llama.score(h, QUESTIONS[0], cands, access={
        "mask": kvprobe.Mask(h.span("A")), "recompute": TextRecompute("A"),
        "rebuild:B": SegmentRebuild(h.span("A"), [fm.pieces[1][1]]),
        "refresh": SelectiveRefresh(h.span("A"))})
    for name, other in (("mask", "mask"), ("recompute", "recompute"), ("rebuild:B", "rebuild:B"),
                        ("rebuild:..end", "refresh")):
        assert fm.entry(name).margin == pytest.approx(direct[other].margin(), abs=1e-4)
    effect = fm.entry("recompute").margin - fm.entry("mask").margin
    for e in fm.entries:
        if e.kind in ("rebuild", "cumulative", "band"):
            assert e.recovered == pytest.approx((e.margin - fm.entry("mask").margin) / effect)
        else:
            assert e.recovered is None
    grid = fm.heatmap()
    assert grid.shape == (3, 2)
    assert grid[1, 0] == pytest.approx(fm.entry(f"rebuild:B@{fm.bands[0][0]}-{fm.bands[0][1]}").recovered)
    assert fm.entry("rebuild:B").recomputed_tokens == fm.pieces[1][1].end - fm.pieces[1][1].start
    json.dumps(fm.to_json())  # JSON-ready
    assert "| rebuild:..B |" in fm.table()
    assert h.check_digest()


def test_fact_map_refuses_bad_input(llama):
    h = make_history(llama)
    with pytest.raises(kvprobe.SpanError, match="two candidates"):
        fact_map(llama, h, "A", QUESTIONS[0], ["x"])
    with pytest.raises(kvprobe.SpanError, match="no segment 'Z'"):
        fact_map(llama, h, "Z", QUESTIONS[0], ["x", "y"])


# --------------------------------------------------------------------------- kvprobe map and the study

ROOMS = {"segments": [["A", "Record A, Monday: the weekly planning meeting is held in Room 12."],
                      ["note", "A square seal is printed beside a blank signature box."],
                      ["B", "Record B, Friday: the meeting moves two doors down from the room in record A."]],
         "source": "A", "question": "Which room is the meeting in now?", "candidates": ["Room 14", "Room 12"]}


@pytest.mark.parametrize("change,message", [
    (dict(source="Z"), "source 'Z' is not a segment"),
    (dict(source="B"), "is the last segment"),
    (dict(candidates=["only one"]), "two non-empty strings"),
    (dict(segments=[["A", "x"], ["A", "y"]]), "segment names repeat"),
    (dict(chat="yes"), "'chat' must be true or false"),
    (dict(question=None), "field 'question' must be a str"),
])
def test_map_input_errors_name_the_file_and_field(tmp_path, change, message):
    from kvprobe.studies.fact_map.command import MapInputError, load_input

    path = tmp_path / "in.json"
    path.write_text(json.dumps({**ROOMS, **change}))
    with pytest.raises(MapInputError, match=message) as err:
        load_input(path)
    assert str(path) in str(err.value)
    path.write_text("{not json")
    with pytest.raises(MapInputError, match="not JSON \\(line 1"):
        load_input(path)


def test_map_command_prints_and_writes_the_map(tmp_path, capsys):
    from kvprobe.cli import main

    path = tmp_path / "rooms.json"
    path.write_text(json.dumps(ROOMS))
    assert main(["map", "--model", "tiny-llama", "--input", str(path), "--bands", "2", "--out",
                 str(tmp_path / "out")]) == 0
    text = capsys.readouterr().out
    assert "| rebuild:B@" in text and "recompute - mask" in text
    saved = json.loads((tmp_path / "out" / "map.json").read_text())
    assert [p["label"] for p in saved["pieces"]] == ["note", "B", "end"] and len(saved["heatmap"]) == 3
    assert (tmp_path / "out" / "map.png").stat().st_size > 0 and "| piece |" in (tmp_path / "out" / "map.md").read_text()
    # A bad file fails before any model loads (exit status 2, the file named).
    path.write_text(json.dumps({**ROOMS, "source": "nope"}))
    assert main(["map", "--model", "no-such-model", "--input", str(path)]) == 2
    assert str(path) in capsys.readouterr().err


def test_study_summary_recomputes_recovery_from_the_rows(llama, tmp_path):
    from kvprobe.studies.fact_map.study import FactMapStudy
    from kvprobe.studies.common.summary import write_summary
    from kvprobe.studies.common.runner import read_rows, run_study

    study = FactMapStudy(dataset="records", n_groups=1, n_bands=2)
    assert {c.variant for c in study.cases()} <= {"replacement", "role_swap", "explicit_rejection"}
    run_study(study, llama, tmp_path, progress=False)
    summary = write_summary("fact-map", tmp_path)
    rows = list(read_rows(tmp_path))
    assert {r["piece"] for r in rows if r["kind"] == "rebuild"} == {"other", "note", "time2", "end"}
    by = {}
    for r in rows:
        by.setdefault(r["condition"], []).append((r["case_id"], r["margin"] - r["margin_mask"]))
    effect = np.mean([r["margin_target"] - r["margin_mask"] for r in rows if r["condition"] == "recompute"])
    cell = summary["all"]["conditions"]["rebuild:time2"]
    assert cell["change"] == pytest.approx(np.mean([d for _, d in by["rebuild:time2"]]))
    assert cell["recovered"] == pytest.approx(cell["change"] / effect)
    assert cell["change_ci"][0] <= cell["change"] <= cell["change_ci"][1]
    assert len(summary["heatmap"]) == 4 and len(summary["heatmap"][0]) == 2
    assert (tmp_path / "figure.png").exists() and "## All histories" in (tmp_path / "report.md").read_text()


def test_one_band_map_reuses_the_plain_rebuilds(llama):
    h = make_history(llama)
    fm = fact_map(llama, h, "A", QUESTIONS[0], ["Room 18", "Room 12"], n_bands=1)
    (band,) = fm.bands
    assert band == (0, llama.arch.num_layers - 1) and fm.heatmap().shape == (len(fm.pieces), 1)
    for label, _ in fm.pieces:
        plain, cell = fm.entry(f"rebuild:{label}"), fm.entry(f"rebuild:{label}@{band[0]}-{band[1]}")
        assert cell.kind == "band" and cell.band == band
        # The same condition under two names: prepared once (same cost), scored the same.
        assert (cell.margin, cell.seconds, cell.recovered) == (plain.margin, plain.seconds, plain.recovered)
