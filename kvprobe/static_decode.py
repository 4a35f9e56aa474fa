"""Greedy decode steps of a shared-history batch in fixed shapes; on a GPU each step replays one CUDA graph.

A decode step of a 15-row batch on an 8B model launches about two thousand small kernels; on
a GPU the host spends longer launching them than the device spends running them. Here the
batch's cache is laid out once in fixed shapes (:class:`kvprobe.slots.PackedSlotLayer`: the
shared history once, then every row's slots step-major), with one additive mask over all of
it whose rows are the batch's queries folded kv-head major (row b's query g of a KV head at
``b * G + g``). A step then reads and writes the same buffers every time:

1. the mask columns of the slots the step writes become visible to their own row (``index_copy_``);
2. the model runs one token per row; each attention layer writes its new K/V at those columns
   and runs one SDPA call over the packed keys (:func:`kvprobe.attention.packed_attention`);
3. positions and write columns advance on the device.

On a device in :data:`STATIC_DECODE_DEVICES` the first step runs eagerly (a warm-up on a side
stream) and the second is captured as a CUDA graph that every later step replays. On the CPU the
same step runs eagerly; tests compare it with the ordinary decode (``kvprobe.decoding``) there.

Only batches whose every row reads one shared history of the batch's full length decode this
way, with nothing per-layer to edit (:func:`static_refusal` says why a batch cannot); every other
batch decodes as before.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache

from .arch import FULL_ATTENTION
from .attention import KVPROBE_SDPA
from .forward import uniform_hidden
from .forward_context import ForwardContext, forward_context
from .masks import visibility
from .slots import PackedSlotLayer, SharedSlotLayer
from .transformers_api import cache_argument

if TYPE_CHECKING:
    from .model_like import ModelLike
    from .rows import Rows

#: Devices whose decode steps run as CUDA graphs over packed caches (host-bound there; the CPU is not).
STATIC_DECODE_DEVICES = ("cuda",)
#: Packed buffers have a multiple of this many columns (aligned mask rows for the memory-efficient kernel).
COLUMN_ALIGNMENT = 16


def static_refusal(model: "ModelLike", rows: "Rows") -> str | None:
    """Why ``rows`` cannot decode in fixed shapes, or ``None`` when they can.

    Example:
        >>> static_refusal(model, rows) is None  # doctest: +SKIP
        True
    """
    arch = model.arch
    if getattr(model.hf.config, "_attn_implementation", None) != KVPROBE_SDPA:
        return "the model does not run kvprobe's SDPA attention"
    if arch.distinct_layer_types != (FULL_ATTENTION,):
        return "only models whose every layer is full attention (sliding windows move every step)"
    if arch.shared_layers:
        return "layers read another layer's cache rows"
    if getattr(model.hf.config, "attn_logit_softcapping", None):
        return "the model caps its attention logits"
    if rows.selector is not None:
        return "a query-aware key selection edits the logits"
    if rows.bias or rows.head_edits or rows.patches:
        return "a logit bias, head edit or residual patch acts inside the forward"
    if rows.hidden and uniform_hidden(model, rows) is None:
        return "layers hide different slots"
    for layer in rows.cache.layers:
        if not isinstance(layer, SharedSlotLayer):
            return "the rows do not read a shared history"
        base_k, _, which = layer.groups[0]
        if len(layer.groups) != 1 or which is not None or base_k.shape[2] != layer.base_length:
            return "the rows read more than one history"
    return None


class StaticDecoder:
    """Decode steps of ``rows`` in fixed shapes (see the module docstring); ``rows`` is consumed.

    Args:
        model: the loaded model.
        rows: a batch :func:`static_refusal` accepts, after its question's forward.
        steps: how many tokens per row :meth:`step` will feed at most.
        graph: capture the step as a CUDA graph (CUDA devices only); otherwise every step runs eagerly.

    Example:
        >>> decoder = StaticDecoder(model, rows, steps=15)  # doctest: +SKIP
        >>> logits = decoder.step(first_tokens)             # Float[B, V] after feeding Long[B]
    """

    def __init__(self, model: "ModelLike", rows: "Rows", steps: int, graph: bool = False):
        reason = static_refusal(model, rows)
        if reason is not None:
            raise ValueError(f"this batch cannot decode in fixed shapes: {reason}")
        if graph and rows.key_pos.device.type != "cuda":
            raise ValueError("CUDA graphs need a CUDA device")
        self.model, self.steps, self.taken = model, steps, 0
        device, dtype = rows.key_pos.device, model.dtype
        first = rows.cache.layers[0]
        B, T, F = rows.batch_size, first.base_length, first.filled
        G = model.arch.num_heads // first.keys.shape[1]
        columns = -(-(T + (F + steps) * B) // COLUMN_ALIGNMENT) * COLUMN_ALIGNMENT
        self.index = T + F * B + torch.arange(B, device=device)  # the columns the next step writes
        self.cache = DynamicCache()
        self.cache.layers = [PackedSlotLayer(layer, columns, self.index) for layer in rows.cache.layers]
        # What each row may read now, in its own slot coordinates (as the ordinary mask computes it).
        positions = rows.next_positions()
        readable = visibility(positions[:, None], rows.key_pos, rows.key_valid)[:, 0]  # Bool[B, T + F]
        hidden = uniform_hidden(model, rows)
        if hidden is not None:
            readable &= ~hidden
        packed = torch.zeros(B, columns, dtype=torch.bool, device=device)
        packed[:, :T] = readable[:, :T]
        own = packed[:, T : T + F * B].view(B, F, B)  # [row, slot, column's row]
        own.diagonal(dim1=0, dim2=2).copy_(readable[:, T:].T)
        minimum = torch.finfo(dtype).min
        self.mask = torch.zeros(B, G, columns, dtype=dtype, device=device)
        self.mask.masked_fill_(~packed[:, None], minimum)
        self.mask = self.mask.view(1, 1, B * G, columns)
        own_row = torch.arange(B, device=device)
        self.pattern = torch.full((B, G, B), minimum, dtype=dtype, device=device)
        self.pattern[own_row, :, own_row] = 0
        self.pattern = self.pattern.view(1, 1, B * G, B)
        self.ids = torch.zeros(B, 1, dtype=torch.long, device=device)
        self.positions = positions[:, None].clone()
        self.logits = torch.empty(B, model.hf.config.vocab_size, dtype=dtype, device=device)
        self.context = ForwardContext(cache=self.cache, kv_source=model.arch.kv_sources)
        self.use_graph = graph
        self.graph: "torch.cuda.CUDAGraph | None" = None
        #: Why the step runs eagerly although a graph was asked for (a capture that failed), or None.
        self.graph_failure: str | None = None
        rows.cache = DynamicCache()  # the batch's own buffers are no longer read

    def _step(self) -> None:
        """One decode step on the fixed buffers (what a graph captures)."""
        self.mask.index_copy_(3, self.index, self.pattern)
        with torch.inference_mode(), forward_context(self.context):
            out = self.model.hf(input_ids=self.ids, attention_mask=self.mask, position_ids=self.positions,
                                use_cache=True, logits_to_keep=1, **cache_argument(self.model.hf, self.cache))
            self.logits.copy_(out.logits[:, -1])
            self.positions.add_(1)
            self.index.add_(self.index.shape[0])

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed Long[B] ``tokens`` (one per row); return each row's next-token logits Float[B, V] (a copy)."""
        if self.taken >= self.steps:
            raise RuntimeError(f"the decoder holds room for {self.steps} steps")
        self.taken += 1
        self.ids.copy_(tokens[:, None])
        if self.graph is not None:
            self.graph.replay()
        elif self.use_graph and self.graph_failure is None:
            self._warm_up_and_capture()
        else:
            self._step()
        return self.logits.clone()

    def _warm_up_and_capture(self) -> None:
        """Run this step eagerly on a side stream (CUDA's recommended warm-up), then capture the next."""
        side = torch.cuda.Stream(device=self.ids.device)
        side.wait_stream(torch.cuda.current_stream(self.ids.device))
        with torch.cuda.stream(side):
            self._step()
        torch.cuda.current_stream(self.ids.device).wait_stream(side)
        if self.taken >= self.steps:
            return  # no later step to replay
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):  # records the kernels; nothing runs until replay
                self._step()
        except Exception as error:  # noqa: BLE001 - a model whose forward cannot be captured decodes eagerly
            self.graph_failure = f"{type(error).__name__}: {error}"
            warnings.warn(f"decode steps run without a CUDA graph (the capture failed: {self.graph_failure})",
                          RuntimeWarning, stacklevel=3)
            return
        self.graph = graph
