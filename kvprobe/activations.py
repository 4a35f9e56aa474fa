"""What the question's forward computed under each condition: ``Model.run_with_cache``.

TransformerLens's ``run_with_cache`` for kvprobe's batches: every condition is one row of one
forward over the shared history (as ``Model.score`` runs them), and each row's internals come back
as an :class:`ActivationCache` named after its condition::

    caches = m.run_with_cache(h, "What is ...?", access={"full": Full(), "source": Mask(h.span("A"))})
    caches["source"].hidden[12]       # [question_tokens, d_model], the residual stream after layer 12
    caches["source"].attention[12]    # [heads, question_tokens, keys]: post-softmax, masks and biases applied
    caches["source"].keys[12]         # [kv_heads, question_tokens, head_dim], as cached (after RoPE)

Conventions (where kvprobe differs from TransformerLens, it says so):

* ``hidden[l]`` is the output of decoder layer ``l`` at the question tokens, before the final norm;
  ``hidden[-1]`` is the last layer's output (transformers' ``output_hidden_states[l + 1]``, except that
  its last entry there has the final norm applied). Embeddings are not captured.
* ``attention[l]`` has one column per key the row's cache holds, in cache order: the history rows
  its condition kept (every history token for masks and biases; fewer after ``Compact``/``Drop``;
  the re-prefilled text after ``TextRecompute``), then the question tokens. ``key_positions`` gives
  each column's RoPE position. Hidden keys have probability 0.
* ``keys[l]``/``values[l]`` are the question's own rows as the layer caches them (keys after RoPE);
  a KV-sharing layer reports the rows of the layer it reads. Recurrent layers have no keys.
* ``logits`` is ``[question_tokens, vocab]`` (float as the model computes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping, Sequence

import torch

if TYPE_CHECKING:
    from .forward import ForwardOutput
    from .model_like import ModelLike
    from .rows import Rows

#: What ``run_with_cache`` can capture.
NAMES = ("hidden", "attention", "keys", "values", "logits")


class LayerDict(dict):
    """``layer -> tensor``; negative indices count from the model's last layer (``hidden[-1]``)."""

    def __init__(self, num_layers: int, items: Mapping[int, torch.Tensor] | None = None):
        super().__init__(items or {})
        self.num_layers = num_layers

    def __getitem__(self, layer: int) -> torch.Tensor:
        index = layer + self.num_layers if isinstance(layer, int) and layer < 0 else layer
        if index not in self:
            raise KeyError(f"layer {layer} was not captured (captured: {sorted(self)})")
        return super().__getitem__(index)


@dataclass
class ActivationCache:
    """The internals of one condition's row (see the module docstring for shapes and conventions).

    Attributes:
        condition: the condition's name.
        tokens: Long[question_tokens] the question suffix's token ids.
        key_positions: Long[keys] RoPE position of each attention column.
        hidden, attention, keys, values: ``layer -> tensor`` (captured layers only).
        logits: Float[question_tokens, vocab], or None if not captured.
    """

    condition: str
    tokens: torch.Tensor
    key_positions: torch.Tensor
    hidden: LayerDict
    attention: LayerDict
    keys: LayerDict
    values: LayerDict
    logits: torch.Tensor | None = None
    names: tuple[str, ...] = field(default=NAMES)


def check_capture(model: "ModelLike", names: Sequence[str], layers: Sequence[int] | None) -> tuple[int, ...]:
    """The layers to capture (all by default), after refusing unknown names and layers out of range."""
    unknown = [n for n in names if n not in NAMES]
    if unknown:
        raise ValueError(f"unknown capture name(s) {unknown}; choose from {list(NAMES)}")
    n = model.arch.num_layers
    if layers is None:
        return tuple(range(n))
    bad = [layer for layer in layers if not -n <= layer < n]
    if bad:
        raise ValueError(f"layer(s) {bad} out of range for {model.name!r} ({n} layers: 0..{n - 1} or -{n}..-1)")
    return tuple(sorted({layer % n for layer in layers}))


class Recorder:
    """Collects what forwards captured, per item (a request of a batch), over the question block and any
    generated tokens, into one :class:`ActivationCache` per item.

    Each call to :meth:`add` takes one forward's output and, per batch row, the item it belongs to
    (None: not recorded, e.g. a finished row still in the batch). Tokens are concatenated in order;
    attention rows of earlier tokens are padded with zeros on the keys that did not exist yet (a causal
    token reads none of them), so ``attention[l]`` is [heads, tokens, keys of the row's final cache].
    """

    def __init__(self, model: "ModelLike", names: Sequence[str], layers: Sequence[int] | None, n_items: int):
        self.layers = check_capture(model, names, layers)
        self.names, self.arch = tuple(names), model.arch
        self.attention_layers = tuple(layer for layer in self.layers if layer in model.arch.attention_layers)
        self._parts: list[dict[str, list]] = [{} for _ in range(n_items)]
        self._positions: list[torch.Tensor | None] = [None] * n_items

    @property
    def capture_attention(self) -> tuple[int, ...]:
        """The ``capture_attention`` argument of the forwards (:func:`~kvprobe.forward.traced_forward`)."""
        return self.attention_layers if "attention" in self.names else ()

    @property
    def capture_hidden(self) -> tuple[int, ...]:
        return self.layers if "hidden" in self.names else ()

    @property
    def logits_to_keep(self) -> int:
        """0 (every position's logits) when logits are recorded, else 1."""
        return 0 if "logits" in self.names else 1

    def add(self, out: "ForwardOutput", rows: "Rows", valid: torch.Tensor, items: Sequence[int | None],
            token_ids: torch.Tensor) -> None:
        """Record one forward of ``rows`` (its block's Bool[B, Q] ``valid`` tokens, Long[B, Q] ids)."""
        Q = valid.shape[1]
        for b, item in enumerate(items):
            if item is None:
                continue
            columns = torch.nonzero(valid[b]).flatten()
            keep = rows.key_valid[b]
            part = self._parts[item]
            part.setdefault("tokens", []).append(token_ids[b, columns])
            if "logits" in self.names:
                part.setdefault("logits", []).append(out.logits[b, columns])
            for layer in out.hidden:
                part.setdefault(("hidden", layer), []).append(out.hidden[layer][b, columns])
            for layer, probabilities in out.attention.items():
                part.setdefault(("attention", layer), []).append(probabilities[b][:, columns][:, :, keep])
            for layer in self.attention_layers:
                cached = rows.cache.layers[self.arch.layers[layer].kv_layer]
                slots = cached.keys.shape[2] - Q + columns  # the block's slots are the row's last Q
                if "keys" in self.names:
                    part.setdefault(("keys", layer), []).append(cached.keys[b][:, slots])
                if "values" in self.names:
                    part.setdefault(("values", layer), []).append(cached.values[b][:, slots])
            self._positions[item] = rows.key_pos[b][keep]

    def cache(self, item: int, condition: str) -> ActivationCache:
        """The item's :class:`ActivationCache` (everything recorded for it, in order)."""
        part, n = self._parts[item], self.arch.num_layers
        tables = {kind: LayerDict(n) for kind in ("hidden", "attention", "keys", "values")}
        for key, pieces in part.items():
            if not isinstance(key, tuple):
                continue
            kind, layer = key
            if kind == "attention":
                width = pieces[-1].shape[-1]
                pieces = [torch.nn.functional.pad(p, (0, width - p.shape[-1])) for p in pieces]
            tables[kind][layer] = torch.cat(pieces, dim=-2 if kind in ("attention", "keys", "values") else 0)
        return ActivationCache(condition=condition, tokens=torch.cat(part["tokens"]),
                               key_positions=self._positions[item], logits=torch.cat(part["logits"])
                               if "logits" in part else None, names=self.names, **tables)
