"""Bad inputs named clearly (issue 48 items 5 and 6): a foreign tokenizer, malformed prompts, question lists,
devices, layers, conditions; each refused by name before any work is done."""

from __future__ import annotations

import copy

import pytest

import kvprobe
from kvprobe.history import ModelMismatchError, tokenizer_fingerprint
from kvprobe.tiny import tiny_config, tiny_tokenizer
from kvprobe.tokenizer_check import TokenizerMismatchError
from tests.conftest import QUESTIONS, make_history


def _tiny_llama(**fields):
    from transformers import AutoModelForCausalLM

    cfg = tiny_config("tiny-llama")
    for key, value in fields.items():
        setattr(cfg, key, value)
    return AutoModelForCausalLM.from_config(cfg).eval()


# -- item 5: tokenizer identity ---------------------------------------------------------------------------
def test_a_tokenizer_far_smaller_than_the_embedding_is_refused():
    hf = _tiny_llama(vocab_size=8000)  # 1000 tokenizer ids against 8000 rows: another model's tokenizer
    with pytest.raises(TokenizerMismatchError, match=r"model 'big'.*tokenizer.*1000 token ids but the embedding "
                                                     r"has 8000 rows.*more than padding"):
        kvprobe.Model(hf, tiny_tokenizer(), name="big")


def test_an_embedding_padded_past_the_tokenizer_is_accepted():
    hf = _tiny_llama(vocab_size=1024)  # padded to a multiple of 128
    assert kvprobe.Model(hf, tiny_tokenizer(), name="padded").tokenizer is not None


def test_a_tokenizer_with_another_eos_id_is_refused(llama):
    tok = tiny_tokenizer()
    tok.eos_token = "<|im_start|>"
    with pytest.raises(TokenizerMismatchError, match=r"model 'other-eos'.*eos token '<\|im_start\|>' has id "
                                                     rf"{tok.eos_token_id}.*\[{llama.tokenizer.eos_token_id}\]"):
        kvprobe.Model(llama.hf, tok, name="other-eos")


def test_a_tokenizer_with_another_pad_id_is_refused(llama):
    tok = tiny_tokenizer()
    tok.pad_token = "<|im_start|>"
    with pytest.raises(TokenizerMismatchError, match="pad token"):
        kvprobe.Model(llama.hf, tok, name="other-pad")


def test_a_tokenizer_from_another_place_warns(llama):
    from kvprobe.tokenizer_check import TokenizerMismatchWarning

    tok = tiny_tokenizer()
    tok.name_or_path = "somewhere/else"
    with pytest.warns(TokenizerMismatchWarning, match="'somewhere/else'"):
        kvprobe.Model(llama.hf, tok, name="elsewhere")


def test_a_history_is_read_only_with_its_own_tokenizer():
    hf = _tiny_llama(vocab_size=1024)
    first = kvprobe.Model(hf, tiny_tokenizer(), name="first")
    grown = tiny_tokenizer()
    grown.add_tokens(["zebra-crossing"])  # same size class, another vocabulary
    second = kvprobe.Model(hf, grown, name="second")  # the same weights, another tokenizer
    h = make_history(first)
    assert h.tokenizer_fingerprint == tokenizer_fingerprint(first.tokenizer) != tokenizer_fingerprint(grown)
    first.score(h, QUESTIONS[0], ["yes", "no"])
    with pytest.raises(ModelMismatchError, match="tokenized by another tokenizer than 'second'"):
        second.score(h, QUESTIONS[0], ["yes", "no"])
    with pytest.raises(ModelMismatchError, match="another tokenizer"):
        second.generate(h, QUESTIONS[0], max_new_tokens=1)


@pytest.mark.embedded
def test_the_issue_case_smollm_weights_with_the_tiny_tokenizer_is_refused():
    smollm = kvprobe.load_model()
    with pytest.raises(TokenizerMismatchError, match=r"1000 token ids but the embedding has 49152 rows"):
        kvprobe.Model(smollm.hf, tiny_tokenizer(), name="smollm+tiny")


# -- item 6: the rest of the bad-input trial --------------------------------------------------------------
def test_a_plain_string_prompt_is_one_segment(llama):
    prompt = kvprobe.Prompt("The box is red.", chat=False)
    assert prompt.segments == [("text", "The box is red.")]
    h = llama.prefill(prompt)
    assert h.token_text(h.span("text")).strip() == "The box is red."


def test_segments_that_are_not_pairs_are_refused_by_name():
    with pytest.raises(TypeError, match=r"\(name, text\) pairs, got 'A'.*Prompt\('some text'\)"):
        kvprobe.Prompt(["A", "B"])
    with pytest.raises(TypeError, match=r"pairs, got \('A', 'x', 'y'\)"):
        kvprobe.Prompt([("A", "x", "y")])


def test_an_empty_question_list_is_refused(llama):
    h = make_history(llama)
    with pytest.raises(ValueError, match="no questions"):
        llama.generate(h, [], max_new_tokens=1)


def test_a_list_of_prompts_is_refused_naming_the_alternative(llama):
    p = kvprobe.Prompt([("A", "The box is red.")])
    with pytest.raises(TypeError, match=r"prefill takes one Prompt, got list; prefill each: \[m.prefill\(p\)"):
        llama.prefill([p, p])
    with pytest.raises(TypeError, match="got str; build one"):
        llama.prefill("The box is red.")


def test_load_model_refuses_a_device_torch_cannot_see_before_loading(monkeypatch):
    import torch

    import kvprobe.tiny

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(kvprobe.tiny, "build_tiny", lambda *a, **k: pytest.fail("the model was built"))
    with pytest.raises(ValueError, match=r"device 'cuda': torch sees no CUDA device on this machine.*use 'cpu'"):
        kvprobe.load_model("tiny-llama", device="cuda")
    with pytest.raises(ValueError, match="not a torch device"):
        kvprobe.load_model("tiny-llama", device="gpu0")


def test_a_condition_mapping_names_a_non_condition_in_plain_english(llama):
    h = make_history(llama)
    with pytest.raises(TypeError, match="condition 'x' is not a Condition object, got int"):
        llama.score(h, QUESTIONS[0], ["yes"], access={"x": 3})
    with pytest.raises(TypeError, match="access must be a Condition or a mapping"):
        llama.score(h, QUESTIONS[0], ["yes"], access=3)


def test_patch_and_head_ablation_take_negative_layers(llama):
    from kvprobe.interventions import HeadAblation, Patch, parse_condition

    h = make_history(llama)
    last = llama.arch.num_layers - 1
    masked = kvprobe.Mask(h.span("A"))
    access = {"full": kvprobe.Full(), "masked": masked,
              "neg": kvprobe.Compose(masked, Patch("full", -1, name="neg")),
              "pos": kvprobe.Compose(masked, Patch("full", last, name="pos")),
              "ha-neg": HeadAblation(-1, (0,), name="ha-neg"), "ha-pos": HeadAblation(last, (0,), name="ha-pos")}
    scores = llama.score(h, QUESTIONS[0], ["Room 18", "Room 12"], access=access)
    assert scores["neg"].logprobs == scores["pos"].logprobs
    assert scores["ha-neg"].logprobs == scores["ha-pos"].logprobs
    assert parse_condition("patch:full>-1", h) == Patch("full", -1)
    from kvprobe.interventions import OperationError

    with pytest.raises(OperationError, match=r"layer -99 out of range \(0..3, or -4..-1"):
        llama.score(h, QUESTIONS[0], ["x"], access={"full": kvprobe.Full(), "p": Patch("full", -99, name="p")})


def test_bad_layer_lists_and_condition_names_are_not_span_errors(llama):
    from kvprobe.access import LayerError
    from kvprobe.interventions import ConditionSpecError, parse_condition

    h = make_history(llama)
    for error, call in [(LayerError, lambda: llama.score(h, QUESTIONS[0], ["x"], access=kvprobe.Mask(h.span("A"),
                                                                                                      layers=[99]))),
                        (ConditionSpecError, lambda: parse_condition("squash:A", h)),
                        (ConditionSpecError, lambda: parse_condition("mask:A@0-x", h)),
                        (ConditionSpecError, lambda: parse_condition("quest:lots", h))]:
        with pytest.raises(error) as caught:
            call()
        assert not isinstance(caught.value, kvprobe.SpanError), caught.value


def test_no_flags_help_reads_forwards():
    from kvprobe.cli import build_parser

    parser = build_parser(["run", "quantity", "--help"])
    text = parser._subparsers._group_actions[0].choices["run"]._subparsers._group_actions[0].choices[
        "quantity"].format_help()
    flat = " ".join(text.split())
    assert "--no-operations Turn off (on by default): run the cache operations" in flat
    assert "this turns it off" not in flat


def test_ctrl_c_during_a_run_says_how_to_resume(monkeypatch, tmp_path, capsys):
    from kvprobe.cli import main
    from kvprobe.studies.common import runner

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_study", interrupted)
    rc = main(["run", "quantity", "--n-groups", "1", "--model", "tiny-llama", "--out", str(tmp_path / "q"), "--quiet"])
    assert rc == 130
    err = capsys.readouterr().err
    assert "kvprobe run quantity: interrupted. The cases finished so far are kept" in err
    assert "rerun the same command to resume" in err


def test_babilong_with_its_data_missing_fails_before_the_model_loads(monkeypatch, tmp_path, capsys):
    import kvprobe.cli
    from kvprobe.cli import main
    from kvprobe.data import MissingDataError
    from kvprobe.studies.babilong import samples

    def missing(*args, **kwargs):
        raise MissingDataError("bAbI: not found; run `kvprobe data pull babi`")

    monkeypatch.setattr(samples, "build_samples", missing)
    monkeypatch.setattr(kvprobe.cli, "backend", lambda args: pytest.fail("the model was loaded"))
    out = tmp_path / "b"
    assert main(["run", "babilong", "--model", "tiny-llama", "--out", str(out), "--quiet"]) == 2
    assert "kvprobe data pull babi" in capsys.readouterr().err
    assert not out.exists()


def test_a_case_longer_than_the_window_is_refused_before_any_file(llama, tmp_path):
    from kvprobe.studies.common.protocol import InvalidParameter
    from kvprobe.studies.common.runner import run_study
    from kvprobe.studies.factconsolidation.study import FactConsolidationStudy

    out = tmp_path / "fc"
    study = FactConsolidationStudy(tiers=("8k",), n_histories=1, questions_per_hop=1, max_new_tokens=4)
    with pytest.raises(InvalidParameter) as caught:  # 8k-token histories, tiny-llama's 2,048 positions
        run_study(study, llama, out, progress=False)
    message = str(caught.value)
    assert "no answer budget fits" in message and "--max-new-tokens -" not in message
    assert not out.exists()
    fits = FactConsolidationStudy(tiers=("1k",), n_histories=1, questions_per_hop=1)  # the paper's 1,024 budget
    with pytest.raises(InvalidParameter, match=r"at most --max-new-tokens \d+"):
        run_study(fits, llama, out, progress=False)
    assert not out.exists()


def test_inventory_lists_registry_models_not_installed(monkeypatch, capsys):
    from kvprobe.cli import main
    from kvprobe.model_registry import ModelNotInstalledError
    from kvprobe.tools import inventory

    real = inventory.model_config

    def config(name):
        if name == "gemma3-270m":
            raise ModelNotInstalledError(name)
        return real(name)

    monkeypatch.setattr(inventory, "model_config", config)
    monkeypatch.setattr(inventory, "default_models", lambda: ["tiny-llama", "gemma3-270m"])
    assert main(["models", "inventory"]) == 0
    out = capsys.readouterr().out
    assert "| tiny-llama |" in out and "not installed (1; `kvprobe models pull NAME` installs one): gemma3-270m" in out
    assert main(["models", "inventory", "gemma3-270m"]) == 2
    assert "kvprobe models pull gemma3-270m" in capsys.readouterr().err


def test_the_readme_says_where_to_run_python_from():
    from pathlib import Path

    text = " ".join((Path(__file__).parents[1] / "README.md").read_text().split())
    assert "shadows the installed package" in text and "(unknown location)" in text


# -- docs/errors.md -----------------------------------------------------------------------------------------
def _package_exceptions() -> dict[str, str]:
    """Every public exception (and warning) class defined in the package's sources -> its file (read with ast:
    a class whose bases reach a builtin exception through builtins or classes of the package)."""
    import ast
    import builtins
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    bases: dict[str, tuple[str, list[str]]] = {}
    for folder in ("kvprobe", "extract", "readouts", "interventions", "studies"):
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    names = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
                    bases[node.name] = (str(path.relative_to(root)), names)

    def is_exception(name: str, seen: frozenset = frozenset()) -> bool:
        builtin = getattr(builtins, name, None)
        if isinstance(builtin, type) and issubclass(builtin, BaseException):
            return True
        return name in bases and name not in seen and any(is_exception(b, seen | {name}) for b in bases[name][1])

    return {name: path for name, (path, names) in bases.items()
            if not name.startswith("_") and any(is_exception(b) for b in names)}


def test_every_exception_class_has_its_section_in_errors_md():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "errors.md").read_text()
    documented = {name for line in text.splitlines() if line.startswith("### ") for name in re.findall(r"`(\w+)`", line)}
    found = _package_exceptions()
    assert {"SpanError", "TokenizerMismatchError", "ModelMismatchError", "StoreError"} <= set(found)
    missing = sorted(set(found) - documented)
    assert not missing, f"docs/errors.md has no section for {missing} ({[found[m] for m in missing]})"
    stale = sorted(documented - set(found))
    assert not stale, f"docs/errors.md documents {stale}, which the package no longer defines"
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert "(docs/errors.md)" in readme
