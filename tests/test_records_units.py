"""The records study's values, units, errors and equal-token control (paper app:v7_errors, app:v8_units,
app:v7_bridge): value columns of stored outputs, regrading old rows, the neutral note and its control,
parameter validation, and an end-to-end tiny-llama run with hours deadlines and the note."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from kvprobe.readouts.stats import group_bootstrap_weights
from kvprobe.studies.common.protocol import InvalidParameter
from kvprobe.studies.datasets.record_histories import question_text, selected_histories
from kvprobe.studies.common.detectors import strings as note_strings
from kvprobe.studies.records import strings, value_tables
from kvprobe.studies.records.control import NOTE_SEGMENT, control_mask, note_text, with_note
from kvprobe.studies.records.errors import (VALUE_COLUMNS, exact_answer, regrade_row, reversal_kind,
                                            unquoted_unknown, value_columns)
from kvprobe.studies.records.study import ALL_CONDITIONS, CONDITIONS, RecordsStudy, condition_operation
from kvprobe.studies.records.summary import summarize
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.runner import read_rows, run_study

ROOT = Path(__file__).resolve().parents[1]
QWEN_RUN = ROOT / "artifacts" / "records" / "qwen2.5-coder-0.5b-instruct"
#: Four items, one per family in turn: office, endpoint, plan and the deadline family (hours).
N_GROUPS = 4

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def deadline():
    """The six hours histories of the first deadline item."""
    cases = [c for c in selected_histories("test", RecordsStudy().seed, None, "hours") if c.case.family == "deadline"]
    return cases[:6]


# --------------------------------------------------------------------------- value columns of stored outputs
@pytest.mark.parametrize("output,category,missing", [
    ('{"answer": "109 hours"}', "correct", False),
    ('{"answer": "109 HOURS"}', "correct", False),
    ('```json\n{"answer": "109 hours"}\n```', "invalid_format", False),  # the answer-field parser allows no fence
    ('{"answer": "109"}', "magnitude_only", True),
    ('{"answer": "107 hours"}', "old_value", False),
    ('{"answer": "107"}', "old_value", True),
    ('{"answer": "12 hours"}', "other_value", False),
    ('{"answer": "UNKNOWN"}', "unknown", False),
    ('{"answer": UNKNOWN}', "invalid_format", False),
    ('The lead time is 109 hours.', "invalid_format", False),
    ('{"answer": "109 hours", "note": "x"}', "correct", False),  # extra fields permitted (rules 1-2)
    ('{"answer": 109}', "magnitude_only", True),  # a numeric field is read as its number
])
def test_value_category_of_stored_outputs(output, category, missing):
    got = value_columns(output, "109 hours", "107 hours")
    assert (got["value_category"], got["missing_unit"]) == (category, missing)
    assert got["unquoted_unknown"] == (output == '{"answer": UNKNOWN}')


def test_non_quantity_values_and_the_unquoted_unknown():
    assert value_columns('{"answer": " miami "}', "Miami", "Tunis")["value_category"] == "correct"
    assert value_columns('{"answer": "Tunis"}', "Miami", "Tunis")["value_category"] == "old_value"
    assert value_columns('{"answer": "Tunis"}', "Tunis", "Tunis")["value_category"] == "correct"  # confirmation
    assert exact_answer('{"answer": "Miami"}') == "Miami" and exact_answer('{"answer": 3}') == "3"
    assert unquoted_unknown('Sure. {"answer":unknown}') and not unquoted_unknown('{"answer": "UNKNOWN"}')
    assert not unquoted_unknown('{"answer": UNKNOWNS}')
    assert [reversal_kind(c) for c in ("magnitude_only", "unknown", "old_value", "invalid_format", "correct")] == \
        ["missing_unit", "unknown", "other", "other", "other"]
    with pytest.raises(ValueError, match="not one of"):
        reversal_kind("wrong")


def test_committed_outputs_regrade_consistently_with_the_exact_rule():
    """On a committed run that writes JSON (dates: no quantity), the value category agrees with the stored
    exact grade: correct iff exact-correct, invalid format iff the answer-field parse failed."""
    rows = [regrade_row(r) for r in read_rows(QWEN_RUN)]
    assert rows and all(set(VALUE_COLUMNS) <= set(r) for r in rows)
    for r in rows:
        assert (r["value_category"] == "correct") == r["correct"], r
        assert (r["value_category"] == "invalid_format") == (r["parse"] != "ok"), r
    assert {r["value_category"] for r in rows} > {"correct"}  # the run has wrong answers to classify


# --------------------------------------------------------------------------- tables on hand-made rows
def _row(case: str, output: str, reference: str = "109 hours", old: str = "107 hours", label: int = 1) -> dict:
    parsed = exact_answer(output)
    return {"case_id": case, "group": case[:2], "output": output, "reference": reference, "old_value": old,
            "label": label, "correct": parsed is not None and parsed.casefold() == reference.casefold(),
            "lenient": reference in output, **value_columns(output, reference, old)}


def test_reversal_taxonomy_and_matching_values():
    keys = ["g1a", "g1b", "g2a", "g2b", "g3a"]
    full = {k: _row(k, '{"answer": "109 hours"}') for k in keys}
    full["g3a"] = _row("g3a", '{"answer": "107"}')  # wrong under both: never a reversal
    masked = {"g1a": _row("g1a", '{"answer": "109"}'), "g1b": _row("g1b", '{"answer": "UNKNOWN"}'),
              "g2a": _row("g2a", '{"answer": "107 hours"}'), "g2b": _row("g2b", '{"answer": "109 hours"}'),
              "g3a": _row("g3a", '{"answer": "109 hours"}')}
    got = value_tables.reversals(masked, full, keys)
    assert got == {"reversals": 3, "missing_unit": 1, "unknown": 1, "other": 1,
                   "categories": {"magnitude_only": 1, "old_value": 1, "unknown": 1}}
    by_key = {("current", "keep-all"): full, ("current", "oracle-mask"): masked}
    cells = value_tables.value_cells(by_key, keys, ["current"], ["keep-all", "oracle-mask"])
    assert cells[1]["categories"]["correct"] == 2 and cells[1]["matching"] == 3  # correct + magnitude only
    assert cells[0]["missing_unit_wrong"] == 1 and cells[1]["missing_unit_wrong"] == 1
    # The control contrast: mask vs control, paired per case with the item bootstrap.
    by_key = {("current", "always-mask"): masked, ("current", "always-control"): full}
    weights = group_bootstrap_weights([full[k]["group"] for k in keys], n_draws=200, seed=1)
    cell = value_tables.control_cells(by_key, keys, weights, "current", "all")
    assert cell["correct"]["mask"] == 2 and cell["correct"]["control"] == 4
    assert cell["correct"]["change"]["change"] == -2 and cell["correct"]["change"]["corrections"] == 1
    assert cell["matching"]["change"]["change"] == -1 and cell["reversals"]["missing_unit"] == 1
    assert value_tables.control_cells(by_key, keys, weights, "historical", "all") is None
    lines = value_tables.format_control([{**cell, "subset": "replacement"}], 200, 1)
    assert "exact -2 [" in lines[-3] and ("interval below 0" in lines[-3]) == (cell["correct"]["change"]["ci"][1] < 0)


# --------------------------------------------------------------------------- the note and its control
def test_note_is_its_own_segment_before_time_2(llama, deadline):
    case = deadline[0]
    plain = case.prompt(chat=True)
    assert with_note(plain, "none") is plain
    noted = with_note(plain, "notebook")
    assert [n for n, _ in noted.segments] == ["header", "time1", "other", NOTE_SEGMENT, "time2"]
    assert note_text("notebook") == " ".join([note_strings.NOTEBOOK_NOTE] * 16)
    text = noted.render(llama.tokenizer).history_text
    assert f"{case.other_text}\n{note_text('notebook')}\nTime 2: {case.case.b_text}" in text
    # The study's prompt: the note only when asked for.
    assert RecordsStudy(note="notebook").prompt(llama, case) == noted
    assert RecordsStudy().prompt(llama, case) == plain
    with pytest.raises(ValueError, match="cannot insert"):
        with_note(noted, "notebook")


def test_control_has_a_token_count_from_the_note_start(llama, deadline):
    for case in deadline[:2]:
        history = llama.prefill(with_note(case.prompt(chat=True), "notebook"))
        a = case.a_span(history)
        control = control_mask(history, a)
        (span,) = control.spans
        note = history.span(NOTE_SEGMENT)
        assert control.n_tokens == len(a) and span.start == note.start and span.end <= note.end
        # Independently of the span code: the hidden tokens decode to the start of the note, and the token
        # before them ends the other record's line.
        ids = history.input_ids.tolist()
        hidden = llama.tokenizer.decode(ids[span.start:span.end])
        assert hidden.strip() and note_text("notebook").startswith(hidden.strip())
        assert llama.tokenizer.decode(ids[:span.start]).endswith(case.other_text + "\n")
        for segment in ("time1", "other", "time2"):
            assert not span.overlaps(history.span(segment)), segment
        assert not span.overlaps(a) and span.end <= len(history)  # the question comes after the history


def test_control_condition_hides_the_note_start(llama, deadline):
    """The study's control-mask condition answers as a fresh forward with those positions hidden (fp32)."""
    import torch

    from kvprobe.reference import reference_generate

    case = deadline[0]
    study = RecordsStudy(note="notebook", condition_set=("keep-all", "always-control"), deadline_unit="hours")
    history = llama.prefill(study.prompt(llama, case))
    condition = study.conditions(llama, case, history)["control-mask"]
    question = question_text(case.queries()[0][1])
    got = llama.generate(history, question, access=condition, max_new_tokens=5)
    hidden = torch.zeros(len(history), dtype=torch.bool)
    hidden[condition.spans[0].start:condition.spans[0].end] = True
    suffix = llama.tokenizer(history.rendered.suffix(question), add_special_tokens=False)["input_ids"]
    assert list(got.token_ids) == reference_generate(llama, history.input_ids.tolist(), suffix, hidden=hidden,
                                                     max_new_tokens=5)


# --------------------------------------------------------------------------- parameters
def test_bad_parameters_are_refused_naming_the_field():
    with pytest.raises(InvalidParameter, match="note: the always-control policy") as e:
        RecordsStudy(condition_set=(*CONDITIONS, "always-control"))
    assert e.value.field_name == "note"
    for bad, field in ((dict(condition_set=("oracle-mask",)), "condition_set"),
                       (dict(condition_set=("keep-all", "keep-all")), "condition_set"),
                       (dict(condition_set=("keep-all", "nope")), "condition_set"),
                       (dict(note="nope"), "note"), (dict(deadline_unit="days"), "deadline_unit"),
                       (dict(detections="artifacts/detection/x", deadline_unit="hours"), "detections")):
        with pytest.raises(InvalidParameter) as e:
            RecordsStudy(**bad)
        assert e.value.field_name == field, bad
    assert RecordsStudy(note="notebook", condition_set=ALL_CONDITIONS).config()["condition_set"] == list(ALL_CONDITIONS)
    assert RecordsStudy().config()["condition_set"] == list(CONDITIONS)  # the committed runs' conditions
    assert condition_operation("always-control", "historical", 0, False, False) == "control-mask"


def test_cli_refuses_always_control_without_a_note(capsys):
    from kvprobe.cli import main

    code = main(["run", "records", "--condition-set", "keep-all,always-control", "--model", "no-such-model", "--quiet"])
    assert code == 2 and "--note" in capsys.readouterr().err


# --------------------------------------------------------------------------- end to end
def test_tiny_run_with_hours_and_the_note(llama, tmp_path):
    study = RecordsStudy(n_groups=N_GROUPS, max_new_tokens=3, deadline_unit="hours", note="notebook",
                         condition_set=("keep-all", "oracle-mask", "always-mask", "always-control"))
    run_study(study, llama, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    assert len(rows) == 6 * N_GROUPS * 3 * 4
    assert all(set(VALUE_COLUMNS) <= set(r) for r in rows)
    assert all(r["detector_decision"] == "not-run" for r in rows)  # no detector condition: no detector
    assert {r["reference"] for r in rows if r["family"] == "deadline"} >= {"109 hours", "107 hours"}
    by = {(r["case_id"], r["query"], r["condition"]): r for r in rows}
    for (case, query, condition), r in by.items():
        assert r["prompt_sha256"] == by[(case, query, "keep-all")]["prompt_sha256"]  # the note is in every condition
        assert r["operation"] == {"keep-all": "full", "always-mask": "mask", "always-control": "control-mask",
                                  "oracle-mask": "mask" if r["label"] else "full"}[condition]
        assert {c: r[c] for c in VALUE_COLUMNS} == value_columns(r["output"], r["reference"], r["old_value"])
    summary = write_summary("records", tmp_path)
    assert summary["policies"] == ["keep-all", "oracle-mask", "always-mask", "always-control"]
    control = {(c["query"], c["subset"]): c for c in summary["mask_vs_control"]}
    assert set(control) == {("current", "all"), ("historical", "all"), ("unrelated", "all"),
                            ("current", "replacement")}
    assert control[("current", "replacement")]["n"] == 3 * N_GROUPS
    exact = control[("current", "all")]["correct"]
    assert exact["change"]["change"] == exact["mask"] - exact["control"]
    report = (tmp_path / "report.md").read_text()
    assert "## Old mask vs equal-token control" in report and "Deadlines are stated in hours" in report
    assert "Detector: not run" in report and note_strings.NOTEBOOK_NOTE in report
    assert f"At this size (current queries, {3 * N_GROUPS} replacement histories): exact " in report

    # Old rows (written before the value columns) summarize to the same numbers: regraded from their outputs.
    old = tmp_path / "old"
    old.mkdir()
    stripped = [{k: v for k, v in r.items() if k not in VALUE_COLUMNS} for r in rows]
    assert [regrade_row(r) for r in stripped] == rows
    with gzip.open(old / "results.jsonl.gz", "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in stripped)
    (old / "config.json").write_text((tmp_path / "config.json").read_text())
    assert summarize(old) == summarize(tmp_path)
