"""Every architecture family: adapter facts, the verified family x operation matrix, masked generation.

The matrix test runs ``kvprobe verify`` (every access-condition and cache-operation
check against its independent reference) on one tiny model per family, and
docs/architectures.md must carry exactly the table built from that run.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kvprobe
from conftest import tensors_made_on_meta
from kvprobe.interventions import OperationError, Zero, rotate_keys
from kvprobe.arch import INTERLEAVED, SHARED_KV
from kvprobe.decoding import suffix_ids
from kvprobe.tools.verify.matrix import COLUMNS, matrix_markdown, readme_block, readme_table, run_matrix
from kvprobe.reference import reference_generate
from kvprobe.tiny import TINY_MODELS

from conftest import QUESTIONS, make_history

#: The page that carries the generated matrix block (``kvprobe matrix --readme docs/architectures.md``).
MATRIX_DOC = Path(__file__).resolve().parents[1] / "docs" / "architectures.md"

#: Operations each tiny model must refuse (every other cell must pass its checks).
EXPECTED_REFUSALS = {
    # recurrent states have no rows; a decode step in fixed shapes needs full attention in every layer
    "tiny-qwen3.5": {"compact", "drop", "recompute-prefix", "rebuild-segments", "fixed-shape-decode"},
    "tiny-qwen3-next": {"compact", "drop", "recompute-prefix", "rebuild-segments", "fixed-shape-decode"},
    # one latent for K and V, expanded after the cache
    "tiny-deepseek-v2": {"zero-k", "zero-v", "zero-heads", "shared-history", "fixed-shape-decode"},
    # sliding windows move every decode step
    "tiny-mistral": {"fixed-shape-decode"}, "tiny-gemma3": {"fixed-shape-decode"}, "tiny-gemma4": {"fixed-shape-decode"},
}


@pytest.fixture(scope="module")
def matrix() -> dict[str, dict]:
    """Every check on every family, run under the device guard (tests/conftest.py): a tensor made
    without the model's device fails the check, as it would on a GPU."""
    models = [kvprobe.load_model(name) for name in TINY_MODELS]
    with tensors_made_on_meta():
        return run_matrix(models)


@pytest.fixture(scope="module")
def models() -> dict[str, kvprobe.Model]:
    return {name: kvprobe.load_model(name) for name in TINY_MODELS}


def test_every_family_passes_every_check(matrix):
    failed = [(name, r.check, r.value, r.refused) for name, e in matrix.items() for r in e["results"] if not r.passed]
    assert not failed


def test_refusals_are_exactly_where_the_architecture_says(matrix):
    for name, entry in matrix.items():
        refused = {r.operation for r in entry["results"] if r.refused}
        assert refused == EXPECTED_REFUSALS.get(name, set()), name


def test_every_operation_is_checked_on_every_family(matrix):
    for name, entry in matrix.items():
        assert {r.operation for r in entry["results"]} == set(COLUMNS), name


def test_docs_matrix_is_the_generated_one(matrix):
    table = matrix_markdown(matrix)
    assert readme_table(MATRIX_DOC.read_text()) == readme_block(table), (
        "docs/architectures.md's architecture matrix is stale; regenerate it with "
        "`kvprobe matrix --readme docs/architectures.md`")


# --------------------------------------------------------------------------- adapter facts


def test_adapter_facts(models):
    mla = models["tiny-deepseek-v2"].arch
    assert mla.family == "mla"
    assert {(s.key_shape, s.value_shape, s.rope_tensor, s.rope_layout, s.separable_kv) for s in mla.layers} == {
        ((1, 16), (1, 8), 1, INTERLEAVED, False)}
    g4 = models["tiny-gemma4"].arch
    assert g4.shared_layers == (4, 5) and g4.kv_layers == (0, 1, 2, 3)
    assert [g4.layers[i].kv_layer for i in (4, 5)] == [3, 2]  # the last earlier layer of the same type
    assert g4.layers[2].key_shape == (1, 32) and g4.layers[0].key_shape == (2, 16)
    assert g4.layers[4].cache == SHARED_KV and g4.sliding_window == 16
    assert models["tiny-phi3"].arch.family == "fused-qkv" and models["tiny-phi3"].arch.layers[0].rope_dims == 8
    assert models["tiny-qwen3-next"].arch.recurrent_layers == (0, 2)
    assert all(s.window == 32 for s in models["tiny-mistral"].arch.layers)
    assert models["tiny-olmo2"].arch.qk_norm and not models["tiny-llama"].arch.qk_norm


@pytest.mark.parametrize("name", TINY_MODELS)
def test_kv_bytes_per_token_matches_the_cache(models, name):
    model = models[name]
    h = make_history(model)
    stored = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in h.kv if k is not None)
    assert stored == len(h) * model.arch.kv_bytes_per_token(model.dtype)


@pytest.mark.parametrize("name", TINY_MODELS)
def test_masked_generation_equals_the_uncached_reference(models, name):
    model = models[name]
    h = make_history(model)
    hidden = torch.zeros(len(h), dtype=torch.bool)
    hidden[h.span("A").start : h.span("A").end] = True
    want = reference_generate(model, h.input_ids.tolist(), suffix_ids(model, h, QUESTIONS[0]), hidden,
                              max_new_tokens=6)
    got = model.generate(h, QUESTIONS[0], access=kvprobe.Mask(h.span("A")), max_new_tokens=6)
    assert list(got.token_ids) == want


# --------------------------------------------------------------------------- family specifics


def test_interleaved_rerotation_matches_deepseeks_rope_in_float64(models):
    """R(p) then R(-g) equals R(p - g) in the complex (interleaved) layout DeepSeek's rope uses."""
    model = models["tiny-deepseek-v2"]
    inv_freq = model.hf.model.rotary_emb.inv_freq.double()
    x = torch.randn(1, 1, 30, 8, dtype=torch.float64)
    pos = torch.arange(30) + 40
    at_p = rotate_keys(x, pos, inv_freq, INTERLEAVED)
    back = rotate_keys(at_p, -torch.full((30,), 7), inv_freq, INTERLEAVED)
    assert float((back - rotate_keys(x, pos - 7, inv_freq, INTERLEAVED)).abs().max()) < 1e-12
    # the same rotation as the model's own apply_rotary_emb (complex multiplication), to fp32 rounding
    model_rot = model.adapter.apply_rope(model, 0, x.float(), pos)
    assert float((model_rot.double() - at_p).abs().max()) < 1e-5


def test_mla_zero_kv_zeroes_every_expanded_key_and_value(models):
    model = models["tiny-deepseek-v2"]
    h = make_history(model)
    state = Zero(h.span("A"), "kv").prepare(model, h)
    attn = model.hf.model.layers[1].self_attn
    latent, rope_key = state.kv[1]
    keys, values = attn.expand_kv(latent[:, :, h.span("A").start : h.span("A").end],
                                  rope_key[:, :, h.span("A").start : h.span("A").end])
    assert keys.abs().max() == 0 and values.abs().max() == 0
    with pytest.raises(OperationError, match="same latent"):
        Zero(h.span("A"), "k").prepare(model, h)


def test_gemma4_shared_layers_follow_their_source(models):
    model = models["tiny-gemma4"]
    h = make_history(model)
    assert h.kv[4] == (None, None) and h.kv[5] == (None, None)
    with pytest.raises(OperationError, match="no rows of its own"):
        Zero(h.span("A"), "kv", layers=[4]).prepare(model, h)
    state = Zero(h.span("A"), "kv", layers=[3, 4]).prepare(model, h)  # layer 4 reads layer 3's rows
    a = h.span("A")
    assert state.kv[3][0][:, :, a.start : a.end].abs().max() == 0
    assert torch.equal(state.kv[2][0], h.kv[2][0])
    # a mask on the shared layers alone changes the answer: they attend with their own masks
    full = model.score(h, QUESTIONS[0], ["Room 18"])
    masked = model.score(h, QUESTIONS[0], ["Room 18"], access=kvprobe.Mask(h.span("B"), layers=[4, 5]))
    assert abs(full.logprobs[0] - masked.logprobs[0]) > 1e-4
