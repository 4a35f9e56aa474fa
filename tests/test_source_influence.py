"""The role-matched source-influence study on tiny models: the paper's prompt bytes, segment encoding,
the control span, the 80/320 split, scores against an explicit-mask reference, and the criteria."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import kvprobe
from kvprobe.reference import reference_score
from kvprobe.studies.source_influence import paper, strings
from paper_text import PAPER
from kvprobe.studies.source_influence.data import generate_events
from kvprobe.studies.source_influence.study import FormattedEvent
from kvprobe.studies.source_influence.study import PromptFormatStudy, SourceInfluenceStudy, prompt_for, \
    question_text, source_spans
from kvprobe.studies.source_influence.summary import summarize

#: The paper's text (beside the checkout in development and CI; a user's clone has none: those tests skip).
SEED_TEXT = PAPER.read_text() if PAPER.exists() else ""
needs_paper = pytest.mark.skipif(not SEED_TEXT, reason="the paper text is not beside this checkout")

pytestmark = pytest.mark.usefixtures("one_thread")


def _latex(s: str) -> str:
    return s.replace("{", "\\{").replace("}", "\\}").replace("\n", "\\textbackslash n")


@needs_paper
@pytest.mark.parametrize("piece", [strings.EARLIER_SOURCE, strings.UNRELATED_SOURCE, strings.LATER_SOURCE,
                                   strings.QUESTION])
def test_prompt_pieces_are_the_papers_verbatim(piece):
    assert f"\\texttt{{{_latex(piece)}}}" in SEED_TEXT


def test_prompt_bytes_and_segment_encoding(llama):
    event = generate_events("development")[0]
    want = (f"Earlier source:\n{event.old}\nUnrelated source:\n{strings.NEUTRAL_SOURCE}\nLater source:\n"
            f"{event.later}\nQuestion: {event.query}\nAnswer:")
    tok = llama.tokenizer
    for encoding in ("segments", "whole"):
        h = llama.prefill(prompt_for(event, encoding))
        assert h.text + h.rendered.suffix(question_text(event)) == want
        pieces = [strings.EARLIER_SOURCE.format(old=event.old),
                  strings.UNRELATED_SOURCE.format(neutral=strings.NEUTRAL_SOURCE),
                  strings.LATER_SOURCE.format(later=event.later)]
        expected = ([t for p in pieces for t in tok(p, add_special_tokens=False)["input_ids"]]
                    if encoding == "segments" else tok(h.text, add_special_tokens=False)["input_ids"])
        assert h.input_ids.tolist() == expected  # no special tokens, each segment on its own (or whole)
        old, neutral = source_spans(h, event)
        assert h.token_text(old).strip() == event.old
        conds = SourceInfluenceStudy().conditions(llama, FormattedEvent(event, encoding), h)
        control = conds["control"].spans[0]
        assert len(control) == len(old) == conds["source"].n_tokens
        assert neutral.start == control.start and control.end <= neutral.end


def test_development_and_evaluation_events_are_disjoint_80_and_320():
    dev, ev = generate_events("development"), generate_events("evaluation")
    assert len(dev) == 80 and len(ev) == 320 and not {e.group for e in dev} & {e.group for e in ev}
    assert {e.group for e in dev} | {e.group for e in ev} == {e.group for e in generate_events("all")}
    per_pattern = {p: sum(e.pattern == p for e in ev) for p in {e.pattern for e in ev}}
    assert len(per_pattern) == 8 and set(per_pattern.values()) == {40}
    assert all(e.current != e.old_value for e in ev)  # Supersedes: the new value is current
    assert all(e.current == e.old_value for e in generate_events("evaluation", variant="duplicate"))


def test_scores_equal_an_explicit_mask_reference(llama, tmp_path):
    from kvprobe.studies.common.runner import read_rows, run_study

    study = SourceInfluenceStudy(split="development", n=2)
    run_study(study, llama, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    assert len(rows) == 2 * 3
    event = study.cases()[0].event
    h = llama.prefill(prompt_for(event))
    conds = study.conditions(llama, study.cases()[0], h)
    suffix = llama.tokenizer(h.rendered.suffix(question_text(event)), add_special_tokens=False)["input_ids"]
    for row in rows[:3]:
        hidden = None if row["condition"] == "full" else conds[row["condition"]].hidden_positions(len(h))
        for option, key in ((event.current, "lp_current"), (event.other, "lp_other")):
            cand = llama.tokenizer(" " + option, add_special_tokens=False)["input_ids"]
            ref = reference_score(llama, h.input_ids.tolist(), suffix, cand, hidden)
            assert row[key] == pytest.approx(ref, abs=1e-4), (row["condition"], key)


def _rows(margins: dict[str, list[float]], correct: dict[str, list[int]]) -> list[dict]:
    """Hand-built rows: 8 patterns x 4 events."""
    rows = []
    for i in range(32):
        for c in ("full", "source", "control"):
            rows.append({"case_id": f"g{i:02d}", "group": f"g{i:02d}", "pattern": f"p{i % 8}", "condition": c, "margin": margins[c][i],
                         "correct": bool(correct[c][i]), "old_choice": not correct[c][i]})
    return rows


def _summary(tmp_path, rows) -> dict:
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return summarize(tmp_path, draws=500)["formats"]["segments"]


def test_each_criterion_follows_its_interval(tmp_path):
    rng = np.random.default_rng(0)
    base = rng.normal(0, 0.1, 32)
    good = {"full": list(base), "control": list(base), "source": list(base + 1.0)}
    right = {c: [1] * 32 for c in ("full", "source", "control")}
    s = _summary(tmp_path, _rows(good, right))
    assert s["criteria"] == {"effect_interval_excludes_0": True, "l95_above_minus_3pp": True,
                             "favorable_strata": True} and s["passed"] == 3
    # (1) no margin change at all: the interval includes 0, and no pattern is positive
    flat = {**good, "source": list(base)}
    assert not _summary(tmp_path, _rows(flat, right))["criteria"]["effect_interval_excludes_0"]
    # (2) the control loses a quarter of the answers: L.95 far below -3 pp
    hurt = {**right, "control": [0 if i % 4 == 0 else 1 for i in range(32)]}
    s = _summary(tmp_path, _rows(good, hurt))
    assert not s["criteria"]["l95_above_minus_3pp"] and s["criteria"]["effect_interval_excludes_0"]
    # (3) three patterns with a negative change: 5 of 8 positive, the pooled interval still above 0
    mixed = {**good, "source": [b + (3.0 if i % 8 < 5 else -0.5) for i, b in enumerate(base)]}
    s = _summary(tmp_path, _rows(mixed, right))
    assert s["positive_patterns"] == 5 and not s["criteria"]["favorable_strata"]
    assert s["criteria"]["effect_interval_excludes_0"]


@needs_paper
def test_paper_rows_are_the_seed_text():
    table = SEED_TEXT.split("\\label{tab:v23_absolute_margins}", 1)[1].split("\\bottomrule", 1)[0]
    for name, (m_f, d_a, ci_a, d_n, ci_n, diff) in paper.DECOMPOSITION.items():
        line = next(l for l in table.splitlines() if l.startswith((name + " &", name + "$^{\\dagger}$ &")))
        cells = line.split(" & ", 1)[1]  # the model name holds digits too
        found = [float(x.replace("$-$", "-")) for x in re.findall(r"(?:\$-\$|\+)?\d+\.\d+", cells)]
        assert found == [m_f, d_a, *ci_a, d_n, *ci_n, diff], name
    assert paper.CONTROLLED["Gemma 4 31B"][-1] == -4.06 and len(paper.CONTROLLED) == 5


def test_bad_parameters_are_refused():
    from kvprobe.studies.common.protocol import InvalidParameter

    for kwargs, field in ((dict(split="test"), "split"), (dict(encoding="bytes"), "encoding"),
                          (dict(variant="other_entity"), "variant"), (dict(n=0), "n")):
        with pytest.raises(InvalidParameter, match=field):
            SourceInfluenceStudy(**kwargs)


def test_prompt_format_pairs_raw_and_native_on_the_same_events(llama, tmp_path):
    from kvprobe.studies.common.runner import read_rows, run_study
    from kvprobe.studies.common.summary import write_summary

    study = PromptFormatStudy(split="development", n=8)
    run_study(study, llama, tmp_path, progress=False)
    rows = list(read_rows(tmp_path))
    assert {r["format"] for r in rows} == {"raw", "native"} and len(rows) == 8 * 2 * 3
    event = study.cases()[0].event
    raw, native = (llama.prefill(prompt_for(event, f)) for f in ("raw", "native"))
    assert raw.input_ids.tolist() == llama.tokenizer(raw.text, add_special_tokens=False)["input_ids"]
    assert raw.text in native.text and native.text.index(raw.text) > 0  # wrapped in the user turn
    summary = write_summary("source-influence", tmp_path, seed=1)
    assert set(summary["formats"]) == {"raw", "native"}
    dm = {f: summary["formats"][f]["estimates"]["delta_m"]["value"] for f in ("raw", "native")}
    assert summary["native_minus_raw"]["delta_m"]["value"] == pytest.approx(dm["native"] - dm["raw"])
    assert "Native minus raw" in (tmp_path / "report.md").read_text()


def test_committed_panel_is_what_its_runs_recompute_to(tmp_path):
    """``artifacts/source-influence/panel``: the committed table equals the runs it names, recomputed."""
    from kvprobe.studies.source_influence.summary import write_panel

    root = Path(__file__).resolve().parents[1]
    committed = root / "artifacts" / "source-influence" / "panel"
    meta = json.loads((committed / "panel.json").read_text())
    runs = list(dict.fromkeys(r["run"] for r in meta["rows"]))
    write_panel([root / r for r in runs], tmp_path, seed=meta["seed"])
    assert (tmp_path / "panel.md").read_text() == (committed / "panel.md").read_text()
