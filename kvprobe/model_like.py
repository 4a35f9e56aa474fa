"""What the core's lower modules read of a loaded model, as a type they can name without importing it.

:class:`kvprobe.model.Model` sits at the top of the core: it imports the conditions, the histories,
the forward and decoding. Those modules take a model as an argument and read a few facts and handles
of it; they annotate it as :class:`ModelLike`, so that no module below ``kvprobe/model.py`` imports it
(not even for type checking) and the core's files import one another in one direction.

Example:
    >>> def layer_count(model: ModelLike) -> int:
    ...     return model.arch.num_layers
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from .arch.summary import ArchSummary
    from .rows import RowState


class ModelLike(Protocol):
    """A loaded causal LM as the forward, conditions, histories, activations and references read it
    (:class:`kvprobe.model.Model` is the one implementation; see its attributes for the meanings)."""

    hf: Any  #: the transformers model
    tokenizer: Any  #: its fast tokenizer
    nn: Any  #: the nnsight wrapper (``kvprobe.tracing.ModelEnvoy``)
    arch: "ArchSummary"
    name: str
    source: str
    weight_hash: str
    share_history: bool

    @property
    def dtype(self) -> torch.dtype: ...

    @property
    def device(self) -> torch.device: ...

    @property
    def eos_ids(self) -> frozenset[int]: ...

    @property
    def pad_id(self) -> int: ...

    @property
    def fingerprint(self) -> str: ...

    def layer_envoy(self, layer: int) -> Any: ...

    def attention_envoy(self, layer: int) -> Any: ...

    def empty_state(self) -> "RowState": ...
