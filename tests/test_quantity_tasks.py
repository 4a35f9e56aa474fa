"""Quantity task generator: counts, splits, hashes, strings and the number-only span."""

from __future__ import annotations

from collections import Counter

import pytest

from kvprobe.studies.datasets.quantity_task import strings
from kvprobe.studies.datasets.quantity_task.tasks import (
    REPLACEMENTS_PER_UNIT, TaskConfig, build_prompt, dataset_hash, generate_cases, generate_groups, number_span,
    queries, segment_texts, study_conditions,
)


def test_test_groups_follow_the_paper_design():
    groups = generate_groups()
    assert len(groups) == 120
    assert Counter(g.relation for g in groups) == {"replacement": 60, "confirmation": 20,
                                                    "other_attribute": 20, "other_entity": 20}
    assert Counter(g.unit for g in groups if g.relation == "replacement") == REPLACEMENTS_PER_UNIT
    assert len(generate_cases()) == 240
    for g in groups:
        assert g.old_num != g.new_num or g.relation == "confirmation"
        assert (g.old_num == g.new_num) == (g.relation == "confirmation")


def test_dev_groups_are_disjoint():
    test, dev = generate_groups(), generate_groups(TaskConfig(dev=True))
    assert len(dev) == 18
    # The paper's development split: nine replacements and three of each other relation (L2830-2831).
    assert Counter(g.relation for g in dev) == {"replacement": 9, "confirmation": 3, "other_attribute": 3,
                                                "other_entity": 3}
    assert not {g.entity for g in test} & {g.entity for g in dev}
    assert not ({g.old_num for g in test} | {g.new_num for g in test}) & ({g.old_num for g in dev} | {g.new_num for g in dev})
    assert not {g.color for g in test} & {g.color for g in dev}
    dev_case = generate_cases(TaskConfig(dev=True))[0]
    assert segment_texts(dev_case)["A"] != strings.RECORD_A.format(
        entity=dev_case.group.entity, attribute=dev_case.group.attribute, old_num=dev_case.group.old_num,
        unit=dev_case.group.unit)


def test_generation_is_seeded_and_hashed():
    assert dataset_hash(generate_cases()) == dataset_hash(generate_cases())
    assert dataset_hash(generate_cases()) != dataset_hash(generate_cases(TaskConfig(seed=1)))


def test_paper_strings_are_used_verbatim():
    case = next(c for c in generate_cases() if c.group.relation == "replacement" and c.information == "unit_from_a")
    g, texts = case.group, segment_texts(case)
    assert texts["A"] == strings.RECORD_A.format(entity=g.entity, attribute=g.attribute, old_num=g.old_num, unit=g.unit)
    assert texts["B"].endswith("The measurement unit is the same as in record A at T1. This entry is effective at T2.")
    assert g.unit not in texts["B"]
    assert texts["note"].count(strings.NOTE_SENTENCE) == 6
    aux = next(c for c in generate_cases() if c.group.relation == "other_attribute")
    assert f"auxiliary {aux.group.attribute}" in segment_texts(aux)["B"]


def test_queries_and_references():
    by_relation = {c.group.relation: c for c in generate_cases() if c.information == "unit_stated"}
    rep = queries(by_relation["replacement"])
    g = by_relation["replacement"].group
    assert [q.role for q in rep] == ["current", "historical", "unrelated"]
    assert rep[0].reference == f"{g.new_num} {g.unit}" and rep[1].reference == f"{g.old_num} {g.unit}"
    assert rep[0].candidates == (f'{{"answer": "{g.new_num} {g.unit}"}}', f'{{"answer": "{g.old_num} {g.unit}"}}')
    assert rep[2].reference == g.color and rep[2].candidates[1] == '{"answer": "UNKNOWN"}'
    conf = queries(by_relation["confirmation"])
    assert conf[0].reference == f"{by_relation['confirmation'].group.old_num} {by_relation['confirmation'].group.unit}"
    assert conf[0].candidates[0] != conf[0].candidates[1]


@pytest.mark.parametrize("information", ["unit_stated", "unit_from_a"])
def test_number_span_excludes_unit_and_entity_digits(llama, information):
    for case in [c for c in generate_cases(TaskConfig(n_groups=12)) if c.information == information]:
        h = llama.prefill(build_prompt(case))
        span = number_span(h, case)
        a_lo, _ = h.rendered.segments["A"]
        unit_lo = h.text.index(f"{case.group.old_num} {case.group.unit}", a_lo) + len(case.group.old_num) + 1
        entity_lo = h.text.index(case.group.entity, a_lo)
        for t in span.positions():
            s, e = h.offsets[t]
            assert e <= unit_lo, "the number-only mask touches the unit"
            assert s >= entity_lo + len(case.group.entity), "the number-only mask touches the entity id"
        assert h.token_text(span).strip() == case.group.old_num
        conds = study_conditions(h, case)
        assert conds["number-control"].n_tokens == len(span)
        assert not any(c.overlaps(span) for c in conds["number-control"].spans)


def test_operation_controls_apply_each_operation_to_the_note_control(llama):
    """Paper L4535-4537: each control applies the same operation to as many unrelated-note tokens."""
    from kvprobe.interventions import Compact, Rebuild, TextRecompute

    case = next(c for c in generate_cases(TaskConfig(n_groups=2)) if c.information == "unit_from_a")
    h = llama.prefill(build_prompt(case))
    plain = study_conditions(h, case)
    assert not any(name.endswith("-control") and name != "source-control" and name != "number-control"
                   for name in plain)
    conds = study_conditions(h, case, operation_controls=True)
    control = conds["source-control"].spans
    assert sum(len(s) for s in control) == len(h.span("A"))
    assert isinstance(conds["recompute-control"], TextRecompute) and conds["recompute-control"].spans == control
    assert isinstance(conds["rebuild-control"], Rebuild) and conds["rebuild-control"].spans == control
    assert isinstance(conds["compact-control"], Compact) and conds["compact-control"].spans == control
    state = conds["recompute-control"].prepare(llama, h)
    assert state.info["history_tokens"] < len(h)  # the note's tokens are gone, record A stays
    assert state.slot_of[h.span("A").start] >= 0
