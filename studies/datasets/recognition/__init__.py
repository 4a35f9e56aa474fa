"""Recognition datasets (spec partB section 1): D1 role-matched pairs and D3 "r570" records.

Deterministic, seeded generators of (earlier record A, later record B) cases; see
``records.py`` (D3) and ``role_pairs.py`` (D1) for the design and the choices the paper
leaves open. ``kvprobe extract`` (the recognition study, ``studies/recognition``) encodes them;
the record histories (``studies.datasets.record_histories``) and the role-pair events of the
source-influence study are built from them.
"""

from .records import RECORDS_SEED

from .role_pairs import ROLE_PAIRS_SEED

from .cases import FAMILIES, SPLITS, RecognitionCase, dataset_hash, word_multiset
from .records import ITEMS as RECORD_ITEMS, RECORD_VARIANTS, generate_records, split_vocabulary
from .role_pairs import ITEMS as PAIR_ITEMS, PATTERNS, ROLE_PAIR_VARIANTS, generate_role_pairs

#: Dataset name (as ``kvprobe extract --dataset`` takes it) -> (generator, default seed).
DATASETS = {"records": (generate_records, RECORDS_SEED), "role-pairs": (generate_role_pairs, ROLE_PAIRS_SEED)}
#: Dataset name -> where its items come from (``studies.common.report.Items``; the readout reports' Items line).
DATASET_ITEMS = {"records": RECORD_ITEMS, "role-pairs": PAIR_ITEMS}

__all__ = [
    "DATASETS", "DATASET_ITEMS", "FAMILIES", "PATTERNS", "RECORD_VARIANTS", "ROLE_PAIR_VARIANTS", "SPLITS", "RecognitionCase",
    "dataset_hash", "generate_records", "generate_role_pairs", "split_vocabulary", "word_multiset",
]
