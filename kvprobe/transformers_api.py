"""The transformers names kvprobe depends on that changed within the supported range (``pyproject.toml``).

transformers renamed a causal LM's cache argument and output field from ``past_key_values`` to
``cache`` (the old name warns with a ``FutureWarning`` and goes in 5.40). kvprobe passes and reads
the cache only through these two functions, so every call uses the name the installed version
defines and no call warns (``tests/test_transformers_api.py`` runs a forward with
``-W error::FutureWarning`` semantics).

Example::

    out = model.hf(input_ids=ids, use_cache=True, **cache_argument(model.hf, None))
    cache = output_cache(out)
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from typing import Any

__all__ = ["cache_argument", "cache_argument_name", "output_cache"]


@functools.lru_cache(maxsize=None)
def _forward_takes_cache(model_class: type) -> bool:
    return "cache" in inspect.signature(model_class.forward).parameters


def cache_argument_name(hf_model: Any) -> str:
    """``"cache"`` where the model's ``forward`` takes it (transformers 5.24), else ``"past_key_values"``."""
    return "cache" if _forward_takes_cache(type(hf_model)) else "past_key_values"


def cache_argument(hf_model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for a forward call of ``hf_model`` (see :func:`cache_argument_name`)."""
    return {cache_argument_name(hf_model): cache}


def output_cache(output: Any) -> Any:
    """The cache a forward returned: its ``cache`` field where the output class has one (reading the old
    ``past_key_values`` there warns), else ``past_key_values``."""
    if dataclasses.is_dataclass(output) and any(f.name == "cache" for f in dataclasses.fields(output)):
        return output.cache
    return output.past_key_values
