"""Released or generated rows -> histories (one context, its single- and multi-hop questions).

The ``sh`` and ``mh`` rows of one length tier share a byte-identical context (the paper: "each
with 100 single-hop and 100 multi-hop questions"), so rows are grouped by context: one history is
prefilled once and asked every question of both rows.

Previous (outdated) answers of a question, for the rule grader and the old-alias stratum (paper
L1694-1696: "Old aliases come from the mapped benchmark relations; names overlapping a current
alias are excluded"), in this order of preference:

1. a generated file's ``kvprobe_previous_answers``;
2. with an MQuAKE file (``mquake_index``): the case whose question (or new single-hop question) is
   the question's text gives its pre-edit answer and aliases;
3. a single-hop question written with an MQuAKE question template: the superseded objects of its
   (subject, relation) key in the mapping;
4. else none (the question is counted in the "unknown" old-alias stratum).

Aliases overlapping a current answer (one contains the other after normalization) are dropped.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kvprobe.studies.common.answers import normalize_answer

from .mapping import FactMapping, map_facts, parse_question
from .schema import FactRow, facts_of

HOPS = ("sh", "mh")


@dataclass(frozen=True)
class FCQuestion:
    """One question of a history: its released id, hop type, text, references and previous answers."""

    qa_pair_id: str
    hop: str
    question: str
    answers: tuple[str, ...]
    previous: tuple[str, ...]


@dataclass(frozen=True)
class FCHistory:
    """One history (a case of the study): its context and every question asked of it."""

    history_id: str
    tier: str
    context: str
    questions: tuple[FCQuestion, ...]
    entity_ids: tuple[tuple[str, tuple[str, ...]], ...] | None = None

    @property
    def case_id(self) -> str:
        return self.history_id

    @property
    def group(self) -> str:
        return self.history_id

    def mapping(self) -> FactMapping:
        """The superseded facts of the history (:func:`mapping.map_facts`; computed once)."""
        return _mapping(self.context, self.entity_ids)


@functools.lru_cache(maxsize=8)
def _mapping(context: str, entity_ids: tuple[tuple[str, tuple[str, ...]], ...] | None) -> FactMapping:
    return map_facts(facts_of(context), None if entity_ids is None else dict(entity_ids))


def without_overlap(previous: Iterable[str], answers: Sequence[str]) -> tuple[str, ...]:
    """``previous`` without empty strings, repeats, and names overlapping a current answer (either contains
    the other, word-bounded after SQuAD normalization).

    Example: ``without_overlap(["Paris", "Paris, France", "Lyon"], ["Paris"])`` is ``("Lyon",)``.
    """
    current = [f" {normalize_answer(a)} " for a in answers if normalize_answer(a)]
    out: list[str] = []
    for p in previous:
        n = f" {normalize_answer(p)} "
        if n.strip() and p not in out and not any(n in c or c in n for c in current):
            out.append(p)
    return tuple(out)


def mquake_index(path: str | Path) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """From a released MQuAKE file: entity ids per label (orig triples and their labels) and previous answers
    per question text (casefolded): a multi-hop question's pre-edit answer and aliases, an edited new
    single-hop question's pre-edit single-hop answer and aliases.

    Example: ``ids, previous = mquake_index("MQuAKE-CF.json")``.
    """
    from kvprobe.studies.datasets.mquake.schema import load_mquake

    ids: dict[str, set[str]] = {}
    previous: dict[str, list[str]] = {}
    for case in load_mquake(path):
        o = case.orig
        for triples, labels in ((o.triples, o.triples_labeled), (o.new_triples, o.new_triples_labeled)):
            for t, lab in zip(triples, labels):
                ids.setdefault(lab[0], set()).add(t[0])
                ids.setdefault(lab[2], set()).add(t[2])
        for q in case.questions:
            previous.setdefault(q.strip().casefold(), [case.answer, *case.answer_alias])
        for old, new in zip(case.single_hops, case.new_single_hops):
            if normalize_answer(old.answer) != normalize_answer(new.answer):
                previous.setdefault(new.question.strip().casefold(), [old.answer, *old.answer_alias])
    return {name: sorted(v) for name, v in ids.items()}, previous


def _previous(row: FactRow, i: int, mapping: FactMapping, mquake_previous: Mapping[str, list[str]] | None
              ) -> list[str]:
    if row.previous_answers is not None:
        return row.previous_answers[i]
    if mquake_previous and row.questions[i].strip().casefold() in mquake_previous:
        return mquake_previous[row.questions[i].strip().casefold()]
    if row.hop == "sh" and (key := parse_question(row.questions[i])) is not None:
        return mapping.previous_objects(*key)
    return []


def build_histories(rows: Sequence[FactRow], tiers: Sequence[str], questions_per_hop: int | None = None,
                    entity_ids: Mapping[str, Sequence[str]] | None = None,
                    mquake_previous: Mapping[str, list[str]] | None = None, prefix: str = "fc") -> list[FCHistory]:
    """The histories of ``rows`` in the given tiers, in tier order then file order.

    Args:
        questions_per_hop: ask only the first n questions of each hop type (None: all).
        entity_ids: ids per name for the mapping's ambiguity rule (a row's own ``entity_ids`` wins).
        mquake_previous: previous answers per question text (:func:`mquake_index`).
        prefix: history ids are ``<prefix>-<tier>`` (``-<k>`` added when a tier has several).

    Example: ``build_histories(load_rows(path), ("32k", "64k"))``.
    """
    grouped: dict[str, list[FactRow]] = {}
    for row in rows:
        if row.tier in tiers:
            grouped.setdefault(row.context, []).append(row)
    per_tier = {t: sum(rs[0].tier == t for rs in grouped.values()) for t in tiers}
    seen: dict[str, int] = {}
    out = []
    for tier in tiers:
        for context, group in ((c, g) for c, g in grouped.items() if g[0].tier == tier):
            ids = group[0].entity_ids if group[0].entity_ids is not None else entity_ids
            frozen_ids = None if ids is None else tuple(sorted((k, tuple(v)) for k, v in ids.items()))
            mapping = _mapping(context, frozen_ids)
            questions = []
            for row in sorted(group, key=lambda r: HOPS.index(r.hop)):
                n = len(row.questions) if questions_per_hop is None else min(questions_per_hop, len(row.questions))
                for i in range(n):
                    previous = without_overlap(_previous(row, i, mapping, mquake_previous), row.answers[i])
                    questions.append(FCQuestion(row.qa_pair_ids[i], row.hop, row.questions[i],
                                                tuple(row.answers[i]), previous))
            k = seen[tier] = seen.get(tier, -1) + 1
            name = f"{prefix}-{tier}" if per_tier[tier] == 1 else f"{prefix}-{tier}-{k}"
            out.append(FCHistory(name, tier, context, tuple(questions), frozen_ids))
    return out
