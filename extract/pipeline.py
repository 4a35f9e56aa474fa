"""The extraction run: ``extract(model, dataset, cases, out)`` writes one ``/{model}/{dataset}`` group of a store.

Writing is resumable and crash-safe: records are encoded in a fixed partition
of batches, each batch written to its own shard file (written to a temporary
name, then renamed) under ``STORE.parts/``; a rerun skips finished shards. When
every shard exists the group is assembled into a copy of the store that
replaces the store by an atomic rename, so the store is always either the old
or the new complete file. A group already in the store is never overwritten
unless asked; asked (``overwrite``), the group's unfinished shards of an earlier
run are discarded too, so a changed configuration starts afresh. Groups added from
Python (``FeatureStore.add``) are not resumable: a failed or interrupted add removes
its shards and leaves the store as it was.

The schema it writes: :mod:`kvprobe.extract.schema`. Reading, and adding groups of your own pairs:
:mod:`kvprobe.extract.store` (``FeatureStore``, ``StoreGroup``).

With a Ray :class:`~kvprobe.workers.WorkerPool` the batches are encoded on
workers (batches dealt by the stable hashes of their first records' keys);
each returns its shard file's bytes, and the driver alone writes shards and
assembles the store, so resumption works the same (a run interrupted on Ray may
finish locally) and the group holds the same arrays.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Sequence

import h5py
import numpy as np

from kvprobe.files import versions

from .capture import JOINT_SEPARATOR, Edit, RecordSpec, encode
from .schema import (CASE_FIELDS, COMPRESSION, FEATURE_KINDS, SCHEMA_VERSION, STR, StoreError, check_writable,
                     model_key, model_provenance)

if TYPE_CHECKING:
    from kvprobe.model import Model
    from kvprobe.workers import WorkerPool

    from .remote import NnsightEncoder


@dataclass(frozen=True)
class ExtractConfig:
    """Everything that determines a group's content (stored as the ``config`` attribute)."""

    model: str
    weight_hash: str
    dataset: str
    dataset_hash: str
    n_cases: int
    batch_size: int = 16
    dtype: str = "float16"
    separator: str = JOINT_SEPARATOR
    token_level: tuple[str, ...] = ("K",)
    pooling: str = "token mean over the record's span (BOS and separator excluded)"
    hidden: str = "output of decoder layer l (residual stream after layer l)"
    schema_version: int = SCHEMA_VERSION
    edit: str = ""  # the cache operation applied to joint records (e.g. "rebuild:A"); "" = original caches

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)



def records_of(cases: Sequence[Any]) -> tuple[list[RecordSpec], np.ndarray]:
    """Unique encodings of the cases in first-seen order, and per case its [A, B, AB] record rows."""
    index: dict[str, int] = {}
    specs: list[RecordSpec] = []
    rows = np.zeros((len(cases), 3), dtype=np.int32)
    for c, case in enumerate(cases):
        for j, spec in enumerate((RecordSpec("single", case.a_text), RecordSpec("single", case.b_text),
                                  RecordSpec("joint", case.b_text, case.a_text))):
            if spec.key not in index:
                index[spec.key] = len(specs)
                specs.append(spec)
            rows[c, j] = index[spec.key]
    return specs, rows


def joint_records_only(specs: Sequence[RecordSpec], case_rows: np.ndarray) -> tuple[list[RecordSpec], np.ndarray]:
    """The joint records of :func:`records_of`'s output and the case rows renumbered for them (A alone and
    B alone: -1). An edited group holds only these: records alone have nothing to edit.

    Example:
        >>> specs = [RecordSpec("single", "a"), RecordSpec("single", "b"), RecordSpec("joint", "b", "a")]
        >>> joint_records_only(specs, np.array([[0, 1, 2]]))[1].tolist()
        [[-1, -1, 0]]
    """
    keep = [i for i, s in enumerate(specs) if s.kind == "joint"]
    new = np.full(len(specs), -1, dtype=np.int32)
    new[keep] = np.arange(len(keep), dtype=np.int32)
    rows = np.full_like(case_rows, -1)
    rows[:, 2] = new[case_rows[:, 2]]
    return [specs[i] for i in keep], rows


def dataset_hash_of(cases: Sequence[Any]) -> str:
    blob = json.dumps([c.to_json() for c in cases], sort_keys=True).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


# ------------------------------------------------------------------------------- writing


def extract(
    model: "Model | None",
    dataset: str,
    cases: Sequence[Any],
    out: Path | str,
    batch_size: int = 16,
    dtype: str = "float16",
    token_level: Sequence[str] = ("K",),
    overwrite: bool = False,
    progress: bool = True,
    dataset_info: dict[str, Any] | None = None,
    case_scores: dict[str, Callable[["Model"], np.ndarray]] | None = None,
    pool: "WorkerPool | None" = None,
    encoder: "NnsightEncoder | None" = None,
    edit: Edit | None = None,
    resume: bool = True,
) -> Path:
    """Encode every record of ``cases`` with ``model`` into group ``/{model}/{dataset}`` of store ``out``.

    ``edit``: read every joint record (B after A) after this cache operation instead, into
    group ``/{model}/{dataset}@{edit.name}`` (local runs only; joint records only, K and V,
    no hidden states, no case scores). Its joint records have the original group's
    token ids, so a probe of B's rows trained on one group scores the other.

    ``case_scores``: name -> a :class:`CaseScore` (computed over chunks of the cases; on
    every worker under Ray) or a function of the model computing one float per case,
    stored as ``cases/scores/{name}``.
    Resumes from ``out.parts/`` after an interruption; the store is replaced atomically
    once the group is complete. Returns the store path. ``overwrite``: replace the group if
    the store holds it, and start afresh: an earlier run's unfinished shards of this group
    are discarded (without it a rerun resumes from them, and shards of another
    configuration raise :class:`StoreError`). ``resume=False`` (``FeatureStore.add``):
    no resumption either way; earlier shards are discarded, and a failed or interrupted
    run removes its own, so it leaves nothing behind.

    ``pool``: encode on Ray workers instead (``model`` may then be None): batch ``b``
    goes to the worker :func:`kvprobe.sharding.assign_shards` gives its first record's
    key and returns its shard file's bytes, which the driver writes as a local run
    would; a :class:`CaseScore`'s chunks run on every worker, a plain score function on
    one. The assembled group holds the same arrays as a local extraction's.

    ``encoder``: encode with plain nnsight traces instead (:class:`extract.remote.NnsightEncoder`,
    e.g. on NDIF); no case scores on that path.
    """
    out = Path(out)
    _check_sources(out, model, pool, encoder, edit, case_scores, token_level)
    if encoder is not None:
        provenance = encoder.provenance()
    else:
        provenance = model_provenance(model) if pool is None else pool.call_one(model_provenance)
    _check_records(cases, dataset, token_level, dtype)
    group = f"{model_key(provenance['model'])}/{dataset}" + (f"@{edit.name}" if edit else "")
    if out.exists() and not overwrite:
        with h5py.File(out, "r") as f:
            if group in f:
                raise StoreError(f"{out} already holds {group}; pass overwrite to replace it")
    config = ExtractConfig(model=provenance["model"], weight_hash=provenance["weight_hash"], dataset=dataset,
                           dataset_hash=dataset_hash_of(cases), n_cases=len(cases), batch_size=batch_size,
                           dtype=dtype, token_level=tuple(token_level), edit=edit.condition if edit else "")
    specs, case_rows = records_of(cases)
    if edit is not None:
        specs, case_rows = joint_records_only(specs, case_rows)
    parts = parts_dir(out, group)
    if overwrite or not resume:
        discard_parts(parts)
    try:
        _check_parts_config(parts, config)
        batches = [specs[i : i + batch_size] for i in range(0, len(specs), batch_size)]
        todo = [b for b in range(len(batches)) if not _shard(parts, b).exists()]
        bar = _progress(len(batches), len(batches) - len(todo), f"extract {group}", progress)
        for b, data in _encoded_shards(batches, todo, config, model, pool, encoder, edit):
            _write_bytes(_shard(parts, b), data)
            bar.update(1)
        bar.close()
        scores = {name: _case_score(parts, name, compute, cases, model, pool)
                  for name, compute in (case_scores or {}).items()}
        provenance = {**provenance, "edit": json.dumps(edit.describe() if edit else None)}
        shard_paths = [_shard(parts, b) for b in range(len(batches))]
        _assemble(out, group, provenance, cases, specs, case_rows, shard_paths, config, dataset_info or {},
                  overwrite, scores)
    except BaseException:
        if not resume:
            discard_parts(parts)
        raise
    discard_parts(parts)
    return out


def _check_sources(out: Path, model: "Model | None", pool: "WorkerPool | None", encoder: "NnsightEncoder | None",
                   edit: Edit | None, case_scores: dict[str, Any] | None, token_level: Sequence[str]) -> None:
    """Refuse, before any model runs, what :func:`extract` cannot do with the encoder it was given."""
    if sum(x is not None for x in (model, pool, encoder)) != 1:
        raise ValueError("extract needs exactly one of model (local run), pool (Ray workers) and encoder (nnsight)")
    check_writable(out)
    if edit is not None:
        if model is None:
            raise StoreError(f"edited extraction ({edit.name}) runs on a local model, not on Ray workers or nnsight")
        if case_scores:
            raise StoreError(f"case scores {sorted(case_scores)} belong to the original group, not to the "
                             f"{edit.name} group (extract them without --edit)")
        if "H" in token_level:
            raise StoreError(f"edited groups ({edit.name}) hold K and V only; drop H from token_level")
    if encoder is not None and case_scores:
        raise StoreError(f"case scores {sorted(case_scores)} need kvprobe's engine; the nnsight encoder cannot "
                         "compute them (extract without them)")


def _check_records(cases: Sequence[Any], dataset: str, token_level: Sequence[str], dtype: str) -> None:
    """Refuse an empty dataset, unknown token-level features and a non-float storage dtype."""
    if not cases:
        raise StoreError(f"dataset {dataset!r} has no cases to extract")
    bad = set(token_level) - set(FEATURE_KINDS)
    if bad:
        raise StoreError(f"token_level {sorted(bad)}: choose among {FEATURE_KINDS}")
    if np.dtype(dtype).kind != "f":
        raise StoreError(f"dtype {dtype!r} is not a float type")


def _encoded_shards(batches: list[list[RecordSpec]], todo: list[int], config: ExtractConfig, model: "Model | None",
                    pool: "WorkerPool | None", encoder: "NnsightEncoder | None",
                    edit: Edit | None) -> Iterator[tuple[int, bytes]]:
    """(batch index, its shard file's bytes) of every batch in ``todo``: encoded here, by the nnsight encoder, or
    on Ray workers (batches dealt by their first record's key), as each finishes."""
    if encoder is not None:
        return ((b, _shard_bytes(batches[b], encoder(batches[b]), config)) for b in todo)
    if pool is None:
        return ((b, encode_shard(model, config, batches[b], edit)) for b in todo)
    units = [(batches[b][0].key, (batches[b],)) for b in todo]
    pool.warn_if_idle(len(units), "lower --batch-size to split the records into more batches")
    return ((todo[i], data) for i, data in pool.map_sharded(encode_shard, units, shared=config))


def parts_dir(out: Path, group: str) -> Path:
    """Where the unfinished shards of ``group`` live: ``STORE.parts/{model}__{dataset}``."""
    return out.with_name(out.name + ".parts") / group.replace("/", "__")


def discard_parts(parts: Path) -> None:
    """Remove a group's shard folder, and ``STORE.parts/`` once it holds no other group's."""
    if parts.exists():
        shutil.rmtree(parts)
    if parts.parent.exists() and not any(parts.parent.iterdir()):
        parts.parent.rmdir()


def _shard(parts: Path, b: int) -> Path:
    return parts / f"batch-{b:05d}.h5"


@dataclass(frozen=True)
class CaseScore:
    """A per-case score computed with the model over consecutive chunks of the cases.

    ``fn(model, cases) -> one float per case``; ``chunk`` cases per unit of work. A
    score that batches its own work in groups whose size divides ``chunk`` (the signed
    LOO scores 8 cases per batch) computes the same values chunked as whole, so with a
    Ray pool the chunks run on every worker.
    """

    fn: Callable[["Model", Sequence[Any]], np.ndarray]
    chunk: int = 64


def _score_chunk(model: "Model", fn: Callable[["Model", Sequence[Any]], np.ndarray], cases: Sequence[Any]) -> Any:
    return np.asarray(fn(model, cases), dtype=np.float64)


def _case_score(parts: Path, name: str, compute: "CaseScore | Callable[[Model], np.ndarray]", cases: Sequence[Any],
                model: "Model | None", pool: "WorkerPool | None") -> np.ndarray:
    """A per-case score, computed once and kept in the parts folder until the group is assembled."""
    path = parts / f"scores-{name}.npy"
    if path.exists():
        return np.load(path)
    if isinstance(compute, CaseScore):
        starts = range(0, len(cases), compute.chunk)
        chunks = [cases[lo : lo + compute.chunk] for lo in starts]
        if pool is None:
            parts_of = [_score_chunk(model, compute.fn, chunk) for chunk in chunks]  # type: ignore[arg-type]
        else:
            parts_of = [None] * len(chunks)
            units = [(f"{name}:{lo}", (chunk,)) for lo, chunk in zip(starts, chunks)]
            for i, values in pool.map_sharded(_score_chunk, units, shared=compute.fn):
                parts_of[i] = values
        values = np.concatenate(parts_of) if parts_of else np.zeros(0)
    else:
        values = compute(model) if pool is None else pool.call_one(compute, key=name)
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (len(cases),):
        raise StoreError(f"case score {name!r} has shape {values.shape}, expected ({len(cases)},)")
    tmp = parts / f"scores-{name}.tmp.npy"
    np.save(tmp, values)
    os.replace(tmp, path)
    return values


def _check_parts_config(parts: Path, config: ExtractConfig) -> None:
    parts.mkdir(parents=True, exist_ok=True)
    path = parts / "config.json"
    if path.exists():
        found = path.read_text()
        if found != config.to_json():
            raise StoreError(f"{path} holds an unfinished extraction with another configuration "
                             f"({found}); pass overwrite (kvprobe extract --overwrite) or delete {parts} to "
                             "start over")
    else:
        tmp = path.with_suffix(".tmp")
        tmp.write_text(config.to_json())
        os.replace(tmp, path)


def encode_shard(model: "Model", config: ExtractConfig, specs: Sequence[RecordSpec], edit: Edit | None = None) -> bytes:
    """Encode one batch of records and return its shard file (what a worker sends back)."""
    encodings = encode(model, specs, config.separator, hidden_layers=() if edit else None, edit=edit)
    return _shard_bytes(specs, encodings, config)


def _write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _shard_bytes(specs: Sequence[RecordSpec], encodings, config: ExtractConfig) -> bytes:
    """One batch of records as an HDF5 file's bytes: pooled features, token-level features and token ids."""
    dtype = np.dtype(config.dtype)
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        f["n_tokens"] = np.array([len(e.token_ids) for e in encodings], dtype=np.int32)
        f["token_rows"] = np.array([len(e.token_ids) if s.kind == "single" else 0 for s, e in zip(specs, encodings)],
                                   dtype=np.int32)
        f["sequence_length"] = np.array([e.sequence_length for e in encodings], dtype=np.int32)
        f["token_ids"] = np.concatenate([e.token_ids for e in encodings]).astype(np.int32)
        f["position"] = np.concatenate([e.positions for e in encodings]).astype(np.int32)
        f["rope_position"] = np.concatenate([e.current_positions for e in encodings]).astype(np.int32)
        f.create_dataset("span", data=[e.label for e in encodings], dtype=STR)
        f.create_dataset("edits", data=[json.dumps(list(e.edits)) for e in encodings], dtype=STR)
        for kind, get in (("K", lambda e: e.keys), ("V", lambda e: e.values), ("H", lambda e: e.hidden)):
            for layer in get(encodings[0]):
                per_record = [get(e)[layer] for e in encodings]
                token_axis = 1 if kind in ("K", "V") else 0  # K/V: [heads, n, dim]; H: [n, d_model]
                pooled = np.stack([t.mean(dim=token_axis).numpy() for t in per_record])
                f[f"pooled/{kind}/L{layer:03d}"] = pooled.astype(dtype)
                if kind in config.token_level:
                    # Token-level rows of single records only (what the key similarity compares);
                    # joint records get none, and their token_offset points at an empty range.
                    rows = [(t.transpose(0, 1).numpy() if token_axis == 1 else t.numpy())
                            for t, spec in zip(per_record, specs) if spec.kind == "single"]
                    if rows:
                        f[f"tokens/{kind}/L{layer:03d}"] = np.concatenate(rows).astype(dtype)
    return buffer.getvalue()


def _assemble(out: Path, group: str, provenance: dict[str, Any], cases: Sequence[Any], specs: Sequence[RecordSpec],
              case_rows: np.ndarray, shards: list[Path], config: ExtractConfig, dataset_info: dict[str, Any],
              overwrite: bool, scores: dict[str, np.ndarray]) -> None:
    """Write the complete group into a copy of the store, then rename the copy over the store."""
    tmp = out.with_name(out.name + ".tmp")
    if out.exists():
        shutil.copyfile(out, tmp)
    elif tmp.exists():
        tmp.unlink()
    try:
        _write_assembled(tmp, out, group, provenance, cases, specs, case_rows, shards, config, dataset_info,
                         overwrite, scores)
    except BaseException:
        tmp.unlink(missing_ok=True)  # the store itself was never touched
        raise
    os.replace(tmp, out)


def _write_assembled(tmp: Path, out: Path, group: str, provenance: dict[str, Any], cases: Sequence[Any],
                     specs: Sequence[RecordSpec], case_rows: np.ndarray, shards: list[Path], config: ExtractConfig,
                     dataset_info: dict[str, Any], overwrite: bool, scores: dict[str, np.ndarray]) -> None:
    with h5py.File(tmp, "a") as f:
        f.attrs["kvprobe_store_schema"] = SCHEMA_VERSION
        if group in f:
            if not overwrite:
                raise StoreError(f"{out} already holds {group}; pass overwrite to replace it")
            del f[group]
        g = f.create_group(group)
        _write_attrs(g, provenance, config, dataset_info)
        c = g.create_group("cases")
        for name in CASE_FIELDS:
            _dataset(c, name, np.array([str(getattr(case, name)) for case in cases], dtype=object), STR)
        for name in sorted({k for case in cases for k in case.labels}):
            _dataset(c, f"labels/{name}", np.array([case.labels.get(name, -1) for case in cases], dtype=np.int8))
        for j, name in enumerate(("record_a", "record_b", "record_ab")):
            _dataset(c, name, case_rows[:, j])
        for name, values in scores.items():
            _dataset(c, f"scores/{name}", values)
        r = g.create_group("records")
        _dataset(r, "kind", np.array([s.kind for s in specs], dtype=object), STR)
        _dataset(r, "key", np.array([s.key for s in specs], dtype=object), STR)
        _dataset(r, "text", np.array([s.text for s in specs], dtype=object), STR)
        _write_records(r, shards)


def _write_records(r: h5py.Group, shards: list[Path]) -> None:
    """Concatenate the shards' tables into the group, one dataset at a time (each written once, whole:
    appending to compressed chunks from many shards would rewrite and orphan chunks)."""
    files = [h5py.File(path, "r") for path in shards]
    try:
        names: dict[str, None] = {}  # every shard's datasets, in first-seen order (a shard may lack token tables)
        for f in files:
            f.visititems(lambda name, obj: names.setdefault(name) if isinstance(obj, h5py.Dataset) else None)
        for name in names:
            text = files[0][name].dtype.kind == "O"  # strings (span labels, edit entries)
            parts = [(f[name].asstr()[()] if text else f[name][()]) for f in files if name in f]
            if name == "n_tokens":
                lengths = np.concatenate(parts)
                _dataset(r, "token_ids_offset", np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64))
                _dataset(r, "token_record", np.repeat(np.arange(len(lengths)), lengths).astype(np.int32))
            if name == "token_rows":
                rows = np.concatenate(parts)
                _dataset(r, "token_offset", np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64))
            _dataset(r, name, np.concatenate(parts).astype(object) if text else np.concatenate(parts),
                     STR if text else None)
    finally:
        for f in files:
            f.close()


def _write_attrs(g: h5py.Group, provenance: dict[str, Any], config: ExtractConfig,
                 dataset_info: dict[str, Any]) -> None:
    attrs = {
        **provenance,
        "versions": json.dumps({**versions(), "h5py": h5py.__version__, "numpy": np.__version__}, sort_keys=True),
        "dataset": config.dataset,
        "dataset_hash": config.dataset_hash,
        "dataset_info": json.dumps(dataset_info, sort_keys=True),
        "n_cases": config.n_cases,
        "config": config.to_json(),
    }
    for k, v in attrs.items():
        g.attrs[k] = v


def _dataset(g: h5py.Group, name: str, data: np.ndarray, dtype=None) -> None:
    """A chunked (about 1 MiB per chunk), compressed dataset resizable along its first axis."""
    data = np.asarray(data)
    row_bytes = max(1, int(np.prod(data.shape[1:])) * (data.itemsize if data.dtype != object else 64))
    chunk_rows = max(1, min(len(data), 2**20 // row_bytes))
    g.create_dataset(name, data=data, dtype=dtype or data.dtype, maxshape=(None, *data.shape[1:]),
                     chunks=(chunk_rows, *data.shape[1:]), **COMPRESSION)


class _NoBar:
    def update(self, n: int) -> None: ...
    def close(self) -> None: ...


def _progress(total: int, done: int, desc: str, show: bool):
    if not show:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=done, desc=desc, unit="batch")
