"""Encode records and capture per-layer K, V (exactly as cached) and hidden states.

A *record* is a short text encoded on its own from position 0 (``single``), or
two records A and B encoded as one sequence, A then a separator then B
(``joint``), of which we keep B's tokens. Texts are templateless (no chat
format), as in the paper (partB section 3).

What is captured for the record's own tokens (its segment's token span, so a
BOS token or the separator is never part of it; [UNCLEAR] in the paper, our
choice):

* K and V of every layer that stores rows, read from the cache after the
  forward, so they are *exactly* what later tokens would read: post-RoPE and
  post-QK-norm keys, values as stored. On MLA models the cache holds the
  latent in the K slot and the rope key in the V slot (``LayerSpec.cache_note``).
* hidden states: the output of every decoder layer (the residual stream after
  layer l), captured with nnsight inside the same traced forward. ([UNCLEAR] in
  the paper which index convention; ours: depth l = output of layer l.)

Batches run through kvprobe's engine: rows are left-padded with slots no token
reads and positions start at 0 for every row, so a batched record computes what
it computes alone, to float32 rounding of differently shaped products (tested).
Models with recurrent layers batch only records of equal token length, since
padding would pass through their recurrent states.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np
import torch

from kvprobe.engine import fork_rows, pad_suffix_block, traced_forward
from kvprobe.prompts import Prompt, char_span_to_tokens

if TYPE_CHECKING:
    from kvprobe.model import Model

#: Text between A and B in a joint encoding ([UNCLEAR] in the paper; a newline).
JOINT_SEPARATOR = "\n"


@dataclass(frozen=True)
class RecordSpec:
    """One encoding to compute: a single record, or B read after A (``joint``)."""

    kind: str  # "single" | "joint"
    text: str  # the record (single) or B (joint)
    context: str = ""  # A, for joint encodings

    @property
    def key(self) -> str:
        """SHA-256 identifying the encoding (kind, context, text)."""
        blob = "\x00".join([self.kind, self.context, self.text])
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    def prompt(self, separator: str = JOINT_SEPARATOR) -> tuple[Prompt, str]:
        """The prompt to encode and the name of the segment whose tokens are kept."""
        if self.kind == "single":
            return Prompt([("R", self.text)], chat=False), "R"
        if self.kind == "joint":
            return Prompt([("A", self.context), ("B", self.text)], chat=False, sep=separator), "B"
        raise ValueError(f"unknown record kind {self.kind!r} (single or joint)")


@dataclass
class Encoding:
    """Captured features of one record's tokens (n = its span length).

    Attributes:
        token_ids: Long[n] the record's tokens.
        keys, values: layer -> Float[heads, n, dim] as cached (layers with rows).
        hidden: layer -> Float[n, d_model] decoder-layer outputs.
        span: (start, end) of the record's tokens in the encoded sequence.
        sequence_length: tokens in the encoded sequence (BOS, A and separator included).
    """

    token_ids: np.ndarray
    keys: dict[int, torch.Tensor]
    values: dict[int, torch.Tensor]
    hidden: dict[int, torch.Tensor]
    span: tuple[int, int]
    sequence_length: int


def encode(model: "Model", specs: Sequence[RecordSpec], separator: str = JOINT_SEPARATOR,
           hidden_layers: Sequence[int] | None = None) -> list[Encoding]:
    """Encode ``specs`` as one batch; return their captured features (float32 tensors).

    ``hidden_layers``: decoder layers whose outputs to capture (default all).
    """
    if not specs:
        return []
    tokenized = []
    for spec in specs:
        prompt, segment = spec.prompt(separator)
        rendered, ids, offsets = model.tokenize(prompt)
        start, end = rendered.segments[segment]
        span = char_span_to_tokens(offsets, rendered.history_text, start, end, label=segment)
        tokenized.append((ids, span))
    layers = tuple(range(model.arch.num_layers)) if hidden_layers is None else tuple(hidden_layers)
    if model.arch.recurrent_layers:  # padding would pass through recurrent states: equal lengths only
        groups: dict[int, list[int]] = {}
        for i, (seq, _) in enumerate(tokenized):
            groups.setdefault(int(seq.shape[0]), []).append(i)
        batches = list(groups.values())
    else:
        batches = [list(range(len(specs)))]
    encodings: list[Encoding | None] = [None] * len(specs)
    for members in batches:
        for i, enc in zip(members, _encode_tokenized(model, [tokenized[i] for i in members], layers)):
            encodings[i] = enc
    return encodings  # type: ignore[return-value]


def _encode_tokenized(model: "Model", tokenized, layers: tuple[int, ...]) -> list[Encoding]:
    rows = fork_rows([model.empty_state()] * len(tokenized))
    ids, valid = pad_suffix_block([t[0].tolist() for t in tokenized], model.pad_id)
    # Gemma 4's KV-sharing layers compute only the kept logits' rows; keep every row there.
    keep = 0 if model.arch.shared_layers else 1
    out = traced_forward(model, rows, ids, valid, capture_hidden=layers, logits_to_keep=keep)
    width = ids.shape[1]
    encodings = []
    for i, (seq, span) in enumerate(tokenized):
        first = width - int(seq.shape[0]) + span.start  # left padding: the row's tokens are the last columns
        cols = slice(first, first + len(span))
        keys = {layer: rows.cache.layers[layer].keys[i, :, cols].float().clone() for layer in model.arch.kv_layers}
        values = {layer: rows.cache.layers[layer].values[i, :, cols].float().clone()
                  for layer in model.arch.kv_layers}
        hidden = {layer: out.hidden[layer][i, cols].float().clone() for layer in layers}
        encodings.append(Encoding(seq[span.start : span.end].numpy(), keys, values, hidden,
                                  (span.start, span.end), int(seq.shape[0])))
    return encodings
