"""Table-driven tests of the quantity-task answer classification (studies.datasets.quantity_task.grading)."""

from __future__ import annotations

import pytest

from kvprobe.studies.common.answers import first_answer, normalize, parse_answer_field, parse_strict
from kvprobe.studies.datasets.quantity_task.grading import (
    RULES,
    UNIT_ALIASES,
    grade_label,
    grade_quantity,
    lenient_quantity,
    unit_canonical,
)

FENCED = '```json\n{"answer": "628 minutes"}\n```'
PLAIN_FENCED = '```\n{"answer": "628 minutes"}\n```'
TWO_FENCES = FENCED + "\n" + FENCED
CAPPED_CORRECT_FIRST = (
    '{"answer": "628 minutes"}\nWait, let me re-read the records. The unit is not specified in B. {"answer": "159'
)

# (id, text, stop, reference, old, auxiliary, rule, category, complete, lenient_complete).
# Rules "exact" and "equivalent" read the answer field (extra fields allowed, no fence); "fenced" (rule 3)
# is the strict single field with one outer fence allowed.
QUANTITY_ROWS = [
    ("plain", '{"answer": "628 minutes"}', "eos", "628 minutes", "159 minutes", None, "equivalent",
     "complete", True, True),
    ("plain-exact", '{"answer": "628 minutes"}', "eos", "628 minutes", None, None, "exact", "complete", True, True),
    ("case-ws-exact", '{"answer": "  628   Minutes "}', "eos", "628 minutes", None, None, "exact",
     "complete", True, True),
    ("singular-equiv", '{"answer": "261 liter"}', "eos", "261 liters", None, None, "equivalent",
     "complete", True, True),
    ("singular-exact", '{"answer": "261 liter"}', "eos", "261 liters", None, None, "exact", "wrong_unit", False, True),
    ("symbol-L-equiv", '{"answer": "261 L"}', "eos", "261 liters", None, None, "equivalent", "complete", True, True),
    ("min-equiv", '{"answer": "628 min"}', "eos", "628 minutes", None, None, "equivalent", "complete", True, True),
    ("min-exact", '{"answer": "628 min"}', "eos", "628 minutes", None, None, "exact", "wrong_unit", False, True),
    ("V-equiv", '{"answer": "181 V"}', "eos", "181 volts", None, None, "equivalent", "complete", True, True),
    ("V-exact", '{"answer": "181 V"}', "eos", "181 volts", None, None, "exact", "wrong_unit", False, True),
    ("lowercase-v-not-symbol", '{"answer": "181 v"}', "eos", "181 volts", None, None, "equivalent",
     "wrong_unit", False, False),
    ("trailing-period-equiv", '{"answer": "628 min."}', "eos", "628 minutes", None, None, "equivalent",
     "complete", True, True),
    ("decimal-equal-equiv", '{"answer": "628.0 minutes"}', "eos", "628 minutes", None, None, "equivalent",
     "complete", True, True),
    ("decimal-exact", '{"answer": "628.0 minutes"}', "eos", "628 minutes", None, None, "exact",
     "other_value", False, True),
    ("unknown-exact", '{"answer": "unknown"}', "eos", "628 minutes", None, None, "exact", "unknown", False, False),
    ("hrs-equiv", '{"answer": "233 hrs"}', "eos", "233 hours", None, None, "equivalent", "complete", True, True),
    ("H-is-not-hours", '{"answer": "233 H"}', "eos", "233 hours", None, None, "equivalent", "wrong_unit", False, False),
    ("kg-not-grams", '{"answer": "412 kg"}', "eos", "412 grams", None, None, "equivalent", "wrong_unit", False, False),
    ("fenced", FENCED, "eos", "628 minutes", None, None, "fenced", "complete", True, True),
    ("fenced-plain", PLAIN_FENCED, "eos", "628 minutes", None, None, "fenced", "complete", True, True),
    ("fenced-answer-field", FENCED, "eos", "628 minutes", None, None, "equivalent", "format_failure", False, True),
    ("fenced-exact", PLAIN_FENCED, "eos", "628 minutes", None, None, "exact", "format_failure", False, True),
    ("fenced-min", '```json\n{"answer": "628 min"}\n```', "eos", "628 minutes", None, None, "fenced",
     "complete", True, True),
    ("two-fences", TWO_FENCES, "eos", "628 minutes", None, None, "equivalent", "format_failure", False, True),
    ("unquoted-unknown", '{"answer": UNKNOWN}', "eos", "628 minutes", None, None, "equivalent",
     "format_failure", False, False),
    ("unknown", '{"answer": "UNKNOWN"}', "eos", "628 minutes", None, None, "equivalent", "unknown", False, False),
    ("numeric-value", '{"answer": 628}', "eos", "628 minutes", None, None, "fenced", "format_failure", False, False),
    ("numeric-answer-field", '{"answer": 628}', "eos", "628 minutes", None, None, "equivalent", "missing_unit",
     False, False),
    ("null-answer-field", '{"answer": null}', "eos", "628 minutes", None, None, "equivalent", "format_failure",
     False, False),
    ("capped-correct-prefix", CAPPED_CORRECT_FIRST, "cap", "628 minutes", "159 minutes", None, "equivalent",
     "capped", False, False),
    ("capped-clean-json", '{"answer": "628 minutes"}', "cap", "628 minutes", None, None, "equivalent",
     "capped", False, False),
    ("extra-fields", '{"answer": "628 minutes", "unit": "minutes"}', "eos", "628 minutes", None, None, "fenced",
     "format_failure", False, True),
    ("extra-fields-equivalent", '{"answer": "628 min", "unit": "minutes"}', "eos", "628 minutes", None, None,
     "equivalent", "complete", True, True),
    ("extra-fields-exact", '{"answer": "628 Minutes", "confidence": 0.9}', "eos", "628 minutes", None, None,
     "exact", "complete", True, True),
    ("extra-fields-capped", '{"answer": "628 minutes", "unit": "minutes"}', "cap", "628 minutes", None, None,
     "equivalent", "capped", False, False),
    ("duplicate-keys", '{"answer": "628 minutes", "answer": "628 minutes"}', "eos", "628 minutes", None, None,
     "equivalent", "format_failure", False, True),
    ("duplicate-keys-fenced", '{"answer": "628 minutes", "answer": "628 minutes"}', "eos", "628 minutes", None,
     None, "fenced", "format_failure", False, True),
    ("two-objects-fenced", '{"answer": "628 minutes"}\n{"answer": "628 minutes"}', "eos", "628 minutes", None,
     None, "fenced", "format_failure", False, True),
    ("text-outside-fence", 'Answer:\n' + FENCED, "eos", "628 minutes", None, None, "fenced", "format_failure",
     False, True),
    ("two-objects", '{"answer": "628 minutes"}\n{"answer": "628 minutes"}', "eos", "628 minutes", None, None,
     "equivalent", "format_failure", False, True),
    ("bare-number", '{"answer": "628"}', "eos", "628 minutes", None, None, "equivalent", "missing_unit", False, False),
    ("generic-unit", '{"answer": "628 units"}', "eos", "628 minutes", None, None, "equivalent",
     "generic_unit", False, False),
    ("days-for-hours", '{"answer": "628 days"}', "eos", "628 hours", None, None, "equivalent",
     "wrong_unit", False, False),
    ("old-value", '{"answer": "159 minutes"}', "eos", "628 minutes", "159 minutes", "807 minutes", "equivalent",
     "old_value", False, False),
    ("aux-value", '{"answer": "807 hours"}', "eos", "233 hours", "159 hours", "807 hours", "equivalent",
     "auxiliary_value", False, False),
    ("other-value", '{"answer": "999 minutes"}', "eos", "628 minutes", "159 minutes", "807 minutes", "equivalent",
     "other_value", False, False),
    ("no-number", '{"answer": "minutes"}', "eos", "628 minutes", None, None, "equivalent", "other_value", False, False),
    ("text-outside", 'Here is the answer: {"answer": "628 minutes"}', "eos", "628 minutes", None, None, "equivalent",
     "format_failure", False, True),
    ("prose", "The current cycle duration of Assembly-TEST-000 is 628 minutes.", "eos", "628 minutes", None, None,
     "equivalent", "format_failure", False, True),
    ("id-digits", "The inspection interval of Assembly-TEST-011 is 807 hours.", "eos", "807 hours", None, None,
     "equivalent", "format_failure", False, True),
    ("id-digits-not-ref", "Assembly-TEST-011 is 807 hours.", "eos", "11 hours", None, None, "equivalent",
     "format_failure", False, False),
    ("prose-capped", "The current cycle duration is 628 minutes.", "cap", "628 minutes", None, None, "equivalent",
     "capped", False, False),
    ("empty", "", "eos", "628 minutes", None, None, "equivalent", "format_failure", False, False),
    ("unclosed-fence", '```json\n{"answer": "628 minutes"}', "eos", "628 minutes", None, None, "equivalent",
     "format_failure", False, True),
]


@pytest.mark.parametrize(
    "text,stop,reference,old,aux,rule,category,complete,lenient",
    [row[1:] for row in QUANTITY_ROWS],
    ids=[row[0] for row in QUANTITY_ROWS],
)
def test_grade_quantity_table(text, stop, reference, old, aux, rule, category, complete, lenient):
    g = grade_quantity(text, stop, reference, old=old, auxiliary=aux, rule=rule)
    assert g.category == category
    assert g.complete is complete
    assert g.lenient_complete is lenient
    assert g.rule == rule


@pytest.mark.parametrize("text,complete", [
    # (exact, equivalent, fenced): rules 1-2 read the answer field and permit additional fields; only
    # rule 3 requires the entire response to be one string-valued answer field, and only it allows a fence.
    ('{"answer": "628 minutes"}', (True, True, True)),
    ('{"answer": "628 minutes", "unit": "minutes"}', (True, True, False)),
    ('{"answer": "628 min", "note": "from B"}', (False, True, False)),
    ('{"answer": "628 min"}', (False, True, True)),
    (FENCED, (False, False, True)),
    ('{"answer": "628 minutes"} {"answer": "628 minutes"}', (False, False, False)),
    ('Here it is: {"answer": "628 minutes"}', (False, False, False)),
    ('{"answer": 628}', (False, False, False)),
])
def test_the_three_rules_on_the_same_text(text, complete):
    grades = [grade_quantity(text, "eos", "628 minutes", rule=rule) for rule in RULES]
    assert RULES == ("exact", "equivalent", "fenced")
    assert tuple(g.complete for g in grades) == complete
    assert len({g.strict_single_field for g in grades}) == 1  # recorded the same way under every rule
    assert not any(grade_quantity(text, "cap", "628 minutes", rule=rule).complete for rule in RULES)  # EOS


def test_strict_single_field_is_recorded_beside_the_answer_field():
    extra = grade_quantity('{"answer": "628 minutes", "unit": "minutes"}', "eos", "628 minutes", rule="equivalent")
    assert extra.complete and extra.answer == "628 minutes" and not extra.strict_single_field
    single = grade_quantity('{"answer": "628 minutes"}', "eos", "628 minutes", rule="exact")
    assert single.complete and single.strict_single_field
    numeric = grade_quantity('{"answer": 628}', "eos", "628 minutes", old="159 minutes", rule="equivalent")
    assert numeric.answer == "628" and numeric.category == "missing_unit" and not numeric.strict_single_field


def test_fenced_flags():
    g = grade_quantity(FENCED, "eos", "628 minutes")
    assert g.fenced is True
    assert g.strict_single_field is False
    assert g.answer == "628 minutes"
    plain = grade_quantity('{"answer": "628 minutes"}', "eos", "628 minutes")
    assert plain.fenced is False
    assert plain.strict_single_field is True


def test_capped_diagnostics():
    g = grade_quantity(CAPPED_CORRECT_FIRST, "cap", "628 minutes", old="159 minutes")
    assert g.category == "capped"
    assert g.complete is False
    assert g.first_answer == "628 minutes"
    assert g.first_answer_correct is True
    assert g.first_answer_end == len('{"answer": "628 minutes"}')
    assert g.recheck_phrase is True
    assert g.missing_referent_phrase is True
    assert g.second_different_answer is False  # the second object is truncated, not an answer


def test_second_different_answer():
    text = '{"answer": "159 minutes"} Wait, I misread. {"answer": "628 minutes"} {"answer": "628'
    g = grade_quantity(text, "cap", "628 minutes", old="159 minutes")
    assert g.first_answer == "159 minutes"
    assert g.first_answer_correct is False
    assert g.second_different_answer is True
    assert g.recheck_phrase is True
    assert g.missing_referent_phrase is False
    same = grade_quantity('{"answer": "628 minutes"} {"answer": "628  Minutes"}', "cap", "628 minutes")
    assert same.second_different_answer is False


def test_extra_fields_first_answer_still_works():
    text = '{"answer": "628 minutes", "unit": "minutes"}'
    assert parse_strict(text).reason == "extra_fields"
    assert first_answer(text) == "628 minutes"
    g = grade_quantity(text, "eos", "628 minutes")
    assert g.first_answer == "628 minutes"
    assert g.first_answer_correct is True
    assert g.answer is None


@pytest.mark.parametrize(
    "text,allow_fence,ok,reason,fenced,strict_single",
    [
        ('{"answer": "628 minutes"}', True, True, "ok", False, True),
        ('\n {"answer":"628 minutes"} \n', True, True, "ok", False, True),
        (FENCED, True, True, "ok", True, False),
        (FENCED, False, False, "fenced", True, False),
        ('```json {"answer": "628 minutes"} ```', True, True, "ok", True, False),
        (TWO_FENCES, True, False, "multiple_fences", True, False),
        ('Answer:\n' + FENCED, True, False, "text_outside", True, False),
        ('```json\n{"answer": "628 minutes"}', True, False, "unclosed_fence", True, False),
        ('{"answer": UNKNOWN}', True, False, "not_json", False, False),
        ('{"answer": 628}', True, False, "non_string", False, False),
        ('{"answer": null}', True, False, "non_string", False, False),
        ('{"answer": "a", "answer": "a"}', True, False, "duplicate_keys", False, False),
        ('{"answer": "a", "unit": "b"}', True, False, "extra_fields", False, False),
        ('{"value": "a"}', True, False, "missing_answer", False, False),
        ('{"answer": "a"} {"answer": "b"}', True, False, "multiple_objects", False, False),
        ('{"answer": "a"} done', True, False, "text_outside", False, False),
        ('Sure. {"answer": "a"}', True, False, "text_outside", False, False),
        ('"628 minutes"', True, False, "not_object", False, False),
        ("628 minutes", True, False, "not_json", False, False),
        ("", True, False, "empty", False, False),
    ],
)
def test_parse_strict(text, allow_fence, ok, reason, fenced, strict_single):
    r = parse_strict(text, allow_fence=allow_fence)
    assert r.ok is ok
    assert r.reason == reason
    assert r.fenced is fenced
    assert r.strict_single_field is strict_single
    assert (r.answer is not None) is ok


@pytest.mark.parametrize(
    "text,ok,answer,reason,strict_single",
    [
        ('{"answer": "628 minutes"}', True, "628 minutes", "ok", True),
        ('{"answer": "628 minutes", "unit": "minutes"}', True, "628 minutes", "ok", False),
        ('{"unit": "minutes", "answer": "a", "confidence": 0.5}', True, "a", "ok", False),
        ('{"answer": 628}', True, "628", "ok", False),
        ('{"answer": 6.5, "unit": "h"}', True, "6.5", "ok", False),
        ('{"answer": null}', False, None, "non_string", False),
        ('{"answer": true}', False, None, "non_string", False),
        ('{"answer": ["a"]}', False, None, "non_string", False),
        ('{"value": "a"}', False, None, "missing_answer", False),
        (FENCED, False, None, "fenced", False),
        ('{"answer": "a", "answer": "a"}', False, None, "duplicate_keys", False),
        ('{"answer": "a"} {"answer": "b"}', False, None, "multiple_objects", False),
        ('{"answer": "a", "unit": "b"} done', False, None, "text_outside", False),
        ('Sure. {"answer": "a"}', False, None, "text_outside", False),
        ('{"answer": UNKNOWN}', False, None, "not_json", False),
        ("", False, None, "empty", False),
    ],
)
def test_parse_answer_field(text, ok, answer, reason, strict_single):
    r = parse_answer_field(text)
    assert (r.ok, r.answer, r.reason, r.strict_single_field) == (ok, answer, reason, strict_single)
    assert r.strict_single_field is parse_strict(text, allow_fence=False).ok  # the strict check, recorded


@pytest.mark.parametrize(
    "text,expected",
    [
        ("The current cycle duration is 628 minutes.", ("628", "minutes")),
        ("The current cycle duration of Assembly-TEST-000 is 628 minutes.", ("628", "minutes")),
        ("Assembly-TEST-011 is 807 hours", ("807", "hours")),
        ('{"answer": "181 V"}', ("181", "volts")),
        ("At T2 the value is 261 L now", ("261", "liters")),
        ("It is 3 m long", ("3", "meters")),
        ("a 45-minute cycle", ("45", "minutes")),
        ("1,200 grams", ("1,200", "grams")),
        ("628 units", None),
        ("628 days", None),
        ("628 has passed", None),
        ("Assembly-TEST-011", None),
        ('{"answer": "UNKNOWN"}', None),
    ],
)
def test_lenient_quantity(text, expected):
    assert lenient_quantity(text) == expected


def test_lenient_quantity_restricted_units():
    assert lenient_quantity("159 minutes then 5 hours", units=["hours"]) == ("5", "hours")


LABEL_ROWS = [
    ("amber", '{"answer": "amber"}', "eos", "amber", "complete", True, True),
    ("Amber", '{"answer": "Amber"}', "eos", "amber", "complete", True, True),
    ("amber-ws", '{"answer": " amber "}', "eos", "amber", "complete", True, True),
    ("fenced", '```json\n{"answer": "amber"}\n```', "eos", "amber", "complete", True, True),
    ("ochre", '{"answer": "ochre"}', "eos", "amber", "other_value", False, False),
    ("unknown", '{"answer": "UNKNOWN"}', "eos", "amber", "unknown", False, False),
    ("unquoted-unknown", '{"answer": UNKNOWN}', "eos", "amber", "format_failure", False, False),
    ("capped", '{"answer": "amber"}', "cap", "amber", "capped", False, False),
    ("prose", "The inspection label on Envelope-TEST-000 is amber.", "eos", "amber", "format_failure", False, True),
    ("prose-other", "The label is ochre.", "eos", "amber", "format_failure", False, False),
    ("extra-field", '{"answer": "amber", "envelope": "Envelope-TEST-000"}', "eos", "amber",
     "format_failure", False, True),
]


@pytest.mark.parametrize("text,complete", [
    ('{"answer": "amber", "envelope": "Envelope-TEST-000"}', (True, True, False)),
    ('```json\n{"answer": "amber"}\n```', (False, False, True)),
    ('{"answer": "Amber"}', (True, True, True)),
])
def test_label_rules(text, complete):
    assert tuple(grade_label(text, "eos", "amber", rule=rule).complete for rule in RULES) == complete


@pytest.mark.parametrize(
    "text,stop,label,category,complete,lenient",
    [row[1:] for row in LABEL_ROWS],
    ids=[row[0] for row in LABEL_ROWS],
)
def test_grade_label_table(text, stop, label, category, complete, lenient):
    g = grade_label(text, stop, label)
    assert g.category == category
    assert g.complete is complete
    assert g.lenient_complete is lenient


def test_normalize():
    assert normalize("  628\t  Minutes\n") == "628 minutes"
    assert normalize("AMBER") == "amber"


def test_unit_aliases_table():
    assert set(UNIT_ALIASES) == {"minutes", "hours", "meters", "liters", "grams", "volts"}
    for canon, forms in UNIT_ALIASES.items():
        assert canon in forms
        assert unit_canonical(canon) == canon
        assert unit_canonical(canon.upper()) == canon
    assert unit_canonical("V") == "volts"
    assert unit_canonical("v") is None
    assert unit_canonical("g") == "grams"
    assert unit_canonical("G") is None
    assert unit_canonical("kg") is None
    assert unit_canonical("l") == "liters"
    assert unit_canonical("HRS") == "hours"
    assert unit_canonical("days") is None


def test_bad_arguments():
    with pytest.raises(ValueError):
        grade_quantity('{"answer": "628 minutes"}', "length", "628 minutes")
    with pytest.raises(ValueError):
        grade_quantity('{"answer": "628 minutes"}', "eos", "628 minutes", rule="fuzzy")
    with pytest.raises(ValueError):
        grade_quantity("not json", "eos", "628 minutes", rule="fuzzy")


def test_magnitude_recorded_for_missing_unit():
    g = grade_quantity('{"answer": "159"}', "eos", "628 minutes", old="159 minutes")
    assert g.category == "missing_unit"
    assert g.magnitude == "old"
