"""The case record shared by the recognition datasets (spec partB section 1: D1 and D3).

A case is one ordered pair of records: an earlier record A and a later record B, both
plain text (no chat format, no separator; how they are encoded -- alone, or as the
A+B concatenation with some separator -- is up to the readout, spec partB section 3,
separator [UNCLEAR] in the paper). Labels say whether B is about A's entity and
attribute ("matching", D1 only) and whether B makes a different value current
("replacement").

``dataset_hash`` is the SHA-256 of a canonical JSON (sorted keys, no whitespace) of
every case in order; it changes with anything a case holds, including its order.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from typing import Any, Sequence

#: The five update families (office city, API endpoint, preferred plan, deadline, incident cause).
FAMILIES = ("office_city", "api_endpoint", "preferred_plan", "deadline", "incident_cause")
SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class RecognitionCase:
    """One (A, B) history of a recognition dataset.

    ``entity`` is A's entity (in other-entity cases B names another one); ``old_value``
    is the value A affirms and ``new_value`` the other candidate value of the item/group.
    """

    case_id: str
    group: str
    split: str
    family: str
    variant: str
    pattern: str
    a_text: str
    b_text: str
    labels: dict[str, int]
    entity: str
    old_value: str
    new_value: str

    def __hash__(self) -> int:  # the labels dict would make the generated hash fail
        return hash(self.case_id)

    def to_json(self) -> dict[str, Any]:
        """The case as a plain, JSON-serializable dict."""
        out = asdict(self)
        out["labels"] = dict(self.labels)
        return out


def dataset_hash(cases: Sequence[RecognitionCase]) -> str:
    """SHA-256 hex digest of a canonical JSON of all cases, in order."""
    blob = json.dumps([c.to_json() for c in cases], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


_WORD = re.compile(r"\w+|[^\w\s]")


def word_multiset(text: str) -> list[str]:
    """Sorted words and punctuation marks of ``text``.

    Punctuation is split off, so exchanging two values inside one frame keeps the multiset.
    """
    return sorted(_WORD.findall(text))


def capitalize(text: str) -> str:
    """Upper-case the first character only (``str.capitalize`` would lower the rest)."""
    return text[:1].upper() + text[1:]


def expected_answer(case: RecognitionCase) -> tuple[str, str]:
    """(value current for A's entity after B, the other value): the reference of the signed LOO.

    Replacements, role swaps and explicit rejections make B's new value current; every
    other variant (and a duplicate role pair) leaves A's value current.
    """
    if case.labels.get("replacement") == 1:
        return case.new_value, case.old_value
    return case.old_value, case.new_value
