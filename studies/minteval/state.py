"""The symbolic state after a session's events: where people and objects are and were, who holds what.

Semantics (ours; bAbI's world model, extended by transfers):

* a movement puts its person at the destination; every object the person holds goes along;
* an acquisition makes the person the object's holder; the object is where the person is
  (unknown until the person's first movement, then it goes where they go);
* a drop leaves the object where its holder is; nobody holds it;
* a transfer makes the recipient the holder; the object stays where it is (bAbI's giver
  and recipient share a room) until its new holder moves.

A path lists each *change* of known location (consecutive duplicates merged), as in bAbI
qa3's "Where was the O before the L?". :attr:`State.anomalies` names events a consistent
story would not contain (taking an object someone else holds or from another room,
dropping or giving an object one does not hold); the generator refuses such sessions.

Example::

    s = replay(events)
    s.person_location["Mary"], s.holder.get("apple"), s.movements["Mary"]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from .schema import Event


@dataclass
class State:
    """The replayed state (module docstring); event indices refer to the session's events."""

    person_location: dict[str, str] = field(default_factory=dict)
    person_path: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: Every movement record of a person, in order: (event index, destination).
    movements: dict[str, list[tuple[int, str]]] = field(default_factory=lambda: defaultdict(list))
    holder: dict[str, str | None] = field(default_factory=dict)
    object_location: dict[str, str | None] = field(default_factory=dict)
    object_path: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    #: (event index, person, object, where the drop happened or None).
    drops: list[tuple[int, str, str, str | None]] = field(default_factory=list)
    #: (event index, giver, recipient, object).
    transfers: list[tuple[int, str, str, str]] = field(default_factory=list)
    people: list[str] = field(default_factory=list)
    anomalies: list[str] = field(default_factory=list)

    def carrying(self, person: str) -> list[str]:
        """The objects a person holds now, sorted."""
        return sorted(o for o, h in self.holder.items() if h == person)

    def location_before(self, person: str, index: int) -> str | None:
        """Where ``person`` was just before event ``index`` (None: unknown)."""
        before = [loc for i, loc in self.movements.get(person, []) if i < index]
        return before[-1] if before else None


def _extend(path: list[str], location: str | None) -> None:
    if location is not None and (not path or path[-1] != location):
        path.append(location)


def _place(state: State, obj: str, location: str | None) -> None:
    if location is not None:
        state.object_location[obj] = location
        _extend(state.object_path[obj], location)


def _meet(state: State, *people: str) -> None:
    for p in people:
        if p not in state.people:
            state.people.append(p)


def _apply(state: State, i: int, e: Event) -> None:
    _meet(state, e.person, *([e.recipient] if e.recipient else []))
    if e.kind == "movement":
        state.person_location[e.person] = e.location  # type: ignore[assignment]
        _extend(state.person_path[e.person], e.location)
        state.movements[e.person].append((i, e.location))  # type: ignore[arg-type]
        for obj in state.carrying(e.person):
            _place(state, obj, e.location)
        return
    obj, here = e.object, state.person_location.get(e.person)
    assert obj is not None
    held_by, lying = state.holder.get(obj), state.object_location.get(obj)
    if e.kind == "acquisition":
        if held_by not in (None, e.person):
            state.anomalies.append(f"event {i}: {e.person} takes the {obj} that {held_by} holds")
        elif held_by is None and None not in (here, lying) and here != lying:
            state.anomalies.append(f"event {i}: {e.person} in the {here} takes the {obj} from the {lying}")
        state.holder[obj] = e.person
        state.object_location.setdefault(obj, None)
        _place(state, obj, here)
    elif held_by != e.person:
        state.anomalies.append(f"event {i}: {e.person} {e.kind}s the {obj} without holding it")
    if e.kind == "drop":
        state.holder[obj] = None
        state.drops.append((i, e.person, obj, state.object_location.get(obj)))
    elif e.kind == "transfer":
        state.holder[obj] = e.recipient
        state.transfers.append((i, e.person, e.recipient or "", obj))


def replay(events: Sequence[Event]) -> State:
    """The state after ``events`` (module docstring)."""
    state = State()
    for i, e in enumerate(events):
        _apply(state, i, e)
    return state
