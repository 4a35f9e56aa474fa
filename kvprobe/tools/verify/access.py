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
g. ``batched_equals_single_rows``: the conditions batched together equal each run alone
   (exactly on dense models; routed experts round differently per batch composition).
h. ``sdpa_equals_eager``: kvprobe's default attention (SDPA where no logits are needed)
   equals its eager attention on the same batch (models loaded with ``kvprobe``).
i. ``shared_history_equals_per_row``: a batch whose rows read one shared copy of the
   history equals the same batch with a copy per row (refused, with the reason, where
   the family cannot share: ``ArchSummary.shared_history_refusal``).
j. ``fixed_shape_decode_equals_decode``: decode steps of that batch in fixed shapes
   (``kvprobe.static_decode``; replayed as a CUDA graph on a GPU, which is how a GPU decodes)
   give the logits of the ordinary decode steps fed the same tokens (refused, with the
   reason, where the batch cannot decode in fixed shapes: ``static_refusal``).

Checks (a), (b) and (e) run each condition as a batch of one row, like the references.

Then (``kvprobe.tools.verify.verify_model``, which ``kvprobe verify`` runs) one or two
checks per cache operation (``kvprobe.tools.verify.operations``): soft
bias, zeroing K / V / both, rebuild, selective refresh, online mask, compaction,
drop, text recompute. An operation a model's cache cannot support (the
architecture adapter says why, e.g. compaction with recurrent layers) is
*expected to refuse*: the check passes only if it raises that error.

Every result names the operation it covers, so ``kvprobe matrix`` can build the
family x operation table from them.
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

from kvprobe.access import Condition, Full, Mask, matched_control
from kvprobe.decoding import Request, prepare_states, question_logits, run_questions, suffix_ids
from kvprobe.attention import GROUPED_EAGER, KVPROBE_SDPA
from kvprobe.forward import shares_history, traced_forward
from kvprobe.rows import fork_rows, pad_suffix_block
from kvprobe.prompts import Prompt
from kvprobe import reference
from kvprobe.reference import attention_implementation, cached_explicit_logits, reference_logits
from kvprobe.static_decode import StaticDecoder, static_refusal
from kvprobe.transformers_api import cache_argument, output_cache

if TYPE_CHECKING:
    from kvprobe.history import History
    from kvprobe.model import Model

#: fp32 equivalence tolerance on logits and K/V (max abs difference; ``kvprobe.reference``'s): this, or
#: :data:`RELATIVE_TOLERANCE` of the reference's largest magnitude when that is larger
#: (:func:`scaled_tolerance`).
LOGIT_TOLERANCE = reference.LOGIT_TOLERANCE
#: Float32 rounding grows with the magnitude of what is compared: SDPA and eager (or two
#: matrix-product shapes) differ by 1.5e-4 on gemma3-270m, whose logits reach 26.5 (5.6e-6 of
#: them). A wrong mask or row moves logits by 1e-2 to 1.
RELATIVE_TOLERANCE = 1e-5
#: Batched rows vs the same rows alone. Dense models agree exactly (0.0); routed experts
#: group a batch's tokens per expert, so batch composition changes their fp32 rounding
#: (up to 1.1e-4 on tiny-gemma4 with transformers' grouped_mm experts). A row mix-up
#: changes logits by O(1).
BATCH_TOLERANCE = 1e-3
#: The operation name of check (i): batches reading one shared copy of the history.
SHARED = "shared-history"
#: The matrix column of the fixed-shape decode check (j).
FIXED_SHAPE = "fixed-shape-decode"

# A neutral two-record history used by verify (not a paper task).
VERIFY_SEGMENTS = [
    ("A", "Record A, Monday: the weekly planning meeting is held in Room 12 on the third floor."),
    ("note", " ".join(["A square seal is printed beside a blank signature box."] * 3)),
    ("B", "Record B, Friday: the weekly planning meeting moves to Room 18 on the fifth floor."),
]
VERIFY_QUESTIONS = ["Which room is the weekly planning meeting in now?", "What is printed beside the box?"]


def scaled_tolerance(*references: torch.Tensor, floor: float = 0.0) -> float:
    """:data:`LOGIT_TOLERANCE`, or :data:`RELATIVE_TOLERANCE` x the largest magnitude in ``references``
    if that is larger (``scaled_tolerance(torch.tensor([26.5]))`` is 2.65e-4), or ``floor`` if larger
    still (the precision floor of a bf16/fp16 model: :func:`precision_floor`)."""
    scale = max((float(t.abs().max()) for t in references if t is not None and t.numel()), default=0.0)
    return max(LOGIT_TOLERANCE, RELATIVE_TOLERANCE * scale, floor)


#: A bf16/fp16 check passes within this many times the dtype's own error on the model (:func:`precision_floor`):
#: kvprobe's path and its reference each carry that error against float32, so they may differ by twice it.
PRECISION_FACTOR = 2.0


@dataclass(frozen=True)
class PrecisionFloor:
    """The error a low-precision dtype itself makes on one model and history. Zero for a float32 model.

    ``logits``: the largest disagreement among plain transformers forwards over history + question
    that are all correct: in the model's dtype with transformers' eager attention, with SDPA, and a
    float32 copy of the same weights (each pair compared; routed experts can switch experts between
    two low-precision kernels, which the float32 comparison alone would not show). ``kv``: the same
    for the history's cached K/V (kvprobe's prefill with SDPA and with eager attention, and in float32).
    """

    logits: float = 0.0
    kv: float = 0.0
    #: the same for the question's hidden states (every layer's output but the last, normed one)
    hidden: float = 0.0

    @property
    def logit_tolerance(self) -> float:
        return PRECISION_FACTOR * self.logits

    @property
    def hidden_tolerance(self) -> float:
        return PRECISION_FACTOR * self.hidden

    @property
    def kv_tolerance(self) -> float:
        return PRECISION_FACTOR * self.kv


def float32_twin(model: "Model") -> "Model":
    """A float32 copy of ``model`` (the same weights, upcast exactly; on the same devices)."""
    import copy

    from kvprobe.model import Model

    hf = copy.deepcopy(model.hf).float()
    return Model(hf, model.tokenizer, name=f"{model.name} (float32 twin)", source=model.source,
                 weight_hash=model.weight_hash)


def _largest_gap(tensors: list[list[torch.Tensor | None]]) -> float:
    """Max |a - b| over every pair of runs (each run: a list of tensors in the same order)."""
    gap = 0.0
    for i, a in enumerate(tensors):
        for b in tensors[i + 1:]:
            for x, y in zip(a, b):
                if x is not None and x.numel():
                    gap = max(gap, float((x.float() - y.float()).abs().max()))
    return gap


def precision_floor(model: "Model", history: "History", question: str,
                    hidden: torch.Tensor | None = None) -> PrecisionFloor:
    """The :class:`PrecisionFloor` of ``model`` on ``history`` + ``question`` (zero for float32).

    The float32 reference is a twin of the same weights (:func:`float32_twin`): a bf16/fp16 check
    passes when kvprobe's result is as close to its reference as correct computations in that dtype
    are to each other and to float32 (times :data:`PRECISION_FACTOR`). ``hidden`` (Bool[T], the record
    the checks hide) adds the same comparison with those positions hidden from the question: hiding
    the record an answer rests on can make a low-precision dtype's own error several times larger
    (tiny-qwen3-next in bfloat16: transformers' eager attention 1.2 nats from float32 with the whole
    history, 5.3 with record A hidden).
    """
    if model.dtype == torch.float32:
        return PrecisionFloor()
    key = (id(model), question, None if hidden is None else tuple(torch.nonzero(hidden).flatten().tolist()))
    cached = _FLOORS.get(history, {}).get(key)
    if cached is not None:
        return cached
    twin = float32_twin(model)
    h_ids, q_ids = history.input_ids.tolist(), suffix_ids(model, history, question)
    ids = torch.tensor([h_ids + q_ids], dtype=torch.long, device=model.device)
    logits, masked, kv, states, masked_states = [], [], [], [], []
    T = len(h_ids)

    def one_pass(m: "Model", impl: str | None, mask=None) -> list[torch.Tensor]:
        """The question's logits and hidden states (every layer's output but the last) of one uncached pass."""
        context = attention_implementation(m, impl) if impl else reference.transformers_eager(m)
        with torch.inference_mode(), context:
            out = m.hf(input_ids=ids, attention_mask=mask, use_cache=False, output_hidden_states=True)
        return [out.logits[0, T:], *(h[0, T:] for h in out.hidden_states[1:-1])]

    for m in (model, twin):
        with torch.inference_mode():
            # transformers' own cached path: the history, then the question on its cache
            cache = output_cache(m.hf(input_ids=ids[:, :T], use_cache=True))
            logits.append([m.hf(input_ids=ids[:, T:], use_cache=True, **cache_argument(m.hf, cache)).logits[0]])
        for impl in (None, "sdpa"):  # transformers' eager and SDPA over the whole text
            run = one_pass(m, impl)
            logits.append(run[:1])
            states.append(run[1:])
        if hidden is not None and bool(hidden.any()):  # the same with the record hidden from the question
            mask = reference.uncached_mask(m, len(h_ids) + len(q_ids), T, hidden)
            for impl in (None, "sdpa"):
                run = one_pass(m, impl, mask)
                masked.append(run[:1])
                masked_states.append(run[1:])
        kv.append([t for pair in m.prefill(history.prompt).kv for t in pair])
    with attention_implementation(model, GROUPED_EAGER):
        kv.append([t for pair in model.prefill(history.prompt).kv for t in pair])
    del twin
    floor = PrecisionFloor(logits=max(_largest_gap(logits), _largest_gap(masked)), kv=_largest_gap(kv),
                           hidden=max(_largest_gap(states), _largest_gap(masked_states)))
    _FLOORS.setdefault(history, {})[key] = floor
    return floor


#: Precision floors already measured, per history (a float32 twin costs a copy of the weights).
_FLOORS: "weakref.WeakKeyDictionary[History, dict[tuple[int, str], PrecisionFloor]]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class CheckResult:
    """One verification result, as printed by ``kvprobe verify --json``.

    ``operation`` is the access condition or cache operation the check covers;
    ``refused`` holds the error message when the operation is expected to refuse
    on this model (then ``value`` is NaN and ``passed`` says whether it did refuse).
    """

    check: str
    model: str
    passed: bool
    value: float
    tolerance: float
    operation: str = "mask"
    refused: str = ""


def verify_access(model: "Model", history: "History | None" = None,
                  extra: "Callable[[Model, History, str], list[CheckResult]] | None" = None) -> list[CheckResult]:
    """Run checks (a)-(g) on ``model``; return their results, then those of ``extra``.

    ``extra(model, history, question)`` runs more checks on the same history before the
    digest check (c), so (c) also covers them: ``kvprobe.tools.verify.verify_model``
    passes the cache-operation checks here (the core does not import the operations).
    """
    if history is None:
        chat = getattr(model.tokenizer, "chat_template", None) is not None
        history = model.prefill(Prompt(VERIFY_SEGMENTS, chat=chat, system="Answer from the records."))
    name = model.name
    source = Mask(history.span("A"), name="source")
    control = matched_control(history, source, segment="note")
    conditions: list[Condition] = [Full(), source, control]
    question = VERIFY_QUESTIONS[0]
    q_ids = suffix_ids(model, history, question)
    h_ids = history.input_ids.tolist()
    results: list[CheckResult] = []
    native = reference_logits(model, h_ids, q_ids, None, explicit_mask=False)
    floor = precision_floor(model, history, question, source.hidden_positions(len(history), history.device))
    tol = scaled_tolerance(native, floor=floor.logit_tolerance)

    def record(check: str, value: float, tolerance: float = tol, operation: str = "mask") -> None:
        results.append(CheckResult(check, name, bool(value <= tolerance), float(value), tolerance, operation))

    # Every condition on its own (a batch of one row), as the references run it; batching is
    # checked separately in (g).
    out = torch.stack([question_logits(model, history, question, [c]).logits[0] for c in conditions])

    # (a) nnsight intervention vs the same explicit 4-D mask given to transformers directly.
    diff_a = 0.0
    for i, access in enumerate(conditions):
        hidden = access.hidden_positions(len(history), history.device)
        ref = cached_explicit_logits(model, history.base_state(), q_ids, hidden)
        diff_a = max(diff_a, float((out[i] - ref).abs().max()))
    record("nnsight_mask_equals_explicit_4d", diff_a)

    # (b) an intervention that hides nothing, in every attention layer, equals full access exactly.
    rows = fork_rows([history.base_state()], share=shares_history(model))  # as question_logits forks
    empty_hidden = torch.zeros(1, len(history), dtype=torch.bool, device=history.device)
    rows.hidden = {layer: empty_hidden for layer in model.arch.attention_layers}
    ids, valid = pad_suffix_block([q_ids], model.pad_id, model.device)
    empty = traced_forward(model, rows, ids, valid).logits[0]
    record("empty_mask_equals_full", float((empty - out[0]).abs().max()), 0.0)

    # (d) attention probability on masked keys is zero in every masked layer.
    layers = source.layers_for(model.arch)
    att = question_logits(model, history, question, [source], capture_attention=layers)
    hidden = source.hidden_positions(len(history), history.device)
    worst = max(float(att.attention[layer][0][..., : len(history)][..., hidden].max()) for layer in layers)
    record("masked_attention_zero", worst, 0.0)

    # (e) cached history + question vs one uncached forward over the whole text.
    diff_e = 0.0
    for i, access in enumerate(conditions):
        ref = reference_logits(model, h_ids, q_ids, access.hidden_positions(len(history), history.device))
        diff_e = max(diff_e, float((out[i] - ref).abs().max()))
    diff_e = max(diff_e, float((out[0] - native).abs().max()))
    record("cached_equals_one_pass", diff_e)

    # (f) condition order within a batch, and (g) batched rows vs the same rows alone.
    batched = question_logits(model, history, question, conditions).logits
    reordered = question_logits(model, history, question, list(reversed(conditions))).logits
    n = len(conditions)
    diff_f = max(float((batched[i] - reordered[n - 1 - i]).abs().max()) for i in range(n))
    record("condition_order_invariant", diff_f)
    record("batched_equals_single_rows", float((batched - out).abs().max()), max(BATCH_TOLERANCE, tol))

    # (h) SDPA vs eager attention on per-row copies, and (i) shared history vs per-row copies.
    sharing = shares_history(model)
    model.share_history = False
    try:
        per_row = question_logits(model, history, question, conditions).logits
        if model.hf.config._attn_implementation == KVPROBE_SDPA:
            with attention_implementation(model, GROUPED_EAGER):
                eager = question_logits(model, history, question, conditions).logits
            record("sdpa_equals_eager", float((per_row - eager).abs().max()))
    finally:
        model.share_history = True
    if sharing:
        record("shared_history_equals_per_row", float((batched - per_row).abs().max()), operation=SHARED)
    else:
        reason = model.arch.shared_history_refusal or f"attention {model.hf.config._attn_implementation!r} " \
            "reads per-row copies (load with attn_implementation='kvprobe' to share histories)"
        results.append(CheckResult("shared_history_equals_per_row", name, True, float("nan"), tol,
                                   operation=SHARED, refused=reason))

    gap = (fixed_shape_decode_gap(model, history, question, conditions) if sharing
           else "the batch decodes with per-step shapes: its rows cannot share a history")
    if isinstance(gap, str):
        results.append(CheckResult("fixed_shape_decode_equals_decode", name, True, float("nan"), tol,
                                   operation=FIXED_SHAPE, refused=gap))
    else:
        record("fixed_shape_decode_equals_decode", gap, operation=FIXED_SHAPE)

    op_results: list[CheckResult] = extra(model, history, question) if extra is not None else []
    # (c) the shared prefix is bit-identical after everything above.
    record("prefix_digest_unchanged", 0.0 if history.check_digest() else 1.0, 0.0)
    order = ["nnsight_mask_equals_explicit_4d", "empty_mask_equals_full", "prefix_digest_unchanged",
             "masked_attention_zero", "cached_equals_one_pass", "condition_order_invariant",
             "batched_equals_single_rows", "sdpa_equals_eager", "shared_history_equals_per_row",
             "fixed_shape_decode_equals_decode"]
    results = sorted(results, key=lambda r: order.index(r.check))
    return results + op_results


#: Decode steps the fixed-shape check compares.
FIXED_SHAPE_STEPS = 4


def fixed_shape_decode_gap(model: "Model", history: "History", question: str, conditions: list[Condition],
                           steps: int = FIXED_SHAPE_STEPS) -> float | str:
    """Largest logit gap between fixed-shape decode steps (:class:`kvprobe.static_decode.StaticDecoder`, a
    CUDA graph on a GPU) and the ordinary steps of the same shared-history batch fed the same greedy
    tokens; the reason instead when the batch cannot decode in fixed shapes. A failed graph capture on
    a GPU is reported as a reason too, with the gap of the eager fixed-shape steps (how such a model then
    decodes; seen with tiny-qwen3-moe in float32, whose expert dispatch reads routing results on the host)."""
    items = [(history, Request(question, c)) for c in conditions]
    suffixes = [suffix_ids(model, history, question)] * len(items)
    ordinary, last = run_questions(model, prepare_states(model, items), suffixes)
    packed, _ = run_questions(model, prepare_states(model, items), suffixes)
    reason = static_refusal(model, packed)
    if reason is not None:
        return f"the batch decodes with per-step shapes: {reason}"
    decoder = StaticDecoder(model, packed, steps, graph=model.device.type == "cuda")
    tokens, gap = last.argmax(dim=-1), 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a failed capture is reported below instead
        for _ in range(steps):
            want = traced_forward(model, ordinary, tokens[:, None], logits_to_keep=1).logits[:, -1]
            gap = max(gap, float((decoder.step(tokens).float() - want.float()).abs().max()))
            tokens = want.argmax(dim=-1)
    if decoder.graph_failure:
        return (f"the CUDA graph capture failed, so fixed-shape steps run eagerly ({gap:.3g} from the ordinary "
                f"steps): {decoder.graph_failure}")
    return gap


def results_as_dicts(results: list[CheckResult]) -> list[dict[str, Any]]:
    """JSON-ready list of ``{"check", "model", "passed", "value", "tolerance", "operation", "refused"}``."""
    return [asdict(r) for r in results]
