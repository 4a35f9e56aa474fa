"""Dataset D1: role-matched record pairs (spec partB section 1, partA section 5).

400 groups = 5 families x 8 wording patterns x 10 groups; each group holds 3 cases that
share one A record (affirming ``old_value`` and naming ``new_value`` as the alternative):

* ``supersedes``   -- B names both values and makes the new one current
  (matching=1, replacement=1);
* ``duplicate``    -- the same B sentence with the two values exchanged, so B keeps A's
  value current (matching=1, replacement=0; same words and character length);
* ``other_entity`` -- the supersedes sentence about another entity of the family
  (matching=0, replacement=-1: replacement is only defined on matching pairs).

Both candidate values occur in every record, A included, so only the roles (which value is
current) tell supersedes from duplicate. A pattern is one (A frame, B frame) pair, shared
by all families; the family supplies the slot phrasing (A uses families.SLOTS index
``p % 6``, every B of the group index ``(p + 1) % 6``, so B never repeats A's wording).

Split: every group is "test". The recognition analyses (partB section 2) use all 400
groups; partA section 5 calls one "replicate" of 5 x 8 x 2 = 80 events a development set
and evaluates on the other 320 (40 groups per pattern) -- if needed, select it by group
number (e.g. "-g00"/"-g01" of each family and pattern), it is not marked here.

Seed (default 20260911) drives one ``random.Random``; per group, two distinct entities
and an (old, new) value pair of equal length where possible. Entities and values may repeat
across groups, never inside one, and come from the same vocabulary as D3 (families.py).

[UNCLEAR] in the paper, our choice: the eight pattern texts, A naming both values, the
3-cases-per-group composition (one A shared by supersedes/duplicate/other-entity) and
other-entity as the non-matching negative, the vocabularies, all-test split.
"""

from __future__ import annotations

import random

from kvprobe.studies.common.report import Items

from . import families
from .cases import FAMILIES, RecognitionCase, capitalize, word_multiset
from .records import SHORT_NAMES

#: 20260911: the role-pair dataset (``studies.datasets.recognition.role_pairs``).
ROLE_PAIRS_SEED = 20260911

#: Where reports on these pairs say their items come from (``studies.common.report.Items``).
ITEMS = Items("reconstruction", "role-matched record pairs: our templates for the paper's five update families and "
              "eight wording patterns")

ROLE_PAIR_VARIANTS = ("supersedes", "duplicate", "other_entity")
GROUPS_PER_CELL = 10
# Pattern id -> (A frame, B frame). A: {slot} {old} {new}; B: {slot} {cur} (current value)
# {prev} (the value B sets aside). Supersedes: cur=new, prev=old; duplicate: exchanged.
PATTERNS: dict[str, tuple[str, str]] = {
    "p0": ("Initial record: {slot} is {old}, with {new} considered as an alternative.",
           "Update: {slot} is now {cur}, no longer {prev}."),
    "p1": ("Planning note: {slot} is {old}; {new} was discussed but not adopted.",
           "Revised planning note: {slot} has become {cur} instead of {prev}."),
    "p2": ("Draft entry: {slot} stays {old} rather than {new} for now.",
           "Final entry: {slot} is {cur}, and {prev} is no longer in use."),
    "p3": ("Memo: {old} was kept over {new} as {slot}.",
           "Later memo: {cur} replaces {prev} as {slot}."),
    "p4": ("Register: {slot} is {old} (alternative on file: {new}).",
           "Register change: {slot} changed from {prev} to {cur}."),
    "p5": ("Email from the coordinator: we are going with {old} for {slot}, not {new}.",
           "Email from the coordinator: we are switching {slot} from {prev} to {cur}, effective now."),
    "p6": ("Ticket comment: {slot} was confirmed as {old} after {new} was ruled out.",
           "Ticket comment: {slot} is {cur} now that {prev} has been dropped."),
    "p7": ("Summary table row: {slot}: {old} (current), {new} (candidate).",
           "Summary table row: {slot}: {cur} (current), {prev} (former)."),
}
LABELS = {"supersedes": {"matching": 1, "replacement": 1},
          "duplicate": {"matching": 1, "replacement": 0},
          "other_entity": {"matching": 0, "replacement": -1}}


def _entity_keys(rng: random.Random, family: str) -> tuple[int, int]:
    if family == "incident_cause":
        first, second = rng.sample(families.INCIDENT_NUMBERS, 2)
    else:
        first, second = rng.sample(range(len(families.STEMS)), 2)
    return first, second


def generate_role_pairs(seed: int = ROLE_PAIRS_SEED) -> list[RecognitionCase]:
    """The 1,200 cases of D1, ordered by family, pattern, group and variant."""
    rng = random.Random(seed)
    cases: list[RecognitionCase] = []
    for family in FAMILIES:
        pool = families.values(family, families.VALUE_KEYS[family])
        for p, (pattern, (a_frame, b_frame)) in enumerate(PATTERNS.items()):
            a_index, b_index = p % len(families.SLOTS[family]), (p + 1) % len(families.SLOTS[family])
            for g in range(GROUPS_PER_CELL):
                group = f"rp-{SHORT_NAMES[family]}-{pattern}-g{g:02d}"
                key, other_key = _entity_keys(rng, family)
                entity, other = families.entity_name(family, key), families.entity_name(family, other_key)
                old, new = families.pick_pair(rng, pool)
                a_text = capitalize(a_frame.format(slot=families.slot(family, a_index, entity), old=old, new=new))
                b_slot = families.slot(family, b_index, entity)
                b_texts = {
                    "supersedes": b_frame.format(slot=b_slot, cur=new, prev=old),
                    "duplicate": b_frame.format(slot=b_slot, cur=old, prev=new),
                    "other_entity": b_frame.format(slot=families.slot(family, b_index, other), cur=new, prev=old),
                }
                sup, dup = b_texts["supersedes"], b_texts["duplicate"]
                assert len(sup) == len(dup) and word_multiset(sup) == word_multiset(dup), group
                assert all(t.count(v) == 1 for t in (a_text, *b_texts.values()) for v in (old, new)), group
                cases.extend(
                    RecognitionCase(
                        case_id=f"{group}-{variant}", group=group, split="test", family=family,
                        variant=variant, pattern=pattern, a_text=a_text, b_text=capitalize(b_texts[variant]),
                        labels=dict(LABELS[variant]), entity=entity, old_value=old, new_value=new,
                    )
                    for variant in ROLE_PAIR_VARIANTS
                )
    assert len(cases) == len(FAMILIES) * len(PATTERNS) * GROUPS_PER_CELL * len(ROLE_PAIR_VARIANTS)
    return cases
