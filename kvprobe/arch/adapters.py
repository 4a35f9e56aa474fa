"""Which adapter reads which model family (by the config's ``model_type``)."""

from __future__ import annotations

from typing import Any

from .gemma4 import Gemma4Adapter
from .mla import MLAAdapter
from .phi3 import Phi3Adapter
from .standard import StandardAdapter, text_config

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
