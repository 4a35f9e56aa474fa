"""Controlled history clusters (paper appendix "Controlled Histories and Paired Analysis", L1770-1795;
spec partD section 7): shared by the component and question-relevance studies (the histories, under
their raw prompt, ``studies.components.data.prompt``) and the native record-pair study (the records alone).

The paper: 400 clusters, 5 families (location, API endpoint, preference, deadline,
incident cause) x 80. A CURRENT continuation repeats the old value, a SUPERSEDED one
replaces it; each has a target and an unrelated query; "unrelated queries concern
another entity with the same attribute"; "answer order, old-span position, and value
direction are counterbalanced". It publishes no entity, value or wording.

One cluster here holds, as history segments (names in brackets):

* ``old``: the old record, the target entity's attribute with the old value
  (the *old span* is every token of this segment);
* ``note``: a neutral note; its first tokens, as many as the old span, are the
  *matched span* (spec partD section 0: the matched control is "a neutral span
  that is disjoint from A and B and comes before the question");
* ``other``: a record of another entity with the same attribute (what the unrelated
  query asks about);
* ``later``: the continuation statement, the target entity's attribute with the old
  value (CURRENT) or the new value (SUPERSEDED); the two states differ only there.

Our choices (UNCLEAR in the paper):

* Entities and values are fictional (names built from syllables, seeded
  ``random.Random``), so no answer can come from the weights; endpoints, plans, dates
  and incident causes are generic strings attached to fictional entities.
* The matched span is taken from the neutral note, not from the other entity's
  record: masking or zeroing that record would remove the unrelated query's own
  evidence, so the unrelated-query accuracy criterion (old span vs matched span)
  could not detect collateral damage.
* The options are named in the query ("... now: X or Y?"); answer order = which option
  is listed first, counterbalanced separately for the target and the unrelated query.
  The query is the same text in both states.
* Target options: the old and the new value (expected: the old value in CURRENT, the
  new value in SUPERSEDED; so in CURRENT the alternative never occurs in the history).
  Unrelated options: the other entity's value and a distractor, a fourth value of the
  family that occurs nowhere in the history.
* Old-span position: ``early`` = old, note, other, later; ``late`` = other, note, old,
  later (the old record is before or after the matched span).
* Value direction: values are drawn as an ordered pair (for deadlines, the earlier
  date first); direction 0 makes the first the old value, direction 1 the second.
* Counterbalancing: cluster ``i`` of family ``f`` takes pattern ``c = (i + f) % 8``:
  bit 0 = old value listed first in the target query, bit 1 = ``late`` position,
  bit 2 = direction; the unrelated query lists the other entity's value first iff
  bit 0 xor bit 1. With ``n_per_family`` a multiple of 8 every family is balanced.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass

#: 20260919, the paper's interval seed reused for the appendix fixtures (every generated fixture
#: of the components, derived-note and session-bias studies); also the study's default seed.
SEED = 20260919

FAMILIES = ("location", "api_endpoint", "preference", "deadline", "incident_cause")
STATES = ("current", "superseded")
QUERIES = ("target", "unrelated")
POSITIONS = ("early", "late")
#: Clusters per family in the paper (L1772: 400 clusters equally split over 5 families).
PAPER_CLUSTERS_PER_FAMILY = 80

# UNCLEAR: joiner between the records of a history (the paper says only "the history").
# It must equal the last character of HISTORY_OPEN: the history header is a segment of its
# own ("History:") followed by the segment separator (see ``studies.components.data.prompt``).
RECORD_JOINER = "\n"

# UNCLEAR: record wording. "Statements share entity and attribute phrases within each family"
# (L1776): the old record, the other entity's record and the later continuation use one frame
# and differ only in the label, the entity and the value. The continuation ("later
# statement") repeats the old value (CURRENT) or replaces it (SUPERSEDED).
OLD_RECORD = "Record: the {attribute} of {entity} is {value}."
OTHER_RECORD = "Record: the {attribute} of {entity} is {value}."
LATER_RECORD = "Later record: the {attribute} of {entity} is {value}."

# UNCLEAR: query wording. The two options are named in the query, in a counterbalanced order
# ("Answer order ... counterbalanced", L1777); the target and unrelated queries share the frame.
QUERY = "What is the {attribute} of {entity} now: {first} or {second}?"

# UNCLEAR: the neutral note whose first tokens form the matched span (spec partD section 0:
# "a neutral span that is disjoint from A and B and comes before the question"). Each note is
# two of these sentences (joined by one space), drawn per cluster; every note is longer in
# tokens than any old record, so an equal-token matched span always fits.
NOTE_SENTENCES = (
    "A square seal is printed beside a blank signature box.",
    "The cover is gray and the folder is closed.",
    "A paper clip holds the margin of the second page in place.",
    "The binder has a blue spine and a plain white label.",
    "A folded sheet lies under the stapler on the shelf.",
    "The envelope is sealed and its flap is slightly creased.",
    "A pencil mark is visible near the lower edge of the form.",
    "The archive box is stacked beside two empty trays.",
)
NOTE_JOINER = " "

# --- fictional vocabulary (UNCLEAR: ours) ------------------------------------------------------
_NAME_ONSETS = ("Kor", "Bel", "Tav", "Mir", "Dun", "Sel", "Var", "Quin", "Hol", "Zan", "Pel", "Orr", "Fen",
                "Gal", "Ryn", "Wex", "Lom", "Cad", "Nev", "Tor")
_NAME_MIDDLES = ("an", "el", "or", "iv", "ar", "os", "ul", "em")
_NAME_CODAS = ("del", "mark", "wyn", "dor", "vale", "rick", "thorn", "ley", "mont", "sby", "rane", "fast")
_CITY_ONSETS = ("Ask", "Brev", "Cal", "Dray", "Esk", "Fal", "Grav", "Hask", "Isk", "Jor", "Karn", "Lisk",
                "Morv", "Nask", "Ost", "Prav", "Rusk", "Sarn", "Tarv", "Ulm")
_CITY_CODAS = ("holm", "ora", "bury", "grad", "ness", "ovia", "mere", "stad", "ino", "akar", "uth", "elle")
_RESOURCES = ("invoices", "orders", "payments", "accounts", "refunds", "reports", "tickets", "profiles",
              "uploads", "sessions", "shipments", "receipts", "contacts", "messages", "catalogs", "coupons")
_TIERS = ("Starter", "Growth", "Business", "Premium", "Scale", "Basic", "Standard", "Advanced", "Launch",
          "Studio", "Core", "Select")
_BILLING = ("Monthly", "Annual")
_MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December")
_CAUSES = ("router firmware", "a cooling failure", "an expired certificate", "disk exhaustion",
           "a DNS misconfiguration", "a power outage", "a memory leak", "configuration drift", "a faulty deploy",
           "a network partition", "clock skew", "a fiber cut", "a database deadlock", "a cache stampede",
           "a load balancer bug", "quota exhaustion", "a kernel panic", "license expiry", "a faulty switch",
           "a schema migration")
#: Attribute phrase per family (shared by every statement and query of the family).
ATTRIBUTES = {"location": "office city", "api_endpoint": "API endpoint", "preference": "preferred plan",
              "deadline": "deadline", "incident_cause": "root cause"}


@dataclass(frozen=True)
class Cluster:
    """One controlled history cluster (both states, both queries); see the module docstring."""

    cluster_id: str
    family: str
    index: int
    attribute: str
    entity: str
    other_entity: str
    old_value: str
    new_value: str
    other_value: str
    distractor: str
    note: str
    position: str  # "early" | "late"
    direction: int  # 0: old = first of the drawn pair, 1: old = second
    old_listed_first: bool  # target query names the old value first
    other_listed_first: bool  # unrelated query names the other entity's value first

    def segments(self, state: str) -> list[tuple[str, str]]:
        """History segments (name, text) in order, without the ``History:`` header."""
        if state not in STATES:
            raise ValueError(f"state must be one of {STATES}, got {state!r}")
        old = OLD_RECORD.format(attribute=self.attribute, entity=self.entity, value=self.old_value)
        other = OTHER_RECORD.format(attribute=self.attribute, entity=self.other_entity,
                                            value=self.other_value)
        value = self.old_value if state == "current" else self.new_value
        later = LATER_RECORD.format(attribute=self.attribute, entity=self.entity, value=value)
        first, third = (("old", old), ("other", other)) if self.position == "early" else (("other", other),
                                                                                          ("old", old))
        return [first, ("note", self.note), third, ("later", later)]

    def history_text(self, state: str) -> str:
        """The history as the paper's "the history": records joined by ``RECORD_JOINER``."""
        return RECORD_JOINER.join(text for _, text in self.segments(state))

    def options(self, query: str) -> tuple[str, str]:
        """The two options of a query, in the order the query names them."""
        if query == "target":
            pair = (self.old_value, self.new_value)
            return pair if self.old_listed_first else pair[::-1]
        if query == "unrelated":
            pair = (self.other_value, self.distractor)
            return pair if self.other_listed_first else pair[::-1]
        raise ValueError(f"query must be one of {QUERIES}, got {query!r}")

    def expected(self, state: str, query: str) -> str:
        """The correct option: the current value of the queried entity in ``state``."""
        if query == "unrelated":
            return self.other_value
        return self.old_value if state == "current" else self.new_value

    def query(self, query: str) -> str:
        """The query text (the same in both states)."""
        first, second = self.options(query)
        entity = self.entity if query == "target" else self.other_entity
        return QUERY.format(attribute=self.attribute, entity=entity, first=first, second=second)


def generate_clusters(n_per_family: int = PAPER_CLUSTERS_PER_FAMILY, seed: int = SEED,
                      families: tuple[str, ...] = FAMILIES) -> list[Cluster]:
    """``n_per_family`` clusters of each family, deterministic in ``seed``; entities are unique."""
    if n_per_family < 1:
        raise ValueError("n_per_family must be at least 1")
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        raise ValueError(f"unknown families {unknown}; choose from {FAMILIES}")
    rng = random.Random(seed)
    names = [a + b + c for a in _NAME_ONSETS for b in _NAME_MIDDLES for c in _NAME_CODAS]
    rng.shuffle(names)
    incidents = rng.sample(range(1000, 10000), 2 * n_per_family * len(FAMILIES))
    out = []
    for family in families:
        for i in range(n_per_family):
            c = (i + FAMILIES.index(family)) % 8
            listed, late, direction = bool(c & 1), bool(c & 2), (c >> 2) & 1
            entity, other = (_entity(family, names, incidents) for _ in range(2))
            first, second, other_value, distractor = _values(family, rng)
            old, new = (first, second) if direction == 0 else (second, first)
            note = NOTE_JOINER.join(rng.sample(NOTE_SENTENCES, 3))
            out.append(Cluster(
                cluster_id=f"{family}-{i:03d}", family=family, index=i, attribute=ATTRIBUTES[family],
                entity=entity, other_entity=other, old_value=old, new_value=new, other_value=other_value,
                distractor=distractor, note=note, position="late" if late else "early", direction=direction,
                old_listed_first=listed, other_listed_first=listed != late))
    return out


def clusters_hash(clusters: list[Cluster]) -> str:
    """SHA-256 of the clusters' fields (identifies a generated dataset)."""
    blob = json.dumps([asdict(c) for c in clusters], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _entity(family: str, names: list[str], incidents: list[int]) -> str:
    if family == "incident_cause":
        return f"incident INC-{incidents.pop()}"
    name = names.pop()
    return {"location": f"the {name} team", "api_endpoint": f"the {name} service",
            "preference": f"the {name} account", "deadline": f"Project {name}"}[family]


def _values(family: str, rng: random.Random) -> tuple[str, str, str, str]:
    """Four different values: an ordered (first, second) pair, the other entity's value, a distractor.

    Within each pair (first/second, other/distractor) the two have equal character length
    when the pool allows it, so option lengths are not a cue.
    """
    if family == "deadline":
        months = rng.sample(range(12), 4)
        dates = [(m, rng.randrange(10, 29)) for m in months]
        first, second = sorted(dates[:2])  # value direction: the earlier date first
        return tuple(f"{_MONTHS[m]} {d}" for m, d in (first, second, dates[2], dates[3]))  # type: ignore
    pool = _pool(family)
    picked: list[str] = []
    for _ in range(2):
        a = rng.choice([v for v in pool if v not in picked])
        picked.append(a)
        same = [v for v in pool if v not in picked and len(v) == len(a)]
        b = rng.choice(same or [v for v in pool if v not in picked])
        picked.append(b)
    return picked[0], picked[1], picked[2], picked[3]


def _pool(family: str) -> list[str]:
    if family == "location":
        return [a + b for a in _CITY_ONSETS for b in _CITY_CODAS]
    if family == "api_endpoint":
        return [f"/v{v}/{r}" for r in _RESOURCES for v in (1, 2, 3)]
    if family == "preference":
        return [f"{t} {b}" for t in _TIERS for b in _BILLING]
    if family == "incident_cause":
        return list(_CAUSES)
    raise ValueError(f"unknown family {family!r}")
