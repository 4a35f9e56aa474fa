"""Deterministic sharding and model specs: what a worker on another process or machine needs.

A sharded run must compute exactly what a single-process run computes, so two
things are fixed here and nowhere else:

* **Which worker runs what.** A unit of work (a batch of study cases, a batch of
  records to extract) is named by a string key, the case id of its first case or
  the record key of its first record. :func:`assign_shards` sorts a run's units
  by the SHA-256 of their keys and deals them round-robin, so the assignment
  depends only on the keys (neither Python's per-process hash seed nor the order
  in which work arrives) and every worker gets the same number of units, to one.
  (A plain ``hash % workers`` put all 4 batches of a small run on one of 2
  workers.) Units are the runners' own fixed batches, so every case is computed
  in the same batch, with the same shapes, as in a single-process run, whichever
  worker runs it.
* **Which model a worker loads.** :class:`ModelSpec` is the picklable recipe
  (name and loading options) every worker loads once; the driver never needs the
  weights. Workers report :func:`model_description`, and a run refuses workers
  whose weights differ.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from .model_like import ModelLike


def stable_hash(key: str) -> int:
    """A 64-bit integer from the SHA-256 of ``key`` (the same in every process and on every machine)."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big")


def shard_of(key: str, n_shards: int) -> int:
    """The shard (0 .. n_shards - 1) of a unit of work named ``key``."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be at least 1, got {n_shards}")
    return stable_hash(key) % n_shards


def assign_shards(keys: Sequence[str], n_shards: int) -> list[int]:
    """The shard of each unit named in ``keys``: ranks of their stable hashes dealt round-robin
    (deterministic, and balanced to one unit). Keys must be distinct."""
    if n_shards < 1:
        raise ValueError(f"n_shards must be at least 1, got {n_shards}")
    if len(set(keys)) != len(keys):
        raise ValueError("assign_shards: unit keys must be distinct")
    shards = [0] * len(keys)
    for rank, i in enumerate(sorted(range(len(keys)), key=lambda i: (stable_hash(keys[i]), keys[i]))):
        shards[i] = rank % n_shards
    return shards


@dataclass(frozen=True)
class ModelSpec:
    """How a worker loads the model: :func:`kvprobe.load_model` arguments, picklable.

    ``device`` is passed through to loading: ``"cpu"`` (default), ``"cuda"``, or
    ``"auto"`` (transformers' ``device_map="auto"``: a model larger than one
    device spread over every GPU the worker was given, for Hub models and local
    directories).
    """

    name: str
    attn_implementation: str | None = None
    dtype: str = "float32"
    device: str = "cpu"

    def load(self) -> "ModelLike":
        import torch

        from .model import load_model

        kwargs: dict[str, Any] = {"dtype": getattr(torch, self.dtype), "device": self.device}
        if self.attn_implementation:
            kwargs["attn_implementation"] = self.attn_implementation
        return load_model(self.name, **kwargs)


def model_description(model: "ModelLike") -> dict[str, Any]:
    """What identifies a loaded model in a run's ``config.json`` (name, source, weights, dtype, architecture, and
    the device type when it is not the CPU: a run resumed on another kind of device would round differently)."""
    description = {"name": model.name, "source": model.source, "weight_hash": model.weight_hash,
                   "dtype": str(model.dtype), "architecture": model.arch.describe(),
                   "attn_implementation": model.hf.config._attn_implementation}
    if model.device.type != "cpu":  # runs on the CPU keep the description older runs wrote
        description["device"] = model.device.type
    return description
