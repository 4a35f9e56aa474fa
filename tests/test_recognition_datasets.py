"""Recognition datasets D1 (role-matched pairs) and D3 (r570 records): counts, splits, pairs, labels, seeds."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest

from kvprobe.studies.datasets.recognition import (
    FAMILIES, PATTERNS, RECORD_VARIANTS, ROLE_PAIR_VARIANTS, SPLITS, dataset_hash, generate_records,
    generate_role_pairs, split_vocabulary, word_multiset,
)
from kvprobe.studies.datasets.recognition.records import FRAMES


@pytest.fixture(scope="module")
def records():
    return generate_records()


@pytest.fixture(scope="module")
def pairs():
    return generate_role_pairs()


def by_group(cases):
    groups = defaultdict(dict)
    for c in cases:
        groups[c.group][c.variant] = c
    return groups


# --- D3 records ---------------------------------------------------------------------------------------------

def test_record_counts(records):
    assert len(records) == 570
    assert len({c.case_id for c in records}) == 570
    assert Counter(c.split for c in records) == {"train": 180, "dev": 90, "test": 300}
    groups = by_group(records)
    assert len(groups) == 95
    for items in groups.values():
        assert list(items) == list(RECORD_VARIANTS)
        assert len({(c.split, c.family, c.a_text, c.entity, c.old_value, c.new_value, c.pattern)
                     for c in items.values()}) == 1
    items_per = Counter((c.split, c.family) for c in records if c.variant == "replacement")
    assert items_per == {(s, f): n for f in FAMILIES for s, n in (("train", 6), ("dev", 3), ("test", 10))}


def test_record_labels(records):
    positives = {"replacement", "role_swap", "explicit_rejection"}
    for c in records:
        assert c.labels == {"replacement": int(c.variant in positives)}
    test = [c for c in records if c.split == "test"]
    assert Counter(c.labels["replacement"] for c in test) == {1: 150, 0: 150}


def test_record_splits_are_disjoint(records):
    vocab = split_vocabulary()
    for kind in ("entities", "values", "slots", "frames"):
        for i, a in enumerate(SPLITS):
            for b in SPLITS[i + 1:]:
                assert not vocab[a][kind] & vocab[b][kind], (kind, a, b)
    # What the cases actually use lies inside their split's vocabulary ...
    for c in records:
        assert c.entity in vocab[c.split]["entities"]
        assert {c.old_value, c.new_value} <= vocab[c.split]["values"]
        assert c.pattern.startswith(f"{c.split}-")
    # ... and no text mentions another split's entity.
    for c in records:
        for other in SPLITS:
            if other != c.split:
                assert not any(e in c.a_text or e in c.b_text for e in vocab[other]["entities"]), c.case_id
    per_split = {s: {(c.entity, c.old_value, c.new_value, c.pattern) for c in records if c.split == s}
                 for s in SPLITS}
    for kind in range(4):
        sets = [{row[kind] for row in per_split[s]} for s in SPLITS]
        assert not (sets[0] & sets[1] or sets[0] & sets[2] or sets[1] & sets[2])


def test_record_texts(records):
    for items in by_group(records).values():
        a = items["replacement"].a_text
        old, new = items["replacement"].old_value, items["replacement"].new_value
        assert old != new
        assert old in a and new not in a
        swap, conf = items["role_swap"].b_text, items["role_confirmation"].b_text
        assert swap != conf
        assert len(swap) == len(conf)
        assert word_multiset(swap) == word_multiset(conf)
        assert all(v in t for t in (swap, conf) for v in (old, new))
        # role records use wording different from A's (other slot phrasing, other frame)
        a_lead = a.split(old)[0].split(":")[-1].split(",")[-1].strip()  # A's slot phrasing and verb
        for text in (swap, conf):
            assert a_lead.lower() not in text.lower()
        assert new in items["replacement"].b_text and old not in items["replacement"].b_text
        assert old in items["confirmation"].b_text and new not in items["confirmation"].b_text
        assert old in items["explicit_rejection"].b_text and new in items["explicit_rejection"].b_text
        other = items["other_entity"]
        assert other.entity not in other.b_text and new in other.b_text
        for c in items.values():
            assert 8 <= len(c.b_text.split()) <= 32 and 8 <= len(a.split()) <= 32


def test_role_frames_differ_from_a_frames():
    for frame_sets in FRAMES.values():
        for frames in frame_sets:
            assert frames["role_swap"] != frames["A"]
            assert frames["role_swap"].split("{slot}")[0] != frames["A"].split("{slot}")[0]


# --- D1 role-matched pairs ------------------------------------------------------------------------------------

def test_pair_counts(pairs):
    assert len(pairs) == 1200
    assert len({c.case_id for c in pairs}) == 1200
    groups = by_group(pairs)
    assert len(groups) == 400
    assert all(list(g) == list(ROLE_PAIR_VARIANTS) for g in groups.values())
    cells = Counter((c.family, c.pattern) for c in pairs if c.variant == "supersedes")
    assert cells == {(f, p): 10 for f in FAMILIES for p in PATTERNS}
    assert {c.split for c in pairs} == {"test"}


def test_pair_labels_and_texts(pairs):
    expected = {"supersedes": {"matching": 1, "replacement": 1}, "duplicate": {"matching": 1, "replacement": 0},
                "other_entity": {"matching": 0, "replacement": -1}}
    for c in pairs:
        assert c.labels == expected[c.variant]
        assert c.old_value != c.new_value
        assert c.old_value in c.b_text and c.new_value in c.b_text
    for g in by_group(pairs).values():
        sup, dup, other = g["supersedes"], g["duplicate"], g["other_entity"]
        assert sup.a_text == dup.a_text == other.a_text
        assert sup.b_text != dup.b_text
        assert len(sup.b_text) == len(dup.b_text)
        assert word_multiset(sup.b_text) == word_multiset(dup.b_text)
        assert sup.entity in sup.b_text and sup.entity not in other.b_text
        assert other.b_text.replace(sup.entity, "") != sup.b_text.replace(sup.entity, "")


# --- determinism ----------------------------------------------------------------------------------------------

def test_determinism_and_seed(records, pairs):
    assert generate_records() == records
    assert generate_role_pairs() == pairs
    assert dataset_hash(generate_records()) == dataset_hash(records)
    assert dataset_hash(generate_role_pairs()) == dataset_hash(pairs)
    assert dataset_hash(generate_records(seed=1)) != dataset_hash(records)
    assert dataset_hash(generate_role_pairs(seed=1)) != dataset_hash(pairs)
    assert dataset_hash(records) != dataset_hash(records[::-1])
    assert records[0].to_json()["labels"] == records[0].labels
