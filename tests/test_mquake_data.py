"""Data side of the contextual MQuAKE study: schema, generator, history, questions, scoring."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest

from kvprobe.studies.mquake import (
    build_history,
    contains_answer,
    dataset_hash,
    generate_cases,
    history_text,
    load_mquake,
    normalize_answer,
    normalized_exact_match,
    questions,
    retained_text,
    source_segments,
    to_json,
    value_spans,
)
from kvprobe.studies.mquake import strings
from kvprobe.studies.datasets.mquake.schema import MQuAKEFormatError

FIXTURE = Path(__file__).parent / "fixtures" / "mquake_sample.json"
SHARED = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "mquake" / "prompts" / "templates"
PREFIX = "According to earlier records, before updates:"
REAL_NAMES = {"paris", "london", "berlin", "france", "germany", "china", "india", "japan", "english", "french",
              "spanish", "german", "google", "apple", "microsoft", "toyota", "washington", "joe biden",
              "elizabeth ii", "tokyo", "moscow", "russia", "canada", "ottawa", "italy", "rome", "italian",
              "brazil", "mexico", "sony", "nissan", "asia", "europe", "africa", "america"}


@pytest.fixture(scope="module")
def cases():
    return generate_cases({2: 30, 3: 30, 4: 30})


def _not_source(case):
    src = set(source_segments(case))
    return [n for n, _ in build_history(case) if n not in src]


# -- loader --------------------------------------------------------------------------------
def test_loader_reads_fixture_and_round_trips(tmp_path):
    raw = json.loads(FIXTURE.read_text())
    loaded = load_mquake(FIXTURE)
    assert [c.case_id for c in loaded] == [9001, 9002, 9003]
    assert [c.hops for c in loaded] == [2, 3, 2]
    assert loaded[1].requested_rewrite[1].target_true.text == "Lindqor"
    assert loaded[1].extra == {"answer_extended": ["Old Dunhallow"]}
    assert [to_json(c) for c in loaded] == raw


def test_loader_names_file_and_case_on_missing_field(tmp_path):
    raw = json.loads(FIXTURE.read_text())
    bad = copy.deepcopy(raw)
    del bad[1]["new_answer"]
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(bad))
    with pytest.raises(MQuAKEFormatError, match=r"bad\.json case #1 \(case_id=9002\).*new_answer"):
        load_mquake(p)
    bad = copy.deepcopy(raw)
    del bad[0]["requested_rewrite"][0]["target_new"]["str"]
    p.write_text(json.dumps(bad))
    with pytest.raises(MQuAKEFormatError, match=r"case_id=9001\) requested_rewrite\[0\]\.target_new.*str"):
        load_mquake(p)
    p.write_text(json.dumps({"case_id": 1}))
    with pytest.raises(MQuAKEFormatError, match="list of cases"):
        load_mquake(p)


# -- generator -----------------------------------------------------------------------------
def test_generator_counts_and_determinism(cases):
    assert Counter(c.hops for c in cases) == {2: 30, 3: 30, 4: 30}
    assert [c.case_id for c in cases] == list(range(90))
    again = generate_cases({2: 30, 3: 30, 4: 30})
    assert dataset_hash(again) == dataset_hash(cases)
    assert dataset_hash(generate_cases({2: 30, 3: 30, 4: 30}, seed=1)) != dataset_hash(cases)
    # each hop count has its own generator: other counts do not change the 3-hop cases
    only3 = generate_cases({3: 30})
    assert [to_json(c) | {"case_id": 0} for c in only3] == \
        [to_json(c) | {"case_id": 0} for c in cases if c.hops == 3]


def test_generated_cases_round_trip_through_loader(cases, tmp_path):
    p = tmp_path / "gen.json"
    p.write_text(json.dumps([to_json(c) for c in cases]))
    assert load_mquake(p) == cases


def _follow(triples):
    for a, b in zip(triples, triples[1:]):
        assert a[2] == b[0], "chain broken"
    return triples[-1][2]


def test_schema_consistency(cases):
    for c in cases:
        o = c.orig
        k = c.hops
        assert len(o.new_triples) == len(c.single_hops) == len(c.new_single_hops) == k
        assert _follow(o.triples_labeled) == c.answer
        assert _follow(o.new_triples_labeled) == c.new_answer
        _follow(o.triples), _follow(o.new_triples)
        assert c.answer != c.new_answer
        assert 1 <= len(c.requested_rewrite) <= k
        assert len(set(c.questions)) == 3
        assert c.answer_alias and c.new_answer_alias
        assert c.answer not in c.answer_alias
        for hops, trip in ((c.single_hops, o.triples_labeled), (c.new_single_hops, o.new_triples_labeled)):
            for h, (s, _, obj) in zip(hops, trip):
                assert h.answer == obj and s in h.cloze
                assert s in h.question
        edited = {(t[0], t[1]): t[2] for t in o.edit_triples}
        for t, rw in zip(o.edit_triples, c.requested_rewrite):
            assert t in o.new_triples and t not in o.triples
            assert rw.target_new.id == t[2] and rw.relation_id == t[1]
            assert rw.prompt == strings.rewrite_prompt(rw.relation_id)
            assert rw.cloze == strings.cloze(rw.relation_id, rw.subject)
        for t in o.new_triples:
            if (t[0], t[1]) not in edited:  # unedited new links follow the world (= old where shared)
                assert all(ot[2] == t[2] for ot in o.triples if ot[:2] == t[:2])
        for t in o.triples:  # every old hop that is not edited is kept on the new chain when reached
            if (t[0], t[1]) in edited:
                assert edited[(t[0], t[1])] != t[2]


def test_templates_are_upstream_verbatim():
    if not SHARED.is_dir():
        pytest.skip("../shared/data/mquake not available")
    cloze = json.loads((SHARED / "cloze_templates.json").read_text())
    question = json.loads((SHARED / "question_templates.json").read_text())
    for r in strings.RELATIONS:
        assert strings.cloze_template(r) == cloze[r]
        assert strings.question_template(r) == question[r]


def test_default_size_and_fictional_entities():
    cases = generate_cases()
    assert Counter(c.hops for c in cases) == {2: 200, 3: 200, 4: 200}
    assert len({tuple(map(tuple, c.orig.triples)) for c in cases}) == 600
    names = set()
    for c in cases:
        for t in c.orig.triples_labeled + c.orig.new_triples_labeled:
            names.update((t[0], t[2]))
        names.update(c.answer_alias + c.new_answer_alias)
    words = {w for n in names for w in n.lower().replace(".", "").split()}
    assert not ({n.lower() for n in names} & REAL_NAMES)
    assert not (words & REAL_NAMES)
    assert all(t[0].startswith("F") for c in cases for t in c.orig.triples)


# -- history and questions -----------------------------------------------------------------
def test_history_segments(cases):
    for c in load_mquake(FIXTURE) + cases:
        segs = build_history(c)
        names = [n for n, _ in segs]
        assert len(set(names)) == len(names)
        kinds = [n.split(":")[0] for n in names]
        assert kinds == sorted(kinds, key=["old", "link", "update"].index)  # old, links, updates
        text = history_text(c)
        for h in c.single_hops:
            assert f"{h.cloze} {h.answer}." in text
        for h in c.new_single_hops:  # every new-chain fact is stated (as link, shared old record or update)
            assert f"{h.cloze} {h.answer}." in text
        for j, rw in enumerate(c.requested_rewrite):
            assert dict(segs)[f"update:{j}"] == f"Update: {rw.cloze} {rw.target_new.text}."
            # its earlier record is stated and is a source segment
            old = [n for n, t in segs if t == f"{rw.cloze} {rw.target_true.text}."]
            assert len(old) == 1 and old[0] in source_segments(c)
        # no new value is asserted in an earlier record
        for n, t in segs:
            if n.startswith("old:"):
                assert not any(t == f"{rw.cloze} {rw.target_new.text}." for rw in c.requested_rewrite)
        for n, a, b in value_spans(c):
            assert dict(segs)[n][a:b] in {rw.target_true.text for rw in c.requested_rewrite}


def test_fixture_history_exact():
    c = load_mquake(FIXTURE)[1]
    assert build_history(c) == [
        ("old:0", "Ilsa Varrow is married to Tomas Irlbeck."),
        ("old:1", "Tomas Irlbeck is a citizen of Quenmark."),
        ("old:2", "The capital of Quenmark is Dunhallow."),
        ("old:3", "Pell Osgarde is a citizen of Lindqor."),
        ("link:2", "The capital of Sarvenne is Veyrstad."),
        ("update:0", "Update: Ilsa Varrow is married to Pell Osgarde."),
        ("update:1", "Update: Pell Osgarde is a citizen of Sarvenne."),
    ]
    assert source_segments(c) == ["old:0", "old:3"]
    assert value_spans(c) == [("old:0", 26, 39), ("old:3", 29, 36)]


def test_questions(cases):
    assert strings.HISTORICAL_PREFIX == PREFIX
    for c in load_mquake(FIXTURE) + cases:
        qs = questions(c)
        assert [k for k, _, _ in qs] == ["current"] * 3 + ["historical", "single_hop"]
        for (_, text, answers), q in zip(qs[:3], c.questions):
            assert text == q and answers[0] == c.new_answer and set(c.new_answer_alias) <= set(answers)
        _, text, answers = qs[3]
        assert text == PREFIX + " " + c.questions[0]
        assert answers[0] == c.answer and set(c.answer_alias) <= set(answers)
        _, text, answers = qs[4]
        assert text == c.requested_rewrite[0].question and answers[0] == c.requested_rewrite[0].target_new.text
    assert questions(load_mquake(FIXTURE)[0])[4][2] == ["cliffball", "cliff ball"]


# -- scoring -------------------------------------------------------------------------------
@pytest.mark.parametrize("output,answers,eos,expected", [
    ("Veyrstad", ["Veyrstad"], True, True),
    ("  the Veyrstad. ", ["Veyrstad"], True, True),
    ("VEYRSTAD!", ["Veyrstad"], True, True),
    ("Veyrstad", ["Veyrstad"], False, False),  # capped: no EOS
    ("Veyr", ["Veyrstad", "Veyr"], True, True),  # alias
    ("Washington DC", ["Washington, D.C."], True, True),
    ("“Dunhallow”", ["Dunhallow"], True, True),  # unicode quotes
    ("The answer is Veyrstad.", ["Veyrstad"], True, False),  # not exact
    ("Veyrstad City", ["Veyrstad"], True, False),
    ("So the capital is \\boxed{Veyrstad}", ["Veyrstad"], True, True),
    ("\\boxed{The Veyrstad}", ["Veyrstad"], True, True),
    ("", ["", "a"], True, False),  # empty references never match
])
def test_normalized_exact_match(output, answers, eos, expected):
    assert normalized_exact_match(output, answers, eos) is expected


def test_strict_boxed_and_normalize():
    assert not normalized_exact_match("Veyrstad", ["Veyrstad"], True, strict_boxed=True)
    assert normalized_exact_match("x \\boxed{Veyrstad}", ["Veyrstad"], True, strict_boxed=True)
    assert normalize_answer("  The  United-Kingdom, an  island ") == "unitedkingdom island"


def test_contains_answer():
    assert contains_answer("The answer is Veyrstad.", ["Veyrstad"])
    assert contains_answer("It is the Kingdom of Sarvenne!", ["Sarvenne"])
    assert not contains_answer("Veyrstadt", ["Veyrstad"])  # word-bounded
    # LaTeX markup separates words: SQuAD normalization alone reads "\boxed{Veyrstad}" as "boxedveyrstad"
    assert contains_answer(r"So the answer is \boxed{Veyrstad}.", ["Veyrstad"])
    assert contains_answer(r"\boxed{\text{Kingdom of Sarvenne}}", ["Sarvenne"])
    assert not contains_answer(r"\boxed{Veyrstadt}", ["Veyrstad"])
    assert not contains_answer("anything", [""])


def test_retained_text(cases):
    f = load_mquake(FIXTURE)
    assert retained_text(f[0], _not_source(f[0]))  # Ostravel in the unedited old:1
    assert retained_text(f[1], _not_source(f[1]))
    assert not retained_text(f[2], _not_source(f[2]))  # last hop edited: answer only in the source
    assert retained_text(f[2], [n for n, _ in build_history(f[2])])
    assert not retained_text(f[2], [])
    with pytest.raises(KeyError):
        retained_text(f[2], ["old:9"])
    # generated: an unedited last hop keeps the old answer visible; an edited one hides its record
    strata = Counter()
    for c in cases:
        last_edited = any(t[:2] == c.orig.triples[-1][:2] for t in c.orig.edit_triples)
        retained = retained_text(c, _not_source(c))
        strata[retained] += 1
        if not last_edited:
            assert retained
        else:
            assert f"old:{c.hops - 1}" in source_segments(c)
    assert strata[True] and strata[False]  # both strata occur
