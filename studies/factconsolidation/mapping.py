"""Numbered fact sentences -> (subject, relation, object), and the superseded facts (latest fact wins).

Paper L1535-1541 (spec partA section 3, "Mapping"): "The original MQuAKE triples and relation
templates map numbered sentences to their source relations independently of questions and
references. The latest numbered conflicting fact prevails. [...] Facts associated with ambiguous
same-name entity keys remain visible". The rules implemented here:

1. **Parsing.** Every MQuAKE cloze template (``cloze_templates.json``, 44 Wikidata relations; ``[X]``
   the subject, ``__`` the object) becomes a pattern ``<template>.`` over a whole fact sentence. When
   several match, the template with the most literal characters wins (``"[X] is located in the country
   of __"`` over ``"[X] is located in __"``; ``"The capital of [X] is __"`` over ``"The [X] is __"``).
   Templates with identical text (P131 and P276, ``"[X] is located in __"``) cannot be told apart from
   text and share one relation key (``"P131/P276"``). A sentence no template matches stays visible.
2. **Keys.** A fact's key is (subject name, relation key), names compared exactly.
3. **Ambiguous names stay visible.** A subject name is ambiguous, and every fact with it as subject
   is left out of conflict resolution (never masked), when (a) an entity-id table is given (the
   MQuAKE triples' Wikidata ids, or the ids a generated file records) and lists the name under two or
   more ids, or (b) without ids as well as with them, one of its keys changes object more than once
   in number order (each subject-relation is replaced at most once, paper L1529-1530, so a second
   change means the name covers two entities).
4. **Latest fact wins.** For every other key whose sentences give more than one object, the fact
   with the largest number holds; every earlier fact whose object differs (case and whitespace
   ignored) is superseded. Its whole sentence is the source mask, its object string the value mask.
   An earlier fact repeating the winning object conflicts with nothing and stays visible.
"""

from __future__ import annotations

import functools
import json
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Mapping as MappingType, Sequence

from kvprobe.studies.datasets.mquake.templates import template_file

from .schema import Fact

#: Where the MQuAKE relation templates live (princeton-nlp/MQuAKE @ fb43dadc2d8c, ``prompts/templates``,
#: MIT; read at run time from the shared data folder beside the repository, not copied into it).


@dataclass(frozen=True)
class Template:
    """One cloze template text and the relations that use it."""

    relation: str  #: relation key: the Wikidata id, or ids joined by "/" when they share the text
    text: str      #: the upstream template, ``[X]`` subject and ``__`` object
    pattern: re.Pattern

    @property
    def literal_chars(self) -> int:
        return len(self.text.replace("[X]", "").replace("__", ""))


def _pattern(template: str) -> re.Pattern:
    """``"[X] is married to __"`` -> a pattern over a whole sentence ending in a period."""
    parts = re.split(r"(\[X\]|__)", template)
    body = "".join("(?P<subject>.+?)" if p == "[X]" else "(?P<object>.+)" if p == "__" else re.escape(p)
                   for p in parts)
    return re.compile(rf"^{body}\.$")


@functools.lru_cache(maxsize=None)
def relation_templates(kind: str = "cloze") -> dict[str, str]:
    """The upstream MQuAKE templates by relation id, verbatim (``kind``: ``"cloze"`` or ``"question"``)."""
    path = template_file(kind)
    if not path.exists():
        raise FileNotFoundError(f"MQuAKE {kind} templates not found at {path} (`kvprobe data pull mquake`)")
    return json.loads(path.read_text(encoding="utf-8"))


@functools.lru_cache(maxsize=None)
def templates() -> tuple[Template, ...]:
    """Every cloze template, identical texts merged, most literal characters first."""
    by_text: dict[str, list[str]] = defaultdict(list)
    for relation, text in relation_templates("cloze").items():
        by_text[text].append(relation)
    found = [Template("/".join(rels), text, _pattern(text)) for text, rels in by_text.items()]
    return tuple(sorted(found, key=lambda t: (-t.literal_chars, t.relation)))


@dataclass(frozen=True)
class Triple:
    """A parsed sentence: subject, relation key, object, and where the object starts in the sentence."""

    subject: str
    relation: str
    object: str
    object_start: int


def parse_sentence(sentence: str) -> Triple | None:
    """The triple of a fact sentence (rule 1 of the module docstring), or None.

    Example: ``parse_sentence("Ellie Kemper is a citizen of Sweden.")`` gives
    ``Triple("Ellie Kemper", "P27", "Sweden", 29)``.
    """
    for t in templates():
        m = t.pattern.match(sentence)
        if m and m.group("subject").strip() and m.group("object").strip():
            return Triple(m.group("subject"), t.relation, m.group("object"), m.start("object"))
    return None


@dataclass(frozen=True)
class Superseded:
    """An earlier fact whose key a later fact gives another object (rule 4)."""

    number: int       #: the superseded fact
    winner: int       #: the latest fact of the key
    subject: str
    relation: str
    old_object: str
    new_object: str
    value_chars: tuple[int, int]  #: the old object in the fact's line ``"<number>. <sentence>"``


@dataclass(frozen=True)
class FactMapping:
    """What the mapping found in one history."""

    triples: dict[int, Triple]               #: fact number -> triple (parsed facts only)
    superseded: tuple[Superseded, ...]       #: in fact-number order
    ambiguous: frozenset[str]                #: subject names left visible (rule 3)
    unparsed: tuple[int, ...]                #: fact numbers no template matched

    @property
    def source_numbers(self) -> list[int]:
        """The fact numbers the source mask hides."""
        return [s.number for s in self.superseded]

    def previous_objects(self, subject: str, relation: str) -> list[str]:
        """The superseded objects of one key, oldest first (empty when it has none)."""
        return [s.old_object for s in self.superseded if (s.subject, s.relation) == (subject, relation)]


def _same(a: str, b: str) -> bool:
    return " ".join(a.casefold().split()) == " ".join(b.casefold().split())


def map_facts(facts: Sequence[Fact], entity_ids: MappingType[str, Sequence[str]] | None = None) -> FactMapping:
    """The superseded facts of a history under the module docstring's rules.

    Args:
        facts: the numbered facts (any order; numbers decide which is later).
        entity_ids: entity ids per name (MQuAKE's Wikidata ids, or a generated file's); names with two or
            more ids are ambiguous. None: only the text rule 3(b) finds ambiguous names.

    Example::

        facts = [Fact(0, "The capital of Ruvia is Dorn."), Fact(1, "The capital of Ruvia is Kell.")]
        [s.number for s in map_facts(facts).superseded]   # [0]
    """
    triples: dict[int, Triple] = {}
    unparsed = []
    by_key: dict[tuple[str, str], list[int]] = defaultdict(list)
    for f in sorted(facts, key=lambda f: f.number):
        t = parse_sentence(f.text)
        if t is None:
            unparsed.append(f.number)
            continue
        triples[f.number] = t
        by_key[(t.subject, t.relation)].append(f.number)
    ambiguous = {name for name, ids in (entity_ids or {}).items() if len(set(ids)) > 1}
    for (subject, _), numbers in by_key.items():
        objects = [triples[n].object for n in numbers]
        if sum(not _same(a, b) for a, b in zip(objects, objects[1:])) > 1:
            ambiguous.add(subject)
    superseded = []
    for (subject, relation), numbers in by_key.items():
        if subject in ambiguous:
            continue
        winner = triples[numbers[-1]]
        for n in numbers[:-1]:
            t = triples[n]
            if not _same(t.object, winner.object):
                offset = len(f"{n}. ") + t.object_start
                superseded.append(Superseded(n, numbers[-1], subject, relation, t.object, winner.object,
                                             (offset, offset + len(t.object))))
    return FactMapping(triples, tuple(sorted(superseded, key=lambda s: s.number)), frozenset(ambiguous),
                       tuple(unparsed))


@functools.lru_cache(maxsize=None)
def _question_patterns() -> tuple[tuple[str, re.Pattern], ...]:
    """Question templates as patterns over a whole question, most literal characters first."""
    found = []
    for relation, text in relation_templates("question").items():
        parts = re.split(r"(\[X\])", text)
        body = "".join("(?P<subject>.+?)" if p == "[X]" else re.escape(p) for p in parts)
        found.append((len(text.replace("[X]", "")), relation, re.compile(rf"^{body}$")))
    merged: dict[str, tuple[int, str, re.Pattern]] = {}
    for n, relation, pattern in sorted(found, key=lambda x: (-x[0], x[1])):
        key = pattern.pattern
        merged[key] = (n, f"{merged[key][1]}/{relation}" if key in merged else relation, pattern)
    return tuple((relation, pattern) for _, relation, pattern in merged.values())


def parse_question(question: str) -> tuple[str, str] | None:
    """(subject, relation key) of a single-hop question written with an MQuAKE question template, or None.

    The relation key is the cloze template's (``P131/P276`` for the shared ``"[X] is located in __"``),
    so it can be looked up in a :class:`FactMapping`.

    Example: ``parse_question("What is the country of citizenship of Ellie Kemper?")`` gives
    ``("Ellie Kemper", "P27")``.
    """
    cloze_key = {rel: t.relation for t in templates() for rel in t.relation.split("/")}
    for relation, pattern in _question_patterns():
        m = pattern.match(question.strip())
        if m:
            return m.group("subject"), cloze_key.get(relation.split("/")[0], relation)
    return None
