"""The revision-history study: loader and its named errors, the changed-text diff, the operations' spans on a
tiny model, the rule grader, the PG-19 generator's answers, runs through the runner, the LLM-judge path and the
summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvprobe
from kvprobe.parameters import field_comments, public_fields
from kvprobe.studies.common.protocol import InvalidParameter, prepared
from kvprobe.studies.revisions.diff import changed_ranges, history_changes
from kvprobe.studies.revisions.data import generate_articles
from kvprobe.studies.revisions.grading import JUDGE_LABELS, grade_run, make_judge
from kvprobe.studies.revisions.history import body_name, header_name
from kvprobe.studies.revisions.rule_grader import rule_grade
from kvprobe.studies.revisions.schema import RevisionsFormatError, dataset_sha256, load_revisions, save_revisions
from kvprobe.studies.revisions.study import CONDITIONS, RevisionsStudy
from kvprobe.studies.revisions.summary import summarize
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.runner import read_rows, run_study

FIXTURE = Path(__file__).parent / "fixtures" / "revisions_sample.json"
#: What the second revision of the fixture's "bridge" article replaces or deletes in the first (word unit).
BRIDGE_CHANGED = ["1890", "morning", "A toll was charged until 1920."]


@pytest.fixture(scope="module", autouse=True)
def _threads(one_thread):
    yield


@pytest.fixture(scope="module")
def tiny():
    return kvprobe.load_model("tiny-llama")


# ----------------------------------------------------------------------------- loader

def test_loader_reads_the_fixture_and_round_trips(tmp_path):
    articles = load_revisions(FIXTURE)
    assert [a.article_id for a in articles] == ["bridge", "mill"]
    bridge, mill = articles
    assert [r.revision_id for r in bridge.revisions] == ["1001", "1002"]
    assert [q.type for q in mill.questions] == ["Counting", "Multi-hop", "History"]
    assert mill.questions[1].source_answerable is None and mill.questions[2].source_answerable == "unanswerable"
    assert bridge.questions[2].options == ("morning", "evening")
    save_revisions(articles, tmp_path / "copy.json")
    assert load_revisions(tmp_path / "copy.json") == articles


def _broken(data: dict, edit: str) -> None:
    a = data["articles"]
    if edit == "no-articles":
        data.pop("articles")
    elif edit == "no-title":
        a[1].pop("title")
    elif edit == "revision-no-text":
        a[1]["revisions"][2].pop("text")
    elif edit == "question-no-answers":
        a[0]["questions"][1].pop("answers")
    elif edit == "empty-answers":
        a[0]["questions"][1]["answers"] = []
    elif edit == "bad-type":
        a[1]["questions"][0]["type"] = "Trivia"
    elif edit == "bad-source":
        a[1]["questions"][0]["source_answerable"] = "maybe"
    elif edit == "no-revisions":
        a[1]["revisions"] = []
    elif edit == "duplicate-revision":
        a[1]["revisions"][1]["revision_id"] = "2001"
    elif edit == "duplicate-article":
        a[1]["article_id"] = "bridge"


@pytest.mark.parametrize("edit, named", [
    ("no-articles", ["missing field(s) articles"]),
    ("no-title", ["article #1", "'mill'", "missing field(s) title"]),
    ("revision-no-text", ["article #1", "revision #2", "missing field(s) text"]),
    ("question-no-answers", ["article #0", "'bridge'", "question #1", "missing field(s) answers"]),
    ("empty-answers", ["article #0", "question #1", "field answers"]),
    ("bad-type", ["article #1", "question #0", "field type", "'Trivia'"]),
    ("bad-source", ["article #1", "question #0", "field source_answerable", "'maybe'"]),
    ("no-revisions", ["article #1", "field revisions is empty"]),
    ("duplicate-revision", ["article #1", "revision_id '2001' repeats"]),
    ("duplicate-article", ["article_id 'bridge' repeats"]),
])
def test_loader_refuses_a_malformed_file_with_a_named_error(tmp_path, edit, named):
    data = json.loads(FIXTURE.read_text())
    _broken(data, edit)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(RevisionsFormatError) as e:
        load_revisions(path)
    for piece in [str(path), *named]:
        assert piece in str(e.value)


def test_loader_refuses_text_that_is_not_json(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"articles": [')
    with pytest.raises(RevisionsFormatError, match="bad.json: not valid JSON"):
        load_revisions(path)


# ----------------------------------------------------------------------------- diff and grading rules

def test_changed_text_units_and_insertions():
    old, new = (r.text for r in load_revisions(FIXTURE)[0].revisions)
    assert [old[a:b] for a, b in changed_ranges(old, new, "word")] == BRIDGE_CHANGED
    assert [old[a:b] for a, b in changed_ranges(old, new, "character")] == ["0", "mor", "A toll was charged until 1920."]
    assert [old[a:b] for a, b in changed_ranges(old, new, "sentence")] == [old]  # all three sentences changed
    assert changed_ranges(old, old + " It was painted green.", "word") == []  # an insertion hides nothing
    assert history_changes([old, new]) == [changed_ranges(old, new), []]  # the final revision is never hidden
    with pytest.raises(ValueError, match="unknown diff unit 'line'"):
        changed_ranges(old, new, "line")


def test_rule_grader_outcomes():
    assert rule_grade("It was built in 1895.", "cap", ["1895"]).outcome == "capped"  # capped takes precedence
    assert rule_grade("It was built in 1895.", "eos", ["1895"]).outcome == "complete"
    assert rule_grade("Maybe 1895, but \\boxed{1890}", "eos", ["1895"]).outcome == "wrong"  # the box is displayed
    assert rule_grade("\\boxed{ }", "eos", ["1895"]).outcome == "wrong"  # an empty displayed answer
    assert rule_grade("I don't know.", "eos", ["1895"]).outcome == "abstain"
    assert rule_grade("Something else.", "eos", ["1895"]).outcome == "wrong"
    options = ("morning", "evening")
    assert rule_grade("In the morning.", "eos", ["morning"], options).outcome == "complete"
    assert rule_grade("The morning, then the evening.", "eos", ["morning"], options).outcome == "wrong"


# ----------------------------------------------------------------------------- generator

def test_generated_histories_answer_their_questions(tmp_path):
    articles = generate_articles(3, seed=7)
    assert dataset_sha256(articles) == dataset_sha256(generate_articles(3, seed=7))
    assert dataset_sha256(articles) != dataset_sha256(generate_articles(3, seed=8))
    save_revisions(articles, tmp_path / "gen.json")
    assert load_revisions(tmp_path / "gen.json") == articles
    for a in articles:
        texts = [r.text for r in a.revisions]
        final, earlier = texts[-1], " ".join(texts[:-1])
        q = {x.question_id: x for x in a.questions}
        assert a.extra["source"] == "generated" and 3 <= len(texts) <= 6
        assert {x.type for x in a.questions} == {"Simple", "History", "Multi-hop", "Counting", "Ordering"}
        assert q["simple"].answers[0] in final
        old = q["history-word"].answers[0]
        assert old in earlier and old not in final  # only non-final text answers it
        assert q["history-deleted"].answers[0] in earlier and q["history-deleted"].answers[0] not in final
        replaced = [e for e in a.extra["edits"] if e["op"] == "replace" and e["slot"] == 0]
        assert q["counting"].answers[0] == str(len(replaced))
        inserted = next(e for e in a.extra["edits"] if e["op"] == "insert")
        k = inserted["revision"]
        assert inserted["start"] in texts[k - 1] and inserted["start"] not in texts[k - 2]
        assert set(q["ordering"].options) >= set(q["ordering"].answers)
        deleted = next(e for e in a.extra["edits"] if e["op"] == "delete")
        assert all(x in texts[deleted["revision"] - 1] and x not in texts[deleted["revision"] - 2]
                   for x in q["multihop"].answers)


def test_bad_parameters_fail_before_a_model_loads(tmp_path):
    with pytest.raises(InvalidParameter, match="diff_unit"):
        RevisionsStudy(diff_unit="line")
    with pytest.raises(InvalidParameter, match="condition_set"):
        RevisionsStudy(condition_set=("full", "rebuild"))
    with pytest.raises(InvalidParameter, match="max_revisions"):
        RevisionsStudy(max_revisions=11)
    with pytest.raises(InvalidParameter, match="n_articles"):
        RevisionsStudy(n_articles=None)
    bad = tmp_path / "bad.json"
    bad.write_text('{"articles": [{"article_id": "x"}]}')
    with pytest.raises(InvalidParameter, match="source: .*bad.json article #0"):
        RevisionsStudy(source=str(bad))
    comments = field_comments(RevisionsStudy)
    assert all(comments.get(f.name) for f in public_fields(RevisionsStudy))


# ----------------------------------------------------------------------------- operations on a tiny model

def _tokens_overlapping(history, segment, pieces):
    """Token positions whose characters overlap any of ``pieces`` (substrings of ``segment``), from offsets."""
    start, _ = history.rendered.segments[segment]
    text = history.text[start:history.rendered.segments[segment][1]]
    ranges = [(start + text.index(p), start + text.index(p) + len(p)) for p in pieces]
    return {i for i, (a, b) in enumerate(history.offsets) if b > a and any(a < hi and b > lo for lo, hi in ranges)}


def _hidden(condition):
    return {p for layer in condition.state.hidden.values() for p in layer.nonzero().flatten().tolist()}


def test_changed_text_mask_of_a_two_revision_fixture_hides_exactly_the_changed_tokens(tiny):
    study = RevisionsStudy(source=str(FIXTURE))
    case = study.cases()[0]
    history = tiny.prefill(study.prompt(tiny, case))
    raw = study.conditions(tiny, case, history)
    conditions = {n: prepared(tiny, history, c) for n, c in raw.items()}
    assert list(conditions) == list(CONDITIONS)
    changed = _tokens_overlapping(history, body_name(1), BRIDGE_CHANGED)
    assert changed and _hidden(conditions["changed-text"]) == changed
    body = set(history.span(body_name(1)).positions())
    assert _hidden(conditions["whole-source"]) == body
    headers = {p for k in (1, 2) for p in history.span(header_name(k)).positions()}
    assert not headers & (_hidden(conditions["changed-text"]) | _hidden(conditions["whole-source"]))
    edited = raw["recompute"].edited_prompt(history)  # the non-final body is gone, the headers stay
    assert [n for n, _ in edited.segments] == ["intro", "header:1", "header:2", "body:2"]
    assert conditions["recompute"].state.length == len(tiny.tokenize(edited)[1]) < len(history) - len(body) + 5


def test_run_on_the_fixture_grid_summary_and_determinism(tiny, tmp_path):
    study = RevisionsStudy(source=str(FIXTURE), max_new_tokens=3)
    info = run_study(study, tiny, tmp_path / "a", progress=False)
    rows = list(read_rows(tmp_path / "a"))
    assert info.cases_run == 2 and len(rows) == 6 * len(CONDITIONS)
    assert {(r["article_id"], r["question_id"]) for r in rows if r["condition"] == "recompute"} == \
        {(a, q) for a in ("bridge", "mill") for q in ("q1", "q2", "q3")}
    assert all(r["outcome"] == rule_grade(r["output"], r["stop_reason"], r["answers"], r["options"]).outcome
               for r in rows)
    hidden = {(r["article_id"], r["condition"]): r["hidden_tokens"] for r in rows}
    assert hidden[("bridge", "full")] == 0 < hidden[("bridge", "changed-text")] < hidden[("bridge", "whole-source")]
    assert hidden[("bridge", "whole-source")] == hidden[("bridge", "recompute")]
    summary = write_summary("revisions", tmp_path / "a")
    assert summary["questions"] == 6 and summary["answerable"] == 5  # "unanswerable" is left out, null kept
    assert [c["n"] for c in summary["cells"]] == [5] * 4
    run_study(RevisionsStudy(source=str(FIXTURE), max_new_tokens=3), tiny, tmp_path / "b", progress=False)
    assert (tmp_path / "a" / "results.jsonl").read_bytes() == (tmp_path / "b" / "results.jsonl").read_bytes()
    report = (tmp_path / "a" / "report.md").read_text()
    assert "Articles from `revisions_sample.json`" in report and "rule grader" in report and "GPT-5.6" in report


def test_summary_counts_outcomes_and_paired_changes(tiny, tmp_path):
    """Rewrite a real run's stop reasons and outcomes to a known pattern; the summary must recount it."""
    run_study(RevisionsStudy(source=str(FIXTURE), max_new_tokens=2), tiny, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    for r in rows:  # full: all complete; whole-source: the bridge questions wrong; changed-text: one capped
        r["stop_reason"], r["outcome"] = "eos", "complete"
        if r["condition"] == "whole-source" and r["article_id"] == "bridge":
            r["outcome"] = "wrong"
        if r["condition"] == "changed-text" and (r["article_id"], r["question_id"]) == ("mill", "q1"):
            r["stop_reason"], r["outcome"] = "cap", "capped"
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    s = summarize(tmp_path, draws=2000)
    cells = {c["operation"]: c for c in s["cells"]}
    assert cells["full"]["complete"] == 5 and cells["whole-source"]["wrong"] == 3
    assert cells["whole-source"]["change_vs_full"]["change"] == -3
    lo, hi = cells["whole-source"]["change_vs_full"]["ci"]
    assert -6 <= lo < hi <= 0  # whole articles resampled: a draw loses 0 (mill twice), 3 or 6 (bridge twice)
    assert cells["changed-text"]["capped"] == 1 and cells["changed-text"]["change_vs_full"]["change"] == -1
    assert cells["recompute"]["change_vs_full"]["change"] == 0
    history = {c["operation"]: c["complete"] for c in s["by_type"]["History"]}
    assert history == {"full": 1, "whole-source": 0, "changed-text": 1, "recompute": 1}


def test_generated_run_labels_and_too_long_articles(tiny, tmp_path):
    study = RevisionsStudy(n_articles=1, min_words=40, max_words=80, max_new_tokens=2,
                           condition_set=("full", "changed-text"))
    run_study(study, tiny, tmp_path / "gen", progress=False)
    rows = list(read_rows(tmp_path / "gen"))
    assert len(rows) == 7 * 2 and {r["question_type"] for r in rows} == {"Simple", "History", "Multi-hop",
                                                                          "Counting", "Ordering"}
    config = json.loads((tmp_path / "gen" / "config.json").read_text())["study_config"]
    assert config["data"] == "generated" and config["grader"] == "rule-v1"
    write_summary("revisions", tmp_path / "gen")
    assert "Generated demonstration set" in (tmp_path / "gen" / "report.md").read_text()
    long = RevisionsStudy(source=str(FIXTURE), max_new_tokens=tiny.context_length)  # nothing fits
    run_study(long, tiny, tmp_path / "long", progress=False)
    rows = list(read_rows(tmp_path / "long"))
    assert rows and all(r["skipped"] == "history_too_long" and r["output"] is None for r in rows)
    assert summarize(tmp_path / "long", draws=100)["skipped_articles"] == 2


class _ScriptedJudge:
    """A judge model stand-in: "complete" for the bridge article's answers, "wrong" for the others; keeps the
    requests."""

    def __init__(self):
        self.requests = []

    def complete(self, prompt):
        from kvprobe.studies.common.judge import JudgeReply

        self.requests.append(prompt)
        tasks = json.loads(prompt.split("\n\n", 1)[1])
        results = [{"id": t["id"], "verdict": "complete" if "Hammersmith" in t["prompt"] else "wrong",
                    "reference": "agrees", "explanation": "scripted"} for t in tasks]
        return JudgeReply(json.dumps({"results": results}), "scripted-1")


def test_llm_judge_path_writes_grades_the_summary_uses(tiny, tmp_path):
    run_study(RevisionsStudy(source=str(FIXTURE), max_new_tokens=2), tiny, tmp_path, progress=False)
    client = _ScriptedJudge()
    path = grade_run(tmp_path, make_judge(client, log_path=tmp_path / "judge.jsonl"))
    grades = [json.loads(line) for line in path.read_text().splitlines()]
    rows = list(read_rows(tmp_path))
    assert len(grades) == len(rows) and {g["label"] for g in grades} <= set(JUDGE_LABELS)
    sent = "".join(client.requests)
    assert "Hammersmith" in sent and not any(op in sent for op in ("whole-source", "changed-text", "recompute"))
    s = write_summary("revisions", tmp_path)
    assert s["grades_file"] == "grades.jsonl" and s["graders"] == ["llm-judge:scripted-1"]
    answerable = [r for r in rows if r["source_answerable"] in (None, "answerable")]
    capped = sum(r["stop_reason"] != "eos" for r in answerable)
    assert capped and sum(c["capped"] for c in s["cells"]) == capped  # capped still takes precedence
    bridge_eos = sum(r["article_id"] == "bridge" and r["stop_reason"] == "eos" and r["displayed"].strip()
                     for r in answerable)
    assert sum(c["complete"] for c in s["cells"]) == bridge_eos
    assert "LLM judge llm-judge:scripted-1" in (tmp_path / "report.md").read_text()
    with pytest.raises(ValueError, match="labels"):
        from kvprobe.studies.common.judge import BatchedJudge

        grade_run(tmp_path, BatchedJudge(client))
