"""Questions for the signed leave-one-out score of the recognition datasets ([UNCLEAR] in the paper:
its wording is ours). The question names A's entity and attribute with the family's first slot phrasing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from .loo import LooItem

from kvprobe.studies.datasets.recognition.cases import RecognitionCase, expected_answer
from kvprobe.studies.datasets.recognition.families import slot

if TYPE_CHECKING:
    import numpy as np

    from kvprobe.model import Model


def question(case: RecognitionCase) -> str:
    """``"What is <slot> now? Answer with the value only."``"""
    return f"What is {slot(case.family, 0, case.entity)} now? Answer with the value only."


def loo_items(cases: Sequence[RecognitionCase]) -> list[LooItem]:
    """One signed-LOO item per case."""
    items = []
    for case in cases:
        reference, alternative = expected_answer(case)
        items.append(LooItem(case.a_text, case.b_text, question(case), reference, alternative))
    return items


def signed_loo_scores(model: "Model", cases: Sequence[RecognitionCase]) -> "np.ndarray":
    """The signed leave-one-out score of each case (nats), scored with ``model`` (8 cases per batch):
    the function of the ``signed_loo`` :class:`extract.CaseScore` of ``kvprobe extract``."""
    from .loo import signed_loo

    return signed_loo(model, loo_items(cases))
