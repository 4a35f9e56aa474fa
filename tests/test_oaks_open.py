"""Open OAKS answers (studies/matched_scores/open_answers): hand-computed cases of the rubric prompts, reply parsing, the literal
quotation of the masked record, the rule grader, the answerable subset, the component bootstrap and the
three-protocol comparison; the study's prompt on a tiny model."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kvprobe.studies.common.judge import JudgeReply
from kvprobe.studies.matched_scores.open_answers import grading, strings, summary

ROW = {"case_id": "q1@3", "condition": "mask", "question": "Who rowed?", "reference": "Roman", "old_answer": "Dick",
       "earlier": "Dick rowed to Hammersmith at noon.", "later": "Roman rowed to Hammersmith at noon.",
       "unrelated": "A cow stood in the field.", "output": " Roman rowed. ", "stop_reason": "eos"}


# ----------------------------------------------------------------------------- rubric and replies

def test_prompts_hold_the_excerpts_question_reference_and_answer_never_the_condition():
    p = grading.prompt("completeness", ROW)
    assert p.startswith("Earlier excerpt:\nDick rowed to Hammersmith at noon.\n\nLater excerpt:\nRoman rowed")
    assert "Unrelated excerpt:\nA cow stood in the field.\n\nQuestion: Who rowed?\nReference answer: Roman\n" \
           "Candidate answer: Roman rowed.\n\n" in p
    assert p.endswith("Reply with one word: complete, partial, abstain or wrong.")
    assert "mask" not in p and "keeps at least one required detail and omits another, without a wrong claim" in p
    only = grading.prompt("reference_only", ROW)
    assert only.startswith("Question: Who rowed?\nReference answer: Roman\nCandidate answer: Roman rowed.\n\n")
    assert "excerpt" not in only.lower()
    # per-question prompts hold no answer, so the three arms of a question share one prompt
    assert grading.prompt("answerability", ROW) == grading.prompt("answerability", {**ROW, "output": "x"})
    assert "Candidate answer" not in grading.prompt("reference_support", ROW)


@pytest.mark.parametrize("reply,labels,label", [
    ("Partial. It omits the place.", strings.COMPLETENESS_LABELS, "partial"),
    ("The answer is complete; nothing wrong.", strings.COMPLETENESS_LABELS, "complete"),
    ("incomplete", strings.COMPLETENESS_LABELS, grading.UNPARSED),
    ("non-partial", strings.COMPLETENESS_LABELS, grading.UNPARSED),
    ("Yes.", strings.AGREEMENT_LABELS, "yes"),
    ("Nothing to add. No.", strings.AGREEMENT_LABELS, "no"),
    ("UNANSWERABLE", strings.ANSWERABILITY_LABELS, "unanswerable"),
])
def test_first_label_reads_the_first_label_word(reply, labels, label):
    assert grading.first_label(labels)(reply) == label


# ----------------------------------------------------------------------------- rule grader and quotation

def test_masked_quote_needs_a_run_found_only_in_the_masked_record():
    visible = [ROW["question"], ROW["later"], ROW["unrelated"]]
    # "dick rowed to hammersmith" is in the earlier excerpt only ("roman rowed to hammersmith" is visible)
    assert grading.masked_quote("I think Dick rowed to Hammersmith.", ROW["earlier"], visible) == \
        "dick rowed to hammersmith"
    assert grading.masked_quote("Roman rowed to Hammersmith at noon.", ROW["earlier"], visible) is None
    assert grading.masked_quote("Dick rowed", ROW["earlier"], visible) is None  # shorter than four words
    assert grading.masked_quote("Dick rowed to", ROW["earlier"], visible, n=3) == "dick rowed to"


@pytest.mark.parametrize("output,label", [("Roman.", "complete"), ("Dick, then Roman.", "wrong"), ("Dick", "wrong"),
                                          ("", "abstain"), ("It is not mentioned.", "abstain"),
                                          ("Romans.", "wrong")])
def test_rule_label(output, label):
    assert grading.rule_label(output, "Roman", "Dick") == label


def test_rule_verdicts_give_one_label_to_all_three_protocols():
    cols = grading.rule_columns("Dick rowed to Hammersmith", "eos", "Roman", "Dick", ROW["earlier"],
                                [ROW["question"], ROW["later"]])
    assert cols["label"] == "wrong" and cols["mentions_old"] and not cols["mentions_reference"]
    assert cols["quotes_old_source"] == "dick rowed to hammersmith"
    v = grading.rule_verdicts({**ROW, "label": "complete"})
    assert v == {"answerability": "answerable", "reference_support": "supported", "completeness": "complete",
                 "agreement": "yes", "reference_only": "yes"}
    assert grading.rule_verdicts({**ROW, "label": "complete", "later": "Nobody rowed."})["answerability"] == \
        "unanswerable"


# ----------------------------------------------------------------------------- the model grader's protocols

class Scripted:
    """A stand-in judge client (no model): a fixed reply per prompt kind, counting the requests."""

    def __init__(self, batched: bool) -> None:
        self.prompts: list[str] = []
        if not batched:
            self.complete_many = self._many

    @staticmethod
    def _verdict(prompt: str) -> str:
        if "Candidate answer: Dick" in prompt:
            return "wrong" if "Grade the candidate" in prompt else "no"
        if "Is the question answerable" in prompt:
            return "answerable"
        if "support the reference" in prompt:
            return "partial"
        return "complete" if "Grade the candidate" in prompt else "yes"

    def _many(self, prompts):
        self.prompts += prompts
        return [JudgeReply(f"{self._verdict(p).capitalize()}.", "scripted-1") for p in prompts]

    def complete(self, prompt):  # the batched JSON protocol
        self.prompts.append(prompt)
        tasks = json.loads(prompt.split("\n\n", 1)[1])
        return JudgeReply(json.dumps({"results": [{"id": t["id"], "verdict": self._verdict(t["prompt"]),
                                                   "explanation": "ok"} for t in tasks]}), "scripted-1")


@pytest.mark.parametrize("batched", [False, True])
def test_grade_rows_judges_each_distinct_prompt_once(batched):
    rows = [{**ROW, "condition": "full", "output": "Roman"}, {**ROW, "condition": "mask", "output": "Dick"},
            {**ROW, "condition": "control", "output": "Roman"}]
    client = Scripted(batched)
    lines = grading.grade_rows(rows, client)
    assert [(g["completeness"], g["agreement"], g["reference_only"]) for g in lines] == \
        [("complete", "yes", "yes"), ("wrong", "no", "no"), ("complete", "yes", "yes")]
    assert {g["answerability"] for g in lines} == {"answerable"} and {g["reference_support"] for g in lines} == {"partial"}
    assert lines[0]["grader"] == "source-aware:scripted-1"
    # 1 + 1 question prompts, 2 distinct answers x 3 answer kinds (one batched request per kind)
    assert len(client.prompts) == (5 if batched else 8)


# ----------------------------------------------------------------------------- summary units

def test_components_link_questions_sharing_a_source_text():
    first = [{"case_id": "a", "earlier": "s1", "later": "s2"}, {"case_id": "b", "earlier": "s3", "later": "s4"},
             {"case_id": "c", "earlier": "s2", "later": "s5"}]
    assert summary.components(first) == ["a", "b", "a"]


def test_paired_pp_is_the_weighted_mean_difference_per_draw():
    diff = np.array([-1, 0, 1, -1])
    weights = np.array([[1, 1, 1, 1], [2, 0, 0, 2], [0, 2, 2, 0], [1, 0, 3, 0]])
    got = summary.paired_pp(diff, weights)
    assert got["pp"] == -25.0 and (got["change"], got["corrections"], got["reversals"]) == (-1, 1, 2)
    # draws: -25, -100, +50, (-1 + 3) / 4 = +50 -> percentiles of [-100, -25, 50, 50]
    assert got["ci"] == pytest.approx(list(np.percentile([-100, -25, 50, 50], [2.5, 97.5])))


def _write_run(tmp_path, grades: list[dict] | None):
    """Three questions in two books x three arms; q3's later excerpt lacks the reference."""
    outputs = {"q1": ("Roman", "Dick", "Roman"), "q2": ("Kate", "Kate", "I do not know"), "q3": ("Ann", "Ann", "Ann")}
    rows = []
    for k, (q, outs) in enumerate(outputs.items()):
        ref = {"q1": "Roman", "q2": "Kate", "q3": "Ann"}[q]
        for cond, out in zip(("full", "mask", "control"), outs):
            rows.append({**ROW, "case_id": q, "group": q, "condition": cond, "stratum": f"book{k % 2}",
                         "reference": ref, "earlier": f"{q} earlier", "later": f"{q} later {ref if q != 'q3' else ''}",
                         "output": out, "stop_reason": "eos", "quotes_old_source": None,
                         "label": grading.rule_label(out, ref, "Dick")})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if grades is not None:
        (tmp_path / grading.GRADES).write_text("".join(json.dumps(g) + "\n" for g in grades))
    return rows


def test_summary_answerable_subset_and_protocols_by_the_rule_grader(tmp_path):
    _write_run(tmp_path, None)
    s = summary.summarize(tmp_path, draws=200)
    assert s["graders"] == ["rule-v1"] and s["answerability"] == {"answerable": 2, "unanswerable": 1}
    ans = s["panels"]["answerable"]
    assert ans["n"] == 2 and ans["components"] == 2
    assert ans["protocols"]["complete"]["counts"] == {"full": 2, "mask": 1, "control": 1}
    assert ans["protocols"]["complete"]["mask_vs_full"]["pp"] == -50.0
    assert ans["protocols"]["complete"]["mask_vs_control"]["pp"] == 0.0
    assert ans["agreement_minus_complete"]["pp"] == 0.0  # the rule grader's protocols coincide
    assert ans["losses"]["full"] == {"baseline": 2, "complete": 1, "partial": 0, "abstain": 0, "wrong": 1,
                                     "capped": 0, "unparsed": 0}
    assert s["panels"]["all"]["protocols"]["complete"]["counts"] == {"full": 3, "mask": 2, "control": 2}
    assert s["abstentions"]["control"] == {"justified": 0, "unjustified": 1}
    assert summary.claim_rows(s)[1]["verdict"] == ("not testable here (the rule grader has one protocol: agreement "
                                                   "and completeness coincide)")
    assert "rule_grader" not in s and s["judge_validation"] is None  # a rule-graded run: nothing to gate or beside


def test_summary_reads_the_model_grades_and_compares_protocols(tmp_path):
    verdicts = {  # (case, condition): (completeness, agreement, reference_only)
        ("q1", "full"): ("complete", "yes", "yes"), ("q1", "mask"): ("partial", "yes", "yes"),
        ("q1", "control"): ("complete", "yes", "no"), ("q2", "full"): ("complete", "no", "yes"),
        ("q2", "mask"): ("abstain", "no", "no"), ("q2", "control"): ("complete", "yes", "yes"),
        ("q3", "full"): ("wrong", "no", "no"), ("q3", "mask"): ("complete", "yes", "yes"),
        ("q3", "control"): ("wrong", "no", "no")}
    grades = [{"case_id": c, "condition": k, "completeness": v[0], "agreement": v[1], "reference_only": v[2],
               "answerability": "partial" if c == "q3" else "answerable",
               "reference_support": "partial" if c == "q1" else "supported",
               "grader": "source-aware:m/bfloat16/000000000000"}
              for (c, k), v in verdicts.items()]
    _write_run(tmp_path, grades)
    s = summary.summarize(tmp_path, draws=200)
    assert s["graders"] == ["source-aware:m/bfloat16/000000000000"]
    ans = s["panels"]["answerable"]
    assert ans["n"] == 2
    p = ans["protocols"]
    assert p["complete"]["counts"] == {"full": 2, "mask": 0, "control": 2}
    assert p["agreement"]["counts"] == {"full": 1, "mask": 1, "control": 2}
    assert p["reference_only"]["counts"] == {"full": 2, "mask": 1, "control": 1}
    # per question (agreement change) - (completeness change): q1 (0) - (-1) = 1, q2 (0) - (-1) = 1 -> +100 pp
    assert ans["agreement_minus_complete"]["pp"] == 100.0
    assert ans["losses"]["full"] == {"baseline": 2, "complete": 0, "partial": 1, "abstain": 1, "wrong": 0,
                                     "capped": 0, "unparsed": 0}
    # disagreements: q1 mask (partial, yes), q2 full (complete, no), q2 control none, q3 mask none -> 2, 1 on q1
    assert s["protocol_disagreements"] == {"answers": 9, "disagree": 2, "reference_partial": 1}
    assert s["abstentions"]["mask"] == {"justified": 0, "unjustified": 1}
    claims = summary.claim_rows(s)
    judged = [c for c in claims if c["grader"] == s["graders"][0]]
    assert judged[0]["estimate"].startswith("-100.0") and judged[1]["estimate"].startswith("+100.0")
    # the judge (a model variant) has no audit: its rows are not testable, the rule grader's rows stand beside
    assert all(c["verdict"].startswith("not testable here (judge not validated") for c in judged)
    assert [c["grader"] for c in claims] == [s["graders"][0], "rule-v1 (same answers)"] * 2
    rule = s["rule_grader"]["panels"]["answerable"]
    assert rule["protocols"]["complete"]["counts"] == {"full": 2, "mask": 1, "control": 1}  # the rule grader's own


# ----------------------------------------------------------------------------- the study on a tiny model

def test_open_prompt_has_no_options_and_the_mask_hides_the_earlier_source(llama):
    from kvprobe.studies.matched_scores.open_answers.study import OaksOpenStudy

    study = OaksOpenStudy(oaks_split="all", n_questions=1, max_new_tokens=2)
    case = study.cases()[0]
    prompt = study.prompt(llama, case)
    text = (prompt.system or "") + "".join(t for _, t in prompt.segments)
    assert strings.OPEN_SYSTEM in text and "Candidate A" not in text and "UNKNOWN" not in text
    history = llama.prefill(prompt)
    conditions = study.conditions(llama, case, history)
    mask, control = conditions["mask"], conditions["control"]
    assert sum(s.end - s.start for s in mask.spans) == sum(s.end - s.start for s in control.spans)
    assert case.change.old_source.split()[0] in history.token_text(mask.spans[0])


def test_prefix_sharing_client_replies_as_the_plain_local_client(llama):
    from kvprobe.studies.common.local_judge import LocalJudgeClient

    rows = [{**ROW, "output": "Roman"}, {**ROW, "output": "Dick rowed"}]
    prompts = [grading.prompt(k, r) for r in rows for k in ("completeness", "agreement")]
    plain = LocalJudgeClient(llama, max_new_tokens=3, batch_size=2).complete_many(prompts)
    shared = grading.PrefixSharingClient(llama, max_new_tokens=3, batch_size=2)
    assert [r.text for r in shared.complete_many(prompts)] == [r.text for r in plain]
    assert len(shared._recent) == 4
