"""Architecture summary: what the rest of kvprobe needs to know about a model.

One place reads the Hugging Face config: layer count, query and KV heads, head
size, RoPE parameters and each layer's attention type. Nothing else in the
library inspects ``config`` fields by model family.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

FULL_ATTENTION = "full_attention"
SLIDING_ATTENTION = "sliding_attention"
#: Layer types that hold attention K/V rows a mask can hide.
ATTENTION_LAYER_TYPES = (FULL_ATTENTION, SLIDING_ATTENTION)


@dataclass(frozen=True)
class ArchSummary:
    """Static facts about a causal LM's attention stack.

    Attributes:
        model_type: the config's ``model_type`` (``llama``, ``qwen3``, ``gemma3_text``...).
        num_layers: decoder layers.
        num_heads: query heads per layer.
        num_kv_heads: key/value heads per layer (GQA groups = num_heads // num_kv_heads).
        head_dim: size of one key/query head.
        layer_types: per layer, ``full_attention``, ``sliding_attention`` or another
            (recurrent) type; masks apply only to the two attention types.
        sliding_window: window of sliding layers in tokens (a query at position p
            sees keys at positions > p - window), or ``None``.
        rope: RoPE parameters per layer type, as the config states them.
        qk_norm: whether keys are normalized before RoPE (Qwen3, Gemma3).
    """

    model_type: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    layer_types: tuple[str, ...]
    sliding_window: int | None
    rope: dict[str, dict[str, Any]] = field(default_factory=dict)
    qk_norm: bool = False

    @classmethod
    def from_config(cls, config: Any) -> "ArchSummary":
        """Read the summary from a transformers ``PretrainedConfig``."""
        config = getattr(config, "text_config", None) or config
        n_layers = int(config.num_hidden_layers)
        n_heads = int(config.num_attention_heads)
        n_kv = int(getattr(config, "num_key_value_heads", None) or n_heads)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // n_heads
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None)
        if layer_types is None:
            layer_types = [SLIDING_ATTENTION if window else FULL_ATTENTION] * n_layers
        layer_types = tuple(layer_types)[:n_layers]
        if SLIDING_ATTENTION not in layer_types:
            window = None
        rope_params = getattr(config, "rope_parameters", None) or {}
        if rope_params and not all(isinstance(v, dict) for v in rope_params.values()):
            rope = {t: dict(rope_params) for t in set(layer_types)}
        else:
            rope = {k: dict(v) for k, v in rope_params.items()}
        qk_norm = config.model_type.startswith(("qwen3", "gemma3", "gemma4", "olmo2"))
        return cls(
            model_type=str(config.model_type),
            num_layers=n_layers,
            num_heads=n_heads,
            num_kv_heads=n_kv,
            head_dim=int(head_dim),
            layer_types=layer_types,
            sliding_window=int(window) if window else None,
            rope=rope,
            qk_norm=qk_norm,
        )

    @property
    def attention_layers(self) -> tuple[int, ...]:
        """Indices of layers with attention K/V (the layers a mask can act on)."""
        return tuple(i for i, t in enumerate(self.layer_types) if t in ATTENTION_LAYER_TYPES)

    @property
    def recurrent_layers(self) -> tuple[int, ...]:
        """Indices of layers without attention K/V (linear attention, state-space...)."""
        return tuple(i for i, t in enumerate(self.layer_types) if t not in ATTENTION_LAYER_TYPES)

    @property
    def distinct_layer_types(self) -> tuple[str, ...]:
        """Layer types present, in first-seen order."""
        return tuple(dict.fromkeys(self.layer_types))

    def kv_bytes_per_token(self, dtype: torch.dtype = torch.float32) -> int:
        """Bytes of K plus V stored per token across all attention layers."""
        size = torch.finfo(dtype).bits // 8
        return 2 * len(self.attention_layers) * self.num_kv_heads * self.head_dim * size

    def describe(self) -> str:
        """A short human-readable summary (used by ``kvprobe models`` and ``verify``)."""
        kinds = ", ".join(f"{t}: {self.layer_types.count(t)}" for t in self.distinct_layer_types)
        window = f", sliding window {self.sliding_window}" if self.sliding_window else ""
        return (
            f"{self.model_type}: {self.num_layers} layers ({kinds}{window}), "
            f"{self.num_heads} query / {self.num_kv_heads} KV heads, head dim {self.head_dim}, "
            f"RoPE {self.rope}"
        )
