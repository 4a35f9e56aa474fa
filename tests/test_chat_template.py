"""Every study prompt takes its chat-template settings from one place (``kvprobe.studies.common.chat_template``).

The paper runs its native-chat experiments with thinking off and, where a section says so, a fixed
template date (seed L2449-2450, L3566-3567, L3982-3984, L4763). A tiny Qwen3-style template that
opens a thinking block unless ``enable_thinking`` is false and prints ``date_string`` when given is
set on a fresh copy of the tiny models' tokenizer; every registered study's prompts (its smoke
run's cases, as ``tests/test_study_contract.py`` runs them), the detector prompts (the JSON
classifiers, the YES/NO score, the question-conditioned extraction) and the request workload's
stages are rendered through it: no thinking block opens, and the date is the paper's where it
states one. Rendering only (no model forward): well under a second per study.
"""

from __future__ import annotations

import ast
import dataclasses
import types
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import pytest

from kvprobe.extract.capture import RecordSpec
from kvprobe.prompts import Prompt
from kvprobe.studies.common import chat_template
from kvprobe.studies.common.chat_template import DEFAULT_DATE, study_prompt, template_kwargs
from kvprobe.studies.common.detectors import strings as record_strings
from kvprobe.studies.common.detectors.text import TEXT_DETECTORS, YES_NO, detector_prompt
from kvprobe.studies.common.protocol import HistoryStudy
from kvprobe.studies.datasets.quantity_task import strings as task_strings
from kvprobe.studies.registry import STUDIES
from kvprobe.tiny import tiny_tokenizer

ROOT = Path(__file__).resolve().parents[1]
#: ChatML with a Qwen3-style thinking switch and a Llama-style date line.
THINKING_TEMPLATE = (
    "{%- if date_string is defined %}{{ '<|im_start|>system\\nToday Date: ' + date_string + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is not defined or enable_thinking %}{{ '<think>\\n' }}{%- endif %}"
    "{%- endif %}"
)
THINK = "<think>"
#: Studies whose prompts are all raw text (no chat template): the components study's templateless records,
#: source influence and OAKS in the paper's segment-by-segment encoding, the native record pairs' records alone.
RAW_ONLY = {"components", "question-relevance", "source-influence", "oaks", "native-pairs"}


@pytest.fixture(scope="module")
def thinking_model() -> Any:
    """A stand-in model for ``study.prompt(model, case)``: a fresh tiny tokenizer (not a shared one) carrying the
    thinking template; prompts only read the tokenizer and the name."""
    tokenizer = tiny_tokenizer()
    tokenizer.chat_template = THINKING_TEMPLATE
    return types.SimpleNamespace(name="tiny-thinking-template", tokenizer=tokenizer)


def stated_date(name: str, case: Any) -> str:
    """The template date a study's history prompt carries: the paper's where the section states one, else the
    default (:data:`DEFAULT_DATE`)."""
    if name in ("factorial", "matched-scores"):  # seed L4763: the record histories of app:v7_bridge
        return record_strings.TEMPLATE_DATE
    if name in ("quantity", "note-controls", "cross-checkpoint") or getattr(case, "dataset", None) == "quantity":
        return task_strings.TEMPLATE_DATE  # seed L3566-3567, L3402: the quantity tasks
    return DEFAULT_DATE


def detector_prompts(names: tuple[str, ...], a: str, b: str, question: str | None = None
                     ) -> Iterator[tuple[str, Prompt, str]]:
    """(label, prompt, date) of the named detectors on one pair (``asserted-value+question``: the natural text's
    question-conditioned extraction)."""
    for name in names:
        if name == YES_NO:  # seed L3566-3567: "the date argument, where supported, is 16 Sep 2026"
            yield name, detector_prompt(record_strings.YES_NO, a, b, record_strings.YES_NO_SYSTEM, True)[0], \
                record_strings.YES_NO_TEMPLATE_DATE
        elif name in TEXT_DETECTORS:
            det = TEXT_DETECTORS[name]
            yield name, detector_prompt(det.prompt, a, b, det.system, True)[0], DEFAULT_DATE
        elif name.endswith("+question"):
            det = TEXT_DETECTORS[name.removesuffix("+question")]
            yield name, detector_prompt(det.prompt, a, b, det.system, True, question=question or "?")[0], DEFAULT_DATE


def study_prompts(name: str, model: Any) -> Iterator[tuple[str, Prompt, str]]:
    """(label, prompt, expected date) of every prompt the study's smoke run renders."""
    study = STUDIES[name].study_class()(**dict(STUDIES[name].smoke))
    for case in study.cases():
        label = f"{name}/{case.case_id}"
        if isinstance(study, HistoryStudy):
            yield label, study.prompt(model, case), stated_date(name, case)
        if name == "detection":
            yield from ((f"{label}/{d}", p, date) for d, p, date in
                        detector_prompts(study.detectors_for(case), case.pair.a_text, case.pair.b_text, case.question))
        elif name == "records":
            yield from ((f"{label}/{d}", p, date) for d, p, date in
                        detector_prompts((study.detector,), case.case.a_text, case.case.b_text))
        elif name == "native-pairs":  # every record alone, as the study encodes it (RecordSpec.prompt)
            yield from ((f"{label}/{i}", RecordSpec("single", text).prompt()[0], DEFAULT_DATE)
                        for i, text in enumerate(case.texts()))
        elif name == "requests":
            for stage in ("resident", "updated", "edited"):
                yield f"{label}/{stage}", case.prompt(True, stage), DEFAULT_DATE
            yield from ((f"{label}/{d}", p, date) for d, p, date in
                        detector_prompts((study.detector,), case.pair.a_text, case.pair.b_text))


@pytest.mark.parametrize("name", list(STUDIES))
def test_no_study_prompt_opens_a_thinking_block(name, thinking_model):
    tokenizer = thinking_model.tokenizer
    prompts = list(study_prompts(name, thinking_model))
    assert prompts, f"{name}: no prompts"
    chat = [(label, p, date) for label, p, date in prompts if p.chat]
    assert bool(chat) == (name not in RAW_ONLY), f"{name}: chat prompts {[label for label, _, _ in chat]}"
    for label, prompt, date in chat:
        assert prompt.template_kwargs == template_kwargs(date), label
        rendered = prompt.render(tokenizer)
        assert THINK not in rendered.history_text + rendered.suffix_template, f"{label}: a thinking block opens"
        assert f"Today Date: {date}<|im_end|>" in rendered.history_text, f"{label}: not the template date {date}"
    if chat:  # the check can fail: the same prompt without the settings opens one
        bare = dataclasses.replace(chat[0][1], template_kwargs={}).render(tokenizer)
        assert bare.suffix_template.endswith(f"<|im_start|>assistant\n{THINK}\n") and "Today Date" not in \
            bare.history_text


def test_the_settings_and_the_stated_dates():
    assert template_kwargs() == {"enable_thinking": False, "date_string": DEFAULT_DATE}
    assert template_kwargs("11 Sep 2026") == {"enable_thinking": False, "date_string": "11 Sep 2026"}
    assert template_kwargs() is not template_kwargs()  # a fresh dict: no prompt shares (or edits) another's
    assert study_prompt([("A", "x")], chat=False, date="1 Jan 2027").template_kwargs["date_string"] == "1 Jan 2027"
    with pytest.raises(TypeError, match="decides"):
        study_prompt([("A", "x")], template_kwargs={"enable_thinking": True})
    # The paper prints the dates in words (seed L3402, L4763) and once as the argument (L3567); the template's
    # date_string is the "%d %b %Y" form of the same day.
    for value, printed in ((task_strings.TEMPLATE_DATE, "16 September 2026"),
                           (record_strings.YES_NO_TEMPLATE_DATE, "16 September 2026"),
                           (record_strings.TEMPLATE_DATE, "11 September 2026")):
        assert datetime.strptime(value, "%d %b %Y") == datetime.strptime(printed, "%d %B %Y")


def _source_files() -> list[Path]:
    mine = Path(chat_template.__file__).resolve()
    return [p for p in sorted((ROOT / "studies").rglob("*.py")) if p.resolve() != mine]


def test_no_study_spells_its_own_template_settings():
    """Outside the one place no study passes ``template_kwargs``, ``enable_thinking`` or ``date_string``, and every
    ``Prompt(...)`` it builds itself is a raw one (``chat=False``); chat prompts come from ``study_prompt``."""
    settings = {"template_kwargs", "enable_thinking", "date_string"}
    bad = []
    for path in _source_files():
        text = path.read_text()
        if "Prompt(" not in text and not any(word in text for word in settings):
            continue
        for node in ast.walk(ast.parse(text, str(path))):
            where = f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Call):
                bad += [f"{where}: {k.arg}=" for k in node.keywords if k.arg in settings]
                func = node.func
                if (func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)) == "Prompt":
                    chat = next((k.value for k in node.keywords if k.arg == "chat"), None)
                    if not (isinstance(chat, ast.Constant) and chat.value is False):
                        bad.append(f"{where}: Prompt(...) that may use the chat template (use study_prompt)")
            elif isinstance(node, ast.Dict):
                bad += [f"{where}: {k.value!r} key" for k in node.keys
                        if isinstance(k, ast.Constant) and k.value in settings - {"template_kwargs"}]
    assert not bad, "\n".join(bad)
