"""Value categories of record-history answers (studies/datasets/values.py) and the hours deadline family."""

from __future__ import annotations

import pytest

from kvprobe.studies.datasets.record_histories import record_histories
from kvprobe.studies.datasets.recognition.records import generate_records
from kvprobe.studies.datasets.values import classify_value

REF, OLD = "107 hours", "109 hours"


@pytest.mark.parametrize("answer,category,missing", [
    ("107 hours", "correct", False),
    ("107 hrs", "correct", False),
    ("107 h", "correct", False),
    ("6420 minutes", "correct", False),   # 6420 / 60 = 107
    ("6421 minutes", "other_value", False),
    ("4.5 days", "other_value", False),    # 108 hours
    ("107", "magnitude_only", True),
    ("109 hours", "old_value", False),
    ("109", "old_value", True),
    ("110", "other_value", True),
    ("107 widgets", "other_value", False),  # unrecognized unit: kept, never invalid
    ("107 meters", "other_value", False),
    ("unknown", "unknown", False),
    (" UNKNOWN ", "unknown", False),
    (None, "invalid_format", False),
    ("Porto", "other_value", False),
])
def test_quantity_categories(answer, category, missing):
    grade = classify_value(answer, REF, OLD)
    assert (grade.category, grade.missing_unit) == (category, missing)


def test_days_convert_dimensionally():
    assert classify_value("4.5 days", "108 hours", "96 hours").category == "correct"
    assert classify_value("4 days", "108 hours", "96 hours").category == "old_value"


def test_non_quantity_values_need_normalized_equality():
    assert classify_value("  porto ", "Porto", "Milan").category == "correct"
    assert classify_value("Milan", "Porto", "Milan").category == "old_value"
    assert classify_value("Porto office", "Porto", "Milan").category == "other_value"
    assert classify_value("/v2/orders", "/v2/orders", "/v1/orders").category == "correct"


def test_hours_deadlines_change_only_the_deadline_family():
    dates, hours = generate_records(), generate_records(deadline_unit="hours")
    changed = {a.family for a, b in zip(dates, hours) if a != b}
    assert changed == {"deadline"}
    deadline = [c for c in hours if c.family == "deadline"]
    assert all(c.old_value.endswith(" hours") and c.old_value in c.a_text for c in deadline)
    assert len({c.old_value for c in deadline}) > 1
    # The same draws: a deadline case's values are its date values restated.
    assert [a.case_id for a in dates] == [b.case_id for b in hours]


def test_hours_record_histories_ask_about_hours():
    histories = [h for h in record_histories(deadline_unit="hours") if h.case.family == "deadline"]
    assert len(histories) == 60
    for h in histories[:6]:
        assert all(ref.endswith(" hours") for _, _, ref in h.queries())
        assert "date" not in h.queries()[0][1]
    with pytest.raises(ValueError, match="deadline_unit"):
        generate_records(deadline_unit="weeks")
