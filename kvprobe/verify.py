"""``kvprobe verify``: prove on a given model that access conditions compute what they claim.

Each check compares the traced, cached path against an independent computation
(``kvprobe.reference``) in the model's dtype (fp32 by default) and reports the
largest absolute difference against a stated tolerance:

a. ``nnsight_mask_equals_explicit_4d``: the nnsight mask intervention equals a
   plain forward given the same explicit 4-D additive mask.
b. ``empty_mask_equals_full``: a traced intervention that hides nothing equals full access.
c. ``prefix_digest_unchanged``: the shared history K/V hash is unchanged after all conditions.
d. ``masked_attention_zero``: attention probability on masked keys is 0 in every masked layer.
e. ``cached_equals_one_pass``: cached history + question equals one uncached forward over
   the whole text with the same mask (and, with no mask, transformers' own native masks).
f. ``condition_order_invariant``: running the conditions in another order changes nothing.

Then one check per cache operation (``interventions.checks``): compaction,
rebuild, selective refresh, online mask, text recompute, drop, zero bias, zero K.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import torch

from .access import Access, Full, Mask, matched_control
from .decoding import question_logits, suffix_ids
from .engine import fork_rows, pad_suffix_block, traced_forward
from .prompts import Prompt
from .reference import explicit_cached_mask, reference_logits, transformers_eager

if TYPE_CHECKING:
    from .history import History
    from .model import Model

#: fp32 equivalence tolerance on logits (max abs difference).
LOGIT_TOLERANCE = 1e-4

# A neutral two-record history used by verify (not a paper task).
VERIFY_SEGMENTS = [
    ("A", "Record A, Monday: the weekly planning meeting is held in Room 12 on the third floor."),
    ("note", " ".join(["A square seal is printed beside a blank signature box."] * 3)),
    ("B", "Record B, Friday: the weekly planning meeting moves to Room 18 on the fifth floor."),
]
VERIFY_QUESTIONS = ["Which room is the weekly planning meeting in now?", "What is printed beside the box?"]


@dataclass(frozen=True)
class CheckResult:
    """One verification result, as printed by ``kvprobe verify --json``."""

    check: str
    model: str
    passed: bool
    value: float
    tolerance: float


def verify_model(model: "Model", history: "History | None" = None, operations: bool = True) -> list[CheckResult]:
    """Run checks (a)-(f) on ``model``, then (with ``operations``) the cache-operation checks
    of ``interventions.checks``; return all results."""
    if history is None:
        chat = getattr(model.tokenizer, "chat_template", None) is not None
        history = model.prefill(Prompt(VERIFY_SEGMENTS, chat=chat, system="Answer from the records."))
    name = model.name
    source = Mask(history.span("A"), name="source")
    control = matched_control(history, source, segment="note")
    conditions: list[Access] = [Full(), source, control]
    question = VERIFY_QUESTIONS[0]
    q_ids = suffix_ids(model, history, question)
    h_ids = history.input_ids.tolist()
    results: list[CheckResult] = []

    def record(check: str, value: float, tolerance: float = LOGIT_TOLERANCE) -> None:
        results.append(CheckResult(check, name, bool(value <= tolerance), float(value), tolerance))

    # (a) nnsight intervention vs the same explicit 4-D mask given to transformers directly.
    out = question_logits(model, history, question, conditions)
    diff_a = 0.0
    for i, access in enumerate(conditions):
        hidden = access.hidden_positions(len(history))
        ref = _cached_explicit_logits(model, history, q_ids, hidden)
        diff_a = max(diff_a, float((out.logits[i] - ref).abs().max()))
    record("nnsight_mask_equals_explicit_4d", diff_a)

    # (b) an intervention that hides nothing, in every attention layer, equals full access exactly.
    rows = fork_rows([history.base_state()])
    rows.hidden = {layer: torch.zeros(1, len(history), dtype=torch.bool) for layer in model.arch.attention_layers}
    ids, valid = pad_suffix_block([q_ids], model.pad_id)
    empty = traced_forward(model, rows, ids, valid).logits[0]
    record("empty_mask_equals_full", float((empty - out.logits[0]).abs().max()), 0.0)

    # (d) attention probability on masked keys is zero in every masked layer.
    layers = source.layers_for(model.arch)
    att = question_logits(model, history, question, [source], capture_attention=layers)
    hidden = source.hidden_positions(len(history))
    worst = max(float(att.attention[layer][0][..., : len(history)][..., hidden].max()) for layer in layers)
    record("masked_attention_zero", worst, 0.0)

    # (e) cached history + question vs one uncached forward over the whole text.
    diff_e = 0.0
    for i, access in enumerate(conditions):
        ref = reference_logits(model, h_ids, q_ids, access.hidden_positions(len(history)))
        diff_e = max(diff_e, float((out.logits[i] - ref).abs().max()))
    native = reference_logits(model, h_ids, q_ids, None, explicit_mask=False)
    diff_e = max(diff_e, float((out.logits[0] - native).abs().max()))
    record("cached_equals_one_pass", diff_e)

    # (f) condition order.
    reordered = list(reversed(conditions))
    out_r = question_logits(model, history, question, reordered)
    n = len(conditions)
    diff_f = max(float((out.logits[i] - out_r.logits[n - 1 - i]).abs().max()) for i in range(n))
    record("condition_order_invariant", diff_f)

    op_results: list[CheckResult] = []
    if operations:
        # The operations live in the interventions package, which builds on this one;
        # verify loads their checks on demand.
        from interventions.checks import verify_operations

        op_results = verify_operations(model, history, question)
    # (c) the shared prefix is bit-identical after everything above.
    record("prefix_digest_unchanged", 0.0 if history.check_digest() else 1.0, 0.0)
    order = ["nnsight_mask_equals_explicit_4d", "empty_mask_equals_full", "prefix_digest_unchanged",
             "masked_attention_zero", "cached_equals_one_pass", "condition_order_invariant"]
    results = sorted(results, key=lambda r: order.index(r.check))
    return results + op_results


def _cached_explicit_logits(model: "Model", history: "History", q_ids: list[int], hidden: torch.Tensor) -> torch.Tensor:
    """Suffix logits from a plain transformers forward on a cache copy with an explicit 4-D mask."""
    T, L = len(history), len(q_ids)
    cache = fork_rows([history.base_state()]).cache  # a plain copy of the history cache
    with torch.inference_mode(), transformers_eager(model):
        return model.hf(
            input_ids=torch.tensor([q_ids]),
            attention_mask=explicit_cached_mask(model, T, T, L, hidden),
            position_ids=torch.arange(T, T + L)[None],
            past_key_values=cache,
            use_cache=True,
        ).logits[0]


def results_as_dicts(results: list[CheckResult]) -> list[dict[str, Any]]:
    """JSON-ready list of ``{"check", "model", "passed", "value", "tolerance"}``."""
    return [asdict(r) for r in results]
