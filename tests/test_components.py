"""Head ablation and activation patching: batching, composing and refusing.

Their exactness is a ``kvprobe verify`` check each (``head_ablation_equals_hooked_forward``,
``head_mean_ablation_equals_hooked_forward``, ``patch_equals_patching_by_hand``:
``kvprobe.tools.verify.internals``, hand-written torch hooks on plain eager forwards) that
``tests/test_architectures.py`` runs on every tiny family.
"""

from __future__ import annotations

import pytest
import torch

from conftest import QUESTIONS, make_history
from kvprobe import Compose, Full, Mask
from kvprobe.component_edits import PatchError
from kvprobe.interventions import HeadAblation, OperationError, Patch

pytestmark = pytest.mark.usefixtures("one_thread")


def test_patches_and_ablations_batch_with_everything_and_leave_the_history(llama):
    h = make_history(llama)
    access = {"full": Full(), "mask": Mask(h.span("A")), "patched": Compose(Mask(h.span("A")), Patch("full", 2)),
              "no-heads": HeadAblation(3, [0, 1])}
    scores = llama.score(h, QUESTIONS[0], ['{"answer": "Room 18"}', '{"answer": "Room 12"}'], access=access)
    outs = llama.generate(h, QUESTIONS, access=access, max_new_tokens=3)  # two questions: row k reads row k
    caches = llama.run_with_cache(h, QUESTIONS[0], access=access, names=("hidden",), layers=[2])
    assert torch.equal(caches["patched"].hidden[2], caches["full"].hidden[2])
    assert set(scores) == set(outs) == set(access) and h.check_digest()


def test_bad_component_input_is_refused_by_name(llama):
    h = make_history(llama)
    with pytest.raises(ValueError, match="value must be one of"):
        HeadAblation(1, [0], "median")
    with pytest.raises(OperationError, match="head 9 out of range"):
        llama.score(h, QUESTIONS[0], ["x"], access=HeadAblation(1, [9]))
    with pytest.raises(OperationError, match="layer 7 is not an attention layer"):
        llama.score(h, QUESTIONS[0], ["x"], access=HeadAblation(7, [0]))
    with pytest.raises(PatchError, match="'clean' at layer 1: that condition is not in the batch"):
        llama.score(h, QUESTIONS[0], ["x"], access={"full": Full(), "p": Patch("clean", 1)})
    with pytest.raises(PatchError, match=r"positions \[40\] out of range"):
        llama.score(h, QUESTIONS[0], ["x"], access={"full": Full(), "p": Patch("full", 1, (40,))})
