"""Model sources, registry, weight cache and tiny models (kvprobe.loading, kvprobe.model_registry,
kvprobe.weight_files, kvprobe.tiny)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kvprobe.loading import load_weights
from kvprobe.model_registry import DEFAULT_MODEL, REGISTRY, ModelNotFoundError, list_models
from kvprobe.weight_files import NotAGGUFError, cache_dir, file_sha256, state_dict_sha256
from kvprobe.tiny import TINY_MODELS, build_tiny, tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]
TEXT = 'The record\'s color was changed to "blue" \u2014 caf\u00e9 \u6771\u4eac at 3:45pm.\n\n  New line, tabs\tend'


# ------------------------------------------------------------------------ tiny models


@pytest.mark.parametrize("name", TINY_MODELS)
def test_tiny_builds_are_identical(name):
    a, tok = build_tiny(name)
    b, _ = build_tiny(name)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not a.training and not any(p.requires_grad for p in a.parameters())
    assert a.config.vocab_size == len(tok)
    assert a.config.eos_token_id == tok.eos_token_id and a.config.pad_token_id == tok.pad_token_id


def test_tiny_build_leaves_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_tiny("tiny-llama")
    assert torch.equal(torch.rand(3), expected)


def test_tiny_models_mask_and_window_change_outputs():
    tok = tiny_tokenizer()
    ids = torch.tensor([tok(TEXT * 3).input_ids])
    T = ids.shape[1]
    assert T > 40
    neg = torch.finfo(torch.float32).min
    causal = torch.full((1, 1, T, T), neg).triu(1)
    hidden = causal.clone()
    hidden[..., 20:, 5:15] = neg
    for name in ("tiny-llama", "tiny-qwen3"):
        model, _ = build_tiny(name)
        with torch.no_grad():
            full = model(ids).logits[0, -1]
            masked = model(ids, attention_mask=hidden).logits[0, -1]
            same = model(ids, attention_mask=causal).logits[0, -1]
        assert torch.allclose(full, same, atol=1e-5)
        assert (full - masked).abs().max() > 0.1, name
        assert full.std() > 0.3  # not degenerate
    gemma, _ = build_tiny("tiny-gemma3")
    types = gemma.config.layer_types
    assert "sliding_attention" in types and "full_attention" in types
    assert gemma.config.sliding_window < T
    with torch.no_grad():
        windowed = gemma(ids).logits[0, -1]
        gemma.config.sliding_window = 4096
        for layer in gemma.model.layers:
            if getattr(layer.self_attn, "sliding_window", None):
                layer.self_attn.sliding_window = 4096
        unwindowed = gemma(ids).logits[0, -1]
    assert (windowed - unwindowed).abs().max() > 0.1


def test_tiny_tokenizer_offsets_cover_text_exactly():
    tok = tiny_tokenizer()
    assert tok.is_fast
    assert 900 <= len(tok) <= 1100
    enc = tok(TEXT, return_offsets_mapping=True, add_special_tokens=False)
    assert tok.decode(enc.input_ids) == TEXT
    # Offsets are contiguous (multi-byte characters may share one span) and cover every character.
    pos = 0
    for start, end in enc.offset_mapping:
        assert start in (pos, end) or start <= pos <= end, (start, end, pos)
        pos = max(pos, end)
    spans = [(s, e) for s, e in enc.offset_mapping]
    assert spans[0][0] == 0 and pos == len(TEXT)
    starts = sorted({s for s, _ in spans})
    ends = sorted({e for _, e in spans})
    assert starts[1:] == ends[:-1]  # each span starts where the previous one ended
    # The word " blue" as a substring maps to tokens whose offsets reproduce it.
    b = TEXT.index("blue")
    covered = "".join(TEXT[s:e] for s, e in dict.fromkeys(spans) if s < b + 4 and e > b)
    assert "blue" in covered


def test_tiny_tokenizer_special_tokens_and_chat_template():
    tok = tiny_tokenizer()
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>"
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert len(tok(special, add_special_tokens=False).input_ids) == 1
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is the color?"}]
    text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nWhat is the color?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    no_prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=False)
    assert not no_prompt.endswith("assistant\n")


def test_tiny_tokenizer_is_deterministic_across_processes():
    code = (
        "import hashlib; from kvprobe.tiny import tiny_tokenizer; "
        "print(hashlib.sha256(tiny_tokenizer().backend_tokenizer.to_str().encode()).hexdigest())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         env={**__import__("os").environ, "PYTHONPATH": str(ROOT)}, check=True)
    import hashlib

    here = hashlib.sha256(tiny_tokenizer().backend_tokenizer.to_str().encode()).hexdigest()
    assert out.stdout.strip() == here


def test_load_weights_tiny():
    lw = load_weights("tiny-gemma3")
    assert lw.source == "tiny" and lw.name == "tiny-gemma3"
    assert re.fullmatch(r"[0-9a-f]{64}", lw.weight_hash)
    # The hash is a fingerprint of the weights, not of the call: a second build gives it again, and moving
    # one element of the first or the last tensor by one ulp, or another dtype, changes it.
    rebuilt = build_tiny("tiny-gemma3")[0]
    assert state_dict_sha256(rebuilt) == lw.weight_hash
    names = sorted(rebuilt.state_dict())
    for name in (names[0], names[-1]):
        copy = build_tiny("tiny-gemma3")[0]
        with torch.no_grad():
            t = copy.state_dict()[name].view(-1)
            t[0] = torch.nextafter(t[0], torch.tensor(float("inf"), dtype=t.dtype))
        assert state_dict_sha256(copy) != lw.weight_hash, name
    assert state_dict_sha256(build_tiny("tiny-gemma3")[0].to(torch.float64)) != lw.weight_hash
    assert lw.weight_hash != load_weights("tiny-llama").weight_hash
    bf = load_weights("tiny-llama", dtype=torch.bfloat16)
    assert next(bf.hf.parameters()).dtype == torch.bfloat16


def test_dtypes_are_taken_by_name_and_others_refused():
    from kvprobe import cli
    from kvprobe.loading import MODEL_DTYPES, model_dtype

    assert tuple(MODEL_DTYPES) == cli.MODEL_DTYPES  # the CLI's --dtype choices (it imports no torch)
    assert next(load_weights("tiny-llama", dtype="float16").hf.parameters()).dtype == torch.float16
    for bad in ("bf16", torch.float64):
        with pytest.raises(ValueError, match="a model is loaded in one of float32, bfloat16, float16"):
            model_dtype(bad)


# ---------------------------------------------------------------------------- sources


def test_unknown_name_raises_model_not_found(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # never wait on the network in a test
    with pytest.raises(ModelNotFoundError) as err:
        load_weights("no-such-model-xyz")
    msg = str(err.value)
    assert "no-such-model-xyz" in msg
    for name in REGISTRY:
        assert name in msg
    assert ".gguf" in msg and "Hub id" in msg and "config.json" in msg


def test_invalid_hub_id_fails_without_network():
    with pytest.raises(ModelNotFoundError, match="not a model"):
        load_weights("not a model!")


def test_missing_gguf_path_raises_model_not_found(tmp_path):
    with pytest.raises(ModelNotFoundError, match="missing.gguf"):
        load_weights(str(tmp_path / "missing.gguf"))


def test_non_gguf_file_raises_not_a_gguf(tmp_path):
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"PK\x03\x04 definitely not a gguf")
    with pytest.raises(NotAGGUFError) as err:
        load_weights(str(fake))
    assert str(fake) in str(err.value)
    assert isinstance(err.value, ValueError)


def test_directory_without_config_raises(tmp_path):
    with pytest.raises(ModelNotFoundError, match="config.json"):
        load_weights(str(tmp_path))


def test_local_dir_round_trip(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPROBE_CACHE", str(tmp_path / "cache"))
    model, tok = build_tiny("tiny-qwen3")
    model.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    lw = load_weights(str(tmp_path / "m"))
    assert lw.source == "local-dir" and lw.tokenizer.is_fast
    ids = torch.tensor([tok(TEXT).input_ids])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, lw.hf(ids).logits)
    assert lw.tokenizer(TEXT).input_ids == tok(TEXT).input_ids
    assert lw.weight_hash == load_weights(str(tmp_path / "m")).weight_hash


def test_cache_dir_honors_env(tmp_path, monkeypatch):
    monkeypatch.setenv("KVPROBE_CACHE", str(tmp_path / "kv"))
    assert cache_dir() == tmp_path / "kv"
    monkeypatch.delenv("KVPROBE_CACHE")
    assert cache_dir() == Path.home() / ".cache" / "kvprobe"


def test_file_hash_is_cached(tmp_path, monkeypatch):
    import hashlib

    monkeypatch.setenv("KVPROBE_CACHE", str(tmp_path / "cache"))
    f = tmp_path / "w.bin"
    f.write_bytes(b"abc" * 1000)
    assert file_sha256(f) == hashlib.sha256(b"abc" * 1000).hexdigest()
    assert len(list((tmp_path / "cache" / "hashes").iterdir())) == 1
    f.write_bytes(b"xyz" * 2000)  # size/mtime change invalidates the record
    assert file_sha256(f) == hashlib.sha256(b"xyz" * 2000).hexdigest()


def test_list_models():
    rows = list_models()
    names = [r["name"] for r in rows]
    assert names == list(REGISTRY)
    assert {"smollm2-135m-instruct", "gemma3-270m", "qwen2.5-coder-0.5b-instruct"} <= set(names)
    for r in rows:
        assert {"name", "kind", "installed", "location", "description"} <= r.keys()
        assert isinstance(r["installed"], bool) and r["location"] and r["description"]
    assert [r["name"] for r in rows if r.get("default")] == [DEFAULT_MODEL]


def test_uninstalled_registry_entry_explains_pull(tmp_path, monkeypatch):
    from kvprobe import model_registry

    monkeypatch.setenv("KVPROBE_CACHE", str(tmp_path))
    monkeypatch.setattr(model_registry, "_package_dir", lambda module: None)
    row = {r["name"]: r for r in list_models()}["gemma3-270m"]
    assert row["installed"] is False
    with pytest.raises(model_registry.ModelNotInstalledError, match="kvprobe models pull gemma3-270m"):
        load_weights("gemma3-270m")


# ------------------------------------------------------------------------ embedded


@pytest.mark.embedded
def test_embedded_default_cached_load_is_exact():
    """First load may dequantize the GGUF (~20 s) or hit the cache; the second must hit the cache."""
    first = load_weights(DEFAULT_MODEL)
    second = load_weights(DEFAULT_MODEL)
    assert second.extra["from_cache"] is True
    assert first.weight_hash == second.weight_hash and first.source == "registry-gguf"
    assert not hasattr(second.hf.config, "quantization_config")
    assert second.hf.config.tie_word_embeddings
    assert second.hf.lm_head.weight.data_ptr() == second.hf.get_input_embeddings().weight.data_ptr()
    ta, tb = first.tokenizer, second.tokenizer
    assert ta.is_fast and tb.is_fast
    assert ta.chat_template == tb.chat_template and ta.eos_token == tb.eos_token == "<|im_end|>"
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    text = tb.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert ta(text, return_offsets_mapping=True).data == tb(text, return_offsets_mapping=True).data
    ids = tb(text, return_tensors="pt", add_special_tokens=False).input_ids
    with torch.no_grad():
        la, lb = first.hf(ids).logits, second.hf(ids).logits
    assert (la - lb).abs().max().item() == 0.0
