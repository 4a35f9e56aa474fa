"""Question-relevance signals on the controlled histories: the attention signal against a plain transformers
forward, the lexical score by hand, and the summary's AUC and relevance on hand-built rows."""

from __future__ import annotations

import json

import pytest
import torch

from kvprobe.reference import transformers_eager
from kvprobe.studies.components import strings
from kvprobe.studies.components.relevance import RelevanceStudy, lexical_overlap
from kvprobe.studies.components.relevance_summary import summarize
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
