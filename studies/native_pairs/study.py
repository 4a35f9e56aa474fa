"""The native record-pair study (paper appendix "Text Similarity Perfectly Separates the Controlled-History
Pairs", seed L2312-2386, table tab:v39_native_pairs; spec partB sections 1-2, D2).

Cases are the dataset's bootstrap components (:mod:`.data`); each distinct text pair of a component is one row,
scored once on **native forward paths**: every record is encoded alone, templateless (no chat format, no
question), by the model's own forward from position 0, through :func:`kvprobe.extract.capture.encode` (the
recognition extraction's path: the tokenizer's special tokens, e.g. a BOS, open the sequence and are not part
of the record's span; keys and values read back from the cache, post-RoPE and post-QK-norm as stored). A
batch's distinct record texts are encoded once and shared by its pairs. Per pair (earlier ``a``, later ``b``):

* ``s_k``: the key similarity :func:`kvprobe.readouts.fixed.key_similarity` of the token-level keys, and
* ``d_v``: the V distance :func:`kvprobe.readouts.fixed.value_distance` of the token-mean values (``b`` in the
  denominator), both over every layer that stores K/V rows (``model.arch.kv_layers``: on hybrids the
  full-attention layers; Gemma 3's sliding-window layers see whole records, which are shorter than any window);
* ``token_jaccard`` of the two records' token ids and ``char_distance`` of their texts (the surface baselines).

The row carries every labelled comparison that shares the pair (``comparisons``: task, label, group); the
summary (:mod:`.summary`) expands them, so repeated comparisons share one score.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import kvprobe
from kvprobe.extract.capture import RecordSpec, encode
from kvprobe.readouts.fixed import char_distance, key_similarity, token_jaccard, value_distance
from kvprobe.readouts.stats import DRAWS
from kvprobe.studies.common.protocol import RunState, Study, require_at_least
from kvprobe.studies.datasets import controlled_histories
from .data import INTRINSIC_GROUPS, NATIVE_PAIRS_SEED, Case, counts, dataset_hash, generate_cases


@dataclass
class NativePairsStudy(Study):
    """Record pairs without a question: entity-attribute matching by s_K and replacement by d_V, two panels."""

    name: ClassVar[str] = "native-pairs"
    #: Groups per alias stratum of the intrinsic panel (same-alias, different-alias; the paper's 216
    #: intrinsic components are 108 + 108).
    intrinsic_groups: int = INTRINSIC_GROUPS
    #: Controlled-history clusters per update family (the paper: 80, 400 components over five families).
    history_per_family: int = controlled_histories.PAPER_CLUSTERS_PER_FAMILY
    #: Generator seed of the intrinsic panel.
    seed: int = NATIVE_PAIRS_SEED
    #: Generator seed of the controlled-history clusters (the component study's default).
    history_seed: int = controlled_histories.SEED
    #: Bootstrap draws of the summary's intervals (the paper: 10,000; components resampled within each
    #: panel's strata).
    draws: int = DRAWS
    #: Components encoded in one batch (their distinct records as one forward).
    cases_per_batch: int = 16

    def __post_init__(self) -> None:
        require_at_least(self, intrinsic_groups=1, history_per_family=1, draws=1, cases_per_batch=1)

    def make_cases(self) -> list[Case]:
        return generate_cases(self.intrinsic_groups, self.history_per_family, self.seed, self.history_seed)

    def data_sha256(self) -> str:
        return dataset_hash(self.cases())

    def config_extra(self) -> dict[str, Any]:
        return {"counts": counts(self.cases()), "layers": "every layer with K/V rows",
                "encoding": "each record alone, templateless, from position 0 (kvprobe.extract.capture.encode)"}

    def run_cases(self, model: kvprobe.Model, cases: list[Case], state: RunState | None = None
                  ) -> list[list[dict[str, Any]]]:
        """One row per distinct pair of each component; the batch's distinct texts encoded once."""
        texts = list(dict.fromkeys(t for c in cases for t in c.texts()))
        encoded = dict(zip(texts, encode(model, [RecordSpec("single", t) for t in texts], hidden_layers=())))
        layers = model.arch.kv_layers
        out = []
        for case in cases:
            rows = []
            for pair in case.pairs:
                a, b = encoded[pair.a], encoded[pair.b]
                rows.append({
                    "case_id": case.case_id, "panel": case.panel, "stratum": case.stratum, "family": case.family,
                    "pair": pair.pair_id, "a": pair.a, "b": pair.b,
                    "a_tokens": len(a.token_ids), "b_tokens": len(b.token_ids),
                    "s_k": key_similarity([a.keys[l] for l in layers], [b.keys[l] for l in layers]),
                    "d_v": value_distance([a.values[l].double().mean(dim=1) for l in layers],
                                          [b.values[l].double().mean(dim=1) for l in layers]),
                    "token_jaccard": token_jaccard(a.token_ids.tolist(), b.token_ids.tolist()),
                    "char_distance": char_distance(pair.a, pair.b),
                    "comparisons": [{"task": q.task, "label": q.label, "group": q.group} for q in pair.comparisons],
                })
            out.append(rows)
        return out
