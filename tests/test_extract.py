"""Extraction (K/V as cached, hidden states) and the HDF5 feature store: schema, resume, crash safety."""

from __future__ import annotations

import hashlib
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

import kvprobe
import kvprobe.extract.pipeline as pipeline
from kvprobe.extract import FeatureStore, RecordSpec, StoreError, encode, extract
from kvprobe.studies.datasets.recognition import RecognitionCase

A = "The Halden team's office is in Lisbon, next to the harbour."
B = "Update: the Halden team's office is now in Porto."


def toy_cases(n: int = 12) -> list[RecognitionCase]:
    cities = ["Lisbon", "Porto", "Oslo", "Riga", "Turin", "Ghent"]
    out = []
    for i in range(n):
        team, new = f"team {i // 2}", cities[(i // 2 + 1) % 6] if i % 2 else cities[i // 2 % 6]
        out.append(RecognitionCase(
            case_id=f"c{i:02d}", group=f"g{i // 2}", split="train" if i < 8 else "test", family="office_city",
            variant="replacement" if i % 2 else "confirmation", pattern="p1",
            a_text=f"The {team} office is in {cities[i // 2 % 6]}.", b_text=f"Update: the {team} office is in {new} now.",
            labels={"replacement": i % 2}, entity=team, old_value=cities[i // 2 % 6], new_value=new))
    return out


@pytest.fixture(scope="module")
def llama() -> kvprobe.Model:
    return kvprobe.load_model("tiny-llama")


def test_joint_keys_are_the_prefilled_cache_and_hidden_states_are_layer_outputs(llama):
    enc = encode(llama, [RecordSpec("joint", B, A)])[0]
    h = llama.prefill(kvprobe.Prompt([("A", A), ("B", B)], chat=False, sep="\n"))
    span = h.span("B")
    assert enc.span == (span.start, span.end) and enc.sequence_length == len(h)
    for layer in llama.arch.kv_layers:
        assert torch.equal(enc.keys[layer], h.kv[layer][0][0, :, span.start : span.end])
        assert torch.equal(enc.values[layer], h.kv[layer][1][0, :, span.start : span.end])
    with torch.inference_mode():
        ref = llama.hf(input_ids=h.input_ids[None], output_hidden_states=True).hidden_states
    for layer in range(llama.arch.num_layers - 1):  # the last entry has the final norm applied
        assert float((enc.hidden[layer] - ref[layer + 1][0, span.start : span.end]).abs().max()) < 1e-5


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma4", "tiny-deepseek-v2", "tiny-qwen3.5"])
def test_batched_encoding_equals_each_record_alone(name):
    model = kvprobe.load_model(name)
    specs = [RecordSpec("single", A), RecordSpec("joint", B, A), RecordSpec("single", "Hi."),
             RecordSpec("single", B)]
    batched = encode(model, specs)

    def close(a, b):  # float32 rounding of differently shaped (padded) products, relative to the scale
        return float((a - b).abs().max()) <= 1e-5 * max(1.0, float(a.abs().max()))

    for spec, got in zip(specs, batched):
        alone = encode(model, [spec])[0]
        assert np.array_equal(alone.token_ids, got.token_ids)
        assert all(close(alone.keys[layer], got.keys[layer]) for layer in model.arch.kv_layers)
        assert all(close(alone.hidden[layer], got.hidden[layer]) for layer in alone.hidden)


def _content(path: Path) -> dict:
    """Every dataset's bytes and every attribute of a store (what 'the same file content' means)."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                blob = ("\x00".join(obj.asstr()[()]).encode() if data.dtype == object
                        else np.ascontiguousarray(data).tobytes())
                out[name] = hashlib.sha256(blob).hexdigest()
            out[name + "@attrs"] = {k: str(v) for k, v in obj.attrs.items() if k != "versions"}
        f.visititems(visit)
        out["/@attrs"] = dict(f.attrs)
    return out


def test_store_schema_is_plain_h5py(llama, tmp_path):
    cases = toy_cases()
    path = extract(llama, "toy", cases, tmp_path / "s.h5", batch_size=4, progress=False)
    assert not (tmp_path / "s.h5.parts").exists()
    with h5py.File(path, "r") as f:
        g = f["tiny-llama/toy"]
        assert json_attr(g, "kv_layers") == [0, 1, 2, 3]
        for key in ("model", "weight_hash", "tokenizer_sha256", "versions", "dataset_hash", "config"):
            assert g.attrs[key]
        assert list(g["cases/case_id"].asstr()[()]) == [c.case_id for c in cases]
        assert list(g["cases/labels/replacement"][()]) == [c.labels["replacement"] for c in cases]
        k = g["records/pooled/K/L000"]
        assert k.dtype == np.float16 and k.maxshape[0] is None and k.compression == "gzip"
        n_records = g["records/kind"].shape[0]
        assert k.shape == (n_records, 2, 16) and g["records/pooled/H/L003"].shape == (n_records, 64)
        single = g["records/kind"].asstr()[()] == "single"
        assert g["records/tokens/K/L001"].shape[0] == g["records/n_tokens"][()][single].sum()
        assert (g["records/token_rows"][()][~single] == 0).all()
    with FeatureStore(path) as s:
        g = s["tiny-llama/toy"]
        case = g.cases()
        rec_a, rec_ab = int(case["record_a"][0]), int(case["record_ab"][0])
        assert g.texts()[rec_a] == cases[0].a_text
        tokens = g.tokens("K", 2, rec_a)
        assert float(np.abs(tokens.mean(axis=1) - g.pooled("K", 2, np.array([rec_a]))[0]).max()) < 2e-3
        enc = encode(llama, [RecordSpec("joint", cases[0].b_text, cases[0].a_text)])[0]
        assert float(np.abs(g.pooled("V", 1, np.array([rec_ab]))[0] - enc.values[1].mean(dim=1).numpy()).max()) < 2e-3


def json_attr(g, name):
    import json

    return json.loads(g.attrs[name])


def test_interrupted_extraction_resumes_to_the_same_content(llama, tmp_path, monkeypatch):
    cases = toy_cases()
    whole = extract(llama, "toy", cases, tmp_path / "whole.h5", batch_size=4, progress=False)
    calls = {"n": 0}
    real = pipeline.encode

    def dies_on_third_batch(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "encode", dies_on_third_batch)
    target = tmp_path / "resumed.h5"
    with pytest.raises(KeyboardInterrupt):
        extract(llama, "toy", cases, target, batch_size=4, progress=False)
    assert not target.exists()
    assert len(list((tmp_path / "resumed.h5.parts").rglob("batch-*.h5"))) == 2
    monkeypatch.setattr(pipeline, "encode", real)
    extract(llama, "toy", cases, target, batch_size=4, progress=False)
    assert _content(target) == _content(whole)


def test_a_crash_while_assembling_leaves_the_old_store_intact(llama, tmp_path, monkeypatch):
    path = extract(llama, "first", toy_cases(4), tmp_path / "s.h5", batch_size=4, progress=False)
    before = path.read_bytes()

    def disk_full(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pipeline, "_write_records", disk_full)
    with pytest.raises(OSError, match="disk full"):
        extract(llama, "second", toy_cases(4), path, batch_size=4, progress=False)
    assert path.read_bytes() == before
    monkeypatch.undo()
    extract(llama, "second", toy_cases(4), path, batch_size=4, progress=False)
    with FeatureStore(path) as s:
        assert sorted(s.groups()) == ["tiny-llama/first", "tiny-llama/second"]


def test_clear_errors(llama, tmp_path):
    path = extract(llama, "toy", toy_cases(4), tmp_path / "s.h5", batch_size=4, progress=False)
    with pytest.raises(StoreError, match="already holds tiny-llama/toy"):
        extract(llama, "toy", toy_cases(4), path, progress=False)
    extract(llama, "toy", toy_cases(6), path, batch_size=4, overwrite=True, progress=False)
    with FeatureStore(path) as s:
        assert len(s["tiny-llama/toy"].cases()["case_id"]) == 6
        with pytest.raises(StoreError, match="no group"):
            s["tiny-llama/nothing"]
    parts = tmp_path / "t.h5.parts" / "tiny-llama__toy"
    parts.mkdir(parents=True)
    (parts / "config.json").write_text("{}")
    with pytest.raises(StoreError, match="another configuration"):
        extract(llama, "toy", toy_cases(4), tmp_path / "t.h5", progress=False)
    with pytest.raises(StoreError, match="no feature store"):
        FeatureStore(tmp_path / "missing.h5")
    with pytest.raises(StoreError, match="no cases"):
        extract(llama, "empty", [], tmp_path / "u.h5", progress=False)
