"""The paper's sample of a released MQuAKE file (paper L1375-1377; spec partA section 1b).

"We select 200 cases each at two, three, and four hops from the corrected
MQuAKE-CF-3k-v2 release, using seeds 20260920+h for hop count h before outcome
inspection." The sampler is not stated (UNCLEAR); ours: the cases of hop count
``h`` in file order, ``random.Random(seed + h).sample(pool, n)``, kept in file order.
Hop count is the length of ``orig.triples``.

Example::

    cases = sample_released("MQuAKE-CF-3k-v2.json", hops=(2, 3, 4), n_per_hop=200)
"""

from __future__ import annotations

import random
from pathlib import Path


from kvprobe.studies.datasets.mquake.schema import MQuAKECase, MQuAKEFormatError, load_mquake

#: 20260920 + h: the sample of h-hop cases from a released MQuAKE file (paper L1376-1377).
MQUAKE_SAMPLE_SEED = 20260920


def sample_released(source: str | Path, hops: tuple[int, ...], n_per_hop: int,
                    seed: int = MQUAKE_SAMPLE_SEED) -> list[MQuAKECase]:
    """``n_per_hop`` cases of each hop count, drawn with ``random.Random(seed + h)``, in file order; ``source`` is
    a released file, the repository's folder or an ``hf:`` id (``datasets.mquake.schema.released_file``).

    Raises ``MQuAKEFormatError`` naming the file when a hop count has fewer cases
    than asked for, or when case ids repeat.
    """
    cases = load_mquake(source)
    ids = [c.case_id for c in cases]
    if len(set(ids)) != len(ids):
        raise MQuAKEFormatError(f"{source}: case ids repeat")
    position = {c.case_id: i for i, c in enumerate(cases)}
    chosen: list[MQuAKECase] = []
    for h in hops:
        pool = [c for c in cases if c.hops == h]
        if len(pool) < n_per_hop:
            raise MQuAKEFormatError(f"{source}: {len(pool)} cases of {h} hops, fewer than the {n_per_hop} asked for "
                                    "(lower --n-per-hop or drop that hop count from --hops)")
        drawn = random.Random(seed + h).sample(pool, n_per_hop)
        chosen += sorted(drawn, key=lambda c: position[c.case_id])
    return chosen
