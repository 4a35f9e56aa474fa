"""`kvprobe verify` on every tiny family, and end-to-end CLI runs in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys


from kvprobe.verify import verify_model

CHECKS = {"nnsight_mask_equals_explicit_4d", "empty_mask_equals_full", "prefix_digest_unchanged",
          "masked_attention_zero", "cached_equals_one_pass", "condition_order_invariant"}
OPERATION_CHECKS = {"compact_keys_equal_rope_at_new_positions", "rebuild_equals_one_pass", "refresh_equals_one_pass",
                    "online_mask_equals_one_pass", "text_recompute_equals_fresh_prefill",
                    "drop_original_positions_equals_mask", "zero_bias_equals_full",
                    "zero_k_changes_logits_keeps_positions"}


def test_verify_passes_on_tiny_family(tiny_model):
    results = verify_model(tiny_model)
    assert {r.check for r in results} == CHECKS | OPERATION_CHECKS
    failed = [r for r in results if not r.passed]
    assert not failed, failed
    equivalences = [r for r in results if r.check != "zero_k_changes_logits_keeps_positions"]
    assert all(r.value <= 1e-4 for r in equivalences)
    zero_k = next(r for r in results if r.check == "zero_k_changes_logits_keeps_positions")
    assert zero_k.value >= 1e-3


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "kvprobe.cli", *args], capture_output=True, text=True,
                          env=env, timeout=600)


def test_cli_verify_json():
    proc = _cli("verify", "--model", "tiny-gemma3", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["check"] for r in rows} == CHECKS | OPERATION_CHECKS
    assert all(set(r) == {"check", "model", "passed", "value", "tolerance"} for r in rows)
    assert all(r["passed"] and r["model"] == "tiny-gemma3" for r in rows)


def test_cli_unknown_model_is_a_clear_error():
    proc = _cli("verify", "--model", "no-such-model-xyz", "--json")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "no-such-model-xyz" in proc.stderr


def test_cli_demo_on_tiny_model_prints_all_conditions():
    proc = _cli("demo", "--model", "tiny-llama", "--max-new-tokens", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["condition"] for r in rows[:5]] == ["full", "source", "source-control", "number", "number-control"]
    assert {r["query"] for r in rows} == {"current", "unrelated"}
    source, control = rows[1], rows[2]
    assert source["masked_tokens"] == control["masked_tokens"] > 0


def test_cli_help_explains_options():
    proc = _cli("verify", "--help")
    assert proc.returncode == 0
    assert "--json" in proc.stdout and "registry name" in proc.stdout


def test_verify_detects_an_off_by_one_mask(monkeypatch):
    """Shift every hidden column by one token: the checks against references must fail."""
    import torch

    import kvprobe
    import kvprobe.decoding as decoding

    real = decoding.fork_rows

    def shifted(states):
        for s in states:
            s.hidden = {layer: torch.roll(h, 1) for layer, h in s.hidden.items()}
        return real(states)

    monkeypatch.setattr(decoding, "fork_rows", shifted)  # the traced path; references stay correct
    results = {r.check: r for r in verify_model(kvprobe.load_model("tiny-llama"), operations=False)}
    failed = {name for name, r in results.items() if not r.passed}
    assert failed == {"nnsight_mask_equals_explicit_4d", "masked_attention_zero", "cached_equals_one_pass"}
