"""Histories: a prompt prefix prefilled once, its cache, tokens and spans.

A :class:`History` is immutable in use: every access condition, score and
generation works on its own fork of the cache (``kvprobe.rows.fork_rows``).
``digest`` hashes every stored K and V element (:func:`kv_digest`, computed on the model's
device), taken at prefill; :meth:`History.check_digest` proves no condition changed
the shared prefix.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch

from .rows import RowState
from .prompts import Prompt, RenderedPrompt, SpanError, TokenSpan, char_span_to_tokens, find_occurrences

if TYPE_CHECKING:
    from .model_like import ModelLike


#: Integer dtype of each element width: a tensor's bits are read through this view.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
#: Width of the rows a tensor's bits are folded into for the weighted sum (see :func:`tensor_checksum`).
_ROW = 1024
#: An odd 64-bit multiplier (2^64 / golden ratio, as a signed int64): row weights ``(r * M + 1) mod 2^64``
#: are distinct for every row.
_WEIGHT = -7046029254386353131


class ModelMismatchError(ValueError):
    """A history is read by a model other than the one that prefilled it (and the call did not ask for a
    cross-checkpoint read, or the two cannot share a cache)."""


#: transformers model -> its weights fingerprint (weak keys: a copied model, a sibling, gets its own).
_FINGERPRINTS: "weakref.WeakKeyDictionary[Any, str]" = weakref.WeakKeyDictionary()


def weights_fingerprint(hf: Any, refresh: bool = False) -> str:
    """SHA-256 of a transformers model's class, config and every parameter's :func:`tensor_checksum`.

    Computed on the parameters' own devices, one host transfer at the end, once per model object
    (``refresh``: again, after editing weights in place). Two loads of the same checkpoint have the
    same fingerprint.
    """
    if refresh or hf not in _FINGERPRINTS:
        sums = [tensor_checksum(p) for _, p in sorted(hf.named_parameters())]
        blob = json.dumps([type(hf).__name__, hf.config.to_json_string(use_diff=False),
                           [s.tolist() for s in sums]], sort_keys=True)
        _FINGERPRINTS[hf] = hashlib.sha256(blob.encode()).hexdigest()
    return _FINGERPRINTS[hf]


#: tokenizer -> (its size when fingerprinted, its fingerprint); a tokenizer grown since is fingerprinted again.
_TOKENIZER_FINGERPRINTS: "weakref.WeakKeyDictionary[Any, tuple[int, str]]" = weakref.WeakKeyDictionary()


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """SHA-256 of a tokenizer's vocabulary (token -> id) and special tokens: equal for tokenizers that map
    every text to the same ids. Kept per tokenizer object while its size is unchanged."""
    size = len(tokenizer)
    try:
        known = _TOKENIZER_FINGERPRINTS.get(tokenizer)
    except TypeError:  # not weakly referenceable: computed each time
        known = None
    if known is not None and known[0] == size:
        return known[1]
    blob = json.dumps([sorted(tokenizer.get_vocab().items()), tokenizer.all_special_tokens], sort_keys=True)
    value = hashlib.sha256(blob.encode()).hexdigest()
    try:
        _TOKENIZER_FINGERPRINTS[tokenizer] = (size, value)
    except TypeError:
        pass
    return value


def check_reader(model: "ModelLike", history: "History", cross_checkpoint: bool = False) -> None:
    """Refuse a history read by another model than its writer, before any forward.

    Every reader must have the tokenizer the history was tokenized by (:attr:`History.tokenizer_fingerprint`,
    :func:`tokenizer_fingerprint`). The same model object, or another load of the same weights
    (:func:`weights_fingerprint`), may read it. Another checkpoint may read it only when the call says so
    (``cross_checkpoint=True``), with the same cached shapes in every layer.
    """
    writer = history.model
    written = history.tokenizer_fingerprint or tokenizer_fingerprint(writer.tokenizer)
    if written != tokenizer_fingerprint(model.tokenizer):
        raise ModelMismatchError(
            f"this history was tokenized by another tokenizer than {model.name!r}'s (tokenizer fingerprints "
            f"{written[:12]} and {tokenizer_fingerprint(model.tokenizer)[:12]} differ), so its token ids mean "
            "different text to the reader; prefill it with the reading model and its own tokenizer")
    if writer is model or writer.hf is model.hf or history.model_fingerprint == model.fingerprint:
        return
    if not cross_checkpoint:
        raise ModelMismatchError(
            f"this history was prefilled by {writer.name!r} and is read by {model.name!r}, whose weights differ; "
            "prefill it with the reading model, or pass cross_checkpoint=True to read another checkpoint's cache")
    shapes = [(s.kind, s.key_shape, s.value_shape) for s in writer.arch.layers]
    if shapes != [(s.kind, s.key_shape, s.value_shape) for s in model.arch.layers]:
        raise ModelMismatchError(f"cross-checkpoint read: {writer.name!r} and {model.name!r} cache different "
                                 "layer types or K/V shapes")


def tensor_checksum(t: torch.Tensor) -> torch.Tensor:
    """Long[2] on ``t``'s device: a plain and a position-weighted sum of ``t``'s bits read as integers.

    Works on every dtype (bf16/fp16 through int16, fp32 through int32...) and device without copying
    ``t`` to the host, in a few kernels. Any change of one element changes the plain sum; changes that
    cancel there (two elements swapped, say) change the weighted one, whose weights differ for every
    element (an odd weight per column, wrapping int32 products, times a distinct weight per row, mod
    2^64). A checksum for catching accidental writes, not a cryptographic hash.
    """
    flat = t.detach().reshape(-1)
    if (flat.numel() * flat.element_size()) % 4 == 0 and flat.element_size() != 4:
        bits = flat.view(torch.uint8).view(torch.int32)  # the same bytes as 32-bit words (no copy)
    else:
        bits = flat.view(_BITS[flat.element_size()])
        bits = bits if bits.element_size() == 4 else bits.to(torch.int32)
    n = bits.numel()
    pad = (-n) % _ROW
    if pad:
        bits = torch.cat([bits, bits.new_zeros(pad)])
    rows = bits.view(-1, _ROW)
    column = torch.arange(1, 2 * _ROW, 2, dtype=torch.int32, device=t.device)  # odd column weights
    row_sums = (rows * column).sum(dim=1, dtype=torch.int64)  # int32 products wrap; summed in int64
    row_weight = torch.arange(rows.shape[0], dtype=torch.int64, device=t.device) * _WEIGHT + 1
    return torch.stack([rows.sum(dtype=torch.int64), (row_sums * row_weight).sum()])


def kv_digest(kv: list[tuple[torch.Tensor | None, torch.Tensor | None]],
              recurrent: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None) -> str:
    """Digest of every K and V tensor (and recurrent state), in layer order, computed where they live.

    Tensors in host memory are hashed in place (SHA-256 over their bits, no copy); tensors on an
    accelerator are reduced there by :func:`tensor_checksum` (one small copy per device instead
    of the whole cache). Shapes and dtypes are part of the digest. Every dtype works.

    Example::

        d = kv_digest(h.kv)          # equals h.digest right after the prefill
        h.kv[0][0][0, 0, 3, 0] += 1  # any write to the cache...
        assert kv_digest(h.kv) != d  # ...changes it
    """
    tensors = [t for pair in kv for t in pair if t is not None]
    tensors += [t for _, pair in sorted((recurrent or {}).items()) for t in pair if t is not None]
    by_device: dict[torch.device, list[int]] = {}
    for i, t in enumerate(tensors):
        if t.device.type != "cpu":
            by_device.setdefault(t.device, []).append(i)
    sums: dict[int, list[int]] = {}
    for indices in by_device.values():  # one stack and one host copy per device
        for i, pair in zip(indices, torch.stack([tensor_checksum(tensors[i]) for i in indices]).tolist()):
            sums[i] = pair
    h = hashlib.sha256()
    for i, t in enumerate(tensors):
        h.update(f"{tuple(t.shape)}:{t.dtype};".encode())
        if i in sums:
            h.update(f"{sums[i][0]}:{sums[i][1]};".encode())
        else:
            flat = t.detach().contiguous().reshape(-1)
            h.update(flat.view(_BITS[flat.element_size()]).numpy().data)  # the bits, read in place
    return h.hexdigest()


@dataclass(eq=False)
class History:
    """A prefilled history.

    Attributes:
        model: the model that prefilled it.
        prompt: the segments it was built from.
        rendered: the rendered text and segment character ranges.
        input_ids: Long[T] history tokens.
        offsets: per token, its (start, end) characters in ``rendered.history_text``.
        kv: per layer (K, V), shapes [1, kv_heads, T, head_dim]; K as cached (after RoPE).
        positions: Long[T] RoPE position of every history slot (0..T-1 after a prefill).
        digest: :func:`kv_digest` of ``kv`` (and recurrent states) at prefill time.
        recurrent: per recurrent layer of a hybrid model, its (conv, recurrent) state
            after the history; ``kv`` holds ``(None, None)`` for those layers.
        reused_tokens: leading tokens whose K/V were copied from an earlier history
            (``Model.prefill(reuse=...)``) instead of computed.
        tokenizer_fingerprint: :func:`tokenizer_fingerprint` of the tokenizer that made ``input_ids``
            (empty: its model's tokenizer); a reader with another tokenizer is refused (:func:`check_reader`).
    """

    model: "ModelLike"
    prompt: Prompt
    rendered: RenderedPrompt
    input_ids: torch.Tensor
    offsets: list[tuple[int, int]]
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    positions: torch.Tensor
    digest: str
    recurrent: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    reused_tokens: int = 0
    tokenizer_fingerprint: str = ""

    @property
    def model_fingerprint(self) -> str:
        """The weights fingerprint of the model that prefilled it (:func:`weights_fingerprint`)."""
        return self.model.fingerprint

    def __len__(self) -> int:
        return int(self.input_ids.shape[0])

    @property
    def device(self) -> torch.device:
        """Where its positions and token ids live (the model's ``Model.device``)."""
        return self.positions.device

    @property
    def text(self) -> str:
        """The rendered history text."""
        return self.rendered.history_text

    def base_state(self) -> RowState:
        """The unedited cache as a :class:`RowState` (nothing hidden, no bias)."""
        T = len(self)
        return RowState(
            kv=self.kv,
            key_pos=self.positions,
            key_valid=torch.ones(T, dtype=torch.bool, device=self.device),
            input_ids=self.input_ids,
            slot_of=torch.arange(T, device=self.device),
            recurrent=self.recurrent,
        )

    def prefix_state(self, n: int) -> RowState:
        """The cached rows of the first ``n`` tokens as a :class:`RowState`.

        Hybrid models keep recurrent states only after the whole history, so for them
        ``n`` must be 0 (start afresh) or ``len(self)``.
        """
        T = len(self)
        if not 0 <= n <= T:
            raise SpanError(f"prefix of {n} tokens requested from a history of {T}")
        if n == T:
            return self.base_state()
        if self.recurrent and n > 0:
            raise SpanError("recurrent layers keep their state only after the whole history; "
                            "a prefix of a hybrid model's history must be empty")
        return RowState(
            kv=[(None, None) if k is None else (k[:, :, :n], v[:, :, :n]) for k, v in self.kv],
            key_pos=self.positions[:n],
            key_valid=torch.ones(n, dtype=torch.bool, device=self.device),
            input_ids=self.input_ids[:n],
            slot_of=torch.arange(n, device=self.device),
            recurrent={layer: (None, None) for layer in self.recurrent},
        )

    def check_digest(self) -> bool:
        """True if the stored K/V still hash to the digest taken at prefill."""
        return kv_digest(self.kv, self.recurrent) == self.digest

    def span(
        self,
        segment: str,
        text: str | None = None,
        *,
        occurrence: int | None = None,
        chars: tuple[int, int] | None = None,
        strict: bool = True,
    ) -> TokenSpan:
        """Token span of a segment, or of a piece of it.

        Args:
            segment: segment name.
            text: a substring of the segment to map instead of the whole segment
                (e.g. the old number ``"12"``); it must occur once unless
                ``occurrence`` picks one (0-based).
            chars: a character range relative to the segment start, instead of ``text``.
            strict: refuse tokens that extend past the range over non-whitespace.
        """
        if segment not in self.rendered.segments:
            raise SpanError(f"no segment {segment!r}; segments are {list(self.rendered.segments)}")
        seg_start, seg_end = self.rendered.segments[segment]
        seg_text = self.text[seg_start:seg_end]
        label = segment
        if text is not None and chars is not None:
            raise SpanError("give either text= or chars=, not both")
        if text is not None:
            if not text:
                raise SpanError(f"empty text for a span in segment {segment!r}")
            hits = find_occurrences(seg_text, text)
            if not hits:
                raise SpanError(f"{text!r} does not occur in segment {segment!r}")
            if occurrence is None and len(hits) > 1:
                raise SpanError(f"{text!r} occurs {len(hits)} times in segment {segment!r}; pass occurrence=")
            k = occurrence or 0
            if not 0 <= k < len(hits):
                raise SpanError(f"occurrence {k} of {text!r} requested; segment {segment!r} has {len(hits)}")
            chars = (hits[k], hits[k] + len(text))
            label = f"{segment}:{text}"
        if chars is not None:
            lo, hi = chars
            if not 0 <= lo < hi <= len(seg_text):
                raise SpanError(
                    f"chars [{lo}, {hi}) are empty or outside segment {segment!r} ({len(seg_text)} chars)"
                )
            start, end = seg_start + lo, seg_start + hi
            label = label if text is not None else f"{segment}[{lo}:{hi}]"
        else:
            start, end = seg_start, seg_end
        return char_span_to_tokens(self.offsets, self.text, start, end, strict=strict, label=label)

    def token_text(self, span: TokenSpan) -> str:
        """Decoded text of the history tokens in ``span``."""
        if span.end > len(self):
            raise SpanError(f"{span!r} lies outside the history of {len(self)} tokens")
        return self.model.tokenizer.decode(self.input_ids[span.start : span.end])
