"""The repeated-request workload's histories and questions (paper partE E6-E7, L6428-6500).

Thirty record histories (``studies.datasets.record_histories``, test split), one relation variant
each: history ``i`` takes family ``FAMILIES[i % 5]``, that family's item ``i // 5`` and
variant ``RECORD_VARIANTS[i % 6]``. Since 5 and 6 are coprime, the 30 histories hold
every (family, variant) pair once: six per family, five per variant, 15 replacements
(replacement, role swap, explicit rejection) and 15 non-replacements.

Each history is rendered at 0, 100 or 300 *background lines*: neutral filler lines
placed after record A (``background_at="after_time1"``, our default) or before it
(``"before_time1"``). UNCLEAR (paper): the filler source and where it sits; the paper
gives only "0/100/300 background lines" and the resulting lengths (Qwen keep-all
140-171, 2,132-2,163 and 6,332-6,363 tokens, about 21 tokens per line). Sources:

* ``"ledger"`` (default): seeded synthetic warehouse-ledger lines ("Night shift: seven
  crates of glass jars moved from bay C4 to bay K2."), generated here, so a run needs
  no data files. Their vocabulary shares no word with the record families (no
  cities, months, plans, endpoints or causes; asserted per history).
* ``"pg19"``: consecutive sentences of the PG-19 book in the ``pg19`` data set (``kvprobe data``) (read
  at run time, never copied), 8-30 words each, from a seeded start per history;
  sentences naming one of the history's values or entities are skipped.

A history's lines at 100 are the first 100 of its lines at 300 (nested lengths).

The *resident* history is the user message up to and including the other record
(``Ordered records:`` / ``Time 1:`` A / background / ``Other record:``); the update B
(``Time 2:``) arrives later and is appended, or, for recompute policies, the text without
the Time-1 section is encoded again. Ten questions follow, in the order
C H U C C H U C H U (current, historical, unrelated), all distinct (four current, three
historical and three unrelated wordings; UNCLEAR in the paper, ours below).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Sequence

import kvprobe
from kvprobe.studies.datasets.recognition.records import RECORDS_SEED as SEED
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.detectors import strings
from kvprobe.studies.common.detectors.text import RecordPair
from kvprobe.studies.datasets.filler import filler_sentences
from kvprobe.studies.datasets.recognition import families
from kvprobe.studies.datasets.recognition.cases import FAMILIES, expected_answer
from kvprobe.studies.datasets.recognition.records import RECORD_VARIANTS, SLOT_INDICES
from kvprobe.studies.datasets.record_histories import RecordHistory, question_text, record_histories

#: Query kinds in the paper's order (L6435-6437).
ORDER = ("current", "historical", "unrelated", "current", "current", "historical", "unrelated", "current",
         "historical", "unrelated")
KIND_LETTER = {"current": "C", "historical": "H", "unrelated": "U"}
N_GROUPS = 30
LENGTHS = (0, 100, 300)
BACKGROUND_SOURCES = ("ledger", "pg19")
BACKGROUND_PLACES = ("after_time1", "before_time1")
#: Seed of the record dataset (``studies.datasets.recognition``) and of the background lines.

# Question wordings (ours). The first of each kind is the records study's wording
# (studies.common.detectors.strings); the k-th question of a kind names the attribute with the
# split's slot phrasing k % 2.
CURRENT_QUERIES = (strings.CURRENT_QUERY, "What is {slot} now, after the Time 2 record?",
                   "According to the latest record, what is {slot} currently?",
                   "Taking the Time 2 record into account, what is {slot}?")
HISTORICAL_QUERIES = (strings.HISTORICAL_QUERY, "What was {slot} according to the Time 1 record?",
                      "Before the Time 2 record arrived, what was {slot}?")
UNRELATED_QUERIES = (strings.UNRELATED_QUERY, "According to the other record, what is {slot}?",
                     "Which value do the records give for {slot}?")
WORDINGS = {"current": CURRENT_QUERIES, "historical": HISTORICAL_QUERIES, "unrelated": UNRELATED_QUERIES}
#: Line opening the background segment (ours; the paper names no label).
BACKGROUND_HEADER = "Background log:"

# Ledger vocabulary: nothing here is a record value, an entity stem or a month.
_SHIFTS = ("Morning shift", "Late shift", "Night shift", "Day crew", "Weekend crew", "Relief crew")
_COUNTS = ("two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve")
_ITEMS = ("glass jars", "copper wire", "paper towels", "rubber gloves", "wooden pallets", "steel bolts",
          "cotton rope", "plastic buckets", "ceramic tiles", "brass hinges", "wool blankets", "printer paper",
          "canvas bags", "lamp bulbs", "paint cans", "bottled water", "cardboard boxes", "garden hoses",
          "nylon straps", "spare fuses")
_ACTIONS = ("moved from bay {a} to bay {b}", "counted on shelf {a} and found complete",
            "logged at dock {a} for pickup", "restocked in aisle {a}", "checked at gate {a} and sealed",
            "stacked beside rack {a}")
_BAYS = tuple(f"{letter}{digit}" for letter in "BCDFGHJKLMNPRTVW" for digit in range(1, 10))


@dataclass(frozen=True)
class Question:
    """One request of the sequence: its index, kind, wording and reference answer."""

    index: int
    kind: str
    text: str
    reference: str

    @property
    def prompt_text(self) -> str:
        """The question section as it follows the records (``Question: ...``)."""
        return question_text(self.text)


@dataclass(frozen=True)
class WorkloadCase:
    """One (history, background length) of the workload."""

    record: RecordHistory
    n_lines: int
    lines: tuple[str, ...]
    background_at: str = "after_time1"

    @property
    def case_id(self) -> str:
        return f"{self.record.case_id}/L{self.n_lines:03d}"

    @property
    def group(self) -> str:
        """The bootstrap unit: the history (each holds one item, so the record case id)."""
        return self.record.case_id

    @property
    def label(self) -> int:
        """1 if B replaces A's value (replacement, role swap, explicit rejection)."""
        return int(self.record.case.labels["replacement"])

    @property
    def pair(self) -> RecordPair:
        """The detector's input: A's and B's record texts and A's value (lexical filter)."""
        c = self.record.case
        return RecordPair(c.a_text, c.b_text, c.old_value)

    def values(self) -> list[str]:
        """The history's values: A's, the other candidate, the other record's."""
        c = self.record.case
        return [c.old_value, c.new_value, self.record.other_value]

    def questions(self) -> list[Question]:
        """The ten requests in the paper's order."""
        rec, c = self.record, self.record.case
        references = {"current": expected_answer(c)[0], "historical": c.old_value, "unrelated": rec.other_value}
        entities = {"current": c.entity, "historical": c.entity, "unrelated": rec.other_entity}
        seen: dict[str, int] = {}
        out = []
        for i, kind in enumerate(ORDER):
            k = seen[kind] = seen.get(kind, -1) + 1
            slot = families.slot(c.family, SLOT_INDICES[c.split][k % 2], entities[kind])
            out.append(Question(i, kind, WORDINGS[kind][k].format(slot=slot), references[kind]))
        return out

    def segments(self) -> list[tuple[str, str]]:
        """Every segment of the updated history, in order (no empty background segment)."""
        c = self.record.case
        records = [("time1", f"{strings.TIME_1} {c.a_text}"), ("other", f"{strings.OTHER_RECORD} {self.record.other_text}"),
                   ("time2", f"{strings.TIME_2} {c.b_text}")]
        background = [("background", "\n".join((BACKGROUND_HEADER, *self.lines)))] if self.lines else []
        if self.background_at == "after_time1":
            return [("header", strings.RECORDS_HEADER), records[0], *background, *records[1:]]
        return [("header", strings.RECORDS_HEADER), *background, *records]

    def prompt(self, chat: bool, stage: str = "updated") -> kvprobe.Prompt:
        """The history at a stage of the sequence.

        ``stage``: ``"resident"`` (before B: every segment up to the other record, nothing
        after it, so appending B extends it), ``"updated"`` (B appended) or ``"edited"``
        (B appended, the Time-1 section deleted: what a recompute encodes).
        """
        segments = self.segments()
        if stage == "resident":
            segments = [s for s in segments if s[0] != "time2"]
        elif stage == "edited":
            segments = [s for s in segments if s[0] != "time1"]
        elif stage != "updated":
            raise ValueError(f"unknown stage {stage!r}")
        if not chat:
            segments.insert(0, ("instructions", strings.RECORDS_SYSTEM))
        return study_prompt(segments, chat=chat, system=strings.RECORDS_SYSTEM if chat else None, sep="\n",
                            question_sep="" if stage == "resident" else "\n\n")

    def a_span(self, history: kvprobe.History) -> kvprobe.TokenSpan:
        """Tokens of record A inside the Time-1 section (every token overlapping A)."""
        return self.record.a_span(history)


def workload_records(n_groups: int = N_GROUPS, seed: int = SEED) -> list[RecordHistory]:
    """The ``n_groups`` histories: history i is family i % 5, that family's item i // 5, variant i % 6."""
    by_family: dict[str, list[list[RecordHistory]]] = {f: [] for f in FAMILIES}
    for h in record_histories("test", seed):
        items = by_family[h.case.family]
        if not items or items[-1][0].case.group != h.case.group:
            items.append([])
        items[-1].append(h)
    out = []
    for i in range(n_groups):
        items = by_family[FAMILIES[i % len(FAMILIES)]]
        k = i // len(FAMILIES)
        if k >= len(items):
            raise ValueError(f"{n_groups} histories need {k + 1} items per family; the test split has {len(items)}")
        variant = RECORD_VARIANTS[i % len(RECORD_VARIANTS)]
        out.append(next(h for h in items[k] if h.case.variant == variant))
    return out


def ledger_lines(n: int, seed: int, key: str) -> list[str]:
    """``n`` seeded synthetic ledger lines for history ``key`` (the first ``m`` of ``n`` are the lines at ``m``)."""
    rng = random.Random(f"{seed}:ledger:{key}")
    lines = []
    for _ in range(n):
        action = rng.choice(_ACTIONS).format(a=rng.choice(_BAYS), b=rng.choice(_BAYS))
        lines.append(f"{rng.choice(_SHIFTS)}: {rng.choice(_COUNTS)} crates of {rng.choice(_ITEMS)} {action}.")
    return lines


def pg19_lines(n: int, seed: int, key: str, avoid: Sequence[str], min_words: int = 8, max_words: int = 30
               ) -> list[str]:
    """``n`` consecutive PG-19 sentences from a seeded start, skipping any that names an ``avoid`` string."""
    sentences = filler_sentences(min_words=min_words, max_words=max_words)
    start = random.Random(f"{seed}:pg19:{key}").randrange(len(sentences))
    out: list[str] = []
    for step in range(len(sentences)):
        if len(out) == n:
            break
        s = sentences[(start + step) % len(sentences)]
        if not _mentions(s, avoid):
            out.append(s)
    if len(out) < n:
        raise ValueError(f"only {len(out)} usable PG-19 sentences for {n} background lines")
    return out


def _mentions(text: str, needles: Sequence[str]) -> bool:
    folded = text.casefold()
    return any(re.search(rf"(?<!\w){re.escape(n.casefold())}(?!\w)", folded) for n in needles if n)


def _avoid(record: RecordHistory) -> list[str]:
    """Strings background text must not contain: the history's values and entities."""
    c = record.case
    return [c.old_value, c.new_value, record.other_value, c.entity, record.other_entity]


def workload_cases(n_groups: int = N_GROUPS, lengths: Sequence[int] = LENGTHS, background: str = "ledger",
                   background_at: str = "after_time1", seed: int = SEED) -> list[WorkloadCase]:
    """Every (history, length) case, history-major (a history's lengths run next to each other)."""
    if background not in BACKGROUND_SOURCES:
        raise ValueError(f"background must be one of {BACKGROUND_SOURCES}, got {background!r}")
    if background_at not in BACKGROUND_PLACES:
        raise ValueError(f"background_at must be one of {BACKGROUND_PLACES}, got {background_at!r}")
    if any(n < 0 for n in lengths) or len(set(lengths)) != len(lengths):
        raise ValueError(f"lengths must be distinct non-negative line counts, got {list(lengths)}")
    cases = []
    longest = max(lengths)
    for record in workload_records(n_groups, seed):
        avoid = _avoid(record)
        if background == "ledger":
            lines = ledger_lines(longest, seed, record.case_id)
            if any(_mentions(line, avoid) for line in lines):
                raise AssertionError(f"{record.case_id}: a ledger line names a value or entity of the history")
        else:
            lines = pg19_lines(longest, seed, record.case_id, avoid)
        cases.extend(WorkloadCase(record, n, tuple(lines[:n]), background_at) for n in lengths)
    return cases
