"""The source-influence events: one per role-matched group (paper L1799-1812; spec partA section 5).

"The causal experiment compares access conditions on the same 400 role-matched groups,
sharing the prefilled cache within each group. One balanced replicate across five update
families, eight wording patterns, and two value directions supplies 80 development
events ... the remaining four replicates, comprising 320 events."

An event is a group of the role-pairs dataset (``studies.datasets.recognition.role_pairs``, 5
families x 8 patterns x 10 groups): the earlier source is its record A (which names both
values and affirms the old one), the later source its Supersedes record B (the new value
becomes current; a parameter gives the Duplicate record instead, which keeps A's value
current). UNCLEAR (paper): how replicates and value directions map onto groups. Ours: group
``g`` of a (family, pattern) cell is replicate ``g // 2``, direction ``g % 2``; replicate 0
(groups g00 and g01 of every cell: 80 events) is the development split, replicates 1-4
(320 events, 40 per pattern) the evaluation split.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvprobe.studies.datasets.recognition.cases import expected_answer
from kvprobe.studies.datasets.recognition.families import slot
from kvprobe.studies.datasets.recognition.role_pairs import generate_role_pairs

from . import strings

#: 20260910 again: the paired prompt-format comparison's draws (paper L1889-1890, ``studies.source_influence``).
PROMPT_FORMAT_SEED = 20260910

SPLITS = ("evaluation", "development", "all")
#: Role-pair variants that can serve as the later source.
LATER_VARIANTS = ("supersedes", "duplicate")
#: Replicates of the development split.
DEVELOPMENT_REPLICATES = (0,)


@dataclass(frozen=True)
class Event:
    """One group's earlier and later sources, the query and the two options (current first).

    ``old_value`` is the value the earlier source affirms (the "old" answer of the paper's
    old-choice rate; for a Supersedes event it is ``other``, for a Duplicate one ``current``).
    """

    case_id: str
    group: str
    family: str
    pattern: str
    replicate: int
    split: str
    variant: str
    old: str
    later: str
    query: str
    current: str
    other: str
    old_value: str
    #: The unrelated source's text (the role-matched events share one neutral text).
    neutral: str = strings.NEUTRAL_SOURCE


def replicate_of(group: str) -> int:
    """Replicate of a role-pairs group id ``rp-<family>-<pattern>-gNN``: ``NN // 2``."""
    return int(group.rsplit("-g", 1)[1]) // 2


def generate_events(split: str = "evaluation", variant: str = "supersedes", seed: int | None = None) -> list[Event]:
    """The events of ``split`` (evaluation: 320, development: 80, all: 400), in dataset order."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {SPLITS}")
    if variant not in LATER_VARIANTS:
        raise ValueError(f"variant {variant!r} is not one of {LATER_VARIANTS}")
    cases = generate_role_pairs() if seed is None else generate_role_pairs(seed)
    events = []
    for case in cases:
        if case.variant != variant:
            continue
        replicate = replicate_of(case.group)
        event_split = "development" if replicate in DEVELOPMENT_REPLICATES else "evaluation"
        if split != "all" and event_split != split:
            continue
        current, other = expected_answer(case)
        events.append(Event(case_id=case.group, group=case.group, family=case.family, pattern=case.pattern,
                            replicate=replicate, split=event_split, variant=variant, old=case.a_text,
                            later=case.b_text, query=strings.QUERY.format(slot=slot(case.family, 0, case.entity)),
                            current=current, other=other, old_value=case.old_value))
    return events
