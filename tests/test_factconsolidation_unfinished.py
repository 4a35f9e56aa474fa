"""Unfinished generation under masking (``studies.factconsolidation.unfinished``; paper L4331-4417): each lexical
rule and each statistic against a small hand-computed case. No model, no data generation."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from kvprobe.studies.factconsolidation import strings
from kvprobe.studies.factconsolidation.mapping import Superseded
from kvprobe.studies.factconsolidation.unfinished import analyse, answer_styles, fact_citations, ngram_repeat_share, \
    question_components, quotes_masked_record, ratio_verdict, recheck_count, run_records, search_loop, \
    source_losses, style, style_tests, token_ratios, verbatim_loop

# ----------------------------------------------------------------------------- the lexical rules


def test_recheck_phrases_and_fact_citations_are_counted_by_hand():
    assert strings.RECHECK_PHRASES == ("let me check", "wait")  # the paper's two examples (L4345-4346)
    # "Wait" twice (any case, whole word; "awaits" is not one) and "let me check" once: 3.
    assert recheck_count("Wait, fact 12. Let me check... wait! It awaits.") == 3
    text = "Fact 12 says Oslo.\n12. Oslo is the capital.\n- (7) no\nfacts #3 and [12]; in 1990, number 5"
    # fact 12, line-start 12., (7) after a dash, facts #3, [12], number 5; 1990 is no citation.
    assert fact_citations(text) == Counter({12: 3, 7: 1, 3: 1, 5: 1})


LOOP = "Wait, fact 12 gives Oslo. Let me check fact 12 again. Wait, fact 12 says Oslo."


def test_search_loop_needs_the_limit_no_box_three_rechecks_and_one_fact_three_times():
    # 3 re-check phrases (Wait, Let me check, Wait) and fact 12 cited 3 times, stopped at the cap: a search loop.
    assert search_loop(LOOP, "cap")
    assert not search_loop(LOOP, "eos")                                   # stopped at EOS
    assert not search_loop(LOOP + " \\boxed{Oslo}", "cap")                # a boxed answer
    assert not search_loop(LOOP.replace("Let me check", "Then see"), "cap")  # two re-check phrases
    assert not search_loop(LOOP.replace("fact 12 says", "fact 13 says"), "cap")  # fact 12 twice, 13 once
    assert search_loop(LOOP.replace("Let me check", "Then see"), "cap", at_least=2)


def test_ngram_repeat_share_and_the_verbatim_loop_by_hand():
    # 2-grams of a b a b a: ab ba ab ba, each twice: 4/4. Of a b c a b: ab bc ca ab, ab twice: 2/4.
    assert ngram_repeat_share("a b a b a".split(), 2) == 1.0
    assert ngram_repeat_share("a b c a b".split(), 2) == 0.5
    assert ngram_repeat_share("a b".split(), 8) is None
    # A 4-word phrase 4 times: 16 words, 9 word 8-grams, each occurs at least twice (period 4): 9/9 > 1/2.
    assert verbatim_loop("the name is X " * 4)
    # 8 distinct words then the same 8 again: 9 8-grams, the first and the last the same (2 of 9), the others once.
    eight = "one two three four five six seven eight "
    assert ngram_repeat_share((eight * 2).split()) == 2 / 9 and not verbatim_loop(eight * 2)
    # Exactly half repeated is not more than half: a b c a b at n = 2.
    assert not verbatim_loop("a b c a b", n=2)
    assert verbatim_loop("a b a b a", n=2)


RECORDS = (Superseded(4, 9, "Ann Berg", "P27", "Norway", "Chile", (0, 0)),
           Superseded(6, 9, "Oslo", "P17", "Denmark", "Chile", (0, 0)))


def test_quoting_a_masked_record_needs_number_subject_and_old_value_on_one_line():
    assert quotes_masked_record("Looking again.\nFact 4: Ann Berg is a citizen of Norway.", RECORDS)
    assert quotes_masked_record("4. Ann Berg is a citizen of norway", RECORDS)        # SQuAD-normalized case
    assert not quotes_masked_record("Fact 4: Ann Berg is a citizen of Chile.", RECORDS)  # the new value
    assert not quotes_masked_record("Fact 6: Ann Berg is a citizen of Norway.", RECORDS)  # another record's number
    assert not quotes_masked_record("Fact 4: Ann Berg\nis a citizen of Norway.", RECORDS)  # split over two lines
    assert not quotes_masked_record("Ann Berg is a citizen of Norway (4 facts).", RECORDS)  # no citation of 4


def test_style_is_box_only_or_not_by_default():
    rows = [{"only_box": True, "valid_box": True}, {"only_box": False, "valid_box": True},
            {"only_box": False, "valid_box": False}]
    assert [style(r) for r in rows] == ["box only", "other", "other"]
    assert [style(r, "three-way") for r in rows] == ["box only", "text and box", "no box"]
    with pytest.raises(ValueError, match="style rule"):
        style(rows[0], "nope")


# ----------------------------------------------------------------------------- components and statistics


def test_question_components_link_shared_mquake_cases_and_repeated_texts():
    questions = {("h1", "a"): "Q1?", ("h1", "b"): "Q2?", ("h1", "c"): "Q3?", ("h2", "a"): "q1? ", ("h2", "d"): "Q4?"}
    # Case 7 asks Q2 and Q4; Q1 appears in both histories (same text, casefolded): {h1a, h2a}, {h1b, h2d}, {h1c}.
    units = question_components(questions, {"q2?": [7], "q4?": [7]})
    assert units[("h1", "a")] == units[("h2", "a")] and units[("h1", "b")] == units[("h2", "d")]
    assert len(set(units.values())) == 3
    assert len(set(question_components(questions).values())) == 4  # text only: Q2 and Q4 apart


def _row(hop, outcome, stop, tokens, output="x", only_box=False, official=False, tier="32k", hist=1000, hidden=0):
    return {"hop": hop, "outcome": outcome, "stop_reason": stop, "output_tokens": tokens, "output": output,
            "only_box": only_box, "valid_box": only_box, "official_match": official, "tier": tier,
            "history_tokens": hist, "hidden_tokens": hidden, "question": "q"}


def _by():
    """Four questions of one history under full, source and recompute."""
    k = [("h", f"q{i}") for i in range(4)]
    full = {k[0]: _row("mh", "complete", "eos", 100), k[1]: _row("sh", "complete", "eos", 10, only_box=True),
            k[2]: _row("sh", "complete", "eos", 30), k[3]: _row("mh", "wrong", "eos", 60, only_box=True)}
    source = {k[0]: _row("mh", "capped", "cap", 200, LOOP, official=True),
              k[1]: _row("sh", "complete", "eos", 10, only_box=True),
              k[2]: _row("sh", "capped", "cap", 200, "the name is X " * 4),
              k[3]: _row("mh", "wrong", "eos", 90)}
    recompute = {k[0]: _row("mh", "complete", "eos", 50, only_box=True), k[1]: _row("sh", "wrong", "eos", 5),
                 k[2]: _row("sh", "complete", "eos", 20, only_box=True),
                 k[3]: _row("mh", "wrong", "eos", 25, only_box=True)}
    return {"full": full, "source": source, "recompute": recompute}, k


def test_answer_styles_losses_and_the_style_test_by_hand():
    by, k = _by()
    styles = {s["policy"]: s for s in answer_styles(by, k, {"h": RECORDS})}
    # Box-only: full q1 q3 (2), source q1 (1), recompute q0 q2 q3 (3). Same style as full (box-only or not):
    # source q0 q1 q2 (q3 box-only -> other), recompute q3 only (q0 q2 other -> box-only, q1 box-only -> other). Capped: source q0 q2. Loops: source q0 search, q2 verbatim.
    assert {p: (s["box_only"], s["same_style"], s["capped"], s["search_loop"], s["verbatim_loop"],
                s["capped_verbatim_loop"], s["quotes_masked"]) for p, s in styles.items()} == {
        "full": (2, None, 0, 0, 0, 0, 0), "source": (1, {"k": 3, "n": 4}, 2, 1, 1, 1, 0),
        "recompute": (3, {"k": 1, "n": 4}, 0, 0, 0, 0, 0)}
    loss = source_losses(by, k)
    # Lost: q0 (mh, capped, search loop, holds the reference without a box; recompute complete) and q2 (sh, capped,
    # verbatim loop). Kept: q1 (sh). Fisher [[1, 1], [0, 1]]: p = 1. Search loop 1 of 2, Clopper-Pearson
    # [1 - 0.975^(1/2), 0.975^(1/2)]. Medians of full tokens: lost (100, 30) -> 65, kept 10.
    assert (loss["lost"], loss["kept"], loss["capped"], loss["verbatim_capped"], loss["answer_without_box"],
            loss["recompute_complete"]) == (2, 1, 2, 1, 1, 1)
    assert loss["multihop"]["lost"] == 1 and loss["multihop"]["kept"] == 0
    assert loss["multihop"]["fisher"]["table"] == [[1, 1], [0, 1]] and loss["multihop"]["fisher"]["p"] == 1.0
    assert loss["search_loop"]["k"] == 1 and loss["search_loop"]["ci"] == pytest.approx(
        [1 - 0.975 ** 0.5, 0.975 ** 0.5])
    assert loss["median_full_tokens"] == {"lost": 65, "kept": 10}
    t = style_tests(by, k)
    # Same style: source only on q0 q1 q2, recompute only on q3: b = 3, c = 1, p = 2 P(Bin(4, 1/2) <= 1) = 10/16.
    assert t["same_style"] == {"n": 4, "source": 3, "recompute": 1, "source_only": 3, "recompute_only": 1,
                               "p": pytest.approx(10 / 16)}
    assert t["box_only_by_length"] is None  # one tier


def test_box_only_by_length_compares_recompute_at_the_longer_tier_with_full_at_the_shorter():
    by, k = _by()
    long = [("l", f"q{i}") for i in range(3)]
    for i, key in enumerate(long):
        by["full"][key] = _row("sh", "wrong", "eos", 9, tier="64k", hist=3000)
        by["source"][key] = _row("sh", "wrong", "eos", 9, tier="64k", hist=3000, hidden=500)
        by["recompute"][key] = _row("sh", "wrong", "eos", 9, only_box=i < 2, tier="64k", hist=3000)
    b = style_tests(by, k + long)["box_only_by_length"]
    # Recompute at 64k: 2 of 3 box-only, input 3000 - 500; full at 32k: 2 of 4 (q1 q3), input 1000.
    assert (b["recompute_tier"], b["full_tier"], b["recompute"], b["full"]) == ("64k", "32k", {"k": 2, "n": 3},
                                                                                  {"k": 2, "n": 4})
    assert (b["recompute_input_tokens"], b["full_input_tokens"]) == (2500, 1000)
    assert b["fisher"]["table"] == [[2, 1], [2, 2]] and b["fisher"]["p"] == 1.0


def test_token_ratio_is_a_ratio_of_sums_with_a_component_bootstrap():
    by, k = _by()
    # Source / full: (200 + 10 + 200 + 90) / (100 + 10 + 30 + 60) = 500 / 200 = 2.5; recompute 100 / 200 = 0.5.
    one = {key: "c" for key in k}  # one component: every draw is the whole history, the interval a point
    (r,) = token_ratios(by, one, draws=50, seed=1)
    assert (r["questions"], r["components"], r["full_tokens"]) == (4, 1, 200)
    assert r["ratios"]["source"] == {"tokens": 500, "ratio": 2.5, "ci": [2.5, 2.5]}
    assert r["ratios"]["recompute"]["ratio"] == 0.5 and "value" not in r["ratios"]
    # Two components {q0, q1} (source 210 / full 110) and {q2, q3} (290 / 90): each draw is one of them twice
    # (a quarter each) or both (2.5); with 2,000 draws the 2.5% and 97.5% points are the two extremes.
    two = {k[0]: "a", k[1]: "a", k[2]: "b", k[3]: "b"}
    (r,) = token_ratios(by, two, draws=2000, seed=3)
    assert r["ratios"]["source"]["ratio"] == 2.5
    assert r["ratios"]["source"]["ci"] == pytest.approx([210 / 110, 290 / 90])


def test_ratio_verdict_follows_the_scorecard_rule_and_its_floor():
    up = {"ratio": 1.3, "ci": [1.1, 1.5]}
    assert ratio_verdict(up, 30, 100) == "replicates"
    assert ratio_verdict({"ratio": 0.8, "ci": [0.6, 0.95]}, 30, 100) == "opposite"
    assert ratio_verdict(up, 1, 72) == "not testable here (full access 1/72; interval alone: replicates)"


def test_rows_without_text_or_config_give_no_analysis_and_no_records(tmp_path):
    by, k = _by()
    assert analyse(tmp_path, {"full": {k[0]: {"outcome": "complete"}}}, k) is None
    assert run_records(tmp_path, ["h"]) == (None, "no config.json")
    (tmp_path / "config.json").write_text(json.dumps({"study": "factconsolidation", "study_config": {}}))
    u = analyse(tmp_path, by, k, draws=20)
    assert u["records"].startswith("the run's data could not be rebuilt") or "digest" in u["records"]
    assert all(s["quotes_masked"] is None for s in u["styles"]) and u["full_complete"] == 3
