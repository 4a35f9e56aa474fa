"""Can one checkpoint read another's cache? Token, boundary, span and architecture identity (spec E8).

Paper: every prompt uses the main model's chat template and tokenizer, and both
checkpoints' tokenizers must give the same token ids, history boundaries and
mask spans, "so a cross read changes only the weights that computed the cache".
The caches must also have the same layout: layers, layer kinds, cached K/V
shapes, where RoPE lives and its parameters, and the dtype.

:func:`check_compatible` checks all of that without running a forward (it only
renders and tokenizes) and raises :class:`CompatibilityError` naming the first
mismatch. :func:`check_history_readable` is the cheap per-history form used by
every cross read.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Sequence

import torch

from kvprobe.prompts import Prompt, SpanError, char_span_to_tokens

if TYPE_CHECKING:
    from kvprobe import History, Model


class CompatibilityError(ValueError):
    """Two checkpoints (or a history and a reader) cannot share a cache; the message names the mismatch."""


#: ArchSummary fields that must agree (per-layer specs are compared one by one).
_ARCH_FIELDS = ("model_type", "num_layers", "num_heads", "qk_norm", "rope")
#: LayerSpec fields that must agree (``cache_note`` is descriptive only).
_LAYER_FIELDS = ("kind", "window", "cache", "kv_layer", "key_shape", "value_shape", "rope_tensor", "rope_dims",
                 "rope_layout")


def check_architectures(writer: "Model", reader: "Model") -> None:
    """Raise :class:`CompatibilityError` unless the two models cache the same tensors the same way.

    Compared: model type, number of layers and query heads, QK-norm, RoPE parameters
    per layer type, per layer its kind, window, cache role, K/V shapes (kv heads x head
    dim) and RoPE placement, and the weights' dtype.
    """
    w, r = writer.arch, reader.arch
    for name in _ARCH_FIELDS:
        a, b = getattr(w, name), getattr(r, name)
        if a != b:
            raise CompatibilityError(f"architecture mismatch in {name}: writer {writer.name!r} has {a!r}, "
                                     f"reader {reader.name!r} has {b!r}")
    for i, (ls, rs) in enumerate(zip(w.layers, r.layers)):
        a, b = asdict(ls), asdict(rs)
        for name in _LAYER_FIELDS:
            if a[name] != b[name]:
                raise CompatibilityError(f"architecture mismatch at layer {i} in {name}: writer {writer.name!r} "
                                         f"has {a[name]!r}, reader {reader.name!r} has {b[name]!r}")
    if writer.dtype != reader.dtype:
        raise CompatibilityError(f"dtype mismatch: writer {writer.name!r} runs in {writer.dtype}, "
                                 f"reader {reader.name!r} in {reader.dtype}")


def _first_difference(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((i for i in range(n) if a[i] != b[i]), n)


def _describe_ids(tokenizer: Any, ids: Sequence[int], i: int) -> str:
    if i >= len(ids):
        return f"<end after {len(ids)} tokens>"
    return f"{ids[i]} {tokenizer.decode([ids[i]])!r}"


def _compare_ids(what: str, a: Sequence[int], b: Sequence[int], tok_a: Any, tok_b: Any,
                 writer: str, reader: str) -> None:
    a, b = list(a), list(b)
    if a != b:
        i = _first_difference(a, b)
        raise CompatibilityError(
            f"{what}: token ids differ at position {i} ({len(a)} vs {len(b)} tokens): writer {writer!r} has "
            f"{_describe_ids(tok_a, a, i)}, reader {reader!r} has {_describe_ids(tok_b, b, i)}")


def check_compatible(
    writer: "Model",
    reader: "Model",
    prompts: Sequence[Prompt],
    questions: Sequence[Sequence[str]] | Sequence[str] = (),
    mask_segments: Sequence[str] | None = None,
    writer_tokenizer: Any = None,
    reader_tokenizer: Any = None,
) -> dict[str, int]:
    """Check that ``reader`` can read caches ``writer`` prefills from ``prompts``; raise on any mismatch.

    Args:
        writer, reader: the two checkpoints (the reader's chat template renders every prompt,
            as the paper renders with the main model's template).
        prompts: the histories to check (rendering and tokenization only, no forward).
        questions: per prompt a list of questions, or one list for every prompt; their
            suffix token ids (question + template tail) must agree too.
        mask_segments: segments whose token spans a mask uses (default: every segment);
            every segment's boundaries are compared either way, these are named as mask spans.
        writer_tokenizer, reader_tokenizer: the checkpoints' *own* tokenizers when a
            :class:`~studies.cross_checkpoint.siblings.SiblingPair` renders with a shared
            one (default: each model's ``tokenizer``).

    Raises:
        CompatibilityError: naming the architecture field, or the prompt, position and
            tokens, or the segment whose boundaries differ.

    Returns:
        counts of what was compared (prompts, history tokens, suffix tokens).
    """
    check_architectures(writer, reader)
    tok_w = writer_tokenizer if writer_tokenizer is not None else writer.tokenizer
    tok_r = reader_tokenizer if reader_tokenizer is not None else reader.tokenizer
    if questions and isinstance(questions[0], str):
        per_prompt = [list(questions)] * len(prompts)  # type: ignore[list-item]
    else:
        per_prompt = [list(q) for q in questions] or [[] for _ in prompts]
    if len(per_prompt) != len(prompts):
        raise ValueError(f"{len(per_prompt)} question lists for {len(prompts)} prompts")
    counts = {"prompts": 0, "history_tokens": 0, "suffix_tokens": 0}
    for p, (prompt, qs) in enumerate(zip(prompts, per_prompt)):
        where = f"prompt {p}"
        rendered = prompt.render(reader.tokenizer)  # the main model's template
        try:
            own = prompt.render(writer.tokenizer)
        except SpanError as e:
            raise CompatibilityError(f"{where}: the writer {writer.name!r} cannot render the prompt ({e}); "
                                     "share the main model's tokenizer (siblings.SiblingPair)") from e
        if own.history_text != rendered.history_text or own.suffix_template != rendered.suffix_template:
            i = _first_difference(own.history_text, rendered.history_text)
            raise CompatibilityError(
                f"{where}: the writer's chat template renders a different history (first difference at character "
                f"{i}: {own.history_text[i:i + 30]!r} vs {rendered.history_text[i:i + 30]!r}); "
                "render both with the main model's tokenizer (siblings.SiblingPair)")
        ids_w, off_w = rendered.encode(tok_w)
        ids_r, off_r = rendered.encode(tok_r)
        _compare_ids(f"{where} history", ids_w, ids_r, tok_w, tok_r, writer.name, reader.name)
        masked = set(rendered.segments if mask_segments is None else mask_segments)
        for name, (start, end) in rendered.segments.items():
            spans = []
            for offsets in (off_w, off_r):
                try:
                    spans.append(char_span_to_tokens(offsets, rendered.history_text, start, end, label=name))
                except SpanError as e:
                    spans.append(e)
            if any(isinstance(s, SpanError) for s in spans) or spans[0] != spans[1]:
                kind = "mask span" if name in masked else "segment boundary"
                raise CompatibilityError(f"{where}: {kind} of segment {name!r} differs: writer {spans[0]!r}, "
                                         f"reader {spans[1]!r}")
        for q in qs:
            suffix = rendered.suffix(q)
            sw = tok_w(suffix, add_special_tokens=False)["input_ids"]
            sr = tok_r(suffix, add_special_tokens=False)["input_ids"]
            _compare_ids(f"{where} question {q[:40]!r}", sw, sr, tok_w, tok_r, writer.name, reader.name)
            counts["suffix_tokens"] += len(sr)
        counts["prompts"] += 1
        counts["history_tokens"] += len(ids_r)
    return counts


def check_history_readable(history: "History", reader: "Model") -> None:
    """The per-read check: ``reader`` has the writer's cache layout and tokenizes the history identically.

    Cheap (one tokenization); run on every history a reader reads that another model wrote.
    """
    writer = history.model
    if writer is reader:
        return
    check_architectures(writer, reader)
    for i, (k, v) in enumerate(history.kv):
        spec = reader.arch.layers[i]
        if k is None:
            continue
        if (tuple(k.shape[1:2]) + tuple(k.shape[3:]), tuple(v.shape[1:2]) + tuple(v.shape[3:])) != \
                (spec.key_shape, spec.value_shape):
            raise CompatibilityError(f"layer {i}: cached K/V shapes {tuple(k.shape)} / {tuple(v.shape)} do not fit "
                                     f"reader {reader.name!r} ({spec.key_shape} / {spec.value_shape})")
    ids = reader.tokenizer(history.text, add_special_tokens=history.rendered.add_special_tokens)["input_ids"]
    _compare_ids("history", history.input_ids.tolist(), ids, writer.tokenizer, reader.tokenizer,
                 writer.name, reader.name)


def same_ids(a: "History", b: "History") -> bool:
    """Whether two histories hold identical token ids."""
    return a.input_ids.shape == b.input_ids.shape and bool(torch.equal(a.input_ids, b.input_ids))
