"""Contextual MQuAKE: history segments, questions, and scoring.

Protocol (paper appendix "Repeated Updates and Contextual Multi-Hop Questions",
paragraph "MQuAKE contextual updates", L1375-1400; spec partA section 1b; retained-text
stratum from appendix "Retained Text and Routing on Contextual MQuAKE", L4216-4227).
Works on released cases and on ``generate.generate_cases`` output alike: record texts
come from each case's own cloze statements, so no relation table is needed.

History, as named segments in this order (masks address segments by name):

* ``old:i``   earlier records: the old chain's facts (i = hop index), then, numbered on,
              the pre-edit fact (``target_true``) of every rewrite whose subject/relation
              pair is not on the old chain (a later edit on the new chain), so every update
              has an earlier record it supersedes;
* ``link:i``  remaining links: new-chain hop i when it is neither edited nor already an
              old record;
* ``update:j`` later update records: ``requested_rewrite[j]`` with ``target_new``.

No new value is stated as an old value. Source segments (``source_segments``) are the
earlier records of edited subject/relation pairs; value spans (``value_spans``) are their
old target strings.
"""

from __future__ import annotations

from collections.abc import Iterable

from kvprobe.studies.common.answers import _occurs, boxed_content, contains_answer, normalize_answer, \
    normalized_exact_match

from . import strings
from kvprobe.studies.datasets.mquake.schema import MQuAKECase

Segment = tuple[str, str]


def _rewrite_index(case: MQuAKECase, triple, labeled) -> int | None:
    """Index of the ``requested_rewrite`` that edits a chain triple's subject/relation pair, or None.

    Matched by subject label and relation id, else by the Wikidata ids of ``orig.edit_triples``
    (whose order is that of ``requested_rewrite``).
    """
    for j, rw in enumerate(case.requested_rewrite):
        if (rw.subject, rw.relation_id) == (labeled[0], triple[1]):
            return j
    for j, edit in enumerate(case.orig.edit_triples[:len(case.requested_rewrite)]):
        if (edit[0], edit[1]) == (triple[0], triple[1]):
            return j
    return None


def _old_facts(case: MQuAKECase) -> list[tuple[str, str, int | None]]:
    """(fact sentence, old target string, index of the rewrite superseding it or None) of every earlier record."""
    o = case.orig
    out = []
    superseded = set()
    for t, lab, hop in zip(o.triples, o.triples_labeled, case.single_hops):
        j = _rewrite_index(case, t, lab)
        out.append((strings.fact_sentence(hop.cloze, hop.answer), hop.answer, j))
        superseded.add(j)
    for j, rw in enumerate(case.requested_rewrite):
        if j not in superseded:
            out.append((strings.fact_sentence(rw.cloze, rw.target_true.text), rw.target_true.text, j))
    return out


def build_history(case: MQuAKECase) -> list[Segment]:
    """``[(segment_name, text), ...]``: earlier records, remaining links, later updates."""
    segs = [(f"old:{i}", strings.OLD_RECORD.format(fact=f)) for i, (f, _, _) in enumerate(_old_facts(case))]
    o = case.orig
    old_triples = {tuple(t) for t in o.triples}
    for i, (t, lab, hop) in enumerate(zip(o.new_triples, o.new_triples_labeled, case.new_single_hops)):
        if tuple(t) in old_triples or _rewrite_index(case, t, lab) is not None:
            continue
        segs.append((f"link:{i}", strings.LINK_RECORD.format(fact=strings.fact_sentence(hop.cloze, hop.answer))))
    for j, rw in enumerate(case.requested_rewrite):
        segs.append((f"update:{j}",
                     strings.UPDATE_RECORD.format(fact=strings.fact_sentence(rw.cloze, rw.target_new.text))))
    return segs


def history_text(case: MQuAKECase, kept_segments: Iterable[str] | None = None) -> str:
    """The rendered history (all segments, or only ``kept_segments`` in history order)."""
    segs = build_history(case)
    if kept_segments is not None:
        keep = _names(kept_segments, segs)
        segs = [s for s in segs if s[0] in keep]
    return strings.SEGMENT_JOINER.join(text for _, text in segs)


def source_segments(case: MQuAKECase) -> list[str]:
    """Names of the earlier records of edited subject/relation pairs (the source mask)."""
    return [f"old:{i}" for i, (_, _, j) in enumerate(_old_facts(case)) if j is not None]


def online_pairs(case: MQuAKECase) -> list[tuple[str, str]]:
    """``(source segment, update segment)``: each superseded record and the later update replacing it.

    The online policy hides a record only from the tokens after its own update
    (paper L1404-1407); ``source_segments`` lists the same records in history order.
    """
    return [(f"old:{i}", f"update:{j}") for i, (_, _, j) in enumerate(_old_facts(case)) if j is not None]


def value_spans(case: MQuAKECase) -> list[tuple[str, int, int]]:
    """``(segment_name, start, end)`` character spans of the old target strings in source segments."""
    offset = strings.OLD_RECORD.index("{fact}")
    out = []
    for i, (fact, value, j) in enumerate(_old_facts(case)):
        if j is not None:
            start = offset + len(fact) - 1 - len(value)  # fact = "<cloze> <value>."
            out.append((f"old:{i}", start, start + len(value)))
    return out


# -- questions ------------------------------------------------------------------------------
def _dedupe(xs: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(x for x in xs if x))


def historical_answers(case: MQuAKECase) -> list[str]:
    """Pre-update answer and aliases (plus MQuAKE-T's ``answer_extended`` when present)."""
    return _dedupe([case.answer, *case.answer_alias, *case.extra.get("answer_extended", [])])


def questions(case: MQuAKECase) -> list[tuple[str, str, list[str]]]:
    """``(kind, text, answers)``: 3 x "current", 1 "historical", 1 "single_hop" (paper L1378-1383).

    * current: the three supplied paraphrases; answers ``new_answer`` + aliases;
    * historical: ``HISTORICAL_PREFIX`` + joiner + the first paraphrase; answers ``answer`` + aliases;
    * single_hop: the first edited relation's supplied question (``requested_rewrite[0].question``);
      answers its ``target_new`` plus the aliases of the matching new single hop.
    """
    current = _dedupe([case.new_answer, *case.new_answer_alias])
    out = [("current", q, current) for q in case.questions]
    out.append(("historical", strings.HISTORICAL_PREFIX + strings.HISTORICAL_JOINER + case.questions[0],
                historical_answers(case)))
    rw = case.requested_rewrite[0]
    aliases = [a for h in case.new_single_hops if h.question == rw.question and h.answer == rw.target_new.text
               for a in h.answer_alias]
    out.append(("single_hop", rw.question, _dedupe([rw.target_new.text, *aliases])))
    return out


def grade(output: str, answers: list[str], stopped_at_eos: bool) -> dict[str, bool]:
    """Every scoring rule of an answer against ``answers`` (a reference and its aliases): ``em`` (normalized exact
    match with EOS, the paper's), ``em_strict_boxed`` (the boxed content only) and ``contains`` (the answer occurs
    word-bounded, ours). The study grades its rows with it and the summary regrades stored outputs against other
    references (the current value of a historical question)."""
    return {"em": normalized_exact_match(output, answers, stopped_at_eos),
            "em_strict_boxed": normalized_exact_match(output, answers, stopped_at_eos, strict_boxed=True),
            "contains": contains_answer(output, answers)}


def _names(kept: Iterable, segs: list[Segment]) -> set[str]:
    names = {k[0] if isinstance(k, tuple) else k for k in kept}
    unknown = names - {n for n, _ in segs}
    if unknown:
        raise KeyError(f"unknown history segment(s) {sorted(unknown)}")
    return names


def retained_text(case: MQuAKECase, kept_segments: Iterable) -> bool:
    """Whether a historical answer survives in the text kept after a deletion (L4219-4227).

    ``kept_segments``: segment names (or ``(name, text)`` pairs) that remain, e.g. every
    segment except ``source_segments(case)``. True when the historical reference or an
    alias, normalized and at least three characters long, occurs word-bounded in the
    kept records.
    """
    text = normalize_answer(history_text(case, kept_segments))
    return any(len(a) >= 3 and _occurs(a, text) for a in map(normalize_answer, historical_answers(case)))
