"""The contract every registered condition keeps (``kvprobe.interventions.OPERATIONS``), one test per name.

Like scikit-learn's ``parametrize_with_checks``: a new condition in the registry is checked here
without new test code once it names the reference check that proves it (:data:`PROVEN_BY`):

* bad spans are refused by name before anything runs (a span outside the history);
* scoring and generating under it leave the shared history bit-identical (the digest);
* it equals an independent reference: a ``kvprobe verify`` check (run here on tiny-llama, must pass)
  or, for the query-aware methods, a brute-force test in tests/test_query_aware.py.
"""

from __future__ import annotations

import pytest

from conftest import QUESTIONS, make_history
from kvprobe import Mask, matched_control
from kvprobe.interventions import (OPERATIONS, Compact, Drop, Finch, OnlineMask, Quest, Rebuild, RecentPages,
                                   RefreshKV, SegmentRebuild, SelectiveRefresh, SoftBias, TextRecompute, Zero, parse_condition)
from kvprobe.tools.verify import verify_model
from kvprobe.prompts import SpanError, TokenSpan
from kvprobe.selection import SelectionAccess

from test_devices import CANDIDATES, SPECS

#: The reference check of each registered condition: a ``kvprobe verify`` check name, or a test elsewhere.
PROVEN_BY = {
    "full": "empty_mask_equals_full",
    "mask": "nnsight_mask_equals_explicit_4d",
    "control": "cached_equals_one_pass",  # the matched control is a mask of the note's first tokens
    "zero-k": "zero_k_equals_plain_forward",
    "zero-v": "zero_v_equals_plain_forward",
    "zero-kv": "zero_kv_equals_plain_forward",
    "bias": "bias_equals_explicit_mask",
    "rebuild": "rebuild_equals_one_pass",
    "refresh": "refresh_equals_one_pass",
    "refresh-full": "tests/test_interventions.py::test_recomputed_states_generate_like_the_uncached_reference",
    "online-mask": "online_mask_equals_one_pass",
    "rebuild-segments": "segment_rebuild_equals_one_pass",
    "compact": "compact_keys_equal_rope_at_new_positions",
    "drop": "drop_original_positions_equals_mask",
    "recompute": "text_recompute_equals_one_pass",
    "recompute-prefix": "text_recompute_prefix_equals_fresh_prefill",
    "no-context": "tests/test_no_context.py::test_no_context_equals_a_plain_forward_of_the_question_alone",
    "quest": "tests/test_query_aware.py::test_quest_matches_brute_force_selection",
    "recent-pages": "tests/test_query_aware.py::test_quest_matches_brute_force_selection",
    "finch": "tests/test_query_aware.py::test_finch_matches_fresh_prefill_with_rope_at_compact_positions",
    "refreshkv": "tests/test_query_aware.py::test_refreshkv_matches_brute_force",
}


def _outside(h) -> TokenSpan:
    """A span past the end of the history."""
    return TokenSpan(len(h) + 2, len(h) + 5, "outside")


#: Bad input for each condition and the error that names it (None: the condition takes no input to get wrong).
BAD_INPUT = {
    "full": None,
    "no-context": None,
    "mask": (SpanError, "outside the history", lambda h: Mask(_outside(h))),
    "control": (SpanError, "no segment 'appendix'", lambda h: matched_control(h, Mask(h.span("A")), segment="appendix")),
    "zero-k": (SpanError, "outside the history", lambda h: Zero(_outside(h), "k")),
    "zero-v": (SpanError, "outside the history", lambda h: Zero(_outside(h), "v")),
    "zero-kv": (SpanError, "outside the history", lambda h: Zero(_outside(h), "kv")),
    "bias": (SpanError, "outside the history", lambda h: SoftBias([(_outside(h), -0.69)])),
    "rebuild": (SpanError, "outside the history", lambda h: Rebuild(_outside(h))),
    "refresh": (SpanError, "outside the history", lambda h: SelectiveRefresh(_outside(h))),
    "refresh-full": (SpanError, "outside the history", lambda h: SelectiveRefresh(_outside(h), full=True)),
    "online-mask": (SpanError, "outside the history", lambda h: OnlineMask(h.span("A"), _outside(h))),
    "rebuild-segments": (SpanError, "outside the history", lambda h: SegmentRebuild(h.span("A"), [_outside(h)])),
    "compact": (SpanError, "outside the history", lambda h: Compact(_outside(h))),
    "drop": (SpanError, "outside the history", lambda h: Drop(_outside(h))),
    "recompute": (SpanError, "appendix", lambda h: TextRecompute("appendix")),
    "recompute-prefix": (SpanError, "appendix", lambda h: TextRecompute("appendix", stored_prefix=True)),
    "quest": (ValueError, "budget must be at least 1", lambda h: Quest(budget=0)),
    "recent-pages": (ValueError, "budget must be at least 1", lambda h: RecentPages(0)),
    "finch": (SpanError, "smaller than the observation window", lambda h: Finch(budget=1)),
    "refreshkv": (ValueError, "budget must be at least 1", lambda h: RefreshKV(budget=0)),
}


def test_every_registered_condition_names_its_reference():
    assert set(PROVEN_BY) == set(OPERATIONS) == set(BAD_INPUT)


@pytest.fixture(scope="module")
def verified(llama) -> dict[str, bool]:
    return {r.check: r.passed for r in verify_model(llama)}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_condition_contract(name, llama, verified):
    proof = PROVEN_BY[name]
    if proof.startswith("tests/"):
        from pathlib import Path

        path, _, test = proof.partition("::")
        source = (Path(__file__).resolve().parents[1] / path).read_text()
        assert not test or f"def {test}(" in source, f"{name}: {proof} does not exist"
    else:
        assert verified.get(proof) is True, f"{name}: verify check {proof} did not pass on tiny-llama"
    h = make_history(llama)
    access = parse_condition(SPECS.get(name, name), h)
    bad = BAD_INPUT[name]
    if bad is not None:  # refused by name, before anything runs
        error, message, build = bad
        with pytest.raises(error, match=message):
            build(h).prepare(llama, h, QUESTIONS[0])
    if not isinstance(access, SelectionAccess):
        llama.score(h, QUESTIONS[0], CANDIDATES, access={name: access})
    llama.generate(h, QUESTIONS[0], access={name: access}, max_new_tokens=2)
    assert h.check_digest(), f"{name} changed the shared history"
