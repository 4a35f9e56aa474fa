"""``Model.run_with_cache``: what it refuses and how its caches are indexed.

Its exactness is a ``kvprobe verify`` check (``run_with_cache_equals_plain_forward``,
``kvprobe.tools.verify.internals``) that ``tests/test_architectures.py`` runs on every tiny family:
logits, hidden states, attention probabilities and question keys under full access, a mask, a bias
and a compaction against a plain eager forward with explicit 4-D masks.
"""

from __future__ import annotations

import pytest

from conftest import QUESTIONS, make_history

pytestmark = pytest.mark.usefixtures("one_thread")


def test_bad_capture_requests_are_refused_before_the_forward(llama):
    h = make_history(llama)
    with pytest.raises(ValueError, match="unknown capture name"):
        llama.run_with_cache(h, QUESTIONS[0], names=("hiden",))
    with pytest.raises(ValueError, match=r"layer\(s\) \[9\] out of range"):
        llama.run_with_cache(h, QUESTIONS[0], layers=[0, 9])
    one = llama.run_with_cache(h, QUESTIONS[0], names=("hidden",), layers=[-1])["full"]
    assert set(one.hidden) == {llama.arch.num_layers - 1} and one.logits is None and not one.attention
    with pytest.raises(KeyError, match="layer 0 was not captured"):
        one.hidden[0]
