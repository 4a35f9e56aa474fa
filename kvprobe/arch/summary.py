"""What the rest of kvprobe knows about a model's layers: one :class:`LayerSpec` per layer.

An :class:`ArchSummary` is pure data, built by a family adapter
(``kvprobe.arch.adapters``) from the Hugging Face config. Everything outside the
adapters reads these facts (which layers attend, which store K/V, where RoPE
lives in the cached tensors, which edits a cache layout allows) and never
branches on the model family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
#: Layer types that hold attention K/V rows a mask can hide.
ATTENTION_LAYER_TYPES = (FULL_ATTENTION, SLIDING_ATTENTION)

#: How a layer's cache entry is kept.
OWN_KV = "own"  # the layer writes its own K/V rows
SHARED_KV = "shared"  # the layer attends to another layer's cached K/V (Gemma 4 KV sharing)
RECURRENT = "recurrent"  # conv + recurrent states, no rows (Gated DeltaNet, Mamba...)

#: RoPE layouts of the rotated dimensions of a cached tensor.
HALF = "half"  # transformers' rotate_half: dims i and i + d/2 form a pair
INTERLEAVED = "interleaved"  # dims 2i and 2i + 1 form a pair (complex view; DeepSeek MLA)


@dataclass(frozen=True)
class LayerSpec:
    """One decoder layer as the cache sees it.

    Attributes:
        kind: ``full_attention``, ``sliding_attention`` or a recurrent type
            (``linear_attention``...).
        window: sliding window in tokens (a query at p sees keys at positions
            > p - window), ``None`` for full attention.
        cache: ``own`` (writes its own K/V rows), ``shared`` (attends to the rows of
            layer ``kv_layer``) or ``recurrent`` (conv/recurrent states, no rows).
        kv_layer: the layer whose cached rows this layer attends to (itself for
            ``own``), ``None`` for recurrent layers.
        key_shape, value_shape: (heads, dim) of the two cached tensors of an ``own``
            layer, as transformers stores them ([B, heads, S, dim]).
        rope_tensor: which cached tensor carries the RoPE rotation: 0 (the "keys"
            slot) or 1 (the "values" slot, DeepSeek MLA's decoupled rope key).
        rope_dims: leading dims of that tensor that rotate (the rest pass through).
        rope_layout: :data:`HALF` or :data:`INTERLEAVED`.
        separable_kv: whether zeroing only the keys or only the values is a cache
            edit (false on MLA, whose cache holds one latent both are expanded from).
        cache_note: what the two cached tensors are, for messages and the README.
        attends_cache: whether the attention reads the cached tensors as stored (false on
            MLA, whose attention expands the cached latent into keys and values first).
    """

    kind: str
    window: int | None = None
    cache: str = OWN_KV
    kv_layer: int | None = None
    key_shape: tuple[int, int] | None = None
    value_shape: tuple[int, int] | None = None
    rope_tensor: int = 0
    rope_dims: int = 0
    rope_layout: str = HALF
    separable_kv: bool = True
    cache_note: str = "K (after RoPE) and V per KV head"
    attends_cache: bool = True

    @property
    def is_attention(self) -> bool:
        return self.kind in ATTENTION_LAYER_TYPES


@dataclass(frozen=True)
class ArchSummary:
    """Static facts about a causal LM's decoder stack.

    Attributes:
        model_type: the config's ``model_type`` (``llama``, ``qwen3``, ``gemma3_text``...).
        family: the adapter that read the config (``standard``, ``mla``, ``gemma4``...).
        num_layers: decoder layers.
        num_heads: query heads per layer.
        layers: one :class:`LayerSpec` per layer.
        rope: RoPE parameters per layer type, as the config states them.
        qk_norm: whether keys are normalized before RoPE (Qwen3, Gemma, OLMo2).
    """

    model_type: str
    family: str
    num_layers: int
    num_heads: int
    layers: tuple[LayerSpec, ...]
    rope: dict[str, dict[str, Any]] = field(default_factory=dict)
    qk_norm: bool = False

    # -- layer roles -----------------------------------------------------------
    @property
    def layer_types(self) -> tuple[str, ...]:
        return tuple(spec.kind for spec in self.layers)

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """Layers that attend to cached rows (the layers a mask can act on)."""
        return tuple(i for i, s in enumerate(self.layers) if s.is_attention)

    @property
    def kv_layers(self) -> tuple[int, ...]:
        """Layers that store their own K/V rows (what cache operations edit)."""
        return tuple(i for i, s in enumerate(self.layers) if s.cache == OWN_KV)

    @property
    def kv_sources(self) -> tuple[int | None, ...]:
        """Per layer, the layer whose cached rows it attends to (``None`` for recurrent layers)."""
        return tuple(s.kv_layer for s in self.layers)

    @property
    def shared_history_refusal(self) -> str | None:
        """Why batches of this family cannot read one shared copy of a history, or ``None``.

        kvprobe's attention reads shared copies itself, so the model must attend to the
        cached tensors exactly as the cache returns them.
        """
        expanded = [i for i in self.kv_layers if not self.layers[i].attends_cache]
        if expanded:
            return (f"{self.model_type}: the attention of layers {expanded[:3]}... expands the cached tensors "
                    "(a latent) into keys and values after reading the cache; every row keeps its own copy")
        return None

    @property
    def shared_layers(self) -> tuple[int, ...]:
        """Attention layers that read another layer's rows (edits reach them through it)."""
        return tuple(i for i, s in enumerate(self.layers) if s.cache == SHARED_KV)

    @property
    def recurrent_layers(self) -> tuple[int, ...]:
        """Layers without attention rows (linear attention, state-space...)."""
        return tuple(i for i, s in enumerate(self.layers) if s.cache == RECURRENT)

    @property
    def distinct_layer_types(self) -> tuple[str, ...]:
        """Layer types present, in first-seen order."""
        return tuple(dict.fromkeys(self.layer_types))

    @property
    def sliding_window(self) -> int | None:
        """The window of the sliding layers (every family uses one), or ``None``."""
        return next((s.window for s in self.layers if s.kind == SLIDING_ATTENTION), None)

    # -- facts the operations check -------------------------------------------
    def row_deletion_refusal(self) -> str | None:
        """Why rows cannot be deleted from this model's cache, or ``None`` if they can."""
        if self.recurrent_layers:
            kinds = sorted({self.layers[i].kind for i in self.recurrent_layers})
            return (f"layers of type {kinds} keep recurrent states that cannot lose rows "
                    "(they have no per-token entries); use a mask or a recompute instead")
        return None

    def separate_zero_refusal(self) -> str | None:
        """Why only keys or only values cannot be zeroed in this cache, or ``None``."""
        joint = [i for i in self.kv_layers if not self.layers[i].separable_kv]
        if joint:
            return (f"layers {list(joint)} cache {self.layers[joint[0]].cache_note}; keys and values are "
                    "both expanded from the same latent, so zeroing only one of them is not a cache edit "
                    "(zero both, Zero(spans, 'kv'), or mask)")
        return None

    # -- sizes ----------------------------------------------------------------
    def kv_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of the cached tensors stored per token across all layers."""
        size = torch.finfo(dtype).bits // 8
        return sum((s.key_shape[0] * s.key_shape[1] + s.value_shape[0] * s.value_shape[1]) * size
                   for s in self.layers if s.cache == OWN_KV)

    def describe(self) -> str:
        """A short human-readable summary (used by ``kvprobe models`` and ``verify``)."""
        kinds = ", ".join(f"{t}: {self.layer_types.count(t)}" for t in self.distinct_layer_types)
        window = f", sliding window {self.sliding_window}" if self.sliding_window else ""
        shapes = sorted({(s.key_shape, s.value_shape) for s in self.layers if s.cache == OWN_KV})
        cached = "; ".join(f"K {k[0]}x{k[1]}, V {v[0]}x{v[1]}" for k, v in shapes)
        shared = f", {len(self.shared_layers)} layers reuse another layer's K/V" if self.shared_layers else ""
        return (f"{self.model_type} [{self.family}]: {self.num_layers} layers ({kinds}{window}{shared}), "
                f"{self.num_heads} query heads, cached per token: {cached}, RoPE {self.rope}")
