"""Detectors: verbatim prompts, strict verdicts with every failure counted, prompt layout, a tiny run."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import kvprobe
from kvprobe.studies.detection.study import DetectionStudy
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.detectors import strings
from kvprobe.studies.common.detectors.text import NO_REPLACEMENT, REPLACEMENT, TEXT_DETECTORS, UNRESOLVED, RecordPair, \
    detector_prompt, lexical_filter, parse_verdict
from kvprobe.studies.common.runner import read_rows, run_study

PAPER = Path(__file__).resolve().parents[2] / "shared" / "seed" / "000_1f60a69837e742f0.txt"


def _verbatim_blocks(start: str) -> list[str]:
    """The paper's ``verbatim`` blocks after the first line containing ``start``."""
    lines = PAPER.read_text().split("\n")
    i = next(k for k, line in enumerate(lines) if start in line)
    blocks = []
    while len(blocks) < 3:
        if lines[i].strip() == "\\begin{verbatim}":
            j = lines.index("\\end{verbatim}", i)
            blocks.append("\n".join(lines[i + 1:j]))
            i = j
        i += 1
    return blocks


@pytest.mark.skipif(not PAPER.exists(), reason="the paper text (../shared/seed) is not beside the repository")
def test_detector_prompts_are_the_papers_bytes():
    direct, expanded, extraction = _verbatim_blocks("paragraph{Direct relation classifier.}")
    assert strings.DIRECT == direct
    assert strings.EXPANDED == expanded
    assert strings.ASSERTED_VALUE == extraction
    text = " ".join(PAPER.read_text().split())
    for sentence in (strings.SYSTEM_COMPACT, strings.SYSTEM_RECORDS):
        assert sentence in text.replace("`` ", "").replace(" ''", "")


@pytest.mark.skipif(not PAPER.exists(), reason="the paper text (../shared/seed) is not beside the repository")
def test_yes_no_prompt_is_the_papers_template():
    """The quoted template (seed L3550-3562) with the layout the paper states in words (L3565-3567): one
    instruction line, two newlines before Record A, one before each record, two between A and Record B,
    two trailing newlines; and the system message (L3543)."""
    text = PAPER.read_text()
    start = text.index("\\begin{quote}\\small\\ttfamily\\raggedright", text.index("The exact user template"))
    body = text[text.index("\n", start) + 1: text.index("\\end{quote}", start)]
    instruction, record_a, record_b = (p.strip() for p in body.split("\n\n"))
    assert record_a == "Record A:\\\\\n\\{old\\}" and record_b == "Record B:\\\\\n\\{later\\}"
    expected = (" ".join(instruction.split()) + "\n\nRecord A:\n" + strings.OLD_PLACEHOLDER + "\n\nRecord B:\n"
                + strings.LATER_PLACEHOLDER + "\n\n")
    assert strings.YES_NO == expected
    assert "\\emph{" + strings.YES_NO_SYSTEM + "}" in text
    # The later record and the two trailing newlines end the user message.
    prompt, question = detector_prompt(strings.YES_NO, "A.", "B.", strings.YES_NO_SYSTEM, True)
    assert question == "B.\n\n" and prompt.segments[0][1].endswith("Record A:\nA.\n\nRecord B:\n")


@pytest.mark.parametrize("output, decision, reason", [
    ('{"same_slot": true, "old_current": "Tunis", "later_current": "Miami"}', REPLACEMENT, "ok"),
    ('{"same_slot": true, "old_current": " tunis ", "later_current": "TUNIS"}', NO_REPLACEMENT, "ok"),
    ('{"same_slot": true, "old_current": "Tunis", "later_current": "Tunis office"}', REPLACEMENT, "ok"),  # no containment
    ('{"same_slot": false, "old_current": "Tunis", "later_current": null}', NO_REPLACEMENT, "ok"),
    ('{"same_slot": "true", "old_current": "Tunis", "later_current": "Miami"}', UNRESOLVED, "type:same_slot"),
    ('{"same_slot": true, "old_current": "Tunis", "later_current": null}', UNRESOLVED, "type:later_current"),
    ('{"same_slot": true, "old_current": "", "later_current": "Miami"}', UNRESOLVED, "empty:old_current"),
    ('{"same_slot": true, "old_current": "Tunis"}', UNRESOLVED, "missing:later_current"),
    ('```json\n{"same_slot": true, "old_current": "Tunis", "later_current": "Miami"}\n```', REPLACEMENT, "ok"),
    ('Sure: {"same_slot": true, "old_current": "Tunis", "later_current": "Miami"}', UNRESOLVED, "text_outside"),
    ('{"same_slot": true, "same_slot": false, "old_current": "a", "later_current": "b"}', UNRESOLVED,
     "duplicate_keys"),
    ("The records agree.", UNRESOLVED, "not_json"),
    ("", UNRESOLVED, "empty"),
])
def test_extraction_rule(output, decision, reason):
    verdict = parse_verdict(TEXT_DETECTORS["asserted-value"], output)
    assert (verdict.decision, verdict.reason) == (decision, reason)


def test_relation_classifier_rules():
    same = '{"supersedes": true, "slot": "city", "old_value": "Tunis", "new_value": " tunis", "confidence": 0.9}'
    assert parse_verdict(TEXT_DETECTORS["direct"], same).decision == REPLACEMENT
    assert parse_verdict(TEXT_DETECTORS["expanded"], same).decision == NO_REPLACEMENT  # value equivalence test
    assert parse_verdict(TEXT_DETECTORS["direct"], '{"supersedes": false}').decision == NO_REPLACEMENT
    bad = parse_verdict(TEXT_DETECTORS["direct"], '{"supersedes": "yes"}')
    assert (bad.decision, bad.reason) == (UNRESOLVED, "type:supersedes")
    fenced = '```\n{"supersedes": true}\n```'
    assert parse_verdict(TEXT_DETECTORS["direct"], fenced).decision == REPLACEMENT
    assert parse_verdict(TEXT_DETECTORS["direct"], fenced, allow_fence=False).reason == "fenced"


def test_lexical_filter_suppresses_positives_naming_the_old_value_twice():
    a, b = "The office is in Tunis.", "The office is now Miami, no longer tunis."
    assert lexical_filter(REPLACEMENT, "Tunis", a, b) == NO_REPLACEMENT
    assert lexical_filter(REPLACEMENT, "Tunis", a, "The office is now Miami.") == REPLACEMENT
    assert lexical_filter(UNRESOLVED, "Tunis", a, b) == UNRESOLVED


@pytest.mark.parametrize("chat", [True, False])
def test_detector_prompt_is_the_filled_template(chat):
    model = kvprobe.load_model("tiny-llama")
    old, later = "Record one says Tunis.", "Record two says Miami."
    prompt, question = detector_prompt(strings.ASSERTED_VALUE, old, later, strings.SYSTEM_RECORDS, chat)
    rendered = prompt.render(model.tokenizer)
    full = rendered.history_text + rendered.suffix(question)
    filled = strings.fill(strings.ASSERTED_VALUE, old, later)
    if chat:
        assert full.count(filled) == 1 and strings.SYSTEM_RECORDS in full
        messages = [{"role": "system", "content": strings.SYSTEM_RECORDS}, {"role": "user", "content": filled}]
        assert full == model.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    else:
        assert full == filled + "\n"


def test_bad_parameters_fail_before_a_model_loads():
    for field in ("n_groups", "max_new_tokens", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            DetectionStudy(**{field: 0})
    for field, value in (("datasets", ("records", "mquake")), ("record_detectors", ("direct", "nope")),
                         ("quantity_detectors", ("nope",)), ("splits", ("validation",)),
                         ("text_detector_splits", ("all",))):
        with pytest.raises(ValueError, match=field):
            DetectionStudy(**{field: value})
    with pytest.raises(ValueError, match="splits"):  # the quantity calibration set has no train split
        DetectionStudy(splits=("train", "test"))
    assert DetectionStudy(datasets=("records",), splits=("train",)).splits == ("train",)


def test_tiny_detection_run_keeps_every_output(tmp_path):
    model = kvprobe.load_model("tiny-llama")
    study = DetectionStudy(n_groups=1, max_new_tokens=5, cases_per_batch=8)
    run_study(study, model, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    records = [c for c in study.cases() if c.dataset == "records"]
    quantity = [c for c in study.cases() if c.dataset == "quantity"]
    assert len(records) == 12 and len(quantity) == 4  # one item / group per split
    test_records = [c for c in records if c.split == "test"]
    assert len(rows) == len(records) + 3 * len(test_records) + len(quantity)  # JSON classifiers on test only
    for r in rows:
        if r["detector"] == "yes-no":
            assert 0.0 <= r["score"] <= 1.0
        else:
            assert r["decision"] in (REPLACEMENT, NO_REPLACEMENT, UNRESOLVED) and r["parse"]
    summary = write_summary("detection", tmp_path)
    counted = sum(sum(c["parse"].values()) for c in summary["text_detectors"])
    assert counted == 3 * len(test_records)  # every output is counted, failures included
    assert "## JSON classifiers" in (tmp_path / "report.md").read_text()
    json.loads((tmp_path / "summary.json").read_text())


def test_yes_no_score_is_the_normalized_candidate_probability():
    from kvprobe.reference import reference_score
    from kvprobe.studies.common.detectors.text import yes_no_scores

    model = kvprobe.load_model("tiny-llama")
    pair = RecordPair("The office is in Tunis.", "The office is now in Miami.", "Tunis")
    row = yes_no_scores(model, [pair])[0]
    prompt, question = detector_prompt(strings.YES_NO, pair.a_text, pair.b_text, strings.YES_NO_SYSTEM, True)
    history = model.prefill(prompt)
    history_ids = history.input_ids.tolist()
    suffix = model.tokenizer(history.rendered.suffix(question), add_special_tokens=False)["input_ids"]
    yes, no = (reference_score(model, history_ids, suffix, model.tokenizer(c, add_special_tokens=False)["input_ids"])
               for c in strings.YES_NO_TOKENS)  # uncached plain forward, fp32
    assert row["logp_yes"] == pytest.approx(yes, abs=1e-4) and row["logp_no"] == pytest.approx(no, abs=1e-4)
    assert row["score"] == pytest.approx(1 / (1 + math.exp(no - yes)), abs=1e-6)
    # The paper's float32 score with the log-odds clipped to [-80, 80].
    assert row["score"] == float(np.float32(1) / (np.float32(1) + np.exp(np.clip(np.float32(row["logp_no"])
                                                                                  - np.float32(row["logp_yes"]),
                                                                                  -80, 80))))


def test_calibrate_command_joins_scores_and_quantity_answers(tmp_path, capsys):
    """`kvprobe calibrate` end to end (a real subprocess) on tiny runs of both studies."""
    import subprocess
    import sys

    from kvprobe.studies.quantity.study import QuantityStudy

    model = kvprobe.load_model("tiny-llama")
    run_study(DetectionStudy(datasets=("quantity",), n_groups=3), model, tmp_path / "det", progress=False)
    for split, dev in (("dev", True), ("test", False)):
        run_study(QuantityStudy(n_groups=3, dev=dev, max_new_tokens=3, operations=False), model,
                  tmp_path / split, progress=False)
    out = tmp_path / "action"
    cmd = [sys.executable, "-m", "kvprobe.cli", "calibrate", "--detection", str(tmp_path / "det"), "--dev",
           str(tmp_path / "dev"), "--test", str(tmp_path / "test"), "--out", str(out), "--quiet"]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    summary = json.loads((out / "action.json").read_text())
    assert len(summary["cells"]) == 4  # two grading rules x two mask scopes
    cell = summary["cells"][0]
    assert cell["test_cases"] == 6 and set(cell["calibration"]["rules"]) >= {"always", "never", "utility"}
    assert (out / "coverage-complete-source.png").exists() and "## complete rule" in (out / "action.md").read_text()
    from kvprobe.cli import main  # the refusal in process: a second interpreter start costs seconds

    assert main([*cmd[3:5], str(tmp_path / "nowhere"), *cmd[6:]]) != 0
    assert "nowhere" in capsys.readouterr().err
