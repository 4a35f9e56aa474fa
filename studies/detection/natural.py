"""Replacement detection in natural text: the ``oaks`` dataset of the detection study (paper
app:v5_natural, seed L2894-2940; spec partB D5).

Per question of the chosen OAKS books, its earliest kept answer change
(:func:`kvprobe.studies.datasets.oaks.earliest_changes`, the matched-scores study's selection) gives
three record pairs, resampled together (group = the question):

* ``positive``: the earlier source A followed by the later source B (label 1);
* ``repeated``: A followed by A (label 0);
* ``other_book``: A followed by the later source of the next selected question from another book
  (cyclically, in selection order; label 0).

Two detectors read every pair: the asserted-value extraction prompt (``asserted-value``) and the same
prompt with the question-conditioned sentences prepended (``asserted-value+question``: "The target
entity/attribute is specified by this question: [question]" followed by "Extract the states relevant
to that target.", :data:`kvprobe.studies.common.detectors.strings.QUESTION_CONDITIONED`). Neither sees the
answers. Missing or invalid extraction is ``unresolved`` and never triggers replacement.
"""

from __future__ import annotations

from typing import Any, Sequence

import kvprobe
from kvprobe import decoding
from kvprobe.studies.datasets import oaks
from kvprobe.studies.common.detectors import strings
from kvprobe.studies.common.detectors.text import TEXT_DETECTORS, RecordPair, detector_prompt, lexical_filter, \
    parse_verdict, run_text_detectors
from kvprobe.studies.common.protocol import use_chat

#: The plain and question-conditioned asserted-value detectors (the row's ``detector``).
PLAIN, WITH_QUESTION = "asserted-value", "asserted-value+question"
NATURAL_DETECTORS = (PLAIN, WITH_QUESTION)
#: The three pair variants of a question, in case order, with their labels.
RELATIONS = {"positive": 1, "repeated": 0, "other_book": 0}
#: The paper's detector budget on natural text (seed L2911: "a 160-token limit").
NATURAL_MAX_NEW_TOKENS = 160
#: Row columns of a question's annotation (None when the OAKS file has none).
ANNOTATION_COLUMNS = ("attribute_change", "attribute_change_alternative", "description", "description_alternative",
                      "rubric", "rubric_alternative")


def natural_pairs(selected: Sequence[tuple[oaks.Book, oaks.Change]]) -> list[dict[str, Any]]:
    """The three pairs of every selected change, as dicts (``relation``, ``label``, ``pair``, the change and
    the donor question of the different-book negative).

    Example: on three questions from books X, X, Y the first two take their ``other_book`` B from the
    third question and the third from the first.
    """
    books = {c.question_id: b.book_id for b, c in selected}
    if len(set(books.values())) < 2:
        raise ValueError("the different-book negative needs selected questions from at least two books")
    out = []
    for i, (book, change) in enumerate(selected):
        donor = next(c for _, c in (selected[(i + k) % len(selected)] for k in range(1, len(selected)))
                     if books[c.question_id] != book.book_id)
        later = {"positive": change.new_source, "repeated": change.old_source, "other_book": donor.new_source}
        for relation, label in RELATIONS.items():
            out.append({"relation": relation, "label": label, "change": change, "book": book,
                        "donor": donor.case_id if relation == "other_book" else None,
                        "pair": RecordPair(change.old_source, later[relation], change.old_answer)})
    return out


def annotation_columns(book: oaks.Book, question_id: str) -> dict[str, Any]:
    """The :data:`ANNOTATION_COLUMNS` of a question (all None without an annotation)."""
    q = next(q for q in book.questions if str(q["question_id"]) == question_id)
    a = oaks.annotation(q)
    return {k: (getattr(a, k) if a else None) for k in ANNOTATION_COLUMNS}


def question_conditioned_prompt(old: str, later: str, question: str, chat: bool) -> tuple[kvprobe.Prompt, str]:
    """The asserted-value prompt with the question-conditioned sentences prepended (system message and
    layout as the records' detector, :func:`kvprobe.studies.common.detectors.text.detector_prompt`)."""
    return detector_prompt(strings.ASSERTED_VALUE, old, later, strings.SYSTEM_RECORDS, chat, question=question)


def run_natural_detectors(model: kvprobe.Model, pairs: Sequence[RecordPair], questions: Sequence[str],
                          names: Sequence[str], max_new_tokens: int = NATURAL_MAX_NEW_TOKENS,
                          chat: bool | None = None, allow_fence: bool = True) -> list[dict[str, dict[str, Any]]]:
    """Per pair ``{detector: fields}`` of the named :data:`NATURAL_DETECTORS` (fields as
    :func:`kvprobe.studies.common.detectors.text.run_text_detectors`); each detector is one generation batch.

    Example: ``run_natural_detectors(model, [pair], ["Where does the clerk live?"], NATURAL_DETECTORS)``.
    """
    out: list[dict[str, dict[str, Any]]] = [{} for _ in pairs]
    if PLAIN in names:
        for i, fields in enumerate(run_text_detectors(model, pairs, [PLAIN], max_new_tokens, chat, allow_fence)):
            out[i][PLAIN] = fields[PLAIN]
    if WITH_QUESTION in names:
        chat = use_chat(model.tokenizer, chat)
        items = []
        for pair, question in zip(pairs, questions, strict=True):
            prompt, later = question_conditioned_prompt(pair.a_text, pair.b_text, question, chat)
            items.append((model.prefill(prompt), kvprobe.Request(later, kvprobe.Full())))
        for i, ans in enumerate(decoding.answer(model, items, max_new_tokens=max_new_tokens)):
            g, pair = ans.generation, pairs[i]
            verdict = parse_verdict(TEXT_DETECTORS[PLAIN], g.text, allow_fence)
            out[i][WITH_QUESTION] = {
                "output": g.text, "stop_reason": g.stop_reason, "output_tokens": g.n_tokens,
                "parse": verdict.reason, "decision": verdict.decision,
                "filtered": lexical_filter(verdict.decision, pair.old_value, pair.a_text, pair.b_text)}
    return out
