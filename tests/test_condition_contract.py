"""The contract every registered condition keeps (``kvprobe.interventions.CONDITIONS``), one test per name.

Like scikit-learn's ``parametrize_with_checks``: a new condition in the registry is checked here
without new test code; its registry line names its example and the reference check that proves it:

* bad input is refused by name before anything runs (:func:`broken`: a span outside the history, an
  unknown segment, a capacity of 0);
* scoring and generating under it leave the shared history bit-identical (the digest);
* it equals an independent reference: a ``kvprobe verify`` check (run here on tiny-llama, must pass)
  or, where that check cannot reach, a named test elsewhere (which must exist).
"""

from __future__ import annotations

import dataclasses

import pytest

from conftest import QUESTIONS, make_history
from kvprobe import Condition, Full
from kvprobe.interventions import CONDITIONS, OperationError, SoftBias, TextRecompute, parse_condition
from kvprobe.tools.verify import verify_model
from kvprobe.prompts import SpanError, TokenSpan
from kvprobe.selection import SelectionAccess

from test_devices import CANDIDATES

#: Fields holding token spans, in the order a condition's input names them (the last one given is broken).
SPAN_FIELDS = ("spans", "superseded", "replacements", "segments")


def broken(condition: Condition, h) -> tuple[type[Exception], str, object] | None:
    """A bad copy of ``condition`` and the error that must name the problem: (error, message, build), or None
    for a condition that takes no input to get wrong. Built with ``dataclasses.replace`` on its fields."""
    outside = TokenSpan(len(h) + 2, len(h) + 5, "outside")
    given = {f.name for f in dataclasses.fields(condition) if f.init}
    if isinstance(condition, TextRecompute):
        return SpanError, "appendix", lambda: dataclasses.replace(condition, segments=("appendix",))
    if isinstance(condition, SoftBias):
        return SpanError, "outside the history", lambda: dataclasses.replace(condition, values=((len(h) + 2, -0.69),))
    if "layer" in given:  # head ablation, patching: a layer the model does not have
        return OperationError, "layer 99", lambda: dataclasses.replace(condition, layer=99)
    if "budget" in given:
        return (ValueError, SpanError), "budget must be at least 1|smaller than the observation window", \
            lambda: dataclasses.replace(condition, budget=0 if isinstance(condition, SelectionAccess) else 1)
    spans = [name for name in SPAN_FIELDS if name in given]
    if spans:
        return SpanError, "outside the history", lambda: dataclasses.replace(condition, **{spans[-1]: outside})
    return None


def test_every_registered_condition_names_a_reference_and_builds_from_its_example(llama):
    h = make_history(llama)
    for name, registered in CONDITIONS.items():
        assert registered.reference and registered.help, name
        assert isinstance(parse_condition(registered.spec(name), h), Condition), name


@pytest.fixture(scope="module")
def verified(llama) -> dict[str, bool]:
    return {r.check: r.passed for r in verify_model(llama)}


@pytest.mark.parametrize("name", list(CONDITIONS))
def test_condition_contract(name, llama, verified):
    proof = CONDITIONS[name].reference
    if proof.startswith("tests/"):
        from pathlib import Path

        path, _, test = proof.partition("::")
        source = (Path(__file__).resolve().parents[1] / path).read_text()
        assert not test or f"def {test}(" in source, f"{name}: {proof} does not exist"
    else:
        assert verified.get(proof) is True, f"{name}: verify check {proof} did not pass on tiny-llama"
    h = make_history(llama)
    access = parse_condition(CONDITIONS[name].spec(name), h)
    bad = broken(access, h)
    if bad is not None:  # refused by name, before anything runs
        error, message, build = bad
        with pytest.raises(error, match=message):
            build().prepare(llama, h, QUESTIONS[0])
    batch = {"full": Full(), name: access}  # with full access beside it (a patch's source)
    if not isinstance(access, SelectionAccess):
        llama.score(h, QUESTIONS[0], CANDIDATES, access=batch)
    llama.generate(h, QUESTIONS[0], access=batch, max_new_tokens=2)
    assert h.check_digest(), f"{name} changed the shared history"
