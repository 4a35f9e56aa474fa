"""Natural-text detection against masking outcomes, complete (paper app:natural_join, app:v39_natural_action,
app:v17_sources; seed L2941-3352; spec partB sections 5-6).

Inputs: a detection run with ``oaks`` rows (the asserted-value detector plain and with the question) and one
or more matched-scores ``oaks`` runs (one per generator: full access and the old-source mask on the same
questions, joined by event id). Per generator and question ``e`` the utility of masking is
``U_e = 1{masked answer correct} - 1{full answer correct}`` under one correctness rule (seed L3047-3048).

* :func:`equal_coverage_excess`: the masks applied to the questions a detector selects against a random
  selection of as many questions (tab:v39_natural_action, tab:v18_binary_selection): selected ``k`` of ``N``,
  ``net = sum of U over the selected``, random ``= (k / N) * sum U`` and the excess ``100 (net - random) / N``
  percentage points, with a paired 95 % interval resampling questions within their books (each draw keeps the
  detector's decisions of the drawn questions, so ``k`` is the draw's selected count).
* :func:`natural_curves`: expected net corrections at 10 % coverage steps
  (:func:`kvprobe.studies.common.detectors.coverage.coverage_curve`) when ranking by a binary detector (two tie
  groups, averaged within ties), by the reference-dependent margin change ``Delta m = m(mask) - m(full)``
  (``m = log p(current) - log p(old)``, the paper's "measured score change" that needs the reference answers
  and extra masked computation; retrospective only) and by the full-access margin (lowest first, a
  reference-dependent ranking without the masked pass), against uniform selection (fig:v18_natural_utility).
* :func:`relation_outcomes`: full / masked correct, corrections and reversals per source-relation class (the
  attribute-change judgment, tab:v18_slot_outcomes, with its unambiguous subset; the four-class rubric,
  tab:v17_source) and how many of each class every detector selects.
* :func:`leave_one_out`: point estimates after omitting each question book (selection excess, margin
  ranking at 20 %) and, for detection accuracy, each question book and each negative donor book (seed
  L3030-3041; descriptive).

When the OAKS source carries no annotation (the generated demonstration set), :func:`placebo_labels` assigns
seeded random classes in the paper's proportions so the relation tables run on real outputs; reports label them
PLACEBO (any difference between classes is chance by construction).
"""

from __future__ import annotations

import json
import random
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence, TypedDict

import numpy as np

from kvprobe.readouts.stats import DRAWS, PAPER_SEED, group_bootstrap_weights, percentile_interval, weighted_sums
from kvprobe.studies.common.detectors.coverage import DEFAULT_COVERAGES, coverage_curve, coverage_k, expected_net
from kvprobe.studies.common.formatting import share
from kvprobe.studies.common.report import estimate, interval, model_name, table_head, table_row
from kvprobe.studies.common.runner import CONFIG, read_rows
from kvprobe.studies.datasets.oaks import ATTRIBUTE_CHANGE, DEMONSTRATION, RUBRIC
from .natural import NATURAL_DETECTORS, WITH_QUESTION
from .natural_summary import fired

#: The coverage the paper quotes for the margin ranking (seed L3051-3053).
REFERENCE_COVERAGE = 0.2
#: Rankings of the coverage curves besides the detectors: name -> the row fields' score (higher = masked first).
MARGIN_RANKINGS = {"margin change (mask - full)": lambda c: c["margin_mask"] - c["margin_full"],
                   "full-access margin (lowest first)": lambda c: -c["margin_full"]}
#: The correctness rule reported beside the primary one (ours: the first candidate the answer mentions, for
#: models that never write the JSON answer).
SENSITIVITY_RULE = "lenient"
#: The asserted-value prompt's placeholder values (strings.ASSERTED_VALUE): an output that returns one of them copies
#: the schema instead of reading the records, and "value affirmed by A" != "value affirmed by B, or null" fires.
SCHEMA_PLACEHOLDERS = ('"value affirmed by A"', '"value affirmed by B, or null"')
#: Seed of the placebo labels of an unannotated source (20260922).
PLACEBO_SEED = 20260922
#: The paper's class counts the placebo labels copy (seed L2988-2989 and L3273-3275).
PAPER_ATTRIBUTE_CHANGE = {"change": 22, "compatible": 53, "insufficient": 41}
PAPER_RUBRIC = {"strict": 29, "progression": 32, "additive": 40, "insufficient": 15}

#: tab:v39_natural_action (seed L3230-3243): model -> {prompt: (selected, net, excess pp, lo, hi)}, generator =
#: detector, 116 questions.
PAPER_MATCHED = {
    "Qwen3-4B": {"asserted-value": (35, 9, 1.00, -2.50, 4.74), WITH_QUESTION: (71, 10, -5.10, -8.86, -1.43)},
    "Qwen3-8B": {"asserted-value": (59, 2, -0.47, -2.99, 2.00), WITH_QUESTION: (78, 3, -0.31, -2.90, 2.05)},
    "Qwen3-32B": {"asserted-value": (35, 2, 0.42, -2.07, 3.05), WITH_QUESTION: (74, 2, -1.03, -3.72, 1.52)},
    "Qwen3.8-27B": {"asserted-value": (17, 0, -1.14, -2.03, -0.45), WITH_QUESTION: (37, 1, -1.61, -3.40, 0.24)},
    "Gemma 4 26B-A4B": {"asserted-value": (16, 1, -0.21, -1.66, 1.63), WITH_QUESTION: (55, 2, -1.95, -5.08, 1.16)},
    "Gemma 4 31B": {"asserted-value": (40, 2, 1.13, -0.62, 3.18), WITH_QUESTION: (75, 3, 1.47, -0.56, 3.72)},
    "Llama-3.1-70B": {"asserted-value": (29, 1, -0.43, -1.96, 1.28), WITH_QUESTION: (71, 1, -2.30, -4.75, 0.01)}}
#: Margin ranking vs uniform selection at 20 % coverage, expected net corrections of 116 (seed L3051-3053).
PAPER_MARGIN_20 = {"Qwen3-4B": (18.2, 5.2), "Qwen3-8B": (7.0, 1.0), "Llama-3.2-3B": (10.0, 2.8)}


# ----------------------------------------------------------------------------- the join


def generator_cases(run_dir: str | Path, rules: Sequence[str]) -> dict[str, dict[str, Any]]:
    """A matched-scores ``oaks`` run per event: full / mask correctness under each of ``rules`` the rows have and
    both margins (None where a row has none); events missing an arm are left out."""
    by: dict[str, dict[str, dict[str, Any]]] = {}
    for r in read_rows(run_dir):
        if r.get("dataset") == "oaks" and r["condition"] in ("full", "mask"):
            by.setdefault(r["case_id"], {})[r["condition"]] = r
    out = {}
    for event, arms in by.items():
        if len(arms) == 2:
            full, mask = arms["full"], arms["mask"]
            out[event] = {"correct": {rule: (bool(full[rule]), bool(mask[rule])) for rule in rules
                                      if rule in full and rule in mask},
                          "margin_full": full.get("margin"), "margin_mask": mask.get("margin")}
    return out


def detection_cases(detection_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per positive question (in run order): its event, question, book, annotation columns and
    per detector whether it fires (``selected``)."""
    out: dict[str, dict[str, Any]] = {}
    for r in detection_rows:
        if r["dataset"] != "oaks" or r["relation"] != "positive":
            continue
        c = out.setdefault(r["event"], {"event": r["event"], "question": r["group"], "book": r["book"],
                                        "attribute_change": r.get("attribute_change"),
                                        "change_ambiguous": r.get("attribute_change_alternative") is not None,
                                        "ambiguous": r.get("attribute_change_alternative") is not None
                                        or r.get("description_alternative") is not None,
                                        "rubric": r.get("rubric"),
                                        "rubric_ambiguous": r.get("rubric_alternative") is not None,
                                        "selected": {}})
        c["selected"][r["detector"]] = fired(r)
    return list(out.values())


def placebo_labels(questions: Sequence[str], seed: int = PLACEBO_SEED) -> dict[str, dict[str, str]]:
    """Seeded random classes for unannotated questions, in the paper's proportions (largest remainder):
    ``{question: {"attribute_change": ..., "rubric": ...}}``. Questions are sorted first, so the labels do not
    depend on run order.

    Example: on 116 questions the counts are exactly 22 / 53 / 41 and 29 / 32 / 40 / 15.
    """
    qs = sorted(set(questions))
    rng = random.Random(seed)
    out: dict[str, dict[str, str]] = {q: {} for q in qs}
    for key, counts in (("attribute_change", PAPER_ATTRIBUTE_CHANGE), ("rubric", PAPER_RUBRIC)):
        total = sum(counts.values())
        exact = {k: len(qs) * v / total for k, v in counts.items()}
        n = {k: int(x) for k, x in exact.items()}
        for k in sorted(exact, key=lambda k: (-(exact[k] - n[k]), list(counts).index(k)))[:len(qs) - sum(n.values())]:
            n[k] += 1
        labels = [k for k in counts for _ in range(n[k])]
        rng.shuffle(labels)
        for q, label in zip(qs, labels):
            out[q][key] = label
    return out


# ----------------------------------------------------------------------------- estimators


def equal_coverage_excess(selected: Sequence[bool], utility: Sequence[float], groups: Sequence[Any],
                          strata: Sequence[Any] | None = None, n_draws: int = DRAWS,
                          seed: int = PAPER_SEED) -> dict[str, Any]:
    """Detector-selected masks against random selection of as many cases.

    ``k`` selected of ``N``; ``net`` = sum of ``utility`` over the selected; ``random = k / N * sum(utility)``
    (the expectation of masking ``k`` uniformly chosen cases); ``excess_pp = 100 (net - random) / N``. The
    95 % interval resamples whole ``groups`` (within ``strata``); each draw recomputes ``k``, ``N``, ``net``
    and ``random`` from the drawn cases with their own decisions (``ci``). ``ci_fixed_coverage``: the same
    draws with the coverage fixed at ``k / N`` and the detector's two tie groups averaged at the boundary
    (:func:`~kvprobe.studies.common.detectors.coverage.coverage_curve`), the paper's tie rule for curves.

    Example: selected ``[1, 1, 0, 0]``, utility ``[1, 0, 1, -1]``: net 1, random 2/4 * 1 = 0.5, excess
    +12.5 pp.
    """
    sel = np.asarray(selected, dtype=bool)
    u = np.asarray(utility, dtype=float)
    n, k = len(u), int(sel.sum())
    net, total = float(u[sel].sum()), float(u.sum())
    random_net = k / n * total if n else 0.0
    out: dict[str, Any] = {"n": n, "selected": k, "net": net, "total": total, "random": random_net,
                           "excess_pp": 100 * (net - random_net) / n if n else 0.0,
                           "corrections": int((sel & (u > 0)).sum()), "reversals": int((sel & (u < 0)).sum()),
                           "ci": None, "ci_fixed_coverage": None}
    if not n or not n_draws:
        return out
    w = group_bootstrap_weights(groups, n_draws=n_draws, seed=seed, strata=strata)
    nb = w.sum(axis=1).astype(float)
    kb = weighted_sums(w, sel.astype(float))
    netb = weighted_sums(w, np.where(sel, u, 0.0))
    totb = weighted_sums(w, u)
    out["ci"] = percentile_interval(100 * (netb - kb / nb * totb) / nb)
    fixed = coverage_curve(sel.astype(float), u, coverages=[k / n], groups=groups, strata=strata, n_draws=n_draws,
                           seed=seed)
    out["ci_fixed_coverage"] = [fixed["excess_lo"][0], fixed["excess_hi"][0]]
    return out


def side(ci: Sequence[float] | None) -> str:
    """Where a 95 % interval lies against 0: ``above 0``, ``below 0`` or ``includes 0`` (``-`` without one)."""
    if ci is None:
        return "-"
    return "above 0" if ci[0] > 0 else "below 0" if ci[1] < 0 else "includes 0"


def outcome_block(pairs: Sequence[tuple[bool, bool]]) -> dict[str, int]:
    """``n``, full correct, masked correct, corrections and reversals of (full, mask) correctness pairs.

    >>> outcome_block([(True, True), (False, True), (True, False)])
    {'n': 3, 'full_correct': 2, 'mask_correct': 2, 'corrections': 1, 'reversals': 1}
    """
    return {"n": len(pairs), "full_correct": sum(f for f, _ in pairs), "mask_correct": sum(m for _, m in pairs),
            "corrections": sum(m and not f for f, m in pairs), "reversals": sum(f and not m for f, m in pairs)}


def relation_outcomes(cases: list[dict[str, Any]], key: str, classes: Sequence[str], rule: str,
                      detectors: Sequence[str], keep: Callable[[dict[str, Any]], bool] = lambda c: True
                      ) -> list[dict[str, Any]]:
    """Per class of ``key`` (cases kept by ``keep``): the generator's outcomes and, per detector, how many of
    the class it selects and the outcomes of those it selects and misses."""
    out = []
    for cls in classes:
        rs = [c for c in cases if c[key] == cls and keep(c)]
        out.append({"class": cls, **outcome_block([c["correct"][rule] for c in rs]),
                    "detected": {d: {"n": sum(c["selected"][d] for c in rs),
                                     "selected": outcome_block([c["correct"][rule] for c in rs if c["selected"][d]]),
                                     "missed": outcome_block([c["correct"][rule] for c in rs
                                                              if not c["selected"][d]])}
                                 for d in detectors}})
    return out


def has_margins(cases: list[dict[str, Any]]) -> bool:
    """Whether every case has both margins (a generator run without candidate scores has none)."""
    return all(c["margin_full"] is not None and c["margin_mask"] is not None for c in cases)


def _point_estimates(cases: list[dict[str, Any]], rule: str, detectors: Sequence[str]) -> dict[str, float]:
    """The leave-one-out quantities of one set of cases: excess per detector, margin-ranking net and uniform
    net at 20 % coverage."""
    u = [c["utility"][rule] for c in cases]
    out = {f"excess {d}": equal_coverage_excess([c["selected"][d] for c in cases], u, [c["question"] for c in cases],
                                                n_draws=0)["excess_pp"] for d in detectors}
    k = int(coverage_k(REFERENCE_COVERAGE, len(cases)))
    for name, score in MARGIN_RANKINGS.items():
        if has_margins(cases):
            out[f"net@20% {name}"] = expected_net([score(c) for c in cases], u, k) if cases else 0.0
    out["net@20% uniform"] = k / len(cases) * sum(u) if cases else 0.0
    return out


def leave_one_out(cases: list[dict[str, Any]], rule: str, detectors: Sequence[str]) -> dict[str, Any]:
    """Point estimates on all cases and after omitting each question book (descriptive; no intervals):
    ``{"all": {...}, "omitted": {book: {...}}, "range": {quantity: [min, max] over omissions}}``."""
    books = list(dict.fromkeys(c["book"] for c in cases))
    omitted = {b: _point_estimates([c for c in cases if c["book"] != b], rule, detectors) for b in books}
    names = list(_point_estimates(cases, rule, detectors))
    return {"all": _point_estimates(cases, rule, detectors), "omitted": omitted,
            "range": {q: [min(o[q] for o in omitted.values()), max(o[q] for o in omitted.values())] for q in names}
            if omitted else {}}


def schema_echoes(rows: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per detector: oaks rows whose output returns a placeholder value of the prompt's schema
    (:data:`SCHEMA_PLACEHOLDERS`), and how many of those fire, by pair relation."""
    out: dict[str, dict[str, int]] = {}
    for r in rows:
        if r["dataset"] == "oaks" and any(p in (r.get("output") or "") for p in SCHEMA_PLACEHOLDERS):
            cell = out.setdefault(r["detector"], {"rows": 0, "fired": 0})
            cell["rows"] += 1
            cell["fired"] += fired(r)
    return {d: out[d] for d in NATURAL_DETECTORS if d in out}


def detection_leave_one_out(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Detection accuracy (all three pairs of every question) per detector on all pairs, after omitting each
    question book (its questions' three pairs) and after omitting each negative donor book (the different-book
    negatives whose later source comes from it); descriptive (seed L3036-3039)."""
    oaks_rows = [r for r in rows if r["dataset"] == "oaks"]
    book_of = {r["event"]: r["book"] for r in oaks_rows}

    def accuracy(rs: list[dict[str, Any]]) -> float | None:
        return sum(fired(r) == bool(r["label"]) for r in rs) / len(rs) if rs else None

    out: dict[str, Any] = {}
    for d in NATURAL_DETECTORS:
        rs = [r for r in oaks_rows if r["detector"] == d]
        if not rs:
            continue
        books = list(dict.fromkeys(r["book"] for r in rs))
        by_book = {b: accuracy([r for r in rs if r["book"] != b]) for b in books}
        by_donor = {b: accuracy([r for r in rs if not (r["relation"] == "other_book" and book_of[r["donor"]] == b)])
                    for b in books}
        out[d] = {"all": accuracy(rs), "omit_book": by_book, "omit_donor_book": by_donor,
                  "range_book": [min(by_book.values()), max(by_book.values())],
                  "range_donor_book": [min(by_donor.values()), max(by_donor.values())]}
    return out


# ----------------------------------------------------------------------------- the analysis


def _generator_name(run_dir: str | Path) -> str:
    config = Path(run_dir) / CONFIG
    return model_name(json.loads(config.read_text())) if config.is_file() else str(run_dir)


class GeneratorAction(TypedDict):
    """One generator run (a matched-scores ``oaks`` run) joined with the detections: whether the detector is that
    model, the questions joined and those the run lacks, and per answer rule the analysis (outcomes, excess at
    equal coverage, coverage curves, leave-one-book-out, the attribute-change and rubric strata)."""

    generator: str
    run: str
    matched: bool
    n: int
    unmatched: int
    rules: dict[str, dict[str, Any]]


class NaturalAction(TypedDict):
    """:func:`natural_action`: a detection summary's ``natural_action``."""

    detector_model: str
    #: The join rule and the rules analysed (it and the sensitivity rule).
    rule: str
    rules: list[str]
    #: The generator run folders as given, the questions and books joined, the labels' kind (``placebo``,
    #: ``annotation`` or None).
    sources: list[str]
    questions: int
    books: int
    labels: str | None
    seed: int
    draws: int
    detection_leave_one_out: dict[str, Any]
    schema_echoes: dict[str, Any]
    generators: list[GeneratorAction]


def natural_action(detection_run_dir: str | Path, matched_scores_oaks_run_dirs: Sequence[str | Path],
                   rule: str = "complete", seed: int = PAPER_SEED, draws: int = DRAWS) -> NaturalAction:
    """The complete natural-text analysis (module docstring) of one detection run against each generator run.

    Example: ``natural_action("runs/det", ["runs/gen"])["generators"][0]["rules"]["complete"]["excess"]
    ["asserted-value"]["excess_pp"]``.
    """
    det_dir = Path(detection_run_dir)
    config = json.loads((det_dir / CONFIG).read_text())
    detector_model = model_name(config)
    source = config.get("study_config", {}).get("oaks_source")
    rows = list(read_rows(det_dir))
    questions = detection_cases(rows)
    detectors = [d for d in NATURAL_DETECTORS if questions and d in questions[0]["selected"]]
    annotated = any(c["attribute_change"] is not None for c in questions)
    placebo = not annotated and source == DEMONSTRATION
    if placebo:
        labels = placebo_labels([c["question"] for c in questions])
        questions = [{**c, **labels[c["question"]]} for c in questions]
    rules = [rule] + ([SENSITIVITY_RULE] if rule != SENSITIVITY_RULE else [])
    out: dict[str, Any] = {"detector_model": detector_model, "rule": rule, "rules": rules,
                           "sources": [str(d) for d in matched_scores_oaks_run_dirs], "questions": len(questions),
                           "books": len({c["book"] for c in questions}), "labels": "placebo" if placebo else
                           "annotation" if annotated else None, "seed": seed, "draws": draws,
                           "detection_leave_one_out": detection_leave_one_out(rows),
                           "schema_echoes": schema_echoes(rows), "generators": []}
    for run_dir in matched_scores_oaks_run_dirs:
        gen = generator_cases(run_dir, rules)
        graded = [r for r in rules if all(r in e["correct"] for e in gen.values())]
        if rule not in graded:
            raise ValueError(f"{run_dir}: its rows have no {rule!r} column (the join rule)")
        cases = [{**c, **gen[c["event"]], "utility": {r: int(gen[c["event"]]["correct"][r][1])
                                                      - int(gen[c["event"]]["correct"][r][0]) for r in graded}}
                 for c in questions if c["event"] in gen]
        groups, strata = [c["question"] for c in cases], [c["book"] for c in cases]
        generator = _generator_name(run_dir)
        g: dict[str, Any] = {"generator": generator, "run": str(run_dir), "matched": generator == detector_model,
                             "n": len(cases), "unmatched": len(questions) - len(cases), "rules": {}}
        for r in graded:
            u = [c["utility"][r] for c in cases]
            rankings = {d: [float(c["selected"][d]) for c in cases] for d in detectors}
            if has_margins(cases):
                rankings.update({name: [score(c) for c in cases] for name, score in MARGIN_RANKINGS.items()})
            block: dict[str, Any] = {
                "outcomes": outcome_block([c["correct"][r] for c in cases]),
                "excess": {d: equal_coverage_excess([c["selected"][d] for c in cases], u, groups, strata, draws, seed)
                           for d in detectors},
                "curves": {name: coverage_curve(score, u, DEFAULT_COVERAGES, groups=groups, strata=strata,
                                                n_draws=draws, seed=seed) for name, score in rankings.items()}
                if cases else {},
                "leave_one_book_out": leave_one_out(cases, r, detectors) if cases else {}}
            if annotated or placebo:
                block["attribute_change"] = relation_outcomes(cases, "attribute_change", ATTRIBUTE_CHANGE, r,
                                                              detectors)
                block["rubric"] = relation_outcomes(cases, "rubric", RUBRIC, r, detectors)
                if annotated:
                    block["attribute_change_unambiguous"] = relation_outcomes(
                        cases, "attribute_change", ATTRIBUTE_CHANGE, r, detectors, lambda c: not c["ambiguous"])
                    block["rubric_unambiguous"] = relation_outcomes(cases, "rubric", RUBRIC, r, detectors,
                                                                    lambda c: not c["rubric_ambiguous"])
            g["rules"][r] = block
        out["generators"].append(g)
    return out


# ----------------------------------------------------------------------------- report


def _inputs(detector: str) -> str:
    return "Records + question" if detector == WITH_QUESTION else "Records"


#: This report's shares: no percent sign, fractional counts (``12.5 (1.5)``), the net with its sign.
_pc = partial(share, percent="", count_format="g")
_signed = partial(share, percent="", signed=True, count_format="g")


def _ranking(name: str) -> str:
    return f"detector: {_inputs(name)}" if name in NATURAL_DETECTORS else name


def _at(curve: dict[str, Any], coverage: float) -> int:
    return int(np.argmin(np.abs(np.asarray(curve["coverage"]) - coverage)))


def natural_action_report(na: dict[str, Any]) -> list[str]:
    """The report sections of :func:`natural_action`."""
    if not na or not na["generators"]:
        return []
    det = na["detector_model"]
    lines = ["## Detector selection against random selection at equal coverage", "",
             f"Detector: {det}. Per generator (a matched-scores oaks run: full access and the old-source mask on the "
             f"same questions), U = 1{{masked answer correct}} - 1{{full answer correct}}, rule `{na['rule']}` "
             f"(sensitivity: `{SENSITIVITY_RULE}`, ours). Selected: % (count) of the N positive questions; net: "
             "pp (signed count) of N; random: the expected net of masking as many questions chosen uniformly, "
             "(k/N) x sum U; excess = 100 (net - random) / N with a paired 95% interval "
             f"({na['draws']:,} draws of questions within their books, seed {na['seed']}; each draw keeps the "
             "detector's own decisions; beside it the interval with the coverage fixed at k/N, ties averaged). "
             "Matched: generator = detector (the paper's 14 comparisons are 7 checkpoints x 2 prompts).", "",
             *([f"Schema echoes: outputs that return the prompt's placeholder values ({SCHEMA_PLACEHOLDERS[0]} / "
                f"{SCHEMA_PLACEHOLDERS[1]}) instead of values read from the records, which the extraction rule counts "
                "as a replacement: " + "; ".join(f"{_inputs(d)} {v['rows']} of the pairs ({v['fired']} fire)"
                                                 for d, v in na["schema_echoes"].items()) + ".", ""]
               if na.get("schema_echoes") else []),
             *table_head(["generator", "matched", "rule", "inputs", "N", "selected", "C / R among selected",
                          "net", "random", "excess pp [95% CI]", "[CI, coverage fixed]", "interval"])]
    for g in na["generators"]:
        for r, block in g["rules"].items():
            for d, e in block["excess"].items():
                lines.append(table_row([g["generator"], "yes" if g["matched"] else "no", r, _inputs(d), e["n"],
                                        _pc(e["selected"], e["n"]), f"{e['corrections']} / {e['reversals']}",
                                        _signed(e["net"], e["n"]), f"{e['random'] + 0.0:+.2f}",
                                        estimate(e["excess_pp"], e["ci"], "+.2f") if e["ci"] else f"{e['excess_pp']:+.2f}",
                                        interval(e["ci_fixed_coverage"]),
                                        side(e["ci"]) if e["selected"] else "nothing selected"]))
    lines += ["", "The paper (tab:v39_natural_action, generator = detector, 116 OAKS questions, native budgets): "
              + "; ".join(f"{m} {'Records' if d == 'asserted-value' else 'Records + question'} {s}/116 selected, "
                          f"net {n:+d}, excess {x:+.2f} [{lo:+.2f}, {hi:+.2f}]"
                          for m, cells in PAPER_MATCHED.items() for d, (s, n, x, lo, hi) in cells.items())
              + ". None of the 14 intervals has a positive lower bound.", ""]
    lines += ["## Coverage curves: detector, reference-margin and uniform selection", "",
              "Expected net corrections (counts) when masking the top share of questions by each ranking, 10% steps; "
              "binary detectors are two tie groups, averaged uniformly within ties; 95% intervals resample questions "
              "within books and recompute the ranking and tie sizes. The margin rankings read the current and old "
              "reference answers (the margin change also the masked pass): retrospective, not available to a "
              "controller. Random: uniform selection at the same coverage.", ""]
    for g in na["generators"]:
        for r, block in g["rules"].items():
            if not block["curves"]:
                continue
            lines += [f"{g['generator']}, rule `{r}` ({g['n']} questions, sum U = "
                      f"{next(iter(block['curves'].values()))['total_utility']:+g}):", "",
                      *table_head(["ranking", *(f"{c:.0%}" for c in DEFAULT_COVERAGES)])]
            first = next(iter(block["curves"].values()))
            lines.append(table_row(["uniform", *(f"{x + 0.0:+.2f}" for x in first["random"])]))
            for name, cur in block["curves"].items():
                lines.append(table_row([_ranking(name), *(f"{x + 0.0:+.2f}" for x in cur["net"])]))
            lines.append("")
            at = _at(first, REFERENCE_COVERAGE)
            lines.append(f"At {REFERENCE_COVERAGE:.0%} coverage (k = {first['k'][at]}): " + "; ".join(
                f"{_ranking(name)} {cur['net'][at]:+.2f} {interval([cur['net_lo'][at], cur['net_hi'][at]])}, excess over "
                f"uniform {estimate(cur['excess_pp'][at], (cur['excess_lo'][at], cur['excess_hi'][at]), '+.1f')} pp"
                for name, cur in block["curves"].items()) + f"; uniform {first['random'][at] + 0.0:+.2f}.")
            lines.append("")
    lines += ["The paper at 20% coverage (seed L3051-3053), margin ranking vs uniform, expected net corrections of "
              "116: " + "; ".join(f"{m} {a} vs {b}" for m, (a, b) in PAPER_MARGIN_20.items()) + ".", ""]
    lines += _relation_lines(na)
    lines += _leave_one_out_lines(na)
    return lines


def _relation_lines(na: dict[str, Any]) -> list[str]:
    if not na["labels"]:
        return ["No question carries a source annotation, so outcomes by source relation and by the four-class "
                "rubric are not reported.", ""]
    note = ("PLACEBO labels: the generated demonstration set has no annotations, so every question gets a seeded "
            f"random class in the paper's proportions (seed {PLACEBO_SEED}; attribute change 22 / 53 / 41, rubric "
            "29 / 32 / 40 / 15 of 116). These tables run the paper's analysis on real outputs; any difference between "
            "classes is chance by construction." if na["labels"] == "placebo" else
            "Labels: the OAKS file's annotations.")
    lines = ["## Outcomes by source relation", "", note, ""]
    for title, key in (("Whether the queried attribute changes (tab:v18_slot_outcomes)", "attribute_change"),
                       ("Unambiguous in either judgment", "attribute_change_unambiguous"),
                       ("Four-class rubric (tab:v17_source)", "rubric"),
                       ("Four-class rubric, unambiguous", "rubric_unambiguous")):
        blocks = [(g, r, b[key]) for g in na["generators"] for r, b in g["rules"].items() if key in b]
        if not blocks:
            continue
        detectors = list(blocks[0][2][0]["detected"]) if blocks[0][2] else []
        lines += [f"{title}: % (count) of the class N; selected: questions of the class each detector selects.", "",
                  *table_head(["generator", "rule", "class", "N", "full correct", "masked correct", "corrections",
                               "reversals", *(f"selected ({_inputs(d)})" for d in detectors),
                               *(f"C / R selected ({_inputs(d)})" for d in detectors)])]
        for g, r, cells in blocks:
            for c in cells:
                n = c["n"]
                lines.append(table_row([g["generator"], r, c["class"], n, _pc(c["full_correct"], n),
                                        _pc(c["mask_correct"], n), _pc(c["corrections"], n), _pc(c["reversals"], n),
                                        *(_pc(c["detected"][d]["n"], n) for d in detectors),
                                        *(f"{c['detected'][d]['selected']['corrections']} / "
                                          f"{c['detected'][d]['selected']['reversals']}" for d in detectors)]))
        lines.append("")
    return lines + ["The paper (Qwen3-4B / Qwen3-8B / Llama-3.2-3B generators): attribute changes (22) corrections "
                    "2 / 1 / 1, reversals 0 / 0 / 2; compatible (53) 13 / 3 / 9 and 0 / 1 / 2; insufficient (41) "
                    "12 / 3 / 8 and 1 / 1 / 0. Strict replacements (29) corrections / reversals 4/0, 1/0, 2/1.", ""]


def _leave_one_out_lines(na: dict[str, Any]) -> list[str]:
    lines = ["## Leave-one-book-out sensitivity (descriptive)", "",
             "Point estimates on all questions and their range over omitting each question book (no intervals). "
             "Excess: pp over equal-coverage random selection; net@20%: expected net corrections (counts) at 20% "
             "coverage.", "", *table_head(["generator", "rule", "quantity", "all books", "range omitting one book",
                                           "book whose omission moves it most"])]
    for g in na["generators"]:
        for r, block in g["rules"].items():
            loo = block["leave_one_book_out"]
            for q, value in loo.get("all", {}).items():
                moved = max(loo["omitted"], key=lambda b: (abs(loo["omitted"][b][q] - value), b))
                still = loo["range"][q][0] == loo["range"][q][1] == value
                label = q.replace("excess asserted-value+question", "excess Records + question").replace(
                    "excess asserted-value", "excess Records")
                lines.append(table_row([g["generator"], r, label, f"{value:+.2f}",
                                        f"[{loo['range'][q][0]:+.2f}, {loo['range'][q][1]:+.2f}]",
                                        "-" if still else f"{moved} ({loo['omitted'][moved][q]:+.2f})"]))
    lines.append("")
    dl = na["detection_leave_one_out"]
    if dl:
        lines += ["Detection accuracy over all pairs (positives and both negatives), omitting each question book "
                  "or each donor book of the different-book negatives: " + "; ".join(
                      f"{_inputs(d)} {100 * v['all']:.1f}% (omitting a book {100 * v['range_book'][0]:.1f}-"
                      f"{100 * v['range_book'][1]:.1f}%, a donor book {100 * v['range_donor_book'][0]:.1f}-"
                      f"{100 * v['range_donor_book'][1]:.1f}%)" for d, v in dl.items()) + ".", ""]
    return lines

