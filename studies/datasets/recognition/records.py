"""Dataset D3, "r570": synthetic record histories for learned readouts (spec partB sections 1, 3).

95 base items (19 per family) x 6 variants = 570 (A, B) cases, split by item:
train 30 items (180 cases), dev 15 (90), test 50 (300); per family 6 / 3 / 10 items.
Every item has one A record (affirming ``old_value``) and six B records, in this order:

* ``replacement``        -- B gives ``new_value`` for the same entity and attribute;
* ``confirmation``       -- B restates A's value;
* ``role_swap``          -- B names both values and makes the new one current;
* ``role_confirmation``  -- the role_swap sentence with the two values exchanged (same
  words, same character length), so B keeps A's value current;
* ``explicit_rejection`` -- B says A's value is wrong/withdrawn and names the new one;
* ``other_entity``       -- the replacement sentence about another entity of the family.

Label ``replacement`` is 1 for replacement, role_swap and explicit_rejection (150/300 in
test), 0 otherwise. ``pattern`` is the id of the item's frame set ("test-f1").

Disjointness across splits (asserted at generation): entity strings (A entities and the
other entities of other_entity cases), value strings, slot phrasings (families.SLOTS
indices 0-1 train, 2-3 dev, 4-5 test) and sentence frames (``FRAMES``). All B records of
an item use the other slot phrasing of the split than A and a frame different from A's,
so role swap / role confirmation wording always differs from A's.

Seed (default 20260910, the paper's probe seed) drives one ``random.Random``: first the
partition of entities and values into splits, then per item the (old, new) pair, drawn
with equal character length where the split's pool allows it.

[UNCLEAR] in the paper, our choice: every template string (frames, slot phrasings), the
entity and value vocabularies (families.py), frames shared by all families of a split,
two frame sets and two slot phrasings per split and family, other_entity reusing the
replacement frame, and the value partition sizes (about 6:3:10, at least 2 keys per split).
"""

from __future__ import annotations

import random
from collections import Counter
from typing import Iterator

from kvprobe.studies.common.report import Items

from . import families
from .cases import FAMILIES, SPLITS, RecognitionCase, capitalize, word_multiset

#: 20260910 again: the synthetic record histories (``studies.datasets.recognition.records``,
#: ``studies.datasets.record_histories``; the records, query-aware, detection and requests studies' datasets,
#: ``studies.requests.data``).
RECORDS_SEED = 20260910

#: Where reports on these cases (the recognition records, the record histories built on them) say their items
#: come from (``studies.common.report.Items``).
ITEMS = Items("reconstruction", "synthetic record histories: our templates for the paper's five families and six "
              "relation variants")

RECORD_VARIANTS = ("replacement", "confirmation", "role_swap", "role_confirmation", "explicit_rejection",
                   "other_entity")
POSITIVE_VARIANTS = frozenset({"replacement", "role_swap", "explicit_rejection"})
ITEMS_PER_FAMILY = {"train": 6, "dev": 3, "test": 10}
#: families.SLOTS indices of each split.
SLOT_INDICES = {"train": (0, 1), "dev": (2, 3), "test": (4, 5)}
SHORT_NAMES = {"office_city": "office", "api_endpoint": "endpoint", "preferred_plan": "plan",
               "deadline": "deadline", "incident_cause": "incident"}

# Frame sets per split. Placeholders: {slot} (a slot phrasing), {old}, {new}.
# role_confirmation = role_swap with {old} and {new} exchanged; other_entity = replacement
# about another entity. No value follows a determiner (causes carry their own article).
FRAMES: dict[str, tuple[dict[str, str], ...]] = {
    "train": (
        {"A": "Directory entry from the operations desk: {slot} is {old}, as recorded at the last review.",
         "replacement": "Follow-up from the operations desk: {slot} has been changed to {new} since the last review.",
         "confirmation": "Follow-up from the operations desk: {slot} is still {old}, unchanged since the last review.",
         "role_swap": "Follow-up from the operations desk: {slot} is now {new} and is no longer {old}.",
         "explicit_rejection": "Correction from the operations desk: {old} is wrong and withdrawn; {slot} is {new}."},
        {"A": "Per the shared wiki page, {slot} is listed as {old}.",
         "replacement": "Wiki edit this morning: {slot} was updated to {new}.",
         "confirmation": "Wiki edit this morning: {slot} was checked and kept at {old}.",
         "role_swap": "Wiki edit this morning: {slot} now reads {new} where it used to read {old}.",
         "explicit_rejection": "Wiki edit this morning: {old} was listed by mistake; {slot} is {new}."},
    ),
    "dev": (
        {"A": "From the configuration register: {slot} is entered as {old} for the coming period.",
         "replacement": "Register amendment: {slot} is entered as {new} from today onward.",
         "confirmation": "Register amendment: {slot} remains entered as {old} from today onward.",
         "role_swap": "Register amendment: {slot} is entered as {new}, which replaces {old}.",
         "explicit_rejection": "Register amendment: {old} is retired and no longer valid; {slot} is {new}."},
        {"A": "Meeting minutes record that {slot} is {old}.",
         "replacement": "Minutes of the follow-up meeting: {slot} was changed to {new}.",
         "confirmation": "Minutes of the follow-up meeting: {slot} was confirmed as {old}.",
         "role_swap": "Minutes of the follow-up meeting: {slot} switched to {new}, so {old} no longer applies.",
         "explicit_rejection": "Minutes of the follow-up meeting: {old} was recorded in error, and {slot} is {new}."},
    ),
    "test": (
        {"A": "Status report from the coordination office: {slot} is {old}, per the records on file.",
         "replacement": "New status report: {slot} is {new}, effective immediately.",
         "confirmation": "New status report: {slot} is {old}, the same as before.",
         "role_swap": "New status report: {slot} is now {new}, no longer {old}.",
         "explicit_rejection": "New status report: {old} was incorrect and has been withdrawn; {slot} is {new}."},
        {"A": "The handbook states that {slot} is {old}.",
         "replacement": "Handbook revision: {slot} has been updated to {new}.",
         "confirmation": "Handbook revision: {slot} has been reaffirmed as {old}.",
         "role_swap": "Handbook revision: {slot} becomes {new} instead of {old}.",
         "explicit_rejection": "Handbook revision: {old} must not be used anymore; {slot} is {new}."},
    ),
}


def _split_sizes(n: int) -> tuple[int, int]:
    """(train, dev) counts of ``n`` value keys, about 6:3:10 and at least 2 each."""
    return max(2, round(n * 6 / 19)), max(2, round(n * 3 / 19))


def _pools(rng: random.Random) -> dict[tuple[str, str], dict[str, list]]:
    """Per (split, family): A entities, other entities and the value pool; disjoint across splits."""
    stems = list(range(len(families.STEMS)))
    rng.shuffle(stems)
    stem_iter: Iterator[int] = iter(stems)
    n_incidents = 2 * sum(ITEMS_PER_FAMILY.values())
    incident_iter: Iterator[int] = iter(rng.sample(families.INCIDENT_NUMBERS, n_incidents))
    value_keys: dict[tuple[str, str], list[str]] = {}
    for family in FAMILIES:
        keys = list(families.VALUE_KEYS[family])
        rng.shuffle(keys)
        n_train, n_dev = _split_sizes(len(keys))
        value_keys[("train", family)] = keys[:n_train]
        value_keys[("dev", family)] = keys[n_train:n_train + n_dev]
        value_keys[("test", family)] = keys[n_train + n_dev:]
    pools = {}
    for split in SPLITS:
        n = ITEMS_PER_FAMILY[split]
        for family in FAMILIES:
            source = incident_iter if family == "incident_cause" else stem_iter
            names = [families.entity_name(family, next(source)) for _ in range(2 * n)]
            pools[(split, family)] = {"entities": names[:n], "others": names[n:],
                                      "values": families.values(family, value_keys[(split, family)])}
    return pools


def split_vocabulary(seed: int = RECORDS_SEED, deadline_unit: str = "date") -> dict[str, dict[str, set[str]]]:
    """Per split: the sets of entities, values, slot phrasings and frames the generator may use."""
    pools = _pools(random.Random(seed))
    out: dict[str, dict[str, set[str]]] = {}
    for split in SPLITS:
        vocab: dict[str, set[str]] = {"entities": set(), "values": set(), "slots": set(), "frames": set()}
        for family in FAMILIES:
            pool = pools[(split, family)]
            vocab["entities"].update(pool["entities"], pool["others"])
            vocab["values"].update(families.restate(family, v, deadline_unit) for v in pool["values"])
            vocab["slots"].update(families.slot(family, i, "{e}", deadline_unit) for i in SLOT_INDICES[split])
        vocab["frames"] = {frame for frame_set in FRAMES[split] for frame in frame_set.values()}
        out[split] = vocab
    return out


def _assert_disjoint(vocabulary: dict[str, dict[str, set[str]]]) -> None:
    for kind in ("entities", "values", "slots", "frames"):
        for i, first in enumerate(SPLITS):
            for second in SPLITS[i + 1:]:
                shared = vocabulary[first][kind] & vocabulary[second][kind]
                assert not shared, f"{kind} shared by {first} and {second}: {sorted(shared)[:5]}"


def _item_cases(group: str, split: str, family: str, k: int, entity: str, other: str, old: str, new: str,
                deadline_unit: str = "date") -> list[RecognitionCase]:
    """The six cases of item ``k`` (index within its split and family)."""
    frame_id = k % len(FRAMES[split])
    frames = FRAMES[split][frame_id]
    a_index, b_index = SLOT_INDICES[split] if (k // 2) % 2 == 0 else SLOT_INDICES[split][::-1]
    a_slot = families.slot(family, a_index, entity, deadline_unit)
    b_slot = families.slot(family, b_index, entity, deadline_unit)
    a_text = capitalize(frames["A"].format(slot=a_slot, old=old))
    b_texts = {
        "replacement": frames["replacement"].format(slot=b_slot, new=new),
        "confirmation": frames["confirmation"].format(slot=b_slot, old=old),
        "role_swap": frames["role_swap"].format(slot=b_slot, old=old, new=new),
        "role_confirmation": frames["role_swap"].format(slot=b_slot, old=new, new=old),
        "explicit_rejection": frames["explicit_rejection"].format(slot=b_slot, old=old, new=new),
        "other_entity": frames["replacement"].format(slot=families.slot(family, b_index, other, deadline_unit), new=new),
    }
    swap, conf = b_texts["role_swap"], b_texts["role_confirmation"]
    assert len(swap) == len(conf) and word_multiset(swap) == word_multiset(conf), group
    assert all(swap.count(v) == 1 for v in (old, new)), group
    return [
        RecognitionCase(
            case_id=f"{group}-{variant}", group=group, split=split, family=family, variant=variant,
            pattern=f"{split}-f{frame_id}", a_text=a_text, b_text=capitalize(b_texts[variant]),
            labels={"replacement": int(variant in POSITIVE_VARIANTS)}, entity=entity, old_value=old,
            new_value=new,
        )
        for variant in RECORD_VARIANTS
    ]


def generate_records(seed: int = RECORDS_SEED, deadline_unit: str = "date") -> list[RecognitionCase]:
    """The 570 cases of D3, ordered by split (train, dev, test), family, item and variant.

    ``deadline_unit="hours"`` states the deadline family's values in hours, as the paper's record
    dataset does (``families.values``); every other case, and every random draw, is unchanged.

    Example: ``[c.old_value for c in generate_records(deadline_unit="hours") if c.family == "deadline"][:1]``
    gives an hours value such as ``['179 hours']``.
    """
    rng = random.Random(seed)
    pools = _pools(rng)
    _assert_disjoint(split_vocabulary(seed, deadline_unit))
    cases: list[RecognitionCase] = []
    numbers: Counter[str] = Counter()
    for split in SPLITS:
        for family in FAMILIES:
            pool = pools[(split, family)]
            for k, (entity, other) in enumerate(zip(pool["entities"], pool["others"])):
                old, new = (families.restate(family, v, deadline_unit) for v in families.pick_pair(rng, pool["values"]))
                group = f"rec-{SHORT_NAMES[family]}-{numbers[family]:03d}"
                numbers[family] += 1
                cases.extend(_item_cases(group, split, family, k, entity, other, old, new, deadline_unit))
    assert len(cases) == 6 * 19 * len(FAMILIES)
    return cases
