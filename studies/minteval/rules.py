"""The MINTEval masking rules: pure functions of a session's events (never its questions or answers).

Paper L1350-1353 (spec partA section 1a): "A source rule masks every explicit
person-movement record except that person's latest movement; acquisition, drop, and
transfer events remain. Old destination strings define the value-only mask. The rule
does not inspect the question or gold answer." The online policy (L1403-1406) "masks a
superseded record only after its replacement is processed": a hidden movement's
replacement is the same person's next movement.

Example::

    events = [Event("e0", "Mary moved to the hallway.", "movement", "Mary", location="hallway"),
              Event("e1", "Mary got the apple there.", "acquisition", "Mary", object="apple"),
              Event("e2", "Mary went to the garden.", "movement", "Mary", location="garden")]
    source_hidden(events)   # [0]
    value_spans(events)     # [(0, 18, 25)]: "hallway" in event 0's text
    online_pairs(events)    # [(0, 2)]
"""

from __future__ import annotations

from collections.abc import Sequence

from .schema import Event, destination_chars


def _movements(events: Sequence[Event]) -> list[int]:
    return [i for i, e in enumerate(events) if e.kind == "movement"]


def source_hidden(events: Sequence[Event]) -> list[int]:
    """Indices of the movement records the source rule hides: every one but each person's latest."""
    latest = {events[i].person: i for i in _movements(events)}
    return [i for i in _movements(events) if latest[events[i].person] != i]


def online_pairs(events: Sequence[Event]) -> list[tuple[int, int]]:
    """``(hidden movement, its replacement)``: each hidden movement and the same person's next movement."""
    pairs, previous = [], {}
    for i in _movements(events):
        person = events[i].person
        if person in previous:
            pairs.append((previous[person], i))
        previous[person] = i
    return pairs


def value_spans(events: Sequence[Event]) -> list[tuple[int, int, int]]:
    """``(event index, start, end)``: the old destination string of every hidden movement record."""
    return [(i, *destination_chars(events[i])) for i in source_hidden(events)]
