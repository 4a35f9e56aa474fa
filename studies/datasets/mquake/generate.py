"""Fictional MQuAKE-style cases in the released schema (no model, no real entities).

A seeded fictional world (countries, cities, languages, people, companies and their
facts) is built first; each k-hop case is a path s0 -r1-> e1 ... -rk-> ek through it.
One or more hops are rewritten to a new target of the same type; the new chain follows
the world's facts from there, exactly as MQuAKE's new chains follow Wikidata. Cases
carry ``requested_rewrite``, three multi-hop paraphrases, answers and aliases,
``single_hops``/``new_single_hops`` and ``orig`` triples, like the released files.

Relations: 12 of MQuAKE's 44, with the upstream cloze and question templates verbatim
(``strings.py``). The upstream repository ships no multi-hop question templates (its
questions were written by gpt-3.5-turbo), so the three paraphrases nest our own noun
phrases (``strings.NOUN_PHRASES``): UNCLEAR.

Choices of ours (UNCLEAR upstream/paper): world sizes; entity names from syllables;
aliases per type; number of edits per case (1..k, weighted towards fewer, as in
MQuAKE-CF where most cases have one or two edits); every edit target is new to the case
(not on the old chain), so value masks are unambiguous and no new value is ever stated
as an old value.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass


from . import templates as strings
from .schema import MQuAKECase, Orig, Rewrite, SingleHop, Target, to_json

#: 20260912: contextual MQuAKE case generation (``studies.datasets.mquake.generate``).
MQUAKE_SEED = 20260912

DEFAULT_N_PER_HOPS = {2: 200, 3: 200, 4: 200}

#: relation id -> (subject type, object type)
RELATIONS = {
    "P27": ("person", "country"),
    "P19": ("person", "city"),
    "P26": ("person", "person"),
    "P108": ("person", "company"),
    "P1412": ("person", "language"),
    "P36": ("country", "city"),
    "P35": ("country", "person"),
    "P37": ("country", "language"),
    "P17": ("city", "country"),
    "P159": ("company", "city"),
    "P112": ("company", "person"),
    "P169": ("company", "person"),
}
# UNCLEAR (ours): world sizes.
WORLD_SIZES = {"country": 36, "city_per_country": 4, "person": 320, "company": 80}

_ONSETS = ("b", "br", "d", "dr", "f", "g", "gr", "k", "kr", "l", "m", "n", "p", "r", "s", "st", "t", "th", "v",
           "vr", "z", "sk", "h", "j", "q")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ei", "ou", "y")
_CODAS = ("", "", "n", "r", "l", "s", "th", "k", "m", "x", "v")
_COUNTRY_SUFFIX = ("ia", "ara", "ovia", "enne", "istan", "mar", "ora")
_CITY_SUFFIX = ("", "holm", "vik", "port", "dale", "mere", "grad", "ton", "bourg")
_COMPANY_SUFFIX = ("Systems", "Holdings", "Works", "Industries", "Labs", "Group", "Dynamics", "Foundry")
_LANG_SUFFIX = ("ese", "ic", "ish", "i")
_STATE_FORMS = ("Republic of {}", "Kingdom of {}", "Federation of {}", "Commonwealth of {}")


@dataclass(frozen=True)
class Entity:
    id: str
    name: str
    type: str
    aliases: tuple[str, ...]


class World:
    """Fictional entities and one object per (entity, relation)."""

    def __init__(self, seed: int = MQUAKE_SEED):
        self.rng = random.Random(f"mquake-world-{seed}")
        self.entities: dict[str, Entity] = {}
        self.by_type: dict[str, list[str]] = {}
        self.facts: dict[tuple[str, str], str] = {}
        self._used: set[str] = set()
        self._build()

    # -- names ---------------------------------------------------------------------------
    def _stem(self, syllables: int) -> str:
        s = "".join(self.rng.choice(_ONSETS) + self.rng.choice(_VOWELS) + self.rng.choice(_CODAS)
                    for _ in range(syllables))
        return s.capitalize()

    def _fresh(self, make) -> tuple[str, tuple[str, ...]]:
        while True:
            name, aliases = make()
            keys = [name.lower()] + [a.lower() for a in aliases]
            if len(set(keys)) == len(keys) and not any(k in self._used for k in keys) and len(name) >= 5:
                self._used.update(keys)
                return name, aliases

    def _add(self, type_: str, make) -> str:
        name, aliases = self._fresh(make)
        eid = f"F{len(self.entities) + 1}"  # fictional ids, never Wikidata Q-ids
        self.entities[eid] = Entity(eid, name, type_, aliases)
        self.by_type.setdefault(type_, []).append(eid)
        return eid

    def _country(self):
        stem = self._stem(self.rng.choice((1, 2)))
        name = stem + self.rng.choice(_COUNTRY_SUFFIX)
        return name, (self.rng.choice(_STATE_FORMS).format(name),)

    def _language(self, country: str):
        def make():
            base = country.rstrip("aeiouy") or country
            name = base + self.rng.choice(_LANG_SUFFIX)
            return name, (f"{name} language",)
        return make

    def _city(self):
        name = self._stem(self.rng.choice((1, 2, 2))) + self.rng.choice(_CITY_SUFFIX)
        return name, (f"{name} City",)

    def _person(self):
        first, last = self._stem(2), self._stem(2)
        return f"{first} {last}", (f"{first[0]}. {last}",)

    def _company(self):
        stem = self._stem(self.rng.choice((2, 3)))
        return f"{stem} {self.rng.choice(_COMPANY_SUFFIX)}", (f"{stem} Corporation",)

    # -- world ---------------------------------------------------------------------------
    def _build(self) -> None:
        rng = self.rng
        countries = [self._add("country", self._country) for _ in range(WORLD_SIZES["country"])]
        cities_of = {}
        for c in countries:
            lang = self._add("language", self._language(self.entities[c].name))
            cities_of[c] = [self._add("city", self._city) for _ in range(WORLD_SIZES["city_per_country"])]
            for city in cities_of[c]:
                self.facts[(city, "P17")] = c
            self.facts[(c, "P36")] = cities_of[c][0]
            self.facts[(c, "P37")] = lang
        people = [self._add("person", self._person) for _ in range(WORLD_SIZES["person"])]
        companies = [self._add("company", self._company) for _ in range(WORLD_SIZES["company"])]
        cities = self.by_type["city"]
        for c in countries:
            self.facts[(c, "P35")] = rng.choice(people)
        for co in companies:
            self.facts[(co, "P159")] = rng.choice(cities)
            self.facts[(co, "P112")] = rng.choice(people)
            self.facts[(co, "P169")] = rng.choice(people)
        order = people[:]
        rng.shuffle(order)
        for a, b in zip(order[::2], order[1::2]):
            self.facts[(a, "P26")], self.facts[(b, "P26")] = b, a
        for p in people:
            country = rng.choice(countries)
            self.facts[(p, "P27")] = country
            self.facts[(p, "P19")] = rng.choice(cities_of[country] if rng.random() < 0.7 else cities)
            self.facts[(p, "P108")] = rng.choice(companies)
            # Most people speak their country's official language.
            self.facts[(p, "P1412")] = (self.facts[(country, "P37")] if rng.random() < 0.7
                                        else rng.choice(self.by_type["language"]))

    def name(self, eid: str) -> str:
        return self.entities[eid].name

    def aliases(self, eid: str) -> list[str]:
        return list(self.entities[eid].aliases)


def _relations_from(type_: str, last: bool) -> list[str]:
    rels = [r for r, (s, _) in RELATIONS.items() if s == type_]
    if not last:  # languages have no outgoing relations; they can only end a chain
        rels = [r for r in rels if RELATIONS[r][1] != "language"]
    return rels


def _sample_chain(world: World, rng: random.Random, k: int) -> tuple[list[str], list[str]] | None:
    """Entities e0..ek and relations r1..rk of an old chain with distinct entities."""
    start_type = rng.choice(("person", "country", "city", "company"))
    ents = [rng.choice(world.by_type[start_type])]
    rels: list[str] = []
    for i in range(k):
        options = _relations_from(world.entities[ents[-1]].type, last=i == k - 1)
        rng.shuffle(options)
        for r in options:
            obj = world.facts[(ents[-1], r)]
            if obj not in ents:
                break
        else:
            return None
        ents.append(obj)
        rels.append(r)
    return ents, rels


def _edit_chain(world: World, rng: random.Random, ents: list[str], rels: list[str], positions: list[int]):
    """New chain after rewriting hops ``positions``; None when the draw is unusable."""
    new = [ents[0]]
    edits = []  # (hop, subject, relation, true object, new object)
    for i, r in enumerate(rels):
        subj = new[-1]
        true_obj = world.facts[(subj, r)]
        if i in positions:
            pool = [e for e in world.by_type[RELATIONS[r][1]] if e not in ents and e not in new and e != true_obj]
            obj = rng.choice(pool)
            edits.append((i, subj, r, true_obj, obj))
        else:
            obj = true_obj
            if obj in new:
                return None
        new.append(obj)
    if new[-1] == ents[-1]:
        return None
    return new, edits


def _nest(rels: list[str], subject: str, forms: list[int]) -> str:
    """Nested noun phrase of hops ``rels`` applied to ``subject``; forms[i] picks NOUN_PHRASES[r][.]."""
    phrase = subject
    for r, f in zip(rels, forms):
        phrase = strings.NOUN_PHRASES[r][f].format(phrase)
    return phrase


def multihop_questions(rels: list[str], subject: str) -> list[str]:
    """Three distinct paraphrases of the k-hop question (UNCLEAR upstream; module docstring).

    1. the last relation's upstream question template around the inner hops' first phrases;
    2. a type question ("Which city is ...?") of the last hop's first phrase around the
       inner hops' second phrases;
    3. "What is the name of ...?" of the last hop's second phrase around the inner hops'
       first phrases.
    """
    k = len(rels)
    inner1 = _nest(rels[:-1], subject, [0] * (k - 1))
    q1 = strings.question_template(rels[-1]).replace("[X]", inner1)
    q2 = strings.TYPE_QUESTION[RELATIONS[rels[-1]][1]].format(_nest(rels, subject, [1] * (k - 1) + [0]))
    q3 = strings.THIRD_PARAPHRASE.format(_nest(rels, subject, [0] * (k - 1) + [1]))
    if len({q1, q2, q3}) != 3:
        raise AssertionError(f"paraphrases not distinct: {[q1, q2, q3]}")
    return [q1, q2, q3]


def _hop(world: World, s: str, r: str, o: str) -> SingleHop:
    return SingleHop(question=strings.single_hop_question(r, world.name(s)), cloze=strings.cloze(r, world.name(s)),
                     answer=world.name(o), answer_alias=world.aliases(o))


def _case(world: World, case_id: int, ents, rels, new, edits) -> MQuAKECase:
    name = world.name
    rewrites = [Rewrite(prompt=strings.rewrite_prompt(r), relation_id=r, target_new=Target(name(o_new), o_new),
                        target_true=Target(name(o_true), o_true), subject=name(s),
                        question=strings.single_hop_question(r, name(s)))
                for _, s, r, o_true, o_new in edits]
    old_t = [[ents[i], r, ents[i + 1]] for i, r in enumerate(rels)]
    new_t = [[new[i], r, new[i + 1]] for i, r in enumerate(rels)]
    label = lambda t: [name(t[0]), strings.RELATION_LABELS[t[1]], name(t[2])]  # noqa: E731
    return MQuAKECase(
        case_id=case_id,
        requested_rewrite=rewrites,
        questions=multihop_questions(rels, name(ents[0])),
        answer=name(ents[-1]),
        answer_alias=world.aliases(ents[-1]),
        new_answer=name(new[-1]),
        new_answer_alias=world.aliases(new[-1]),
        single_hops=[_hop(world, *t) for t in old_t],
        new_single_hops=[_hop(world, *t) for t in new_t],
        orig=Orig(triples=old_t, triples_labeled=[label(t) for t in old_t], new_triples=new_t,
                  new_triples_labeled=[label(t) for t in new_t],
                  edit_triples=[[s, r, o_new] for _, s, r, _, o_new in edits]),
    )


def generate_cases(n_per_hops: dict[int, int] | None = None, seed: int = MQUAKE_SEED) -> list[MQuAKECase]:
    """``n_per_hops[k]`` fictional k-hop cases per hop count k, ordered by k; deterministic.

    Each hop count draws from its own generator (seeded by ``seed`` and k), so changing the
    count for one k leaves the other hop counts' cases unchanged (case ids aside).
    """
    n_per_hops = dict(DEFAULT_N_PER_HOPS if n_per_hops is None else n_per_hops)
    world = World(seed)
    cases: list[MQuAKECase] = []
    for k in sorted(n_per_hops):
        if k < 1:
            raise ValueError(f"hop count must be >= 1, got {k}")
        rng = random.Random(f"mquake-cases-{seed}-{k}")
        seen: set[tuple] = set()
        made = 0
        while made < n_per_hops[k]:
            chain = _sample_chain(world, rng, k)
            if chain is None:
                continue
            ents, rels = chain
            n_edits = rng.choices(range(1, k + 1), weights=[1 / j for j in range(1, k + 1)])[0]
            positions = sorted(rng.sample(range(k), n_edits))
            edited = _edit_chain(world, rng, ents, rels, positions)
            if edited is None:
                continue
            key = (tuple(ents), tuple(rels))
            if key in seen:
                continue
            seen.add(key)
            cases.append(_case(world, len(cases), ents, rels, *edited))
            made += 1
    return cases


def dataset_hash(cases: list[MQuAKECase]) -> str:
    """SHA-256 of the cases' JSON (stable across runs with the same arguments)."""
    blob = json.dumps([to_json(c) for c in cases], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()
