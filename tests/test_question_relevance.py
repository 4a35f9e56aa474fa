"""Question-relevance signals on the controlled histories: the attention signal against a plain transformers
forward, the lexical score by hand, and the summary's AUC and relevance on hand-built rows."""

from __future__ import annotations

import json

import pytest
import torch

from kvprobe.reference import transformers_eager
from kvprobe.studies.components import strings
from kvprobe.readouts.fixed import value_distance
from kvprobe.studies.components.relevance import RelevanceStudy, lexical_overlap, tokenized_surfaces
from kvprobe.studies.components.relevance_summary import relevance_verdict, replacement_verdict, summarize
from kvprobe.transformers_api import output_cache
from kvprobe.studies.common.runner import read_rows, run_study

pytestmark = pytest.mark.usefixtures("one_thread")


def test_lexical_overlap_by_hand():
    assert lexical_overlap("Where is Kor now?", "Kor is in Ask.") == pytest.approx(2 / 6)
    assert lexical_overlap("", "") == 0.0


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-gemma3"])
def test_attention_signal_equals_an_uncached_eager_forward(family, tmp_path):
    import kvprobe

    model = kvprobe.load_model(family)
    study = RelevanceStudy(n_per_family=1, budget=3, families=("location",), cases_per_batch=2)
    run_study(study, model, tmp_path, progress=False)
    rows = [r for r in read_rows(tmp_path) if r["condition"] == "none"]
    assert len(rows) == 4 and all(r["attention_old"] is not None for r in rows)
    for row in rows[:2]:
        case = next(c for c in study.cases() if c.case_id == row["case_id"])
        h = model.prefill(study.prompt(model, case))
        tok = model.tokenizer
        ids = (h.input_ids.tolist() + tok(h.rendered.suffix(row["question"]), add_special_tokens=False)["input_ids"]
               + row["continuation_ids"] + tok(strings.ANSWER_CUE, add_special_tokens=False)["input_ids"])
        with torch.inference_mode(), transformers_eager(model):
            att = model.hf(input_ids=torch.tensor([ids]), output_attentions=True).attentions
        old = h.span("old")
        layers = model.arch.attention_layers
        want = sum(float(att[i][0, :, -1, old.start:old.end].sum(-1).mean()) for i in layers) / len(layers)
        assert row["attention_old"] == pytest.approx(want, abs=1e-5)


@pytest.mark.parametrize("family", ["tiny-llama", "tiny-qwen3"])  # full attention: transformers keeps every row
def test_pair_scores_equal_a_plain_forward_and_the_tokenizer_alone(family, tmp_path):
    """v_distance: the old and later records' token-mean V from a plain transformers forward of the history
    (no question); the surfaces: what the tokenizer-only backfill computes."""
    import kvprobe

    model = kvprobe.load_model(family)
    study = RelevanceStudy(n_per_family=1, budget=1, families=("deadline",), cases_per_batch=2)
    run_study(study, model, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    for case in study.cases():
        mine = [r for r in rows if r["case_id"] == case.case_id]
        assert len({(r["v_distance"], r["token_jaccard"], r["char_distance"]) for r in mine}) == 1
        h = model.prefill(study.prompt(model, case))
        with torch.inference_mode():
            cache = output_cache(model.hf(input_ids=h.input_ids[None], use_cache=True))
        a, b = h.span("old"), h.span("later")
        va = [cache.layers[l].values[0, :, a.start:a.end].double().mean(1) for l in model.arch.kv_layers]
        vb = [cache.layers[l].values[0, :, b.start:b.end].double().mean(1) for l in model.arch.kv_layers]
        assert mine[0]["v_distance"] == pytest.approx(value_distance(va, vb), rel=1e-4)
        surfaces = tokenized_surfaces(model.tokenizer, case.cluster, case.state)
        assert surfaces == {k: mine[0][k] for k in surfaces}


def test_criterion_verdicts_by_hand():
    assert replacement_verdict([0.45, 0.59]) == "poor recognition"
    assert replacement_verdict([0.61, 0.70]) == "recognizes"
    assert replacement_verdict([0.55, 0.65]) == "inconclusive"
    assert relevance_verdict([1.0, 1.0]) == "met"
    assert relevance_verdict([0.40, 0.59]) == "not met"
    assert relevance_verdict([0.46, 0.62]) == "inconclusive"


def _pair_rows(c, family, state, v, jac, char, att):
    rows = [_row(c, state, q, cond, 1.0, 0.5 if q == "target" else 0.2, att) for q in ("target", "unrelated")
            for cond in ("none", "mask-old")]
    for r in rows:
        r.update(family=family, v_distance=v, token_jaccard=jac, char_distance=char)
    return rows


def test_within_family_auc_and_v_against_surfaces_by_hand(tmp_path):
    """Two families of three clusters. Family f: V distance (superseded, current) per cluster (3, 1), (2, 2),
    (0, 4): AUC within f over its 3 x 3 pairs, superseded {3, 2, 0} vs current {1, 2, 4}: 3 > 1, 2; 2 > 1
    and = 2; 0 below all: 3.5/9; family g: (5, 1), (6, 2), (7, 3): 1. Within families (3.5/9 + 1)/2 = 12.5/18;
    pooled over the 6 x 6 pairs: superseded {3,2,0,5,6,7} vs current {1,2,4,1,2,3}:
    3 > 1,2,1,2 and = 3 (4.5), 2 > 1,1 and = 2,2 (3), 0: 0, 5, 6, 7: 6 each: (4.5 + 3 + 18) / 36 = 25.5/36.
    Token Jaccard is higher in every current state (reversed: AUC 1), character distance the opposite way."""
    rows = []
    values = {"f": [(3, 1), (2, 2), (0, 4)], "g": [(5, 1), (6, 2), (7, 3)]}
    for family, pairs in values.items():
        for i, (sup, cur) in enumerate(pairs):
            c = f"{family}{i}"
            rows += _pair_rows(c, family, "superseded", sup, 0.2, 0.4 + i / 10, 0.1)
            rows += _pair_rows(c, family, "current", cur, 0.9 - i / 10, 0.1, 0.1)
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    w = summarize(tmp_path, draws=300)["within_families"]
    v = w["signals"]["v_distance"]
    assert v["by_family"] == {"f": pytest.approx(3.5 / 9), "g": 1.0}
    assert v["auc"] == pytest.approx(12.5 / 18)
    assert v["unconditional"] == pytest.approx(25.5 / 36)
    assert v["ci"][0] <= 12.5 / 18 <= v["ci"][1] <= 1.0 and v["ci"][0] >= (0 + 1) / 2
    assert w["signals"]["token_jaccard"]["direction"] == -1 and w["signals"]["token_jaccard"]["auc"] == 1.0
    assert w["signals"]["char_distance"]["direction"] == 1 and w["signals"]["char_distance"]["auc"] == 1.0
    assert w["v_minus_surface"]["token_jaccard"]["diff"] == pytest.approx(12.5 / 18 - 1)
    assert w["v_minus_surface"]["token_jaccard"]["ci"][1] <= 0
    assert w["signals"]["attention_old"]["verdict"] == "poor recognition"  # all tied: 0.5 [0.5, 0.5]


def _row(cluster, state, query, condition, margin, lexical, attention):
    return {"case_id": f"{cluster}-{state}", "cluster_id": cluster, "family": "location", "state": state,
            "query": query, "condition": condition, "margin": margin, "lexical": lexical,
            "attention_old": attention if condition == "none" else None}


def test_auc_and_relevance_on_hand_built_rows(tmp_path):
    rows = []
    for i in range(6):
        c = f"c{i}"
        for state, att in (("current", 0.1), ("superseded", 0.3 if i < 4 else 0.05)):
            rows += [_row(c, state, "target", "none", 1.0, 0.5, att), _row(c, state, "target", "mask-old", 3.0, 0.5, 0),
                     _row(c, state, "unrelated", "none", 1.0, 0.2, 0.2),
                     _row(c, state, "unrelated", "mask-old", 1.0 + (0.5 if i == 0 else 0.0), 0.2, 0)]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    s = summarize(tmp_path, draws=200)
    # attention: superseded 0.3 > current 0.1 in four clusters, 0.05 < 0.1 in two: AUC 4/6
    assert s["replacement_auc"]["attention_old"]["auc"] == pytest.approx(4 / 6)
    assert s["replacement_auc"]["lexical"]["auc"] == 0.5
    # relevance: lexical always; attention target > unrelated (0.2) in 4 superseded states of 12; LOO |2| > |0.5|, |0|
    assert s["question_relevance"]["lexical"]["value"] == 1.0
    assert s["question_relevance"]["attention_old"]["value"] == pytest.approx(4 / 12)
    assert s["question_relevance"]["loo"]["value"] == 1.0


def test_committed_budget_comparison_is_what_its_runs_recompute_to(tmp_path):
    from pathlib import Path

    from kvprobe.studies.components.relevance_summary import write_comparison

    root = Path(__file__).resolve().parents[1]
    committed = root / "artifacts" / "question-relevance" / "budgets"
    meta = json.loads((committed / "relevance.json").read_text())
    write_comparison([root / r["run"] for r in meta["runs"]], tmp_path, seed=meta["seed"])
    assert (tmp_path / "relevance.md").read_text() == (committed / "relevance.md").read_text()
