"""The feature store's schema: one HDF5 file, a group per (model, dataset), readable with plain h5py.

Schema (version 2; the file attribute ``kvprobe_store_schema`` holds the version)::

    /{model}/{dataset}/                      attrs: provenance (below), config (JSON)
    /{model}/{dataset}@{edit}/               the same records read after a cache edit (below)
        cases/case_id, group, split, family, variant, pattern     [n_cases] str
        cases/labels/{name}                  [n_cases] int8 (e.g. replacement, matching; -1 = undefined)
        cases/record_a, record_b, record_ab  [n_cases] int32: rows of records/ for A alone,
                                             B alone, and B read after A (joint); -1 in edited
                                             groups for A and B alone (they hold joint records only)
        cases/scores/{name}                  [n_cases] float64: per-case scores computed with the
                                             model (e.g. signed_loo), when requested
        records/kind                         [n_records] str: "single" | "joint"
        records/key                          [n_records] str: SHA-256 of (kind, A, text)
        records/text                         [n_records] str: the record (joint: B)
        records/span                         [n_records] str: the segment whose tokens are stored
                                             ("R": a record alone, "B": B read after "A")
        records/edits                        [n_records] str: JSON list of what was done to the
                                             record's rows, oldest first ("[]": nothing); each entry
                                             {name, condition, action, source_tokens, position_shift,
                                             rerotated_by}, action one of rebuilt | re-rotated |
                                             recomputed | zeroed | kept
        records/n_tokens                     [n_records] int32: tokens of the record's span
        records/sequence_length              [n_records] int32: tokens of the encoded sequence
        records/token_ids                    [sum n_tokens] int32, record r at token_ids_offset[r]
        records/token_ids_offset             [n_records] int64
        records/token_record                 [sum n_tokens] int32: the record of each token
        records/position                     [sum n_tokens] int32: the token's original position in
                                             its unedited encoded sequence
        records/rope_position                [sum n_tokens] int32: the RoPE position its stored key
                                             carries now (= position unless an edit moved it)
        records/token_rows, token_offset     [n_records]: rows of a record in the token tables
                                             (single records only; 0 rows for joint ones); the token
                                             table row token_offset[r] + i is token i of record r
        records/pooled/{K,V,H}/L{layer:03d}  [n_records, heads, dim] (H: [n_records, d_model]):
                                             token means over the record's span, float32 math
        records/tokens/{K,...}/L{layer:03d}  [sum token_rows, heads, dim]: token-level features
                                             of single records (K by default: the key similarity
                                             needs them)

Every dataset is chunked, gzip-compressed (level 4, with shuffle) and resizable
along its first axis; features are float16 by default. Group attributes record
the provenance: model name, source and weight hash, tokenizer name and hash,
package versions, dataset name, seed and hash, layer types, which layers hold
rows (``kv_layers``), the cache note of each layer kind, and, for a reader
without kvprobe:

* ``key_rope``: ``"post-RoPE"``: stored keys are rotated (and QK-normed where the
  model has a QK norm), exactly as transformers caches them;
* ``rope`` (JSON): the RoPE parameters per layer type as the config states them
  (``rope_theta``, ``rope_type``, scaling factors, ``partial_rotary_factor``...);
* ``layers`` (JSON): one entry per decoder layer, ``{"layer", "type": "full" |
  "sliding" | "recurrent", "kind" (the config's name), "window", "cache": "own" |
  "shared" | "recurrent", "reads_layer", "rope": {"params", "rotary_dims", "layout",
  "tensor"}}`` (``reads_layer`` names the layer whose rows a shared-KV layer
  reads; rotary_dims are the leading dims of the cached tensor that rotate);
* ``edit`` (JSON): ``null`` for the original caches, else ``{name, condition,
  action}``: the cache operation (``kvprobe conditions`` name) applied to every
  joint record's history before B's rows were read. Records alone have nothing
  to edit: edited groups hold the joint records only, K and V only (no hidden
  states).

Schema 1 stores (no provenance datasets or attributes) are still read: readouts
work, and the provenance accessors raise :class:`StoreError` naming the file and
its version. New groups are never added to a store of another schema version.

Written by :mod:`kvprobe.extract.pipeline` (``extract``: the resumable extraction run); opened, read and
extended with your own pairs by :mod:`kvprobe.extract.store` (``FeatureStore``, ``StoreGroup``).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import h5py

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.model import Model

SCHEMA_VERSION = 2
#: Schema versions this module reads (older ones without the provenance of version 2).
READABLE_SCHEMAS = (1, 2)
#: How stored keys relate to RoPE (the ``key_rope`` group attribute).
KEY_ROPE = "post-RoPE"
COMPRESSION = dict(compression="gzip", compression_opts=4, shuffle=True)
CASE_FIELDS = ("case_id", "group", "split", "family", "variant", "pattern")
FEATURE_KINDS = ("K", "V", "H")
STR = h5py.string_dtype("utf-8")


class StoreError(ValueError):
    """A store, group or extraction that cannot be used as asked (the message names it)."""



def model_key(name: str) -> str:
    """A group name for a model (its registry or Hub name, path separators replaced)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "model"



def model_provenance(model: "Model") -> dict[str, Any]:
    """The group attributes that describe the model (computed where the model is loaded: a Ray worker's
    extraction writes the same attributes as a local one)."""
    arch = model.arch
    tok = model.tokenizer
    tok_blob = tok.backend_tokenizer.to_str() if hasattr(tok, "backend_tokenizer") else repr(tok)
    return {
        "model": model.name,
        "model_source": model.source,
        "weight_hash": model.weight_hash,
        "tokenizer": str(getattr(tok, "name_or_path", "")),
        "tokenizer_sha256": hashlib.sha256(tok_blob.encode("utf-8")).hexdigest(),
        "layer_types": json.dumps(list(arch.layer_types)),
        "kv_layers": json.dumps(list(arch.kv_layers)),
        "cache_notes": json.dumps(sorted({s.cache_note for s in arch.layers if s.key_shape})),
        **arch_provenance(arch),
    }


#: ``layers`` attribute: the short layer type of each ``LayerSpec.cache``/``kind``.
_LAYER_TYPE = {"full_attention": "full", "sliding_attention": "sliding"}


def arch_provenance(arch: "ArchSummary") -> dict[str, str]:
    """The group attributes that let a reader without kvprobe interpret stored keys: ``key_rope``,
    ``rope`` (per layer type, as the config states it) and ``layers`` (one entry per decoder layer).

    Example:
        >>> import kvprobe
        >>> attrs = arch_provenance(kvprobe.load_model("tiny-gemma3").arch)
        >>> [(l["type"], l["window"]) for l in json.loads(attrs["layers"])][:3]
        [('sliding', 16), ('sliding', 16), ('full', None)]
    """
    layers = []
    for i, spec in enumerate(arch.layers):
        kind = _LAYER_TYPE.get(spec.kind, "recurrent" if spec.cache == "recurrent" else spec.kind)
        rope = None
        if spec.cache != "recurrent":
            rope = {"params": arch.rope.get(spec.kind, {}), "rotary_dims": spec.rope_dims, "layout": spec.rope_layout,
                    "tensor": ("K", "V")[spec.rope_tensor]}
        layers.append({"layer": i, "type": kind, "kind": spec.kind, "window": spec.window, "cache": spec.cache,
                       "reads_layer": spec.kv_layer, "rope": rope})
    return {"key_rope": KEY_ROPE, "rope": json.dumps(arch.rope, sort_keys=True, default=str),
            "layers": json.dumps(layers, default=str)}


def store_schema(path: Path | str) -> int | None:
    """The schema version of an existing store file (``None``: no store there, or not a kvprobe store)."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        with h5py.File(path, "r") as f:
            version = f.attrs.get("kvprobe_store_schema")
    except OSError as err:
        raise StoreError(f"{path} is not a readable HDF5 file: {err}") from err
    return None if version is None else int(version)


def check_writable(path: Path | str) -> None:
    """Raise :class:`StoreError` if a group cannot be added to the store at ``path`` (another schema
    version; the message names the file and the version). Cheap: call it before loading a model."""
    version = store_schema(path)
    if Path(path).exists() and version != SCHEMA_VERSION:
        raise StoreError(f"{path} is a feature store of schema version {version}; this kvprobe writes version "
                         f"{SCHEMA_VERSION} (row provenance, RoPE and layer attributes) and does not mix "
                         "versions in one file: write to a new store (its readouts still work)")
