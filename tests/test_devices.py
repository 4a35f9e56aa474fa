"""Devices and dtypes: what a GPU run needs, checked on a CPU.

* The device guard (tests/conftest.py ``tensors_made_on_meta``): every registered condition runs in
  one batch with torch's default device set to ``meta``, so a tensor made without the model's device
  fails here as it would on CUDA. (The verify matrix and every study's small run also run under it:
  tests/test_architectures.py, tests/test_study_contract.py.)
* bf16 and fp16: prefill, digest, verify (tolerances from the dtype's own error against a float32
  twin of the same weights, ``kvprobe.tools.verify.precision_floor``).
* The history digest on every dtype; the device-side checksum used off the CPU.
* ``--device`` / ``--dtype`` on the command line; ``kvprobe bench gpu`` end to end on a CPU.
"""

from __future__ import annotations

import json

import pytest
import torch

import kvprobe
from conftest import QUESTIONS, make_history, tensors_made_on_meta
from kvprobe.history import kv_digest, tensor_checksum
from kvprobe.interventions import CONDITIONS, parse_condition
from kvprobe.tools.verify import verify_model
from kvprobe.selection import SelectionAccess

CANDIDATES = ['{"answer": "Room 18"}', '{"answer": "Room 12"}']


def test_every_registered_condition_runs_in_one_batch_under_the_device_guard(llama):
    h = make_history(llama)
    access = {name: parse_condition(c.spec(name), h) for name, c in CONDITIONS.items()}
    scored = {k: a for k, a in access.items() if not isinstance(a, SelectionAccess)}  # those score candidates
    with tensors_made_on_meta():
        scores = llama.score(h, QUESTIONS[0], CANDIDATES, access=scored)
        answers = llama.generate(h, QUESTIONS, access=access, max_new_tokens=3)
    assert set(answers) == set(CONDITIONS) and set(scores) == set(scored) and len(scored) >= 18
    assert all(len(a) == 2 and a[0].n_tokens >= 1 for a in answers.values())
    assert h.check_digest()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_checksum_sees_one_changed_element_and_a_swap(dtype):
    torch.manual_seed(0)
    for n in (4096, 4097):  # whole 1024-wide rows, and a padded last row
        t = torch.randn(n).to(dtype)
        base = tensor_checksum(t)
        changed = t.clone()
        changed[n - 1] = -changed[n - 1] if changed[n - 1] != 0 else 1
        swapped = t.clone()
        swapped[[3, 2500]] = swapped[[2500, 3]]
        assert not torch.equal(tensor_checksum(changed), base)
        assert not torch.equal(tensor_checksum(swapped), base)
        assert torch.equal(tensor_checksum(t.clone()), base)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_history_digest_catches_a_write(dtype):
    model = kvprobe.load_model("tiny-llama", dtype=dtype)
    h = make_history(model)
    assert h.kv[0][0].dtype == dtype and h.check_digest()
    assert kv_digest(h.kv) == h.digest
    h.kv[1][1][0, 0, 5, 0] += 1
    assert not h.check_digest()


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3", "tiny-gemma3", "tiny-deepseek-v2"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_verify_passes_in_low_precision(name, dtype):
    """Every check, against tolerances set by the dtype's own error (a float32 twin of the same weights)."""
    model = kvprobe.load_model(name, dtype=dtype)
    results = verify_model(model)
    failed = [(r.check, r.value, r.tolerance) for r in results if not r.passed]
    assert not failed
    # the tolerances really are the dtype's, not float32's (a float32 tolerance would fail these checks)
    assert max(r.tolerance for r in results if r.check == "cached_equals_one_pass") > 1e-3


def test_low_precision_tolerance_still_catches_a_wrong_mask(monkeypatch):
    """A mask hiding the wrong positions moves bf16 logits far beyond the precision floor."""
    from kvprobe.tools.verify import precision_floor, scaled_tolerance

    model = kvprobe.load_model("tiny-llama", dtype=torch.bfloat16)
    h = make_history(model)
    floor = precision_floor(model, h, QUESTIONS[0])
    assert 0 < floor.logits and floor.logit_tolerance == 2 * floor.logits
    right = model.score(h, QUESTIONS[0], CANDIDATES, access=kvprobe.Mask(h.span("A")))
    wrong = model.score(h, QUESTIONS[0], CANDIDATES, access=kvprobe.Mask(h.span("B")))
    assert max(abs(a - b) for a, b in zip(right.logprobs, wrong.logprobs)) > scaled_tolerance(floor=floor.logit_tolerance)


def test_device_and_dtype_options(capsys, tmp_path):
    from kvprobe.cli import main

    if not torch.cuda.is_available():  # refused by name before any model loads
        assert main(["verify", "--model", "no-such-model", "--device", "cuda"]) == 2
        assert "--device 'cuda': torch sees no CUDA device" in capsys.readouterr().err
    assert main(["verify", "--model", "no-such-model", "--device", "tpu:x"]) == 2
    assert "not a torch device" in capsys.readouterr().err
    assert main(["verify", "--model", "tiny-llama", "--dtype", "bfloat16", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)
    assert results and all(r["passed"] for r in results)
    assert main(["run", "quantity", "--model", "tiny-llama", "--dtype", "float16", "--n-groups", "1",
                 "--max-new-tokens", "2", "--no-operations", "--out", str(tmp_path / "q"), "--quiet"]) == 0
    config = json.loads((tmp_path / "q" / "config.json").read_text())
    assert config["model"]["dtype"] == "torch.float16" and "device" not in config["model"]  # CPU runs as before


def test_gpu_bench_runs_on_the_cpu(tmp_path):
    """``kvprobe bench gpu``'s cells on a small model of the same architecture as random-llama-3.1-8b."""
    from kvprobe.tools.bench.gpu import run_gpu_bench

    model = kvprobe.load_model("random-llama-mini", dtype=torch.float32)
    result = run_gpu_bench(model, tmp_path, lengths=(200,), rows=3, new_tokens=3, repeats=1, progress=False)
    cells = {c["measure"]: c for c in result["cells"]}
    assert set(cells) == {"prefill", "decode-3", "mask", "rebuild", "recompute", "compact"}
    assert cells["prefill"]["last_layer_k_rel_diff"] < 1e-5
    assert cells["decode-3"]["first_tokens_agree"]
    assert all(cells[m]["first_token_agrees"] for m in ("mask", "rebuild", "recompute"))
    assert all(c["kvprobe_s"] > 0 for c in cells.values())
    saved = json.loads((tmp_path / "gpu.json").read_text())
    assert saved["cells"] == result["cells"] and "| prefill |" in (tmp_path / "gpu.md").read_text()


def test_extraction_with_edits_runs_under_the_device_guard(llama, tmp_path):
    """The feature store's capture (K, V, hidden states) and its cache edits."""
    from kvprobe.extract import FeatureStore, extract
    from kvprobe.studies.datasets.recognition import generate_records
    from kvprobe.studies.recognition.edits import parse_edits

    cases = generate_records()[:2]
    path = tmp_path / "store.h5"
    with tensors_made_on_meta():
        extract(llama, "records", cases, path, batch_size=4, token_level=("K", "V"), progress=False)
        for edit in parse_edits("rebuild,compact"):
            extract(llama, "records", cases, path, batch_size=4, progress=False, edit=edit)
    with FeatureStore(path) as store:
        assert len(store.groups()) == 3


def test_output_layer_reads_a_contiguous_input_on_the_last_positions():
    """transformers slices the last positions for ``logits_to_keep`` (a strided view), which torch's CPU
    bfloat16 matmul took ~200x slower than a contiguous copy: the output layer of a kvprobe model reads a
    contiguous input (registered once however many Models wrap it), with the same logits."""
    model = kvprobe.load_model("tiny-llama", dtype="bfloat16")
    again = kvprobe.Model(model.hf, model.tokenizer, name="again")
    seen = []
    head = model.hf.get_output_embeddings()
    handle = head.register_forward_hook(lambda mod, args, out: seen.append(args[0].is_contiguous()))
    try:
        h = model.prefill(kvprobe.Prompt([("A", "The box is red and the lid is blue.")], chat=False))
        got = again.score(h, "What color is the box?", [" red", " blue"],  # two rows: a strided slice
                          access={"full": kvprobe.Full(), "mask": kvprobe.Mask(kvprobe.TokenSpan(0, 3))})
    finally:
        handle.remove()
    assert seen and all(seen)
    assert len(head._forward_pre_hooks) == 1
    ids = torch.tensor([[3, 4, 5, 6, 7]])
    with torch.no_grad():
        sliced = model.hf(ids, logits_to_keep=1).logits[:, -1]
        whole = model.hf(ids).logits[:, -1]
    assert torch.equal(sliced, whole)
    assert [g.candidates for g in got.values()] == [(" red", " blue")] * 2
