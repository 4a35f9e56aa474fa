"""Feature extraction: per-layer K and V exactly as cached, and hidden states, into an HDF5 store.

* ``capture.encode(model, specs)``: one traced forward per batch of records;
  K/V read from the cache, hidden states captured with nnsight.
* ``store.extract(model, dataset, cases, out)``: resumable, crash-safe writing of
  one ``/{model}/{dataset}`` group; ``store.FeatureStore`` reads it lazily.
* ``remote.NnsightEncoder``: the same features through plain nnsight traces
  (this process, or NDIF for models too large to load here).
* ``kvprobe bench extract`` times this package: ``kvprobe.tools.bench.extract``.
"""

from .capture import JOINT_SEPARATOR, Encoding, RecordSpec, encode
from .store import CaseScore, FeatureStore, StoreError, StoreGroup, extract, model_key

__all__ = ["JOINT_SEPARATOR", "CaseScore", "Encoding", "FeatureStore", "RecordSpec", "StoreError", "StoreGroup",
           "encode", "extract", "model_key"]
