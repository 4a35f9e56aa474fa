"""Readouts read from a real feature store of a tiny model: hand-computed s_K and d_V, evaluation, transfer, CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

import kvprobe
from kvprobe.extract import FeatureStore, StoreError, extract
from kvprobe.readouts.evaluate import evaluate_group, features, fixed_scores, nearest, probe_depths, transfer
from kvprobe.readouts.report import write_group_report
from kvprobe.decoding import suffix_ids
from kvprobe.reference import reference_score
from kvprobe.studies.recognition.loo import signed_loo
from kvprobe.studies.datasets.recognition import generate_records, generate_role_pairs
from kvprobe.studies.recognition.questions import loo_items


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Records of tiny-llama and tiny-qwen3 (same tokenizer and widths) and role pairs of tiny-llama, float32."""
    path = tmp_path_factory.mktemp("store") / "recognition.h5"
    records = generate_records()
    for name in ("tiny-llama", "tiny-qwen3"):
        extract(kvprobe.load_model(name), "records", records, path, dtype="float32", progress=False)
    llama, pairs = kvprobe.load_model("tiny-llama"), generate_role_pairs()[:150]
    extract(llama, "role-pairs", pairs, path, dtype="float32", progress=False,
            case_scores={"signed_loo": lambda m: signed_loo(m, loo_items(pairs))})
    return path


def hand_key_similarity(model, a_text, b_text):
    """s_K from the prefilled caches of A and B (independent of the store and of readouts.fixed)."""
    def keys(text):
        h = model.prefill(kvprobe.Prompt([("R", text)], chat=False))
        span = h.span("R")
        return {layer: h.kv[layer][0][0, :, span.start : span.end].double().numpy() for layer in model.arch.kv_layers}

    ka, kb = keys(a_text), keys(b_text)
    total = 0.0
    for layer in model.arch.kv_layers:
        heads = ka[layer].shape[0]
        acc = 0.0
        for h in range(heads):
            a = ka[layer][h] / np.maximum(np.linalg.norm(ka[layer][h], axis=1, keepdims=True), 1e-8)
            b = kb[layer][h] / np.maximum(np.linalg.norm(kb[layer][h], axis=1, keepdims=True), 1e-8)
            c = a @ b.T
            acc += c.max(axis=1).mean() + c.max(axis=0).mean()
        total += min(1.0, max(-1.0, acc / (2 * heads)))
    return total / len(model.arch.kv_layers)


def hand_value_distance(model, a_text, b_text):
    def pooled(text):
        h = model.prefill(kvprobe.Prompt([("R", text)], chat=False))
        span = h.span("R")
        return {layer: h.kv[layer][1][0, :, span.start : span.end].double().mean(dim=1).numpy()
                for layer in model.arch.kv_layers}

    va, vb = pooled(a_text), pooled(b_text)
    per_layer = [np.sqrt(np.mean((va[l] - vb[l]) ** 2)) / max(np.sqrt(np.mean(vb[l] ** 2)), 1e-6)
                 for l in model.arch.kv_layers]
    return float(np.mean(per_layer))


def test_store_readouts_reproduce_hand_computed_scores(store):
    model = kvprobe.load_model("tiny-llama")
    cases = generate_records()
    with FeatureStore(store) as s:
        scores = fixed_scores(s["tiny-llama/records"])
    for i in (0, 3, 251, 569):
        assert scores["key_similarity"][i] == pytest.approx(hand_key_similarity(model, cases[i].a_text,
                                                                                 cases[i].b_text), abs=1e-5)
        assert scores["value_distance"][i] == pytest.approx(hand_value_distance(model, cases[i].a_text,
                                                                                 cases[i].b_text), rel=1e-5)


def test_probe_depths_and_features(store):
    assert probe_depths(30) == [7, 15, 22, 29] and probe_depths(36) == [9, 18, 27, 35]
    assert nearest(2, [1, 3]) == 1 and nearest(3, [1, 3, 5]) == 3
    with FeatureStore(store) as s:
        g = s["tiny-llama/records"]
        assert features(g, "joint_kv").shape == (570, 4 * 2 * 2 * 16)
        assert features(g, "separate_kv").shape == (570, 2 * 4 * 2 * 2 * 16)
        assert features(g, "joint_hidden").shape == (570, 4 * 64)


def test_records_evaluation_and_report(store, tmp_path):
    with FeatureStore(store) as s:
        r = evaluate_group(s["tiny-llama/records"], draws=500)
    assert r["n_cases"] == {"train": 180, "dev": 90, "test": 300, "test_role": 100, "test_groups": 50}
    role = r["role_auc"]["auc"]
    assert {"fixed d_V", "joint K/V probe", "pairwise interaction probe"} <= set(role)
    assert abs(role["surface token jaccard"]["auc"] - 0.5) < 0.05  # role swaps share their words by design
    control = r["shuffled_label_control"]["role_auc"]
    assert control["permutations"] == 20 and control["lo"] <= 0.5 <= control["hi"]
    assert abs(control["mean"] - 0.5) < 0.05
    assert all(c["C"] in (0.01, 0.1, 1.0, 10.0) for k, c in r["choices"].items() if "probe" in k)
    out = write_group_report(r, tmp_path / "out")
    assert "role swaps vs role confirmations" in (out / "report.md").read_text()
    assert json.loads((out / "readouts.json").read_text())["group"] == "tiny-llama/records"
    assert (out / "figure.png").stat().st_size > 10_000


def test_role_pairs_evaluation(store):
    with FeatureStore(store) as s:
        r = evaluate_group(s["tiny-llama/role-pairs"], draws=300)
    assert r["n_cases"] == {"pairs": 150, "matching": 100, "groups": 50}
    assert set(r["matching_macro_auc"]["auc"]) >= {"key similarity s_K", "surface token jaccard"}
    assert set(r["replacement_macro_auc"]["auc"]) >= {"value distance d_V", "reversed d_V", "signed LOO (oracle reference)"}


def test_signed_loo_equals_uncached_reference_scores():
    """s_LOO = M(mask A) - M(full) with M from uncached transformers forwards (kvprobe.reference)."""
    model = kvprobe.load_model("tiny-qwen3")
    items = loo_items(generate_records()[:5])
    got = signed_loo(model, items, batch_cases=2)
    for item, value in zip(items, got):
        h = model.prefill(kvprobe.Prompt([("A", item.a_text), ("B", item.b_text)], chat=True, sep="\n"))
        hidden = torch.zeros(len(h), dtype=torch.bool)
        hidden[h.span("A").start : h.span("A").end] = True
        ids, suffix = h.input_ids.tolist(), suffix_ids(model, h, item.question)

        def margin(mask):
            ref, alt = (model.tokenizer(t, add_special_tokens=False)["input_ids"] for t in (item.reference,
                                                                                          item.alternative))
            return reference_score(model, ids, suffix, ref, mask) - reference_score(model, ids, suffix, alt, mask)

        assert value == pytest.approx(margin(hidden) - margin(None), abs=1e-3)


def test_transfer_between_checkpoints_with_the_same_tokens(store):
    with FeatureStore(store) as s:
        r = transfer(s["tiny-llama/records"], s["tiny-qwen3/records"], draws=300)
        assert set(r["role_auc"]["auc"]) == {"in-checkpoint", "transferred"}
        with pytest.raises(StoreError, match="identical cases and token ids"):
            transfer(s["tiny-llama/records"], s["tiny-llama/role-pairs"])


def test_cli_extract_and_readout_end_to_end(tmp_path, capsys):
    env = dict(os.environ, PYTHONWARNINGS="ignore")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "kvprobe.cli", *args], capture_output=True, text=True,
                              env=env, timeout=900)

    path = tmp_path / "s.h5"
    proc = cli("extract", "--model", "tiny-llama", "--dataset", "records", "--out", str(path), "--quiet", "--no-loo")
    assert proc.returncode == 0, proc.stderr
    # The refusals in process (a subprocess start costs seconds; the two runs above and below are the real CLI).
    from kvprobe.cli import main

    assert main(["extract", "--model", "tiny-llama", "--dataset", "records", "--out", str(path), "--quiet",
                 "--no-loo"]) == 2
    assert "already holds tiny-llama/records" in capsys.readouterr().err
    proc = cli("readout", "--store", str(path), "--out", str(tmp_path / "r"), "--draws", "200", "--quiet",
               "--readout", "fixed")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r" / "tiny-llama" / "records" / "report.md").exists()
    assert main(["readout", "--store", str(tmp_path / "missing.h5"), "--out", str(tmp_path / "r")]) == 2
    assert "no feature store" in capsys.readouterr().err
