"""The architecture inventory (paper L1247-1292): counted from configs on the meta device, checked against
real tiny models' cache shapes and parameters, and the paper's own S_KV arithmetic."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import kvprobe
from kvprobe.cli import main
from kvprobe.tiny import SHAPED_MODELS, TINY_MODELS
from kvprobe.tools.inventory import format_table, inventory, model_config, row_from_config

DOCS = Path(__file__).resolve().parents[1] / "docs" / "architectures.md"


@pytest.mark.parametrize("name", TINY_MODELS)
def test_rows_equal_the_loaded_model(name):
    """S_KV equals the cached tensors of a real prefill; parameters equal the real model's distinct tensors."""
    model = kvprobe.load_model(name)
    row = row_from_config(name, model_config(name))
    h = model.prefill(kvprobe.Prompt([("A", "one two three")], chat=False))
    cached = sum(t.shape[1] * t.shape[3] for kv in h.kv if kv is not None for t in kv if t is not None)
    assert row.kv_elements_per_token == cached
    assert row.kv_bytes_per_token_bf16 == 2 * cached
    distinct = {p.data_ptr(): p.numel() for p in model.hf.parameters()}
    assert row.parameters == sum(distinct.values())
    hf = model.hf
    assert row.tied_embeddings == (hf.get_output_embeddings().weight is hf.get_input_embeddings().weight)
    assert row.layers == model.arch.num_layers


def test_paper_arithmetic_and_active_experts():
    """S_KV = 2 L h_KV d_head for symmetric attention: 2 x 32 x 8 x 128 = 65,536 (the paper's Mistral 7B
    figure, L1284-1285, has the same shape); active = total - routed x (1 - k/E)."""
    rows = {r.name: r for r in inventory(["random-llama-3.1-8b", "tiny-qwen3-moe"])}
    assert rows["random-llama-3.1-8b"].kv_elements_per_token == 2 * 32 * 8 * 128 == 65_536
    assert rows["random-llama-3.1-8b"].attention == "GQA; 32 full" and rows["random-llama-3.1-8b"].heads == "32:8"
    moe = rows["tiny-qwen3-moe"]
    cfg = model_config("tiny-qwen3-moe")
    model = kvprobe.load_model("tiny-qwen3-moe").hf
    routed = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n or n.endswith(".experts"))
    assert routed > 0
    assert moe.active_parameters == moe.parameters - routed + routed * cfg.num_experts_per_tok // cfg.num_experts
    assert rows["random-llama-3.1-8b"].active_parameters is None


def test_cli_json_and_table(capsys, tmp_path):
    assert main(["models", "inventory", "tiny-llama", "tiny-gemma4", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["tiny-llama", "tiny-gemma4"]
    assert rows[1]["attention"].endswith("2 share K/V")
    out = tmp_path / "inventory.md"
    assert main(["models", "inventory", "tiny-llama", "--out", str(out)]) == 0
    assert out.read_text().splitlines()[2].startswith("| tiny-llama | llama | GQA; 4 full | 4 |")


def test_docs_table_is_current():
    """Every tiny and shaped model's row in the inventory block of docs/architectures.md is what the command
    prints now (registry rows need their weights installed, so CI checks only these)."""
    names = [*TINY_MODELS, *SHAPED_MODELS]
    want = format_table(inventory(names)).splitlines()
    text = DOCS.read_text()
    block = text[text.index("<!-- inventory -->"):text.index("<!-- end inventory -->")].splitlines()
    assert want[0] in block
    assert [line for line in block if re.match(r"\| (tiny|random)-", line)] == want[2:]
