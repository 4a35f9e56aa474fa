"""Seeded generator of the derived-note groups (paper app:v5_propagation, L5819-5832; spec partD section 8).

Each group holds a rule mapping two zones to two routes, an old zone record A
("At Time 1, the depot of X is in zone Z1."), a derived Time-1 note C that
applies the rule correctly ("So at Time 1, X ships by route R1."), and an
authoritative Time-2 zone update B ("At Time 2, the depot of X moved to zone
Z2."). The current question asks for the route after B (reference: the route of
Z2, the other route); the historical question asks for the zone before B
(reference: Z1).

Counterbalancing ("Values and their order are counterbalanced"; the scheme is
UNCLEAR in the paper, ours):

* **values**: groups come in pairs (2k, 2k+1) that share their two zones and two
  routes with the old and new roles exchanged, so every zone and route is the
  old value in one group and the new value in the other (``swapped`` marks the
  second group of a pair). Each group has its own entity.
* **order**: the rule lists the old zone first in groups i with i mod 4 in
  {0, 3} and second otherwise, so within each pair of pairs both value roles
  appear in both orders (25 / 25 of 50 groups).

Names are fictional (syllable zones, made-up trading firms, ``R-NN`` routes),
distinct within a group, drawn from ``random.Random(seed)``.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass

#: 20260919, the paper's interval seed reused for the appendix fixtures (every generated fixture
#: of the components, derived-note and session-bias studies); also the study's default seed.
SEED = 20260919

from . import strings

#: Paper: fifty synthetic groups; intervals use seed 20260919 (spec partD section 0).
N_GROUPS = 50
#: The two note conditions: C present, or its token interval replaced by neutral tokens.
NOTES = ("derived", "neutral")
QUERIES = ("current", "historical")


@dataclass(frozen=True)
class Group:
    """One derived-note group (values only; texts are properties)."""

    group_id: str
    index: int
    entity: str
    old_zone: str
    new_zone: str
    old_route: str
    new_route: str
    old_listed_first: bool
    swapped: bool

    @property
    def rule(self) -> str:
        """The routing rule, zones in the group's counterbalanced order."""
        pairs = [(self.old_zone, self.old_route), (self.new_zone, self.new_route)]
        if not self.old_listed_first:
            pairs.reverse()
        (z1, r1), (z2, r2) = pairs
        return strings.RULE.format(zone1=z1, route1=r1, zone2=z2, route2=r2)

    @property
    def record_a(self) -> str:
        return strings.RECORD_A.format(entity=self.entity, old_zone=self.old_zone)

    @property
    def derived_note(self) -> str:
        """C: the rule applied to A's zone (the correct Time-1 route)."""
        return strings.DERIVED_NOTE.format(entity=self.entity, old_route=self.old_route)

    @property
    def record_b(self) -> str:
        return strings.RECORD_B.format(entity=self.entity, new_zone=self.new_zone)

    def route_of(self, zone: str) -> str:
        """The rule's route for ``zone``."""
        table = {self.old_zone: self.old_route, self.new_zone: self.new_route}
        return table[zone]


@dataclass(frozen=True)
class Query:
    """One question with its reference, the contrasting value and the canonical JSON candidates."""

    kind: str  # "current" or "historical"
    question: str
    reference: str
    other: str

    @property
    def candidates(self) -> tuple[str, str]:
        """(right, other) canonical JSON answers ``{"answer": "value"}``."""
        return json_answer(self.reference), json_answer(self.other)


@dataclass(frozen=True)
class Case:
    """A group in one note condition: one history to prefill."""

    group: Group
    note: str

    @property
    def case_id(self) -> str:
        return f"{self.group.group_id}/{self.note}"


def json_answer(value: str) -> str:
    """The canonical answer string ``{"answer": "value"}``."""
    return json.dumps({"answer": value})


def queries(group: Group) -> list[Query]:
    """Current (route after B; other: A's route) and historical (zone before B; other: B's zone) questions."""
    return [
        Query("current", strings.QUESTION_PREFIX + strings.CURRENT_QUESTION.format(entity=group.entity),
              reference=group.route_of(group.new_zone), other=group.route_of(group.old_zone)),
        Query("historical", strings.QUESTION_PREFIX + strings.HISTORICAL_QUESTION.format(entity=group.entity),
              reference=group.old_zone, other=group.new_zone),
    ]


def _zone(rng: random.Random) -> str:
    k = rng.choice((2, 2, 3))
    return "".join(rng.sample(strings.ZONE_SYLLABLES, k)).capitalize()


def _entity(rng: random.Random) -> str:
    return f"{rng.choice(strings.ENTITY_STEMS)}{rng.choice(strings.ENTITY_ENDINGS)} {rng.choice(strings.ENTITY_TRADES)}"


def _distinct(draw, rng: random.Random, used: set[str]) -> str:
    while True:
        value = draw(rng)
        if value not in used and not any(value in u or u in value for u in used):
            used.add(value)
            return value


def generate_groups(n: int = N_GROUPS, seed: int = SEED) -> list[Group]:
    """``n`` counterbalanced groups (module docstring), deterministic in ``seed``."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    rng = random.Random(seed)
    entities: set[str] = set()
    groups: list[Group] = []
    for pair in range((n + 1) // 2):
        zones: set[str] = set()
        z1, z2 = _distinct(_zone, rng, zones), _distinct(_zone, rng, zones)
        r1, r2 = (strings.ROUTE_FORMAT.format(number=x) for x in rng.sample(strings.ROUTE_NUMBERS, 2))
        for swapped in (False, True):
            i = 2 * pair + int(swapped)
            if i >= n:
                break
            old, new = ((z2, r2), (z1, r1)) if swapped else ((z1, r1), (z2, r2))
            groups.append(Group(
                group_id=f"dn-{i:03d}", index=i, entity=_distinct(_entity, rng, entities),
                old_zone=old[0], new_zone=new[0], old_route=old[1], new_route=new[1],
                old_listed_first=i % 4 in (0, 3), swapped=swapped,
            ))
    return groups


def generate_cases(n: int = N_GROUPS, seed: int = SEED, notes: tuple[str, ...] = NOTES) -> list[Case]:
    """Every group in every note condition, group-major (a group's notes are consecutive)."""
    unknown = set(notes) - set(NOTES)
    if unknown or not notes:
        raise ValueError(f"notes must be a non-empty subset of {NOTES}, got {notes}")
    return [Case(g, note) for g in generate_groups(n, seed) for note in notes]


def dataset_hash(groups: list[Group]) -> str:
    """SHA-256 of the groups' values and texts (changes whenever a template or value changes)."""
    blob = json.dumps([{**asdict(g), "texts": [g.rule, g.record_a, g.derived_note, g.record_b],
                        "queries": [asdict(q) for q in queries(g)]} for g in groups], sort_keys=True)
    return hashlib.sha256((blob + strings.SYSTEM + strings.neutral_note()).encode()).hexdigest()
