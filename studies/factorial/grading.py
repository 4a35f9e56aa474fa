"""How the factorial scores one generated answer (paper seed L4819-4829, L5513-5530; spec partD section 0).

Every answer gets, from the shared parsers and rules (nothing re-implemented here):

* ``exact`` (the paper's primary, seed L4821-4823): the answer-field parser
  (:func:`kvprobe.studies.common.answers.parse_answer_field`: one JSON object, extra fields permitted, no fence)
  and case/whitespace-normalized equality with the current value. The unit is part of the value,
  so ``"109"`` is not ``"109 hours"``;
* ``answer_field_valid`` and ``strict_single_field``: the two validity definitions the paper compares
  (seed L4823-4828);
* ``value_category`` and ``missing_unit``: the paper's six value categories with hour/minute/day
  conversion (:func:`kvprobe.studies.datasets.values.classify_value` on the answer-field parse);
* ``complete`` (the v35 "complete-correct" score, spec partD section 0): one JSON object, optionally in
  one clean Markdown fence, strictly one string field, EOS-stopped; quantities by
  :func:`kvprobe.studies.datasets.quantity_task.grading.grade_quantity` (``rule="fenced"``: right number and an
  accepted form of the unit, no conversion), endpoints by normalized equality;
* ``lenient`` (ours, not the paper's; the records study's rule, for small models that answer in
  sentences): of the history's values (current, old, the other record's), the first one the output
  mentions is the current value (:func:`kvprobe.studies.common.answers.first_value`). A quantity must be
  mentioned with its unit ("109 hours"), so a unit omission is not lenient-correct either.

Example::

    >>> g = grade_answer('{"answer": "109"}', "eos", "109 hours", "107 hours", "80 hours")
    >>> g["exact"], g["value_category"], g["missing_unit"]
    (False, 'magnitude_only', True)
"""

from __future__ import annotations

from typing import Any

from kvprobe.studies.common.answers import first_value, normalize, parse_answer_field, parse_strict
from kvprobe.studies.datasets.quantity_task.grading import grade_quantity
from kvprobe.studies.datasets.values import classify_value, is_quantity

#: The row columns :func:`grade_answer` writes.
GRADE_COLUMNS = ("answer", "parse_reason", "answer_field_valid", "strict_single_field", "exact", "complete",
                 "lenient", "value_category", "missing_unit")


def grade_answer(text: str, stop_reason: str, reference: str, old: str, other: str) -> dict[str, Any]:
    """The :data:`GRADE_COLUMNS` of one answer (``reference``: the current value; ``old``: A's value;
    ``other``: the other record's value)."""
    parsed = parse_answer_field(text)
    answer = parsed.answer if parsed.ok else None
    value = classify_value(answer, reference, old)
    if is_quantity(reference):
        complete = grade_quantity(text, stop_reason, reference, old=old, rule="fenced").complete
    else:
        strict = parse_strict(text, allow_fence=True)
        complete = bool(strict.ok and stop_reason == "eos" and normalize(strict.answer or "") == normalize(reference))
    return {"answer": answer, "parse_reason": parsed.reason, "answer_field_valid": parsed.ok,
            "strict_single_field": parsed.strict_single_field,
            "exact": bool(answer is not None and normalize(answer) == normalize(reference)),
            "complete": bool(complete), "lenient": first_value(text, [reference, old, other]) == reference,
            "value_category": value.category, "missing_unit": value.missing_unit}
