"""The detection study: every detector on every record pair (paper partB sections 4-5).

Record pairs come from two datasets:

* ``records``: the synthetic record histories D3 (``studies.datasets.recognition.records``),
  development and test splits by default; label = replacement (replacement, role
  swap, explicit rejection);
* ``quantity``: the quantity calibration set D4 (``studies.datasets.quantity_task.tasks``), its 18
  development and 120 test groups in both information versions (each group
  contributes both versions of the later record, paper L2834); label = the group's
  relation is a replacement;
* ``oaks``: natural text (:mod:`.natural`), per question of the chosen OAKS books its earliest answer
  change as a positive pair and two constructed negatives (repeated source, different book); the
  asserted-value detector plain and question-conditioned (``oaks_detectors``, 160 tokens).

Detectors (``studies.common.detectors.text``): the direct, expanded and asserted-value JSON
classifiers (greedy, 128 tokens) and the YES/NO score. One row per (pair,
detector), holding the raw output, its parse reason and decision, or the score.
Which detectors run on which dataset and split is a parameter; by default the
JSON classifiers run on the test records (where the paper evaluates them) and the
YES/NO score everywhere (thresholds are fitted on the development split).

The study is not a history under access conditions, so it subclasses the protocol's
minimal :class:`~kvprobe.studies.common.protocol.Study` and runs its own batches; its rows
share the protocol's column names where they have the concept (``case_id``,
``group``; ``output``, ``stop_reason``, ``output_tokens`` of the JSON classifiers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import kvprobe
from kvprobe.studies.datasets.quantity_task.tasks import QUANTITY_SEED
from kvprobe.studies.datasets.recognition.records import RECORDS_SEED
from kvprobe.studies.common.detectors.text import DETECTORS, MAX_NEW_TOKENS, TEXT_DETECTORS, YES_NO, RecordPair, \
    run_text_detectors, yes_no_scores
from kvprobe.studies.common.detectors import strings
from kvprobe.studies.datasets import oaks
from .natural import NATURAL_DETECTORS, NATURAL_MAX_NEW_TOKENS, annotation_columns, natural_pairs, \
    run_natural_detectors
from kvprobe.studies.datasets.recognition.cases import SPLITS
from kvprobe.studies.common.protocol import InvalidParameter, RunState, Study, require_at_least, require_choices

DATASETS = ("records", "quantity", "oaks")


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
    #: oaks: the question (the question-conditioned detector's input).
    question: str | None = None
    #: Dataset-specific row columns (oaks: the question, its change, the donor, the annotation).
    columns: dict[str, Any] = field(default_factory=dict)


def records_cases(splits: tuple[str, ...], seed: int) -> list[DetectionCase]:
    """D3 pairs of the given splits."""
    from kvprobe.studies.datasets.recognition.records import generate_records

    return [DetectionCase(f"records/{c.case_id}", "records", c.group, c.split, c.variant,
                          c.labels["replacement"], RecordPair(c.a_text, c.b_text, c.old_value))
            for c in generate_records(seed) if c.split in splits]


def quantity_cases(splits: tuple[str, ...], seed: int) -> list[DetectionCase]:
    """D4 pairs (record A, record B) of the given splits, both information versions per group."""
    from kvprobe.studies.datasets.quantity_task import tasks

    out = []
    for split in splits:
        for case in tasks.generate_cases(tasks.TaskConfig(seed=seed, dev=split == "dev")):
            texts, g = tasks.segment_texts(case), case.group
            out.append(DetectionCase(f"quantity/{case.case_id}", "quantity", g.group_id, g.split, g.relation,
                                     int(g.relation == "replacement"), RecordPair(texts["A"], texts["B"],
                                                                                  g.old_value)))
    return out


def oaks_cases(source: str, split: str) -> list[DetectionCase]:
    """The natural-text pairs (:func:`.natural.natural_pairs`) of the ``split`` books of an OAKS source."""
    books = oaks.load_books(source)
    out = []
    for p in natural_pairs(oaks.earliest_changes(books, split)):
        c = p["change"]
        out.append(DetectionCase(f"oaks/{c.case_id}/{p['relation']}", "oaks", c.question_id, split, p["relation"],
                                 p["label"], p["pair"], c.question,
                                 {"event": c.case_id, "question_id": c.question_id, "book": p["book"].book_id,
                                  "donor": p["donor"], **annotation_columns(p["book"], c.question_id)}))
    return out


@dataclass
class DetectionStudy(Study):
    """Detectors on record pairs: one row per (pair, detector)."""

    name: ClassVar[str] = "detection"
    strings: ClassVar[ModuleType] = strings
    #: Datasets of record pairs (records: the D3 histories; quantity: the D4 calibration groups; oaks:
    #: natural-text pairs from an OAKS-schema file, see oaks_source).
    datasets: tuple[str, ...] = ("records", "quantity")
    #: Splits of each dataset (the quantity dataset has dev and test only).
    splits: tuple[str, ...] = ("dev", "test")
    #: Detectors run on the record pairs (the JSON classifiers and the YES/NO score).
    record_detectors: tuple[str, ...] = DETECTORS
    #: Detectors run on the quantity pairs (the YES/NO score, whose thresholds the quantity study calibrates).
    quantity_detectors: tuple[str, ...] = (YES_NO,)
    #: Splits the JSON classifiers run on (the paper evaluates them on the 300 test histories; the
    #: development split only needs the YES/NO score, for thresholds).
    text_detector_splits: tuple[str, ...] = ("test",)
    #: Detectors run on the oaks pairs (the asserted-value prompt, plain and with the question prepended).
    oaks_detectors: tuple[str, ...] = NATURAL_DETECTORS
    #: oaks: "demonstration" (an OAKS-schema set generated from the PG-19 novel, no annotations) or the path
    #: of an OAKS JSON file in the schema of studies/datasets/oaks.py.
    oaks_source: str = oaks.DEMONSTRATION
    #: oaks: books (the paper: the 5 held-out evaluation books), or calibration, development, all.
    oaks_split: str = "evaluation"
    #: oaks: greedy detector budget in tokens (the paper: 160). The paper's batches of 16: cases_per_batch 16
    #: (each detector generates the batch's pairs as one batch).
    oaks_max_new_tokens: int = NATURAL_MAX_NEW_TOKENS
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
    #: Run only the first N groups of each (dataset, split) (oaks: questions), for quick runs; None: all.
    n_groups: int | None = None
    #: Pairs run in one batch.
    cases_per_batch: int = 4

    def __post_init__(self) -> None:
        for name in ("datasets", "splits", "record_detectors", "quantity_detectors", "text_detector_splits",
                     "oaks_detectors"):
            setattr(self, name, tuple(getattr(self, name)))
        require_choices(self, datasets=DATASETS, splits=SPLITS, record_detectors=DETECTORS,
                        quantity_detectors=DETECTORS, text_detector_splits=SPLITS, oaks_detectors=NATURAL_DETECTORS,
                        oaks_split=oaks.OAKS_SPLITS)
        if "oaks" in self.datasets and self.oaks_source != oaks.DEMONSTRATION \
                and not Path(self.oaks_source).is_file():
            raise InvalidParameter("oaks_source", f"{self.oaks_source!r} is neither 'demonstration' nor a file")
        if "quantity" in self.datasets and "train" in self.splits:
            raise InvalidParameter("splits", "the quantity dataset has no train split (only dev and test)")
        require_at_least(self, max_new_tokens=1, n_groups=1, cases_per_batch=1, oaks_max_new_tokens=1)

    def make_cases(self) -> list[DetectionCase]:
        cases: list[DetectionCase] = []
        if "records" in self.datasets:
            cases += _first_groups(records_cases(self.splits, self.records_seed), self.n_groups)
        if "quantity" in self.datasets:
            cases += _first_groups(quantity_cases(self.splits, self.quantity_seed), self.n_groups)
        if "oaks" in self.datasets:
            cases += _first_groups(oaks_cases(self.oaks_source, self.oaks_split), self.n_groups)
        return cases

    def detectors_for(self, case: DetectionCase) -> tuple[str, ...]:
        if case.dataset == "oaks":
            return self.oaks_detectors
        names = self.record_detectors if case.dataset == "records" else self.quantity_detectors
        return tuple(n for n in names if n not in TEXT_DETECTORS or case.split in self.text_detector_splits)

    def run_cases(self, model: kvprobe.Model, cases: list[DetectionCase], state: RunState | None = None
                  ) -> list[list[dict[str, Any]]]:
        """Every (pair, detector) row of a batch; the JSON classifiers run as one generation batch."""
        natural = [c for c in cases if c.dataset == "oaks"]
        rows = dict(zip((c.case_id for c in natural), self.run_natural(model, natural))) if natural else {}
        others = [c for c in cases if c.dataset != "oaks"]
        rows.update(zip((c.case_id for c in others), self.run_records(model, others) if others else []))
        return [rows[c.case_id] for c in cases]

    def run_natural(self, model: kvprobe.Model, cases: list[DetectionCase]) -> list[list[dict[str, Any]]]:
        """The oaks rows of a batch: one per (pair, detector), the question and annotation columns beside."""
        verdicts = run_natural_detectors(model, [c.pair for c in cases], [c.question or "" for c in cases],
                                         self.oaks_detectors, self.oaks_max_new_tokens, self.chat, self.allow_fence)
        return [[{"case_id": c.case_id, "dataset": c.dataset, "group": c.group, "split": c.split,
                  "relation": c.relation, "label": c.label, **c.columns, "detector": n, **v[n]}
                 for n in self.oaks_detectors] for c, v in zip(cases, verdicts)]

    def run_records(self, model: kvprobe.Model, cases: list[DetectionCase]) -> list[list[dict[str, Any]]]:
        """The records and quantity rows of a batch."""
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
