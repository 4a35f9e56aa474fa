"""Recognition datasets (spec partB section 1): D1 role-matched pairs and D3 "r570" records.

Deterministic, seeded generators of (earlier record A, later record B) cases; see
``records.py`` (D3) and ``role_pairs.py`` (D1) for the design and the choices the paper
leaves open.
"""

from kvprobe.readouts.stats import RECORDS_SEED, ROLE_PAIRS_SEED

from .cases import FAMILIES, SPLITS, RecognitionCase, dataset_hash, word_multiset
from .records import RECORD_VARIANTS, generate_records, split_vocabulary
from .role_pairs import PATTERNS, ROLE_PAIR_VARIANTS, generate_role_pairs

#: Dataset name (as ``kvprobe extract --dataset`` takes it) -> (generator, default seed).
DATASETS = {"records": (generate_records, RECORDS_SEED), "role-pairs": (generate_role_pairs, ROLE_PAIRS_SEED)}

__all__ = [
    "DATASETS", "FAMILIES", "PATTERNS", "RECORD_VARIANTS", "ROLE_PAIR_VARIANTS", "SPLITS", "RecognitionCase",
    "dataset_hash", "generate_records", "generate_role_pairs", "split_vocabulary", "word_multiset",
]
