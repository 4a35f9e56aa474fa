"""The paper's worked quantity example (Llama-3.2-3B, test-000; paper L3795-3815), shared by the quantity
demo (``kvprobe demo``) and the fact map (``kvprobe map``)."""

from __future__ import annotations

import kvprobe

from . import tasks
from .tasks import Case, Group

# The worked example (paper L3795-3815): Llama-3.2-3B, test-000.
EXAMPLE = Group(
    group_id="paper-test-000",
    split="test",
    relation="replacement",
    unit="minutes",
    attribute="cycle duration",
    entity="Assembly-TEST-000",
    old_num="159",
    new_num="628",
    envelope="Envelope-TEST-000",
    color="amber",
    b_entity="Assembly-TEST-000",
    b_attribute="cycle duration",
)


def example_case(unit_from_a: bool = True) -> Case:
    """The worked example in one information condition."""
    return Case(EXAMPLE, "unit_from_a" if unit_from_a else "unit_stated")


def build_prompt(unit_from_a: bool = True) -> kvprobe.Prompt:
    """The example history as a chat prompt with segments A, inspection, note, B."""
    return tasks.build_prompt(example_case(unit_from_a))
