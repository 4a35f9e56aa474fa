"""The first-value-token margin: the correct label against UNKNOWN under the canonical JSON prefix.

The paper scores "the first token of the correct label against the first token of UNKNOWN under
that prefix" (seed L3894-3896). We score two teacher-forced candidates, the prefix followed by the
first value token of each answer; the prefix tokens are the same in both, so the difference of
their summed log-probabilities is log p(first label token | prefix) - log p(first UNKNOWN token |
prefix), in nats.

Example::

    cands = first_token_candidates(model.tokenizer, ("amber", "UNKNOWN"))   # ('{"answer": "amber', '{"answer": "UN')
    scores = model.score(history, question, cands)
    margin = scores.margin()
"""

from __future__ import annotations

from typing import Any, Sequence

from .strings import ANSWER_PREFIX, UNKNOWN_VALUE


class FirstTokenError(ValueError):
    """The prefix does not tokenize the same before every value, or two values share their first token."""


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def first_token_candidates(tokenizer: Any, values: Sequence[str], prefix: str = ANSWER_PREFIX) -> tuple[str, ...]:
    """For each value, the text of ``prefix`` plus the value's first token, as the scorer tokenizes it.

    The candidate is the decoded ids of ``prefix + value`` up to the first id past the prefix's ids;
    raises :class:`FirstTokenError` when the prefix's ids are not a prefix of ``prefix + value``'s ids,
    when the candidate does not re-tokenize to those ids, or when two values share their first token.
    """
    head = _ids(tokenizer, prefix)
    out, firsts = [], []
    for value in values:
        ids = _ids(tokenizer, prefix + value)
        if ids[: len(head)] != head or len(ids) <= len(head):
            raise FirstTokenError(f"{prefix + value!r} does not tokenize as {prefix!r}'s ids {head} followed by "
                                  f"the value's: {ids}")
        keep = ids[: len(head) + 1]
        text = tokenizer.decode(keep)
        if _ids(tokenizer, text) != keep:
            raise FirstTokenError(f"the candidate {text!r} does not re-tokenize to {keep}")
        out.append(text)
        firsts.append(keep[-1])
    if len(set(firsts)) != len(firsts):
        raise FirstTokenError(f"values {list(values)} share a first token after {prefix!r}")
    return tuple(out)


def label_candidates(tokenizer: Any, label: str) -> tuple[str, str]:
    """(label, UNKNOWN) first-token candidates of an unrelated question (:func:`first_token_candidates`)."""
    right, unknown = first_token_candidates(tokenizer, (label, UNKNOWN_VALUE))
    return right, unknown
