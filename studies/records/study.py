"""The record-history study: seven policies x three queries per history (paper partD section 3).

Per history the prompt is prefilled once; each query is answered on its own copy
of the cache under each condition, the paper's policies (greedy, 40 tokens, EOS stop):

* ``keep-all``: full access;
* ``detector-mask`` / ``detector-recompute``: hide record A, or delete the whole
  Time-1 section and prefill again, when the detector calls B a replacement;
* ``oracle-mask`` / ``oracle-recompute``: the same operations given the true label;
* ``latest-record``: hide A whenever B concerns A's entity and attribute, confirmations
  included (an informed baseline, L5460-5463);
* ``query-aware-mask``: the detector mask for current queries, full access for
  historical and unrelated ones;
* ``always-mask`` (ours, not one of the paper's seven): hide A in every history. It
  is the acted-on outcome of every case, which the coverage curves need (as in the
  paper's matched-score experiment, where the mask is applied unconditionally,
  partD section 6);
* ``always-control`` (ours, with ``note="notebook"`` only): hide as many tokens as A
  from the start of the neutral note the paper's matched-score experiment adds before
  Time 2 in every arm (seed L5574-5577; :mod:`.control`), the equal-token control of
  ``always-mask``.

``condition_set`` chooses the conditions (keep-all, the reference of every change, is required).
``deadline_unit="hours"`` states the deadline family in hours, as the paper's record
dataset does (its quantity family); ``note="notebook"`` adds the note in every condition.

Conditions that reduce to the same operation share one generated answer (L5466-5467):
on the study protocol (:class:`~kvprobe.studies.common.protocol.HistoryStudy`) the
conditions the policies apply (:data:`APPLIED`: ``full``, ``mask``, ``control-mask``, ``recompute``) are the
protocol's conditions, each query is answered under the operations its conditions need, and
:meth:`RecordsStudy.rows` writes one row per condition (``condition`` = the paper's policy,
``operation`` = what it applied).
Detector decisions come from a detection run (``detections``: its directory, the
decisions of one detector shared by every generator, as in the paper) or, when
none is given, from the generator model itself running the detector inline on every
history of a batch at once (:meth:`RecordsStudy.start_batch`, into ``batch.state``). A case
offers every operation one of its conditions could apply whatever the verdict; the operations
are prepared in :meth:`RecordsStudy.setup`, once the verdict is known, and only those applied.
Correct = exact case-folded, whitespace-normalized equality of the JSON answer
field read by the answer-field parser (rules 1-2: extra fields permitted, no fence); malformed JSON is
wrong (L5447-5449, L5453-5454); the strict fenced rule is kept beside it (``correct_fenced``). Every row
also carries the paper's value
category of its answer, the missing-unit flag and whether it wrote an unquoted UNKNOWN
(:mod:`.errors`). The history K/V are checked bit-identical after every case.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.interventions import TextRecompute
from kvprobe.studies.datasets.recognition.records import RECORDS_SEED
from kvprobe.studies.common.answers import grade, normalize
from kvprobe.studies.common.detectors.text import REPLACEMENT, TEXT_DETECTORS, RecordPair, run_text_detectors
from kvprobe.studies.datasets.recognition.cases import SPLITS
from kvprobe.studies.datasets.recognition.families import DEADLINE_UNITS
from kvprobe.studies.datasets.record_histories import MAX_NEW_TOKENS, RecordHistory, question_text, selected_histories
from kvprobe.studies.common.protocol import (Batch, CaseRun, HistoryStudy, InvalidParameter, Question, prepared,
                                             require_at_least, require_choices, use_chat)
from .control import control_mask, with_note
from .errors import RULE, value_columns
from kvprobe.studies.datasets.record_histories import NOTES

#: The default condition set: the paper's seven policies and the always-mask reference (the committed runs').
CONDITIONS = ("keep-all", "detector-mask", "detector-recompute", "oracle-mask", "oracle-recompute",
              "latest-record", "query-aware-mask", "always-mask")
#: Every condition ``condition_set`` may name, in report order (``always-control`` needs a note).
ALL_CONDITIONS = (*CONDITIONS, "always-control")
#: Conditions that need the detector's decisions (without any, the detector is not run).
DETECTOR_CONDITIONS = ("detector-mask", "detector-recompute", "query-aware-mask")
#: What a policy may apply to a query (the protocol's conditions), by the name its rows record in ``operation``, in
#: the order they are prepared: each builds its condition on a case's history (record A hidden, A's equal-token
#: control in the note, the Time-1 section deleted and the rest prefilled again).
APPLIED: dict[str, Callable[[RecordHistory, kvprobe.History], kvprobe.Condition]] = {
    "full": lambda case, history: kvprobe.Full(),
    "mask": lambda case, history: kvprobe.Mask(case.a_span(history), name="mask"),
    "control-mask": lambda case, history: control_mask(history, case.a_span(history)),
    "recompute": lambda case, history: TextRecompute(["time1"]),
}
#: ``detector_decision`` of rows whose run chose no detector condition.
NOT_RUN = "not-run"


def condition_operation(condition: str, query: str, label: int, detected: bool, same_slot: bool) -> str:
    """What a condition (a policy) applies: a name of :data:`APPLIED` (``"full"``, ``"mask"``, ``"control-mask"``,
    ``"recompute"``).

    >>> condition_operation("oracle-mask", "current", 1, False, True)
    'mask'
    >>> condition_operation("always-control", "current", 0, False, True)
    'control-mask'
    """
    act = {"keep-all": False, "detector-mask": detected, "detector-recompute": detected, "oracle-mask": bool(label),
           "oracle-recompute": bool(label), "latest-record": same_slot,
           "query-aware-mask": detected and query == "current", "always-mask": True, "always-control": True}[condition]
    if not act:
        return "full"
    if condition == "always-control":
        return "control-mask"
    return "recompute" if condition.endswith("recompute") else "mask"


def read_decisions(run_dir: str | Path, detector: str, filtered: bool) -> dict[str, str]:
    """Decisions of ``detector`` in a detection run, by record case id (``rec-...``)."""
    from kvprobe.studies.common.runner import read_rows

    key = "filtered" if filtered else "decision"
    out = {}
    for row in read_rows(run_dir):
        if row["dataset"] == "records" and row["detector"] == detector:
            out[row["case_id"].split("/", 1)[1]] = row[key]
    if not out:
        raise ValueError(f"{run_dir}: no {detector!r} decisions on the record dataset")
    return out


@dataclass
class RecordsStudy(HistoryStudy):
    """The 300 test histories under the seven policies (and always-mask, always-control), three queries each."""

    name: ClassVar[str] = "records"
    #: What the policies apply is prepared in :meth:`setup`, once the batch's detector verdicts are known.
    skip_prepare: ClassVar[tuple[str, ...]] = tuple(APPLIED)
    #: Split of the record histories (the paper: the 300 test histories, 50 items x 6 variants).
    split: str = "test"
    #: Run only N items (6 histories each), taken from the families in turn; None: all.
    n_groups: int | None = None
    #: A detection run directory whose decisions the detector conditions use; None: detect inline with the generator.
    detections: str | None = None
    #: The JSON detector whose decisions drive the detector conditions (the paper: asserted-value).
    detector: str = "asserted-value"
    #: Use the detector's lexically filtered decisions (no replacement when A's value occurs in both records).
    lexical_filter: bool = False
    #: Greedy answer budget in tokens (paper L5450-5451: 40).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Generator seed of the record dataset.
    seed: int = RECORDS_SEED
    #: Histories answered in one batch.
    cases_per_batch: int = 4
    #: How the deadline family states its values: date ("March 14") or hours ("107 hours", the paper's dataset).
    deadline_unit: str = "date"
    #: Neutral note inserted before Time 2 in every condition: none, or notebook (the paper's control note, x16).
    note: str = "none"
    #: The conditions (keep-all is required; always-control needs a note): the paper's seven policies,
    #: always-mask, always-control.
    condition_set: tuple[str, ...] = CONDITIONS

    def __post_init__(self) -> None:
        self.condition_set = tuple(self.condition_set)
        require_at_least(self, n_groups=1, max_new_tokens=1, cases_per_batch=1)
        require_choices(self, split=SPLITS, detector=tuple(TEXT_DETECTORS), deadline_unit=DEADLINE_UNITS,
                        note=tuple(NOTES), condition_set=ALL_CONDITIONS)
        if "keep-all" not in self.condition_set or len(set(self.condition_set)) != len(self.condition_set):
            raise InvalidParameter("condition_set", f"must hold keep-all (every change's reference) and no "
                                   f"condition twice, got {','.join(self.condition_set)}")
        if "always-control" in self.condition_set and self.note == "none":
            raise InvalidParameter("note", "the always-control policy hides tokens of the neutral note; "
                                   "give a note (--note notebook) or leave always-control out of --condition-set")
        if self.detections is not None and self.deadline_unit != "date":
            raise InvalidParameter("detections", f"a detection run's decisions concern the records with dates; "
                                   f"with --deadline-unit {self.deadline_unit} the detector runs inline (leave "
                                   "--detections out)")

    def make_cases(self) -> list[RecordHistory]:
        return selected_histories(self.split, self.seed, self.n_groups, self.deadline_unit)

    def data_sha256(self) -> str | None:
        """The detection run's decisions (``detections``), which decide the detector conditions; None inline."""
        if self.detections is None:
            return None
        blob = "\n".join(f"{k}={v}" for k, v in sorted(self.decisions().items()))
        return hashlib.sha256(blob.encode()).hexdigest()

    def decisions(self) -> dict[str, str]:
        """The ``detector``'s decisions in the ``detections`` run, by record case id (:func:`read_decisions`)."""
        assert self.detections is not None
        return read_decisions(self.detections, self.detector, self.lexical_filter)

    def _detect(self, model: kvprobe.Model, batch: Batch) -> list[dict[str, Any]]:
        cases = batch.cases
        if not set(DETECTOR_CONDITIONS) & set(self.condition_set):
            return [{"decision": NOT_RUN, "source": "none"} for _ in cases]
        if self.detections is not None:
            decisions = batch.run_state.memo("decisions", self.decisions)  # read once per invocation
            missing = [c.case_id for c in cases if c.case_id not in decisions]
            if missing:
                raise ValueError(f"{self.detections}: no {self.detector!r} decision for {missing[0]}")
            return [{"decision": decisions[c.case_id], "source": "run"} for c in cases]
        pairs = [RecordPair(c.case.a_text, c.case.b_text, c.case.old_value) for c in cases]
        verdicts = run_text_detectors(model, pairs, [self.detector])
        key = "filtered" if self.lexical_filter else "decision"
        return [{"decision": v[self.detector][key], "source": "inline", "parse": v[self.detector]["parse"]}
                for v in verdicts]

    def operations(self, case: RecordHistory, query: str, detected: bool) -> list[str]:
        """The distinct operations the conditions apply to ``query`` of ``case`` given the detector's verdict
        (``detected``: it calls B a replacement), in the order the conditions first need them."""
        label = case.case.labels["replacement"]
        return list(dict.fromkeys(condition_operation(condition, query, label, detected, case.same_slot)
                                  for condition in self.condition_set))

    @staticmethod
    def detected(run: CaseRun) -> bool:
        """Whether the detector called B a replacement in the case's history (``batch.state["verdicts"]``)."""
        return run.batch.state["verdicts"][run.case.case_id]["decision"] == REPLACEMENT

    # ------------------------------------------------------------------ the protocol's hooks
    def group(self, case: RecordHistory) -> str:
        return case.case.group

    def start_batch(self, model: kvprobe.Model, batch: Batch) -> None:
        """The detector's verdicts on every history of the batch (inline: one generation batch), by case id in
        ``batch.state["verdicts"]``."""
        batch.state["verdicts"] = dict(zip((c.case_id for c in batch.cases), self._detect(model, batch))) \
            if batch.cases else {}

    def prompt(self, model: kvprobe.Model, case: RecordHistory) -> kvprobe.Prompt:
        """The paper's user message, with the neutral note before Time 2 when ``note`` names one."""
        return with_note(case.prompt(use_chat(model.tokenizer, self.chat)), self.note)

    def questions(self, model: kvprobe.Model, case: RecordHistory, history: kvprobe.History) -> list[Question]:
        """The current, historical and unrelated queries; ``info``: the reference answer."""
        return [Question(kind, question_text(question), None, reference)
                for kind, question, reference in case.queries()]

    def conditions(self, model: kvprobe.Model, case: RecordHistory, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        """The operations some condition could apply to some query of the case, whatever the detector's verdict
        (:meth:`setup` prepares those the verdict calls for)."""
        needed = {op for kind, _, _ in case.queries() for detected in (False, True)
                  for op in self.operations(case, kind, detected)}
        return {op: build(case, history) for op, build in APPLIED.items() if op in needed}

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """Prepare the operations the conditions apply to the case's queries under its detector verdict (a
        recompute only when one acts); the others are dropped."""
        detected = self.detected(run)
        needed = {op for q in run.questions for op in self.operations(run.case, q.query, detected)}
        run.conditions = {op: prepared(model, run.history, c) for op, c in run.conditions.items() if op in needed}

    def question_conditions(self, run: CaseRun, question: Question) -> dict[str, kvprobe.Condition]:
        """The operations the conditions apply to this query (each answered once)."""
        return {op: run.conditions[op] for op in self.operations(run.case, question.query, self.detected(run))
                if op in run.conditions}

    def rows(self, run: CaseRun, question: Question, answers: dict[str, decoding.Answer]) -> list[dict[str, Any]]:
        """One row per condition: the answer of the operation it applies (conditions left without one are
        skipped)."""
        detected, out = self.detected(run), []
        label = run.case.case.labels["replacement"]
        for condition in self.condition_set:
            op = condition_operation(condition, question.query, label, detected, run.case.same_slot)
            if op in answers:
                out.append({**self.row(run, question, op, answers),
                            **self.common(run, question, condition, answers[op].generation)})
        return out

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        """The columns of a condition's row besides the common ones; ``condition`` is the operation it applied."""
        c = run.case.case
        g = answers[condition].generation
        values = [c.old_value, c.new_value, run.case.other_value]
        return {"family": c.family, "variant": c.variant, "label": c.labels["replacement"], "operation": condition,
                "detector_decision": run.batch.state["verdicts"][run.case.case_id]["decision"],
                "reference": question.info, "old_value": c.old_value, **grade(g.text, question.info, values, rule=RULE),
                "mentions_old": normalize(c.old_value) in normalize(g.text),
                **value_columns(g.text, question.info, c.old_value)}
