"""BABILong object dependencies: bAbI parsing, symbolic trace, naive vs dependency rule, verifier."""

from __future__ import annotations

import inspect
from collections import Counter
from pathlib import Path

import pytest

from kvprobe.studies.datasets.babi import parse_babi, parse_babi_lines
from kvprobe.studies.babilong.dependencies import (
    RULES, Arrival, dependency_keep, hidden_movement_fraction, main, naive_keep, simulate, verify, verify_file,
    verify_story,
)

BABI_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "babi"
QA2 = BABI_DIR / "qa2_two-supporting-facts_test.txt"
QA3 = BABI_DIR / "qa3_three-supporting-facts_test.txt"

# John carries the football from the kitchen to the garden and leaves it there, then walks on.
# Mary's walk is irrelevant. Only John's last move (office) survives the naive rule, so the
# football's path and the pickup/drop locations are lost; the dependency rule keeps lines 3 and 5.
HAND_STORY = """\
1 John went to the bedroom.
2 Mary moved to the hallway.
3 John travelled to the kitchen.
4 John picked up the football there.
5 John journeyed to the garden.
6 Mary went to the bathroom.
7 John put down the football.
8 John went back to the office.
9 Where is the football? \tgarden\t7 5
10 Where was the football before the garden? \tkitchen\t7 5 3
"""


@pytest.fixture(scope="module")
def babi_files() -> dict[str, Path]:
    if not (QA2.is_file() and QA3.is_file()):
        pytest.skip(f"bAbI qa2/qa3 test files not found under {BABI_DIR} (shared data folder missing)")
    return {"qa2": QA2, "qa3": QA3}


def hand_story():
    (story,) = parse_babi_lines(HAND_STORY.splitlines(), source="hand")
    return story


# --------------------------------------------------------------------------- parsing


def test_parsing_counts_on_the_real_files(babi_files):
    expected = {"qa2": (4398, {"move": 2873, "get": 866, "drop": 659}, "where_is"),
                "qa3": (14710, {"move": 9367, "get": 2775, "drop": 2568}, "where_before")}
    for task, path in babi_files.items():
        stories = parse_babi(path)
        n_facts, kinds, question_kind = expected[task]
        assert len(stories) == 200
        assert sum(len(s.questions) for s in stories) == 1000
        assert sum(len(s.facts) for s in stories) == n_facts
        assert Counter(f.kind for s in stories for f in s.facts) == kinds
        assert {q.kind for s in stories for q in s.questions} == {question_kind}
        assert {f.person for s in stories for f in s.facts} == {"Mary", "John", "Sandra", "Daniel"}


def test_first_qa3_question_is_parsed_fully(babi_files):
    first = parse_babi(babi_files["qa3"])[0].questions[0]
    assert (first.text, first.answer, first.support_ids) == ("Where was the apple before the bathroom?", "office",
                                                              (38, 25, 22))
    assert (first.line_id, first.position, first.obj, first.before) == (39, 38, "apple", "bathroom")


def test_hand_story_parses_into_facts_and_questions():
    story = hand_story()
    assert [f.kind for f in story.facts] == ["move", "move", "move", "get", "move", "move", "drop", "move"]
    assert story.facts[3].obj == "football" and story.facts[3].location is None
    assert story.facts[7].location == "office"  # "went back to"
    assert [q.position for q in story.questions] == [8, 8]


def test_unknown_sentence_fails_naming_file_and_line(tmp_path):
    path = tmp_path / "odd.txt"
    path.write_text("1 Mary went to the garden.\n2 Mary flew to the kitchen.\n")
    with pytest.raises(ValueError, match=r"odd\.txt:2: unknown fact sentence"):
        parse_babi(path)


# --------------------------------------------------------------------------- simulation


def test_carried_object_moves_with_its_carrier_and_stays_where_dropped():
    trace = simulate(hand_story().facts)
    assert trace.trajectories["football"] == [Arrival("kitchen", 3), Arrival("garden", 4)]
    assert [(e.kind, e.location) for _, e in sorted(trace.events.items())] == [("get", "kitchen"),
                                                                                 ("drop", "garden")]
    assert trace.holder == {"football": None}
    assert trace.object_location["football"] == "garden"  # John walked on to the office without it
    assert trace.person_location == {"John": "office", "Mary": "bathroom"}
    assert trace.location_at("football", 4) == "kitchen" and trace.location_at("football", 5) == "garden"
    assert not trace.warnings


def test_pickup_at_unknown_location_places_object_at_next_move():
    (story,) = parse_babi_lines(["1 Mary got the milk there.", "2 Mary travelled to the hallway.",
                                 "3 Where is the milk? \thallway\t1 2"])
    trace = simulate(story.facts)
    assert trace.events[0].location is None
    assert trace.trajectories["milk"] == [Arrival("hallway", 1)]
    assert trace.holder == {"milk": "Mary"}


# --------------------------------------------------------------------------- rules and verifier


def test_naive_rule_loses_the_path_that_the_dependency_rule_keeps():
    story = hand_story()
    naive, dependency = naive_keep(story.facts), dependency_keep(story.facts)
    assert naive == {3, 5, 6, 7}
    assert dependency == {2, 3, 4, 5, 6, 7}
    assert hidden_movement_fraction(story.facts, naive) == pytest.approx(4 / 6)
    assert hidden_movement_fraction(story.facts, dependency) == pytest.approx(2 / 6)

    lost = verify(story.facts, naive, story.questions)
    assert not lost.ok
    assert any(m.startswith("football: trajectory kitchen@4 > garden@5") for m in lost.mismatches)
    assert any("line 4" in m and "unknown location" in m for m in lost.mismatches)
    assert lost.questions_derivable == 0

    kept = verify(story.facts, dependency, story.questions)
    assert kept.ok, kept.mismatches
    assert kept.questions_derivable == 2


def test_hiding_an_object_event_is_reported():
    story = hand_story()
    result = verify(story.facts, dependency_keep(story.facts) - {6})
    assert not result.ok
    assert any("line 7" in m and "object event hidden" in m for m in result.mismatches)


def test_rules_never_look_at_questions(babi_files):
    for rule in RULES.values():
        assert list(inspect.signature(rule).parameters) == ["facts"]
    for path in babi_files.values():
        text = path.read_text()
        stripped = _without_questions(text.splitlines())
        for story, bare in zip(parse_babi(path), parse_babi_lines(stripped), strict=True):
            assert not bare.questions
            assert [f.text for f in story.facts] == [f.text for f in bare.facts]
            for rule in RULES.values():
                assert rule(story.facts) == rule(bare.facts)


def _without_questions(lines: list[str]) -> list[str]:
    """bAbI lines with question lines removed and fact ids renumbered within each story."""
    out, next_id = [], 1
    for line in lines:
        line_id, _, rest = line.partition(" ")
        if line_id == "1":
            next_id = 1
        if "\t" not in rest:
            out.append(f"{next_id} {rest}")
            next_id += 1
    return out


def test_dependency_rule_verifies_every_qa2_and_qa3_story(babi_files):
    for path in babi_files.values():
        report = verify_file(path, "dependency")
        assert report["stories"] == report["stories_ok"] == report["whole_stories_ok"] == 200, report
        assert report["inputs"] == report["inputs_ok"] == report["questions_derivable"] == 1000
        assert 0 < report["hidden_movements_story"] < 1


def test_naive_rule_fails_on_some_stories(babi_files):
    for path in babi_files.values():
        report = verify_file(path, "naive")
        assert report["stories_ok"] < report["stories"]
        assert report["first_mismatches"]
    qa3_story = parse_babi(babi_files["qa3"])[0]
    assert not verify_story(qa3_story, "naive").ok and verify_story(qa3_story, "dependency").ok


def test_main_exit_codes(babi_files, capsys):
    assert main([str(babi_files["qa2"])]) == 0
    assert "stories 200/200 ok" in capsys.readouterr().out
    assert main([str(babi_files["qa2"]), "--rule", "naive"]) == 1


def test_cli_babi_verify(tmp_path, capsys):
    """`kvprobe babi-verify` in a subprocess: exit 0 when every story verifies; 1 with a named mismatch (in
    process: a second interpreter start costs seconds)."""
    import os
    import subprocess
    import sys

    story = tmp_path / "story.txt"
    story.write_text("1 John moved to the kitchen.\n2 John got the apple there.\n3 John went to the garden.\n"
                     "4 John went to the office.\n5 Where is the apple? \toffice\t2 4\n")
    env = dict(os.environ, PYTHONWARNINGS="ignore")

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "kvprobe.cli", "babi-verify", *args], capture_output=True,
                              text=True, env=env, timeout=300)

    ok = cli(str(story))
    assert ok.returncode == 0 and "stories 1/1 ok" in ok.stdout
    from kvprobe.cli import main

    assert main(["babi-verify", str(story), "--rule", "naive"]) == 1
    assert "apple" in capsys.readouterr().out
