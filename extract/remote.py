"""Record features through plain nnsight traces: the path for models too large to load here (NDIF).

kvprobe's engine installs its own attention function and slot cache in the
process that holds the weights, so its interventions (masks, zeroing, selection,
rebuilds) need the model in a process kvprobe controls: locally, or a Ray worker
on a GPU machine (``--backend ray --device auto``). Reading features does not:
:class:`NnsightEncoder` encodes each record in one ordinary nnsight trace of the
unmodified model and saves

* every decoder layer's output (the residual stream after layer l), and
* every layer's K and V from the ``DynamicCache`` the forward returns (post-RoPE
  keys, exactly as a later token would read them),

for the record's tokens. With ``remote=True`` the trace runs on NDIF (the
National Deep Inference Facility), which hosts large open models, and only the
saved tensors come back; with ``remote=False`` the same code runs on a local
model, which is how it is tested (against kvprobe's own extraction).

Records run one per trace, unpadded (padding would need kvprobe's masks), so
results do not depend on batching. Only the model's standard attention layers
are read: hybrid models (recurrent layers) and models whose cache is not
per-layer K/V are refused. The signed leave-one-out score needs the engine and
is not available on this path.
"""

from __future__ import annotations

import warnings
from typing import Any, Sequence

import torch

from kvprobe.arch import arch_summary
from kvprobe.prompts import char_span_to_tokens
from kvprobe.transformers_api import output_cache

from .capture import JOINT_SEPARATOR, Encoding, RecordSpec
from .schema import arch_provenance


#: Layer kinds (transformers' ``config.layer_types``) whose cache holds per-token K/V.
ATTENTION_KINDS = ("full_attention", "sliding_attention", "chunked_attention")


class RemoteCaptureError(ValueError):
    """A model or record the nnsight path cannot capture (the message says why)."""


def language_model(model: Any, tokenizer: Any = None) -> Any:
    """An nnsight ``LanguageModel``: of a Hub id (loaded lazily; with ``remote=True`` the weights stay on
    NDIF) or of an already loaded transformers model and its tokenizer."""
    import nnsight

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nnsight 0.8 marks LanguageModel deprecated; NDIF still serves it
        if isinstance(model, str):
            return nnsight.LanguageModel(model)
        return nnsight.LanguageModel(model, tokenizer=tokenizer)


class NnsightEncoder:
    """Encode records with plain nnsight traces (``remote=True``: on NDIF).

    Args:
        lm: an nnsight ``LanguageModel`` (see :func:`language_model`) of a decoder whose layers are at
            ``lm.model.layers``.
        name: the model's name in the store (its Hub id).
        remote: run each trace on NDIF (needs ``NDIF_API_KEY``; see docs/scaling.md).
        separator: text between A and B in joint encodings (kvprobe's default).
    """

    def __init__(self, lm: Any, name: str, remote: bool = False, separator: str = JOINT_SEPARATOR) -> None:
        self.lm, self.name, self.remote, self.separator = lm, name, remote, separator
        config = lm.config if hasattr(lm, "config") else lm._model.config
        config = getattr(config, "text_config", config)
        self.num_layers = int(config.num_hidden_layers)
        types = getattr(config, "layer_types", None) or ["full_attention"] * self.num_layers
        recurrent = [t for t in types if t not in ATTENTION_KINDS]  # e.g. linear_attention (Gated DeltaNet)
        if recurrent:
            raise RemoteCaptureError(f"{name}: layers of kind {sorted(set(recurrent))} keep recurrent states, not "
                                     "K/V; the nnsight path reads attention caches only")
        self.layer_types = list(types)
        self.config = lm.config if hasattr(lm, "config") else lm._model.config

    def provenance(self) -> dict[str, Any]:
        """The store's model attributes for this path (weights are identified by name: NDIF does not
        expose a weight hash)."""
        import hashlib
        import json

        tok = self.lm.tokenizer
        blob = tok.backend_tokenizer.to_str() if hasattr(tok, "backend_tokenizer") else repr(tok)
        return {"model": self.name, "model_source": "nnsight-remote" if self.remote else "nnsight",
                "weight_hash": f"unhashed:{self.name}",
                "tokenizer": str(getattr(tok, "name_or_path", "")),
                "tokenizer_sha256": hashlib.sha256(blob.encode("utf-8")).hexdigest(),
                "layer_types": json.dumps(self.layer_types), "kv_layers": json.dumps(list(range(self.num_layers))),
                "cache_notes": json.dumps(["K after RoPE, V, from transformers' DynamicCache (plain nnsight trace)"]),
                **arch_provenance(arch_summary(self.config))}

    def __call__(self, specs: Sequence[RecordSpec]) -> list[Encoding]:
        return [self.encode_one(spec) for spec in specs]

    def encode_one(self, spec: RecordSpec) -> Encoding:
        """One record: its tokens' K, V (float32, [heads, n, dim]) and layer outputs ([n, d_model])."""
        prompt, segment = spec.prompt(self.separator)
        rendered, ids, offsets = prompt.tokenize(self.lm.tokenizer)
        start, end = rendered.segments[segment]
        span = char_span_to_tokens(offsets, rendered.history_text, start, end, label=segment)
        hidden: dict[int, Any] = {}
        keys: dict[int, Any] = {}
        values: dict[int, Any] = {}
        with torch.inference_mode(), self.lm.trace(ids[None], use_cache=True, remote=self.remote):
            for layer in range(self.num_layers):
                hidden[layer] = self.lm.model.layers[layer].output.save()
            cache = output_cache(self.lm.output)
            for layer in range(self.num_layers):
                keys[layer] = cache.layers[layer].keys.save()
                values[layer] = cache.layers[layer].values.save()
        cached = _tensor(keys[0]).shape[2]
        if cached != ids.shape[0]:
            raise RemoteCaptureError(f"{self.name}: the cache holds {cached} of {ids.shape[0]} positions (a sliding "
                                     "window shorter than the record?); the nnsight path needs every position")
        cols = slice(span.start, span.end)
        return Encoding(
            token_ids=ids[cols].numpy(),
            keys={l: _tensor(t)[0, :, cols].float().clone() for l, t in keys.items()},
            values={l: _tensor(t)[0, :, cols].float().clone() for l, t in values.items()},
            hidden={l: _tensor(t)[0, cols].float().clone() for l, t in hidden.items()},
            span=(span.start, span.end),
            sequence_length=int(ids.shape[0]),
            label=segment,
        )


def _tensor(saved: Any) -> torch.Tensor:
    """A saved value as a tensor (decoder layers of some transformers versions return tuples)."""
    value = getattr(saved, "value", saved)
    return value[0] if isinstance(value, tuple) else value
