"""Your own record pairs: :class:`Pair` and what turns a list of them into the store's cases.

A pair is an earlier record A and a later record B (plain text, no chat format), a
binary label (1: B replaces what A said, 0: it does not), a resampling group and a
split name. ``FeatureStore.add`` encodes each pair as the recognition datasets are
encoded: A alone, B alone, and B read after A (joint, A then ``JOINT_SEPARATOR``
then B), through the same :func:`~kvprobe.extract.pipeline.records_of` and
:func:`~kvprobe.extract.capture.encode` path, so a pair equal to a recognition
case's records gets the same stored arrays.

Everything here is checked before a model runs: the fields when a pair is built
(:class:`PairError`), and in :func:`check_spans` that every record of every pair
tokenizes to a span of its own (tokenizing only, no forward).

Example:
    >>> pairs = [Pair("The office is in Lisbon.", "Update: the office is now in Porto.", 1, split="train"),
    ...          Pair("The office is in Lisbon.", "Reminder: the office is in Lisbon.", 0, split="train")]
    >>> [c.case_id for c in pair_cases(pairs)], pair_cases(pairs)[0].labels
    (['pair-000000', 'pair-000001'], {'replacement': 1})
    >>> Pair("", "B", 1)
    Traceback (most recent call last):
    ...
    kvprobe.extract.pairs.PairError: Pair.a is empty (record A needs some text)
"""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import numpy as np

from kvprobe.prompts import SpanError, char_span_to_tokens

from .capture import JOINT_SEPARATOR, RecordSpec

if TYPE_CHECKING:
    from kvprobe.model import Model

#: The stored label of a pair (``cases/labels/replacement``, what the readouts predict).
PAIR_LABEL = "replacement"


class PairError(ValueError):
    """A pair that cannot be encoded: empty text, a label other than 0/1, a record without a token span.

    Raised when the pair is built or, for spans, by ``FeatureStore.add`` before any forward;
    the message names the pair (its index in the list) and the field.
    """


@dataclass(frozen=True)
class Pair:
    """Records A and B, whether B replaces A (``label`` 1) or not (0), a resampling group and a split.

    Attributes:
        a: record A's text (encoded alone from position 0, and before B in the joint encoding).
        b: record B's text (alone, and read after A).
        label: 1 if B replaces what A said, 0 if not (``bool`` is accepted; stored as int8).
        group: the resampling unit of the bootstrap intervals (pairs about one item share it);
            ``None``: the pair is a group of its own.
        split: any name (``"train"``, ``"fit"``, ``"heldout"``...); the readouts are told which
            split trains, which selects and which tests. ``None`` is stored as ``""``.

    Example:
        >>> Pair("The office is in Lisbon.", "It moved to Porto.", 1, group="office", split="fit").label
        1
    """

    a: str
    b: str
    label: int
    group: str | None = None
    split: str | None = None

    def __post_init__(self) -> None:
        for name in ("a", "b"):
            text = getattr(self, name)
            if not isinstance(text, str):
                raise PairError(f"Pair.{name} must be a str, got {type(text).__name__}")
            if not text.strip():
                raise PairError(f"Pair.{name} is empty (record {name.upper()} needs some text)")
        label = self.label
        if isinstance(label, (bool, np.bool_)) or (isinstance(label, numbers.Integral) and int(label) in (0, 1)):
            object.__setattr__(self, "label", int(label))
        else:
            raise PairError(f"Pair.label must be 0 or 1 (1: B replaces A), got {label!r}")
        for name in ("group", "split"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise PairError(f"Pair.{name} must be a non-empty str or None, got {value!r}")


@dataclass(frozen=True)
class PairCase:
    """A pair as the store writes a case (the fields of a recognition case that the store reads)."""

    case_id: str
    group: str
    split: str
    a_text: str
    b_text: str
    labels: dict[str, int] = field(hash=False)
    family: str = ""
    variant: str = ""
    pattern: str = ""

    def to_json(self) -> dict[str, Any]:
        """The case as a plain dict (its pairs' digest, the group's ``dataset_hash``, is taken over these)."""
        return asdict(self)


def pair_cases(pairs: Iterable[Pair]) -> list[PairCase]:
    """The store's cases of ``pairs``, in order: ``case_id`` ``pair-000000``..., the pair's own group
    (its case id when ``None``), its split (``""`` when ``None``) and ``labels = {"replacement": label}``.

    Raises :class:`PairError` for no pairs or an item that is not a :class:`Pair`.
    """
    if isinstance(pairs, (str, bytes, Pair)):
        raise PairError(f"pairs must be a list of kvprobe.extract.Pair, not a {type(pairs).__name__}")
    pairs = list(pairs)
    if not pairs:
        raise PairError("no pairs to add (pass a non-empty list of kvprobe.extract.Pair)")
    out = []
    for i, p in enumerate(pairs):
        if not isinstance(p, Pair):
            raise PairError(f"pair {i} is a {type(p).__name__}, not a kvprobe.extract.Pair")
        case_id = f"pair-{i:06d}"
        out.append(PairCase(case_id, p.group if p.group is not None else case_id, p.split or "", p.a, p.b,
                            {PAIR_LABEL: p.label}))
    return out


def check_spans(model: "Model", pairs: Sequence[Pair], separator: str = JOINT_SEPARATOR) -> None:
    """Tokenize every record of every pair (A alone, B alone, B after A) and raise :class:`PairError`
    naming the first pair whose record has no token span of its own (e.g. a token that straddles the
    separator). No forward runs.
    """
    seen: set[str] = set()
    for i, p in enumerate(pairs):
        for where, spec in (("A alone", RecordSpec("single", p.a)), ("B alone", RecordSpec("single", p.b)),
                            ("B after A", RecordSpec("joint", p.b, p.a))):
            if spec.key in seen:
                continue
            seen.add(spec.key)
            prompt, segment = spec.prompt(separator)
            try:
                rendered, _, offsets = model.tokenize(prompt)
                start, end = rendered.segments[segment]
                char_span_to_tokens(offsets, rendered.history_text, start, end, label=segment)
            except SpanError as err:
                raise PairError(f"pair {i}: record {where} has no token span of its own under {model.name}'s "
                                f"tokenizer: {err}") from err
