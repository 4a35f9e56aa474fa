"""The native record-pair study (paper L2173-2190, L2312-2386; spec partB D2): the dataset's construction, the
estimator against a hand-computed case and a brute-force bootstrap, and a run on a tiny model."""

from __future__ import annotations

import numpy as np
import pytest

from kvprobe.readouts.fixed import char_distance, key_similarity, value_distance
from kvprobe.readouts.stats import auc, group_bootstrap_indices, macro_auc
from kvprobe.studies.native_pairs import data
from kvprobe.studies.native_pairs.summary import comparison_table, estimate

pytestmark = pytest.mark.usefixtures("one_thread")

PAIRS = ("A>Bc", "A>Br", "X>Bc", "X>Br")
LABELS = {"A>Bc": [("matching", 1), ("relation", 0)], "A>Br": [("matching", 1), ("relation", 1)],
          "X>Bc": [("matching", 0)], "X>Br": [("matching", 0)]}


def _rows(panel: str, stratum: str, components: int, scores: dict[str, tuple[float, ...]]) -> list[dict]:
    """``components`` identical components of one stratum; ``scores[pair]`` = (s_k, d_v, token_jaccard,
    char_distance)."""
    rows = []
    for c in range(components):
        case = f"{panel}-{stratum}-{c}"
        for pair in PAIRS:
            s_k, d_v, jac, char = scores[pair]
            rows.append({"case_id": case, "panel": panel, "stratum": stratum, "pair": f"{case}:{pair}",
                         "s_k": s_k, "d_v": d_v, "token_jaccard": jac, "char_distance": char,
                         "comparisons": [{"task": t, "label": y, "group": case} for t, y in LABELS[pair]]})
    return rows


#: Hand-computed case: within a stratum every component is the same, so every bootstrap draw has the same AUCs
#: and each bound equals its point estimate.
HAND = (
    # same alias: matching pos {0.9, 0.8} vs neg {0.8, 0.5}: (1 + 1 + 1/2 + 1) / 4 = 0.875; relation 1.0;
    # surfaces 1.0 (token Jaccard reversed).
    _rows("intrinsic", "same_alias", 2, {"A>Bc": (0.9, 0.2, 0.9, 0.1), "A>Br": (0.8, 0.4, 0.7, 0.3),
                                         "X>Bc": (0.8, 0.0, 0.0, 0.0), "X>Br": (0.5, 0.0, 0.0, 0.0)})
    # different alias: matching 0.875 again (a tie at 0.6); relation 1.0; surfaces tied: 0.5 either way.
    + _rows("intrinsic", "different_alias", 2, {"A>Bc": (0.7, 0.3, 0.6, 0.2), "A>Br": (0.6, 0.5, 0.6, 0.2),
                                               "X>Bc": (0.6, 0.0, 0.0, 0.0), "X>Br": (0.4, 0.0, 0.0, 0.0)})
    # history: matching 1.0 in both families; relation 1.0 (deadline) and 0.0 (location); surfaces 1.0.
    + _rows("history", "deadline", 2, {"A>Bc": (0.9, 0.1, 0.95, 0.05), "A>Br": (0.9, 0.3, 0.8, 0.2),
                                       "X>Bc": (0.3, 0.0, 0.0, 0.0), "X>Br": (0.3, 0.0, 0.0, 0.0)})
    + _rows("history", "location", 2, {"A>Bc": (0.9, 0.4, 0.95, 0.05), "A>Br": (0.9, 0.2, 0.8, 0.2),
                                       "X>Bc": (0.3, 0.0, 0.0, 0.0), "X>Br": (0.3, 0.0, 0.0, 0.0)})
)


def test_comparisons_share_their_pairs_score():
    table = comparison_table(HAND)
    assert len(HAND) == 32 and len(table["task"]) == 48  # 4 distinct pairs serve 6 comparisons per component
    first = table["pair"] == 0  # intrinsic-same_alias-0:A>Bc, a matching and a relation comparison
    assert list(table["task"][first]) == ["matching", "relation"] and list(table["label"][first]) == [1, 0]
    assert set(table["s_k"][first]) == {0.9} and set(table["d_v"][first]) == {0.2}


def test_estimator_on_the_hand_computed_case():
    out = estimate(comparison_table(HAND), draws=200, seed=3)
    p = out["panels"]
    assert p["intrinsic"]["matching"]["auc"] == pytest.approx(0.875)
    assert p["intrinsic"]["matching"]["by_stratum"]["different_alias"]["score"]["auc"] == pytest.approx(0.875)
    assert p["intrinsic"]["relation"]["auc"] == pytest.approx(1.0)
    sa = p["intrinsic"]["relation"]["surfaces"]
    assert sa["token_jaccard"] == {"auc": pytest.approx(0.75), "direction": -1}  # (1.0 + 0.5) / 2, reversed
    assert sa["char_distance"] == {"auc": pytest.approx(0.75), "direction": 1}
    assert p["intrinsic"]["relation"]["surface"] == "token_jaccard"  # a tie goes to the first surface
    assert p["history"]["relation"]["auc"] == pytest.approx(0.5) and p["history"]["matching"]["auc"] == 1.0
    assert p["intrinsic"]["relation"]["minus_surface"]["diff"] == pytest.approx(0.25)
    assert p["history"]["relation"]["minus_surface"]["diff"] == pytest.approx(-0.5)
    # Weaker panels and the smaller difference; every draw is the same, so the bounds are the points.
    assert out["weaker"]["matching"]["panel"] == "intrinsic"
    assert out["weaker"]["matching"]["lower"] == pytest.approx(0.875)
    assert out["weaker"]["relation"] == {"panel": "history", "auc": pytest.approx(0.5), "ci": pytest.approx([0.5, 0.5]),
                                         "lower": pytest.approx(0.5), "upper": pytest.approx(0.5)}
    assert out["min_delta"]["panel"] == "history" and out["min_delta"]["lower"] == pytest.approx(-0.5)
    assert out["criterion_met"] == {"matching": True, "relation": False, "surface_advantage": False}
    assert out["verdicts"] == {"matching": "replicates", "relation": "opposite",
                               "surface_advantage": "no effect found",  # a no-effect claim never replicates
                               "different_alias": "replicates"}  # d_V 1.0 [1.0, 1.0] within the stratum, above 0.5
    assert p["intrinsic"]["relation"]["by_stratum"]["different_alias"]["score"] == {
        "auc": pytest.approx(1.0), "ci": pytest.approx([1.0, 1.0])}
    assert out["dropped_draws"] == 0


def test_bounds_match_a_brute_force_bootstrap():
    """Random scores: every draw recomputed by repeating each drawn component's comparisons (plain macro AUCs)."""
    rng = np.random.default_rng(0)
    rows = []
    for panel, strata in (("intrinsic", ("same_alias", "different_alias")), ("history", ("a", "b", "c"))):
        for st in strata:
            rows += _rows(panel, st, 6, {p: (0.0,) * 4 for p in PAIRS})
    for r in rows:
        r.update(s_k=float(rng.integers(0, 5)), d_v=float(rng.integers(0, 5)), token_jaccard=float(rng.random()),
                 char_distance=float(rng.random()))
    table = comparison_table(rows)
    out = estimate(table, draws=40, seed=11)
    units = [f"{p}/{s}" for p, s in zip(table["panel"], table["stratum"])]
    boot = group_bootstrap_indices(table["component"], n_draws=40, seed=11, strata=units)
    surface = {p: out["panels"][p]["relation"]["surface"] for p in ("intrinsic", "history")}
    sign = {p: out["panels"][p]["relation"]["surfaces"][surface[p]]["direction"] for p in surface}
    match_min, delta_min = [], []
    for cases in boot:
        t = {k: v[cases] for k, v in table.items()}
        per = {}
        for p in surface:
            m = (t["panel"] == p) & (t["task"] == "matching")
            r = (t["panel"] == p) & (t["task"] == "relation")
            per[p] = (macro_auc(t["s_k"][m], t["label"][m], t["stratum"][m]),
                      macro_auc(t["d_v"][r], t["label"][r], t["stratum"][r])
                      - macro_auc(sign[p] * t[surface[p]][r], t["label"][r], t["stratum"][r]))
        match_min.append(min(per["intrinsic"][0], per["history"][0]))
        delta_min.append(min(per["intrinsic"][1], per["history"][1]))
    assert out["weaker"]["matching"]["lower"] == pytest.approx(np.percentile(match_min, 5))
    assert out["min_delta"]["lower"] == pytest.approx(np.percentile(delta_min, 5))
    assert out["min_delta"]["ci"] == pytest.approx(np.percentile(delta_min, [2.5, 97.5]))


def test_pairs_sharing_a_text_form_one_component_and_repeats_share_a_score():
    g1 = data.Group("g1", "intrinsic", "same_alias", "deadline", {"A": "a1", "X": "x1", "Bc": "c1", "Br": "r1"})
    g2 = data.Group("g2", "intrinsic", "same_alias", "deadline", {"A": "x1", "X": "x2", "Bc": "c2", "Br": "r2"})
    g3 = data.Group("g3", "intrinsic", "same_alias", "deadline", {"A": "a3", "X": "x3", "Bc": "c3", "Br": "r3"})
    g4 = data.Group("g4", "intrinsic", "same_alias", "deadline", {"A": "a3", "X": "x4", "Bc": "c3", "Br": "r4"})
    cases = data.build_cases([g1, g2, g3, g4])
    assert [c.case_id for c in cases] == ["g1", "g3"]  # g2 shares x1 with g1; g4 shares a3 and c3 with g3
    assert [len(c.pairs) for c in cases] == [8, 7]  # a3>c3 is one distinct pair of g3 and g4
    shared = next(p for p in cases[1].pairs if (p.a, p.b) == ("a3", "c3"))
    assert [(q.task, q.label, q.group) for q in shared.comparisons] == [
        ("matching", 1, "g3"), ("relation", 0, "g3"), ("matching", 1, "g4"), ("relation", 0, "g4")]
    assert data.counts(cases)["all"] == {"components": 2, "distinct_pairs": 15, "comparisons": 24,
                                         "matching_comparisons": 16, "relation_comparisons": 8}
    with pytest.raises(ValueError, match="several panels or strata"):
        data.build_cases([g1, data.Group("g5", "history", "deadline", "deadline",
                                         {"A": "a1", "X": "x5", "Bc": "c5", "Br": "r5"})])


def test_default_dataset_counts_and_labels():
    cases = data.generate_cases()
    c = data.counts(cases)
    assert (c["intrinsic"]["components"], c["history"]["components"]) == (216, 400)  # the paper's 216 and 400
    assert c["all"] == {"components": 616, "distinct_pairs": 2464, "comparisons": 3696,
                        "matching_comparisons": 2464, "relation_comparisons": 1232}
    assert {x.stratum for x in cases if x.panel == "history"} == set(data.controlled_histories.FAMILIES)
    for case in cases[:216:7] + cases[216::37]:
        texts = {p.pair_id.rsplit(":", 1)[1]: p for p in case.pairs}
        a, bc, br = texts["A>Bc"].a, texts["A>Bc"].b, texts["A>Br"].b
        assert texts["X>Bc"].b == bc and texts["X>Br"].b == br and texts["X>Bc"].a != a
        # Bc repeats A after the frame's marker, except under an alias; Br never does.
        assert (a.split(":", 1)[1] == bc.split(":", 1)[1]) == (case.stratum != "different_alias")
        assert a.split(":", 1)[1] != br.split(":", 1)[1]


def test_alias_strata_and_history_surfaces():
    """Character distance (tokenizer-free) separates same-alias replacements almost perfectly, cannot rank
    different-alias ones, and separates the history pairs perfectly in every family (the paper: 1.0, 0.5, 1.0)."""
    cases = data.generate_cases(intrinsic=30, history_per_family=6)
    found: dict[str, tuple[list, list]] = {}
    for case in cases:
        for p in case.pairs:
            for q in p.comparisons:
                if q.task == "relation":
                    y, d = found.setdefault(case.stratum, ([], []))
                    y.append(q.label)
                    d.append(char_distance(p.a, p.b))
    aucs = {s: auc(d, y) for s, (y, d) in found.items()}
    assert aucs["same_alias"] >= 0.95 and 0.35 <= aucs["different_alias"] <= 0.65, aucs
    assert all(aucs[f] == 1.0 for f in data.controlled_histories.FAMILIES), aucs
    different = [x for x in cases if x.stratum == "different_alias"]
    for case in different[:5]:
        (bc,) = {p.b for p in case.pairs if p.pair_id.endswith("A>Bc")}
        assert any(a.format(stem="", key="", name="").split()[-1] in bc for a in data.ALIASES.values())


def test_run_on_a_tiny_model(llama, tmp_path):
    from kvprobe.extract.capture import RecordSpec, encode
    from kvprobe.studies.common.runner import read_rows, run_study
    from kvprobe.studies.native_pairs.study import NativePairsStudy
    from kvprobe.studies.common.summary import write_summary

    study = NativePairsStudy(intrinsic_groups=2, history_per_family=1, draws=50, cases_per_batch=3)
    run_study(study, llama, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    assert len(rows) == 4 * len(study.cases()) == 36 and len({(r["a"], r["b"]) for r in rows}) == 36
    row = rows[5]
    a, b = encode(llama, [RecordSpec("single", row["a"]), RecordSpec("single", row["b"])], hidden_layers=())
    layers = llama.arch.kv_layers
    assert row["s_k"] == pytest.approx(key_similarity([a.keys[l] for l in layers], [b.keys[l] for l in layers]),
                                       abs=1e-5)
    assert row["d_v"] == pytest.approx(value_distance([a.values[l].double().mean(dim=1) for l in layers],
                                                      [b.values[l].double().mean(dim=1) for l in layers]), abs=1e-5)
    assert row["a_tokens"] == len(a.token_ids)
    summary = write_summary("native-pairs", tmp_path, seed=1)
    first = (tmp_path / "report.md").read_bytes()
    assert summary["counts"]["all"]["comparisons"] == 54 and summary["draws"] == 50
    assert write_summary("native-pairs", tmp_path, seed=1) == summary and (tmp_path / "report.md").read_bytes() == first


# ----------------------------------------------------------------------------- the different-alias claim (issue 46)


def _stratum_summary(auc_value: float, ci: list[float], counts: bool = True) -> dict:
    cell = {"score": {"auc": auc_value, "ci": ci}, "token_jaccard": {"auc": 0.646, "ci": [0.6, 0.69]},
            "char_distance": {"auc": 0.504, "ci": [0.45, 0.55]}}
    s = {"panels": {"intrinsic": {"relation": {"by_stratum": {"different_alias": cell, "same_alias": cell}}}}}
    if counts:
        s["counts"] = {"intrinsic": {"components": 216}}
    return s


@pytest.mark.parametrize("value, ci, expected", [
    (0.70, [0.62, 0.77], "replicates"),     # the paper's range, above its surface of 0.5
    (0.497, [0.449, 0.544], "inconclusive"),  # SmolLM2
    (0.436, [0.408, 0.460], "opposite"),      # Gemma 3: replacement ranked below alias confirmation
])
def test_the_different_alias_claim_reads_the_stratum_against_the_papers_surface(value, ci, expected):
    from kvprobe.studies.common.claims import judge
    from kvprobe.studies.native_pairs.claims import CLAIMS, different_alias_measurement

    claim = next(c for c in CLAIMS if c.key == "native-pairs.different-alias")
    m = different_alias_measurement(_stratum_summary(value, ci))
    assert (m.value, m.ci, m.null, m.units) == (value, tuple(ci), 0.5, 108)  # 216 components over two strata
    assert "token Jaccard 0.646" in m.note and "two-sided 95% CI" in m.note
    assert judge(claim, m) == expected
    assert different_alias_measurement(_stratum_summary(value, ci, counts=False)).units is None


def test_verdict_intervals_are_labelled_as_one_sided_bounds():
    """The matching/relation/surface rows read the 5th and 95th percentiles: their note says it is not a 95 % CI."""
    from kvprobe.studies.native_pairs.claims import native_pairs_measurement

    s = {"weaker": {"relation": {"panel": "intrinsic", "auc": 0.71, "lower": 0.687, "upper": 0.733}},
         "min_delta": {"panel": "intrinsic", "diff": -0.1, "lower": -0.13, "upper": -0.09}, "criterion": 0.6}
    for claim in ("relation", "surface"):
        assert "90% two-sided interval, not a 95% CI" in native_pairs_measurement(s, claim).note
