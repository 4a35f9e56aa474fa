"""What kvprobe's attention reads during one forward besides its arguments.

transformers calls the registered attention function (``kvprobe.attention``) with a layer's query,
keys, values and mask only. What else a call needs is set around the forward as context variables
here, at the bottom of the core so that the cache layers (``kvprobe.slots``), the attention and the
forward (``kvprobe.forward``) can all read it without importing each other in a circle:

* :class:`ForwardContext` (:func:`forward_context`): the batch's cache (shared-history layers are
  looked up in it), each layer's K/V source, the layers whose probabilities are wanted, and whether
  the forward is one plain causal block;
* the active query-aware selector (:func:`active_selector`): a :class:`SelectorLike`, in practice a
  :class:`kvprobe.selection.KeySelector` (Quest, RefreshKV), which edits every attention call's logits.

Example:
    >>> with forward_context(probabilities_for({3})):
    ...     assert current_cache() is None
"""

from __future__ import annotations

import contextvars
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Protocol

import torch

if TYPE_CHECKING:
    from transformers import DynamicCache


@dataclass(frozen=True)
class ForwardContext:
    """What the attention calls of one traced forward need beyond their arguments.

    Attributes:
        cache: the batch's cache (shared-history layers are looked up in it).
        kv_source: per layer, the layer whose cache rows it attends to.
        probabilities: layers whose attention probabilities must be returned.
    """

    cache: "DynamicCache | None" = None
    kv_source: tuple[int | None, ...] = ()
    probabilities: frozenset[int] = frozenset()
    #: The forward is one plain causal block from an empty cache (positions 0..Q-1, nothing hidden): the
    #: mask the layers receive is a placeholder; SDPA runs its causal kernel, other paths build the mask.
    causal: bool = False


_CONTEXT: contextvars.ContextVar[ForwardContext] = contextvars.ContextVar("kvprobe_forward", default=ForwardContext())


@contextmanager
def forward_context(context: ForwardContext) -> Iterator[None]:
    """Make ``context`` the one kvprobe's attention reads inside the block."""
    token = _CONTEXT.set(context)
    try:
        yield
    finally:
        _CONTEXT.reset(token)


def current_context() -> ForwardContext:
    """The context of the forward running now (an empty :class:`ForwardContext` outside one)."""
    return _CONTEXT.get()


def current_cache() -> "DynamicCache | None":
    """The cache of the traced forward running now (``None`` outside ``traced_forward``)."""
    return _CONTEXT.get().cache


def probabilities_for(layers: tuple[int, ...] | frozenset[int]) -> ForwardContext:
    """A context that only asks for the attention probabilities of ``layers`` (no cache lookups)."""
    return ForwardContext(probabilities=frozenset(layers))


class SelectorLike(Protocol):
    """What the forward, its rows and kvprobe's attention ask of a query-aware key selector
    (:class:`kvprobe.selection.KeySelector` is the base class that implements it)."""

    def begin(self, rows: Any, n_query: int) -> None:
        """Called before each forward of the batch ``rows`` (a :class:`kvprobe.rows.Rows`)."""

    def keep_rows(self, keep: torch.Tensor) -> None:
        """Rows ``keep`` (Long[B']) stay in the batch."""

    def adjust(self, layer: int, query: torch.Tensor, key: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        """Logits Float[B, KVH, G, Q, S] with the slots a row may not read set to the minimum."""


_SELECTOR: contextvars.ContextVar["SelectorLike | None"] = contextvars.ContextVar("kvprobe_key_selector",
                                                                                   default=None)


@contextmanager
def active_selector(selector: "SelectorLike | None") -> Iterator[None]:
    """Make ``selector`` the one the attention function consults (``None``: no selection)."""
    token = _SELECTOR.set(selector)
    try:
        yield
    finally:
        _SELECTOR.reset(token)


def current_selector() -> "SelectorLike | None":
    """The selector of the forward running now, if any."""
    return _SELECTOR.get()
