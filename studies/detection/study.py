"""The detection study: every detector on every record pair (paper partB sections 4-5).

Record pairs come from two datasets:

* ``records``: the synthetic record histories D3 (``studies.recognition.records``),
  development and test splits by default; label = replacement (replacement, role
  swap, explicit rejection);
* ``quantity``: the quantity calibration set D4 (``studies.quantity_task.tasks``), its 18
  development and 120 test groups in both information versions (each group
  contributes both versions of the later record, paper L2834); label = the group's
  relation is a replacement.

Detectors (``studies.detectors.text``): the direct, expanded and asserted-value JSON
classifiers (greedy, 128 tokens) and the YES/NO score. One row per (pair,
detector), holding the raw output, its parse reason and decision, or the score.
Which detectors run on which dataset and split is a parameter; by default the
JSON classifiers run on the test records (where the paper evaluates them) and the
YES/NO score everywhere (thresholds are fitted on the development split).

The study is not a history under access conditions, so it subclasses the protocol's
minimal :class:`~kvprobe.studies.protocol.Study` and runs its own batches; its rows
share the protocol's column names where they have the concept (``case_id``,
``group``; ``output``, ``stop_reason``, ``output_tokens`` of the JSON classifiers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import kvprobe
from kvprobe.readouts.stats import QUANTITY_SEED, RECORDS_SEED
from kvprobe.studies.detectors.text import DETECTORS, MAX_NEW_TOKENS, TEXT_DETECTORS, YES_NO, RecordPair, \
    run_text_detectors, yes_no_scores
from kvprobe.studies.detectors import strings
from kvprobe.studies.recognition.cases import SPLITS
from kvprobe.studies.protocol import InvalidParameter, Study, require_at_least, require_choices
from kvprobe.studies.runner import strings_sha256, study_parameters

DATASETS = ("records", "quantity")


@dataclass(frozen=True)
class DetectionCase:
    """One record pair with its label and resampling group."""

    case_id: str
    dataset: str
    group: str
    split: str
    relation: str
    label: int
    pair: RecordPair


def records_cases(splits: tuple[str, ...], seed: int) -> list[DetectionCase]:
    """D3 pairs of the given splits."""
    from kvprobe.studies.recognition.records import generate_records

    return [DetectionCase(f"records/{c.case_id}", "records", c.group, c.split, c.variant,
                          c.labels["replacement"], RecordPair(c.a_text, c.b_text, c.old_value))
            for c in generate_records(seed) if c.split in splits]


def quantity_cases(splits: tuple[str, ...], seed: int) -> list[DetectionCase]:
    """D4 pairs (record A, record B) of the given splits, both information versions per group."""
    from kvprobe.studies.quantity_task import tasks

    out = []
    for split in splits:
        for case in tasks.generate_cases(tasks.TaskConfig(seed=seed, dev=split == "dev")):
            texts, g = tasks.segment_texts(case), case.group
            out.append(DetectionCase(f"quantity/{case.case_id}", "quantity", g.group_id, g.split, g.relation,
                                     int(g.relation == "replacement"), RecordPair(texts["A"], texts["B"],
                                                                                  g.old_value)))
    return out


@dataclass
class DetectionStudy(Study):
    """Detectors on record pairs: one row per (pair, detector)."""

    name: ClassVar[str] = "detection"
    #: Datasets of record pairs (records: the D3 histories; quantity: the D4 calibration groups).
    datasets: tuple[str, ...] = DATASETS
    #: Splits of each dataset (the quantity dataset has dev and test only).
    splits: tuple[str, ...] = ("dev", "test")
    #: Detectors run on the record pairs (the JSON classifiers and the YES/NO score).
    record_detectors: tuple[str, ...] = DETECTORS
    #: Detectors run on the quantity pairs (the YES/NO score, whose thresholds the quantity study calibrates).
    quantity_detectors: tuple[str, ...] = (YES_NO,)
    #: Splits the JSON classifiers run on (the paper evaluates them on the 300 test histories; the
    #: development split only needs the YES/NO score, for thresholds).
    text_detector_splits: tuple[str, ...] = ("test",)
    #: Greedy budget of the JSON classifiers in tokens (the paper: 128).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Accept a JSON verdict inside one outer code fence.
    allow_fence: bool = True
    #: Generator seed of the record dataset.
    records_seed: int = RECORDS_SEED
    #: Generator seed of the quantity groups.
    quantity_seed: int = QUANTITY_SEED
    #: Run only the first N groups of each (dataset, split), for quick runs; None: all.
    n_groups: int | None = None
    #: Pairs run in one batch.
    cases_per_batch: int = 4
    _cases: list[DetectionCase] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("datasets", "splits", "record_detectors", "quantity_detectors", "text_detector_splits"):
            setattr(self, name, tuple(getattr(self, name)))
        require_choices(self, datasets=DATASETS, splits=SPLITS, record_detectors=DETECTORS,
                        quantity_detectors=DETECTORS, text_detector_splits=SPLITS)
        if "quantity" in self.datasets and "train" in self.splits:
            raise InvalidParameter("splits", "the quantity dataset has no train split (only dev and test)")
        require_at_least(self, max_new_tokens=1, n_groups=1, cases_per_batch=1)

    def config(self) -> dict[str, Any]:
        return {**study_parameters(self), "strings_sha256": strings_sha256(strings)}

    def cases(self) -> list[DetectionCase]:
        if self._cases is None:
            cases: list[DetectionCase] = []
            if "records" in self.datasets:
                cases += _first_groups(records_cases(self.splits, self.records_seed), self.n_groups)
            if "quantity" in self.datasets:
                cases += _first_groups(quantity_cases(self.splits, self.quantity_seed), self.n_groups)
            self._cases = cases
        return self._cases

    def detectors_for(self, case: DetectionCase) -> tuple[str, ...]:
        names = self.record_detectors if case.dataset == "records" else self.quantity_detectors
        return tuple(n for n in names if n not in TEXT_DETECTORS or case.split in self.text_detector_splits)

    def run_cases(self, model: kvprobe.Model, cases: list[DetectionCase]) -> list[list[dict[str, Any]]]:
        """Every (pair, detector) row of a batch; the JSON classifiers run as one generation batch."""
        text_names = [[n for n in self.detectors_for(c) if n in TEXT_DETECTORS] for c in cases]
        wanted = sorted({n for names in text_names for n in names}, key=DETECTORS.index)
        verdicts = run_text_detectors(model, [c.pair for c in cases], wanted, self.max_new_tokens, self.chat,
                                      self.allow_fence) if wanted else [{} for _ in cases]
        scored = [c for c in cases if YES_NO in self.detectors_for(c)]
        scores = dict(zip((c.case_id for c in scored), yes_no_scores(model, [c.pair for c in scored], self.chat)))
        out = []
        for case, names, verdict in zip(cases, text_names, verdicts):
            base = {"case_id": case.case_id, "dataset": case.dataset, "group": case.group, "split": case.split,
                    "relation": case.relation, "label": case.label}
            rows = [{**base, "detector": n, **verdict[n]} for n in names]
            if case.case_id in scores:
                rows.append({**base, "detector": YES_NO, **scores[case.case_id]})
            out.append(rows)
        return out


def _first_groups(cases: list[DetectionCase], n_groups: int | None) -> list[DetectionCase]:
    """The cases of the first ``n_groups`` groups of each split (all when None)."""
    if n_groups is None:
        return cases
    kept: dict[str, list[str]] = {}
    for c in cases:
        groups = kept.setdefault(c.split, [])
        if c.group not in groups and len(groups) < n_groups:
            groups.append(c.group)
    return [c for c in cases if c.group in kept.get(c.split, [])]
