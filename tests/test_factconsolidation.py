"""The FactConsolidation study: mapping, loaders, generator, grading, net accuracy, and real tiny-model runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies.factconsolidation.data import generate_history
from kvprobe.studies.factconsolidation import strings
from kvprobe.studies.factconsolidation.grading import grade_run, question_verdict, question_verdicts, read_grades
from kvprobe.studies.factconsolidation.histories import build_histories, mquake_index, without_overlap
from kvprobe.studies.factconsolidation.mapping import map_facts, parse_question, parse_sentence
from kvprobe.studies.factconsolidation.outcomes import losses_by_length, old_alias_group, outcome, transitions
from kvprobe.studies.factconsolidation.rule_grader import grade_columns, rule_label
from kvprobe.studies.factconsolidation.schema import Fact, FactConsolidationFormatError, load_rows, save_rows
from kvprobe.studies.factconsolidation.study import FactConsolidationStudy, fact_segment, study_from_config
from kvprobe.studies.factconsolidation.summary import fallback, summarize
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.judge import BatchedJudge, JudgeReply, instructions_for, parse_reply
from kvprobe.studies.datasets.mquake.schema import MQuAKEFormatError
from kvprobe.studies.common.protocol import InvalidParameter, prepared
from kvprobe.studies.common.runner import run_study

FIXTURE = Path(__file__).parent / "fixtures" / "factconsolidation_released.json"
MQUAKE_FIXTURE = Path(__file__).parent / "fixtures" / "mquake_sample.json"

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------- mapping


def test_mapping_resolves_fixture_conflicts_to_the_latest_fact_and_leaves_ambiguous_names_visible(llama):
    (history,) = build_histories(load_rows(FIXTURE), ("32k",))
    m = history.mapping()
    # 0 -> 6 (capital), 1 -> 4 (citizenship), 2 -> 13 (CEO), 5 -> 7 (employer); 3 and 8 repeat one object.
    assert [(s.number, s.winner, s.old_object, s.new_object) for s in m.superseded] == [
        (0, 6, "Dornholm", "Kellport"), (1, 4, "Ruvania", "Telvia"), (2, 13, "Ilse Brenn", "Arno Pell"),
        (5, 7, "Vantor Works", "Quill Labs")]
    # Jor Tamsin's spouse changes twice (9 -> 10 -> 11): two people share the name; nothing of theirs is hidden.
    assert m.ambiguous == {"Jor Tamsin"} and m.unparsed == (14,)
    # The study's masks hide exactly those sentences (source) and their old objects (value) in a real prefill.
    study = FactConsolidationStudy(source=str(FIXTURE), tiers=("32k",), max_new_tokens=8)
    h = llama.prefill(study.prompt(llama, history))
    conditions = {name: prepared(llama, h, c) for name, c in study.conditions(llama, history, h).items()}

    def hidden(name: str) -> set[int]:
        return {p for layer in conditions[name].state.hidden.values() for p in layer.nonzero().flatten().tolist()}

    assert hidden("source") == {p for n in (0, 1, 2, 5) for p in h.span(fact_segment(n)).positions()}
    assert not hidden("source") & {p for n in (9, 10, 11) for p in h.span(fact_segment(n)).positions()}
    value_text = "".join(h.text[a:b] for a, b in (h.offsets[p] for p in sorted(hidden("value"))))
    assert value_text.replace(" ", "") == "DornholmRuvaniaIlseBrennVantorWorks"
    (ours, *_), (upstream, *_) = (FactConsolidationStudy(source=str(FIXTURE), tiers=("32k",), query_template=t,
                                                         max_new_tokens=8)
                                  .questions(llama, history, h) for t in ("ours", "memoryagentbench"))
    assert ours.text.endswith("Question: What is the capital of Ruvania? Return only the final answer within \\boxed{}.")
    assert upstream.text.startswith("Pretend you are a knowledge management system.") and \
        upstream.text.endswith("Knowledge Pool, What is the capital of Ruvania? Return only the final answer within "
                               "\\boxed{}. \nAnswer:")
    recomputed = study.conditions(llama, history, h)["recompute"].edited_prompt(h)
    kept = " ".join(text for _, text in recomputed.segments)
    assert "Dornholm." not in kept and "is a citizen of Ruvania" not in kept and "Jor Tamsin is married to Pia" in kept


def test_templates_pick_the_most_specific_relation_and_questions_map_to_keys():
    assert parse_sentence("Paris is located in the country of France.").relation == "P17"
    assert parse_sentence("Paris is located in Ile de France.").relation == "P131/P276"
    assert parse_sentence("The capital of Ruvania is Kellport.").relation == "P36"  # not "The [X] is __"
    t = parse_sentence("The capital of United States of America is Washington, D.C..")
    assert (t.subject, t.object) == ("United States of America", "Washington, D.C.")
    assert parse_sentence("Telvia is a lovely place.") is None
    assert parse_question("What is the country of citizenship of Kessa Marlo?") == ("Kessa Marlo", "P27")
    assert parse_question("Where is Paris located?") == ("Paris", "P131/P276")


def test_entity_ids_make_a_shared_name_ambiguous():
    facts = [Fact(0, "Kessa Marlo is a citizen of Ruvania."), Fact(1, "Kessa Marlo is a citizen of Telvia.")]
    assert [s.number for s in map_facts(facts).superseded] == [0]
    resolved = map_facts(facts, {"Kessa Marlo": ["Q1", "Q2"]})
    assert resolved.superseded == () and resolved.ambiguous == {"Kessa Marlo"}
    assert map_facts(facts, {"Kessa Marlo": ["Q1"]}).superseded  # one id: an update, not two people


# ----------------------------------------------------------------------------- loaders


def _write(tmp_path: Path, rows) -> Path:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows) if not isinstance(rows, str) else rows)
    return path


@pytest.mark.parametrize("mutate, message", [
    (lambda rows: rows[1].pop("answers"), r"row #1: missing field\(s\) answers"),
    (lambda rows: rows[0]["metadata"].pop("source"), r"row #0 metadata: missing field\(s\) source"),
    (lambda rows: rows[0]["metadata"].update(source="eventqa_full"), r"row #0: metadata.source 'eventqa_full'"),
    (lambda rows: rows[1]["answers"].pop(), r"row #1: answers must be a list as long as questions"),
    (lambda rows: rows[0]["answers"].__setitem__(2, []), r"row #0: answers\[2\] must be a non-empty list"),
    (lambda rows: rows[0]["metadata"]["qa_pair_ids"].pop(), r"row #0: metadata.qa_pair_ids"),
    (lambda rows: rows[0].update(context="no facts here"), r"row #0: context holds no numbered facts"),
    (lambda rows: rows[0].update(context=rows[0]["context"] + "\n3. A is B."), r"row #0: context fact number 3 repeats"),
    (lambda rows: rows[0]["metadata"].update(kvprobe_previous_answers=[["x"]]), r"row #0: metadata.kvprobe_previous"),
])
def test_loader_refuses_a_malformed_row_by_file_row_and_field(tmp_path, mutate, message):
    rows = json.loads(FIXTURE.read_text())
    mutate(rows)
    path = _write(tmp_path, rows)
    with pytest.raises(FactConsolidationFormatError, match=message) as err:
        load_rows(path)
    assert str(path) in str(err.value)


def test_other_loaders_refuse_malformed_files(tmp_path):
    with pytest.raises(FactConsolidationFormatError, match=r"rows.json:2: not JSON"):
        load_rows(_write(tmp_path, json.dumps(json.loads(FIXTURE.read_text())[0]) + "\n{oops\n"))
    cases = json.loads(MQUAKE_FIXTURE.read_text())
    del cases[1]["orig"]["triples"]
    bad = tmp_path / "mquake.json"
    bad.write_text(json.dumps(cases))
    with pytest.raises(MQuAKEFormatError, match=r"mquake.json case #1 \(case_id=\d+\) orig: missing field\(s\) triples"):
        mquake_index(bad)
    grades = tmp_path / "grades.jsonl"
    grades.write_text(json.dumps({"case_id": "c", "qa_pair_id": "q", "condition": "full", "grader": "g",
                                  "label": "maybe"}) + "\n")
    with pytest.raises(ValueError, match=r"grades.jsonl line 1: label 'maybe' is not one of"):
        read_grades(grades)
    # The study refuses before any model loads, naming the parameter.
    with pytest.raises(InvalidParameter, match="^source: "):
        FactConsolidationStudy(source=str(bad))
    with pytest.raises(InvalidParameter, match="^mquake_file: "):
        FactConsolidationStudy(source=str(FIXTURE), tiers=("32k",), mquake_file=str(bad))


def test_bad_parameters_fail_before_a_model_loads():
    for kwargs, name in [({"tiers": ("6k",)}, "tiers"), ({"n_histories": 0}, "n_histories"),
                         ({"max_new_tokens": 0}, "max_new_tokens"), ({"rows_per_batch": 0}, "rows_per_batch"),
                         ({"mquake_file": "x.json"}, "mquake_file"), ({"homonyms": -1}, "homonyms"),
                         ({"source": str(FIXTURE), "tiers": ("64k",)}, "tiers")]:
        with pytest.raises(InvalidParameter, match=f"^{name}: "):
            FactConsolidationStudy(**kwargs)


def test_mquake_file_gives_entity_ids_and_previous_answers():
    ids, previous = mquake_index(MQUAKE_FIXTURE)
    assert ids["Brennock Rovers F.C."] == ["Q90000010"]
    assert previous["which country was the sport of brennock rovers f.c. created in?"][:2] == \
        ["Ostravel", "Republic of Ostravel"]
    assert previous["which sport is brennock rovers f.c. associated with?"][0] == "tidewall"
    assert without_overlap(["Paris", "Paris, France", "Lyon", "Lyon"], ["Paris"]) == ("Lyon",)


# ----------------------------------------------------------------------------- generated set


def test_generated_rows_round_trip_and_their_answers_follow_the_latest_facts(tmp_path):
    sh, mh = generate_history("1k", 0, seed=7, homonyms=1)
    assert sh.context == mh.context and sh.source == "factconsolidation_sh_1k" and mh.hop == "mh"
    path = tmp_path / "gen.json"
    save_rows([sh, mh], path)
    assert load_rows(path) == [sh, mh]
    (history,) = build_histories(load_rows(path), ("1k",))
    m = history.mapping()
    assert len(m.ambiguous) == 1 and m.unparsed == () and m.superseded
    latest = {(t.subject, t.relation): t.object for _, t in sorted(m.triples.items())}
    keys = [(s.subject, s.relation) for s in m.superseded]
    assert len(keys) == len(set(keys))  # every pair is replaced at most once
    for q in history.questions:
        assert q.previous and q.answers[0] in history.context
        if q.hop == "sh":
            subject, relation = parse_question(q.question)
            assert latest[(subject, relation)] == q.answers[0] and q.previous[0] in m.previous_objects(subject, relation)
    assert generate_history("1k", 0, seed=7, homonyms=1) == (sh, mh)  # deterministic


# ----------------------------------------------------------------------------- grading and net accuracy


def test_rule_grader_and_match_metrics():
    answers, previous = ["Kellport", "Kellport City"], ["Dornholm"]
    assert grade_columns("Fact 6 says Kellport. \\boxed{Kellport}", "eos", answers, previous) | {} == {
        "displayed": "Kellport", "official_match": True, "final_match": True, "valid_box": True, "only_box": False,
        "label": "complete", "old_in_box": False, "grader": "rule-v1"}
    capped = grade_columns("Kellport is the capital, let me check fact", "cap", answers, previous)
    assert capped["official_match"] and not capped["final_match"] and not capped["valid_box"]
    assert rule_label("\\boxed{Kellport or Dornholm}", answers, previous) == "wrong"  # conflicting values
    assert rule_label("\\boxed{I don't know}", answers, previous) == "abstain"
    assert rule_label("\\boxed{}", answers, previous) == "wrong"
    old = grade_columns("\\boxed{Dornholm}", "eos", answers, previous)
    assert old["only_box"] and old["old_in_box"] and old["label"] == "wrong"
    assert grade_columns("the Kellportian view", "eos", answers, previous)["official_match"]  # MAB: plain substring
    assert rule_label("the Kellportian view", answers, previous) == "wrong"  # ours: word-bounded


#: A hand-built outcome list: (question, full stop, full label, source stop, source label, full tokens, old in box).
HAND = [("q1", "eos", "complete", "cap", "complete", 15, False),
        ("q2", "eos", "wrong", "eos", "complete", 30, True),
        ("q3", "cap", "complete", "eos", "complete", 1024, False),
        ("q4", "eos", "complete", "eos", "complete", 250, False),
        ("q5", "eos", "abstain", "eos", "wrong", 40, False),
        ("q6", "eos", "complete", "eos", "wrong", 600, False),
        ("q7", "eos", "wrong", "eos", "complete", 12, False)]


def test_net_accuracy_of_a_hand_built_outcome_list_equals_the_hand_computation(tmp_path):
    full = {q: outcome(s, lab) for q, s, lab, *_ in HAND}
    source = {q: outcome(s, lab) for q, _, _, s, lab, *_ in HAND}
    # By hand, capped first: full = complete q1 q4 q6, wrong q2 q7, capped q3, abstain q5;
    # source = complete q2 q3 q4 q7, capped q1, wrong q5 q6. Gains q2 q7 (from wrong) and q3 (from capped);
    # losses q1 (to capped) and q6 (to wrong): net +1 of 7 questions = +14.29 pp. q1's own label
    # ("complete") is not counted as complete.
    t = transitions(full, source)
    assert (t["n"], t["complete_before"], t["complete_after"], t["gains"], t["losses"], t["net"]) == (7, 3, 4, 3, 2, 1)
    assert t["gains_from"] == {"wrong": 2, "capped": 1} and t["losses_to"] == {"capped": 1, "wrong": 1}
    assert t["net_pp"] == pytest.approx(100 / 7)
    assert t["table"] == {"complete": {"complete": 1, "wrong": 1, "capped": 1}, "wrong": {"complete": 2},
                          "abstain": {"wrong": 1}, "capped": {"complete": 1}}
    tokens = {q: n for q, *_, n, _ in HAND}
    assert [(b["bin"], b["complete"], b["lost"]) for b in losses_by_length(full, source, tokens)] == [
        ("0-20", 1, 1), ("21-200", 0, 0), ("201-500", 1, 0), (">500", 1, 1)]
    assert old_alias_group(full, source, {q: o for q, *_, o in HAND}) == {
        "wrong": 2, "old_alias": 1, "after": {"complete": 1}, "corrections": 2, "corrections_from_group": 1}
    # The summary computes the same from result rows.
    rows = []
    for q, fs, fl, ss, sl, n, o in HAND:
        for cond, stop, label in (("full", fs, fl), ("source", ss, sl)):
            rows.append({"case_id": "h", "qa_pair_id": q, "condition": cond, "hop": "sh", "stop_reason": stop,
                         "label": label, "grader": "rule-v1", "output_tokens": n if cond == "full" else 5,
                         "old_in_box": o and cond == "full", "official_match": False, "final_match": False,
                         "valid_box": True, "only_box": False})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summarize(tmp_path, draws=200)
    (ts,) = s["transitions"]
    assert {k: ts[k] for k in ("gains", "losses", "net", "net_pp")} == {k: t[k] for k in ("gains", "losses", "net", "net_pp")}
    assert [(c["policy"], c["complete_eos"], c["capped"], c["capped_labels"]) for c in s["cells"]] == [
        ("full", 3, 1, {"complete": 1}), ("source", 4, 1, {"complete": 1})]
    assert s["cells"][1]["complete_change_vs_full"]["change"] == 1


def test_the_change_interval_resamples_whole_histories(tmp_path):
    """With at least MIN_HISTORIES histories the change against full access gets a bootstrap interval over whole
    histories (paper: histories are the resampled unit), in the direction policy minus full. Six histories of four
    questions: under the source mask three gain all four answers (full wrong, source complete), three keep all four.
    The change is +12 answers; resampling histories, the sum is 4 x Binomial(6, 1/2), interval [4, 20]; resampling
    the 24 questions instead would give about [7, 17]."""
    rows = []
    for h in range(6):
        for q in range(4):
            for cond, label in (("full", "wrong" if h < 3 else "complete"), ("source", "complete")):
                rows.append({"case_id": f"h{h}", "qa_pair_id": f"q{q}", "condition": cond, "hop": "sh",
                             "stop_reason": "eos", "label": label, "grader": "rule-v1", "output_tokens": 5,
                             "old_in_box": False, "official_match": False, "final_match": False, "valid_box": True,
                             "only_box": False})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    change = summarize(tmp_path, draws=2000, seed=1)["cells"][1]["complete_change_vs_full"]
    assert (change["change"], change["corrections"], change["reversals"]) == (12, 12, 0)  # source minus full
    lo, hi = change["ci"]
    assert lo <= 4 and hi >= 20, change["ci"]  # whole histories, not questions


# ----------------------------------------------------------------------------- real runs


class _AllComplete:
    """A judge client that labels every answer "complete" and every question answerable with a supported
    reference (a stand-in for an API client)."""

    def complete(self, prompt: str) -> JudgeReply:
        tasks = json.loads(prompt[prompt.rindex("\n\n[") + 2:])
        return JudgeReply(json.dumps({"results": [{"id": t["id"], "verdict": "complete", "answerable": "answerable",
                                                   "reference": "supported", "explanation": "ok"}
                                                  for t in tasks]}), "stub-1")


def test_study_runs_summarizes_resumes_and_regrades_on_a_tiny_model(llama, tmp_path):
    study = FactConsolidationStudy(source=str(FIXTURE), tiers=("32k",), max_new_tokens=3, rows_per_batch=7)
    info = run_study(study, llama, tmp_path, progress=False)
    assert info.cases_run == 1
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 5 * 4 and {r["condition"] for r in rows} == {"full", "source", "value", "recompute"}
    assert {r["hidden_tokens"] > 0 for r in rows if r["condition"] in ("source", "value")} == {True}
    by = {(r["qa_pair_id"], r["condition"]): r for r in rows}
    assert by[("factconsolidation_sh_32k_no0", "full")]["previous_answers"] == ["Dornholm"]
    assert all(r["output_tokens"] <= 3 and r["label"] in ("complete", "wrong", "abstain") for r in rows)
    config = json.loads((tmp_path / "config.json").read_text())["study_config"]
    assert config["data"] == "released" and config["mapping"]["fc-32k"]["superseded"] == 4
    summary = write_summary("factconsolidation", tmp_path)
    assert [c["policy"] for c in summary["cells"]] == ["full", "source", "value", "recompute"]
    assert "offline rule grader" in (tmp_path / "report.md").read_text()
    assert run_study(study, llama, tmp_path, progress=False).cases_run == 0
    grades = grade_run(tmp_path, _AllComplete(), batch_size=6)
    regraded = write_summary("factconsolidation", tmp_path, grades=grades)
    eos = {c["policy"]: c["eos"] for c in regraded["cells"]}
    assert {c["policy"]: c["complete_eos"] for c in regraded["cells"]} == eos  # every EOS answer, none capped
    assert regraded["graders"] == ["llm-judge:stub-1"] and "llm-judge:stub-1" in (tmp_path / "report.md").read_text()
    assert {json.loads(line)["answerable"] for line in grades.read_text().splitlines()} == {"answerable"}
    assert regraded["source_review"]["answerability"] == {"answerable": 5, "unanswerable": 0, "ambiguous": 0}


def test_generated_history_runs_labelled_generated(llama, tmp_path):
    study = FactConsolidationStudy(tiers=("1k",), n_histories=1, questions_per_hop=1, max_new_tokens=2)
    run_study(study, llama, tmp_path, progress=False)
    write_summary("factconsolidation", tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["study_config"]["data"] == "generated"
    assert (tmp_path / "report.md").read_text().count("Generated fictional histories (\"generated\"") == 1
    assert len((tmp_path / "results.jsonl").read_text().splitlines()) == 2 * 4
    # The paper's 1,024-token budget does not fit tiny-llama's 2,048 positions after this history: refused, named.
    with pytest.raises(InvalidParameter, match=r"^max_new_tokens: gen-1k: \d+ history tokens .* at most --max-new-tokens"):
        run_study(FactConsolidationStudy(tiers=("1k",), n_histories=1, questions_per_hop=1), llama, tmp_path / "long",
                  progress=False)


# ----------------------------------------------------------------------------- the source review (judge verdicts)


def test_judge_returns_each_extra_verdict_beside_the_label():
    fields = {"answerable": strings.ANSWERABILITY}
    # Without fields the request reads exactly as before.
    assert '"verdict": "yes" or "no", "explanation"' in instructions_for(("yes", "no"))
    assert ('"verdict": "a" or "b", "answerable": "answerable", "unanswerable" or "ambiguous", "explanation"'
            in instructions_for(("a", "b"), fields))
    ok = json.dumps({"results": [{"id": "t1", "verdict": "YES", "answerable": "Ambiguous", "explanation": "x"}]})
    assert parse_reply(ok, ["t1"], ("yes", "no"), fields) == {"t1": ("yes", "x", {"answerable": "ambiguous"})}
    assert parse_reply(ok, ["t1"], ("yes", "no")) == {"t1": ("yes", "x", {})}
    for bad in ({"answerable": "maybe"}, {}):
        reply = json.dumps({"results": [{"id": "t1", "verdict": "yes", "explanation": "x", **bad}]})
        assert parse_reply(reply, ["t1"], ("yes", "no"), fields) is None

    class Client:
        def __init__(self):
            self.replies = ["not json"]

        def complete(self, prompt):
            tasks = json.loads(prompt[prompt.rindex("\n\n[") + 2:])
            if self.replies:
                return JudgeReply(self.replies.pop(), "v1")
            return JudgeReply(json.dumps({"results": [{"id": t["id"], "verdict": "no", "answerable": "unanswerable",
                                                       "explanation": "-"} for t in tasks]}), "v1")

    (j,) = BatchedJudge(Client(), fields=fields).judge(["rubric"])
    assert (j.label, j.fields, j.grader) == ("no", {"answerable": "unanswerable"}, "llm-judge:v1")
    with pytest.raises(ValueError, match="may not be named verdict"):
        BatchedJudge(Client(), fields={"verdict": ("a", "b")})


def test_question_verdict_is_the_majority_and_a_tie_is_ambiguous():
    assert question_verdict(["answerable", "answerable", "unanswerable"]) == "answerable"
    assert question_verdict(["answerable", "unanswerable"]) == "ambiguous"
    assert question_verdict(["unanswerable"] * 3 + ["answerable"] * 3 + ["ambiguous"]) == "ambiguous"
    grades = [{"case_id": "h", "qa_pair_id": q, "answerable": v, "reference": "supported"}
              for q, v in (("q1", "answerable"), ("q1", "answerable"), ("q2", "answerable"), ("q2", "unanswerable"))]
    assert question_verdicts(grades) == ({("h", "q1"): "answerable", ("h", "q2"): "ambiguous"}, 1)
    assert question_verdicts([{"case_id": "h", "qa_pair_id": "q1"}]) is None  # a grades file without verdicts
    ref = [{"case_id": "h", "qa_pair_id": "q", "reference": v} for v in ("supported", "mismatched")]
    assert question_verdicts(ref, "reference") == ({("h", "q"): "unsupported"}, 1)


def _hand_run(tmp_path, table, exposed=None):
    """Rows of a hand-built run: ``table`` = (question, {condition: (stop, label)}, answerable, reference)."""
    rows, grades = [], []
    for q, answers, answerable, reference in table:
        for cond, (stop, label) in answers.items():
            rows.append({"case_id": "h", "qa_pair_id": q, "condition": cond, "hop": "sh", "stop_reason": stop,
                         "label": "wrong", "grader": "rule-v1", "output_tokens": 5, "old_in_box": False,
                         "official_match": False, "final_match": False, "valid_box": True, "only_box": False})
            grades.append({"case_id": "h", "qa_pair_id": q, "condition": cond, "label": label, "grader": "judge:x",
                           "answerable": answerable, "reference": reference})
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "grades.jsonl").write_text("".join(json.dumps(g) + "\n" for g in grades))
    config = {"study": "factconsolidation", "model": {"name": "hand"},
              "study_config": {"data": "generated", "run_tiers": ["1k"], "n_histories": 1, "max_new_tokens": 9,
                               "boxed_instruction": "Box it.", "prefill_chunk": 128,
                               **({} if exposed is None else {"exposed_questions": exposed})}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path / "grades.jsonl"


E, C = "eos", "cap"
#: (question, {condition: (stop, judge label)}, answerability, reference) of a hand-built run.
REVIEWED = [
    ("q1", {"full": (E, "complete"), "source": (E, "wrong"), "recompute": (E, "complete")}, "answerable", "supported"),
    ("q2", {"full": (E, "wrong"), "source": (C, "complete"), "recompute": (E, "complete")}, "answerable", "supported"),
    ("q3", {"full": (E, "complete"), "source": (E, "complete"), "recompute": (C, "wrong")}, "answerable",
     "unsupported"),
    ("q4", {"full": (E, "complete"), "source": (C, "wrong"), "recompute": (E, "wrong")}, "answerable", "supported"),
    ("q5", {"full": (E, "complete"), "source": (E, "complete"), "recompute": (E, "complete")}, "unanswerable",
     "unsupported"),
]


def test_source_review_counts_answerable_questions_and_reports_the_rest_apart(tmp_path):
    grades = _hand_run(tmp_path, REVIEWED, exposed=["q1"])
    s = write_summary("factconsolidation", tmp_path, grades=grades)
    # By hand: q5 is unanswerable, so complete + EOS counts q1-q4 only: full q1 q3 q4 = 3, source q3 = 1 (q2's
    # "complete" is capped), recompute q1 q2 = 2. Termination keeps all 5 (source capped: q2, q4).
    cells = {c["policy"]: c for c in s["cells"]}
    assert {p: (c["n"], c["answerable"], c["complete_eos"], c["capped"]) for p, c in cells.items()} == {
        "full": (5, 4, 3, 0), "source": (5, 4, 1, 2), "recompute": (5, 4, 2, 1)}
    assert cells["source"]["complete_change_vs_full"]["change"] == -2
    review = s["source_review"]
    assert review["answerability"] == {"answerable": 4, "unanswerable": 1, "ambiguous": 0}
    assert review["references"] == {"supported": 3, "unsupported": 2, "mismatched": 0}
    assert review["apart"] == [{"case_id": "h", "qa_pair_id": "q5", "verdict": "unanswerable"}]
    assert review["apart_outcomes"]["source"]["complete"] == 1 and s["questions"] == 4
    # Exposure: without q1, full q3 q4 = 2, source q3 = 1 (change -1, main -2: same sign), recompute q2 = 1
    # (change -1, main -1). Supported references (q1 q2 q4): full 2, source 0 (-2), recompute 2 (+0: not the
    # main sign).
    exposure, supported = s["sensitivities"]
    assert (exposure["name"], exposure["n"], exposure["excluded"]) == ("exposure", 3, 1)
    assert [(r["policy"], r["complete"], r.get("change"), r.get("same_sign")) for r in exposure["policies"]] == [
        ("full", 2, None, None), ("source", 1, -1, True), ("recompute", 1, -1, True)]
    assert [(r["policy"], r["complete"], r.get("change"), r.get("same_sign")) for r in supported["policies"]] == [
        ("full", 2, None, None), ("source", 0, -2, True), ("recompute", 2, 0, False)]
    report = (tmp_path / "report.md").read_text()
    assert "4 answerable, 1 unanswerable, 0 ambiguous" in report and "reported apart (1: q5 unanswerable)" in report
    assert "1 question(s) seen during development (q1)" in report and "128-token chunks" in report


def test_fallback_of_a_hand_built_list_equals_the_hand_computation(tmp_path):
    grades = _hand_run(tmp_path, REVIEWED)
    f = summarize(tmp_path, grades=grades)["fallback"]
    # By hand, on q1-q4: source capped on q2 and q4 -> recompute's complete (q2) and wrong (q4); else source:
    # fallback complete = q2 q3 = 2 against recompute q1 q2 = 2: a gain (q3) and a loss (q1), p = 1.
    # Oracle: q1 q2 q3 = 3; best single operation: full (3).
    assert {k: f[k] for k in ("n", "fallbacks", "fallback_recovered", "source", "recompute", "fallback", "oracle",
                              "gains", "losses", "best", "best_complete", "p")} == {
        "n": 4, "fallbacks": 2, "fallback_recovered": 1, "source": 1, "recompute": 2, "fallback": 2, "oracle": 3,
        "gains": 1, "losses": 1, "best": "full", "best_complete": 3, "p": 1.0}
    assert f["change"] == {"change": 0, "corrections": 1, "reversals": 1, "ci": None}
    # The paper's Qwen cell (L4320-4321): 5 gains and 11 losses; 2 P(Bin(16, 1/2) <= 5) = 2 * 6885 / 65536.
    src = {("h", i): "complete" for i in range(5)} | {("h", i): "wrong" for i in range(5, 16)} | {("h", 16): "capped"}
    rec = {("h", i): "wrong" for i in range(5)} | {("h", i): "complete" for i in range(5, 17)}
    f = fallback({"source": src, "recompute": rec})
    assert (f["gains"], f["losses"], f["fallback"], f["recompute"]) == (5, 11, 6, 12)
    assert f["p"] == pytest.approx(2 * 6885 / 65536)
    assert fallback({"full": src}) is None


def test_a_rule_graded_run_says_what_it_lacks(tmp_path):
    grades = _hand_run(tmp_path, REVIEWED)
    (tmp_path / "config.json").write_text(json.dumps({"study": "factconsolidation", "study_config": {}}))
    s = write_summary("factconsolidation", tmp_path)
    assert s["source_review"] is None and s["questions"] == 5 and s["exposed_questions"] is None
    report = (tmp_path / "report.md").read_text()
    assert "Source answerability: not judged in this run" in report
    assert "Prefill chunks: not in this run's config" in report and "Exposure sensitivity: not in this run" in report
    # A grades file without verdicts (written before them) reads as not judged too.
    lines = [{k: v for k, v in json.loads(line).items() if k not in ("answerable", "reference")}
             for line in grades.read_text().splitlines()]
    grades.write_text("".join(json.dumps(g) + "\n" for g in lines))
    assert write_summary("factconsolidation", tmp_path, grades=grades)["source_review"] is None


# ----------------------------------------------------------------------------- prefill chunks and parameters


def test_prefill_chunk_reaches_the_prefill_and_the_recompute_and_keeps_the_cache(llama):
    import torch

    chunked = FactConsolidationStudy(source=str(FIXTURE), tiers=("32k",), prefill_chunk=16, max_new_tokens=3)
    default = FactConsolidationStudy(source=str(FIXTURE), tiers=("32k",), prefill_chunk=None, max_new_tokens=3)
    assert FactConsolidationStudy(source=str(FIXTURE)).prefill_chunk == 128  # the paper's (L1552-1553)
    (case,) = chunked.cases()
    (a,), (b,) = chunked.prefill(llama, [case]), default.prefill(llama, [case])
    assert len(a) > 3 * 16  # several chunks of 16 against one of the engine's default
    recompute = [s.conditions(llama, case, h)["recompute"] for s, h in ((chunked, a), (default, b))]
    assert (recompute[0].chunk_size, recompute[1].chunk_size) == (16, None)
    states = [prepared(llama, h, r).state for h, r in zip((a, b), recompute)]
    # The engine is exact: another chunk size gives the same cache up to float32 rounding, and the same answer.
    for x, y in ((a.kv, b.kv), (states[0].kv, states[1].kv)):
        for (ka, va), (kb, vb) in zip(x, y):
            assert torch.allclose(ka, kb, atol=1e-5, rtol=1e-5) and torch.allclose(va, vb, atol=1e-5, rtol=1e-5)
    q = chunked.questions(llama, case, a)[0].text
    assert llama.generate(a, q, max_new_tokens=4).token_ids == llama.generate(b, q, max_new_tokens=4).token_ids
    with pytest.raises(InvalidParameter, match="^prefill_chunk: must be at least 1"):
        FactConsolidationStudy(prefill_chunk=0)


def test_exposed_questions_must_be_asked_and_old_configs_read_as_they_ran():
    with pytest.raises(InvalidParameter, match="^exposed_questions: not asked in this run: nope"):
        FactConsolidationStudy(tiers=("1k",), n_histories=1, questions_per_hop=1, exposed_questions=("nope",))
    with pytest.raises(InvalidParameter, match="names a question twice"):
        FactConsolidationStudy(tiers=("1k",), exposed_questions=("a", "a"))
    one = FactConsolidationStudy(tiers=("1k",), n_histories=1, questions_per_hop=1)
    asked = one.cases()[0].questions[0].qa_pair_id
    assert FactConsolidationStudy(tiers=("1k",), n_histories=1, questions_per_hop=1,
                                  exposed_questions=[asked]).exposed_questions == (asked,)
    # The committed run predates prefill_chunk and exposed_questions: its config builds the study it ran (the
    # engine's default chunks, nothing exposed), with the same cases and data.
    committed = json.loads((Path(__file__).parents[1] / "artifacts" / "factconsolidation" / "smollm2-135m-instruct"
                            / "config.json").read_text())
    study = study_from_config(committed)
    assert (study.prefill_chunk, study.exposed_questions) == (None, ())
    again = study.config()
    assert {k: again[k] for k in committed["study_config"] if k != "strings_sha256"} == {
        k: v for k, v in committed["study_config"].items() if k != "strings_sha256"}
