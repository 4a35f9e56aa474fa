"""Open, create and read a feature store; add groups of your own record pairs to it.

``FeatureStore(path)`` opens a store (schema: :mod:`kvprobe.extract.schema`),
``FeatureStore.create(path)`` makes an empty one, and ``store.add(model, pairs,
name=...)`` encodes a list of :class:`~kvprobe.extract.pairs.Pair` into group
``{model}/{name}`` through the same path as ``kvprobe extract`` (same schema,
provenance included). ``store[name]`` is a :class:`StoreGroup`, a lazy view with
named accessors::

    g.keys(layer), g.values(layer)   float32 [n_pairs, kv_heads, head_dim]
    g.hidden(layer)                  float32 [n_pairs, d_model]
    g.labels, g.groups, g.splits     one entry per pair
    g.provenance                     the model, tokenizer, versions, data digest, config...

Example:
    >>> import kvprobe, tempfile, os
    >>> from kvprobe.extract import FeatureStore, Pair
    >>> m = kvprobe.load_model("tiny-llama")
    >>> pairs = [Pair("The office is in Lisbon.", "Update: the office is now in Porto.", 1),
    ...          Pair("The office is in Lisbon.", "Reminder: the office is in Lisbon.", 0)]
    >>> with FeatureStore.create(os.path.join(tempfile.mkdtemp(), "mine.h5")) as store:
    ...     g = store.add(m, pairs, name="offices")
    ...     g.name, g.keys(1).shape, g.hidden(-1).shape, g.labels.tolist()
    ('tiny-llama/offices', (2, 2, 16), (2, 64), [1, 0])
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator, Sequence

import h5py
import numpy as np

from .capture import Edit
from .pairs import PAIR_LABEL, Pair, check_spans, pair_cases
from .pipeline import extract
from .schema import CASE_FIELDS, READABLE_SCHEMAS, SCHEMA_VERSION, StoreError, check_writable, model_key

if TYPE_CHECKING:
    from kvprobe.model import Model

#: ``FeatureStore.add`` group names (stored as ``{model}/{name}``).
GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: Which record of a pair a named accessor reads: A alone, B alone, or B read after A (the joint record).
RECORDS = {"a": "record_a", "b": "record_b", "ab": "record_ab"}
#: Group attributes stored as JSON (decoded by ``StoreGroup.provenance``).
JSON_ATTRS = ("cache_notes", "config", "dataset_info", "edit", "kv_layers", "layer_types", "layers", "rope", "versions")


class GroupProvenance(dict):
    """A group's provenance attributes (JSON ones decoded), and, called with a record index, that
    record's row provenance (:meth:`StoreGroup.record_provenance`).

    Example:
        >>> p = GroupProvenance({"model": "tiny-llama"}, rows=lambda r: {"span": "B"})
        >>> p["model"], p(0)["span"]
        ('tiny-llama', 'B')
    """

    def __init__(self, attrs: dict[str, Any], rows: Callable[[int], dict[str, Any]]):
        super().__init__(attrs)
        self._rows = rows

    def __call__(self, record: int) -> dict[str, Any]:
        return self._rows(record)


@dataclass
class StoreGroup:
    """Lazy view of one ``/{model}/{dataset}`` group (arrays are read on demand).

    One entry per case (a pair, or a recognition case) in ``labels``, ``groups``,
    ``splits`` and the pooled accessors :meth:`keys`, :meth:`values`, :meth:`hidden`.

    Example:
        >>> with FeatureStore("runs/recognition.h5") as s:  # doctest: +SKIP
        ...     g = s["smollm2-135m-instruct/records@compact"]
        ...     g.edit["action"], g.provenance(g.cases()["record_ab"][0])["rerotated_by"]
        ('re-rotated', [-23])
    """

    group: h5py.Group
    name: str = ""
    _cases: dict[str, np.ndarray] | None = field(default=None, repr=False)
    schema: int = SCHEMA_VERSION
    path: str = ""

    def __repr__(self) -> str:
        return f"StoreGroup({self.name!r}, {len(self)} cases, store {self.path!r})"

    def __len__(self) -> int:
        return int(self.group["cases/case_id"].shape[0])

    @property
    def attrs(self) -> dict[str, Any]:
        return dict(self.group.attrs)

    def _require_provenance(self, what: str) -> None:
        if self.schema < 2:
            raise StoreError(f"{self.path}: group {self.name} has no {what}: the store is of schema version "
                             f"{self.schema} (provenance arrived in version 2); extract again into a new store")

    @property
    def edit(self) -> dict[str, str] | None:
        """The cache operation of an edited group (``{name, condition, action}``), ``None`` for original caches."""
        return json.loads(self.group.attrs["edit"]) if "edit" in self.group.attrs else None

    def layer_info(self) -> list[dict[str, Any]]:
        """Per decoder layer: type, window, cache, the layer whose rows it reads, RoPE (the ``layers`` attribute)."""
        self._require_provenance("layer provenance")
        return json.loads(self.group.attrs["layers"])

    @property
    def provenance(self) -> GroupProvenance:
        """Where the group comes from: model name, source and ``weight_hash``, tokenizer and its SHA-256,
        package ``versions``, ``dataset`` and ``dataset_hash``, ``config``, ``edit``, layer and RoPE
        attributes (JSON ones decoded). Called with a record index, as ``g.provenance(record)``, it gives
        that record's row provenance (:meth:`record_provenance`).

        Example:
            >>> g.provenance["weight_hash"], g.provenance["config"]["dtype"]  # doctest: +SKIP
            ('9c1f...', 'float16')
        """
        attrs = {k: (json.loads(v) if k in JSON_ATTRS and isinstance(v, str) else v)
                 for k, v in self.group.attrs.items()}
        attrs = {k: (v.item() if isinstance(v, np.generic) else v) for k, v in attrs.items()}
        return GroupProvenance(attrs, self.record_provenance)

    def record_provenance(self, record: int) -> dict[str, Any]:
        """Where the stored rows of ``record`` come from: its span label, per token the original and
        current RoPE position and ``rerotated_by`` (current minus original when the keys were rotated in
        place, else 0), and its edit entries."""
        self._require_provenance("row provenance")
        r = self.group["records"]
        start, n = int(r["token_ids_offset"][record]), int(r["n_tokens"][record])
        edits = json.loads(r["edits"].asstr()[record])
        original = r["position"][start : start + n].astype(np.int64)
        current = r["rope_position"][start : start + n].astype(np.int64)
        rotated = any(e["action"] == "re-rotated" for e in edits)
        return {"span": r["span"].asstr()[record], "position": original, "rope_position": current,
                "rerotated_by": (current - original) if rotated else np.zeros(n, dtype=np.int64), "edits": edits}

    @property
    def config(self) -> dict[str, Any]:
        return json.loads(self.group.attrs["config"])

    @property
    def kv_layers(self) -> list[int]:
        return json.loads(self.group.attrs["kv_layers"])

    @property
    def layer_types(self) -> list[str]:
        return json.loads(self.group.attrs["layer_types"])

    def layers(self, kind: str) -> list[int]:
        """Layers with pooled features of ``kind`` (K, V or H)."""
        if f"records/pooled/{kind}" not in self.group:
            return []
        return sorted(int(k[1:]) for k in self.group[f"records/pooled/{kind}"])

    def cases(self) -> dict[str, np.ndarray]:
        """Case fields (strings decoded), labels as ``label:NAME``, scores as ``score:NAME``, record rows."""
        if self._cases is None:
            c = self.group["cases"]
            out: dict[str, np.ndarray] = {n: c[n].asstr()[()] for n in CASE_FIELDS}
            out.update({f"label:{n}": c["labels"][n][()] for n in c["labels"]})
            out.update({n: c[n][()] for n in ("record_a", "record_b", "record_ab")})
            out.update({f"score:{n}": c["scores"][n][()] for n in c.get("scores", {})})
            self._cases = out
        return self._cases

    # ------------------------------------------------------------------ named accessors, one row per case

    @property
    def labels(self) -> np.ndarray:
        """Int [n_cases]: 1 if B replaces A, else 0 (``cases/labels/replacement``; a :class:`Pair`'s label).

        Other labels (the role pairs' ``matching``) are in :meth:`cases` as ``label:NAME``.
        """
        cases = self.cases()
        if f"label:{PAIR_LABEL}" not in cases:
            found = sorted(k.partition(":")[2] for k in cases if k.startswith("label:"))
            raise StoreError(f"{self.name}: no {PAIR_LABEL} labels (it has {found}); read them from cases()")
        return cases[f"label:{PAIR_LABEL}"].astype(np.int64)

    @property
    def groups(self) -> np.ndarray:
        """Str [n_cases]: each case's resampling group (a :class:`Pair`'s ``group``, its case id if none)."""
        return self.cases()["group"]

    @property
    def splits(self) -> np.ndarray:
        """Str [n_cases]: each case's split name (``""`` for a :class:`Pair` without one)."""
        return self.cases()["split"]

    def keys(self, layer: int, record: str = "ab") -> np.ndarray:
        """Keys of ``layer`` as cached (post-RoPE), averaged over each case's record tokens:
        float32 [n_cases, kv_heads, head_dim].

        Pooling: the token mean over the record's own span (BOS and separator excluded), as
        every readout uses them. ``record``: ``"ab"`` B read after A (the joint record the
        probes read; default), ``"a"`` A alone, ``"b"`` B alone (what d_V compares). ``layer``:
        a decoder layer index (negative counts from the last layer); layers without K/V rows
        (recurrent, KV-sharing) raise :class:`StoreError` naming those that have them.

        Example:
            >>> g.keys(1).shape, g.keys(1, record="a").shape  # doctest: +SKIP
            ((8, 2, 16), (8, 2, 16))
        """
        return self._pooled_rows("K", layer, record)

    def values(self, layer: int, record: str = "ab") -> np.ndarray:
        """Values of ``layer`` as cached, token-mean pooled like :meth:`keys`: float32 [n_cases, kv_heads, head_dim]."""
        return self._pooled_rows("V", layer, record)

    def hidden(self, layer: int, record: str = "ab") -> np.ndarray:
        """Output of decoder layer ``layer`` (the residual stream after it), token-mean pooled like
        :meth:`keys`: float32 [n_cases, d_model]. Edited groups hold no hidden states."""
        return self._pooled_rows("H", layer, record)

    def _pooled_rows(self, kind: str, layer: int, record: str) -> np.ndarray:
        if record not in RECORDS:
            raise StoreError(f"record {record!r}: one of {sorted(RECORDS)} (A alone, B alone, B read after A)")
        n_layers = len(self.layer_types)
        index = layer + n_layers if layer < 0 else layer
        available = self.layers(kind)
        if index not in available:
            what = {"K": "keys", "V": "values", "H": "hidden states"}[kind]
            raise StoreError(f"{self.name}: no {what} of layer {layer} (of {n_layers}); layers with {what}: "
                             f"{available}")
        rows = self.cases()[RECORDS[record]]
        if (rows < 0).any():
            raise StoreError(f"{self.name} is an edited group: it holds B read after A only (record='ab'), "
                             f"not record {record!r}")
        return self.pooled(kind, index, rows)

    # ------------------------------------------------------------------ record-level reads

    def pooled(self, kind: str, layer: int, records: np.ndarray | None = None) -> np.ndarray:
        """Pooled features of records (rows of ``records/``) [records, heads, dim] (H: [records, d_model]), float32."""
        d = self.group[f"records/pooled/{kind}/L{layer:03d}"]
        if records is None:
            return d[()].astype(np.float32)
        order = np.argsort(records)
        unique, inverse = np.unique(np.asarray(records)[order], return_inverse=True)
        rows = d[unique].astype(np.float32)  # h5py fancy indexing needs increasing indices
        out = np.empty((len(records), *rows.shape[1:]), dtype=np.float32)
        out[order] = rows[inverse]
        return out

    def tokens(self, kind: str, layer: int, record: int) -> np.ndarray:
        """Token-level features of one record, [heads, n, dim] for K/V, [n, d_model] for H."""
        if f"records/tokens/{kind}" not in self.group:
            raise StoreError(f"{self.name}: no token-level {kind} in this store (extract with token_level)")
        start = int(self.group["records/token_offset"][record])
        n = int(self.group["records/token_rows"][record])
        if n == 0:
            raise StoreError(f"{self.name}: record {record} has no token-level rows (only single records do)")
        rows = self.group[f"records/tokens/{kind}/L{layer:03d}"][start : start + n].astype(np.float32)
        return rows.transpose(1, 0, 2) if kind in ("K", "V") else rows

    def token_ids(self, record: int) -> np.ndarray:
        start = int(self.group["records/token_ids_offset"][record])
        n = int(self.group["records/n_tokens"][record])
        return self.group["records/token_ids"][start : start + n]

    def texts(self) -> np.ndarray:
        return self.group["records/text"].asstr()[()]


class FeatureStore:
    """A feature store file: ``FeatureStore(path)`` opens one, :meth:`create` makes an empty one,
    :meth:`add` encodes your own pairs into it, ``store[name]`` reads a group.

    Example:
        >>> with FeatureStore("runs/recognition.h5") as s:  # doctest: +SKIP
        ...     g = s["smollm2-135m-instruct/records"]
    """

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self._stale: list[h5py.File] = []  # earlier handles: views read before an add stay readable
        self.file = self._open()
        self.schema = int(self.file.attrs["kvprobe_store_schema"])

    def _open(self) -> h5py.File:
        if not self.path.exists():
            raise StoreError(f"no feature store at {self.path} (FeatureStore.create(path) makes one)")
        try:
            f = h5py.File(self.path, "r")
        except OSError as err:
            raise StoreError(f"{self.path} is not a readable HDF5 file: {err}") from err
        version = f.attrs.get("kvprobe_store_schema")
        if version is None or int(version) not in READABLE_SCHEMAS:
            f.close()
            found = "no kvprobe_store_schema attribute" if version is None else f"schema version {int(version)}"
            raise StoreError(f"{self.path} has {found}; this kvprobe reads feature stores of schema versions "
                             f"{list(READABLE_SCHEMAS)}")
        return f

    @classmethod
    def create(cls, path: Path | str, exist_ok: bool = False) -> "FeatureStore":
        """Make an empty store at ``path`` (its folder too) and open it; ``exist_ok``: open a store already there.

        Example:
            >>> with FeatureStore.create("runs/mine.h5") as store:  # doctest: +SKIP
            ...     store.groups()
            []
        """
        path = Path(path)
        if path.exists():
            if not exist_ok:
                raise StoreError(f"{path} already exists; open it with FeatureStore(path), or pass exist_ok=True")
            check_writable(path)
            return cls(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with h5py.File(tmp, "w") as f:
            f.attrs["kvprobe_store_schema"] = SCHEMA_VERSION
        os.replace(tmp, path)
        return cls(path)

    def add(self, model: "Model", pairs: Iterable[Pair], name: str, edit: Edit | None = None, *,
            batch_size: int = 16, dtype: str = "float16", token_level: Sequence[str] = ("K",),
            overwrite: bool = False, progress: bool = False) -> StoreGroup:
        """Encode ``pairs`` with ``model`` into group ``{model}/{name}`` and return it.

        Every pair is encoded as ``kvprobe extract`` encodes a recognition case (same
        batches, same arrays): A alone and B alone from position 0, and B read after A.
        Per record and layer the group holds K exactly as cached (post-RoPE), V, and the
        decoder-layer outputs (hidden states), token-mean pooled, plus the token-level K
        of the records alone (``token_level``), with the full provenance of the schema.

        ``edit``: B's rows read after this cache operation instead (group
        ``{model}/{name}@{edit.name}``; B after A only, K and V, no hidden states), e.g.
        ``kvprobe.studies.recognition.edits.record_edit("compact")``.
        ``overwrite``: replace a group of that name (else :class:`StoreError`).

        Nothing is left behind by a failed add: bad pairs, names and options raise before
        any forward (:class:`~kvprobe.extract.pairs.PairError` for a record without a token
        span of its own), and an exception or interruption while encoding or writing leaves
        the store file as it was, without a partial group or a ``.parts`` folder.

        Example:
            >>> g = store.add(m, pairs, name="offices")  # doctest: +SKIP
            >>> g.values(0).shape                         # doctest: +SKIP
            (2, 2, 16)
        """
        if not isinstance(name, str) or not GROUP_NAME.fullmatch(name):
            raise StoreError(f"group name {name!r}: letters, digits, '.', '_' and '-' (it is stored as MODEL/NAME)")
        if edit is not None and not isinstance(edit, Edit):
            raise StoreError(f"edit must be a kvprobe.extract.capture.Edit, got {type(edit).__name__}")
        pairs = pairs if isinstance(pairs, (str, bytes, Pair)) else list(pairs)  # a generator is read once
        cases = pair_cases(pairs)
        check_writable(self.path)
        group = f"{model_key(model.name)}/{name}" + (f"@{edit.name}" if edit is not None else "")
        if group in self.file and not overwrite:
            raise StoreError(f"{self.path} already holds {group}; pass overwrite=True to replace it")
        check_spans(model, pairs)
        info = {"source": "FeatureStore.add", "n_pairs": len(cases),
                "label": f"{PAIR_LABEL}: 1 if B replaces A, else 0"}
        extract(model, name, cases, self.path, batch_size=batch_size, dtype=dtype, token_level=token_level,
                overwrite=overwrite, progress=progress, dataset_info=info, edit=edit, resume=False)
        self._stale.append(self.file)
        self.file = self._open()
        return self[group]

    def __enter__(self) -> "FeatureStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FeatureStore({str(self.path)!r}, groups={self.groups()})"

    def close(self) -> None:
        for f in [*self._stale, self.file]:
            f.close()
        self._stale = []

    def groups(self) -> list[str]:
        """``model/dataset`` names of every group in the store."""
        return [f"{m}/{d}" for m in self.file for d in self.file[m] if isinstance(self.file[m][d], h5py.Group)]

    def __iter__(self) -> Iterator[str]:
        return iter(self.groups())

    def __contains__(self, name: str) -> bool:
        return name in self.file

    def __getitem__(self, name: str) -> StoreGroup:
        """The group ``model/dataset``; a bare ``dataset`` name when one model holds it."""
        if name not in self.file and "/" not in name:
            matches = [g for g in self.groups() if g.partition("/")[2] == name]
            if len(matches) > 1:
                raise StoreError(f"{self.path}: {len(matches)} models hold {name!r} ({matches}); name one")
            name = matches[0] if matches else name
        if name not in self.file or not isinstance(self.file[name], h5py.Group) or "cases" not in self.file[name]:
            raise StoreError(f"{self.path} has no group {name!r}; it has {self.groups()}")
        return StoreGroup(self.file[name], name, schema=self.schema, path=str(self.path))

    def edited(self, name: str) -> dict[str, StoreGroup]:
        """The edited groups of original group ``name`` (``name@EDIT``), by edit name, in store order."""
        base = self[name]
        if base.edit is not None:
            raise StoreError(f"{self.path}: {name} is itself an edited group ({base.edit['name']})")
        return {g.rpartition("@")[2]: self[g] for g in self.groups() if g.startswith(f"{base.name}@")}
