"""Does a tokenizer belong to a model? The checks :class:`kvprobe.Model` makes before it wraps the pair.

A tokenizer of another model is refused (:class:`TokenizerMismatchError`) when

* it has more ids than the embedding has rows (ids that cannot be embedded), or far fewer: checkpoints pad
  the embedding past the tokenizer's ids (to a multiple of 64 or 128, or with reserved ids), by at most
  :data:`EMBEDDING_PADDING` rows or 1 % of the rows, whichever is larger (Qwen2.5: 151,665 ids, 151,936
  rows); or
* one of its special tokens (eos, bos, pad) has an id that the model's config and generation config name
  for another token of that kind (where both sides name one; an eos id passes when either config lists it).

Where only the names differ (both loaded by ``from_pretrained`` from different places), the pair is
accepted with a :class:`TokenizerMismatchWarning`.
"""

from __future__ import annotations

import warnings
from typing import Any

#: Rows an embedding may have beyond its tokenizer's ids (padding to a multiple, reserved ids).
EMBEDDING_PADDING = 1024

#: Special tokens compared with the model's configs.
SPECIAL_TOKENS = ("eos", "bos", "pad")


class TokenizerMismatchError(ValueError):
    """A tokenizer whose vocabulary size or special-token ids disagree with the model's embedding or config
    (a tokenizer of another model)."""


class TokenizerMismatchWarning(UserWarning):
    """A tokenizer and a model loaded from different places that agree on vocabulary size and special ids."""


def _ids(value: Any) -> set[int]:
    if value is None:
        return set()
    return {int(v) for v in (value if isinstance(value, (list, tuple)) else [value])}


def config_special_ids(hf: Any, kind: str) -> set[int]:
    """Ids the model's (text) config and generation config give the special token ``kind`` (eos, bos, pad)."""
    config = hf.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    ids = _ids(getattr(text, f"{kind}_token_id", None))
    generation = getattr(hf, "generation_config", None)
    return ids | _ids(getattr(generation, f"{kind}_token_id", None))


def check_tokenizer(hf: Any, tokenizer: Any, name: str = "") -> None:
    """Refuse ``tokenizer`` for transformers model ``hf`` (:class:`TokenizerMismatchError`, naming the model,
    the tokenizer and the mismatch) where it is another model's; warn where only their names differ."""
    model = name or getattr(hf.config, "_name_or_path", "") or type(hf).__name__
    tok = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    rows = hf.get_input_embeddings().num_embeddings
    vocab = getattr(hf.config.get_text_config() if hasattr(hf.config, "get_text_config") else hf.config,
                    "vocab_size", None)
    size = len(tokenizer)
    where = f"model {model!r}, tokenizer {tok!r}"
    if size > rows:
        raise TokenizerMismatchError(
            f"{where}: the tokenizer has {size} token ids but the embedding has {rows} rows, so ids "
            f"{rows}..{size - 1} cannot be embedded (a tokenizer of another model?)")
    slack = max(EMBEDDING_PADDING, rows // 100)
    if rows - size > slack:
        raise TokenizerMismatchError(
            f"{where}: the tokenizer has {size} token ids but the embedding has {rows} rows (config.vocab_size "
            f"{vocab}), more than padding ({slack} rows) explains: a tokenizer of another model? Load the "
            "tokenizer saved with the model (kvprobe.load_model loads both)")
    for kind in SPECIAL_TOKENS:
        tid = getattr(tokenizer, f"{kind}_token_id", None)
        expected = config_special_ids(hf, kind)
        if tid is None or not expected or int(tid) in expected:
            continue
        token = getattr(tokenizer, f"{kind}_token", None)
        raise TokenizerMismatchError(
            f"{where}: the tokenizer's {kind} token {token!r} has id {tid}, the model's config and generation "
            f"config give {kind} id(s) {sorted(expected)}: a tokenizer of another model? Load the tokenizer "
            "saved with the model, or set its special tokens to the model's")
    model_path = getattr(hf.config, "_name_or_path", "") or ""
    tok_path = getattr(tokenizer, "name_or_path", "") or ""
    if model_path and tok_path and model_path.rstrip("/") != tok_path.rstrip("/"):
        warnings.warn(f"model {model!r} was loaded from {model_path!r} and its tokenizer from {tok_path!r}; "
                      "their vocabulary size and special ids agree, but check they are the same tokenizer",
                      TokenizerMismatchWarning, stacklevel=3)
