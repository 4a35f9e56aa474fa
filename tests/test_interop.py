"""kvprobe beside the libraries its users already have (kvpress, TransformerLens, nnsight).

* kvprobe's attention functions take transformers' calling convention, so a wrapper that another library
  registers over every attention function after kvprobe is imported (kvpress does this on import, passing
  ``dropout`` by position) leaves every result unchanged;
* a trace that fails on entry (nnsight cannot read the block's source, as in code run by ``exec``: a
  notebook-like runner) leaves no forward context and no hook behind: later batches equal a fresh model's;
* a model changed under kvprobe (TransformerLens's ``TransformerBridge.boot_transformers(hf_model=m.hf)``
  calls ``m.hf.set_attn_implementation("eager")`` in place; a wrapper replacing an attention module; a forward
  hook left on one) is refused by name at the next forward (``kvprobe.model_guard``); a deliberate switch
  (``m.set_attn_implementation``, ``kvprobe.reference.attention_implementation``) works and equals eager;
* ``kvprobe run``'s progress bar counts cases from what is on disk, a batch's cases at once, with an ETA from
  the invocation's own rate, and keeps its elapsed time moving while a batch runs.
"""

from __future__ import annotations

import pytest
import torch
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import kvprobe
from kvprobe import Compose, Full, Mask, matched_control
from kvprobe.attention import GROUPED_EAGER, KVPROBE_SDPA
from kvprobe.decoding import suffix_ids
from kvprobe.model_guard import ModelChangedError
from kvprobe.reference import LOGIT_TOLERANCE, attention_implementation, reference_score
from kvprobe.forward_context import current_context
from kvprobe.interventions import HeadAblation, Patch, Zero

from conftest import QUESTIONS, make_history

CANDIDATES = ['{"answer": "Room 18"}', '{"answer": "Room 12"}']


@pytest.fixture(scope="module")
def llama(one_thread):
    return kvprobe.load_model("tiny-llama")


def _kvpress_style_wrapper(func, calls: list[str]):
    """What kvpress's ``attention_patch`` does to every registered attention function on import: a wrapper whose
    sixth parameter is ``dropout``, passed on by position, everything else by keyword."""

    def wrapper(module, query, key, value, attention_mask, dropout, **kwargs):
        calls.append(func.__name__)
        return func(module, query, key, value, attention_mask, dropout, **kwargs)

    return wrapper


def _results(model: kvprobe.Model) -> dict:
    h = make_history(model)
    source = Mask(h.span("A"), name="source")
    access = {"full": Full(), "source": source, "control": matched_control(h, source, "note"),
              "zero-heads": Zero(h.span("A"), layers=[0], heads=[0])}
    scores = model.score(h, QUESTIONS[0], CANDIDATES, access=access)
    answers = model.generate(h, QUESTIONS[0], access=access, max_new_tokens=5)
    return {name: (scores[name].logprobs, answers[name].token_ids) for name in access}


@pytest.mark.parametrize("impl", [KVPROBE_SDPA, GROUPED_EAGER])
def test_a_wrapper_registered_after_import_like_kvpress_changes_nothing(llama, impl):
    before = llama.hf.config._attn_implementation
    llama.set_attn_implementation(impl)
    original = ALL_ATTENTION_FUNCTIONS[impl]
    try:
        plain = _results(llama)
        calls: list[str] = []
        ALL_ATTENTION_FUNCTIONS[impl] = _kvpress_style_wrapper(original, calls)
        wrapped = _results(llama)
    finally:
        ALL_ATTENTION_FUNCTIONS[impl] = original
        llama.set_attn_implementation(before)
    assert calls, "the wrapper was never called: the test did not go through the registered function"
    for name, (logprobs, tokens) in plain.items():
        assert wrapped[name][1] == tokens, name
        assert wrapped[name][0] == pytest.approx(logprobs, abs=0.0), name


def _component_results(model: kvprobe.Model) -> dict:
    h = make_history(model)
    source = Mask(h.span("A"), name="source")
    access = {"full": Full(), "source": source, "zero-heads": Zero(h.span("A"), layers=[0], heads=[0]),
              "no-heads": HeadAblation(1, [0, 1]), "restored": Compose(source, Patch("full", layer=1))}
    return {name: s.logprobs for name, s in model.score(h, QUESTIONS[0], CANDIDATES, access=access).items()}


def test_a_trace_that_fails_on_entry_leaves_nothing_behind(llama):
    fresh = _component_results(kvprobe.load_model("tiny-llama"))
    h = make_history(llama)
    code = "with m.trace(h, q, access={'full': Full(), 'z': Zero(h.span('A'), heads=[0])}) as t:\n    t.row('z')\n"
    with pytest.raises(Exception, match="source"):  # nnsight: no source for <string>
        exec(code, {"m": llama, "h": h, "q": QUESTIONS[0], "Full": Full, "Zero": Zero})
    assert current_context().cache is None and not current_context().kv_source
    assert not llama.hf._forward_hooks, "the trace's logits hook stayed on the model"
    after = _component_results(llama)
    assert after.keys() == fresh.keys()
    for name in fresh:
        assert after[name] == pytest.approx(fresh[name], abs=1e-6), name


def _scores(model: kvprobe.Model, h) -> dict:
    source = Mask(h.span("A"), name="source")
    access = {"full": Full(), "source": source, "zero-heads": Zero(h.span("A"), layers=[0], heads=[0])}
    return {name: s.logprobs for name, s in model.score(h, QUESTIONS[0], CANDIDATES, access=access).items()}


def test_an_attention_switch_behind_kvprobes_back_is_refused_by_name_and_a_deliberate_one_works(one_thread):
    """What TransformerLens's bridge does to ``hf_model=m.hf`` (``force_eager_attention``: the public
    ``set_attn_implementation("eager")``, in place): every kvprobe forward then refuses, naming the change
    and the fix; after ``m.set_attn_implementation("eager")`` kvprobe runs under eager and equals a model
    loaded with eager attention and transformers' uncached eager reference."""
    m = kvprobe.load_model("tiny-llama")
    assert m.expected.attention == KVPROBE_SDPA
    h = make_history(m)
    m.hf.set_attn_implementation("eager")  # behind kvprobe's back
    message = r"attention implementation of tiny-llama was changed from 'kvprobe' to 'eager' outside kvprobe"
    with pytest.raises(ModelChangedError, match=message) as refused:
        m.score(h, QUESTIONS[0], CANDIDATES)
    assert "TransformerBridge" in str(refused.value) and "m.set_attn_implementation('kvprobe')" in str(refused.value)
    for call in (lambda: m.generate(h, QUESTIONS[0], max_new_tokens=2), lambda: make_history(m),
                 lambda: m.run_with_cache(h, QUESTIONS[0]), lambda: m.trace(h, QUESTIONS[0])):
        with pytest.raises(ModelChangedError, match=message):
            call()
    assert h.check_digest()  # the refusal came before anything ran

    m.set_attn_implementation("eager")  # deliberately
    got = _scores(m, h)
    eager = kvprobe.load_model("tiny-llama", attn_implementation="eager")
    assert eager.expected.attention == "eager"
    want = _scores(eager, make_history(eager))
    for name in want:
        assert got[name] == pytest.approx(want[name], abs=LOGIT_TOLERANCE), name  # (histories: kvprobe vs eager)
    q = suffix_ids(m, h, QUESTIONS[0])
    for i, candidate in enumerate(CANDIDATES):
        ids = m.tokenizer(candidate, add_special_tokens=False)["input_ids"]
        assert abs(got["full"][i] - reference_score(m, h.input_ids.tolist(), q, ids)) <= LOGIT_TOLERANCE

    m.set_attn_implementation(KVPROBE_SDPA)  # and back: kvprobe's own attention again
    assert _scores(m, h)["full"] == pytest.approx(got["full"], abs=1e-4)


def test_a_deliberate_switch_through_the_references_restores_the_expectation(llama):
    """``kvprobe.reference.attention_implementation`` (verify, bench) switches on purpose: kvprobe's forwards
    run inside the block, and afterwards both the implementation and the expectation are as before."""
    h = make_history(llama)
    before = _scores(llama, h)
    with attention_implementation(llama, GROUPED_EAGER):
        assert llama.expected.attention == GROUPED_EAGER
        inside = _scores(llama, h)
    assert llama.hf.config._attn_implementation == llama.expected.attention == KVPROBE_SDPA
    for name in before:
        assert inside[name] == pytest.approx(before[name], abs=1e-4), name
    assert _scores(llama, h) == before


def test_a_foreign_hook_or_a_replaced_attention_module_is_refused_by_layer(one_thread):
    """A torch forward hook another library left on an attention module (nnsight and kvprobe's own edits
    register none outside kvprobe's contexts), or an attention module replaced by a wrapper (TransformerLens's
    bridge components), is refused naming the layers; undone, the model works again with the same results."""
    m = kvprobe.load_model("tiny-llama")
    h = make_history(m)
    want = _scores(m, h)

    def foreign_hook(_module, _args, output):
        return output

    handle = m.hf.model.layers[2].self_attn.register_forward_hook(foreign_hook)
    with pytest.raises(ModelChangedError, match=r"hooks were registered outside kvprobe .* layers 2 \(.*foreign_hook\)"):
        _scores(m, h)
    handle.remove()
    assert _scores(m, h) == want

    original = m.hf.model.layers[1].self_attn

    class Wrapper(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args, **kwargs):
            return self.inner(*args, **kwargs)

    m.hf.model.layers[1].self_attn = Wrapper(original)
    with pytest.raises(ModelChangedError, match=r"attention modules of tiny-llama's layers 1 \(Wrapper\) were replaced"):
        m.trace(h, QUESTIONS[0])
    m.hf.model.layers[1].self_attn = original
    assert _scores(m, h) == want
    # kvprobe's own trace registers its edit hooks after the check and removes them on exit
    with m.trace(h, QUESTIONS[0], access={"full": Full(), "z": Zero(h.span("A"), layers=[2], heads=[0])}):
        pass
    assert not m.hf.model.layers[2].self_attn._forward_pre_hooks and _scores(m, h) == want


def test_the_run_progress_counts_cases_from_disk_at_the_invocations_own_rate(llama, tmp_path, monkeypatch):
    """Issue 48 item 7: a quantity run of 2 batches of 2 cases, interrupted after its first batch and resumed.
    The resumed bar starts at the 2 cases on disk, shows both cases of its batch at once (no 3/4: several
    updates inside tqdm's redraw interval used to show only the first), computes its rate from its own cases
    and seconds (2 cases here, not the 4 it shows), and is redrawn while its batch runs."""
    import threading
    import time

    import tqdm

    from kvprobe.studies.common import progress
    from kvprobe.studies.common.runner import read_rows, run_study
    from kvprobe.studies.quantity.study import QuantityStudy

    bars, shown = [], []

    class Recording(tqdm.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            bars.append(self)

        def refresh(self, *args, **kwargs):  # every redraw: what the line says
            shown.append((len(bars), self.n, self.format_meter(**self.format_dict)))
            return super().refresh(*args, **kwargs)

    monkeypatch.setattr(tqdm, "tqdm", Recording)
    monkeypatch.setattr(progress, "REFRESH_SECONDS", 0.02)
    study = QuantityStudy(n_groups=2, max_new_tokens=2, operations=False, cases_per_batch=2)
    run_cases, calls = study.run_cases, []

    def interrupted_after_one_batch(model, batch, state):
        calls.append(len(batch))
        if len(calls) == 2:
            raise KeyboardInterrupt
        time.sleep(0.3)  # a batch that takes a while: the bar is redrawn meanwhile
        return run_cases(model, batch, state)

    monkeypatch.setattr(study, "run_cases", interrupted_after_one_batch)
    with pytest.raises(KeyboardInterrupt):
        run_study(study, llama, tmp_path)
    first = bars[0]
    assert (first.initial, first.n, first.total) == (0, 2, 4)
    assert not any(t.name == "kvprobe-progress" for t in threading.enumerate())  # closed by the interrupt too
    assert len({row["case_id"] for row in read_rows(tmp_path)}) == 2

    calls.clear()
    monkeypatch.setattr(study, "run_cases", lambda model, batch, state: (time.sleep(0.3), run_cases(model, batch, state))[1])
    run_study(study, llama, tmp_path)
    resumed = bars[1]
    assert (resumed.initial, resumed.n, resumed.total) == (2, 4, 4)
    lines = [line for bar, n, line in shown if bar == 2]
    assert lines[0].split("|")[-1].strip().startswith("2/4") and any(line.startswith("quantity") for line in lines)
    counts = [n for bar, n, _ in shown if bar == 2]
    assert 3 not in counts and counts.count(2) >= 3, counts  # redrawn while the batch ran; then 4 at once
    # the rate on the line after the batch: this invocation's 2 cases over its own seconds
    d = resumed.format_dict
    assert d["initial"] == 2 and d["rate"] is None  # no smoothing: tqdm's (n - initial) / elapsed
    after = next(line for bar, n, line in shown if bar == 2 and n == 4)
    rate = float(after.split("case/s")[0].split(",")[-1])
    assert rate < 2 / 0.3 * 1.05, after  # 2 cases in >= 0.3 s; counting the 4 on disk would double it


def test_every_block_of_docs_interop_runs_in_order(tmp_path, monkeypatch):
    """docs/interop.md's ``python`` blocks run as written, in order, in one namespace, the way
    tests/test_python_docs.py runs docs/python.md's (tracebacks point into the page)."""
    from pathlib import Path

    from test_python_docs import python_blocks

    page = Path(__file__).resolve().parents[1] / "docs" / "interop.md"
    blocks = python_blocks(page.read_text())
    assert len(blocks) >= 6
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_interop"}
    for line, code in blocks:
        exec(compile("\n" * (line - 1) + code, str(page), "exec"), namespace)
    assert namespace["m"].expected.attention == KVPROBE_SDPA  # the page leaves the model as it found it
