"""The mechanism: a reader checkpoint answers from a cache another checkpoint wrote (spec E8).

The writer prefills a history once (a :class:`kvprobe.History`). A cross read
hands the writer's history to the *reader's* batched answer loop
(``kvprobe.decoding.answer``): every access condition builds its row state from
``history.base_state()`` (the writer's K/V), ``fork_rows`` gives every row its
own copy, the question suffix runs through ``traced_forward`` with the reader's
weights and greedy decoding continues from it. So the existing access machinery
(``Mask``/``RowState.hide``, every cache operation) works unchanged on a foreign
cache; the only change is the stopping set, the union of both checkpoints' EOS
ids (:func:`with_stop_ids`). The writer's cache is never written: every read
checks ``history.check_digest()`` afterwards and raises if it changed.

Checks (paper: "each reader passes the no-op and intervention checks on its
sibling's cache ... decoding from the cache reproduce[s] the first token of a
full forward pass"):

* :func:`full_forward_first_token`: the reader's greedy first token from one plain
  uncached transformers forward over history + question (the reference the
  study compares every own-cache read with);
* :func:`verify_cross_read`: traced cached logits of the reader on the writer's
  cache vs a plain transformers forward on a copy of that cache with an explicit
  4-D mask (no-op check under full access, intervention check under a mask);
* :func:`reference_cross_generate`: brute-force greedy decoding on a
  ``transformers.DynamicCache`` rebuilt from ``history.kv`` (tests).

Answer comparison: :func:`answer_content` (Changed ignores JSON whitespace and one
outer code fence) and :func:`is_invalid` (cap hit or not exactly one string
``answer`` field, one outer fence allowed).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

import torch
from transformers import DynamicCache

from kvprobe import decoding
from kvprobe.access import Condition, Full, Mask
from kvprobe.decoding import Generation, Request
from kvprobe.history import History
from kvprobe.model import Model
from kvprobe.reference import (LOGIT_TOLERANCE, cached_explicit_logits, explicit_cached_mask, reference_logits,
                               transformers_eager)
from kvprobe.studies.common.answers import PLAIN_DECODER, parse_strict
from kvprobe.transformers_api import cache_argument

from .checks import check_history_readable

#: Largest |logit| difference of a cross read against its plain-transformers reference (fp32): kvprobe
#: verify's, ``kvprobe.reference.LOGIT_TOLERANCE`` (imported above).
#: A first-token mismatch whose reference top-1/top-2 logit gap is below this is a tie, not a failure.
TIE_GAP = 1e-4


class _StopSetModel(Model):
    """A :class:`Model` view that shares every module of another but stops on a given set of ids."""

    _stop_ids: frozenset[int]
    _pad: int

    @property
    def eos_ids(self) -> frozenset[int]:  # type: ignore[override]
        return self._stop_ids

    @property
    def pad_id(self) -> int:  # type: ignore[override]
        return self._pad  # padding is never read; keep the model's own pad id anyway


def with_stop_ids(model: Model, stop_ids: Iterable[int]) -> Model:
    """``model`` itself if it already stops on exactly ``stop_ids``, else a view that does.

    The view shares weights, tokenizer and nnsight wrapper; only ``eos_ids`` (what
    greedy decoding stops on and what ``Generation.stop_reason`` calls ``"eos"``) differ.
    """
    stop = frozenset(int(i) for i in stop_ids)
    if not stop:
        raise ValueError("empty stopping set")
    if stop == model.eos_ids:
        return model
    view = object.__new__(_StopSetModel)
    view.__dict__.update(model.__dict__)
    view._stop_ids = stop
    view._pad = model.pad_id
    return view


def union_stop_ids(*models: Model, extra: Iterable[int] = ()) -> frozenset[int]:
    """The union of the models' EOS sets (the paper's stopping rule for both readers)."""
    ids: set[int] = set(int(i) for i in extra)
    for m in models:
        ids |= set(m.eos_ids)
    return frozenset(ids)


def read_caches(
    reader: Model,
    items: Sequence[tuple[History, Request]],
    max_new_tokens: int = 40,
    stop_ids: Iterable[int] | None = None,
    check: bool = True,
) -> list[Generation]:
    """Greedy answers of ``reader`` to every (history, request), one batch; histories may come from any writer.

    Args:
        reader: the checkpoint whose weights decode.
        items: (history, request) pairs; a history prefilled by another checkpoint is read
            as that checkpoint wrote it (its K/V, positions and recurrent states).
        max_new_tokens: answer budget.
        stop_ids: ids that end an answer; default the union of the reader's and every
            writer's EOS sets.
        check: check every foreign history's layout and tokenization first
            (:func:`~studies.cross_checkpoint.checks.check_history_readable`).

    Raises:
        RuntimeError: if a history's cache changed during the read (never expected).
    """
    histories = list({id(h): h for h, _ in items}.values())
    if check:
        for h in histories:
            check_history_readable(h, reader)
    stop = frozenset(stop_ids) if stop_ids is not None else union_stop_ids(reader, *{h.model for h in histories})
    answers = decoding.answer(with_stop_ids(reader, stop), items, max_new_tokens=max_new_tokens, cross_checkpoint=True)
    for h in histories:
        if not h.check_digest():
            raise RuntimeError(f"the cache of a history written by {h.model.name!r} changed during a read by "
                               f"{reader.name!r}")
    return [a.generation for a in answers]


def cross_read(
    writer_history: History,
    reader_model: Model,
    question: str | Sequence[str],
    access: Condition | Mapping[str, Condition] | None = None,
    max_new_tokens: int = 40,
    stop_ids: Iterable[int] | None = None,
) -> Generation | dict[str, Generation] | dict[str, list[Generation]]:
    """``reader_model`` answers from a copy of ``writer_history``'s cache; return shapes as ``Model.generate``.

    The writer's cache (its :class:`~kvprobe.rows.RowState`) is forked into the
    reader's batch, the question suffix is appended and decoded greedily with the
    reader's weights, stopping on ``stop_ids`` (default: the union of both models'
    EOS sets). With ``reader_model is writer_history.model`` and equal EOS sets this
    is exactly ``reader_model.generate(writer_history, question, access, max_new_tokens)``.
    The writer's cache digest is checked afterwards.
    """
    conditions = {"full": Full()} if access is None else {access.name: access} if isinstance(access, Condition) \
        else dict(access)
    questions = [question] if isinstance(question, str) else list(question)
    requests = [Request(q, a) for a in conditions.values() for q in questions]
    outs = read_caches(reader_model, [(writer_history, r) for r in requests], max_new_tokens,
                       stop_ids=stop_ids)
    per = {name: outs[i * len(questions):(i + 1) * len(questions)] for i, name in enumerate(conditions)}
    if isinstance(question, str):
        if access is None or isinstance(access, Condition):
            return per[next(iter(conditions))][0]
        return {k: v[0] for k, v in per.items()}
    return per


# ----------------------------------------------------------------------------- checks


def _hidden_positions(access: Condition | None, history_len: int, device: torch.device) -> torch.Tensor | None:
    """Bool[T] positions hidden in every attention layer, or None (full access); refuse other conditions."""
    if access is None or type(access) is Full:
        return None
    if isinstance(access, Mask) and access.layers is None:
        return access.hidden_positions(history_len, device)
    raise ValueError(f"condition {access.name!r}: references cover full access and masks of every attention layer")


@dataclass(frozen=True)
class FirstToken:
    """The reader's greedy first token of a plain uncached forward, and how decisive it is."""

    token: int
    gap: float  # top-1 minus top-2 logit


def full_forward_first_token(reader: Model, history: History, question: str, access: Condition | None = None
                             ) -> FirstToken:
    """First greedy token of one plain transformers forward of ``reader`` over history + question (no cache).

    Full access passes no mask (transformers builds its native causal / sliding masks);
    a mask becomes an explicit 4-D mask hiding its positions from the question rows.
    """
    suffix = decoding.suffix_ids(reader, history, question)
    hidden = _hidden_positions(access, len(history), history.device)
    logits = reference_logits(reader, history.input_ids.tolist(), suffix, hidden=hidden, explicit_mask=False)
    top = torch.topk(logits[-1].float(), 2)
    return FirstToken(int(top.indices[0]), float(top.values[0] - top.values[1]))


def first_token_agrees(cached_first: int, reference: FirstToken, tie_gap: float = TIE_GAP) -> str:
    """``"pass"`` (same token), ``"tie"`` (different, but the reference's top two are within ``tie_gap``) or ``"fail"``."""
    if cached_first == reference.token:
        return "pass"
    return "tie" if reference.gap < tie_gap else "fail"


def verify_cross_read(writer_history: History, reader: Model, question: str,
                      access: Condition | None = None) -> float:
    """Max |logit difference| of the reader's traced cached read of the writer's cache vs a plain forward.

    The reference runs transformers' own eager attention on a plain copy of the writer's
    cache with an explicit 4-D mask (``kvprobe.reference.cached_explicit_logits``): the
    no-op check under full access, the intervention check under a mask. Compare with
    :data:`LOGIT_TOLERANCE`.
    """
    check_history_readable(writer_history, reader)
    access = access or Full()
    hidden = _hidden_positions(access, len(writer_history), writer_history.device)
    traced = decoding.question_logits(reader, writer_history, question, [access],
                                      cross_checkpoint=True).logits[0].float()
    suffix = decoding.suffix_ids(reader, writer_history, question)
    ref = cached_explicit_logits(reader, writer_history.base_state(), suffix, hidden=hidden).float()
    if not writer_history.check_digest():
        raise RuntimeError("the writer's cache changed during verification")
    return float((traced - ref).abs().max())


def reference_cross_generate(writer_history: History, reader: Model, question: str,
                             access: Condition | None = None, max_new_tokens: int = 20,
                             stop_ids: Iterable[int] | None = None) -> list[int]:
    """Brute-force greedy tokens: plain transformers forwards of ``reader`` on a ``DynamicCache`` rebuilt
    from ``writer_history.kv``, with an explicit 4-D mask hiding the condition's positions at every step.

    No nnsight, no kvprobe engine, transformers' eager attention. Attention-only models whose
    every layer stores its own rows (no recurrent or KV-sharing layers).
    """
    arch = reader.arch
    if arch.recurrent_layers or arch.shared_layers:
        raise ValueError("reference_cross_generate covers attention-only models whose layers store their own rows")
    stop = union_stop_ids(reader, writer_history.model) if stop_ids is None else frozenset(stop_ids)
    T = len(writer_history)
    device = reader.device
    hidden = _hidden_positions(access, T, device)
    if hidden is None:
        hidden = torch.zeros(T, dtype=torch.bool, device=device)
    cache = DynamicCache(ddp_cache_data=[(k.clone(), v.clone()) for k, v in writer_history.kv])
    feed = decoding.suffix_ids(reader, writer_history, question)
    out: list[int] = []
    start = T
    with torch.inference_mode(), transformers_eager(reader):
        for _ in range(max_new_tokens):
            n = len(feed)
            mask = explicit_cached_mask(reader, T, start, n, hidden)
            logits = reader.hf(input_ids=torch.tensor([feed], device=device), attention_mask=mask,
                               position_ids=torch.arange(start, start + n, device=device)[None], use_cache=True,
                               **cache_argument(reader.hf, cache)).logits
            tok = int(logits[0, -1].argmax())
            out.append(tok)
            if tok in stop:
                break
            start += n
            feed = [tok]
    if not writer_history.check_digest():
        raise RuntimeError("the writer's cache changed during the reference")
    return out


# ----------------------------------------------------------------------------- answers

_FENCE = re.compile(r"\A```[A-Za-z]*[ \t]*\n?(?P<body>.*?)\s*```\Z", re.DOTALL)


def answer_content(text: str) -> str:
    """What an answer says, for the Changed count: one outer code fence and JSON whitespace removed.

    The stripped text loses one outer fence (```` ``` ```` or ```` ```json ````); if what
    remains is one JSON value it is re-serialized compactly (key order kept), so
    ``{"answer": "5 h"}`` and ``{ "answer":"5 h" }`` compare equal. Anything else is
    compared as its stripped text.
    """
    s = text.strip()
    m = _FENCE.fullmatch(s)
    if m:
        s = m.group("body").strip()
    try:
        value, end = PLAIN_DECODER.raw_decode(s)
    except json.JSONDecodeError:
        return s
    if s[end:].strip():
        return s
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def is_invalid(text: str, stop_reason: str) -> bool:
    """Invalid (paper): the answer hit the token cap or is not exactly one string ``answer`` JSON field
    (one optional outer code fence)."""
    return stop_reason != "eos" or not parse_strict(text, allow_fence=True).ok


__all__ = ["FirstToken", "LOGIT_TOLERANCE", "answer_content", "cross_read", "first_token_agrees",
           "full_forward_first_token", "is_invalid", "read_caches", "reference_cross_generate",
           "union_stop_ids", "verify_cross_read", "with_stop_ids"]
