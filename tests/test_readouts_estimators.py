"""Readouts as scikit-learn estimators: sklearn's own checks, equality with evaluate_records, splits, transfer.

Every estimator of kvprobe.readouts runs through ``parametrize_with_checks``. The readouts fitted through
the estimator API on a small tiny-llama recognition store give the same per-case scores and the same AUCs
as ``evaluate_records`` (the ``kvprobe readout`` path) does on that store.
"""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

import kvprobe
from conftest import recognition_cases
import kvprobe.readouts.evaluate as evaluate
from kvprobe.extract import FeatureStore, Pair, StoreError, extract
from kvprobe.readouts import (BalancedL2Probe, HeadValueDistance, KeySimilarity, PairwiseProbe, Probe,
                              RademacherProjection, ValueDistance, edit_transfer, transfer)
from kvprobe.studies.recognition.edits import record_edit

@pytest.fixture(scope="module", autouse=True)
def one_blas_thread():
    """Small fits gain nothing from a second BLAS or torch thread (and lose much on a shared 2-core machine)."""
    import torch
    from threadpoolctl import threadpool_limits

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    with threadpool_limits(limits=1):
        yield
    torch.set_num_threads(before)


#: Every estimator class once, in the variants whose code paths differ: a fixed and a chosen sign, a chosen
#: head, a probe whose C is chosen and one whose C is given (around a PairwiseProbe).
ESTIMATORS = [RademacherProjection(), BalancedL2Probe(), PairwiseProbe(), KeySimilarity(sign=1), ValueDistance(),
              HeadValueDistance(), Probe(), Probe("separate_kv", PairwiseProbe(kind="linear"), C=1.0)]

#: PairwiseProbe's input is np.hstack([X_A, X_B]), two halves of equal width; it refuses an odd width by name.
ODD_WIDTH = ("PairwiseProbe reads X as [X_A | X_B] of two equal halves and refuses an odd width by name; this "
             "check fits on 1, 3 or 5 columns")
PAIRWISE_ODD_WIDTH_CHECKS = ("check_classifiers_one_label", "check_dict_unchanged", "check_dont_overwrite_parameters",
                             "check_estimators_dtypes", "check_estimators_nan_inf", "check_estimators_pickle",
                             "check_f_contiguous_array_estimator", "check_fit2d_1feature", "check_fit2d_predict1d",
                             "check_fit_score_takes_y", "check_methods_sample_order_invariance",
                             "check_methods_subset_invariance", "check_pipeline_consistency",
                             "check_supervised_y_2d")


def expected_failed_checks(estimator) -> dict[str, str]:
    pairwise = isinstance(estimator, PairwiseProbe) or isinstance(getattr(estimator, "probe", None), PairwiseProbe)
    if not pairwise:
        return {}
    # The Probe wrapper refuses one-label data itself (before its PairwiseProbe sees an odd width).
    skip = {"check_classifiers_one_label"} if isinstance(estimator, Probe) else set()
    return {name: ODD_WIDTH for name in PAIRWISE_ODD_WIDTH_CHECKS if name not in skip}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failed_checks, xfail_strict=True)
def test_sklearn_checks(estimator, check):
    check(estimator)


# ----------------------------------------------------------------------------- a small recognition store


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """tiny-llama and tiny-qwen3 records of 9 items (float32), and the compacted tiny-llama group."""
    path = tmp_path_factory.mktemp("estimators") / "s.h5"
    cases = recognition_cases(3)
    llama = kvprobe.load_model("tiny-llama")
    for model in (llama, kvprobe.load_model("tiny-qwen3")):
        extract(model, "records", cases, path, dtype="float32", progress=False)
    extract(llama, "records", cases, path, dtype="float32", progress=False, edit=record_edit("compact"))
    with FeatureStore(path) as s:
        yield s


def role_splits(g) -> np.ndarray:
    """The records readouts' rows as split names: dev and test role pairs keep "dev"/"test", other dev and test
    cases get "dev-other"/"test-other", every train case stays "train" (probes train on all of them)."""
    split, variant = g.splits, g.cases()["variant"]
    role = np.isin(variant, evaluate.ROLE_VARIANTS)
    return np.where((split != "train") & ~role, np.char.add(split.astype(str), "-other"), split)


def test_estimators_reproduce_evaluate_records(store, monkeypatch):
    g = store["tiny-llama/records"]
    monkeypatch.setattr(evaluate, "PROBES", {k: evaluate.PROBES[k] for k in ("joint K/V probe", "joint hidden probe",
                                                                             "pairwise linear probe")})
    monkeypatch.setattr(evaluate, "SHUFFLES", 1)
    result = evaluate.evaluate_records(g, draws=100)
    held_out = np.isin(g.splits, ["dev", "test"])
    splits = role_splits(g)
    dev, split = {"select_split": "dev"}, {"train_split": "train", "select_split": "dev"}  # the records' own names
    readouts = {"fixed d_V": ValueDistance(sign=1, **dev), "sign-chosen d_V": ValueDistance(**dev),
                "head-chosen d_V": HeadValueDistance(**dev), "key similarity s_K": KeySimilarity(sign=1, **dev),
                "joint K/V probe": Probe("joint_kv", **split), "joint hidden probe": Probe("joint_hidden", **split),
                "pairwise linear probe": Probe("separate_kv", PairwiseProbe(kind="linear"), **split)}
    for name, readout in readouts.items():
        readout.fit(g, splits=splits)
        expected = np.asarray(result["case_scores"]["scores"][name])
        scores = readout.decision_function(g)[held_out]
        if isinstance(readout, Probe):
            assert np.array_equal(scores, expected), name
            assert readout.C_ == result["choices"][name]["C"]
        else:  # a fixed readout's decision is its signed score minus the threshold
            assert np.allclose(scores + readout.threshold_, expected, rtol=1e-12, atol=1e-12), name
        assert readout.auc(g, split="test", splits=splits) == result["role_auc"]["auc"][name]["auc"], name
        assert readout.auc(g, split=None) == pytest.approx(evaluate.auc(
            readout.decision_function(g), g.labels))
    head = readouts["head-chosen d_V"]
    assert {"layer": head.layer_, "head": head.head_, "sign": head.sign_} == result["choices"]["head-chosen d_V"]
    assert readouts["sign-chosen d_V"].sign_ == result["choices"]["sign-chosen d_V"]["sign"]


def test_any_split_names_and_arrays_give_the_same_readout(store):
    g = store["tiny-llama/records"]
    renamed = np.array([{"train": "fit", "dev": "pick", "test": "eval"}[s] for s in g.splits])
    probe = Probe(train_split="fit", select_split="pick").fit(g, splits=renamed)
    same = Probe(train_split="train", select_split="dev").fit(g)  # the group's own split names
    assert np.array_equal(probe.decision_function(g), same.decision_function(g))
    X, y = probe.inputs(g), g.labels
    on_arrays = Probe(train_split="fit", select_split="pick").fit(X, y, splits=renamed)
    assert np.array_equal(on_arrays.decision_function(X), probe.decision_function(g))
    assert on_arrays.auc(X, y, split="eval", splits=renamed) == probe.auc(g, split="test")
    with pytest.raises(ValueError, match=r"no rows of split 'fit' to train on \(the splits present: "
                                         r"\['dev', 'test', 'train'\]\)"):
        Probe(train_split="fit").fit(g)
    with pytest.raises(ValueError, match="no rows of split 'dev' to choose the sign on"):
        ValueDistance(select_split="dev").fit(g, splits=renamed)
    with pytest.raises(ValueError, match="one split name per row"):
        Probe().fit(X, y, splits=renamed[:5])


def test_transfer_scores_another_checkpoint_on_shared_draws(store):
    llama, qwen = store["tiny-llama/records"], store["tiny-qwen3/records"]
    probe = Probe(train_split="train", select_split="dev").fit(llama)
    r = transfer(probe, qwen, split="test", reference=llama, draws=200)
    assert r["target"] == "tiny-qwen3/records" and r["reference"] == "tiny-llama/records"
    test = qwen.splits == "test"
    assert r["n_cases"] == int(test.sum()) and np.array_equal(r["scores"], probe.decision_function(qwen))
    aucs = r["auc"]["auc"]
    assert aucs["transferred"]["auc"] == probe.auc(qwen, split="test")
    assert aucs["reference"]["auc"] == probe.auc(llama, split="test")
    assert r["auc"]["diff"]["reference"]["transferred"]["diff"] == pytest.approx(
        aucs["reference"]["auc"] - aucs["transferred"]["auc"])
    fixed = transfer(ValueDistance().fit(llama), qwen, split=None, draws=50)  # a fixed readout, every case
    assert fixed["n_cases"] == len(qwen) and set(fixed["auc"]["auc"]) == {"transferred"}
    with pytest.raises(StoreError, match="no cases of split 'eval'"):
        transfer(probe, qwen, split="eval")


def test_transfer_refuses_other_widths_and_other_records(store, tmp_path):
    g = store["tiny-llama/records"]
    probe = Probe().fit(g)
    pairs = [Pair(f"Room {i} is free.", f"Room {i} is now booked.", i % 2, split="test") for i in range(4)]
    with FeatureStore.create(tmp_path / "other.h5") as other:
        mla = other.add(kvprobe.load_model("tiny-deepseek-v2"), pairs, name="rooms")  # a latent K slot
        with pytest.raises(StoreError, match="fitted on 256 input columns; tiny-deepseek-v2/rooms gives"):
            transfer(probe, mla)
        llama_rooms = other.add(kvprobe.load_model("tiny-llama"), pairs, name="rooms")
        assert transfer(probe, llama_rooms, draws=50)["n_cases"] == 4  # other pairs, same widths
        with pytest.raises(StoreError, match="identical cases and token ids"):
            transfer(probe, llama_rooms, reference=g)


def test_edit_transfer_scores_the_edited_caches_with_a_fitted_readout(store):
    g, edited = store["tiny-llama/records"], store.edited("tiny-llama/records")
    probe = Probe(train_split="train", select_split="dev").fit(g)
    r = edit_transfer(g, edited, readout=probe, split="test", draws=200)
    assert r["edited_groups"] == {"compact": "tiny-llama/records@compact"} and r["edits"]["compact"]["action"] == \
        "re-rotated"
    assert r["auc"]["auc"]["original"]["auc"] == probe.auc(g, split="test")
    assert r["auc"]["auc"]["compact"]["auc"] == probe.auc(edited["compact"], split="test")
    assert r["change"]["compact"]["feature_change"] > 0
    recognition = edit_transfer(g, edited, draws=100)  # no readout: the records analysis, as before
    assert set(recognition["role_auc"]["auc"]) == {"original", "compact"}
    with pytest.raises(StoreError, match="holds B read after A only"):
        edit_transfer(g, edited, readout=ValueDistance().fit(g), draws=50)
    with pytest.raises(StoreError, match="no edited groups"):
        edit_transfer(g, {}, readout=probe)


def test_readouts_fit_any_group_on_every_row_by_default(store):
    """Issue 48 item 8: no built-in split name is assumed; a group with its own names fits on every row."""
    g = store["tiny-llama/records"]
    renamed = np.array([{"train": "fold-a", "dev": "fold-b", "test": "fold-c"}[s] for s in g.splits])
    every = np.full(len(g), "all")
    for readout in (ValueDistance(sign=1), ValueDistance(), KeySimilarity(), HeadValueDistance(),
                    Probe("joint_kv", C=1.0)):
        fitted = readout.fit(g, splits=renamed)
        again = type(readout)(**readout.get_params()).fit(g, splits=every)  # one split holding every row
        assert np.array_equal(fitted.decision_function(g), again.decision_function(g)), type(readout).__name__
    d_v = ValueDistance(sign=1).fit(g, splits=renamed)
    assert d_v.select_auc_ == pytest.approx(evaluate.auc(d_v.decision_function(g), g.labels))  # chosen on every row
    assert ValueDistance().get_params()["select_split"] is None
    assert Probe().get_params()["train_split"] is None and Probe().get_params()["select_split"] is None
    r = transfer(d_v, store["tiny-qwen3/records"], draws=20)  # every case unless a split is named
    assert r["split"] is None and r["n_cases"] == len(store["tiny-qwen3/records"])
