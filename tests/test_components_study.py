"""The component-intervention study: generator, exact prompt, reason_then_score against an
independent reference, an end-to-end run on a tiny model, and the summary math."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
import torch

import kvprobe
from kvprobe.interventions import Zero
from kvprobe.decoding import Request, answer, suffix_ids
from kvprobe.reference import cached_explicit_logits, reference_logits
from kvprobe.studies.components import strings
from kvprobe.studies.components.data import FAMILIES, STATES, generate_clusters, prompt, rendered_text
from kvprobe.studies.components.reasoning import reason_then_score
from kvprobe.studies.components.study import CONDITIONS, ComponentStudy, conditions_for
from kvprobe.studies.components.summary import format_report, summarize
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.common.runner import run_study

TOL = 1e-4  # fp32 log-probabilities (nats): cached, traced, batched path vs one plain forward
BUDGET = 4


# --------------------------------------------------------------------------- generator


def test_generator_is_deterministic_and_fictional():
    a, b = generate_clusters(8), generate_clusters(8)
    assert a == b
    assert generate_clusters(8, seed=1) != a
    assert len(generate_clusters()) == 400  # the paper's 5 x 80
    assert len({c.cluster_id for c in a}) == len(a) == 40
    entities = [e for c in a for e in (c.entity, c.other_entity)]
    assert len(set(entities)) == len(entities)
    for c in a:
        assert len({c.old_value, c.new_value, c.other_value, c.distractor}) == 4
        history = c.history_text("superseded")
        assert c.distractor not in history and c.other_value in history
        assert c.new_value not in c.history_text("current") and c.new_value in history
        # the two states differ only in the later record's value
        cur, sup = c.segments("current"), c.segments("superseded")
        assert [n for n, _ in cur] == [n for n, _ in sup] and cur[:-1] == sup[:-1]


def test_counterbalancing():
    clusters = generate_clusters(8)
    for family in FAMILIES:
        mine = [c for c in clusters if c.family == family]
        patterns = Counter((c.old_listed_first, c.position, c.direction) for c in mine)
        assert len(patterns) == 8 and set(patterns.values()) == {1}
        assert Counter(c.other_listed_first for c in mine) == {True: 4, False: 4}
        # the expected target option is listed first in half of the (cluster, state) pairs
        first = Counter(c.options("target")[0] == c.expected(s, "target") for c in mine for s in STATES)
        assert first == {True: 8, False: 8}
    deadlines = [c for c in clusters if c.family == "deadline"]
    later = Counter(c.direction for c in deadlines)  # direction 0: the new date is the later one
    assert later == {0: 4, 1: 4}
    # one cluster per family still varies the pattern across families
    assert len({(c.old_listed_first, c.position, c.direction) for c in generate_clusters(1)}) == 5


# --------------------------------------------------------------------------- exact prompt


def test_rendered_prompt_is_the_papers_concatenation(llama):
    c = generate_clusters(1)[0]
    assert c.position == "early"
    old = f"Record: the office city of {c.entity} is {c.old_value}."
    other = f"Record: the office city of {c.other_entity} is {c.other_value}."
    later = f"Later record: the office city of {c.entity} is {c.new_value}."
    query = f"What is the office city of {c.entity} now: {c.options('target')[0]} or {c.options('target')[1]}?"
    history_text = "\n".join([old, c.note, other, later])
    want = "History:\n" + history_text + "\nQuestion:\n" + query + "\nReasoning:\n"
    assert rendered_text(c, "superseded", "target") == want
    h = llama.prefill(prompt(c, "superseded"))
    assert h.text + h.rendered.suffix(c.query("target")) == want
    assert h.token_text(h.span("old")) == old
    # the history carries the tokenizer's special tokens, the suffix none; both tokenize as the joint text
    assert h.input_ids.tolist() == llama.tokenizer("History:\n" + history_text)["input_ids"]
    joint = llama.tokenizer(want)["input_ids"]
    assert h.input_ids.tolist() + suffix_ids(llama, h, c.query("target")) == joint
    assert strings.ANSWER_CUE == "\nAnswer:\n"


# --------------------------------------------------------------------------- reason_then_score


def _zeroed_state(history: kvprobe.History, span: kvprobe.TokenSpan, component: str):
    """The history's cache with K and/or V rows of ``span`` zeroed by hand, every layer with rows."""
    base = history.base_state()
    kv = []
    for k, v in base.kv:
        if k is not None:
            k, v = k.clone(), v.clone()
            if "k" in component:
                k[:, :, span.start:span.end] = 0
            if "v" in component:
                v[:, :, span.start:span.end] = 0
        kv.append((k, v))
    return replace(base, kv=kv)


def _reference(model: kvprobe.Model, history: kvprobe.History, question: str, options: list[str], budget: int,
               hidden: torch.Tensor | None = None, state=None) -> tuple[list[int], list[float]]:
    """Greedy continuation (no EOS stop), then option log-probs after the cue, each from one plain
    transformers forward over the full token sequence: uncached with a 4-D mask hiding ``hidden``
    from every position after the history, or, for zeroing, on a copy of the edited ``state``."""
    tok = model.tokenizer
    suffix = tok(history.rendered.suffix(question), add_special_tokens=False)["input_ids"]

    def logits(after: list[int]) -> torch.Tensor:  # logits of every token after the history
        if state is not None:
            return cached_explicit_logits(model, state, after)
        return reference_logits(model, history.input_ids.tolist(), after, hidden)

    cont: list[int] = []
    for _ in range(budget):
        cont.append(int(logits(suffix + cont)[-1].argmax()))
    prefix = suffix + cont + tok(strings.ANSWER_CUE, add_special_tokens=False)["input_ids"]
    scores = []
    for option in options:
        ids = tok(option, add_special_tokens=False)["input_ids"]
        lp = torch.log_softmax(logits(prefix + ids).float(), dim=-1)
        scores.append(float(sum(lp[len(prefix) - 1 + j, t] for j, t in enumerate(ids))))
    return cont, scores


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-gemma3"])
def test_reason_then_score_equals_plain_forward(name):
    model = kvprobe.load_model(name)
    c = generate_clusters(1)[2]  # old record after the note ("late")
    # tiny-llama: two histories in one batch; tiny-gemma3 (sliding layers, slower): one
    histories = [model.prefill(prompt(c, s)) for s in (STATES if name == "tiny-llama" else ("superseded",))]
    items, cands, refs = [], [], []
    for h in histories:
        conditions, old, matched = conditions_for(h)
        hidden_old = torch.zeros(len(h), dtype=torch.bool)
        hidden_old[old.start:old.end] = True
        hidden_matched = torch.zeros(len(h), dtype=torch.bool)
        hidden_matched[matched.start:matched.end] = True
        reference_of = {
            "none": {}, "mask-old": {"hidden": hidden_old}, "mask-matched": {"hidden": hidden_matched},
            "zero-k-old": {"state": _zeroed_state(h, old, "k")}, "zero-v-old": {"state": _zeroed_state(h, old, "v")},
            "zero-kv-matched": {"state": _zeroed_state(h, matched, "kv")},
        }
        for query in ("target", "unrelated"):
            options = list(c.options(query))
            for cond, kw in reference_of.items():
                items.append((h, Request(c.query(query), conditions[cond])))
                cands.append(options)
                refs.append((cond, query, _reference(model, h, c.query(query), options, BUDGET, **kw)))
    got = reason_then_score(model, items, cands, BUDGET, strings.ANSWER_CUE)  # one batch, two histories
    assert all(h.check_digest() for h in histories)
    results = {}
    for (gen, scores), (cond, query, (ref_tokens, ref_scores)), (h, _) in zip(got, refs, items):
        assert list(gen.token_ids) == ref_tokens and gen.n_tokens == BUDGET, (cond, query)
        assert np.allclose(scores.logprobs, ref_scores, atol=TOL, rtol=0), (cond, query, scores.logprobs, ref_scores)
        results[(id(h), cond, query)] = np.array(scores.logprobs)
    # the conditions matter: each differs from no intervention far beyond the tolerance
    for h in histories:
        for cond in ("mask-old", "zero-k-old", "zero-v-old", "zero-kv-matched", "mask-matched"):
            diff = max(np.abs(results[(id(h), cond, q)] - results[(id(h), "none", q)]).max()
                       for q in ("target", "unrelated"))
            assert diff > 100 * TOL, (name, cond, diff)


def test_reason_then_score_does_not_stop_at_eos(llama, monkeypatch):
    c = generate_clusters(1)[0]
    h = llama.prefill(prompt(c, "current"))
    q, options = c.query("target"), list(c.options("target"))
    first, _ = _reference(llama, h, q, options, 1)
    monkeypatch.setattr(llama.hf.generation_config, "eos_token_id", first[0])  # the first greedy token ends answers
    assert first[0] in llama.eos_ids
    stopped = answer(llama, [(h, Request(q, kvprobe.Full()))], max_new_tokens=BUDGET)[0].generation
    assert stopped.stop_reason == "eos" and stopped.n_tokens == 1
    gen, scores = reason_then_score(llama, [(h, Request(q, kvprobe.Full()))], [options], BUDGET,
                                    strings.ANSWER_CUE)[0]
    ref_tokens, ref_scores = _reference(llama, h, q, options, BUDGET)
    assert gen.n_tokens == BUDGET and list(gen.token_ids) == ref_tokens and gen.stop_reason == "cap"
    assert np.allclose(scores.logprobs, ref_scores, atol=TOL, rtol=0)


def test_reason_then_score_without_continuation(llama):
    """budget 0: the cue follows the question directly."""
    c = generate_clusters(1)[3]
    h = llama.prefill(prompt(c, "current"))
    conditions, old, _ = conditions_for(h)
    q, options = c.query("target"), list(c.options("target"))
    gen, scores = reason_then_score(llama, [(h, Request(q, conditions["zero-kv-old"]))], [options], 0,
                                    strings.ANSWER_CUE)[0]
    assert gen.n_tokens == 0 and gen.text == ""
    _, ref = _reference(llama, h, q, options, 0, state=_zeroed_state(h, old, "kv"))
    assert np.allclose(scores.logprobs, ref, atol=TOL, rtol=0)


def test_reason_then_score_on_a_hybrid_model(hybrid):
    """Recurrent layers: rows batched by suffix length, candidates scored on copies."""
    c = generate_clusters(1)[1]
    h = hybrid.prefill(prompt(c, "superseded"))
    conditions, old, _ = conditions_for(h)
    hidden = torch.zeros(len(h), dtype=torch.bool)
    hidden[old.start:old.end] = True
    pairs = [(q, cond) for q in ("target", "unrelated") for cond in ("none", "mask-old")]
    items = [(h, Request(c.query(q), conditions[cond])) for q, cond in pairs]
    cands = [list(c.options(q)) for q, _ in pairs]
    got = reason_then_score(hybrid, items, cands, 3, strings.ANSWER_CUE)
    for (gen, scores), (_, req), options in zip(got, items, cands):
        ref_tokens, ref_scores = _reference(hybrid, h, req.question, options, 3,
                                            hidden=hidden if req.access.name == "mask-old" else None)
        assert list(gen.token_ids) == ref_tokens
        assert np.allclose(scores.logprobs, ref_scores, atol=TOL, rtol=0)


def test_zero_conditions_are_the_interventions_zero(llama):
    h = llama.prefill(prompt(generate_clusters(1)[0], "current"))
    conditions, old, matched = conditions_for(h)
    assert list(conditions) == list(CONDITIONS)
    assert len(old) == len(matched) and not old.overlaps(matched)
    assert conditions["zero-v-matched"] == Zero(matched, "v", name="zero-v-matched")
    assert h.span("note").start == matched.start


# --------------------------------------------------------------------------- end to end


def test_study_runs_resumes_and_summarizes(llama, tmp_path):
    study = ComponentStudy(n_per_family=1, budget=3)
    out = tmp_path / "run"
    info = run_study(study, llama, out, progress=False)
    assert info.cases_run == 10
    data = (out / "results.jsonl").read_bytes()
    rows = [json.loads(line) for line in data.decode().splitlines()]
    assert len(rows) == 10 * 2 * len(CONDITIONS)
    assert {(r["state"], r["query"], r["condition"]) for r in rows} == {
        (s, q, cond) for s in STATES for q in ("target", "unrelated") for cond in CONDITIONS}
    for r in rows:
        assert r["margin"] == pytest.approx(r["logprobs"][r["expected_index"]] - r["logprobs"][1 - r["expected_index"]])
        assert r["correct"] == (r["margin"] > 0) and len(r["continuation_ids"]) == 3
        # the continuation is the row's output; it always runs the whole budget
        assert isinstance(r["output"], str) and (r["stop_reason"], r["output_tokens"]) == ("cap", 3)
        assert r["group"] == r["cluster_id"]
    # resume: cut the file inside the first row of case 4 (as a kill would), rerun, same bytes
    lines = data.decode().splitlines(keepends=True)
    (out / "results.jsonl").write_text("".join(lines[: 3 * 18]) + lines[3 * 18][:40])
    run_study(study, llama, out, progress=False)
    assert (out / "results.jsonl").read_bytes() == data
    summary = write_summary("components", out, seed=0)
    assert set(summary["effects"]) == {"K", "V", "K+V", "QK"} and summary["clusters"] == 5
    assert set(summary["accuracy"]) == {"K", "V", "K+V", "QK"}
    report = (out / "report.md").read_text()
    assert "## Component effects" in report and "## Accuracy preservation" in report and "inconsistent" in report


def test_bad_parameters_fail_before_a_model_loads():
    with pytest.raises(ValueError, match="families"):
        ComponentStudy(families=("location", "weather"))
    with pytest.raises(ValueError, match="budget"):
        ComponentStudy(budget=-1)
    for field in ("n_per_family", "cases_per_batch"):
        with pytest.raises(ValueError, match=field):
            ComponentStudy(**{field: 0})
    assert ComponentStudy(budget=0).budget == 0  # the cue may follow the question directly


# --------------------------------------------------------------------------- summary math


def _rows(n_clusters: int, margin, correct) -> list[dict]:
    """Rows of every (cluster, state, query, condition); margin/correct(cluster, state, query, condition)."""
    out = []
    for i in range(n_clusters):
        cid = f"location-{i:03d}"
        for s in STATES:
            for q in ("target", "unrelated"):
                for cond in CONDITIONS:
                    out.append({"case_id": f"{cid}-{s}", "cluster_id": cid, "family": "location", "state": s,
                                "query": q, "condition": cond, "margin": margin(i, s, q, cond),
                                "correct": correct(i, s, q, cond)})
    return out


def _write(tmp_path, rows) -> str:
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(tmp_path)


def _percentile_bootstrap(x: np.ndarray, draws: int, seed: int, alpha: float) -> list[float]:
    """Independent cluster bootstrap of a mean (same generator and draw layout as readouts.stats)."""
    idx = np.random.default_rng(seed).integers(0, len(x), size=(draws, len(x)))
    means = x[idx].mean(axis=1)
    return [float(np.percentile(means, 100 * alpha / 2)), float(np.percentile(means, 100 * (1 - alpha / 2)))]


def test_summary_effects_on_constructed_margins(tmp_path):
    a = np.array([1.0, 2.0, 3.0, 4.0, 6.0])

    def margin(i, s, q, cond):
        m = 5.0 + i  # the no-intervention margin cancels
        if q != "target":
            return m - 1.0
        if cond == "zero-k-old":
            return m + (a[i] if s == "superseded" else 0.5)  # d_SUP = a_i, d_CUR = 0.5
        if cond == "zero-k-matched":
            return m
        if cond == "zero-v-old":
            return m + 2.0 if s == "superseded" else m  # Delta_V = 2 exactly, in every cluster
        if cond == "mask-old":
            return m + 3.0 if s == "superseded" else m - 1.0  # Delta_QK = 4
        if cond == "mask-matched":
            return m + 1.0  # both states: cancels in Delta
        return m

    out = _write(tmp_path, _rows(len(a), margin, lambda *_: True))
    s = summarize(out, seed=3, draws=2000)
    k = s["effects"]["K"]
    assert k["delta"] == pytest.approx(float(np.mean(a - 0.5)))
    assert k["ci_95"] == pytest.approx(_percentile_bootstrap(a - 0.5, 2000, 3, 0.05))
    assert k["ci_bonferroni"] == pytest.approx(_percentile_bootstrap(a - 0.5, 2000, 3, 0.05 / 3))
    assert k["ci_bonferroni"][0] <= k["ci_95"][0] and k["ci_bonferroni"][1] >= k["ci_95"][1]
    assert s["effects"]["V"]["delta"] == pytest.approx(2.0) and s["effects"]["V"]["ci_bonferroni"] == [2.0, 2.0]
    assert s["effects"]["K+V"]["delta"] == 0.0 and not s["effects"]["K+V"]["excludes_zero"]
    qk = s["effects"]["QK"]
    assert qk["delta"] == pytest.approx(4.0) and "ci_bonferroni" not in qk and qk["excludes_zero"]
    vk = s["v_minus_k"]
    assert vk["delta"] == pytest.approx(2.0 - float(np.mean(a - 0.5)))
    assert vk["ci_95"] == pytest.approx(_percentile_bootstrap(2.0 - (a - 0.5), 2000, 3, 0.05))


def test_accuracy_preservation_criterion(tmp_path):
    n = 40

    def correct(i, s, q, cond):
        if cond == "zero-k-old" and q == "target" and s == "current":
            return False  # K: every confirmed-value answer lost at the old span -> fails
        if cond == "zero-kv-old" and q == "unrelated" and s == "current" and i == 0:
            return False  # K+V: 1 of 80 unrelated answers lost: mean -0.0125 passes, the bound does not
        if cond == "zero-v-matched" and q == "target" and s == "current" and i < 2:
            return False  # V: the matched span loses answers, so old minus matched is positive
        return True

    out = _write(tmp_path, _rows(n, lambda *_: 1.0, correct))
    s = summarize(out, seed=0, draws=4000)
    acc = s["accuracy"]
    assert acc["K"]["target_current"]["change"] == -1.0 and not acc["K"]["passes_bonferroni"]
    assert not acc["K"]["passes_95"] and acc["K"]["unrelated"]["change"] == 0.0
    v = acc["V"]
    assert v["target_current"]["change"] == pytest.approx(2 / n) and v["passes_bonferroni"] and v["passes_95"]
    kv = acc["K+V"]["unrelated"]
    assert kv["change"] == pytest.approx(-0.5 / n)  # one cluster, half of its two states
    x = np.zeros(n)
    x[0] = -0.5
    assert kv["lower_95"] == pytest.approx(_percentile_bootstrap(x, 4000, 0, 0.05)[0])
    assert kv["lower_bonferroni"] == pytest.approx(_percentile_bootstrap(x, 4000, 0, 0.05 / 3)[0])
    assert kv["lower_bonferroni"] <= kv["lower_95"]
    assert acc["K+V"]["passes_95"] == (kv["lower_95"] >= -0.03)
    assert acc["K+V"]["passes_bonferroni"] == (kv["lower_bonferroni"] >= -0.03)
    assert kv["lower_bonferroni"] < -0.03 < kv["change"]  # the bound, not the mean, decides
    assert not acc["QK"]["tested"] and acc["QK"]["passes_bonferroni"]
    report = format_report(s, {"model": {"name": "hand-made"}, "study_config": {"n_per_family": n,
                                                                             "families": ["location"],
                                                                             "budget": 8}})
    assert "| zero K |" in report and "passes" in report
