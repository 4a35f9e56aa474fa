"""The plain-nnsight record encoder (the NDIF path), run locally against kvprobe's own extraction.

With ``remote=False`` the encoder runs exactly the traces it would send to NDIF; here
they run on tiny models and must give what kvprobe's engine captures: the same token
span, K and V as cached and layer outputs within 1e-5 (transformers' eager attention
against kvprobe's grouped attention, float32).
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

from kvprobe.extract import extract
from kvprobe.extract.capture import RecordSpec, encode
from kvprobe.extract.remote import NnsightEncoder, RemoteCaptureError, language_model
from kvprobe.loading import load_weights
from kvprobe.studies.datasets.recognition import DATASETS

pytestmark = pytest.mark.usefixtures("one_thread")

A = "Record A, Monday: the weekly planning meeting is held in Room 12 on the third floor."
B = "Record B, Friday: the weekly planning meeting moves to Room 18 on the fifth floor."
#: the engine runs SDPA (the default), the nnsight encoder transformers' eager: fp32 rounding
#: apart (largest seen 1.4e-5 on K/V of magnitude ~4); a capture of the wrong row or layer is O(1).
TOL = 1e-4


@pytest.fixture(scope="module")
def encoder() -> NnsightEncoder:
    w = load_weights("tiny-llama", attn_implementation="eager")
    return NnsightEncoder(language_model(w.hf, w.tokenizer), "tiny-llama")


def test_single_and_joint_records_match_the_engine(encoder, llama):
    specs = [RecordSpec("single", A), RecordSpec("joint", B, A)]
    for mine, theirs in zip(encoder(specs), encode(llama, specs)):
        assert mine.span == theirs.span and mine.sequence_length == theirs.sequence_length
        assert np.array_equal(mine.token_ids, theirs.token_ids)
        assert set(mine.keys) == set(theirs.keys) == set(range(llama.arch.num_layers))
        for layer in theirs.keys:
            torch.testing.assert_close(mine.keys[layer], theirs.keys[layer], atol=TOL, rtol=0)
            torch.testing.assert_close(mine.values[layer], theirs.values[layer], atol=TOL, rtol=0)
            torch.testing.assert_close(mine.hidden[layer], theirs.hidden[layer], atol=TOL, rtol=0)
        assert not torch.equal(mine.keys[0], mine.keys[1])  # layers really differ


def test_a_store_from_the_nnsight_path_holds_the_engines_arrays(encoder, llama, tmp_path):
    generator, seed = DATASETS["records"]
    cases = generator(seed=seed)[:6]
    ours = extract(None, "records", cases, tmp_path / "nnsight.h5", batch_size=4, dtype="float32", progress=False,
                   encoder=encoder)
    engine = extract(llama, "records", cases, tmp_path / "engine.h5", batch_size=4, dtype="float32",
                     progress=False)
    with h5py.File(ours, "r") as a, h5py.File(engine, "r") as b:
        ga, gb = a["tiny-llama/records"], b["tiny-llama/records"]
        assert ga.attrs["model_source"] == "nnsight" and gb.attrs["model_source"] == "tiny"
        assert ga.attrs["kv_layers"] == gb.attrs["kv_layers"]
        names: list[str] = []
        gb.visititems(lambda name, obj: names.append(name) if isinstance(obj, h5py.Dataset) else None)
        for name in names:
            x, y = ga[name][()], gb[name][()]
            if x.dtype.kind == "f":
                np.testing.assert_allclose(x, y, atol=TOL, rtol=0, err_msg=name)
            else:
                assert np.array_equal(x, y), name


def test_case_scores_are_refused_on_the_nnsight_path(encoder, tmp_path):
    generator, seed = DATASETS["records"]
    with pytest.raises(ValueError, match="engine"):
        extract(None, "records", generator(seed=seed)[:2], tmp_path / "s.h5", progress=False, encoder=encoder,
                case_scores={"signed_loo": lambda m: np.zeros(2)})
    assert not (tmp_path / "s.h5").exists()


def test_a_sliding_window_cache_shorter_than_the_record_is_refused():
    w = load_weights("tiny-gemma3", attn_implementation="eager")  # sliding window 16 on its local layers
    enc = NnsightEncoder(language_model(w.hf, w.tokenizer), "tiny-gemma3")
    with pytest.raises(RemoteCaptureError, match="sliding"):
        enc([RecordSpec("single", A + " " + B)])


def test_recurrent_layers_are_refused():
    w = load_weights("tiny-qwen3.5", attn_implementation="eager")
    with pytest.raises(RemoteCaptureError, match="recurrent"):
        NnsightEncoder(language_model(w.hf, w.tokenizer), "tiny-qwen3.5")


def test_ndif_without_a_key_names_the_variable(monkeypatch, tmp_path):
    import nnsight

    from kvprobe.cli import main

    monkeypatch.delenv("NDIF_API_KEY", raising=False)
    monkeypatch.setattr(nnsight.CONFIG.API, "APIKEY", None)
    with pytest.raises(SystemExit, match="NDIF_API_KEY"):
        main(["extract", "--backend", "ndif", "--model", "meta-llama/Llama-3.1-70B", "--dataset", "records",
              "--no-loo", "--out", str(tmp_path / "s.h5"), "--quiet"])
    assert main(["extract", "--backend", "nnsight", "--model", "tiny-llama", "--dataset", "records",
                 "--out", str(tmp_path / "s.h5"), "--quiet"]) == 2  # the LOO needs the engine
    assert not (tmp_path / "s.h5").exists()

