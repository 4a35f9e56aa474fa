"""The native record-pair dataset (paper appendices "Recognizing Replacement from Record Representations" and
"Text Similarity Perfectly Separates the Controlled-History Pairs", seed L2173-2190 and L2312-2386; spec
partB section 1, D2).

Record pairs without a question, in two panels, with two tasks:

* **matching**: is the later record B about the earlier record A's entity and attribute? (label 1 when it is;
  scored by the key similarity s_K);
* **relation**, among the matching pairs only: does B replace A's value (1) or confirm it (0)? (scored by the
  fixed V distance d_V, larger = replacement).

Every group (a *component*, see below) holds four records and four distinct text pairs, which serve six
labelled comparisons: ``A>Bc`` (matching 1, relation 0), ``A>Br`` (matching 1, relation 1), ``X>Bc`` and ``X>Br``
(matching 0), where ``A`` is the earlier record, ``X`` the same record about another entity, ``Bc`` the
confirming and ``Br`` the replacing later record. A distinct text pair is scored once; its matching and relation
comparisons (and any repeat of the same two texts elsewhere) share that score.

**Intrinsic panel** (the paper's held-out record pairs: 216 components over groups with the same or a different
alias): standalone records built from the recognition vocabulary (:mod:`kvprobe.studies.datasets.recognition.families`:
five families, six slot phrasings each), in two strata of :data:`INTRINSIC_GROUPS` groups:

* ``same_alias``: both later records name the entity exactly as A does; ``Bc`` repeats A's value, ``Br`` states a
  new one. The texts of ``A>Bc`` differ only in the frame's marker (``Record:`` / ``Later record:``), those of
  ``A>Br`` in the marker and the value, so the surface baselines separate the two almost perfectly (the paper:
  1.0).
* ``different_alias``: ``Bc`` repeats A's value under an alias of the entity (:func:`alias`: "the Northfield
  group" for "the Northfield team"), ``Br`` states a new value under A's own name. Each differs from A in one
  phrase besides the marker, so text overlap cannot tell which one keeps A's value (the paper: 0.5).

**Controlled-history panel** (400 components over the five update families): the records of the controlled
history clusters (:mod:`kvprobe.studies.datasets.controlled_histories`, the component and question-relevance
studies' histories): ``A`` = the old record, ``X`` = the other entity's record, ``Bc``/``Br`` = the later
record of the CURRENT/SUPERSEDED state. One frame per family, so token and character overlap separate the
relation perfectly in every family (the paper: 1.0, seed L2305-2310).

**Components** (the bootstrap units): distinct text pairs linked by a shared record text
(:func:`kvprobe.readouts.stats.connected_components` over the pairs' two texts). Entities are unique within a
panel, so every group is one component (216 intrinsic, 400 history by default), but the estimator never assumes
it: a text shared between groups merges them.

[UNCLEAR] in the paper, our choices (docs/fidelity.md, native-pairs rows): every text and the whole construction
of both panels; the other-entity record as the matching negative (``X`` keeps A's value in the intrinsic panel,
so matching cannot rest on the value; the history panel's other record has its own value, as in the clusters);
the aliases; the alias stratum deciding which later record carries the alias. Our counts are not the paper's
(5,328 distinct pairs, 9,216 labelled comparisons): 4 and 6 per component give 2,464 and 3,696 by default.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from kvprobe.readouts.fixed import char_distance
from kvprobe.readouts.stats import connected_components
from kvprobe.studies.datasets import controlled_histories
from kvprobe.studies.datasets.recognition import families
from kvprobe.studies.datasets.recognition.cases import FAMILIES as RECORD_FAMILIES, capitalize
from kvprobe.studies.datasets.recognition.records import SHORT_NAMES

#: 20260924: the intrinsic panel (``studies.native_pairs.data``).
NATIVE_PAIRS_SEED = 20260924

PANELS = ("intrinsic", "history")
STRATA = ("same_alias", "different_alias")
TASKS = ("matching", "relation")
#: Groups per alias stratum (the paper's 216 intrinsic components: 108 + 108).
INTRINSIC_GROUPS = 108
#: The four records of a group and the four ordered pairs (earlier, later) it scores.
RECORDS = ("A", "X", "Bc", "Br")
PAIRS = (("A", "Bc"), ("A", "Br"), ("X", "Bc"), ("X", "Br"))
#: Labelled comparisons of each pair: (task, label); relation only among matching pairs.
COMPARISONS: dict[tuple[str, str], tuple[tuple[str, int], ...]] = {
    ("A", "Bc"): (("matching", 1), ("relation", 0)),
    ("A", "Br"): (("matching", 1), ("relation", 1)),
    ("X", "Bc"): (("matching", 0),),
    ("X", "Br"): (("matching", 0),),
}

# [UNCLEAR] ours: the intrinsic records' frames, (earlier, later) with the same words but the marker, so a
# confirmation under the same alias differs from A in the marker alone. Group i uses frame i % 4.
FRAMES = (
    ("Record: {slot} is {value}.", "Later record: {slot} is {value}."),
    ("Entry 1: {slot} is {value}.", "Entry 2: {slot} is {value}."),
    ("First note: {slot} is {value}.", "Second note: {slot} is {value}."),
    ("Initial status: {slot} is {value}.", "Current status: {slot} is {value}."),
)

#: [UNCLEAR] ours: another name of each family's entity (:func:`alias`), chosen (with SmolLM2's tokenizer) so that
#: neither token overlap nor edit distance tells the alias confirmation from the one-word value replacement.
ALIASES = {"office_city": "the {stem} group",            # "the Northfield team"
           "api_endpoint": "the {stem} server",          # "the Northfield service"
           "preferred_plan": "{name} Group Ltd",         # "Northfield Foods"
           "deadline": "Program {stem}",                 # "Project Northfield"
           "incident_cause": "support ticket INC-{key}"}  # "incident INC-4821"


def alias(family: str, key: int) -> str:
    """Another name of the entity :func:`kvprobe.studies.datasets.recognition.families.entity_name` gives ``key``
    (:data:`ALIASES`).

    >>> alias("office_city", 0), alias("preferred_plan", 0), alias("incident_cause", 4821)
    ('the Northfield group', 'Northfield Foods Group Ltd', 'support ticket INC-4821')
    """
    stem = families.STEMS[key] if family != "incident_cause" else ""
    return ALIASES[family].format(stem=stem, key=key, name=families.entity_name(family, key))


def _words(value: str) -> set[str]:
    """The words of a value (split at spaces and slashes; articles left out)."""
    return {w for w in value.replace("/", " ").split() if w not in ("a", "an")}


def edits(a: str, b: str) -> int:
    """Levenshtein distance of two strings (unit costs; :func:`kvprobe.readouts.fixed.char_distance` unnormalised)."""
    return round(char_distance(a, b) * max(len(a), len(b)))


def value_pair(rng: random.Random, family: str, stratum: str, edit: int | None = None) -> tuple[str, str]:
    """(old, new) values of one group: ``old`` uniform over the family's values; ``new`` uniform over those that
    share no word with ``old`` (``same_alias``: the replacement is plain to see), or (``different_alias``) differ
    from it in as few words as possible and then, given ``edit`` (the characters the alias changes), in a number
    of characters as close to ``edit`` as any (so neither text overlap nor edit distance tells the replacement
    from the confirmation under an alias); of equal length where any qualifies.

    >>> value_pair(random.Random(0), "api_endpoint", "different_alias")
    ('/v2/tenants', '/v3/tenants')
    """
    pool = families.values(family, families.VALUE_KEYS[family])
    old = pool[rng.randrange(len(pool))]
    if stratum == "same_alias":
        fits = [v for v in pool if not _words(v) & _words(old)]
    else:
        apart = {v: len(_words(v) ^ _words(old)) for v in pool if v != old}
        fits = [v for v, d in apart.items() if d == min(apart.values())]
        if edit is not None:
            gap = {v: abs(edits(old, v) - edit) for v in fits}
            fits = [v for v in fits if gap[v] == min(gap.values())]
    fits = [v for v in fits if len(v) == len(old)] or fits
    return old, fits[rng.randrange(len(fits))]


@dataclass(frozen=True)
class Group:
    """One group's four records (:data:`RECORDS`) and where it belongs."""

    group: str
    panel: str
    stratum: str  # intrinsic: an alias stratum; history: the update family
    family: str
    records: dict[str, str]

    def __hash__(self) -> int:
        return hash(self.group)


@dataclass(frozen=True)
class Comparison:
    """One labelled comparison: a task's label on a distinct pair, from one group."""

    task: str
    label: int
    group: str


@dataclass(frozen=True)
class Pair:
    """A distinct text pair (earlier ``a``, later ``b``), scored once, with every comparison that shares it."""

    pair_id: str
    a: str
    b: str
    comparisons: tuple[Comparison, ...]


@dataclass(frozen=True)
class Case:
    """One bootstrap component: its distinct pairs, in one panel and stratum."""

    case_id: str
    panel: str
    stratum: str
    family: str
    pairs: tuple[Pair, ...]

    @property
    def group(self) -> str:
        return self.case_id

    def texts(self) -> list[str]:
        """The component's record texts, each once, in order of first use."""
        return list(dict.fromkeys(t for p in self.pairs for t in (p.a, p.b)))


def intrinsic_groups(n: int = INTRINSIC_GROUPS, seed: int = NATIVE_PAIRS_SEED) -> list[Group]:
    """``n`` groups per alias stratum. Group ``i`` of a stratum: family ``i % 5``, frame ``i % 4``, slot phrasing
    ``(i // 5) % 6``; its two entities (A's and X's) are drawn without replacement within the family, so no
    record text recurs across groups; its values are ``families.pick_pair`` (equal length where possible)."""
    if n < 1:
        raise ValueError("n must be at least 1")
    rng = random.Random(seed)
    per_family = {f: sum(1 for s in STRATA for i in range(n) if RECORD_FAMILIES[i % 5] == f) for f in RECORD_FAMILIES}
    keys = {}
    for f in RECORD_FAMILIES:
        population = families.INCIDENT_NUMBERS if f == "incident_cause" else range(len(families.STEMS))
        if 2 * per_family[f] > len(population):
            raise ValueError(f"{n} groups per stratum need {2 * per_family[f]} {f} entities, "
                             f"the vocabulary has {len(population)}")
        keys[f] = rng.sample(population, 2 * per_family[f])
    out = []
    for stratum in STRATA:
        for i in range(n):
            family = RECORD_FAMILIES[i % 5]
            key, other = keys[family].pop(), keys[family].pop()
            earlier, later = FRAMES[i % len(FRAMES)]
            k = (i // 5) % len(families.SLOTS[family])
            name, other_name = families.entity_name(family, key), families.entity_name(family, other)
            confirming = alias(family, key) if stratum == "different_alias" else name
            old, new = value_pair(rng, family, stratum, edits(name, confirming) if confirming != name else None)

            def record(frame: str, entity: str, value: str) -> str:
                return capitalize(frame.format(slot=families.slot(family, k, entity), value=value))

            out.append(Group(
                group=f"in-{stratum.replace('_alias', '')}-{SHORT_NAMES[family]}-{i:03d}", panel="intrinsic",
                stratum=stratum, family=family,
                records={"A": record(earlier, name, old), "X": record(earlier, other_name, old),
                         "Bc": record(later, confirming, old), "Br": record(later, name, new)}))
    return out


def history_groups(n_per_family: int = controlled_histories.PAPER_CLUSTERS_PER_FAMILY,
                   seed: int = controlled_histories.SEED) -> list[Group]:
    """The records of the controlled history clusters (``generate_clusters(n_per_family, seed)``): A = the old
    record, X = the other entity's record, Bc/Br = the later record of the CURRENT/SUPERSEDED state."""
    out = []
    for c in controlled_histories.generate_clusters(n_per_family, seed):
        current, superseded = dict(c.segments("current")), dict(c.segments("superseded"))
        out.append(Group(group=f"hi-{c.cluster_id}", panel="history", stratum=c.family, family=c.family,
                         records={"A": current["old"], "X": current["other"], "Bc": current["later"],
                                  "Br": superseded["later"]}))
    return out


def build_cases(groups: Sequence[Group]) -> list[Case]:
    """Distinct pairs of the groups, each with the comparisons that share it, grouped into components
    (pairs linked by a shared record text), in order of first appearance. A component must lie in one panel
    and stratum (the bootstrap resamples components within them)."""
    pairs: dict[tuple[str, str], dict[str, Any]] = {}
    for g in groups:
        for a, b in PAIRS:
            key = (g.records[a], g.records[b])
            entry = pairs.setdefault(key, {"id": f"{g.group}:{a}>{b}", "groups": [], "comparisons": []})
            entry["groups"].append(g)
            entry["comparisons"] += [Comparison(task, label, g.group) for task, label in COMPARISONS[(a, b)]]
    component = connected_components({key: key for key in pairs})
    members: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for key, root in component.items():
        members.setdefault(root, []).append(key)
    cases = []
    for root, keys in members.items():
        where = {(g.panel, g.stratum, g.family) for k in keys for g in pairs[k]["groups"]}
        if len({w[:2] for w in where}) != 1:
            raise ValueError(f"a component spans several panels or strata: {sorted(where)}")
        panel, stratum, family = sorted(where)[0]
        cases.append(Case(case_id=pairs[root]["groups"][0].group, panel=panel, stratum=stratum,
                          family=family if len(where) == 1 else "mixed",
                          pairs=tuple(Pair(pairs[k]["id"], k[0], k[1], tuple(pairs[k]["comparisons"])) for k in keys)))
    if len({c.case_id for c in cases}) != len(cases):
        raise ValueError("two components are named after the same group")
    return cases


def generate_cases(intrinsic: int = INTRINSIC_GROUPS, history_per_family: int = 80,
                   seed: int = NATIVE_PAIRS_SEED, history_seed: int = controlled_histories.SEED) -> list[Case]:
    """Both panels' components: the intrinsic panel's, then the history panel's."""
    return build_cases(intrinsic_groups(intrinsic, seed)) + build_cases(history_groups(history_per_family, history_seed))


def counts(cases: Sequence[Case]) -> dict[str, Any]:
    """Components, distinct pairs and labelled comparisons, in all and per panel (the paper: 216 + 400
    components, 5,328 distinct pairs, 9,216 labelled comparisons)."""
    def of(cs: Sequence[Case]) -> dict[str, int]:
        pairs = [p for c in cs for p in c.pairs]
        return {"components": len(cs), "distinct_pairs": len(pairs),
                "comparisons": sum(len(p.comparisons) for p in pairs),
                **{f"{t}_comparisons": sum(q.task == t for p in pairs for q in p.comparisons) for t in TASKS}}

    return {"all": of(cases), **{panel: of([c for c in cases if c.panel == panel]) for panel in PANELS}}


def dataset_hash(cases: Sequence[Case]) -> str:
    """SHA-256 of a canonical JSON of every case, in order."""
    blob = json.dumps([asdict(c) for c in cases], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
