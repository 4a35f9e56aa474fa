"""Revision histories: reference agreement on all questions, the target-time strata and the source review
before grading, each on a hand-computed run of the two-article fixture (rows written by hand, no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies.common.judge import JudgeReply
from kvprobe.studies.revisions import strings
from kvprobe.studies.revisions.grading import grade_run, make_judge, reference_agreement
from kvprobe.studies.revisions.review import REVIEW, make_reviewer, read_review, review_run, target_time
from kvprobe.studies.revisions.schema import load_revisions
from kvprobe.studies.revisions.study import RevisionsStudy
from kvprobe.studies.revisions.summary import agreement_cells, format_report, summarize

FIXTURE = Path(__file__).parent / "fixtures" / "revisions_sample.json"
#: (article, question) -> (full outcome, whole-source outcome); "capped" means stop_reason "cap".
OUTCOMES = {("bridge", "q1"): ("complete", "complete"), ("bridge", "q2"): ("complete", "wrong"),
            ("bridge", "q3"): ("complete", "capped"), ("mill", "q1"): ("complete", "wrong"),
            ("mill", "q2"): ("wrong", "wrong"), ("mill", "q3"): ("complete", "complete")}
#: The scripted review: mill q2 (not assessed in the data) ambiguous, mill q3 unanswerable; target time by type.
VERDICTS = {("mill", "q2"): "ambiguous", ("mill", "q3"): "unanswerable"}
TIMES = {"Simple": "current", "History": "historical"}
SENTINEL = "ANSWER-SENTINEL"


def _run(tmp_path: Path) -> Path:
    """A run directory of the fixture: config.json as the study writes it, and one row per (question,
    operation) with the outcomes of :data:`OUTCOMES`."""
    study = RevisionsStudy(source=str(FIXTURE), condition_set=("full", "whole-source"))
    (tmp_path / "config.json").write_text(json.dumps({"study": "revisions", "study_config": study.config()}))
    rows = []
    for a in load_revisions(FIXTURE):
        for q in a.questions:
            for op, outcome in zip(("full", "whole-source"), OUTCOMES[(a.article_id, q.question_id)]):
                rows.append({"case_id": a.article_id, "article_id": a.article_id, "group": a.article_id,
                             "question_id": q.question_id, "question_type": q.type, "question": q.question,
                             "answers": list(q.answers), "options": list(q.options),
                             "source_answerable": q.source_answerable, "condition": op, "query": q.type,
                             "stop_reason": "cap" if outcome == "capped" else "eos", "outcome": outcome,
                             "grader": "rule-v1", "displayed": f"{SENTINEL} {q.answers[0]}", "output": "x",
                             "hidden_tokens": 0 if op == "full" else 10, "history_tokens": 100})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    return tmp_path


class _Reviewer:
    """A review model stand-in: :data:`VERDICTS` (else answerable) and :data:`TIMES` (else change-aggregation),
    read off each prompt's question; keeps the requests."""

    def __init__(self):
        self.requests = []
        self.by_question = {q.question: (a.article_id, q) for a in load_revisions(FIXTURE) for q in a.questions}

    def complete(self, prompt):
        self.requests.append(prompt)
        results = []
        for t in json.loads(prompt.split("\n\n", 1)[1]):
            article, q = next(v for text, v in self.by_question.items() if text in t["prompt"])
            results.append({"id": t["id"], "verdict": VERDICTS.get((article, q.question_id), "answerable"),
                            "target_time": TIMES.get(q.type, "change-aggregation"), "explanation": "scripted"})
        return JudgeReply(json.dumps({"results": results}), "review-1")


def test_agreement_cells_hand_computed():
    """Articles a (2 questions) and b (1). Full agrees on a1, a2; whole-source on a2 only. Full: 2/3; a draw of
    b twice has rate 0 (probability 1/4), of a twice 1 (1/4): interval [0, 1]. Whole-source: change -1; a draw
    of a twice loses 2, of b twice 0: interval [-2, 0], -33.3 pp [-66.7, 0]."""
    keys = [("a", "1"), ("a", "2"), ("b", "1")]
    agree = {("a", "1", "full"): True, ("a", "2", "full"): True, ("b", "1", "full"): False,
             ("a", "1", "whole-source"): False, ("a", "2", "whole-source"): True, ("b", "1", "whole-source"): False}
    full, ws = agreement_cells(keys, agree, ["full", "whole-source"], draws=2000, seed=0)
    assert (full["agree"], full["n"], full["rate_ci"]) == (2, 3, [0.0, 1.0]) and full["rate"] == pytest.approx(2 / 3)
    assert "change_vs_full" not in full
    ch = ws["change_vs_full"]
    assert (ws["agree"], ch["change"], ch["ci"], ch["corrections"], ch["reversals"]) == (1, -1, [-2.0, 0.0], 0, 1)
    assert ch["pp"] == pytest.approx(-100 / 3) and ch["pp_ci"] == pytest.approx([-200 / 3, 0.0])


def test_reference_agreement_needs_eos_and_prefers_the_judges_verdict():
    assert reference_agreement({"stop_reason": "eos", "outcome": "complete"})
    assert not reference_agreement({"stop_reason": "eos", "outcome": "wrong"})
    assert reference_agreement({"stop_reason": "eos", "outcome": "wrong"}, {"label": "wrong", "reference": "agrees"})
    assert not reference_agreement({"stop_reason": "eos", "outcome": "complete"}, {"reference": "disagrees"})
    assert not reference_agreement({"stop_reason": "cap", "outcome": "capped"}, {"reference": "agrees"})
    assert reference_agreement({"stop_reason": "eos", "outcome": "complete"}, {"label": "wrong"})  # no verdict: rule


def test_target_time_sources():
    assert target_time({"question_id": "x", "target_time": "current"}, generated=False) == ("current", "data")
    assert target_time({"question_id": "history-word"}, generated=True) == ("historical", "family rule")
    assert target_time({"question_id": "simple"}, generated=True) == ("current", "family rule")
    assert target_time({"question_id": "multihop"}, generated=True) == ("change-aggregation", "family rule")
    assert target_time({"question_id": "simple"}, generated=False) == (strings.TARGET_TIME_DEFAULT, "default")


def test_summary_without_a_review_uses_the_data_labels(tmp_path):
    """Data labels: mill q2 not assessed (kept), mill q3 unanswerable (apart). Answerable: bridge q1-q3, mill
    q1, q2: complete full 4 (mill q2 wrong), whole-source 1 (bridge q1). Reference agreement on all 6: full 5,
    whole-source 2 (bridge q1, mill q3). No target times in the file: every question unclassified."""
    s = summarize(_run(tmp_path), draws=500)
    full, ws = s["cells"]
    assert (s["answerable"], full["complete"], ws["complete"], ws["capped"]) == (5, 4, 1, 1)
    assert ws["change_vs_full"]["change"] == -3
    ra = s["reference_agreement"]
    assert ra["source"] == "rule" and ra["questions"] == 6
    assert [(c["agree"], c["n"]) for c in ra["cells"]] == [(5, 6), (2, 6)]
    assert ra["cells"][1]["change_vs_full"]["change"] == -3
    r = s["source_review"]
    assert not r["judged"] and r["file"] is None and r["differ_from_data"] is None
    assert r["answerability"] == {"questions": 6, "answerable": 4, "partial": 0, "unanswerable": 1, "ambiguous": 0,
                                  "not assessed": 1}
    assert [(q["case_id"], q["question_id"], q["verdict"]) for q in r["apart"]] == [("mill", "q3", "unanswerable")]
    assert r["apart_outcomes"]["whole-source"]["complete"] == 1
    tt = s["target_time"]
    assert tt["sources"] == {"default": 6}
    assert list(tt["strata"]) == ["unclassified"] and tt["strata"]["unclassified"]["answerable"] == 5
    report = format_report(s, {"study_config": {"data": "revisions_sample.json", "max_new_tokens": 4}})
    assert "Source review: none judged in this run" in report and "mill/q3 unanswerable" in report
    assert "Reference agreement with EOS on all 6 questions" in report


def test_review_before_grading_sets_answerable_questions_and_strata(tmp_path):
    """The scripted review: mill q2 ambiguous, mill q3 unanswerable; Simple current, History historical, the
    rest change-aggregation. Answerable: bridge q1-q3, mill q1 (complete full 4, whole-source 1). Strata:
    current {bridge q1}: 1/1 -> 1/1; historical {bridge q2; mill q3 not answerable}: 1/1 -> 0/1, agreement
    2/2 [100, 100] -> 1/2 [0, 100]; change-aggregation {bridge q3, mill q1; mill q2}: 2/2 -> 0/2, agreement
    2/3 -> 0/3."""
    run = _run(tmp_path)
    client = _Reviewer()
    path = review_run(run, make_reviewer(client, log_path=run / "review-log.jsonl"))
    assert path.name == REVIEW
    lines = read_review(path)
    assert len(lines) == 6 and lines[("mill", "q2")]["answerable"] == "ambiguous"
    assert lines[("bridge", "q1")]["reviewer"] == "source-review:review-1"
    sent = "".join(client.requests)
    assert "Hammersmith" in sent and SENTINEL not in sent and "whole-source" not in sent  # no answers, no operation
    s = summarize(run, draws=500)
    assert s["answerable"] == 4 and [c["complete"] for c in s["cells"]] == [4, 1]
    r = s["source_review"]
    assert r["judged"] and r["file"] == REVIEW and r["reviewers"] == ["source-review:review-1"]
    assert r["differ_from_data"] == 1  # mill q2: not assessed in the data, ambiguous in the review
    assert [(q["question_id"], q["verdict"]) for q in r["apart"]] == [("q2", "ambiguous"), ("q3", "unanswerable")]
    assert s["reference_agreement"]["cells"][0]["agree"] == 5  # all questions, whatever the review says
    tt = s["target_time"]
    assert tt["sources"] == {"review": 6} and list(tt["strata"]) == ["historical", "change-aggregation", "current"]
    cur, hist, chg = (tt["strata"][k] for k in ("current", "historical", "change-aggregation"))
    assert (cur["questions"], cur["answerable"], [c["complete"] for c in cur["cells"]]) == (1, 1, [1, 1])
    assert (hist["questions"], hist["answerable"], [c["complete"] for c in hist["cells"]]) == (2, 1, [1, 0])
    assert hist["cells"][1]["change_vs_full"]["change"] == -1
    full_a, ws_a = hist["reference_agreement"]
    assert (full_a["agree"], full_a["rate_ci"], ws_a["agree"], ws_a["rate_ci"]) == (2, [1.0, 1.0], 1, [0.0, 1.0])
    assert (chg["questions"], chg["answerable"], [c["complete"] for c in chg["cells"]]) == (3, 2, [2, 0])
    assert [c["agree"] for c in chg["reference_agreement"]] == [2, 0]
    assert summarize(run, draws=500, review=None)["source_review"]["judged"] is False  # the data's labels again


class _Grader:
    """An answer-judge stand-in: "complete" for every answer, reference "disagrees" for the bridge answers."""

    def __init__(self):
        self.requests = []

    def complete(self, prompt):
        self.requests.append(prompt)
        tasks = json.loads(prompt.split("\n\n", 1)[1])
        results = [{"id": t["id"], "verdict": "complete", "explanation": "scripted",
                    "reference": "disagrees" if "Hammersmith" in t["prompt"] else "agrees"} for t in tasks]
        return JudgeReply(json.dumps({"results": results}), "grader-1")


def test_grades_give_reference_agreement_and_carry_the_reviewed_label(tmp_path):
    """Graded after the review: every rubric names the reviewed label (mill q2: ambiguous, though the data has
    none); complete for every EOS answer, reference agreement only for the mill answers with EOS (6: capped
    bridge q3 under whole-source is not among them anyway). A grades file without reference verdicts falls back
    to the rule's agreement."""
    run = _run(tmp_path)
    review_run(run, make_reviewer(_Reviewer()))
    client = _Grader()
    grades = grade_run(run, make_judge(client))
    sent = "".join(client.requests)
    assert "Source assessment: ambiguous" in sent and "not assessed" not in sent and '\\"reference\\"' in sent
    assert all("reference" in json.loads(line) for line in grades.read_text().splitlines())
    s = summarize(run, draws=200)
    assert [c["complete"] for c in s["cells"]] == [4, 3]  # answerable: bridge q1-q3, mill q1; bridge q3 capped
    ra = s["reference_agreement"]
    assert ra["source"] == "judge" and [c["agree"] for c in ra["cells"]] == [3, 3]
    stripped = run / "old-grades.jsonl"
    stripped.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "reference"}) + "\n"
                                for line in grades.read_text().splitlines()))
    old = summarize(run, draws=200, grades=stripped)
    assert old["reference_agreement"]["source"] == "rule"
    assert [c["agree"] for c in old["reference_agreement"]["cells"]] == [5, 2]
