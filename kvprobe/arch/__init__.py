"""Architecture adapters: what kvprobe needs to know about a model family, in one place.

:class:`ArchSummary` (``summary.py``) is the vocabulary the library reads: per
layer, whether it attends, stores K/V rows, shares another layer's rows or
keeps recurrent states; cached tensor shapes; where RoPE lives and in which
layout. One adapter per family that really differs fills it from the config
and knows the model code verification needs (pre-RoPE keys, the model's own
rotary function): ``standard.py`` (Llama-like, hybrids), ``phi3.py`` (fused
QKV), ``mla.py`` (DeepSeek latent cache), ``gemma4.py`` (per-layer heads, KV
sharing). Nothing outside this package branches on a model family.
"""

from .adapters import ADAPTERS, adapter_for, arch_summary
from .standard import StandardAdapter
from .summary import (
    ATTENTION_LAYER_TYPES,
    FULL_ATTENTION,
    HALF,
    INTERLEAVED,
    OWN_KV,
    RECURRENT,
    SHARED_KV,
    SLIDING_ATTENTION,
    ArchSummary,
    LayerSpec,
)

__all__ = [
    "ADAPTERS", "ATTENTION_LAYER_TYPES", "ArchSummary", "FULL_ATTENTION", "HALF", "INTERLEAVED", "LayerSpec",
    "OWN_KV", "RECURRENT", "SHARED_KV", "SLIDING_ATTENTION", "StandardAdapter", "adapter_for", "arch_summary",
]
