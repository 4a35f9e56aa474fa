"""The component study's controlled history clusters under the paper's raw prompt.

The clusters themselves (vocabulary, counterbalancing, record wording) live in
:mod:`kvprobe.studies.datasets.controlled_histories`, which the native record-pair study shares; this
module adds the raw-mode prompt of a cluster state (paper L1293-1301) and re-exports the generator.
"""

from __future__ import annotations

import kvprobe
from kvprobe.studies.datasets.controlled_histories import (  # noqa: F401  (the component study's names)
    ATTRIBUTES, FAMILIES, PAPER_CLUSTERS_PER_FAMILY, POSITIONS, QUERIES, SEED, STATES, Cluster, clusters_hash,
    generate_clusters)

from . import strings


def prompt(cluster: Cluster, state: str) -> kvprobe.Prompt:
    """The raw-mode prompt: ``History:\\n`` + history, then per query ``\\nQuestion:\\n`` + query
    + ``\\nReasoning:\\n`` (paper L1293-1296). The history is tokenized with the tokenizer's
    special tokens, the suffix without (kvprobe raw mode)."""
    header = strings.HISTORY_OPEN[: -len(strings.RECORD_JOINER)]
    return kvprobe.Prompt([("header", header)] + cluster.segments(state), chat=False, sep=strings.RECORD_JOINER,
                          question_sep=strings.QUESTION_OPEN, raw_suffix=strings.REASONING_OPEN)


def rendered_text(cluster: Cluster, state: str, query: str) -> str:
    """The paper's raw prefix of one (state, query), as text (for checks)."""
    return (strings.HISTORY_OPEN + cluster.history_text(state) + strings.QUESTION_OPEN + cluster.query(query)
            + strings.REASONING_OPEN)
