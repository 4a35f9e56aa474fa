"""Row provenance in the feature store (schema 2) and records read after cache edits (``extract --edit``).

Every edited extraction is compared in float32 with an independent reference: rebuilt rows with one
plain transformers forward whose explicit 4-D mask hides A from the later tokens, compacted keys with
the pre-RoPE keys rotated by the model's own rotary code at the shifted positions, recomputed rows with
a plain forward of the edited text, zeroed-A rows with the unedited prefill.
"""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import torch

import kvprobe
from kvprobe.cli import main as kvprobe_main
from kvprobe.extract import FeatureStore, RecordSpec, StoreError, extract
from kvprobe.extract.capture import Edit, encode, encode_edited
from kvprobe.extract.schema import SCHEMA_VERSION, arch_provenance, check_writable
from kvprobe.tools.verify.operations import prerope_keys, rope_with_model
from kvprobe.readouts.evaluate import edit_transfer, evaluate_group
from kvprobe.readouts.report import format_edit_transfer
from kvprobe.reference import reference_hidden_kv
from kvprobe.studies.datasets.recognition import generate_records
from kvprobe.studies.recognition.edits import RECORD_EDITS, parse_edits, record_edit

pytestmark = pytest.mark.usefixtures("one_thread")

A = "The Halden team's office is in Lisbon, next to the harbour."
B = "Update: the Halden team's office is now in Porto."
TOL = 1e-4
EDIT_MODELS = ("tiny-llama", "tiny-qwen3", "tiny-gemma3")


def _joint(model: kvprobe.Model) -> kvprobe.History:
    return model.prefill(kvprobe.Prompt([("A", A), ("B", B)], chat=False, sep="\n"))


def _edited(model: kvprobe.Model, edit: str):
    """The edited encoding of (A, B), the unedited history and its A and B spans."""
    enc = encode_edited(model, RecordSpec("joint", B, A), record_edit(edit))
    h = _joint(model)
    return enc, h, h.span("A"), h.span("B")


def _close(got: torch.Tensor, ref: torch.Tensor) -> float:
    """Max absolute difference relative to the reference's scale (at least 1)."""
    return float((got - ref).abs().max()) / max(1.0, float(ref.abs().max()))


@pytest.fixture(scope="module")
def models() -> dict[str, kvprobe.Model]:
    return {name: kvprobe.load_model(name) for name in EDIT_MODELS}


@pytest.mark.parametrize("name", EDIT_MODELS)
def test_rebuilt_rows_equal_one_forward_with_a_hidden_from_later_tokens(models, name):
    model = models[name]
    enc, h, a, b = _edited(model, "rebuild")
    hidden = torch.zeros(len(h), dtype=torch.bool)
    hidden[a.start : a.end] = True
    ref = reference_hidden_kv(model, h.input_ids, hidden, a.start)  # every row after A cannot see A
    changed = 0.0
    for layer in model.arch.kv_layers:
        for t, got in ((0, enc.keys[layer]), (1, enc.values[layer])):
            expected = ref[layer][t][0, :, b.start : b.end].float()
            assert _close(got, expected) < TOL, (name, layer, t)
            changed = max(changed, float((got - h.kv[layer][t][0, :, b.start : b.end]).abs().max()))
    assert changed > 1e-3  # the edit changed B's rows: a no-op would fail the reference above
    assert np.array_equal(enc.current_positions, np.arange(b.start, b.end))
    assert enc.edits[0]["action"] == "rebuilt" and enc.edits[0]["rerotated_by"] == 0


@pytest.mark.parametrize("name", EDIT_MODELS)
def test_compacted_keys_are_the_prerope_keys_rotated_to_the_shifted_positions(models, name):
    model = models[name]
    enc, h, a, b = _edited(model, "compact")
    n = len(a)
    pre = prerope_keys(model, h.input_ids)
    for layer in model.arch.kv_layers:
        ref = rope_with_model(model, layer, pre[layer][:, :, b.start : b.end], torch.arange(b.start, b.end) - n)
        assert _close(enc.keys[layer], ref[0].float()) < TOL, (name, layer)
        assert torch.equal(enc.values[layer], h.kv[layer][1][0, :, b.start : b.end].float())  # values untouched
    assert np.array_equal(enc.current_positions, np.arange(b.start, b.end) - n)
    assert enc.edits[0]["rerotated_by"] == -n and enc.edits[0]["source_tokens"] == [a.start, a.end]


@pytest.mark.parametrize("name", EDIT_MODELS)
def test_recomputed_rows_equal_a_plain_forward_of_the_text_without_a(models, name):
    model = models[name]
    enc, h, _, _ = _edited(model, "recompute")
    # The edited text is B alone (A and its separator deleted): tokenize and run it with plain transformers.
    _, ids, offsets = model.tokenize(kvprobe.Prompt([("B", B)], chat=False))
    n_before = len(ids) - len(enc.token_ids)  # BOS, if the tokenizer adds one
    ref = reference_hidden_kv(model, ids, torch.zeros(len(ids), dtype=torch.bool), len(ids))
    for layer in model.arch.kv_layers:
        for t, got in ((0, enc.keys[layer]), (1, enc.values[layer])):
            assert _close(got, ref[layer][t][0, :, n_before:].float()) < TOL, (name, layer, t)
    assert np.array_equal(enc.token_ids, ids[n_before:].numpy())
    assert np.array_equal(enc.positions, np.arange(h.span("B").start, h.span("B").end))
    assert np.array_equal(enc.current_positions, np.arange(n_before, len(ids)))
    assert enc.edits[0]["action"] == "recomputed" and enc.edits[0]["rerotated_by"] == 0


def test_zeroing_a_leaves_b_rows_as_prefilled(models):
    model = models["tiny-llama"]
    enc, h, _, b = _edited(model, "zero")
    for layer in model.arch.kv_layers:
        assert torch.equal(enc.keys[layer], h.kv[layer][0][0, :, b.start : b.end].float())


def few_records(items_per_split: int = 4) -> list:
    """Every case of the first few items of each split (train, dev, test: a probe can be trained and tested)."""
    cases = generate_records()
    chosen: dict[str, list[str]] = {}
    for c in cases:
        items = chosen.setdefault(c.split, [])
        if c.group not in items and len(items) < items_per_split:
            items.append(c.group)
    return [c for c in cases if c.group in chosen[c.split]]


@pytest.fixture(scope="module")
def edited_store(tmp_path_factory, models):
    """tiny-llama records of 12 items (float32): the original group and every edit."""
    path = tmp_path_factory.mktemp("edits") / "s.h5"
    cases = few_records()
    extract(models["tiny-llama"], "records", cases, path, dtype="float32", progress=False)
    for edit in parse_edits(",".join(RECORD_EDITS)):
        extract(models["tiny-llama"], "records", cases, path, dtype="float32", progress=False, edit=edit)
    return path


def test_store_rows_carry_positions_spans_and_edits_readable_with_plain_h5py(edited_store, models):
    model = models["tiny-llama"]
    with h5py.File(edited_store, "r") as f:
        assert f.attrs["kvprobe_store_schema"] == SCHEMA_VERSION == 2
        g, c = f["tiny-llama/records"], f["tiny-llama/records@compact"]
        assert g.attrs["key_rope"] == "post-RoPE" and json.loads(g.attrs["edit"]) is None
        assert json.loads(g.attrs["rope"])["full_attention"]["rope_theta"] == model.hf.config.rope_parameters["rope_theta"]
        layers = json.loads(g.attrs["layers"])
        assert [l["type"] for l in layers] == ["full"] * model.arch.num_layers
        assert all(l["rope"]["rotary_dims"] == model.arch.layers[0].rope_dims for l in layers)
        r = g["records"]
        assert np.array_equal(r["position"][()], r["rope_position"][()])
        assert set(r["edits"].asstr()[()]) == {"[]"}
        assert set(r["span"].asstr()[()]) == {"R", "B"}
        joint = int(g["cases/record_ab"][0])
        start, n = int(r["token_ids_offset"][joint]), int(r["n_tokens"][joint])
        assert (r["token_record"][start : start + n] == joint).all()
        # The compacted group: joint records only, the same tokens, keys moved by -len(A), the edit per record.
        rc = c["records"]
        assert json.loads(c.attrs["edit"]) == {"name": "compact", "condition": "compact:A", "action": "re-rotated"}
        assert (c["cases/record_a"][()] == -1).all() and set(rc["kind"].asstr()[()]) == {"joint"}
        joint_c = int(c["cases/record_ab"][0])
        cstart = int(rc["token_ids_offset"][joint_c])
        assert np.array_equal(rc["token_ids"][cstart : cstart + n], r["token_ids"][start : start + n])
        assert np.array_equal(rc["position"][cstart : cstart + n], r["position"][start : start + n])
        entry = json.loads(rc["edits"].asstr()[joint_c])[0]
        shift = rc["rope_position"][cstart : cstart + n] - rc["position"][cstart : cstart + n]
        assert entry["rerotated_by"] == entry["position_shift"] == int(shift[0]) < 0 and (shift == shift[0]).all()
        assert entry["source_tokens"][1] - entry["source_tokens"][0] == -entry["rerotated_by"]
        assert "H" not in c["records/pooled"]


def test_stored_pooled_rows_of_an_edit_equal_the_reference_mean(edited_store, models):
    model = models["tiny-llama"]
    with FeatureStore(edited_store) as s:
        g = s["tiny-llama/records@rebuild"]
        row = int(g.cases()["record_ab"][0])
        text, context = g.texts()[row], few_records()[0].a_text
        p = g.provenance(row)
        assert p["span"] == "B" and p["edits"][0]["action"] == "rebuilt" and not p["rerotated_by"].any()
    h = model.prefill(kvprobe.Prompt([("A", context), ("B", text)], chat=False, sep="\n"))
    a, b = h.span("A"), h.span("B")
    hidden = torch.zeros(len(h), dtype=torch.bool)
    hidden[a.start : a.end] = True
    ref = reference_hidden_kv(model, h.input_ids, hidden, a.start)
    with FeatureStore(edited_store) as s:
        for layer in model.arch.kv_layers:
            expected = ref[layer][1][0, :, b.start : b.end].float().mean(dim=1).numpy()
            assert np.abs(s["tiny-llama/records@rebuild"].pooled("V", layer, np.array([row]))[0] - expected).max() < TOL


def test_probe_trained_on_original_caches_scores_every_edit(edited_store):
    with FeatureStore(edited_store) as s:
        edited = s.edited("tiny-llama/records")
        assert list(edited) == sorted(RECORD_EDITS)
        r = edit_transfer(s["tiny-llama/records"], edited, draws=200)
        with pytest.raises(StoreError, match="edited group"):
            edit_transfer(edited["zero"], edited)
        with pytest.raises(StoreError, match="--transfer-to-edits"):
            evaluate_group(edited["compact"])
    role = r["role_auc"]
    assert set(role["auc"]) == {"original", *RECORD_EDITS}
    # Zeroing A leaves B's rows as they were: the same AUC, a zero drop on every draw.
    assert role["auc"]["zero"]["auc"] == pytest.approx(role["auc"]["original"]["auc"], abs=1e-9)
    assert role["diff"]["original"]["zero"]["lo"] == pytest.approx(0, abs=1e-9)
    assert r["test_change"]["zero"]["feature_change"] < 1e-5 < r["test_change"]["compact"]["feature_change"]
    assert role["diff"]["original"]["compact"]["diff"] == pytest.approx(
        role["auc"]["original"]["auc"] - role["auc"]["compact"]["auc"])
    text = format_edit_transfer(r)
    assert "| compact (`compact:A`) |" in text and f"| {r['n_cases']['test_role']} (" in text


def test_layer_attributes_name_windows_shared_and_recurrent_layers():
    for name, expect in [
        ("tiny-gemma3", [("sliding", 16, 0), ("sliding", 16, 1), ("full", None, 2)]),
        ("tiny-gemma4", [("sliding", 16, 3), ("full", None, 2)]),  # layers 4, 5 read layers 3 and 2
        ("tiny-qwen3.5", [("recurrent", None, None), ("full", None, 1)]),
    ]:
        arch = kvprobe.load_model(name).arch
        layers = json.loads(arch_provenance(arch)["layers"])
        got = [(l["type"], l["window"], l["reads_layer"]) for l in layers]
        if name == "tiny-gemma4":
            assert got[4:] == expect and [l["cache"] for l in layers[4:]] == ["shared", "shared"]
            assert layers[5]["rope"]["params"]["partial_rotary_factor"] == 0.25
        else:
            assert got[: len(expect)] == expect
    assert layers[0]["rope"] is None  # recurrent layers carry no keys


def _as_schema_1(path) -> None:
    """Rewrite a store as kvprobe wrote it before row provenance (schema 1)."""
    with h5py.File(path, "a") as f:
        f.attrs["kvprobe_store_schema"] = 1
        for g in ("tiny-llama/records",):
            for name in ("position", "rope_position", "span", "edits", "token_record"):
                del f[f"{g}/records/{name}"]
            for attr in ("key_rope", "rope", "layers", "edit"):
                del f[g].attrs[attr]


def test_schema_1_stores_are_read_and_never_extended(tmp_path, models):
    path = tmp_path / "old.h5"
    extract(models["tiny-llama"], "records", generate_records()[:24], path, progress=False)
    _as_schema_1(path)
    with FeatureStore(path) as s:
        g = s["tiny-llama/records"]
        assert g.pooled("V", 0).shape[0] == len(g.texts()) and g.edit is None  # readouts still work
        with pytest.raises(StoreError, match=rf"{path}.*schema version 1"):
            g.provenance(0)
    with pytest.raises(StoreError, match=rf"{path} is a feature store of schema version 1"):
        check_writable(path)
    with pytest.raises(StoreError, match="schema version 1"):
        extract(models["tiny-llama"], "role-pairs", generate_records()[:4], path, progress=False)
    with h5py.File(path, "a") as f:
        f.attrs["kvprobe_store_schema"] = 99
    with pytest.raises(StoreError, match="schema version 99"):
        FeatureStore(path)


def test_bad_edit_input_fails_before_a_model_loads(tmp_path, capsys, monkeypatch):
    import kvprobe.cli as cli

    monkeypatch.setattr(cli, "_load", lambda *a, **k: pytest.fail("a model was loaded"))
    out = str(tmp_path / "s.h5")
    for argv, message in [
        (["--edit", "rebuild,bogus"], "unknown edit 'bogus'; known: rebuild, compact, recompute, zero"),
        (["--edit", "rebuild,rebuild"], "edit 'rebuild' named twice"),
        (["--edit", "compact", "--backend", "ray"], "--edit runs on a local model"),
        (["--edit", "compact", "--token-level", "K,H"], "K and V only"),
    ]:
        assert kvprobe_main(["extract", "--dataset", "records", "--out", out, *argv]) == 2
        assert message in capsys.readouterr().err
    with h5py.File(out, "w") as f:
        f.attrs["kvprobe_store_schema"] = 1
    assert kvprobe_main(["extract", "--dataset", "records", "--out", out, "--edit", "compact"]) == 2
    assert f"{out} is a feature store of schema version 1" in capsys.readouterr().err
    with pytest.raises(ValueError, match="action"):
        Edit("x", "compact:A", "squashed", build=None)


def test_edits_of_single_records_are_refused(models):
    with pytest.raises(ValueError, match="joint records"):
        encode_edited(models["tiny-llama"], RecordSpec("single", A), record_edit("compact"))
    # encode() edits joint records only; single ones come out as without an edit.
    plain, edited = (encode(models["tiny-llama"], [RecordSpec("single", A)], edit=e)[0]
                     for e in (None, record_edit("compact")))
    assert plain.edits == edited.edits == () and torch.equal(plain.keys[0], edited.keys[0])


def test_extract_edit_then_readout_across_edits_in_process(tmp_path, monkeypatch):
    """The command-line path (in process, on 12 items): the original group, then one group per edit, a
    rerun keeping them, and the report of the probe moved across edits."""
    import kvprobe.studies.datasets.recognition as recognition

    def generate_few(seed: int):
        return few_records()

    monkeypatch.setitem(recognition.DATASETS, "records", (generate_few, 0))
    out = tmp_path / "s.h5"
    argv = ["extract", "--model", "tiny-llama", "--dataset", "records", "--no-loo", "--edit", "compact,zero",
            "--out", str(out), "--quiet"]
    assert kvprobe_main(argv) == 0
    with FeatureStore(out) as s:
        assert s.groups() == ["tiny-llama/records", "tiny-llama/records@compact", "tiny-llama/records@zero"]
    assert kvprobe_main(argv) == 0  # every group already there: kept
    assert kvprobe_main(["readout", "--store", str(out), "--out", str(tmp_path / "r"), "--transfer-to-edits",
                         "--draws", "100", "--quiet"]) == 0
    report = (tmp_path / "r" / "tiny-llama" / "edits" / "report.md").read_text()
    assert "| zero (`zero-kv:A`) |" in report and "+0.000 [+0.000, +0.000]" in report
    assert not (tmp_path / "r" / "tiny-llama" / "records").exists()  # per-group readouts only with --group
    assert json.loads((tmp_path / "r" / "tiny-llama" / "edits" / "edits.json").read_text())["edits"]["compact"][
        "action"] == "re-rotated"


def test_an_edit_the_architecture_refuses_fails_before_any_extraction(tmp_path, monkeypatch, capsys):
    import kvprobe.studies.datasets.recognition as recognition

    def generate_few(seed: int):
        return few_records(1)

    monkeypatch.setitem(recognition.DATASETS, "records", (generate_few, 0))
    out = tmp_path / "s.h5"
    assert kvprobe_main(["extract", "--model", "tiny-qwen3.5", "--dataset", "records", "--no-loo", "--edit",
                         "rebuild,compact", "--out", str(out), "--quiet"]) == 2
    assert "compact deletes cache rows" in capsys.readouterr().err and not out.exists()
