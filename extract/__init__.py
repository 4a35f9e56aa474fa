"""Feature extraction: per-layer K and V exactly as cached, and hidden states, into an HDF5 store.

* ``capture.encode(model, specs)``: one traced forward per batch of records;
  K/V read from the cache, hidden states captured with nnsight.
* ``pipeline.extract(model, dataset, cases, out)``: the extraction run, resumable and crash-safe
  writing of one ``/{model}/{dataset}`` group (the recognition datasets, ``kvprobe extract``).
* ``schema``: the HDF5 layout and provenance attributes (``SCHEMA_VERSION``) the pipeline writes and the store reads.
* ``store.FeatureStore``: open (``FeatureStore(path)``) or create
  (``FeatureStore.create(path)``) a store, add your own :class:`Pair` list
  (``store.add(model, pairs, name=...)``), read a group (``store[name]``: a
  :class:`StoreGroup` with ``keys(layer)``, ``values(layer)``, ``hidden(layer)``,
  ``labels``, ``groups``, ``splits``, ``provenance``).
* ``remote.NnsightEncoder``: the same features through plain nnsight traces
  (this process, or NDIF for models too large to load here).
* ``kvprobe bench extract`` times this package: ``kvprobe.tools.bench.extract``.
"""

from .capture import JOINT_SEPARATOR, Edit, Encoding, RecordSpec, encode
from .pairs import Pair, PairError
from .pipeline import CaseScore, extract
from .schema import StoreError, model_key
from .store import FeatureStore, StoreGroup

__all__ = ["JOINT_SEPARATOR", "CaseScore", "Edit", "Encoding", "FeatureStore", "Pair", "PairError", "RecordSpec",
           "StoreError", "StoreGroup", "encode", "extract", "model_key"]
