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

Edited caches (``encode(..., edit=Edit(...))``, ``kvprobe extract --edit``): every
joint record is prefilled as a history of its own, a cache operation of
``kvprobe.interventions`` (built by ``Edit.build`` from that history, e.g.
``Rebuild(A)``) prepares the edited row state, and B's rows are read from it
through ``RowState.slot_of`` (original position -> slot after the edit), with
their current RoPE positions (``RowState.key_pos``) and an edit entry (what
happened to the rows, by how much keys were re-rotated). Single records have
nothing to edit and are encoded as usual. Hidden states are not captured for
edited encodings: a cache edit changes stored rows, not the layer outputs that
produced them.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
import torch

from kvprobe.forward import traced_forward
from kvprobe.rows import fork_rows, pad_suffix_block
from kvprobe.prompts import Prompt, char_span_to_tokens

if TYPE_CHECKING:
    from kvprobe.access import Condition
    from kvprobe.history import History
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


#: What an edit may do to the stored rows of B (``Edit.action``; the store's ``records/edits`` entries).
EDIT_ACTIONS = ("rebuilt", "re-rotated", "recomputed", "zeroed", "kept")


@dataclass(frozen=True)
class Edit:
    """A cache operation applied to every joint record's history before B's rows are read.

    Attributes:
        name: short name, also the suffix of the store group (``records@rebuild``).
        condition: the operation as ``kvprobe conditions`` names it (``rebuild:A``), for provenance.
        action: what happens to B's stored rows, one of :data:`EDIT_ACTIONS`.
        build: ``History -> Condition``, the operation on one joint record's history
            (e.g. ``functools.partial(parse_condition, "rebuild:A")``).

    Example:
        >>> from functools import partial
        >>> from kvprobe.interventions.registry import parse_condition
        >>> edit = Edit("compact", "compact:A", "re-rotated", partial(parse_condition, "compact:A"))
        >>> edit.describe()["action"]
        're-rotated'
    """

    name: str
    condition: str
    action: str
    build: Callable[["History"], "Condition"]

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z][a-z0-9-]*", self.name):
            raise ValueError(f"edit name {self.name!r}: lowercase letters, digits and '-' only")
        if self.action not in EDIT_ACTIONS:
            raise ValueError(f"edit {self.name!r}: action {self.action!r} is not one of {EDIT_ACTIONS}")

    def describe(self) -> dict[str, str]:
        """The JSON-ready description stored with the group (``edit`` attribute)."""
        return {"name": self.name, "condition": self.condition, "action": self.action}


@dataclass
class Encoding:
    """Captured features of one record's tokens (n = its span length).

    Attributes:
        token_ids: Long[n] the record's tokens.
        keys, values: layer -> Float[heads, n, dim] as cached (layers with rows).
        hidden: layer -> Float[n, d_model] decoder-layer outputs.
        span: (start, end) of the record's tokens in the encoded sequence.
        sequence_length: tokens in the encoded sequence (BOS, A and separator included).
        label: the name of the record's segment (``R`` alone, ``B`` after A).
        rope_positions: Long[n] RoPE position of each stored key (``None``: the
            original positions ``span[0] .. span[1] - 1``, nothing was edited).
        edits: what was done to these rows, oldest first (see :func:`edit_entry`).
    """

    token_ids: np.ndarray
    keys: dict[int, torch.Tensor]
    values: dict[int, torch.Tensor]
    hidden: dict[int, torch.Tensor]
    span: tuple[int, int]
    sequence_length: int
    label: str = ""
    rope_positions: np.ndarray | None = None
    edits: tuple[dict[str, Any], ...] = ()

    @property
    def positions(self) -> np.ndarray:
        """Long[n] original positions of the tokens in their unedited encoded sequence."""
        return np.arange(self.span[0], self.span[1], dtype=np.int64)

    @property
    def current_positions(self) -> np.ndarray:
        """Long[n] RoPE positions of the stored keys (the original ones unless an edit moved them)."""
        return self.positions if self.rope_positions is None else np.asarray(self.rope_positions, dtype=np.int64)


def encode(model: "Model", specs: Sequence[RecordSpec], separator: str = JOINT_SEPARATOR,
           hidden_layers: Sequence[int] | None = None, edit: Edit | None = None) -> list[Encoding]:
    """Encode ``specs`` as one batch; return their captured features (float32 tensors).

    ``hidden_layers``: decoder layers whose outputs to capture (default all).
    ``edit``: read every joint record's B rows after this cache operation (one history
    per joint record, see :func:`encode_edited`; no hidden states for those records).
    """
    if not specs:
        return []
    if edit is not None:
        plain = [i for i, s in enumerate(specs) if s.kind != "joint"]
        out: list[Encoding | None] = [None] * len(specs)
        for i, enc in zip(plain, encode(model, [specs[i] for i in plain], separator, hidden_layers)):
            out[i] = enc
        for i, spec in enumerate(specs):
            if spec.kind == "joint":
                out[i] = encode_edited(model, spec, edit, separator)
        return out  # type: ignore[return-value]
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
    ids, valid = pad_suffix_block([t[0].tolist() for t in tokenized], model.pad_id, model.device)
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
                                  (span.start, span.end), int(seq.shape[0]), label=span.label))
    return encodings


def edit_entry(edit: Edit, source: tuple[int, int], original: np.ndarray, current: np.ndarray) -> dict[str, Any]:
    """One ``records/edits`` entry: the operation, the source rows it acted on and how B's rows moved.

    ``position_shift`` is current minus original RoPE position (one value when the
    shift is uniform, else a list); ``rerotated_by`` is that shift when the stored keys
    were rotated in place (compaction) and 0 when the rows were computed at their
    current positions (rebuild, recompute) or left alone.

    Example:
        >>> e = Edit("compact", "compact:A", "re-rotated", build=None)
        >>> edit_entry(e, (0, 5), np.arange(6, 9), np.arange(1, 4))["rerotated_by"]
        -5
    """
    shift = np.asarray(current, dtype=np.int64) - np.asarray(original, dtype=np.int64)
    uniform = bool(len(shift)) and bool((shift == shift[0]).all())
    value: int | list[int] = int(shift[0]) if uniform else [int(x) for x in shift]
    return {**edit.describe(), "source_tokens": [int(source[0]), int(source[1])], "position_shift": value,
            "rerotated_by": value if edit.action == "re-rotated" else 0}


def encode_edited(model: "Model", spec: RecordSpec, edit: Edit, separator: str = JOINT_SEPARATOR) -> Encoding:
    """B's rows of one joint record read from the cache after ``edit`` (float32; no hidden states).

    The record is prefilled as a history (segments ``A`` and ``B``), ``edit.build(history)``
    gives the operation, and its prepared row state holds the edited cache; each of
    B's original positions maps to its slot there through ``RowState.slot_of``.
    Raises ``ValueError`` naming the record when an edit leaves some of B's tokens
    without a row (e.g. B retokenized after a text edit).
    """
    if spec.kind != "joint":
        raise ValueError(f"edit {edit.name!r} applies to joint records (B read after A), not {spec.kind!r}")
    prompt, segment = spec.prompt(separator)
    history = model.prefill(prompt)
    span = history.span(segment)
    source = history.span("A")
    state = edit.build(history).prepare(model, history)
    slots = state.slot_of[span.start : span.end]
    ids = history.input_ids[span.start : span.end]
    if bool((slots < 0).any()) or not torch.equal(state.input_ids[slots.clamp(min=0)], ids):
        raise ValueError(f"edit {edit.name!r}: record B {spec.text[:60]!r} lost or changed tokens under "
                         f"{edit.condition} (retokenized?); its rows cannot be compared with the original ones")
    keys = {layer: state.kv[layer][0][0, :, slots].float().clone() for layer in model.arch.kv_layers}
    values = {layer: state.kv[layer][1][0, :, slots].float().clone() for layer in model.arch.kv_layers}
    original = np.arange(span.start, span.end, dtype=np.int64)
    current = state.key_pos[slots].numpy().astype(np.int64)
    return Encoding(ids.numpy(), keys, values, {}, (span.start, span.end), len(history), label=segment,
                    rope_positions=current, edits=(edit_entry(edit, (source.start, source.end), original, current),))
