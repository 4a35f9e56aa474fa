"""The no-context (weights-only) baseline: the condition against a plain transformers forward of the
system + question chat, the conditional table on hand-made rows, and MQuAKE / quantity runs with it."""

from __future__ import annotations

import json

import numpy as np
import pytest

import kvprobe
from kvprobe import decoding
from kvprobe.prompts import SpanError
from kvprobe.readouts.stats import group_bootstrap_indices, percentile_interval
from kvprobe.reference import reference_generate, reference_score
from kvprobe.studies.common.no_context import NO_CONTEXT, NoContext, Outcome, conditional_on_baseline, conditional_table, \
    no_context_prompt
from kvprobe.studies.common.runner import run_study

pytestmark = pytest.mark.usefixtures("one_thread")

SEGMENTS = [("A", "Record A, Monday: the weekly planning meeting is held in Room 12."),
            ("B", "Record B, Friday: the weekly planning meeting moves to Room 18.")]
QUESTION = "Which room is the weekly planning meeting in now?"
CANDIDATES = ("Room 18", "Room 12")
SCORE_TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def llama() -> kvprobe.Model:
    return kvprobe.load_model("tiny-llama")


def _chat_ids(model: kvprobe.Model, system: str | None, question: str) -> list[int]:
    """The system + question chat, rendered by the tokenizer's template and tokenized in one piece."""
    messages = ([{"role": "system", "content": system}] if system is not None else []) + \
        [{"role": "user", "content": question}]
    text = model.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return model.tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("name,system", [("tiny-llama", "Answer from the records."), ("tiny-llama", None),
                                         ("tiny-gemma3", "Answer from the records."),
                                         ("tiny-qwen3.5", "Answer from the records.")])  # hybrid: recurrent states
def test_no_context_equals_a_plain_forward_of_the_question_alone(name, system):
    """Scores within 1e-4 and identical greedy tokens against an uncached transformers forward of the
    chat holding only the system message (or the template's default) and the question; batched beside
    full access and a mask on the history."""
    model = kvprobe.load_model(name)
    history = model.prefill(kvprobe.Prompt(SEGMENTS, system=system))
    conditions = {"full": kvprobe.Full(), "mask": kvprobe.Mask(history.span("A")), NO_CONTEXT: NoContext()}
    answers = decoding.answer(model, [(history, decoding.Request(QUESTION, c)) for c in conditions.values()],
                              [CANDIDATES] * 3, max_new_tokens=12)
    mine = answers[2]
    ids = _chat_ids(model, system, QUESTION)
    for candidate, score in zip(CANDIDATES, mine.scores.logprobs):
        want = reference_score(model, ids[:1], ids[1:], model.tokenizer(candidate, add_special_tokens=False)["input_ids"])
        assert abs(score - want) <= SCORE_TOLERANCE, (candidate, score, want)
    assert list(mine.generation.token_ids) == reference_generate(model, ids[:1], ids[1:], max_new_tokens=12)
    # It reads no history: its scores are not full access's, and its cache holds the framing only.
    assert abs(mine.scores.margin() - answers[0].scores.margin()) > 1e-3
    state = NoContext().prepare(model, history)
    framing = no_context_prompt(history, model.tokenizer).history_text
    assert state.length == len(model.tokenizer(framing, add_special_tokens=False)["input_ids"]) < len(history)
    assert (state.slot_of == -1).all() and history.check_digest()


def test_raw_prompts_keep_only_special_tokens_and_refuse_an_empty_framing(llama):
    """A raw prompt's framing is the tokenizer's special tokens (BOS) and its question suffix is the
    history's own; the tiny tokenizer adds none, so the condition refuses rather than start at the question."""
    raw = llama.prefill(kvprobe.Prompt(SEGMENTS, chat=False))
    framing = no_context_prompt(raw, llama.tokenizer)
    assert (framing.history_text, framing.add_special_tokens) == ("", True)
    assert framing.suffix(QUESTION) == raw.rendered.suffix(QUESTION)
    with pytest.raises(SpanError, match="no token"):
        NoContext().prepare(llama, raw)


# --------------------------------------------------------------------------- the conditional table


def _rows() -> list[Outcome]:
    """Four cases; the baseline answers c3 correctly, so the subset is c0-c2."""
    table = {"no-context": [0, 0, 0, 1], "full": [1, 1, 0, 1], "source-mask": [1, 0, 0, 1], "recompute": [0, 0, 0, 0]}
    rows = [Outcome(f"c{i}", "historical", cond, bool(v)) for cond, vs in table.items() for i, v in enumerate(vs)]
    rows.append(Outcome("c0", "current", "full", True))  # another query: ignored
    return rows


def test_conditional_counts_on_the_no_context_wrong_subset():
    t = conditional_on_baseline(_rows(), "historical", seed=3, draws=2000, reference="source-mask",
                                order=("full", "source-mask", "recompute"))
    assert (t["units"], t["subset"], t["baseline_correct"]) == (4, 3, 1)
    got = {c["condition"]: (c["correct"], c["n"]) for c in t["conditions"]}
    assert got == {"full": (2, 3), "source-mask": (1, 3), "recompute": (0, 3)}
    full, source, recompute = t["conditions"]
    assert full["rate"] == pytest.approx(2 / 3) and full["change_vs_reference"]["change"] == pytest.approx(1 / 3)
    assert "change_vs_reference" not in source and recompute["ci"] == [0.0, 0.0]
    # The interval, recomputed from the same draws case by case (every case its own group).
    boot = group_bootstrap_indices([f"c{i}" for i in range(4)], n_draws=2000, seed=3)
    full_ok, subset = np.array([1, 1, 0, 1]), np.array([1, 1, 1, 0])
    rates = [full_ok[d][subset[d] == 1].mean() for d in boot if subset[d].any()]
    assert full["ci"] == pytest.approx(percentile_interval(rates))
    lines = conditional_table(t, {"full": "84.7-97.4"})
    assert lines[0].startswith("No-context-wrong subset: 3 of 4 historical questions")
    assert lines[2] == "| condition | correct / subset | rate % [95% CI] | change vs source-mask (pp) [95% CI] | paper |"
    assert lines[4].startswith("| full | 2 / 3 | 66.7 [") and lines[4].endswith("| 84.7-97.4 |")
    assert lines[5] == f"| source-mask | 1 / 3 | 33.3 [{100 * source['ci'][0]:.1f}, {100 * source['ci'][1]:.1f}] |  |  |"


def test_units_of_one_group_are_drawn_together():
    rows = [Outcome(("c0", q), "current", cond, ok, "c0") for q in range(3) for cond, ok in
            (("no-context", False), ("full", True))]
    rows += [Outcome(("c1", q), "current", cond, ok, "c1") for q in range(3) for cond, ok in
             (("no-context", False), ("full", False))]
    t = conditional_on_baseline(rows, "current", seed=0, draws=500)
    assert (t["units"], t["groups"], t["subset_groups"]) == (6, 2, 2)
    # Whole groups: every draw's rate is 0, 1/2 or 1 (never 1/3 or 2/3, as drawing paraphrases alone would give).
    assert t["conditions"][0]["rate"] == 0.5 and set(t["conditions"][0]["ci"]) <= {0.0, 0.5, 1.0}
    assert conditional_on_baseline(rows, "historical", seed=0) is None


# --------------------------------------------------------------------------- the studies


def test_mquake_with_no_context_runs_and_reports(llama, tmp_path):
    from kvprobe.studies.mquake.strings import NO_CONTEXT_ANCHORS
    from kvprobe.studies.mquake.study import CONDITIONS, MQuAKEStudy
    from kvprobe.studies.common.summary import write_summary

    study = MQuAKEStudy(hops=(2,), n_per_hop=2, max_new_tokens=3, no_context=True)
    assert study.config()["policies"] == [*CONDITIONS, NO_CONTEXT]
    run_study(study, llama, tmp_path, progress=False)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 5 * (len(CONDITIONS) + 1)
    assert sum(r["condition"] == NO_CONTEXT for r in rows) == 2 * 5
    summary = write_summary("mquake", tmp_path, seed=1)
    tables = {(t["rule"], t["query"]): t for t in summary["no_context"]}
    assert set(tables) == {(r, q) for r in ("em", "contains") for q in ("historical", "current")}
    hist = tables[("em", "historical")]
    wrong = {r["case_id"] for r in rows if r["query"] == "historical" and r["condition"] == NO_CONTEXT and not r["em"]}
    assert hist["subset"] == len(wrong) and tables[("em", "current")]["units"] == 6
    full = next(c for c in hist["conditions"] if c["condition"] == "full")
    assert full["correct"] == sum(r["em"] for r in rows if r["query"] == "historical" and r["condition"] == "full"
                                  and r["case_id"] in wrong)
    report = (tmp_path / "report.md").read_text()
    assert "| no-context |" in report and "the paper's table" in report
    assert all(f"| {v} |" in report for v in NO_CONTEXT_ANCHORS.values())
    assert "generated fictional facts" in report


def test_mquake_config_without_the_field_summarizes_as_before(llama, tmp_path):
    from kvprobe.studies.mquake.study import MQuAKEStudy
    from kvprobe.studies.common.summary import write_summary

    run_study(MQuAKEStudy(hops=(2,), n_per_hop=1, max_new_tokens=2), llama, tmp_path, progress=False)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["study_config"]["no_context"]  # as every run before the field was written
    (tmp_path / "config.json").write_text(json.dumps(config))
    summary = write_summary("mquake", tmp_path)
    assert "no_context" not in summary and "No-context" not in (tmp_path / "report.md").read_text()


def test_quantity_with_no_context_runs_and_reports(llama, tmp_path):
    from kvprobe.studies.quantity.study import QuantityStudy
    from kvprobe.studies.common.summary import write_summary

    run_study(QuantityStudy(n_groups=1, max_new_tokens=3, operations=False, no_context=True), llama, tmp_path,
              progress=False)
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2 * 3 * 6 and {r["condition"] for r in rows} >= {NO_CONTEXT, "source"}
    summary = write_summary("quantity", tmp_path)
    complete, lenient = summary["no_context"]
    assert (complete["rule"], lenient["rule"], complete["query"]) == ("complete", "lenient_complete", "historical")
    wrong = sum(not r["complete"] for r in rows if r["query"] == "historical" and r["condition"] == NO_CONTEXT)
    assert complete["subset"] == wrong and complete["units"] == 2
    assert "## No-context baseline: historical query" in (tmp_path / "report.md").read_text()


def test_no_context_flag():
    from kvprobe.cli import build_parser
    from kvprobe.studies.commands import study_from_args as _study_from_args
    from kvprobe.studies.registry import entry

    for name in ("mquake", "quantity"):
        args = build_parser(["run", name]).parse_args(["run", name, "--no-context"])
        assert _study_from_args(entry(name), args).no_context is True
