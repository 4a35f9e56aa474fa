"""Which adapter reads which model family (by the config's ``model_type``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .gemma4 import Gemma4Adapter
from .mla import MLAAdapter
from .phi3 import Phi3Adapter
from .standard import StandardAdapter, text_config

if TYPE_CHECKING:
    from .summary import ArchSummary

#: model_type -> adapter; every other model type gets the standard adapter.
ADAPTERS: dict[str, StandardAdapter] = {
    "phi3": Phi3Adapter(),
    "deepseek_v2": MLAAdapter(),
    "deepseek_v3": MLAAdapter(),
    "gemma4_text": Gemma4Adapter(),
    "gemma4": Gemma4Adapter(),
}
STANDARD = StandardAdapter()


def adapter_for(config: Any) -> StandardAdapter:
    """The adapter for a transformers config (multimodal configs are read through their text config)."""
    return ADAPTERS.get(str(text_config(config).model_type), STANDARD)


def arch_summary(config: Any) -> "ArchSummary":
    """Read the :class:`~kvprobe.arch.ArchSummary` of a transformers ``PretrainedConfig`` (through its family
    adapter), without loading weights.

    Example:
        >>> arch_summary(transformers.AutoConfig.from_pretrained(path)).num_layers  # doctest: +SKIP
        30
    """
    return adapter_for(config).summary(config)
