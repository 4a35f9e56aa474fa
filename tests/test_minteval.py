"""MINTEval state tracking: the masking rules, the loader, the generator, the questions, a tiny-model run."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

import kvprobe
from kvprobe.studies.minteval.components import components, matched_stories, session_sources
from kvprobe.studies.minteval.data import generate_sessions
from kvprobe.studies.minteval.questions import candidates
from kvprobe.studies.minteval.rules import online_pairs, source_hidden, value_spans
from kvprobe.studies.minteval.schema import (MINTEvalFormatError, load_sessions, save_sessions, session_from_json,
                                             to_json)
from kvprobe.studies.minteval.state import replay
from kvprobe.studies.minteval.stories import read_stories
from kvprobe.studies.minteval.study import CONDITIONS, MINTEvalStudy, event_segment
from kvprobe.studies.minteval.summary import summarize
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.protocol import InvalidParameter
from kvprobe.studies.common.runner import run_study

FIXTURE = Path(__file__).parent / "fixtures" / "minteval_sessions.json"

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def hand():
    return load_sessions(FIXTURE)[0]


# --------------------------------------------------------------------------- rules


def test_source_rule_hides_exactly_the_superseded_movements_and_keeps_object_events(hand):
    """Hand-written session: Mary moves 3 times, Jeff twice, Fred once; e2 acquisition, e5 transfer, e7 drop."""
    events = hand.events
    hidden = source_hidden(events)
    assert [events[i].id for i in hidden] == ["e0", "e1", "e3"]
    kept = {e.id for i, e in enumerate(events) if i not in hidden}
    assert {"e2", "e5", "e7"} <= kept  # acquisition, transfer, drop stay
    assert {"e4", "e6", "e8"} <= kept  # each person's latest movement (Fred's only one) stays
    assert [(events[a].id, events[b].id) for a, b in online_pairs(events)] == [("e0", "e3"), ("e1", "e4"),
                                                                               ("e3", "e8")]
    assert [events[i].text[a:b] for i, a, b in value_spans(events)] == ["hallway", "garden", "kitchen"]
    # The rule reads the events only: other questions, the same hidden records.
    other = dataclasses.replace(hand, questions=hand.questions[:1])
    assert source_hidden(other.events) == hidden


def test_value_span_is_the_last_word_bounded_destination():
    from kvprobe.studies.minteval.schema import Event, destination_chars

    event = Event("x", "Park went to the park.", "movement", "Park", location="park")
    assert destination_chars(event) == (17, 21)
    with pytest.raises(ValueError, match="no destination"):
        destination_chars(Event("y", "Mary went to the parkway.", "movement", "Mary", location="park"))


# --------------------------------------------------------------------------- loader


def test_loader_reads_fixture_round_trips_and_normalizes_types(tmp_path):
    sessions = load_sessions(FIXTURE)
    assert [s.session_id for s in sessions] == ["hand-1", "hand-2"]
    assert [q.type for q in sessions[1].questions] == ["current_location", "count", "order"]
    assert sessions[1].source_stories is None and sessions[1].extra == {"split": "state"}
    assert sessions[0].questions[3].answers == ["0", "zero", "none"]
    out = tmp_path / "copy.json"
    save_sessions(sessions, out)
    assert load_sessions(out) == sessions
    assert [to_json(s) for s in load_sessions(out)] == [to_json(s) for s in sessions]
    counted = tmp_path / "counted.json"
    counted.write_text(json.dumps(_broken(lambda d: d[1]["questions"][1].update(answer=3, answer_aliases=["three"]))))
    assert load_sessions(counted)[1].questions[1].answers == ["3", "three"]  # an integer count reads as digits
    lines = tmp_path / "copy.jsonl"
    lines.write_text("".join(json.dumps(to_json(s)) + "\n" for s in sessions))
    assert load_sessions(lines) == sessions


def _broken(edit):
    data = json.loads(FIXTURE.read_text())
    edit(data)
    return data


@pytest.mark.parametrize("edit, message", [
    (lambda d: d[0]["events"][3].pop("location"), r"session #0 \(session_id=hand-1\) events\[3\] \(movement\): "
                                                  r"missing field\(s\) location"),
    (lambda d: d[1]["questions"][2].pop("answer"), r"session #1 \(session_id=hand-2\) questions\[2\]: missing field"
                                                   r"\(s\) answer"),
    (lambda d: d[0]["events"][5].pop("recipient"), r"events\[5\] \(transfer\): missing field\(s\) recipient"),
    (lambda d: d[1].pop("session_id"), r"session #1: missing field\(s\) session_id"),
    (lambda d: d[0]["events"][2].update(kind="teleport"), r"events\[2\]: event kind 'teleport' is not one of"),
    (lambda d: d[0]["events"][0].update(location="attic"), r"events\[0\]: destination 'attic' does not occur"),
    (lambda d: d[0]["questions"][0].update(type="trivia"), r"questions\[0\]: question type 'trivia' is not one of"),
    (lambda d: d[0]["events"][1].update(id="e0"), r"event id 'e0' repeats"),
    (lambda d: d[1].update(session_id="hand-1"), r"session id 'hand-1' repeats"),
    (lambda d: d[0].update(events=[]), r"events must be a non-empty list"),
    (lambda d: d[0]["questions"][3].update(answer=True), r"questions\[3\]: field answer must be a non-empty string"),
])
def test_loader_refuses_a_malformed_file_with_a_named_error(tmp_path, edit, message):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(_broken(edit)))
    with pytest.raises(MINTEvalFormatError, match=message) as err:
        load_sessions(path)
    assert str(path) in str(err.value)


def test_loader_refuses_files_that_are_not_session_lists(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(MINTEvalFormatError, match=r"bad\.json: not valid JSON"):
        load_sessions(bad)
    bad.write_text(json.dumps({"events": []}))
    with pytest.raises(MINTEvalFormatError, match=r"expected a JSON list of sessions"):
        load_sessions(bad)
    with pytest.raises(MINTEvalFormatError, match=r"here: expected an object, got list"):
        session_from_json([], "here")


def test_a_bad_source_file_fails_before_a_model_loads(tmp_path):
    with pytest.raises(InvalidParameter, match=r"source: .*missing\.json"):
        MINTEvalStudy(source=str(tmp_path / "missing.json"))
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(_broken(lambda d: d[0]["events"][2].pop("object"))))
    with pytest.raises(InvalidParameter, match=r"source: .*broken\.json session #0 .*missing field\(s\) object"):
        MINTEvalStudy(source=str(path))


@pytest.mark.parametrize("field, value", [("n_sessions", 0), ("questions_per_type", 0), ("max_new_tokens", 0),
                                          ("cases_per_batch", 0), ("share", 1.5), ("max_events", 10),
                                          ("tasks", ("qa4",)), ("min_events", 0)])
def test_bad_parameters_fail_before_a_model_loads(field, value):
    with pytest.raises(InvalidParameter, match=field):
        MINTEvalStudy(**{field: value})


# --------------------------------------------------------------------------- state, questions, generator


def test_questions_follow_the_replayed_state(hand):
    state = replay(hand.events)
    assert not state.anomalies
    asked = {text: (answer, aliases) for cands in candidates(state).values() for text, answer, aliases in cands}
    assert asked["Where is Mary?"][0] == "bedroom"
    assert asked["Where is the apple?"][0] == "kitchen"  # dropped in the kitchen, not carried to the bedroom
    assert asked["Where was Mary before the bedroom?"][0] == "kitchen"
    assert asked["Where did Mary drop the apple?"][0] == "kitchen"
    assert asked["Where is the object that Jeff gave to Mary?"][0] == "kitchen"
    assert asked["Where was Mary when Jeff went to the garden?"][0] == "hallway"
    assert asked["How many times did Mary move?"] == ("3", ("three",))
    assert asked["How many objects is Jeff carrying?"] == ("0", ("zero", "none"))
    assert asked["What was the second place Mary went to?"][0] == "kitchen"
    assert asked["Which did Mary visit first, the bedroom or the hallway?"][0] == "hallway"
    assert "Where is the person carrying the apple?" not in asked  # nobody holds it
    # Every question of the fixture that the generator could ask gets the fixture's answer.
    for q in hand.questions:
        if q.question in asked:
            assert asked[q.question][0] == q.answer, q.question


def test_state_names_contradictions():
    from kvprobe.studies.minteval.stories import parse_event

    events = [parse_event(t, str(i)) for i, t in enumerate(
        ["Mary went to the garden.", "Mary got the milk there.", "John went to the office.", "John took the milk.",
         "John dropped the apple."])]
    assert replay(events).anomalies == ["event 3: John takes the milk that Mary holds",
                                        "event 4: John drops the apple without holding it"]


@pytest.fixture(scope="module")
def generated():
    return generate_sessions(6)


def test_generator_is_deterministic_prefix_stable_and_consistent(generated):
    assert [to_json(s) for s in generate_sessions(4)] == [to_json(s) for s in generated[:4]]
    assert generate_sessions(2, seed=1)[0].events != generated[0].events
    sentences = {s.story_id: [e.text for e in s.events] for t in ("qa1", "qa2", "qa3", "qa5") for s in read_stories(t)}
    for s in generated:
        assert 18 <= len(s.events) <= 148 and s.extra == {"origin": "generated", "task": s.extra["task"]}
        assert not replay(s.events).anomalies
        assert {q.type for q in s.questions} == {"current_location", "historical_location", "count", "order",
                                                 "multi_hop"}
        # Events are the source stories' sentences, in order, verbatim.
        texts = [t for story in s.source_stories for t in sentences[story]]
        assert [e.text for e in s.events] == texts[:len(s.events)]
        assert session_sources(dataclasses.replace(s, source_stories=None)) <= set(s.source_stories)


def test_generated_sessions_round_trip_through_the_loader(generated, tmp_path):
    path = tmp_path / "generated.json"
    save_sessions(generated, path)
    assert load_sessions(path) == generated


def test_components_join_sessions_that_share_a_source_story():
    assert components({"s1": {"qa3:1"}, "s2": {"qa3:2"}, "s3": {"qa3:2", "qa3:1"}, "s4": {"qa1:9"}, "s5": set()}) \
        == {"s1": "s1", "s2": "s1", "s3": "s1", "s4": "s4", "s5": "s5"}
    hand2 = load_sessions(FIXTURE)[1]
    assert matched_stories([e.text for e in hand2.events]) == {"qa1:0"}  # no source_stories field: matched
    assert matched_stories([e.text for e in hand2.events][:4]) == set()  # shorter than a run of 5


def test_default_generated_set_has_the_papers_shape():
    sessions = generate_sessions()
    groups = components({s.session_id: session_sources(s) for s in sessions})
    assert len(sessions) == 99 and 75 <= len(set(groups.values())) < 99
    assert min(len(s.events) for s in sessions) >= 18 and max(len(s.events) for s in sessions) <= 148


# --------------------------------------------------------------------------- study on a tiny model


def test_released_file_run_masks_resumes_and_summarizes(llama, tmp_path):
    study = MINTEvalStudy(source=str(FIXTURE), max_new_tokens=3)
    case = study.cases()[0]
    history = llama.prefill(study.prompt(llama, case))
    conditions = study.conditions(llama, case, history)
    assert list(conditions) == list(CONDITIONS)
    hidden = [event_segment(i) for i in (0, 1, 3)]
    assert conditions["source"].spans == tuple(history.span(n) for n in hidden)
    value_tokens = {p for s in conditions["value"].spans for p in s.positions()}
    assert value_tokens < {p for s in conditions["source"].spans for p in s.positions()}
    assert "".join(llama.tokenizer.decode(history.input_ids[s.start:s.end]) for s in conditions["value"].spans) \
        .replace(" ", "") == "hallwaygardenkitchen"
    assert conditions["recompute"].segments == tuple(hidden)
    assert conditions["online"].replacements == tuple(history.span(event_segment(i)) for i in (3, 4, 8))

    out = tmp_path / "run"
    run_study(study, llama, out, progress=False)
    first = (out / "results.jsonl").read_bytes()
    rows = [json.loads(line) for line in first.decode().splitlines()]
    assert len(rows) == (6 + 3) * len(CONDITIONS)
    assert {r["group"] for r in rows} == {"hand-1", "hand-2"}  # qa5:7 and the matched qa1:0 do not meet
    assert {r["hidden_records"] for r in rows if r["case_id"] == "hand-1"} == {3}
    assert all(r["question"] in {q.question for s in load_sessions(FIXTURE) for q in s.questions} for r in rows)
    (out / "results.jsonl").write_text("".join(first.decode().splitlines(keepends=True)[:6 * len(CONDITIONS)]))
    run_study(study, llama, out, progress=False)
    assert (out / "results.jsonl").read_bytes() == first
    summary = write_summary("minteval", out)
    assert summary["sessions"] == 2 and summary["components"] == 2 and summary["questions"] == 9
    assert {(c["scope"], c["policy"]) for c in summary["cells"]} >= {("all", "online"), ("multi_hop", "source")}
    report = (out / "report.md").read_text()
    assert "`minteval_sessions.json`" in report and "**Generated**" not in report and "rule grader" in report


def test_generated_run_is_labelled_and_a_session_without_superseded_records_gets_full_access(llama, tmp_path):
    study = MINTEvalStudy(n_sessions=2, questions_per_type=1, max_events=24, max_new_tokens=2, header=False)
    info = run_study(study, llama, tmp_path, progress=False)
    assert info.cases_run == 2
    config = json.loads((tmp_path / "config.json").read_text())["study_config"]
    assert config["data"] == "generated" and config["history_header"] is None
    write_summary("minteval", tmp_path)
    assert "**Generated** sessions" in (tmp_path / "report.md").read_text()
    lone = dataclasses.replace(load_sessions(FIXTURE)[1], events=load_sessions(FIXTURE)[1].events[:3])
    case = type(study.cases()[0])(lone, "g")
    history = llama.prefill(study.prompt(llama, case))
    assert all(isinstance(c, kvprobe.Full) for c in study.conditions(llama, case, history).values())


# --------------------------------------------------------------------------- statistics and grading


def _rows(out: Path, outcomes: dict[str, dict[str, list[int]]], groups: dict[str, str]) -> None:
    """Hand-made rows: ``outcomes[condition][session]`` = exact matches of its questions."""
    out.mkdir(exist_ok=True)
    with open(out / "results.jsonl", "w") as f:
        for condition, by_session in outcomes.items():
            for session, ems in by_session.items():
                for i, em in enumerate(ems):
                    f.write(json.dumps({"case_id": session, "session": session, "group": groups[session],
                                        "condition": condition, "query": "count" if i % 2 else "order",
                                        "question_id": f"q{i}", "em": em, "em_strict_boxed": em, "contains": em,
                                        "stop_reason": "eos", "output": "x", "question": "Q?",
                                        "answers": ["x"]}) + "\n")


def test_component_bootstrap_is_wider_than_session_bootstrap_when_sessions_repeat(tmp_path):
    """Sessions within a component change together: resampling components must give the wider interval."""
    sessions = [f"s{i}" for i in range(12)]
    groups = {s: f"c{i // 3}" for i, s in enumerate(sessions)}
    full = {s: [1, 1, 1, 1] for s in sessions}
    source = {s: ([0, 0, 0, 0] if groups[s] in ("c0", "c1") else [1, 1, 1, 1]) for s in sessions}
    _rows(tmp_path, {"full": full, "source": source}, groups)
    summary = summarize(tmp_path, draws=2000)
    cell = next(c for c in summary["cells"] if c["scope"] == "all" and c["policy"] == "source")
    assert cell["change_component"]["pp"] == pytest.approx(-50.0) and cell["reversals"] == 24
    width = {unit: np.diff(cell[f"change_{unit}"]["ci"])[0] for unit in ("component", "session")}
    assert width["component"] > width["session"] > 0
    assert summary["components"] == 4 and summary["sessions"] == 12
    count = next(c for c in summary["cells"] if c["scope"] == "count" and c["policy"] == "source")
    assert count["n"] == 24 and count["em"] == 12


def test_grade_run_writes_judge_verdicts_that_the_summary_reads(tmp_path):
    from kvprobe.studies.common.judge import BatchedJudge, JudgeReply
    from kvprobe.studies.minteval.grading import grade_run, rubric

    class Says:  # a judge client that answers "yes" exactly when the displayed answer is "garden"
        def complete(self, prompt):
            tasks = json.loads(prompt.split("\n\n", 1)[1])
            verdict = {t["id"]: "yes" if "Model answer: garden\n" in t["prompt"] else "no" for t in tasks}
            return JudgeReply(json.dumps({"results": [{"id": i, "verdict": v, "explanation": "."}
                                                      for i, v in verdict.items()]}), "says-1")

    _rows(tmp_path, {"full": {"s0": [1, 0]}, "source": {"s0": [0, 0]}}, {"s0": "c0"})
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    rows[0]["output"] = "The answer is \\boxed{garden}"
    rows[3]["output"] = ""
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "Model answer: garden\n" in rubric(rows[0])
    path = grade_run(tmp_path, BatchedJudge(Says()))
    grades = [json.loads(line) for line in path.read_text().splitlines()]
    assert [g["correct"] for g in grades] == [True, False, False, False]
    assert grades[0]["grader"] == "llm-judge:says-1" and grades[3]["explanation"] == "empty answer"
    summary = summarize(tmp_path, grades=path, draws=100)
    assert next(c for c in summary["cells"] if c["scope"] == "all" and c["policy"] == "full")["judge"] == 1
