"""The note-control study: windows, matched occurrences, profiles, the varied note, the first-value margin,
a whole run on tiny-llama and its summary, and parameter validation."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import kvprobe
from kvprobe.prompts import TokenSpan
from kvprobe.reference import reference_logits
from kvprobe.studies.note_controls import anchors, strings
from kvprobe.studies.note_controls.configurations import CATALOG, CONFIGURATIONS, CURRENT, NAMES, PAPER_FOURTEEN
from kvprobe.studies.note_controls.first_token import FirstTokenError, first_token_candidates, label_candidates
from kvprobe.studies.note_controls.profiles import build_varied_note, check_varied, note_layout, profile_prompt
from kvprobe.studies.note_controls.study import NoteControlsStudy
from kvprobe.studies.note_controls.summary import RULES, _disagreement
from kvprobe.studies.common.summary import write_summary
from kvprobe.studies.note_controls.windows import FOUR, NoMatchedOccurrence, matched_occurrence, note_windows, \
    token_pieces
from kvprobe.studies.common.protocol import InvalidParameter
from kvprobe.studies.datasets.quantity_task import strings as task_strings
from kvprobe.studies.datasets.quantity_task import tasks
from kvprobe.studies.common.runner import read_rows, run_study
from kvprobe.tiny import tiny_tokenizer

pytestmark = pytest.mark.usefixtures("one_thread")

CASES = tasks.generate_cases(tasks.TaskConfig(n_groups=3))


@pytest.fixture(scope="session")
def smol_tokenizer():
    """SmolLM2's tokenizer, without loading its weights: from kvprobe's weight cache when a model load built
    it, else read from the GGUF itself (the tokenizer the cache saves), so the tests that use it run in any
    order. Skipped only when SmolLM2-135M-Instruct is not installed at all."""
    from transformers import AutoTokenizer

    from kvprobe.model_registry import REGISTRY
    from kvprobe.weight_files import cache_dir, file_sha256

    entry = REGISTRY.get("smollm2-135m-instruct")
    if entry is None or not entry.installed():
        pytest.skip("SmolLM2-135M-Instruct is not installed")
    gguf = entry.assemble(quiet=True)
    folder = cache_dir() / "weights" / file_sha256(gguf)
    if (folder / "tokenizer.json").is_file():
        return AutoTokenizer.from_pretrained(str(folder))
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def _tokenizers(smol_tokenizer=None):
    return [tiny_tokenizer()] + ([smol_tokenizer] if smol_tokenizer is not None else [])


def _layout(tokenizer, case, profile="original"):
    prompt = profile_prompt(case, profile)
    rendered, ids, offsets = prompt.tokenize(tokenizer)
    a = kvprobe.prompts.char_span_to_tokens(offsets, rendered.history_text, *rendered.segments["A"])
    return ids.tolist(), token_pieces(rendered.history_text, offsets), note_layout(tokenizer, prompt).note, len(a)


def _task_case(row) -> tasks.Case:
    """The quantity-task case of a row (its case id without the profile)."""
    return next(x for x in CASES if x.case_id == row["case_id"].rsplit("/", 1)[0])


def _brute_matched(ids, note, n):
    """Independent reference: every n-token window's starts, by content; the first start with a later start
    at least n further, and the last such start."""
    seq = tuple(ids[note.start:note.end])
    starts: dict[tuple, list[int]] = {}
    for i in range(len(seq) - n + 1):
        starts.setdefault(seq[i:i + n], []).append(i)
    for i in range(len(seq) - n + 1):
        later = [j for j in starts[seq[i:i + n]] if j >= i + n]
        if later:
            return note.start + i, note.start + max(later)
    return None


# --------------------------------------------------------------------------- windows


@pytest.mark.parametrize("which", ["tiny", "smol"])
def test_windows_have_their_sizes_and_lie_inside_the_note(which, request):
    tokenizer = tiny_tokenizer() if which == "tiny" else request.getfixturevalue("smol_tokenizer")
    for case in CASES[:2]:
        ids, pieces, note, n = _layout(tokenizer, case)
        w = note_windows(ids, pieces, note, n, middle=0.5, late=1.0)
        for name, span in w.items():
            assert note.start <= span.start < span.end <= note.end, (name, span, note)
        for name in ("early", "middle", "late", "near", "far", "preserve-first-four"):
            assert len(w[name]) == n, name
        assert (len(w["first-four"]), len(w["last-four"]), len(w["all-note"])) == (FOUR, FOUR, len(note))
        assert w["early"].start == note.start and w["late"].end == note.end
        assert w["preserve-first-four"].start == w["early"].start + FOUR
        assert w["middle"].start - note.start == round((len(note) - n) / 2)
        # Through the sentence end: the early window plus the tokens up to and including the next period.
        extra = pieces[w["early"].end:w["sentence-end"].end]
        assert w["sentence-end"].start == w["early"].start and "." in extra[-1]
        assert not any("." in p for p in extra[:-1])


def test_smollm2_windows_are_the_papers_offsets_in_its_own_tokens(smol_tokenizer):
    """SmolLM2 tokenizes record A to 35 tokens and the note to 126 (6 x 21); the matched copies are 84 apart,
    as the paper's Llama copies are ([1,32) and [85,116) there)."""
    ids, pieces, note, n = _layout(smol_tokenizer, CASES[0])
    w = note_windows(ids, pieces, note, n)
    offsets = {k: (s.start - note.start, s.end - note.start) for k, s in w.items()}
    assert (n, len(note)) == (35, 126)
    assert offsets["near"] == (1, 36) and offsets["far"] == (85, 120)
    assert offsets["sentence-end"] == (0, 42)


def test_early_window_is_the_quantity_studys_matched_control(llama):
    case = CASES[0]
    history = llama.prefill(profile_prompt(case, "original"))
    control = kvprobe.matched_control(history, kvprobe.Mask(history.span("A")), "note")
    w = note_windows(history.input_ids.tolist(), token_pieces(history.text, history.offsets), history.span("note"),
                     len(history.span("A")))
    assert control.spans == (w["early"],)


@pytest.mark.parametrize("which", ["tiny", "smol"])
def test_matched_windows_hold_identical_ids_and_far_is_the_last_copy(which, request):
    tokenizer = tiny_tokenizer() if which == "tiny" else request.getfixturevalue("smol_tokenizer")
    ids, _, note, n = _layout(tokenizer, CASES[0])
    near, far = matched_occurrence(ids, note, n)
    assert ids[near.start:near.end] == ids[far.start:far.end] and far.start >= near.end
    assert (near.start, far.start) == _brute_matched(ids, note, n)
    assert not any(ids[j:j + n] == ids[near.start:near.end] for j in range(far.start + 1, note.end - n + 1))


def test_matched_occurrence_on_a_known_sequence():
    ids = [7, 9, 1, 2, 3, 1, 2, 3, 4, 1, 2, 3, 8]
    note = TokenSpan(1, 13)
    near, far = matched_occurrence(ids, note, 3)
    assert (near.start, near.end, far.start, far.end) == (2, 5, 9, 12)
    with pytest.raises(NoMatchedOccurrence):
        matched_occurrence([5, 1, 2, 3, 4, 5, 6], TokenSpan(0, 7), 2)
    with pytest.raises(NoMatchedOccurrence):  # copies that overlap the window do not count
        matched_occurrence([1, 1, 1, 1], TokenSpan(0, 4), 3)


# --------------------------------------------------------------------------- profiles


def test_profiles_differ_from_the_original_exactly_where_they_should():
    tok = tiny_tokenizer()
    case = CASES[0]
    text = {p: profile_prompt(case, p, varied_note="Quiet room.").render(tok).history_text
            for p in ("original", "plain", "no-unknown", "no-note", "varied")}
    assert profile_prompt(case, "original") == tasks.build_prompt(case)
    assert text["original"].count("gray") == task_strings.NOTE_REPETITIONS
    assert text["plain"] == text["original"].replace("gray", "plain")
    clause = " " + strings.UNKNOWN_CLAUSE
    assert text["original"].count(clause) == 1 and "UNKNOWN" not in text["no-unknown"]
    assert text["no-unknown"] == text["original"].replace(clause, "")
    note = tasks.segment_texts(case)["note"]
    assert text["no-note"] == text["original"].replace(note + "\n\n", "")
    assert text["varied"] == text["original"].replace(note, "Quiet room.")


@pytest.mark.parametrize("which", ["tiny", "smol"])
def test_varied_note_has_the_repeated_notes_token_count_and_every_outside_token(which, request):
    tokenizer = tiny_tokenizer() if which == "tiny" else request.getfixturevalue("smol_tokenizer")
    varied = build_varied_note(tokenizer, CASES[0])
    for case in CASES:
        original = note_layout(tokenizer, profile_prompt(case, "original"))
        mine = check_varied(tokenizer, case, varied.text)
        assert len(mine.note) == len(original.note) == varied.n_tokens
        assert mine.ids[:mine.note.start] == original.ids[:original.note.start]
        assert mine.ids[mine.note.end:] == original.ids[original.note.end:]
        assert mine.ids[mine.note.start:mine.note.end] != original.ids[original.note.start:original.note.end]
    parts = [*varied.sentences, *varied.fillers]
    assert len(set(parts)) == len(parts) >= 8 and " ".join(parts) == varied.text
    lowered = varied.text.lower()
    assert not any(c in lowered for c in (*tasks.COLORS, "gray", "label", "inspection", "envelope", "record"))


def test_varied_note_refuses_a_count_it_cannot_reach():
    from kvprobe.studies.note_controls.profiles import VariedNoteError

    with pytest.raises(VariedNoteError):
        build_varied_note(tiny_tokenizer(), CASES[0], sentences=("A cup.",), fillers=("Tea.",))


# --------------------------------------------------------------------------- first-value margin


def test_first_token_candidates_end_with_the_first_value_token():
    tok = tiny_tokenizer()
    right, unknown = label_candidates(tok, "amber")
    head = tok(strings.ANSWER_PREFIX, add_special_tokens=False)["input_ids"]
    for cand, value in ((right, "amber"), (unknown, "UNKNOWN")):
        ids = tok(cand, add_special_tokens=False)["input_ids"]
        full = tok(strings.ANSWER_PREFIX + value, add_special_tokens=False)["input_ids"]
        assert ids[:-1] == head and ids == full[:len(head) + 1]
    with pytest.raises(FirstTokenError):
        first_token_candidates(tok, ("UNKNOWN", "UNKNOWN"))


# --------------------------------------------------------------------------- a run on tiny-llama


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("note-controls")
    model = kvprobe.load_model("tiny-llama")
    study = NoteControlsStudy(n_groups=2, max_new_tokens=3, current_queries=True, cases_per_batch=10)
    info = run_study(study, model, out, progress=False)
    return model, study, info, out, list(read_rows(out))


def test_run_writes_a_row_for_every_configuration_and_unit(tiny_run):
    _, study, info, out, rows = tiny_run
    assert info.cases_run == len(study.cases()) == 2 * 2 * 5
    units = {(r["group_id"], r["information"]) for r in rows}
    assert len(units) == 4
    for name in NAMES:
        assert {(r["group_id"], r["information"]) for r in rows if r["configuration"] == name} == units, name
    dependent = {(r["group_id"], r["information"]) for r in rows if r["relation"] == "replacement"
                 and r["information"] == "unit_from_a"}
    for c in CURRENT:
        got = [r for r in rows if r["configuration"] == c.name]
        assert {(r["group_id"], r["information"]) for r in got} == dependent and all(
            r["quantity_complete"] is not None and r["label_correct"] is None for r in got)
    config = json.loads((out / "config.json").read_text())["study_config"]
    assert config["configurations_run"] == [c.name for c in study.selected()]


def test_rows_record_the_masked_spans_and_their_text(tiny_run):
    model, _, _, _, rows = tiny_run
    for r in rows:
        c = CATALOG[r["configuration"]]
        assert (r["profile"], r["question_kind"], r["access"]) == (c.profile, c.question, c.access)
        assert r["n_masked"] == sum(e - s for s, e in r["masked_spans"])
        if c.access in ("early", "middle", "late", "near", "far", "preserve-first-four", "whole-a", "source"):
            assert r["n_masked"] == r["a_tokens"]
        if c.access == "full":
            assert r["masked_spans"] == [] and r["margin_change_vs_reference"] is None
    row = next(r for r in rows if r["configuration"] == "early" and r["profile"] == "original")
    case = _task_case(row)
    history = model.prefill(profile_prompt(case, "original"))
    (s, e), = row["masked_spans"]
    assert row["masked_text"] == [history.token_text(TokenSpan(s, e))]
    assert row["note_offsets"] == [[0, row["a_tokens"]]]
    near = next(r for r in rows if r["case_id"] == row["case_id"] and r["configuration"] == "near")
    far = next(r for r in rows if r["case_id"] == row["case_id"] and r["configuration"] == "far")
    ids = history.input_ids.tolist()
    (ns, ne), (fs, fe) = near["masked_spans"][0], far["masked_spans"][0]
    assert ids[ns:ne] == ids[fs:fe] and near["masked_text"] == far["masked_text"]
    plain = [r for r in rows if r["profile"] == "plain"]
    # The tiny tokenizer spells "plain" with more tokens than "gray": later positions shift, and the rows say so.
    assert {r["position_shift"] for r in plain} == {6 * (len(model.tokenizer(" plain")["input_ids"]) - 1)}
    assert {r["position_shift"] for r in rows if r["profile"] == "varied"} == {0}


def test_first_token_margin_equals_an_uncached_forward(tiny_run):
    """The stored margin is log p(first label token) - log p(first UNKNOWN token) after the JSON prefix: one
    plain forward (full access) and the reference forward with the early window hidden."""
    model, _, _, _, rows = tiny_run
    tok = model.tokenizer
    for name in ("full", "early"):
        row = next(r for r in rows if r["configuration"] == name and r["profile"] == "original")
        case = _task_case(row)
        rendered, ids, _ = model.tokenize(profile_prompt(case, "original"))
        question = task_strings.UNRELATED_QUESTION.format(envelope=case.group.envelope)
        suffix = tok(rendered.suffix(question), add_special_tokens=False)["input_ids"]
        prefix = tok(strings.ANSWER_PREFIX, add_special_tokens=False)["input_ids"]
        firsts = [tok(c, add_special_tokens=False)["input_ids"][len(prefix)] for c in row["candidates"]]
        if name == "full":
            with torch.inference_mode():
                logits = model.hf(input_ids=torch.tensor([ids.tolist() + suffix + prefix])).logits[0, -1]
        else:
            hidden = torch.zeros(len(ids), dtype=torch.bool)
            (s, e), = row["masked_spans"]
            hidden[s:e] = True
            logits = reference_logits(model, ids.tolist(), suffix + prefix, hidden)[-1]
        logp = torch.log_softmax(logits.float(), dim=-1)
        assert math.isclose(row["first_token_margin"], float(logp[firsts[0]] - logp[firsts[1]]), abs_tol=1e-4)


def test_summary_recomputes_from_the_rows(tiny_run):
    _, _, _, out, rows = tiny_run
    summary = write_summary("note-controls", out)
    assert (out / "report.md").is_file() and (out / "figure.png").is_file()
    assert [c["configuration"] for c in summary["configurations"]] == list(NAMES)
    by = {c["configuration"]: c for c in summary["configurations"]}
    for rule in RULES:
        for name in NAMES:
            mine = [r for r in rows if r["configuration"] == name]
            assert by[name]["correct"][rule] == sum(bool(r[rule]) for r in mine) and by[name]["n"] == len(mine)
        full = {(r["group_id"], r["information"]): r[rule] for r in rows if r["configuration"] == "full"}
        early = {(r["group_id"], r["information"]): r[rule] for r in rows if r["configuration"] == "early"}
        change = by["early"]["vs_full"][rule]
        assert change["change"] == sum(early.values()) - sum(full.values())
        assert change["pp"] == pytest.approx(100 * change["change"] / len(full))
    margins = [r["first_token_margin"] for r in rows if r["configuration"] == "far"]
    assert by["far"]["margin"]["mean"] == pytest.approx(float(np.mean(margins)))
    report = (out / "report.md").read_text()
    assert "## Matched occurrence: far minus near" in report and anchors.MODEL in report
    assert "+57.5 pp [49.58, 65.42]" in report and "Run time:" in report


def test_disagreement_counts_signs_and_ties():
    margins = np.array([0.5, -0.2, 0.0, 0.0, 1.0, np.nan])
    correct = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    d = _disagreement(margins, correct)
    assert d == {"outputs": 5, "nonzero_disagreements": 2, "zero_ties": 2, "zero_ties_correct": 1,
                 "nonzero_range": [-0.2, 0.5]}


def test_catalog_holds_the_papers_configurations():
    assert len(PAPER_FOURTEEN) == 14 and len(CONFIGURATIONS) == 24 and len(set(NAMES)) == 24
    assert set(anchors.COUNTS) == set(NAMES)
    assert CATALOG["plain-early"].reference == "plain-full" and CATALOG["explicit-early"].reference == "explicit-full"
    assert CATALOG["near"].reference == "full" and CATALOG["varied-current-number"].reference == "varied-current-full"


# --------------------------------------------------------------------------- parameters


@pytest.mark.parametrize("kwargs,field", [
    (dict(configurations=("full", "nope")), "configurations"),
    (dict(profiles=("original", "shuffled")), "profiles"),
    (dict(profiles=("varied",), configurations=("full", "early")), "configurations"),
    (dict(configurations=("full", "full")), "configurations"),
    (dict(middle_placement=1.5), "middle_placement"),
    (dict(late_placement=-0.1), "late_placement"),
    (dict(n_groups=0), "n_groups"),
    (dict(control_skip=-1), "control_skip"),
])
def test_bad_parameters_are_refused_with_the_field_named(kwargs, field):
    with pytest.raises(InvalidParameter) as err:
        NoteControlsStudy(**kwargs)
    assert err.value.field_name == field and field in str(err.value)


def test_profiles_and_configurations_select_the_cases():
    study = NoteControlsStudy(n_groups=2, profiles=("original", "varied"), configurations=("full", "varied-early"))
    assert {c.profile for c in study.cases()} == {"original", "varied"} and len(study.cases()) == 8
    assert [c.name for c in study.selected()] == ["full", "varied-early"]
    assert NoteControlsStudy(n_groups=1, configurations=("no-note-full",)).cases()[0].case_id.endswith("/no-note")
