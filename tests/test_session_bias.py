"""The session-bias study: LongMemEval schema and split, fixtures, bias and hard-mask positions, conditions, run,
summary."""

from __future__ import annotations

import copy
import json
import math
import random
from collections import Counter

import pytest
import torch

import kvprobe
from kvprobe.interventions import session_gate
from kvprobe.access import select_layers
from kvprobe.decoding import question_logits
from kvprobe.studies.common.protocol import use_chat
from kvprobe.studies.common.runner import run_study
from kvprobe.studies.session_bias import fixtures, grading, history, data
from kvprobe.studies.session_bias.study import SessionBiasCase, SessionBiasStudy
from kvprobe.studies.session_bias.summary import format_report, summarize
from kvprobe.studies.common.summary import write_summary


@pytest.fixture(scope="module")
def llama() -> kvprobe.Model:
    return kvprobe.load_model("tiny-llama")


def _raw() -> list[dict]:
    return fixtures.generate_raw(4)


def _write(tmp_path, content, name="longmemeval_oracle.json"):
    path = tmp_path / name
    path.write_text(json.dumps(content) if not isinstance(content, str) else content)
    return path


# --------------------------------------------------------------------------- schema, fixtures, split

def test_fixtures_are_deterministic_and_round_trip(tmp_path):
    a, b = fixtures.generate_raw(), fixtures.generate_raw()
    assert a == b and fixtures.generate_raw(seed=1) != a
    assert fixtures.generate_raw(4) == a[: len(fixtures.generate_raw(4))]
    path = fixtures.write_fixtures(tmp_path / "fx.json")
    loaded = data.load_longmemeval(path)
    assert [data.question_to_json(q) for q in loaded] == a == json.loads(path.read_text())
    assert data.dataset_hash(loaded) == data.dataset_hash(fixtures.generate())
    kinds = Counter((q.question_type, q.is_abstention) for q in loaded)
    assert kinds == {("knowledge-update", False): 6, ("knowledge-update", True): 6, ("temporal-reasoning", False): 6,
                     ("single-session-user", False): 6, ("single-session-user", True): 6,
                     ("single-session-assistant", False): 6}
    for q in loaded:
        assert 3 <= len(q.sessions) <= 5
        dates = [data.parse_date(s.date) for s in q.sessions]
        assert dates == sorted(dates) and data.parse_date(q.question_date) > dates[-1]
        # The gate: temporal questions name an earlier time; every other question does not.
        assert session_gate(q.question) == (0 if q.question_type == "temporal-reasoning" else 1), q.question
        text = " ".join(t.content for s in q.sessions for t in s.turns)
        if q.is_abstention:
            assert q.group == q.question_id[:-4] and q.answer_session_ids == ()
            assert not any(t.has_answer for s in q.sessions for t in s.turns)
        else:
            assert q.answer in text and q.group == q.question_id
            evidence = {s.session_id for s in q.sessions if any(t.has_answer for t in s.turns)}
            assert evidence == set(q.answer_session_ids)
        if q.question_type == "knowledge-update" and not q.is_abstention:
            # The answer is stated in the later of the two evidence sessions.
            last = [s for s in q.sessions if s.session_id in q.answer_session_ids][-1]
            assert any(q.answer in t.content for t in last.turns)


def test_loader_keeps_unknown_keys_and_numeric_answers(tmp_path):
    raw = _raw()
    raw[0]["answer"] = 3
    raw[0]["note"] = {"kept": True}
    raw[0]["haystack_sessions"][0][0]["extra_field"] = 1
    qs = data.load_longmemeval(_write(tmp_path, raw))
    assert qs[0].answer == "3" and qs[0].extra == {"note": {"kept": True}}
    assert [data.question_to_json(q) for q in qs] == raw


def _mutate(fn):
    raw = _raw()
    fn(raw)
    return raw


BAD = [
    (lambda r: r[1].pop("question_date"), "missing keys \\['question_date'\\]"),
    (lambda r: r[1].update(question_type="open-domain"), "question_type 'open-domain'"),
    (lambda r: r[1]["haystack_sessions"][0][0].update(role="system"), "role must be one of"),
    (lambda r: r[1]["haystack_sessions"][0][0].update(content=None), "'content' must be a string"),
    (lambda r: r[1]["haystack_sessions"][0][0].update(has_answer="yes"), "has_answer"),
    (lambda r: r[1]["haystack_dates"].pop(), "haystack_sessions but"),
    (lambda r: r[1].update(haystack_dates=["yesterday"] * len(r[1]["haystack_sessions"])), "is not a date"),
    (lambda r: r[1].update(haystack_sessions=[]), "non-empty list of sessions"),
    (lambda r: r[1]["haystack_sessions"].__setitem__(0, []), "non-empty list of turns"),
    (lambda r: r[1].update(answer=None), "'answer' must be a string"),
    (lambda r: r[1].update(answer_session_ids="s1"), "'answer_session_ids' must be a list of strings"),
    (lambda r: r[2].update(question_id=r[1]["question_id"]), "duplicate question_id"),
]


@pytest.mark.parametrize("mutate, message", BAD)
def test_loader_schema_errors_name_file_and_question(tmp_path, mutate, message):
    raw = _mutate(mutate)
    path = _write(tmp_path, raw)
    with pytest.raises(data.LongMemEvalFormatError, match=message) as err:
        data.load_longmemeval(path)
    assert str(path) in str(err.value)
    qid = raw[2 if "duplicate" in message else 1]["question_id"]
    assert repr(qid) in str(err.value)


def test_loader_file_level_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="longmemeval_oracle.json"):
        data.load_longmemeval(tmp_path / "missing.json")
    with pytest.raises(data.LongMemEvalFormatError, match="not valid JSON .* line 1"):
        data.load_longmemeval(_write(tmp_path, "[{"))
    with pytest.raises(data.LongMemEvalFormatError, match="top level must be a JSON list"):
        data.load_longmemeval(_write(tmp_path, {"question_id": "x"}))
    with pytest.raises(data.LongMemEvalFormatError, match="item 0 has no string 'question_id'"):
        data.load_longmemeval(_write(tmp_path, [{"question": "?"}]))
    # The study refuses the same errors when it is built, before any model loads, naming the parameter.
    with pytest.raises(ValueError, match="^source: .*missing.json: no such file"):
        SessionBiasStudy(source=str(tmp_path / "missing.json"))
    with pytest.raises(ValueError, match="^source: .*not valid JSON"):
        SessionBiasStudy(source=str(_write(tmp_path, "not json")))


def _paper_sized() -> list[data.Question]:
    """500 questions with the release's type counts (30 abstention variants), built from one fixture."""
    template = fixtures.generate_raw(1)[0]
    counts = {"knowledge-update": 78, "temporal-reasoning": 133, "multi-session": 133, "single-session-user": 70,
              "single-session-assistant": 56, "single-session-preference": 30}
    raw, k = [], 0
    for qtype, n in counts.items():
        for i in range(n):
            abstain = i < 5
            raw.append({**copy.deepcopy(template), "question_type": qtype,
                        "question_id": f"q{k:04x}" + ("_abs" if abstain else "")})
            k += 1
    random.Random(0).shuffle(raw)
    return data.parse_questions(raw)


def test_split_is_deterministic_by_id_with_the_paper_quotas():
    qs = _paper_sized()
    parts = data.split_questions(qs)
    assert len(parts["development"]) == 120 and len(parts["validation"]) == 380
    assert Counter(q.question_type for q in parts["development"]) == data.PAPER_DEV_QUOTAS
    # Membership depends on the ids only, not on file order; each part keeps file order.
    shuffled = list(qs)
    random.Random(1).shuffle(shuffled)
    again = data.split_questions(shuffled)
    assert {q.question_id for q in again["development"]} == {q.question_id for q in parts["development"]}
    assert [q.question_id for q in parts["validation"]] == [q.question_id for q in qs if q in parts["validation"]]
    # Within a type, the development questions are the lowest SHA-256 ranks.
    ku = sorted((q for q in qs if q.question_type == "knowledge-update"),
                key=lambda q: data.id_rank_key(q.question_id))
    assert {q.question_id for q in ku[:40]} == {q.question_id for q in parts["development"]
                                                 if q.question_type == "knowledge-update"}
    assert data.select_split(qs, "all") == qs
    assert data.select_split(qs, "validation") == parts["validation"]
    custom = data.split_questions(qs, quotas={"multi-session": 3})
    assert [q.question_type for q in custom["development"]] == ["multi-session"] * 3
    with pytest.raises(ValueError, match="split must be one of"):
        data.select_split(qs, "test")
    # Fixtures: the paper's quotas scaled to the file size; crossing groups are named.
    fx = fixtures.generate()
    dev = data.split_questions(fx)["development"]
    assert len(dev) == sum(data.dev_quotas(fx)[t] for t in {q.question_type for q in fx})
    crossing = data.groups_crossing(fx)
    for g in crossing:
        assert {q.question_id for q in fx if q.group == g} - {q.question_id for q in dev}
        assert {q.question_id for q in fx if q.group == g} & {q.question_id for q in dev}


# --------------------------------------------------------------------------- bias and hard-mask positions

def _brute_force_bias(h: kvprobe.History, layout: history.SessionLayout, asked: str) -> torch.Tensor:
    """b_j = -ln 2 * g(q) * (S-1-s(j)) / (S-1), s(j) the session whose *content* characters token j covers."""
    S = layout.n_sessions
    ranges = [h.rendered.segments[name] for name in layout.content_segments]
    others = [r for name, r in h.rendered.segments.items() if name not in layout.content_segments]
    g = session_gate(asked)
    b = torch.zeros(len(h))
    for j, (s, e) in enumerate(h.offsets):
        hits = [k for k, (a, z) in enumerate(ranges) if s < z and e > a and e > s]
        assert len(hits) <= 1
        if hits and S > 1:
            # A content token never covers header text (the separators keep segments apart).
            assert not any(s < z and e > a and h.text[max(s, a):min(e, z)].strip() for a, z in others)
            b[j] = -math.log(2) * g * (S - 1 - hits[0]) / (S - 1)
    return b


_PREFILLED: dict = {}


def _prefill(model, q: data.Question):
    """Prefill (a question and its abstention variant share one history) and build its conditions."""
    prompt, layout = history.build_prompt(q, chat=use_chat(model.tokenizer, None))
    key = (model.name, json.dumps(prompt.segments))
    h = _PREFILLED[key] if key in _PREFILLED else _PREFILLED.setdefault(key, model.prefill(prompt))
    asked = history.question_text(q)
    return h, layout, asked, history.session_conditions(h, layout, asked)


def _hidden(state) -> dict[int, set[int]]:
    return {layer: set(torch.nonzero(v).flatten().tolist()) for layer, v in state.hidden.items()}


def test_soft_bias_and_hard_mask_positions_match_the_paper_formula(llama):
    qs = {q.question_id: q for q in fixtures.generate(4)}
    checked = Counter()
    layers = select_layers(None, llama.arch)
    for q in qs.values():
        h, layout, asked, a = _prefill(llama, q)
        expected = _brute_force_bias(h, layout, asked)
        soft, hard = a.conditions["soft"], a.conditions["hard"]
        got = soft.bias_vector(len(h), asked)
        assert torch.allclose(got, expected, atol=1e-6, rtol=0)
        # Every layer of the soft condition's row state carries exactly that bias (slots = positions here).
        state = soft.prepare(llama, h, asked)
        assert set(state.bias) == set(layers)
        for layer in layers:
            assert torch.allclose(state.bias[layer], expected, atol=1e-6, rtol=0)
        negative = set(torch.nonzero(expected < 0).flatten().tolist())
        assert a.active == bool(negative) and a.biased_tokens == len(negative)
        assert a.gate == session_gate(q.question)
        if a.active:
            # The oldest session gets -ln 2, the newest 0; headers, intro and date get 0.
            oldest, newest = h.span(layout.content_segments[0]), h.span(layout.content_segments[-1])
            assert torch.allclose(got[oldest.start:oldest.end], torch.tensor(-math.log(2)))
            assert float(got[newest.start:newest.end].abs().max()) == 0.0
            for name in ("intro", "date", *layout.header_segments):
                span = h.span(name)
                assert float(got[span.start:span.end].abs().max()) == 0.0
            # Hard mask: exactly the negative-bias positions, in every layer.
            assert isinstance(hard, kvprobe.Mask)
            assert set(torch.nonzero(hard.hidden_positions(len(h))).flatten().tolist()) == negative
            hs = hard.prepare(llama, h, asked)
            assert _hidden(hs) == {layer: negative for layer in layers}
            checked["active"] += 1
        else:
            assert isinstance(hard, kvprobe.Full) and hard.name == "hard" and not negative
            checked["inactive"] += 1
        assert h.check_digest()
    assert checked == {"active": 5, "inactive": 1}


def test_quarter_weight_and_question_prefix():
    assert history.question_text(fixtures.generate(1)[0]).startswith("Question: ")
    q = fixtures.generate(1)[0]
    prompt, layout = history.build_prompt(q)
    assert [n for n, _ in prompt.segments][:3] == ["intro", "header:0", "session:0"]
    assert prompt.segments[-1][0] == "date" and layout.content_segments == tuple(
        f"session:{i}" for i in range(len(q.sessions)))
    # Nothing withheld reaches the prompt: no answer markers, session ids, question type.
    body = prompt.body
    assert q.question_type not in body and "has_answer" not in body
    assert not any(s.session_id in body for s in q.sessions)


def test_sessions_are_sorted_by_timestamp():
    raw = fixtures.generate_raw(1)[0]
    order = [2, 0, 1] + list(range(3, len(raw["haystack_sessions"])))
    shuffled = {**raw, **{k: [raw[k][i] for i in order] for k in ("haystack_dates", "haystack_session_ids",
                                                                   "haystack_sessions")}}
    q0, q1 = data.parse_questions([raw, {**shuffled, "question_id": "shuffled"}])
    p0, l0 = history.build_prompt(q0)
    p1, l1 = history.build_prompt(q1)
    assert p0.segments == p1.segments and not l0.reordered and l1.reordered
    assert history.build_prompt(q1, order="file")[1].session_ids == tuple(raw["haystack_session_ids"][i] for i in order)


# --------------------------------------------------------------------------- conditions on the model

def _single_session(q: data.Question) -> data.Question:
    raw = data.question_to_json(q)
    raw.update(question_id="single", haystack_dates=raw["haystack_dates"][-1:],
               haystack_session_ids=raw["haystack_session_ids"][-1:],
               haystack_sessions=raw["haystack_sessions"][-1:])
    return data.parse_question(raw)


def test_inactive_questions_give_identical_outputs_in_every_condition(llama):
    qs = fixtures.generate(8)
    temporal = next(q for q in qs if q.question_type == "temporal-reasoning" and len(q.sessions) > 1)
    active = next(q for q in qs if q.question_type == "knowledge-update" and not q.is_abstention)
    single = _single_session(active)
    for q, is_active in ((temporal, False), (single, False), (active, True)):
        h, _, asked, a = _prefill(llama, q)
        assert a.active == is_active
        logits = question_logits(llama, h, asked, list(a.conditions.values())).logits
        if is_active:
            assert float((logits[1] - logits[0]).abs().max()) > 1e-4  # soft changes the answer distribution
            assert float((logits[2] - logits[0]).abs().max()) > 1e-4  # and so does the hard mask
            assert float((logits[2] - logits[1]).abs().max()) > 1e-4
        else:
            assert torch.equal(logits[1], logits[0]) and torch.equal(logits[2], logits[0])
        assert h.check_digest()
    study = SessionBiasStudy(split="all", max_new_tokens=4)
    cases = [SessionBiasCase(q, "all", False) for q in (temporal, single)]
    for rows in study.run_cases(llama, cases):
        assert [r["condition"] for r in rows] == ["full", "soft", "hard"]
        assert len({(r["output"], r["output_tokens"], r["stop_reason"]) for r in rows}) == 1
        assert not any(r["active"] or r["copied_from_full"] for r in rows)
        assert [r["hidden_tokens"] for r in rows] == [0, 0, 0] and rows[1]["biased_tokens"] == 0
    # skip_inactive copies the full answer instead of generating it again.
    skipped = SessionBiasStudy(split="all", max_new_tokens=4, skip_inactive=True).run_cases(llama, cases[:1])[0]
    assert [r["copied_from_full"] for r in skipped] == [False, True, True]
    assert len({r["output"] for r in skipped}) == 1


def test_study_condition_set_and_options_are_validated():
    with pytest.raises(ValueError, match="condition_set"):
        SessionBiasStudy(condition_set=("full", "medium"))
    with pytest.raises(ValueError, match="skip_inactive"):
        SessionBiasStudy(condition_set=("soft", "hard"), skip_inactive=True)
    with pytest.raises(ValueError, match="split"):
        SessionBiasStudy(split="test")
    with pytest.raises(ValueError, match="condition_set"):
        SessionBiasStudy(condition_set=())
    with pytest.raises(ValueError, match="order"):
        SessionBiasStudy(order="random")
    for field in ("n", "fixture_bases", "max_new_tokens", "max_history_tokens", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            SessionBiasStudy(**{field: 0})


# --------------------------------------------------------------------------- end to end

def test_run_resumes_and_writes_the_summary(llama, tmp_path):
    study = SessionBiasStudy(split="all", n=5, max_new_tokens=3, cases_per_batch=3)
    out = tmp_path / "run"
    info = run_study(study, llama, out, progress=False)
    assert info.cases_run == 5 and info.rows_written == 15
    first = (out / "results.jsonl").read_bytes()
    rows = [json.loads(line) for line in first.decode().splitlines()]
    assert Counter(r["condition"] for r in rows) == {"full": 5, "soft": 5, "hard": 5}
    for key in ("case_id", "group", "question_type", "is_abstention", "update", "active", "condition", "query",
                "output", "stop_reason", "output_tokens", "correct", "grader"):
        assert all(key in r for r in rows), key
    assert all(r["grader"] == "rule-v1" and isinstance(r["correct"], bool) for r in rows)
    assert not any("second" in k or "time" in k for k in rows[0])
    # The abstention variant shares its base's history (one prefill) and bootstrap group.
    by_id = {r["case_id"]: r for r in rows if r["condition"] == "full"}
    for cid, r in by_id.items():
        if cid.endswith("_abs"):
            assert r["group"] == by_id[cid[:-4]]["group"] and r["prompt_sha256"] == by_id[cid[:-4]]["prompt_sha256"]
    # Drop the last batch's cases; the rerun redoes only them and reproduces the file byte for byte.
    (out / "results.jsonl").write_text("".join(first.decode().splitlines(keepends=True)[:9]))
    again = run_study(SessionBiasStudy(split="all", n=5, max_new_tokens=3, cases_per_batch=3), llama, out,
                      progress=False)
    assert again.cases_run == 2 and (out / "results.jsonl").read_bytes() == first
    summary = write_summary("session-bias", out)
    assert (out / "summary.json").exists() and (out / "report.md").exists()
    assert summary["questions"] == 5 and summary["rows"] == 15 and summary["arms"] == ["full", "soft", "hard"]
    report = (out / "report.md").read_text()
    assert "| all questions | 5 |" in report and "## Termination" in report and "soft - full, pp" in report
    # Regrading with another grader (here the rule grader again) gives the same summary cells.
    path = grading.grade_run(out, grading.RuleGrader(), out_name="grades.jsonl")
    assert summarize(out, grades=path)["subsets"] == summary["subsets"]


def test_too_long_histories_are_skipped(llama, tmp_path):
    study = SessionBiasStudy(split="all", n=2, max_new_tokens=2, max_history_tokens=20)
    run_study(study, llama, tmp_path, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["skipped"] == "history_too_long" and r["output"] is None for r in rows)
    assert [r["condition"] for r in rows] == ["full", "soft", "hard"] * 2
    assert all(r["history_tokens"] > 20 and r["prompt_sha256"] and r["output_tokens"] is None for r in rows)
    s = summarize(tmp_path)
    assert s["questions"] == 0 and s["skipped_questions"] == 2


# --------------------------------------------------------------------------- grading

def _task(response: str, reference: str = "Toyota Corolla", abstention: bool = False) -> grading.GradeTask:
    return grading.GradeTask("q", "knowledge-update", "What car do I drive now?", reference, response, abstention)


@pytest.mark.parametrize("response, reference, abstention, correct", [
    ("You drive a Toyota Corolla.", "Toyota Corolla", False, True),
    ("you drive a TOYOTA  corolla!", "Toyota Corolla", False, True),
    ("You had a Subaru, now a Toyota Corolla.", "Toyota Corolla", False, True),
    ("A Toyota Corollas", "Toyota Corolla", False, False),
    ("You drive a Subaru Outback.", "Toyota Corolla", False, False),
    ("   \n", "Toyota Corolla", False, False),
    ("I have two dogs.", "2", False, True),
    ("It is Maple\u2019s bowl", "Maple's", False, True),
    ("You haven\u2019t mentioned a cat.", "explanation", True, True),
    ("I don't know.", "explanation", True, True),
    ("There is no information about that.", "explanation", True, True),
    ("Your cat is called Biscuit.", "explanation", True, False),
    ("", "explanation", True, False),
])
def test_rule_grader(response, reference, abstention, correct):
    v = grading.RuleGrader().grade([_task(response, reference, abstention)])[0]
    assert v.correct == correct and v.grader == "rule-v1"


def test_prompt_scaffold_never_counts_as_declining():
    """Small models echo the system message and history scaffold; an echo must not read as an abstention."""
    from kvprobe.studies.session_bias import strings

    scaffold = [strings.SYSTEM, strings.INTRO, strings.SESSION_HEADER, strings.CURRENT_DATE, strings.QUESTION_PREFIX]
    assert not any(grading.declines(text) for text in scaffold)


class _Client:
    """A local judge: says "yes" when the graded response holds "Corolla"; its first reply is invalid."""

    def __init__(self, invalid_first: int = 1):
        self.requests: list[str] = []
        self.invalid_first = invalid_first

    def complete(self, prompt: str) -> grading.JudgeReply:
        self.requests.append(prompt)
        if len(self.requests) <= self.invalid_first:
            return grading.JudgeReply("I think they are all fine.", "judge-2026-01")
        tasks = json.loads(prompt.split("\n\n", 1)[1])
        results = [{"id": t["id"], "verdict": "yes" if "Corolla" in t["prompt"].split("Model Response:")[1] else "no",
                    "explanation": "ok"} for t in tasks]
        return grading.JudgeReply("```json\n" + json.dumps({"results": results}) + "\n```", "judge-2026-01")


def test_batched_judge_protocol(tmp_path):
    tasks = [_task(f"Answer {i}: a Toyota Corolla" if i % 2 else f"Answer {i}: a bike") for i in range(100)]
    tasks += tasks[:10] + [_task(""), _task("  ")]
    client = _Client()
    judge = grading.BatchedJudge(client, seed=3, log_path=tmp_path / "judge.jsonl")
    verdicts = judge.grade(tasks)
    assert [v.correct for v in verdicts[:100]] == [bool(i % 2) for i in range(100)]
    assert [v.correct for v in verdicts[100:110]] == [v.correct for v in verdicts[:10]]
    assert verdicts[-1].correct is False and verdicts[-1].grader == "llm-judge"  # empty: never sent
    assert all(v.grader == "llm-judge:judge-2026-01" for v in verdicts[:110])
    # 100 distinct prompts in batches of at most 48 (48, 48, 4), plus one resubmitted invalid reply.
    sent = [json.loads(r.split("\n\n", 1)[1]) for r in client.requests]
    assert [len(b) for b in sent] == [48, 48, 48, 4] and sent[0] == sent[1]
    prompts = [t["prompt"] for b in sent[1:] for t in b]
    # The official prompts, shuffled (seeded).
    assert sorted(prompts) == sorted(grading.anscheck_prompt(t) for t in tasks[:100])
    assert prompts != [grading.anscheck_prompt(t) for t in tasks[:100]]
    assert all(t["id"].startswith("task-") for b in sent for t in b)
    assert not any(word in r for r in client.requests for word in ("soft", "hard", "full", "tiny-llama"))
    log = [json.loads(line) for line in (tmp_path / "judge.jsonl").read_text().splitlines()]
    assert [e["valid"] for e in log] == [False, True, True, True] and {e["model_variant"] for e in log} == {"judge-2026-01"}
    with pytest.raises(grading.JudgeError, match="no valid reply after 2 attempts"):
        grading.BatchedJudge(_Client(invalid_first=5), max_retries=1).grade(tasks[:3])
    with pytest.raises(ValueError, match="batch_size"):
        grading.BatchedJudge(_Client(), batch_size=49)


# --------------------------------------------------------------------------- summary math

def _row(case: str, condition: str, correct: bool, active: bool = True, update: bool = False,
         abstention: bool = False, stop: str = "eos") -> dict:
    group = case[:-4] if case.endswith("_abs") else case
    return {"case_id": case, "group": group, "condition": condition, "correct": correct, "active": active,
            "update": update, "is_abstention": abstention,
            "question_type": "knowledge-update" if update else "single-session-user",
            "stop_reason": stop, "output_tokens": 5, "output": f"{case}-{condition}-{correct}",
            "split": "validation", "group_crosses_split": case == "d", "grader": "rule-v1", "skipped": None, "copied_from_full": False}


def test_summary_math_on_hand_made_rows(tmp_path):
    table = {  # case: (full, soft, hard, kwargs)
        "a": (0, 1, 1, {"update": True}), "b": (1, 1, 0, {"update": True}),
        "c": (1, 0, 0, {}), "c_abs": (1, 1, 1, {"abstention": True}),
        "d": (0, 0, 0, {"active": False}),
    }
    with open(tmp_path / "results.jsonl", "w") as f:
        for case, (full, soft, hard, kw) in table.items():
            for condition, ok in (("full", full), ("soft", soft), ("hard", hard)):
                stop = "cap" if (case, condition) == ("b", "soft") else "eos"
                f.write(json.dumps(_row(case, condition, bool(ok), stop=stop, **kw)) + "\n")
    s = summarize(tmp_path, seed=5, draws=400)
    assert (s["questions"], s["groups"], s["rows"]) == (5, 4, 15)
    cells = {x["key"]: x for x in s["subsets"]}
    assert set(cells) == {"all", "answerable_updates", "other_answerable", "abstention", "active",
                          "active_answerable_updates", "active_other_answerable", "active_abstention", "inactive",
                          "without_crossing_groups"}
    every = cells["all"]["arms"]
    assert (every["full"]["correct"], every["soft"]["correct"], every["hard"]["correct"]) == (3, 3, 2)
    soft = every["soft"]["vs_full"]
    assert (soft["change"], soft["corrections"], soft["reversals"]) == (0, 1, 1) and soft["pp"] == pytest.approx(0.0)
    hard = every["hard"]["vs_full"]
    assert (hard["change"], hard["pp"]) == (-1, pytest.approx(-20.0))
    assert hard["ci"][0] <= -20.0 <= hard["ci"][1]
    assert every["soft"]["cap"] == 1 and every["soft"]["eos_correct"] == 2
    assert every["soft"]["eos_vs_full"]["change"] == -1
    upd = cells["answerable_updates"]["arms"]
    assert upd["soft"]["vs_full"]["pp"] == pytest.approx(50.0) and upd["hard"]["vs_full"]["pp"] == pytest.approx(0.0)
    assert cells["active"]["questions"] == 4 and cells["inactive"]["questions"] == 1
    assert cells["without_crossing_groups"]["questions"] == 4
    assert cells["abstention"]["arms"]["soft"]["vs_full"]["ci"] == [0.0, 0.0]
    assert s["inactive_identical"] == {"inactive_questions": 1, "identical_answers": 0, "copied_from_full": 0}
    assert summarize(tmp_path, seed=5, draws=400) == s
    # A grades file overrides the rows' grades and must cover every row.
    grades = tmp_path / "grades.jsonl"
    grades.write_text("".join(json.dumps({"case_id": c, "arm": a, "correct": True, "grader": "judge:x"}) + "\n"
                              for c in table for a in ("full", "soft", "hard")))
    g = summarize(tmp_path, seed=5, draws=400, grades=grades)
    assert g["graders"] == ["judge:x"] and g["subsets"][0]["arms"]["hard"]["correct"] == 5
    grades.write_text(grades.read_text().splitlines(keepends=True)[0])
    with pytest.raises(ValueError, match="no grade for case"):
        summarize(tmp_path, grades=grades)
    report = format_report(s, {"model": {"name": "hand"}, "study_config": {"source": "fixtures"}})
    assert "| answerable updates | 2 | 50.0 (1/2) | 100.0 (2/2) | 50.0 (1/2) | +50.0 [" in report
    assert every["full"]["mean_tokens"] == 5.0


# --------------------------------------------------------------------------- the official LongMemEval prompts

#: The answer-check prompts as released (xiaowu0162/LongMemEval, src/evaluation/evaluate_qa.py,
#: get_anscheck_prompt), typed here from the release, and the SHA-256 of each template there.
_OPEN = ("I will give you a question, a correct answer, and a response from a model. Please answer yes if the "
         "response contains the correct answer. Otherwise, answer no. ")
_STEPS = ("If the response is equivalent to the correct answer or contains all the intermediate steps to get the "
          "correct answer, you should also answer yes. If the response only contains a subset of the information "
          "required by the answer, answer no. ")
_TAIL = "\n\nQuestion: Q?\n\nCorrect Answer: R\n\nModel Response: A.\n\nIs the model response correct? Answer yes or no only."
_EXPECTED = {
    "single-session-user": _OPEN + _STEPS + _TAIL,
    "single-session-assistant": _OPEN + _STEPS + _TAIL,
    "multi-session": _OPEN + _STEPS + _TAIL,
    "temporal-reasoning": _OPEN + _STEPS + "In addition, do not penalize off-by-one errors for the number of days. "
    "If the question asks for the number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., "
    "predicting 19 days when the answer is 18), the model's response is still correct. " + _TAIL,
    "knowledge-update": _OPEN + "If the response contains some previous information along with an updated answer, "
    "the response should be considered as correct as long as the updated answer is the required answer." + _TAIL,
    "single-session-preference": "I will give you a question, a rubric for desired personalized response, and a "
    "response from a model. Please answer yes if the response satisfies the desired response. Otherwise, answer no. "
    "The model does not need to reflect all the points in the rubric. The response is correct as long as it recalls "
    "and utilizes the user's personal information correctly.\n\nQuestion: Q?\n\nRubric: R\n\nModel Response: A.\n\n"
    "Is the model response correct? Answer yes or no only.",
}
_EXPECTED_ABSTENTION = (
    "I will give you an unanswerable question, an explanation, and a response from a model. Please answer yes if "
    "the model correctly identifies the question as unanswerable. The model could say that the information is "
    "incomplete, or some other information is given but the asked information is not.\n\nQuestion: Q?\n\n"
    "Explanation: R\n\nModel Response: A.\n\nDoes the model correctly identify the question as unanswerable? "
    "Answer yes or no only.")
_UPSTREAM_SHA256 = {
    "ANSCHECK_DEFAULT": "fba020ba3d57982efdc9a937c1c01f897b789a608c7f88e60244121f6505e5bc",
    "ANSCHECK_TEMPORAL": "8d33a5fdd83afeeb4592454a965eab43d1fcb2dedc042d1d3892f4254be6c273",
    "ANSCHECK_KNOWLEDGE_UPDATE": "183a9b3a6197ec620940f610cdc1207201ec98c1113dd633ea685cfc322fafac",
    "ANSCHECK_PREFERENCE": "741ee3bcbea7ff5e8ed359acef61d2f8ded3de021bbcff6ee13de455f2e2aa9b",
    "ANSCHECK_ABSTENTION": "5c0b365a1e1d06db36377c735432b56e122ca3c428f89faf61d43a0d5a7e050b",
}


@pytest.mark.parametrize("qtype", data.QUESTION_TYPES)
def test_official_prompt_dispatch_byte_for_byte(qtype):
    import hashlib

    from kvprobe.studies.session_bias import strings

    for name, digest in _UPSTREAM_SHA256.items():
        assert hashlib.sha256(getattr(strings, name).encode()).hexdigest() == digest, name
    task = grading.GradeTask("0a1b2c3d", qtype, "Q?", "R", "A.", False)
    assert grading.anscheck_prompt(task) == _EXPECTED[qtype]
    # The abstention prompt for every id containing "_abs" (the official test), whatever the type or flag says.
    for qid in ("0a1b2c3d_abs", "x_abs_2"):
        assert grading.anscheck_prompt(grading.GradeTask(qid, qtype, "Q?", "R", "A.", False)) == _EXPECTED_ABSTENTION
    # Three templates keep the space before the blank line, as released.
    assert strings.ANSCHECK_DEFAULT.count("no. \n\nQuestion") == 1
    assert strings.ANSCHECK_TEMPORAL.count("correct. \n\nQuestion") == 1


def test_official_judge_rule_and_empty_answers(tmp_path):
    """One request per distinct prompt, label 'yes' in reply.lower(); empty answers are "no" unasked."""

    class Client:
        def __init__(self):
            self.sent = []

        def complete(self, prompt):
            self.sent.append(prompt)
            response = prompt.split("Model Response: ")[1].split("\n\n")[0]
            return grading.JudgeReply("Yes." if "Corolla" in response else "No.", "local-1")

    with pytest.raises(ValueError, match="no official answer-check prompt"):
        grading.anscheck_prompt(grading.GradeTask("q", "open-domain", "Q?", "R", "A.", False))
    client = Client()
    tasks = [_task("A Toyota Corolla."), _task("A bike."), _task("A Toyota Corolla."), _task(""), _task(" \n")]
    verdicts = grading.OfficialJudge(client, log_path=tmp_path / "judge.jsonl").grade(tasks)
    assert [v.correct for v in verdicts] == [True, False, True, False, False]
    assert client.sent == [grading.anscheck_prompt(tasks[0]), grading.anscheck_prompt(tasks[1])]
    assert verdicts[0].grader == "longmemeval-anscheck:local-1" and verdicts[3].grader == "longmemeval-anscheck"
    assert verdicts[3].explanation == "empty answer"


# --------------------------------------------------------------------------- padded fixtures, publisher sessions

def test_padded_fixtures_keep_every_fact_and_the_default_fixtures():
    plain, padded = fixtures.generate(8), fixtures.generate(8, fillers=3)
    assert data.dataset_hash(fixtures.generate(100)) == "2f54f718fe7e1e64072ee877887b8130fa08b5bc68a0de5a785e0d41c57e4a3b"
    assert padded == fixtures.generate(8, fillers=3) and padded != plain
    for p, q in zip(plain, padded):
        assert (p.question_id, p.question, p.answer, p.question_date, p.answer_session_ids) == \
               (q.question_id, q.question, q.answer, q.question_date, q.answer_session_ids)
        assert [(s.session_id, s.date) for s in p.sessions] == [(s.session_id, s.date) for s in q.sessions]
        for a, b in zip(p.sessions, q.sessions):
            assert len(b.turns) == len(a.turns) + 2 * 3 and Counter(a.turns) <= Counter(b.turns)
            assert [t.role for t in b.turns] == ["user", "assistant"] * (len(b.turns) // 2)
            fillers = [t.content for t in b.turns if t not in a.turns and t.role == "user"]
            assert len(fillers) == len(set(fillers)) == 3
    with pytest.raises(ValueError, match="fillers"):
        fixtures.generate(2, fillers=len(fixtures.LONG_FILLERS) + 1)


def _q(qid: str, qtype: str, sessions: list[str], answer_sessions: tuple[str, ...] = ()) -> data.Question:
    turns = (data.Turn("user", "hi"),)
    return data.Question(qid, qtype, "What?", "x", "2023/05/30 (Tue) 10:00",
                         tuple(data.Session(s, "2023/05/01 (Mon) 10:00", turns) for s in sessions), answer_sessions)


def test_publisher_components_and_split_crossing_by_hand():
    qs = [_q("a", "knowledge-update", ["s1"]), _q("a_abs", "knowledge-update", ["s9"]),  # linked as variants
          _q("b", "knowledge-update", ["s2", "s3"]), _q("c", "multi-session", ["s4"], ("s3",)),  # via answer id s3
          _q("d", "multi-session", ["s5"]), _q("e", "temporal-reasoning", ["s5", "s6"]),
          _q("f", "temporal-reasoning", ["s7"])]
    comp = data.publisher_components({q.question_id: (q.group, data.publisher_sessions(q)) for q in qs})
    assert comp == {"a": "a", "a_abs": "a", "b": "b", "c": "b", "d": "d", "e": "d", "f": "f"}
    assert data.publisher_sessions(qs[3]) == ("s3", "s4")
    quotas = {"knowledge-update": 1, "multi-session": 1, "temporal-reasoning": 0}
    # SHA-256 ranks b before a_abs and a, d before c: development = {b, d}.
    assert {q.question_id for q in data.split_questions(qs, quotas)["development"]} == {"b", "d"}
    # A component crosses when it holds a development and a validation question: {b, c} and {d, e}.
    assert data.publisher_crossing(qs, quotas) == {"b", "c", "d", "e"}


def test_choose_policy_rule_by_hand():
    from kvprobe.studies.session_bias.summary import choose_policy

    def c(name, weight, gated, change_all, change_updates):
        return {"name": name, "weight": weight, "gated": gated, "change_all": change_all,
                "change_updates": change_updates}

    assert choose_policy([]) is None
    # Largest overall change wins, whatever the updates say.
    assert choose_policy([c("h", .5, True, 1, 0), c("q", .25, True, 2, -3)])["name"] == "q"
    # Tie overall: the larger change on updates.
    assert choose_policy([c("h", .5, True, 1, 0), c("q", .25, True, 1, 2)])["name"] == "q"
    # Tie on both: the weaker attenuation (1/2), then the gate on.
    assert choose_policy([c("q", .25, True, 0, 0), c("hu", .5, False, 0, 0), c("h", .5, True, 0, 0)])["name"] == "h"
    # All negative: still the least harmful attenuation (validation tests it; the report says retention was better).
    assert choose_policy([c("h", .5, True, -3, 1), c("qu", .25, False, -1, 0)])["name"] == "qu"


def _full_row(case, condition, correct, stop="eos", **kw):
    row = _row(case, condition, correct, stop=stop, **{k: v for k, v in kw.items() if k in ("active", "update",
                                                                                               "abstention")})
    row.update({k: v for k, v in kw.items() if k not in ("active", "update", "abstention")})
    return row


def test_new_sections_on_hand_made_rows(tmp_path):
    """Development table and choice, query-aware cells against full and the source mask, EOS-restricted counts, cap
    hits, publisher components and the exclusion, judge-rule agreement: every count by hand."""
    # case: (sessions, publisher_crosses_split, kwargs, {arm: (correct, stop, biased)})
    table = {
        "a": (["s1"], False, {"update": True},
              {"full": (0, "eos", 0), "hard": (1, "eos", 0), "soft-half": (1, "eos", 9),
               "soft-quarter": (1, "cap", 9), "quest": (1, "cap", 0), "finch": (0, "eos", 0)}),
        "b": (["s2", "s3"], True, {"update": True},
              {"full": (1, "eos", 0), "hard": (0, "eos", 0), "soft-half": (1, "eos", 5),
               "soft-quarter": (0, "eos", 5), "quest": (1, "eos", 0), "finch": (1, "eos", 0)}),
        "c": (["s3"], True, {},
              {"full": (1, "cap", 0), "hard": (1, "eos", 0), "soft-half": (0, "eos", 4),
               "soft-quarter": (1, "eos", 4), "quest": (0, "eos", 0), "finch": (1, "cap", 0)}),
        "d": (["s4"], False, {"active": False},
              {"full": (0, "eos", 0), "hard": (0, "eos", 0), "soft-half": (0, "eos", 0),
               "soft-quarter": (0, "eos", 0), "quest": (1, "eos", 0), "finch": (0, "eos", 0)}),
    }
    with open(tmp_path / "results.jsonl", "w") as f:
        for case, (sessions, crosses, kw, arms) in table.items():
            for arm, (ok, stop, biased) in arms.items():
                extra = {"session_ids": sessions, "publisher_crosses_split": crosses, "biased_tokens": biased,
                         "hidden_tokens": 0}
                if arm in ("quest", "finch"):
                    extra.update(capacity=512, observation_tokens=10, history_tokens=600 if case != "d" else 400,
                                 resident_tokens=512 if arm == "finch" else 610)
                f.write(json.dumps(_full_row(case, arm, bool(ok), stop, **kw, **extra)) + "\n")
    s = summarize(tmp_path, seed=1, draws=300)
    every = {x["key"]: x for x in s["subsets"]}["all"]["arms"]
    # EOS-restricted = correct and ended by EOS; cap hits per arm.
    assert [(every[a]["correct"], every[a]["eos_correct"], every[a]["cap"]) for a in ("full", "quest", "finch")] == \
           [(2, 1, 1), (3, 2, 1), (2, 1, 1)]
    assert every["quest"]["vs_hard"]["change"] == 1 and every["quest"]["vs_full"]["change"] == 1
    assert (every["quest"]["vs_full"]["corrections"], every["quest"]["vs_full"]["reversals"]) == (2, 1)
    assert every["quest"]["eos_vs_full"]["change"] == 1 and "vs_hard" not in every["soft-half"]
    # Development: retention 2/4; soft-half 2/4 (+0; updates +1); soft-quarter 2/4 (+0; updates 0) -> soft-half.
    dev = s["development"]
    assert [(p["policy"], p["all"]["correct"], p["change_all"], p["change_updates"], p["active"])
            for p in dev["policies"]] == [("retention", 2, 0, 0, 0), ("soft-half", 2, 0, 1, 3),
                                          ("soft-quarter", 2, 0, 0, 3)]
    assert (dev["chosen"], dev["oldest_weight"], dev["gated"], dev["beats_retention"]) == ("soft-half", 0.5, True,
                                                                                            False)
    # Capacity: histories + window fit in K = 512 for d only.
    cap = {c["arm"]: c for c in s["query_aware"]["capacity"]}
    assert cap["quest"]["fits_in_capacity"] == 1 and cap["finch"]["resident_median"] == 512
    # Publisher: b and c share s3 -> 3 components of 4 base groups; b, c cross the split.
    pub = s["publisher"]
    assert (pub["components"], pub["base_groups"], pub["crossing_questions"], pub["crossing_components"]) == (3, 4, 2, 1)
    cells = {x["key"]: x for x in pub["subsets"]}
    assert (cells["all"]["questions"], cells["all"]["groups"]) == (4, 3)
    kept = cells["all_without_publisher_crossing"]
    assert (kept["questions"], kept["groups"], kept["arms"]["hard"]["correct"], kept["arms"]["full"]["correct"]) == \
           (2, 2, 1, 0)
    assert kept["arms"]["hard"]["vs_full"]["change"] == 1
    # The same change as the base grouping's point estimate; the interval comes from other units.
    assert cells["all"]["arms"]["hard"]["vs_full"]["change"] == every["hard"]["vs_full"]["change"] == 0
    report = format_report(s, {"model": {"name": "hand"}, "study_config": {"source": "fixtures", "capacity": 512}})
    for heading in ("## Development: choosing the bias weight", "## Query-aware methods at fixed capacity",
                    "## Publisher-session grouping", "Chosen: soft-half"):
        assert heading in report
    # A judge's grades: agreement with the rule labels stored in the rows.
    grades = tmp_path / "grades.jsonl"
    grades.write_text("".join(json.dumps({"case_id": c, "arm": a, "correct": True, "grader": "judge:x"}) + "\n"
                              for c, (_, _, _, arms) in table.items() for a in arms))
    g = summarize(tmp_path, seed=1, draws=300, grades=grades)
    agree = {c["arm"]: c for c in g["grader_agreement"]}
    assert (agree["full"]["both_correct"], agree["full"]["judge_only"], agree["full"]["rule_only"]) == (2, 2, 0)
    assert agree["all arms"]["n"] == 24 and agree["all arms"]["agreement"] == pytest.approx(13 / 24)
    assert g["grades_file"] == "grades.jsonl"


def test_every_arm_on_a_tiny_model(llama):
    """Development policies and query-aware methods on padded fixtures: which rows are copied (no-op session-order
    arms only), the capacity columns, and the positions each session-order arm touches."""
    qs = fixtures.generate(4, fillers=2)
    temporal = next(q for q in qs if q.question_type == "temporal-reasoning")
    update = next(q for q in qs if q.question_type == "knowledge-update" and not q.is_abstention)
    study = SessionBiasStudy(split="all", fixture_bases=4, fixture_fillers=2, condition_set=history.CONDITIONS,
                             capacity=64, max_new_tokens=3, skip_inactive=True)
    rows = study.run_cases(llama, [SessionBiasCase(q, "all", False) for q in (temporal, update)])
    for q, case_rows in zip((temporal, update), rows):
        by = {r["condition"]: r for r in case_rows}
        assert list(by) == list(history.CONDITIONS)
        n = by["full"]["history_tokens"]
        assert n > 64 and all(r["session_ids"] == list(data.publisher_sessions(q)) for r in case_rows)
        for method in history.QUERY_AWARE:
            r = by[method]
            assert r["capacity"] == 64 and r["observation_tokens"] > 0 and not r["copied_from_full"]
            assert r["resident_tokens"] == (64 if method == "finch" else n + r["observation_tokens"])
        assert by["full"]["capacity"] is None and by["soft"]["capacity"] is None
        # Ungated policies touch every session but the newest, whatever the question says.
        for name in ("soft-half-ungated", "soft-quarter-ungated"):
            assert by[name]["biased_tokens"] == by["soft-half-ungated"]["biased_tokens"] > 0
            assert not by[name]["copied_from_full"]
        gated = ("soft", "hard", "soft-half", "soft-quarter")
        if q is temporal:  # the gate is off: the gated arms change nothing and copy the full answer
            assert not by["full"]["active"] and by["full"]["gate"] == 0
            assert all(by[a]["copied_from_full"] and by[a]["output"] == by["full"]["output"] for a in gated)
            assert by["soft"]["biased_tokens"] == by["hard"]["hidden_tokens"] == 0
        else:  # every gated arm touches the same positions the hard mask hides
            assert by["full"]["active"] and not any(by[a]["copied_from_full"] for a in gated)
            assert by["soft"]["biased_tokens"] == by["hard"]["hidden_tokens"] == by["soft-half"]["biased_tokens"] \
                == by["soft-quarter"]["biased_tokens"] == by["soft-half-ungated"]["biased_tokens"] > 0
    with pytest.raises(ValueError, match="oldest_weight"):
        SessionBiasStudy(oldest_weight=1.0)
    with pytest.raises(ValueError, match="fixture_fillers"):
        SessionBiasStudy(fixture_fillers=len(fixtures.LONG_FILLERS) + 1)
    with pytest.raises(ValueError, match="capacity"):
        SessionBiasStudy(capacity=0)
