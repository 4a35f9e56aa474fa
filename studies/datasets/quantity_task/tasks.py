"""Generator of the quantity task (paper section 3, spec partC section 1).

120 test groups (60 strict replacements, 20 confirmations, 20 other-attribute,
20 other-entity) over six units, each in two information conditions (B states
the unit / B refers to A for its unit), plus 18 development groups with
disjoint entities, values and templates. Seeded; ``dataset_hash`` identifies
the generated set.

Paper strings live in ``strings.py``. Everything the paper does not give is a
parameter here, marked UNCLEAR with the choice we made:

* attribute names beyond the two quoted ones, value ranges, the color list;
* the historical question wording;
* the B templates of confirmation and other-entity groups;
* the user-message layout (segment order and separators);
* the development templates (the paper says they are separate, not what they say).
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass, field
from typing import Any

import kvprobe

from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.report import Items

from . import strings

#: 20260916 again: quantity task generation (``studies.datasets.quantity_task.tasks.TaskConfig``; the
#: cross-checkpoint and detection studies' quantity cases).
QUANTITY_SEED = 20260916

#: Where reports on this task say their items come from (``studies.common.report.Items``).
ITEMS = Items("reconstruction",
              "the quantity task: the paper's quoted system, record and question strings; our entities, "
              "values, units, notes and layout")

UNITS = ("minutes", "hours", "meters", "liters", "grams", "volts")
#: Strict-replacement groups per unit (paper L3376-3378: 9/6/14/10/11/10).
REPLACEMENTS_PER_UNIT = {"minutes": 9, "hours": 6, "meters": 14, "liters": 10, "grams": 11, "volts": 10}
RELATION_COUNTS = {"replacement": 60, "confirmation": 20, "other_attribute": 20, "other_entity": 20}
#: The 18 development groups: nine replacements and three of each other relation (paper L2830-2831).
DEV_RELATION_COUNTS = {"replacement": 9, "confirmation": 3, "other_attribute": 3, "other_entity": 3}
INFORMATION = ("unit_stated", "unit_from_a")
QUERIES = ("current", "historical", "unrelated")

# UNCLEAR (paper): attribute per unit. The paper quotes "inspection interval"/hours and
# "cycle duration"/minutes; the other four are our choice.
ATTRIBUTES = {
    "minutes": "cycle duration",
    "hours": "inspection interval",
    "meters": "cable length",
    "liters": "tank capacity",
    "grams": "sample mass",
    "volts": "supply voltage",
}
# UNCLEAR (paper): the label colors. "ochre" and "amber" are quoted; the rest are ours.
COLORS = ("ochre", "amber", "teal", "crimson", "ivory", "olive", "maroon", "navy", "coral", "slate",
          "indigo", "saffron")
DEV_COLORS = ("violet", "bronze", "scarlet", "jade", "cobalt", "umber")

# UNCLEAR (paper): historical question wording. All quantity questions request the
# complete quantity without naming the unit (L3387-3389).
HISTORICAL_QUESTION = ("At T1, what was the {attribute} of {entity}? "
                       "Return the complete quantity including its unit.")

# UNCLEAR (paper): user-message layout; segments in this order, blank-line separated.
SEGMENT_ORDER = ("A", "inspection", "note", "B")

# UNCLEAR (paper): development groups use separate templates that are not published.
# Ours paraphrase the test templates.
DEV_RECORD_A = ("Reference time T1. Approved specification of {entity}: {attribute} = {old_num} {unit}. "
                "This is its only certified value at T1.")
DEV_RECORD_B_UNIT_STATED = ("Reference time T2, after T1. The approved {attribute} of {entity} is now "
                            "{new_num} {unit}. This entry takes effect at T2.")
DEV_RECORD_B_UNIT_FROM_A = ("Reference time T2, after T1. The approved {attribute} of {entity} is now "
                            "{new_num}. Its measurement unit is the one used in record A at T1. "
                            "This entry takes effect at T2.")
DEV_INSPECTION = "The inspection tag on {envelope} reads {color}."


@dataclass(frozen=True)
class Group:
    """One test or development group: the facts behind its two information conditions."""

    group_id: str
    split: str
    relation: str
    unit: str
    attribute: str
    entity: str
    old_num: str
    new_num: str
    envelope: str
    color: str
    b_entity: str
    b_attribute: str

    @property
    def current_value(self) -> str:
        """Reference answer of the current query (A's value unless B replaces it)."""
        num = self.new_num if self.relation == "replacement" else self.old_num
        return f"{num} {self.unit}"

    @property
    def old_value(self) -> str:
        return f"{self.old_num} {self.unit}"

    @property
    def b_value(self) -> str:
        """The quantity record B states (for wrong-magnitude categories)."""
        return f"{self.new_num} {self.unit}"


@dataclass(frozen=True)
class Case:
    """A group in one information condition: one history to prefill."""

    group: Group
    information: str

    @property
    def case_id(self) -> str:
        return f"{self.group.group_id}/{self.information}"


@dataclass(frozen=True)
class Query:
    """One question of a case with its reference answer and scored candidates."""

    role: str
    question: str
    reference: str
    candidates: tuple[str, str]  # (right, other) canonical JSON answers
    kind: str  # "quantity" or "label"


@dataclass
class TaskConfig:
    """Generator parameters (all defaults follow the paper where it gives them)."""

    seed: int = QUANTITY_SEED
    n_groups: int | None = None  # first N test groups (None: all 120); for quick runs
    dev: bool = False
    value_range: tuple[int, int] = (100, 999)  # UNCLEAR (paper): examples 159, 233, 628, 807
    dev_value_range: tuple[int, int] = (1000, 1999)  # disjoint from test values
    note_repetitions: int = strings.NOTE_REPETITIONS
    extra: dict[str, Any] = field(default_factory=dict)


def _relations() -> list[tuple[str, str]]:
    """(relation, unit) for the 120 test groups before shuffling."""
    rows = [("replacement", u) for u in UNITS for _ in range(REPLACEMENTS_PER_UNIT[u])]
    for relation in ("confirmation", "other_attribute", "other_entity"):
        # UNCLEAR (paper): units of non-replacement groups; we cycle through the six.
        rows += [(relation, UNITS[i % len(UNITS)]) for i in range(RELATION_COUNTS[relation])]
    return rows


def generate_groups(config: TaskConfig | None = None) -> list[Group]:
    """The test groups (or, with ``config.dev``, the 18 development groups), seeded."""
    config = config or TaskConfig()
    rng = random.Random(config.seed + (1 if config.dev else 0))
    if config.dev:
        # UNCLEAR (paper): units of the development groups; we cycle through the six.
        relations = [r for r, n in DEV_RELATION_COUNTS.items() for _ in range(n)]
        plan = [(relation, UNITS[i % len(UNITS)]) for i, relation in enumerate(relations)]
        lo, hi = config.dev_value_range
        prefix, colors = "Assembly-DEV", DEV_COLORS
    else:
        plan = _relations()
        lo, hi = config.value_range
        prefix, colors = "Assembly-TEST", COLORS
    rng.shuffle(plan)  # relation assignment randomized before inference (L3506-3507)
    groups = []
    for i, (relation, unit) in enumerate(plan):
        old, new = rng.sample(range(lo, hi + 1), 2)
        entity = f"{prefix}-{i:03d}"
        attribute = ATTRIBUTES[unit]
        b_entity, b_attribute = entity, attribute
        if relation == "confirmation":
            new = old
        elif relation == "other_attribute":
            b_attribute = f"auxiliary {attribute}"  # paper L3786-3787
        elif relation == "other_entity":
            b_entity = f"{prefix}-{i + 500:03d}"  # UNCLEAR (paper): the other entity's id
        groups.append(Group(
            group_id=f"{'dev' if config.dev else 'test'}-{i:03d}",
            split="dev" if config.dev else "test",
            relation=relation,
            unit=unit,
            attribute=attribute,
            entity=entity,
            old_num=str(old),
            new_num=str(new),
            envelope=f"Envelope-{prefix.split('-')[1]}-{i:03d}",
            color=colors[rng.randrange(len(colors))],
            b_entity=b_entity,
            b_attribute=b_attribute,
        ))
    if config.n_groups is not None:
        groups = groups[: config.n_groups]
    return groups


def generate_cases(config: TaskConfig | None = None) -> list[Case]:
    """Every group in both information conditions."""
    return [Case(g, info) for g in generate_groups(config) for info in INFORMATION]


def dataset_hash(cases: list[Case]) -> str:
    """SHA-256 of the generated facts (stable across runs with the same config)."""
    blob = json.dumps([[asdict(c.group), c.information] for c in cases], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def segment_texts(case: Case, note_repetitions: int = strings.NOTE_REPETITIONS) -> dict[str, str]:
    """The four record texts of a case."""
    g = case.group
    dev = g.split == "dev"
    a_tpl = DEV_RECORD_A if dev else strings.RECORD_A
    if case.information == "unit_stated":
        b_tpl = DEV_RECORD_B_UNIT_STATED if dev else strings.RECORD_B_UNIT_STATED
    else:
        b_tpl = DEV_RECORD_B_UNIT_FROM_A if dev else strings.RECORD_B_UNIT_FROM_A
    fields = {"entity": g.entity, "attribute": g.attribute, "old_num": g.old_num, "unit": g.unit}
    return {
        "A": a_tpl.format(**fields),
        "inspection": (DEV_INSPECTION if dev else strings.INSPECTION_RECORD).format(envelope=g.envelope,
                                                                                     color=g.color),
        "note": strings.neutral_note(repetitions=note_repetitions),
        # UNCLEAR (paper): B of confirmation and other-entity groups; we reuse the replacement
        # templates with A's value (confirmation) or another entity (other-entity).
        "B": b_tpl.format(entity=g.b_entity, attribute=g.b_attribute, new_num=g.new_num, unit=g.unit),
    }


def build_prompt(case: Case, note_repetitions: int = strings.NOTE_REPETITIONS) -> kvprobe.Prompt:
    """The case's history as a chat prompt (system message and template date from the paper)."""
    texts = segment_texts(case, note_repetitions)
    return study_prompt([(name, texts[name]) for name in SEGMENT_ORDER], chat=True, system=strings.SYSTEM,
                        date=strings.TEMPLATE_DATE)


def queries(case: Case) -> list[Query]:
    """Current, historical and unrelated questions with references and candidates."""
    g = case.group

    def json_answer(value: str) -> str:
        return json.dumps({"answer": value})

    def contrast(right: str, preferred: str) -> tuple[str, str]:
        """(right, other) answers; when the preferred contrast equals the right answer
        (confirmations), score against a value no record states."""
        other = preferred if preferred != right else f"{int(g.old_num) + 1} {g.unit}"
        return json_answer(right), json_answer(other)

    current, old = g.current_value, g.old_value
    return [
        Query("current", strings.CURRENT_QUESTION.format(attribute=g.attribute, entity=g.entity), current,
              contrast(current, old if g.relation == "replacement" else g.b_value), "quantity"),
        Query("historical", HISTORICAL_QUESTION.format(attribute=g.attribute, entity=g.entity), old,
              contrast(old, g.b_value), "quantity"),
        Query("unrelated", strings.UNRELATED_QUESTION.format(envelope=g.envelope), g.color,
              (json_answer(g.color), json_answer("UNKNOWN")), "label"),
    ]


def number_span(history: kvprobe.History, case: Case) -> kvprobe.TokenSpan:
    """Tokens of A's old number that is followed by the unit (unit and entity-id digits excluded)."""
    g = case.group
    a_lo, a_hi = history.rendered.segments["A"]
    a_text = history.text[a_lo:a_hi]
    needle = f"{g.old_num} {g.unit}"
    if a_text.count(needle) != 1:
        raise kvprobe.SpanError(f"{case.case_id}: expected one '{needle}' in record A, found {a_text.count(needle)}")
    start = a_text.index(needle)
    return history.span("A", chars=(start, start + len(g.old_num)))


#: Tokens of the neutral note skipped before a matched control starts. The paper's quoted control
#: window (L3803-3806: "Its 31 masked tokens ... read exactly: ``A square seal is printed ...``")
#: starts at the note's first word, which is the note segment's first token here (tested).
CONTROL_SKIP = 0


def study_conditions(history: kvprobe.History, case: Case, operations: bool = True,
                     control_skip: int = CONTROL_SKIP, operation_controls: bool = False
                     ) -> dict[str, kvprobe.Condition]:
    """The study's conditions: full, source mask + control, number mask + control, and operations.

    ``control_skip``: note tokens skipped before each matched control starts. ``operation_controls``
    (with ``operations``): each operation also applied to the source mask's equal-token note control
    (``recompute-control`` deletes those note tokens' text, ``rebuild-control`` and ``compact-control``
    their rows), the paper's operation-matched controls of the compaction panel (L4535-4537: "Each
    control applies the same operation to an equal number of unrelated-note tokens").
    """
    source = kvprobe.Mask(history.span("A"), name="source")
    number = kvprobe.Mask(number_span(history, case), name="number")
    conds: dict[str, kvprobe.Condition] = {
        "full": kvprobe.Full(),
        "source": source,
        "source-control": kvprobe.matched_control(history, source, "note", skip=control_skip),
        "number": number,
        "number-control": kvprobe.matched_control(history, number, "note", skip=control_skip),
    }
    if operations:
        from kvprobe.interventions import Compact, Rebuild, TextRecompute

        from kvprobe.studies.common.conditions import supported

        # Operations the model's architecture cannot support (compaction with recurrent
        # layers...) are left out, with a warning saying why.
        ops = {"recompute": TextRecompute("A"), "rebuild": Rebuild(source.spans), "compact": Compact(source.spans)}
        if operation_controls:
            spans = conds["source-control"].spans
            ops.update({"recompute-control": TextRecompute(spans=spans, name="recompute-control"),
                        "rebuild-control": Rebuild(spans, name="rebuild-control"),
                        "compact-control": Compact(spans, name="compact-control")})
        conds.update(supported("quantity", history, ops))
    return conds
