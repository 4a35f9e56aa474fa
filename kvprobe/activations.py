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

from .access import Condition
from .decoding import Request, prepare_states, suffix_ids
from .engine import fork_rows, pad_suffix_block, shares_history, traced_forward

if TYPE_CHECKING:
    from .history import History
    from .model import Model

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


def check_capture(model: "Model", names: Sequence[str], layers: Sequence[int] | None) -> tuple[int, ...]:
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


def run_with_cache(model: "Model", history: "History", question: str, conditions: Mapping[str, Condition],
                   names: Sequence[str] = NAMES, layers: Sequence[int] | None = None,
                   cross_checkpoint: bool = False) -> dict[str, ActivationCache]:
    """One forward of ``question`` after ``history`` with one row per condition; each row's internals.

    Everything is checked before the forward: capture names, layers, and each condition against the
    history (``Condition.validate`` through ``prepare``).
    """
    chosen = check_capture(model, names, layers)
    arch = model.arch
    attention_layers = tuple(layer for layer in chosen if layer in arch.attention_layers)
    states = prepare_states(model, [(history, Request(question, c)) for c in conditions.values()], cross_checkpoint)
    rows = fork_rows(states, share=shares_history(model), names=list(conditions))
    suffix = suffix_ids(model, history, question)
    ids, valid = pad_suffix_block([suffix] * len(states), model.pad_id, model.device)
    out = traced_forward(model, rows, ids, valid,
                         capture_attention=attention_layers if "attention" in names else (),
                         capture_hidden=chosen if "hidden" in names else ())
    Q = len(suffix)
    caches = {}
    for row, name in enumerate(conditions):
        keep = rows.key_valid[row]
        cache = ActivationCache(
            condition=name, tokens=ids[row], key_positions=rows.key_pos[row][keep],
            hidden=LayerDict(arch.num_layers, {layer: out.hidden[layer][row] for layer in out.hidden}),
            attention=LayerDict(arch.num_layers, {layer: probabilities[row][:, :, keep]
                                                  for layer, probabilities in out.attention.items()}),
            keys=LayerDict(arch.num_layers), values=LayerDict(arch.num_layers),
            logits=out.logits[row] if "logits" in names else None, names=tuple(names))
        for layer in attention_layers:
            cached = rows.cache.layers[arch.layers[layer].kv_layer]
            if "keys" in names:
                cache.keys[layer] = cached.keys[row, :, -Q:]
            if "values" in names:
                cache.values[layer] = cached.values[row, :, -Q:]
        caches[name] = cache
    return caches
