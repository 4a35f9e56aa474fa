"""Independent reference computations: plain transformers forwards, no cache, no nnsight.

Used by ``kvprobe verify`` (``kvprobe.tools.verify``), the studies that check their own reads
(cross_checkpoint) and the tests to check the traced, cached path; :data:`LOGIT_TOLERANCE` is the
float32 agreement they all hold the cached path to.
They run transformers' own eager attention (see :func:`transformers_eager`).
Each function runs the *whole* token sequence (history + suffix [+ generated])
through ``model.hf`` in one call, with an explicit 4-D additive mask per layer
type in which rows after the history cannot see the hidden history columns.
Hiding here is folded into the mask for every attention layer, so these
references cover conditions that mask all attention layers.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Iterator, Sequence

import torch

from .forward import mask_argument
from .masks import layer_type_masks
from .model_guard import switch_attention
from .transformers_api import cache_argument

if TYPE_CHECKING:
    from .model_like import ModelLike
    from .rows import RowState

#: fp32 equivalence tolerance on logits and K/V against these references (max abs difference): this, or
#: ``kvprobe.tools.verify.RELATIVE_TOLERANCE`` of the reference's largest magnitude when that is larger
#: (``kvprobe.tools.verify.scaled_tolerance``).
LOGIT_TOLERANCE = 1e-4


@contextmanager
def transformers_eager(model: "ModelLike") -> Iterator[None]:
    """Run ``model.hf`` under transformers' own eager attention inside the block.

    kvprobe's attentions (``kvprobe.attention``: SDPA or grouped eager, shared
    histories) compute what eager computes; references switch back so every check
    compares two implementations. Models loaded with another implementation
    (``sdpa``...) keep it.
    """
    from .attention import KVPROBE_IMPLEMENTATIONS

    impl = model.hf.config._attn_implementation
    with attention_implementation(model, "eager" if impl in KVPROBE_IMPLEMENTATIONS else impl):
        yield


@contextmanager
def attention_implementation(model: "ModelLike", impl: str) -> Iterator[None]:
    """Run ``model`` with transformers attention implementation ``impl`` inside the block, then restore.

    A deliberate switch (:func:`kvprobe.model_guard.switch_attention`): kvprobe's own forwards inside the block
    run under ``impl``; afterwards the implementation and kvprobe's expectation are both as they were.
    """
    before = model.hf.config._attn_implementation
    if before == impl:
        yield
        return
    expected = getattr(model, "expected", None)
    recorded = None if expected is None else expected.attention
    switch_attention(model, impl)
    try:
        yield
    finally:
        model.hf.set_attn_implementation(before)
        if expected is not None:
            expected.attention = recorded


def uncached_mask(
    model: "ModelLike", n_tokens: int, history_len: int, hidden: torch.Tensor | None,
    hidden_from: int | torch.Tensor | None = None,
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The explicit 4-D mask(s) of one uncached forward over ``n_tokens`` tokens.

    Rows from ``hidden_from`` on (default: the first row after the history) cannot see
    the Bool[history_len] ``hidden`` positions, in every attention layer. ``hidden_from``
    may also be a Long[history_len] tensor: position ``j`` is hidden from rows
    ``hidden_from[j]`` on (an online mask of several records). A hidden row that is
    already hidden from itself keeps ordinary causal attention (rebuilt records).
    """
    device = model.device
    pos = torch.arange(n_tokens, device=device)[None]
    row_hidden = torch.zeros(1, n_tokens, n_tokens, dtype=torch.bool, device=device)
    if hidden is not None:
        hidden = hidden.to(device)
        start = history_len if hidden_from is None else hidden_from
        first = (start.to(device) if isinstance(start, torch.Tensor)
                 else torch.full((history_len,), int(start), dtype=torch.long, device=device))
        rows = torch.arange(n_tokens, device=device)[:, None]
        blocked = hidden[None, :] & (rows >= first[None, :])
        exempt = torch.zeros(n_tokens, dtype=torch.bool, device=device)
        exempt[:history_len] = hidden & (first <= torch.arange(history_len, device=device))
        row_hidden[0, :, :history_len] = blocked & ~exempt[:, None]
    masks = {
        layer_type: m.masked_fill(row_hidden[:, None], torch.finfo(model.dtype).min)
        for layer_type, m in layer_type_masks(
            model.arch, pos, pos, torch.ones(1, n_tokens, dtype=torch.bool, device=device), model.dtype
        ).items()
    }
    return mask_argument(model.arch, masks)


def reference_logits(
    model: "ModelLike",
    history_ids: Sequence[int],
    suffix: Sequence[int],
    hidden: torch.Tensor | None = None,
    explicit_mask: bool = True,
    hidden_from: int | torch.Tensor | None = None,
) -> torch.Tensor:
    """Logits Float[len(suffix), V] of the suffix rows of one uncached forward.

    Args:
        history_ids: the history tokens (length T).
        suffix: tokens after the history (question, candidate, generated...).
        hidden: Bool[T] history positions hidden from suffix rows (all attention layers).
        explicit_mask: if false (and nothing hidden), pass no mask at all so
            transformers builds its own native causal / sliding-window masks.
        hidden_from: first row that cannot see the hidden positions (default T: only
            the suffix). Earlier values model rebuilt history states; hidden rows
            themselves keep ordinary causal attention. A Long[T] tensor gives each
            position its own first row (see :func:`uncached_mask`).
    """
    ids = torch.tensor([list(history_ids) + list(suffix)], dtype=torch.long, device=model.device)
    T, N = len(history_ids), ids.shape[1]
    kwargs = {}
    if explicit_mask or (hidden is not None and bool(hidden.any())):
        kwargs["attention_mask"] = uncached_mask(model, N, T, hidden, hidden_from)
    with torch.inference_mode(), transformers_eager(model):
        logits = model.hf(input_ids=ids, use_cache=False, **kwargs).logits
    return logits[0, T:]


def reference_hidden_kv(
    model: "ModelLike", history_ids: torch.Tensor, hidden: torch.Tensor, start: int | torch.Tensor
) -> list[tuple[torch.Tensor | None, torch.Tensor | None]]:
    """Per layer K/V of one uncached forward over the history where rows from ``start`` on
    (outside ``hidden``) cannot see ``hidden``; ``(None, None)`` for layers without rows of their own.
    ``start`` may be Long[T], each hidden position's own first row (see :func:`uncached_mask`)."""
    from .rows import fork_rows

    T = int(history_ids.shape[0])
    # An empty cache that keeps every row (transformers' own would trim sliding layers).
    cache = fork_rows([model.empty_state()]).cache
    with torch.inference_mode(), transformers_eager(model):
        model.hf(input_ids=history_ids[None].to(model.device), attention_mask=uncached_mask(model, T, T, hidden, start),
                 position_ids=torch.arange(T, device=model.device)[None], use_cache=True, **cache_argument(model.hf, cache))
    return [(layer.keys, layer.values) if i in model.arch.kv_layers else (None, None)
            for i, layer in enumerate(cache.layers)]


def explicit_cached_mask(
    model: "ModelLike", history_len: int, start: int, n_new: int, hidden: torch.Tensor
) -> torch.Tensor | dict[str, torch.Tensor]:
    """The 4-D mask(s) for ``n_new`` tokens at positions ``start..`` after a cache of ``start`` slots.

    ``hidden`` (Bool[history_len]) history columns are hidden from the new rows in
    every attention layer. Returns what transformers takes as ``attention_mask``:
    one tensor, or a dict per layer type for models with several.
    """
    S = start + n_new
    device = model.device
    q_pos = torch.arange(start, S, device=device)[None]
    k_pos = torch.arange(S, device=device)[None]
    full_hidden = torch.cat([hidden.to(device), torch.zeros(S - history_len, dtype=torch.bool, device=device)])[None]
    masks = layer_type_masks(model.arch, q_pos, k_pos, torch.ones(1, S, dtype=torch.bool, device=device),
                             model.dtype, hidden=full_hidden)
    return mask_argument(model.arch, masks)


def cached_explicit_forward(
    model: "ModelLike",
    state: "RowState",
    suffix: Sequence[int],
    hidden: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    outputs: bool = False,
):
    """A plain transformers forward of ``suffix`` on a copy of ``state``'s cache; its output.

    The suffix continues at position ``state.length`` under explicit 4-D masks:
    Bool[S] ``hidden`` slots set to the dtype minimum and Float[S] ``bias`` added
    to the suffix rows' logits of those slots, in every attention layer. No
    nnsight, transformers' own eager attention. ``outputs``: also every layer's hidden
    states and attention probabilities (``output_hidden_states``, ``output_attentions``),
    and the cache (its ``cache``/``past_key_values``) holding the suffix's own rows.
    """
    from .rows import fork_rows

    S, L = state.length, len(suffix)
    device = model.device
    if hidden is None:
        hidden = torch.zeros(S, dtype=torch.bool, device=device)
    mask = explicit_cached_mask(model, S, S, L, hidden)
    if bias is not None:
        columns = torch.cat([bias.to(device), torch.zeros(L, device=device)]).to(model.dtype)
        mask = ({t: None if m is None else m + columns for t, m in mask.items()} if isinstance(mask, dict)
                else mask + columns)
    cache = fork_rows([replace(state, head_edits={}, patches={})]).cache  # a plain copy of the cache
    with torch.inference_mode(), transformers_eager(model):
        return model.hf(
            input_ids=torch.tensor([list(suffix)], dtype=torch.long, device=device),
            attention_mask=mask,
            position_ids=torch.arange(S, S + L, device=device)[None],
            use_cache=True,
            output_hidden_states=outputs,
            output_attentions=outputs,
            **cache_argument(model.hf, cache),
        )


def cached_explicit_logits(
    model: "ModelLike",
    state: "RowState",
    suffix: Sequence[int],
    hidden: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """Suffix logits Float[L, V] of :func:`cached_explicit_forward`."""
    return cached_explicit_forward(model, state, suffix, hidden, bias).logits[0]


def reference_score(
    model: "ModelLike", history_ids: Sequence[int], suffix: Sequence[int], candidate: Sequence[int],
    hidden: torch.Tensor | None = None,
) -> float:
    """Summed log-probability (nats) of ``candidate`` after ``suffix``, uncached."""
    logits = reference_logits(model, history_ids, list(suffix) + list(candidate), hidden)
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    n = len(suffix)
    return float(sum(logprobs[n - 1 + j, t] for j, t in enumerate(candidate)))


def reference_generate(
    model: "ModelLike",
    history_ids: Sequence[int],
    suffix: Sequence[int],
    hidden: torch.Tensor | None = None,
    max_new_tokens: int = 20,
    hidden_from: int | torch.Tensor | None = None,
) -> list[int]:
    """Greedy tokens, recomputing the whole sequence at every step (no cache)."""
    out: list[int] = []
    for _ in range(max_new_tokens):
        logits = reference_logits(model, history_ids, list(suffix) + out, hidden, hidden_from=hidden_from)
        tok = int(logits[-1].argmax())
        out.append(tok)
        if tok in model.eos_ids:
            break
    return out
