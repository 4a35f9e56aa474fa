"""A generated offline FactConsolidation set: fictional entities, MQuAKE relation templates, released schema.

Each history is built from its own seeded fictional world (the contextual MQuAKE study's
``World``: countries, cities, languages, people, companies and one object per (entity,
relation) for 12 MQuAKE relations). Its numbered facts are cloze sentences (the upstream
MQuAKE templates, :func:`mapping.relation_templates`), so the mapping parses them exactly as it
parses released facts. Per history, in this order:

* single-hop questions: an (entity, relation) pair is replaced (the world's object first, a new
  object of the same type later); the question is the upstream question template; the reference
  is the new object and its aliases, the previous answer the old one;
* multi-hop questions (2-4 hops, alternating with the single-hop ones): an MQuAKE-style chain whose
  first edited hop is replaced; every fact of the old and the new chain is stated; the question is
  one of the contextual MQuAKE study's three paraphrases, the reference the new chain's end;
* same-name entities (``homonyms``): a person twin with the name of a person no question touches and
  other objects for three relations; both are stated, and ``kvprobe_entity_ids`` records the two ids,
  so the mapping leaves them visible;
* filler: the world's other facts until the history reaches its target length, each replaced with
  probability :data:`REPLACED_SHARE` (the paper's histories supersede 834 of 2,310 sentences).

Every (entity, relation) pair is replaced at most once and no question's facts share a pair with
another question's. Lines are shuffled, a replacement always after the fact it replaces, and
numbered from 0. The set is two rows per history (``sh`` and ``mh``, one shared context) in the
released schema (:mod:`schema`), with ``kvprobe_previous_answers`` and ``kvprobe_entity_ids`` in
the metadata. Choices of ours (UNCLEAR upstream): every constant below.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field

from kvprobe.studies.datasets.mquake.generate import RELATIONS, World, _edit_chain, _sample_chain, multihop_questions

from .mapping import relation_templates
from .schema import FactRow, to_json

#: 20260922: the offline FactConsolidation histories (``studies.factconsolidation.data``).
FACTCONSOLIDATION_SEED = 20260922

#: Target context length in tokens per generated tier: 8k leaves SmolLM2's 8,192-token window room for the
#: prompt template, the question and a 256-token answer; 1k is a quick tier of ours for tests and smoke runs.
TIERS = {"1k": 1_000, "8k": 7_300, "32k": 30_000}
#: Characters per token of generated fact lines, measured with SmolLM2's tokenizer (2.52-2.60 on four
#: histories); a history's real length is each row's ``history_tokens``.
CHARS_PER_TOKEN = 2.6
#: Questions per hop type and history at most (the released histories: 100).
QUESTIONS_PER_HOP = 100
#: At most this share of a history's length goes to the questions' facts (the rest is filler).
QUESTION_SHARE = 0.5
#: Hop counts of multi-hop questions (MQuAKE's), drawn uniformly.
MH_HOPS = (2, 3, 4)
#: Share of filler pairs that are replaced (the paper: 834/2,310 superseded sentences, ~0.36 of lines,
#: i.e. ~0.56 of pairs).
REPLACED_SHARE = 0.56
#: Relations a homonym twin gets facts for.
TWIN_RELATIONS = ("P27", "P19", "P108")


@dataclass
class _History:
    """One history under construction: stated lines, replacements, questions."""

    world: World
    rng: random.Random
    lines: list[tuple[str, str, str]] = field(default_factory=list)  # (subject id, relation, object id)
    pairs: list[tuple[int, int]] = field(default_factory=list)        # (old line, new line) of replacements
    used: set[tuple[str, str]] = field(default_factory=set)           # (subject id, relation) stated
    touched: set[str] = field(default_factory=set)                    # entities of question facts
    names: dict[str, set[str]] = field(default_factory=dict)          # name -> entity ids of subjects
    chars: int = 0

    def name(self, eid: str) -> str:
        return self.world.name(eid.removesuffix("~twin"))

    def state(self, s: str, r: str, o: str) -> int:
        sentence = relation_templates("cloze")[r].replace("[X]", self.name(s)).replace("__", self.name(o)) + "."
        self.lines.append((s, r, o))
        self.used.add((s, r))
        self.names.setdefault(self.name(s), set()).add(s)
        self.chars += len(sentence) + len(f"{len(self.lines)}. ") + 1
        return len(self.lines) - 1

    def replace(self, s: str, r: str, old: str, new: str) -> None:
        self.pairs.append((self.state(s, r, old), self.state(s, r, new)))

    def other_object(self, r: str, *avoid: str) -> str:
        pool = [e for e in self.world.by_type[RELATIONS[r][1]] if e not in avoid]
        return self.rng.choice(pool)

    def answer(self, eid: str) -> list[str]:
        return [self.world.name(eid), *self.world.aliases(eid)]


def _single_hop(h: _History) -> tuple[str, list[str], list[str]]:
    s, r = h.rng.choice(sorted(k for k in h.world.facts if k not in h.used))
    old = h.world.facts[(s, r)]
    new = h.other_object(r, old, s)
    h.replace(s, r, old, new)
    h.touched |= {s, old, new}
    question = relation_templates("question")[r].replace("[X]", h.name(s))
    return question, h.answer(new), h.answer(old)


def _multi_hop(h: _History) -> tuple[str, list[str], list[str]] | None:
    k = h.rng.choice(MH_HOPS)
    chain = _sample_chain(h.world, h.rng, k)
    if chain is None:
        return None
    ents, rels = chain
    edited = _edit_chain(h.world, h.rng, ents, rels, [h.rng.randrange(k)])
    if edited is None:
        return None
    new, edits = edited
    keys = {(e, r) for e, r in zip(ents, rels)} | {(e, r) for e, r in zip(new, rels)}
    if keys & h.used:
        return None
    (hop, subj, rel, old_obj, new_obj), = edits
    for i, r in enumerate(rels):
        if i == hop:
            h.replace(subj, rel, old_obj, new_obj)
        else:
            h.state(ents[i], r, ents[i + 1])
    for i in range(hop + 1, k):
        h.state(new[i], rels[i], new[i + 1])
    h.touched |= set(ents) | set(new)
    question = h.rng.choice(multihop_questions(rels, h.name(ents[0])))
    return question, h.answer(new[-1]), h.answer(ents[-1])


def _add_twin(h: _History) -> bool:
    people = sorted(p for p in h.world.by_type["person"] if p not in h.touched
                    and not any((p, r) in h.used for r in TWIN_RELATIONS))
    if not people:
        return False
    person = h.rng.choice(people)
    twin = person + "~twin"
    for r in TWIN_RELATIONS:
        h.state(person, r, h.world.facts[(person, r)])
        h.state(twin, r, h.other_object(r, h.world.facts[(person, r)]))
    h.touched.add(person)
    return True


def _order(h: _History) -> list[int]:
    """A random order of the lines in which each replacement comes after the line it replaces."""
    keys = [h.rng.random() for _ in h.lines]
    for old, new in h.pairs:
        if keys[old] > keys[new]:
            keys[old], keys[new] = keys[new], keys[old]
    return sorted(range(len(h.lines)), key=keys.__getitem__)


def generate_history(tier: str, index: int, seed: int, homonyms: int = 2) -> tuple[FactRow, FactRow]:
    """The (single-hop, multi-hop) rows of one generated history; deterministic in its arguments.

    Example: ``sh, mh = generate_history("8k", 0, seed=1)``; ``sh.context == mh.context``.
    """
    if tier not in TIERS:
        raise ValueError(f"generated tiers are {', '.join(TIERS)}, got {tier!r}")
    budget = TIERS[tier] * CHARS_PER_TOKEN
    h = _History(World(seed * 1000 + index), random.Random(f"factconsolidation-{seed}-{tier}-{index}"))
    asked: dict[str, list[tuple[str, list[str], list[str]]]] = {"sh": [], "mh": []}
    for _ in range(20 * QUESTIONS_PER_HOP):
        if h.chars > QUESTION_SHARE * budget or min(map(len, asked.values())) >= QUESTIONS_PER_HOP:
            break
        hop = "sh" if len(asked["sh"]) <= len(asked["mh"]) else "mh"
        got = (_single_hop if hop == "sh" else _multi_hop)(h)
        if got is not None and got[0] not in {q for q, _, _ in asked[hop]}:
            asked[hop].append(got)
    for _ in range(homonyms):
        _add_twin(h)
    filler = sorted(k for k in h.world.facts if k not in h.used)
    h.rng.shuffle(filler)
    for s, r in filler:
        if h.chars >= budget:
            break
        old = h.world.facts[(s, r)]
        if h.rng.random() < REPLACED_SHARE:
            h.replace(s, r, old, h.other_object(r, old, s))
        else:
            h.state(s, r, old)
    order = _order(h)
    lines = [relation_templates("cloze")[r].replace("[X]", h.name(s)).replace("__", h.name(o)) + "."
             for s, r, o in (h.lines[i] for i in order)]
    context = "\n".join(f"{n}. {text}" for n, text in enumerate(lines))
    ids = {name: sorted(e.replace("~twin", "-twin") for e in eids) for name, eids in sorted(h.names.items())}
    rows = []
    for hop in ("sh", "mh"):
        qs = asked[hop]
        meta = {"source": f"factconsolidation_{hop}_{tier}",
                "qa_pair_ids": [f"gen{index}_{hop}_{tier}_no{i}" for i in range(len(qs))]}
        rows.append(FactRow(context, [q for q, _, _ in qs], [a for _, a, _ in qs], meta,
                            [p for _, _, p in qs], ids))
    return rows[0], rows[1]


def generate_rows(tiers: tuple[str, ...] = ("8k",), n_histories: int = 3, seed: int = 0,
                  homonyms: int = 2) -> list[FactRow]:
    """``n_histories`` generated histories per tier, two rows each (sh, mh), in the released schema.

    Example: ``save_rows(generate_rows(("8k",), 2, seed=1), "fc-generated.json")`` writes a file
    :func:`schema.load_rows` reads back.
    """
    return [row for tier in tiers for i in range(n_histories) for row in generate_history(tier, i, seed, homonyms)]


def dataset_hash(rows: list[FactRow]) -> str:
    """SHA-256 of the rows' JSON (stable across runs with the same arguments)."""
    blob = json.dumps([to_json(r) for r in rows], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()
