"""How one generated answer is graded, and how a greedy trace is re-scored at shorter budgets.

Three views of the same text (paper app:v7_bridge seed L5617-5619, app:v35_generation L4914-4922,
app:v7_errors/v8_units; spec partD sections 0 and 4-5):

* **exact field** (the paper's primary score in the matched experiment): the paper's answer-field
  parser (:func:`kvprobe.studies.common.answers.parse_answer_field`: one whole JSON object, no fence, extra
  fields allowed) and case-folded, whitespace-normalized equality of its ``answer`` with the reference;
  malformed JSON is wrong. Units stay part of the value. The stop reason is not consulted (the parse
  decides; a trace cut inside its JSON fails the parse anyway).
* **complete** (the paper's cross-model "complete correct response"): the quantity task's fenced rule
  (:mod:`kvprobe.studies.datasets.quantity_task.grading`, rule ``"fenced"``): exactly one JSON object with one
  string ``answer``, optionally inside one clean Markdown fence, EOS required (a capped answer is
  ``capped``); a quantity needs the right number and an accepted form of the reference unit, no
  conversion; other values (cities, endpoints, OAKS letters) need normalized equality. Prose, extra
  fields and caps are categories of their own (``format_failure``, ``capped``).
* **value category** (:func:`kvprobe.studies.datasets.values.classify_value`): correct / magnitude_only (the unit
  omitted) / old_value / other_value / unknown / invalid_format, of the exact-field parser's answer.
* **lenient** (ours, for models too small to answer in JSON): exact, or, of the values the case can be
  answered with (``mentions``, the reference first), the first one the text mentions is the reference
  (:func:`kvprobe.studies.common.answers.first_value`, as the records study's lenient rule). No EOS needed.

Generation limits (app:v35_generation_limits, seed L5345-5360; spec partD 1e): a greedy trace of
``max_new_tokens`` tokens contains every shorter greedy trace, so the answer under budget ``k`` is the
trace's first ``k`` tokens (:func:`trace_prefix`): EOS-stopped when the trace stopped within ``k``
tokens, else capped at ``k``.

Example::

    >>> grade_answer('{"answer": "109"}', "eos", "109 hours", "107 hours")["value_category"]
    'magnitude_only'
    >>> grade_answer('{"answer": "109 hours"}', "cap", "109 hours", "107 hours")["complete_category"]
    'capped'
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

from kvprobe.decoding import Generation
from kvprobe.studies.common.answers import first_value, normalize, parse_answer_field
from kvprobe.studies.datasets.quantity_task.grading import grade_label, grade_quantity
from kvprobe.studies.datasets.values import classify_value, is_quantity

#: The row columns :func:`grade_answer` writes.
GRADE_COLUMNS = ("exact", "exact_parse", "answer", "value_category", "missing_unit", "complete",
                 "complete_category", "lenient")
#: The per-budget columns :func:`budget_grades` keeps for every budget.
BUDGET_COLUMNS = ("n_tokens", "stop_reason", "exact", "complete", "complete_category", "value_category", "lenient")




def grade_answer(text: str, stop_reason: str, reference: str, old: str, mentions: Sequence[str] = ()
                 ) -> dict[str, Any]:
    """The :data:`GRADE_COLUMNS` of one answer: exact field, value category, the complete and lenient rules.

    ``reference``: the requested value (a quantity such as ``"109 hours"``, a label, an OAKS letter);
    ``old``: the superseded value (equal to ``reference`` when nothing was superseded); ``mentions``: the
    values the lenient rule looks for, the right one first (empty: lenient = exact).
    """
    parsed = parse_answer_field(text)
    answer = parsed.answer if parsed.ok else None
    value = classify_value(answer, reference, old)
    if is_quantity(reference):
        complete = grade_quantity(text, stop_reason, reference, old=old, rule="fenced")
    else:
        complete = grade_label(text, stop_reason, reference, rule="fenced")
    exact = answer is not None and normalize(answer) == normalize(reference)
    lenient = exact or (bool(mentions) and first_value(text, list(mentions)) == mentions[0])
    return {"exact": exact, "exact_parse": parsed.reason, "answer": answer, "value_category": value.category,
            "missing_unit": value.missing_unit, "complete": complete.complete, "complete_category": complete.category,
            "lenient": lenient}


def trace_prefix(generation: Generation, budget: int, decode: Callable[[Sequence[int]], str],
                 eos_ids: Collection[int]) -> Generation:
    """The greedy answer a budget of ``budget`` tokens would have given, read off a longer trace.

    Greedy decoding is deterministic, so the first ``budget`` tokens of the trace are that answer. It
    stopped at EOS when its last token is an EOS token (then the text leaves it out, as
    :func:`kvprobe.decoding.answer` does), else it is capped. ``decode`` is the tokenizer's ``decode``.

    Example: a 12-token trace ending in EOS gives, at budget 40, itself; at budget 8, its first eight
    tokens with ``stop_reason == "cap"``.
    """
    if budget < 1:
        raise ValueError(f"budget must be at least 1, got {budget}")
    toks = list(generation.token_ids[:budget])
    stopped = bool(toks) and toks[-1] in eos_ids
    return Generation(text=decode(toks[:-1] if stopped else toks), token_ids=tuple(toks),
                      stop_reason="eos" if stopped else "cap", n_tokens=len(toks), access=generation.access)


def budget_grades(generation: Generation, budgets: Sequence[int], decode: Callable[[Sequence[int]], str],
                  eos_ids: Collection[int], reference: str, old: str, mentions: Sequence[str] = ()
                  ) -> dict[str, dict[str, Any]]:
    """Per budget (as a string key, JSON objects need them), the :data:`BUDGET_COLUMNS` of the trace's prefix."""
    out = {}
    for k in budgets:
        prefix = trace_prefix(generation, k, decode, eos_ids)
        grades = grade_answer(prefix.text, prefix.stop_reason, reference, old, mentions)
        out[str(k)] = {"n_tokens": prefix.n_tokens, "stop_reason": prefix.stop_reason,
                       **{c: grades[c] for c in BUDGET_COLUMNS[2:]}}
    return out
