"""The quantity and endpoint factorial (studies/factorial): design, spans, grading, contrasts, a real run."""

from __future__ import annotations

import json
import re
from collections import Counter

import numpy as np
import pytest

import kvprobe
from kvprobe.studies.common.detectors import strings as record_strings
from kvprobe.readouts.stats import PAPER_SEED, group_bootstrap_weights
from kvprobe.studies.factorial import strings
from kvprobe.studies.factorial.contrasts import factor_contrasts, outcome_table
from kvprobe.studies.factorial.data import (FAMILY, MATRICES, QUESTIONS, VARIANTS, conditions_of, factorial_cases,
                                              matrix_records, refer_to_a)
from kvprobe.studies.factorial.grading import grade_answer
from kvprobe.studies.factorial.spans import number_ranges, span_text, study_conditions
from kvprobe.studies.factorial.study import FactorialStudy, old_mentions
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.protocol import InvalidParameter
from kvprobe.studies.common.runner import read_rows, run_study

pytestmark = pytest.mark.usefixtures("one_thread")

QUANTITY = matrix_records("quantity")
ENDPOINT = matrix_records("endpoint")


# --------------------------------------------------------------------------- design
def test_full_design_has_the_papers_sizes():
    """30 cases per matrix from ten groups; 1,200 quantity and 600 endpoint outputs (no model needed)."""
    cases = FactorialStudy().cases()
    assert len({c.case_id for c in cases}) == len(cases) == 180
    rows = Counter()
    for c in cases:
        rows[c.matrix] += len(QUESTIONS) * len(conditions_of(c.matrix))
    assert rows == {"quantity": 1200, "endpoint": 600}
    for matrix, records in (("quantity", QUANTITY), ("endpoint", ENDPOINT)):
        assert len(records) == 30 and {r.case.family for r in records} == {FAMILY[matrix]}
        by_group = Counter(r.case.group for r in records)
        assert len(by_group) == 10 and set(by_group.values()) == {3}
        assert {r.case.variant for r in records} == set(VARIANTS)
        assert all(r.case.old_value != r.case.new_value for r in records)
    assert all(r.case.new_value.endswith(" hours") for r in QUANTITY)
    assert len(FactorialStudy(matrices=("endpoint",), n_groups=2, notes=("shelf",)).cases()) == 6


def test_refers_to_a_removes_every_hours_and_prepends_the_papers_sentence():
    for record in QUANTITY:
        b = record.case.b_text
        assert "hours" in b
        rewritten = refer_to_a(b)
        assert rewritten.startswith(strings.REFERS_TO_A + " ")
        rest = rewritten[len(strings.REFERS_TO_A) + 1:]
        assert "hour" not in rewritten.lower()
        assert rest == b.replace(" hours", "")  # nothing else changed: entity, attribute, numbers, roles
        assert record.case.new_value.split()[0] in rest
    case = next(c for c in factorial_cases(("quantity",), 1) if c.information == "refers-to-a")
    segments = dict(case.prompt(chat=True).segments)
    assert segments["time2"] == f"Time 2: {strings.REFERS_TO_A} {case.record.case.b_text.replace(' hours', '')}"
    assert "hours" in segments["time1"] and "hours" in segments["other"]  # A and the other record keep the unit
    assert segments["note"] == " ".join([record_strings.NOTEBOOK_NOTE] * 16)
    assert list(segments) == ["header", "time1", "other", "note", "time2"]


def test_complete_question_appends_the_request():
    case = factorial_cases(("quantity",), 1)[0]
    assert case.question("complete") == f"{case.question('original')} {strings.COMPLETE_QUANTITY}"
    endpoint = factorial_cases(("endpoint",), 1)[0]
    assert endpoint.question("complete").endswith(strings.COMPLETE_ENDPOINT)
    assert case.candidates() == (f'{{"answer": "{case.reference}"}}', f'{{"answer": "{case.old_value}"}}')


def test_old_mentions_count_the_role_swapped_and_rejected_values():
    for case in factorial_cases(("quantity", "endpoint"), 3, notes=("notebook",)):
        expected = 0 if case.record.case.variant == "replacement" else 1
        assert old_mentions(case.b_text(), case) == expected, case.case_id


# --------------------------------------------------------------------------- spans
def test_number_ranges_skip_entity_digits_and_numbers_without_the_unit():
    text = "Project TEST-107 is 107 hours; 107 units, v107 hours, 1107 hours and 107  hours."
    got = number_ranges(text, "107 hours")
    assert [a for a, _ in got] == [text.index("107 hours"), text.index("107  hours")]
    assert [text[a:b] for a, b in got] == ["107", "107"]


def _overlapping(history: kvprobe.History, start: int, end: int) -> set[int]:
    """Independent reference: every token whose characters overlap [start, end) of the history text."""
    return {i for i, (a, b) in enumerate(history.offsets) if a < end and b > start and b > a}


@pytest.mark.parametrize("matrix", MATRICES)
def test_masks_and_controls_on_the_tokenizer(llama, matrix):
    """Whole = every token overlapping A; number = the old number's tokens only (never the unit or the
    entity); endpoint = the old endpoint's tokens; controls = as many tokens from the note's first token,
    disjoint from A and B."""
    for case in factorial_cases((matrix,), None, information=("refers-to-a",) if matrix == "quantity" else
                                ("stated",), notes=("shelf",)):
        h = llama.prefill(case.prompt(chat=True))
        conds = study_conditions(h, case)
        assert list(conds) == list(conditions_of(matrix))
        a_text, old = case.record.case.a_text, case.old_value
        a_start = h.text.index(a_text)
        assert h.text.count(a_text) == 1
        whole, narrow = conds["whole"], conds[conditions_of(matrix)[-1]]
        assert {p for s in whole.spans for p in s.positions()} == _overlapping(h, a_start, a_start + len(a_text))
        if matrix == "quantity":
            number = old.split()[0]
            m = re.search(rf"(?<![\w-]){number}(?= hours)", a_text)
            ref = _overlapping(h, a_start + m.start(), a_start + m.end())
            masked = "".join(span_text(h, s) for s in narrow.spans)
            assert masked.strip() == number, (case.case_id, masked)
            assert "hour" not in masked and case.record.case.entity.split()[-1] not in masked
        else:
            ref = _overlapping(h, a_start + a_text.index(old), a_start + a_text.index(old) + len(old))
            masked = "".join(span_text(h, s) for s in narrow.spans)
            assert masked.strip() == old, (case.case_id, masked)
        assert {p for s in narrow.spans for p in s.positions()} == ref
        note, a, b = h.span("note"), case.record.a_span(h), h.span("time2")
        for name in ("whole", conditions_of(matrix)[-1]):
            control = conds[f"{name}-control"]
            (span,) = control.spans
            assert span.start == note.start and span.end <= note.end
            assert len(span) == conds[name].n_tokens
            assert not span.overlaps(a) and not span.overlaps(b)
            assert record_strings.SHELF_NOTE.startswith(span_text(h, span)[:20])


# --------------------------------------------------------------------------- grading
@pytest.mark.parametrize("text,stop,exact,complete,lenient,category,missing,strict", [
    ('{"answer": "109 hours"}', "eos", True, True, True, "correct", False, True),
    ('{"answer": " 109  HOURS "}', "eos", True, True, True, "correct", False, True),
    ('{"answer": "109"}', "eos", False, False, False, "magnitude_only", True, True),
    ('{"answer": 109}', "eos", False, False, False, "magnitude_only", True, False),
    ('{"answer": "107 hours"}', "eos", False, False, False, "old_value", False, True),
    ('{"answer": "UNKNOWN"}', "eos", False, False, False, "unknown", False, True),
    ('{"answer": "109 hours", "unit": "hours"}', "eos", True, False, True, "correct", False, False),
    ('```json\n{"answer": "109 hours"}\n```', "eos", False, True, True, "invalid_format", False, False),
    ('{"answer": "109 hrs"}', "eos", False, True, False, "correct", False, True),
    ('{"answer": "109 hours"}', "cap", True, False, True, "correct", False, True),
    ("The lead time is 109, not 107 hours.", "eos", False, False, False, "invalid_format", False, False),
    ("The lead time is 109 hours.", "eos", False, False, True, "invalid_format", False, False),
])
def test_grade_answer_quantity(text, stop, exact, complete, lenient, category, missing, strict):
    g = grade_answer(text, stop, "109 hours", "107 hours", "80 hours")
    assert (g["exact"], g["complete"], g["lenient"], g["value_category"], g["missing_unit"],
            g["strict_single_field"]) == (exact, complete, lenient, category, missing, strict)


def test_grade_answer_endpoint():
    g = grade_answer('{"answer": "/V1/Metrics"}', "eos", "/v1/metrics", "/v3/reports", "/v1/invoices")
    assert g["exact"] and g["complete"] and g["value_category"] == "correct"
    g = grade_answer('{"answer": "v1/metrics"}', "eos", "/v1/metrics", "/v3/reports", "/v1/invoices")
    assert not g["exact"] and g["value_category"] == "other_value"
    assert grade_answer('{"answer": "/v3/reports"}', "eos", "/v1/metrics", "/v3/reports", "x")["value_category"] \
        == "old_value"


# --------------------------------------------------------------------------- factor contrasts
#: The paper's Qwen3-32B quantity counts (of 30; tables tab:v35_quantity_*, seed L5110-5160), per
#: (information, wording, note): whole control, whole, number control, number.
QWEN32B = {
    ("stated", "original", "notebook"): (30, 29, 30, 30), ("stated", "original", "shelf"): (30, 29, 30, 30),
    ("stated", "complete", "notebook"): (30, 30, 30, 30), ("stated", "complete", "shelf"): (30, 30, 30, 30),
    ("refers-to-a", "original", "notebook"): (20, 0, 21, 25), ("refers-to-a", "original", "shelf"): (18, 0, 19, 23),
    ("refers-to-a", "complete", "notebook"): (30, 24, 30, 30), ("refers-to-a", "complete", "shelf"): (30, 24, 30, 30),
}


def _rows_from_counts(counts, seed=0):
    """30 record cases (10 groups x 3) whose 0/1 outcomes reproduce each cell's counts (cases shuffled per cell)."""
    rng = np.random.default_rng(seed)
    rows = []
    for (info, wording, note), values in counts.items():
        for cond, k in zip(("whole-control", "whole", "number-control", "number"), values):
            correct = set(rng.permutation(30)[:k].tolist())
            rows += [{"record_case": f"g{i // 3}-v{i % 3}", "group": f"g{i // 3}", "information": info,
                      "note": note, "query": wording, "condition": cond, "exact": i in correct} for i in range(30)]
    return rows


def test_factor_contrasts_reproduce_the_papers_qwen3_32b_numbers():
    rows = _rows_from_counts(QWEN32B)
    table = outcome_table(rows, "exact")
    records = sorted({r["record_case"] for r in rows})
    weights = group_bootstrap_weights([r.split("-")[0] for r in records], seed=PAPER_SEED)
    got = factor_contrasts(table, records, "number", weights)
    # tab:v35_quantity_factors: number minus whole +25.0, explicit request +8.3, earlier unit needed -16.7.
    assert got["scope"]["estimate"] == pytest.approx(25.0)
    assert got["wording/both"]["estimate"] == pytest.approx(25 / 3)
    assert got["information/both"]["estimate"] == pytest.approx(-50 / 3)
    # Per mask: the whole mask's contrast moves with the explicit request, the number mask's against it.
    assert got["wording/whole"]["estimate"] == pytest.approx((1 + 1 + 14 + 12) / 4 / 30 * 100)
    assert got["wording/number"]["estimate"] == pytest.approx((0 + 0 - 4 - 4) / 4 / 30 * 100)
    assert got["note/both"]["estimate"] == pytest.approx(2 / 8 / 30 * 100)
    for entry in got.values():
        lo, hi = entry["ci"]
        assert lo <= entry["estimate"] <= hi and entry["n"] == 30
    assert got["scope"]["ci"][0] > 0 and got["information/both"]["ci"][1] < 0


def test_factor_contrasts_skip_a_factor_with_one_level_and_stay_paired():
    rows = _rows_from_counts({k: v for k, v in QWEN32B.items() if k[2] == "notebook"})
    table = outcome_table(rows, "exact")
    records = sorted({r["record_case"] for r in rows})
    got = factor_contrasts(table, records, "number", group_bootstrap_weights([r[:2] for r in records], seed=1))
    assert not any(k.startswith("note/") for k in got)
    assert got["scope"]["estimate"] == pytest.approx((1 + 0 + 24 + 6) / 4 / 30 * 100)


# --------------------------------------------------------------------------- validation
@pytest.mark.parametrize("kwargs,field_name", [
    (dict(matrices=("quantity", "dates")), "matrices"), (dict(notes=()), "notes"),
    (dict(wordings=("original", "original")), "wordings"), (dict(information=("unit",)), "information"),
    (dict(n_groups=11), "n_groups"), (dict(n_groups=0), "n_groups"), (dict(max_new_tokens=0), "max_new_tokens"),
])
def test_bad_parameters_name_the_field(kwargs, field_name):
    with pytest.raises(InvalidParameter) as err:
        FactorialStudy(**kwargs)
    assert err.value.field_name == field_name and str(err.value).startswith(field_name)


# --------------------------------------------------------------------------- a real run
def test_tiny_run_writes_rows_and_a_summary(llama, tmp_path):
    study = FactorialStudy(n_groups=1, max_new_tokens=3)
    info = run_study(study, llama, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    assert info.cases_run == 18 and len(rows) == 18 * 2 * 5 == (12 + 6) * 10
    assert Counter(r["matrix"] for r in rows) == {"quantity": 120, "endpoint": 60}
    assert {r["condition"] for r in rows if r["matrix"] == "endpoint"} == set(conditions_of("endpoint"))
    by = {(r["case_id"], r["query"], r["condition"]): r for r in rows}
    for r in rows:
        assert r["margin"] == pytest.approx(r["logp_current"] - r["logp_old"], abs=2e-6)
        if r["condition"] in ("whole", "number", "endpoint"):
            control = by[(r["case_id"], r["query"], f"{r['condition']}-control")]
            assert control["masked_tokens"] == r["masked_tokens"] > 0
            assert r["margin_change_vs_control"] == pytest.approx(r["margin"] - control["margin"], abs=2e-6)
        if r["condition"] == "number":
            assert "".join(r["masked_text"]).strip() == r["old_value"].split()[0]
    # Each prompt is its own prefill: the note and the information change the history.
    assert len({r["prompt_sha256"] for r in rows}) == 18
    summary = write_summary("factorial", tmp_path)
    q = summary["matrices"]["quantity"]
    assert (q["records"], q["groups"], q["rows"]) == (3, 1, 120)
    assert set(q["factors"]["exact"]) == {"scope", *(f"{f}/{m}" for f in ("wording", "information", "note")
                                                     for m in ("whole", "number", "both"))}
    cell = q["counts"]["stated/notebook/original/whole"]
    assert cell["n"] == 3 and cell["lenient"] == sum(
        r["lenient"] for r in rows if r["matrix"] == "quantity" and r["information"] == "stated"
        and r["note"] == "notebook" and r["query"] == "original" and r["condition"] == "whole")
    assert sum(cell["categories"].values()) == 3
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["seed"] == PAPER_SEED and set(saved["matrices"]) == {"quantity", "endpoint"}
    report = (tmp_path / "report.md").read_text()
    assert "number minus whole" in report and "endpoint minus whole" in report and "Qwen3-32B +25.0" in report
    assert (tmp_path / "figure.png").stat().st_size > 0


def _matrix(estimate: float, ci: list[float], control_correct: int = 5, groups: int = 10) -> dict:
    """A matrix summary with one quantity contrast (``scope``) under the exact rule and its controls' counts."""
    factor = {"estimate": estimate, "ci": ci, "n": 30}
    return {"groups": groups, "factors": {"exact": {"scope": factor, "information/both": factor}},
            "counts": {"stated/notebook/original/whole-control": {"exact": control_correct, "n": 30},
                       "stated/notebook/original/full": {"exact": 0, "n": 30}}}


def test_an_effect_cell_is_its_claim_judged_on_the_contrast():
    """The verdict is the claim's (``claims.py``: factorial.scope, up), testable on the matched controls."""
    from kvprobe.studies.factorial.summary import effect_cell

    def cell(*args, key="scope", **kw):
        return effect_cell(_matrix(*args, **kw), "quantity", key, "exact")

    assert cell(5.0, [1.0, 9.0]) == "replicates"
    assert cell(-5.0, [-9.0, -1.0]) == "opposite"
    assert cell(5.0, [-1.0, 9.0]) == "inconclusive"
    assert cell(-5.0, [-9.0, 1.0]) == "inconclusive (point estimate opposite in sign)"
    assert cell(5.0, [1.0, 9.0], control_correct=0) == "not testable here"  # the controls, not full access (0)
    assert cell(-5.0, [-9.0, -1.0], key="information/both") == "no shared direction in the paper (ours: negative)"
    assert cell(5.0, [5.0, 5.0], groups=1).startswith("no verdict")
    assert effect_cell(_matrix(5.0, [1.0, 9.0]), "quantity", "wording/both", "exact") == "not run"


def test_the_scorecard_measures_the_same_contrast_against_full_access():
    from kvprobe.studies.factorial.claims import factorial_contrast

    q = _matrix(5.0, [1.0, 9.0])
    assert factorial_contrast(q, "scope", "exact", "full").not_testable.startswith("full access at floor: 0/30")
    m = factorial_contrast(q, "scope", "exact")  # the declared reference arm: the matched controls
    assert m.not_testable is None and m.reference == "controls 5/30" and (m.value, m.ci) == (5.0, (1.0, 9.0))