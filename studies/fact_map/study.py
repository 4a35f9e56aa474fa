"""The fact-map study: where the old record's effect lives, over many histories (issue [fact-map]).

The paper's title claim is that positions are not facts: once record A is read,
what it said is also written into later positions. Per history, the study runs
the conditions of one fact map (``kvprobe.studies.fact_map.analysis``: full, the A
mask, A hidden from the question in the upper layers only, each later piece
rebuilt with A hidden alone / cumulatively / in one layer band, and the text
recompute without A) and scores the current and old canonical JSON answers
teacher-forced after the current question. Generation is off by default: the map
is a margin analysis (``--max-new-tokens`` turns greedy answers on).

Data (``--dataset``):

* ``quantity``: the quantity task's replacement groups (``studies/datasets/quantity_task``,
  the paper's section 3 histories: A, inspection, note, B), both information
  conditions (B states its unit, or refers to A for it); source = segment A.
* ``records``: the synthetic record histories whose current answer differs from
  A's (replacement, role swap, explicit rejection; ``studies/datasets/record_histories``),
  with the notebook note before Time 2 as the matched-scores study lays them out;
  source = the Time-1 section.

Rows: one per (case, condition), with the condition's kind, later piece and
layer band, the two log-probabilities and the margin (nats); the recompute
target's and the mask's margins are in every row, so each row carries its own
change against the mask. Costs in rows are token counts (rows must be
reproducible); ``kvprobe map`` times one history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from .analysis import N_BANDS, later_pieces, layer_bands, map_conditions
from kvprobe.studies.datasets.recognition.records import RECORDS_SEED
from kvprobe.studies.common.answers import canonical_answer, normalize
from kvprobe.studies.common.protocol import CaseRun, HistoryStudy, Question, require_at_least, require_choices, use_chat
from kvprobe.studies.datasets.quantity_task import tasks
from kvprobe.studies.datasets.record_histories import NOTES, RecordHistory, question_text, selected_histories, with_note

DATASETS = ("quantity", "records")
#: Quantity information conditions (B states its unit; B refers to A for it).
INFORMATION = tasks.INFORMATION
#: Record variants whose current answer differs from A's value.
REPLACEMENT_VARIANTS = ("replacement", "role_swap", "explicit_rejection")
#: The source segment per dataset (what the recompute target deletes).
SOURCE_SEGMENT = {"quantity": "A", "records": "time1"}
#: A fact map's conditions: name -> (kind, later piece, layer band, condition), as ``map_conditions`` builds them.
MapTable = dict[str, tuple[str, str | None, tuple[int, int] | None, kvprobe.Condition]]


@dataclass(frozen=True)
class MapCase:
    """One history of the study."""

    case_id: str
    group: str
    dataset: str
    variant: str  # quantity: information condition; records: the D3 variant
    family: str  # quantity: unit; records: record family
    current: str
    old: str
    question: str
    item: Any  # tasks.Case or RecordHistory


@dataclass
class FactMapStudy(HistoryStudy):
    """Fact maps of the old record over quantity or record histories."""

    name: ClassVar[str] = "fact-map"
    #: Histories: "quantity" (replacement groups of the quantity task, source = record A) or "records"
    #: (record histories whose current answer differs from A's, source = the Time-1 section).
    dataset: str = "quantity"
    #: quantity: the first N replacement groups (of 60); records: N items of 6 variants taken from the
    #: families in turn (of 50). None: all.
    n_groups: int | None = 20
    #: quantity: information conditions (unit_stated: B states its unit; unit_from_a: B refers to A for it).
    information: tuple[str, ...] = INFORMATION
    #: records: the neutral note inserted before Time 2 ("none": no note).
    note: str = "notebook"
    #: records: generator seed of the record dataset.
    seed: int = RECORDS_SEED
    #: Contiguous layer bands of the heatmap (pieces x bands rebuilds).
    n_bands: int = N_BANDS
    #: Greedy answer budget in tokens (0: candidate margins only, the map's measure).
    max_new_tokens: int = 0
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Cases answered in one batch (each brings about 30 rebuilt caches).
    cases_per_batch: int = 2

    def __post_init__(self) -> None:
        self.information = tuple(self.information)
        require_choices(self, dataset=DATASETS, information=INFORMATION, note=NOTES)
        require_at_least(self, n_groups=1, n_bands=1, max_new_tokens=0, cases_per_batch=1)

    # ------------------------------------------------------------------ cases
    def make_cases(self) -> list[MapCase]:
        return self._quantity_cases() if self.dataset == "quantity" else self._record_cases()

    def _quantity_cases(self) -> list[MapCase]:
        groups = [g for g in tasks.generate_groups() if g.relation == "replacement"]
        if self.n_groups is not None:
            groups = groups[: self.n_groups]
        out = []
        for g in groups:
            for info in self.information:
                case = tasks.Case(g, info)
                current = next(q for q in tasks.queries(case) if q.role == "current")
                out.append(MapCase(case.case_id, g.group_id, "quantity", info, g.unit, g.current_value, g.old_value,
                                   current.question, case))
        return out

    def _record_cases(self) -> list[MapCase]:
        out = []
        for h in selected_histories("test", self.seed, self.n_groups, deadline_unit="hours"):
            c = h.case
            if c.variant not in REPLACEMENT_VARIANTS:
                continue
            kind, question, reference = h.queries()[0]
            if normalize(reference) == normalize(c.old_value):
                continue
            out.append(MapCase(h.case_id, c.group, "records", c.variant, c.family, reference, c.old_value,
                               question_text(question), h))
        return out

    def group(self, case: MapCase) -> str:
        return case.group

    def reuse_key(self, case: MapCase) -> str:
        return case.group

    def prompt(self, model: kvprobe.Model, case: MapCase) -> kvprobe.Prompt:
        if case.dataset == "quantity":
            return tasks.build_prompt(case.item)
        item: RecordHistory = case.item
        return with_note(item.prompt(use_chat(model.tokenizer, self.chat)), self.note)

    def questions(self, model: kvprobe.Model, case: MapCase, history: kvprobe.History) -> list[Question]:
        return [Question("current", case.question, (canonical_answer(case.current), canonical_answer(case.old)))]

    def fact_map(self, model: kvprobe.Model, case: MapCase, history: kvprobe.History
                 ) -> tuple[MapTable, dict[str, Any]]:
        """The case's map (:data:`MapTable`) and its span facts (the source's and every later piece's token span).
        Building it touches no K/V, so :meth:`conditions` and :meth:`setup` each build it."""
        segment = SOURCE_SEGMENT[case.dataset]
        source = history.span(segment)
        pieces = later_pieces(history, source)
        table = map_conditions(model, history, source, pieces, layer_bands(model.arch, self.n_bands), segment)
        facts = {"source": [source.start, source.end], "pieces": {label: [s.start, s.end] for label, s in pieces}}
        return table, facts

    def conditions(self, model: kvprobe.Model, case: MapCase, history: kvprobe.History) -> dict[str, kvprobe.Condition]:
        return {name: access for name, (_, _, _, access) in self.fact_map(model, case, history)[0].items()}

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """The case's map (name -> (kind, piece, band)) and span facts, in ``run.extra`` for its rows."""
        table, run.extra["facts"] = self.fact_map(model, run.case, run.history)
        run.extra["table"] = {name: (kind, piece, band) for name, (kind, piece, band, _) in table.items()}

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        case = run.case
        kind, piece, band = run.extra["table"][condition]
        scores = answers[condition].scores
        info = getattr(run.conditions[condition], "state", None)
        return {
            "dataset": case.dataset, "variant": case.variant, "family": case.family,
            "current": case.current, "old": case.old, "kind": kind, "piece": piece,
            "band": None if band is None else list(band), **run.extra["facts"],
            "lp_current": scores[0], "lp_old": scores[1], "margin": scores.margin(),
            "margin_mask": answers["mask"].scores.margin(),
            "margin_target": answers["recompute"].scores.margin() if "recompute" in answers else None,
            "recomputed_tokens": 0 if info is None else int(info.info.get("recomputed_tokens", 0)),
        }
