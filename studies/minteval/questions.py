"""Questions of the five MINTEval types, computed from the symbolic state after a session's events.

Every candidate has exactly one answer under the replayed state (:mod:`.state`); a
candidate the state leaves open (an unknown location, a repeated drop or gift, a
location never left) is not asked. Templates: ``strings.py`` (UNCLEAR: ours).

* current_location: where a person is; where an object is.
* historical_location: where a person / an object was before the *last* arrival at a
  location it later reached (bAbI qa3's reading).
* count: how many objects a person carries (0 included); how many movement records a person has.
* order: the k-th destination of a person (k <= 5); which of two places a person reached first.
* multi_hop: where the person carrying an object is; where a person dropped an object
  (their location at the drop); where the object one person gave another is now; where a
  person was when another person went to a place (once).

Example::

    cands = candidates(replay(events))    # {"current_location": [(text, answer, aliases), ...], ...}
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations

from . import strings
from .schema import QUESTION_TYPES
from .state import State

#: ``(question, reference, aliases)``.
Candidate = tuple[str, str, tuple[str, ...]]


def _before(path: list[str], location: str) -> str | None:
    """The location before the last arrival at ``location`` in a path (None when it never arrived later)."""
    if location not in path[1:]:
        return None
    last = len(path) - 1 - path[::-1].index(location)
    return path[last - 1]


def _count(n: int) -> tuple[str, tuple[str, ...]]:
    words = (strings.NUMBER_WORDS[n],) if n < len(strings.NUMBER_WORDS) else ()
    return str(n), words + ((strings.NONE_ALIAS,) if n == 0 else ())


def current(state: State) -> list[Candidate]:
    out = [(strings.CURRENT_PERSON.format(person=p), loc, ()) for p, loc in state.person_location.items()]
    return out + [(strings.CURRENT_OBJECT.format(obj=o), loc, ()) for o, loc in state.object_location.items()
                  if loc is not None]


def historical(state: State) -> list[Candidate]:
    out = []
    for template, key, paths in ((strings.HISTORICAL_PERSON, "person", state.person_path),
                                 (strings.HISTORICAL_OBJECT, "obj", state.object_path)):
        for who, path in paths.items():
            for location in dict.fromkeys(path[1:]):
                out.append((template.format(**{key: who}, location=location), _before(path, location), ()))
    return out  # type: ignore[return-value]


def count(state: State) -> list[Candidate]:
    out = [(strings.COUNT_CARRIED.format(person=p), *_count(len(state.carrying(p)))) for p in state.people]
    return out + [(strings.COUNT_MOVES.format(person=p), *_count(len(moves))) for p, moves in state.movements.items()]


def order(state: State) -> list[Candidate]:
    out: list[Candidate] = []
    for p, moves in state.movements.items():
        out += [(strings.ORDER_NTH.format(ordinal=strings.ORDINALS[k], person=p), loc, ())
                for k, (_, loc) in enumerate(moves[:len(strings.ORDINALS)])]
        first_visit = list(dict.fromkeys(loc for _, loc in moves))  # places by first arrival
        for a, b in combinations(first_visit, 2):
            out.append((strings.ORDER_PAIR.format(person=p, first=a, second=b), a, ()))
            out.append((strings.ORDER_PAIR.format(person=p, first=b, second=a), a, ()))
    return out


def multi_hop(state: State) -> list[Candidate]:
    out: list[Candidate] = []
    for obj, holder in state.holder.items():
        if holder is not None and holder in state.person_location:
            out.append((strings.MULTIHOP_HOLDER.format(obj=obj), state.person_location[holder], ()))
    drops = Counter((p, o) for _, p, o, _ in state.drops)
    out += [(strings.MULTIHOP_DROP.format(person=p, obj=o), where, ()) for _, p, o, where in state.drops
            if drops[(p, o)] == 1 and where is not None]
    gifts: dict[tuple[str, str], set[str]] = {}
    for _, giver, recipient, obj in state.transfers:
        gifts.setdefault((giver, recipient), set()).add(obj)
    for (giver, recipient), objs in gifts.items():
        where = state.object_location.get(next(iter(objs))) if len(objs) == 1 else None
        if where is not None:
            out.append((strings.MULTIHOP_GIFT.format(giver=giver, recipient=recipient), where, ()))
    arrivals = Counter((p, loc) for p, moves in state.movements.items() for _, loc in moves)
    for other, moves in state.movements.items():
        for i, loc in moves:
            if arrivals[(other, loc)] != 1:
                continue
            for person in state.movements:
                where = state.location_before(person, i)
                if person != other and where is not None:
                    out.append((strings.MULTIHOP_MEETING.format(person=person, other=other, location=loc), where, ()))
    return out


#: The candidates of each question type.
BUILDERS = {"current_location": current, "historical_location": historical, "count": count, "order": order,
            "multi_hop": multi_hop}
assert tuple(BUILDERS) == QUESTION_TYPES


def candidates(state: State) -> dict[str, list[Candidate]]:
    """Every askable question of each type, in a fixed order (no duplicates)."""
    return {t: list({c[0]: c for c in build(state)}.values()) for t, build in BUILDERS.items()}
