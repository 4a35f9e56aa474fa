"""OAKS-Novel candidate decisions: the loader (fixture in the schema, named errors), kept changes, the
hash-ordered split, unrelated text, the old span (body + trailing newline, not the heading), the
offline demonstration set, and a tiny run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvprobe.studies.common.protocol import InvalidParameter
from kvprobe.studies.datasets import oaks
from kvprobe.studies.source_influence.study import FormattedEvent, OaksStudy, prompt_for, source_spans

FIXTURE = Path(__file__).parent / "fixtures" / "oaks_sample.json"

pytestmark = pytest.mark.usefixtures("one_thread")


def test_loader_reads_the_fixture_and_keeps_changes_with_both_sources():
    books = oaks.load_oaks(FIXTURE)
    assert [b.book_id for b in books] == ["fixture-book-0", "fixture-book-1", "fixture-book-2"]
    kept = oaks.changes(books[0])
    # q1 changes at chunk 1 ("" -> city: no old answer) and chunk 3 (kept); q2's change has no new source
    assert [(c.question_id, c.chunk, c.old_answer, c.new_answer) for c in kept] == [
        ("b0-q1", 3, "Valmora", "Dunmere")]
    assert kept[0].old_source == "The clerk had a small room in Valmora." and kept[0].case_id == "b0-q1@3"


@pytest.mark.parametrize("edit, message", [
    (lambda d: d["books"][0].pop("chunks"), r"books\[0\]: missing field\(s\) chunks"),
    (lambda d: d["books"][1]["questions"][0]["answers"].pop(), r"fixture-book-1\) questions\[0\] \(b1-q1\): 3 answers"),
    (lambda d: d.pop("books"), r"missing field\(s\) books"),
])
def test_malformed_files_are_refused_with_a_named_error(tmp_path, edit, message):
    data = json.loads(FIXTURE.read_text())
    edit(data)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    with pytest.raises(oaks.OaksFormatError, match=message):
        oaks.load_oaks(bad)
    with pytest.raises(InvalidParameter, match="source"):
        OaksStudy(source=str(bad))
    with pytest.raises(InvalidParameter, match="no such OAKS file"):
        OaksStudy(source=str(tmp_path / "missing.json"))


def test_split_is_hash_ordered_and_unrelated_text_avoids_the_answers():
    books = oaks.load_oaks(FIXTURE)
    split = oaks.split_books(books)
    assert [len(v) for v in split.values()] == [3, 0, 0]  # 9 / 5 / 5 in hash order, capped
    change = oaks.changes(books[0])[0]
    text = oaks.unrelated_text(books, books[0], change, n_chars=150)
    assert len(text) <= 150 and "Valmora" not in text and "Dunmere" not in text
    assert text == oaks.unrelated_text(books, books[0], change, n_chars=150)
    assert "Harbour" not in text  # from another book


def test_old_span_is_the_body_and_its_trailing_newline(llama):
    study = OaksStudy(source=str(FIXTURE), split="all")
    event = study.events()[0]
    h = llama.prefill(prompt_for(event))
    old, neutral = source_spans(h, event, trailing_newline=True)
    assert h.token_text(old) == event.old + "\n" and "Earlier source" not in h.token_text(old)
    control = study.conditions(llama, FormattedEvent(event, "segments"), h)["control"].spans[0]
    assert len(control) == len(old) and neutral.start == control.start and control.end <= neutral.end


def test_demonstration_set_is_deterministic_and_labelled(llama, tmp_path):
    from kvprobe.studies.datasets.filler import pg19_books
    from kvprobe.studies.common.runner import run_study
    from kvprobe.studies.common.summary import write_summary

    text = pg19_books()[0].read_text(encoding="utf-8")
    a, b = oaks.demonstration_set(text, n_books=3, per_book=2), oaks.demonstration_set(text, n_books=3, per_book=2)
    assert a == b and "generated" in a["release"] and len(a["books"]) == 3
    books = oaks.parse_oaks(a)
    assert all(len(oaks.changes(book)) == len(book.questions) for book in books)
    run_study(OaksStudy(n=3), llama, tmp_path, progress=False)
    write_summary("oaks", tmp_path)
    assert "GENERATED from the PG-19 novel" in (tmp_path / "report.md").read_text()
