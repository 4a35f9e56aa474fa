"""Signed leave-one-out (paper partB section 2): does hiding record A favor the expected answer?

For a history A + B and a question with a reference answer y_ref and an
alternative y_alt, M(c, q) = log p(y_ref | c, q) - log p(y_alt | c, q) (summed
token log-probabilities, no length normalization) and

    s_LOO(A, q) = M(mask A, q) - M(full, q),

where "mask A" hides A's cached rows from the question and the answer (kvprobe's
``Mask``). Positive: masking A favors the expected answer. Unlike the fixed
scores it needs the reference answer and a masked pass, so it is computed with
the model at extraction time and stored per case (``cases/scores/signed_loo``).

The history is rendered through the model's chat template when it has one
(templateless otherwise), A and B joined by a newline ([UNCLEAR] in the paper).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from kvprobe.access import Full, Mask
from kvprobe.decoding import Request, answer
from kvprobe.prompts import Prompt
from kvprobe.studies.common.chat_template import study_prompt

if TYPE_CHECKING:
    from kvprobe.model import Model

#: Cases whose histories are prefilled and scored together.
BATCH_CASES = 8


@dataclass(frozen=True)
class LooItem:
    """One signed-LOO query: the two records, a question, the expected answer and its alternative."""

    a_text: str
    b_text: str
    question: str
    reference: str
    alternative: str


def loo_prompt(item: LooItem, chat: bool) -> Prompt:
    """The history of one item: A and B joined by a newline, through the chat template when ``chat`` (its settings
    from :mod:`kvprobe.studies.common.chat_template`)."""
    return study_prompt([("A", item.a_text), ("B", item.b_text)], chat=chat, sep="\n")


def signed_loo(model: "Model", items: Sequence[LooItem], batch_cases: int = BATCH_CASES) -> np.ndarray:
    """s_LOO per item (nats), full access and A masked scored in one batch per group of cases."""
    chat = getattr(model.tokenizer, "chat_template", None) is not None
    out = np.zeros(len(items))
    for lo in range(0, len(items), batch_cases):
        group = items[lo : lo + batch_cases]
        rows, candidates = [], []
        for item in group:
            h = model.prefill(loo_prompt(item, chat))
            for access in (Full(), Mask(h.span("A"), name="mask-A")):
                rows.append((h, Request(item.question, access)))
                candidates.append((item.reference, item.alternative))
        scores = [a.scores for a in answer(model, rows, candidates)]
        for j in range(len(group)):
            full, masked = scores[2 * j], scores[2 * j + 1]
            out[lo + j] = masked.margin() - full.margin()
    return out
