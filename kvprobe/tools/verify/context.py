"""The shared state of ``kvprobe verify``'s checks on one model, history and question: the record and
replacement spans, the question ids, the tolerances scaled to what is compared, and the list of results."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

from kvprobe.decoding import suffix_ids
from kvprobe.interventions._base import OperationError
from kvprobe.prompts import SpanError
from kvprobe.reference import reference_logits

from .access import CheckResult, precision_floor, scaled_tolerance

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model

#: Re-rotated keys' relative tolerance in float32.
ROPE_TOLERANCE = 1e-5
#: Errors an operation raises when it refuses a model or history.
REFUSALS = (OperationError, SpanError)


class CheckContext:
    """What every check of one model, history and question reads (spans, question ids, tolerances) and where
    it records its result (``self.results``); :mod:`.operations` and :mod:`.internals` run their checks on it.

    Example::

        context = CheckContext(model, history, "Where is the cat?", record="A", replacement="B")
        context.record("bias", "zero_bias_equals_full", 0.0, 0.0)
        assert context.results[0].passed
    """

    def __init__(self, model: "Model", history: "History", question: str, record: str, replacement: str):
        self.model, self.history, self.question = model, history, question
        self.arch: "ArchSummary" = model.arch
        self.span, self.replacement = history.span(record), history.span(replacement)
        self.record_segment = record
        self.q_ids = suffix_ids(model, history, question)
        self.hidden = torch.zeros(len(history), dtype=torch.bool, device=history.device)
        self.hidden[self.span.start : self.span.end] = True
        self.results: list[CheckResult] = []
        # float32 tolerances scaled to what is compared (kvprobe.tools.verify.scaled_tolerance); a bf16/fp16
        # model adds the dtype's own error against a float32 twin (kvprobe.tools.verify.precision_floor)
        floor = precision_floor(model, history, question, self.hidden)
        self.logit_tol = scaled_tolerance(reference_logits(model, history.input_ids.tolist(), self.q_ids),
                                          floor=floor.logit_tolerance)
        self.kv_tol = scaled_tolerance(*(t for i in self.arch.kv_layers for t in history.kv[i]),
                                       floor=floor.kv_tolerance)
        self.hidden_floor = max(floor.kv_tolerance, floor.hidden_tolerance)  # hidden states' own dtype error
        # re-rotated keys are compared relative to their magnitude: float32 to 1e-5; bf16/fp16 keys against
        # RoPE computed in float32, within twice the dtype's epsilon or twice the model's own RoPE error on its
        # cached keys, whichever is larger (transformers rotates in the model's dtype: several roundings)
        self.rope_tol = ROPE_TOLERANCE if model.dtype == torch.float32 else 2 * torch.finfo(model.dtype).eps

    def record(self, operation: str, check: str, value: float, tolerance: float, passed: bool | None = None) -> None:
        ok = value <= tolerance if passed is None else passed
        self.results.append(CheckResult(check, self.model.name, bool(ok), float(value), tolerance, operation))

    def expect_refusal(self, operation: str, check: str, run: Callable[[], object]) -> None:
        """Record whether ``run`` refuses (as the architecture summary says it must)."""
        try:
            run()
        except REFUSALS as err:
            self.results.append(CheckResult(check, self.model.name, True, float("nan"), 0.0, operation, str(err)))
            return
        self.results.append(CheckResult(check, self.model.name, False, float("nan"), 0.0, operation,
                                        "expected a refusal, but the operation ran"))
