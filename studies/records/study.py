"""The record-history study: seven policies x three queries per history (paper partD section 3).

Per history the common prefix is prefilled once; each query is answered on its
own copy of the cache under each policy (greedy, 40 tokens, EOS stop):

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
  partD section 6).

Policies that reduce to the same operation share one generated answer (L5466-5467).
Detector decisions come from a detection run (``detections``: its directory, the
decisions of one detector shared by every generator, as in the paper) or, when
none is given, from the generator model itself running the detector inline.
Correct = exact case-folded, whitespace-normalized equality of the JSON answer
field; malformed JSON is wrong (L5447-5449). The history K/V are checked
bit-identical after every case.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kvprobe
from kvprobe import decoding
from kvprobe.studies.detection.detectors import REPLACEMENT, RecordPair, run_text_detectors, use_chat
from kvprobe.studies.quantity.grading import normalize, parse_strict

from ..conditions import check_unchanged
from ..runner import study_parameters
from .cases import RecordHistory, question_text, record_histories

POLICIES = ("keep-all", "detector-mask", "detector-recompute", "oracle-mask", "oracle-recompute",
            "latest-record", "query-aware-mask", "always-mask")
#: Answer budget (paper L5450-5451).
MAX_NEW_TOKENS = 40


def policy_operation(policy: str, query: str, label: int, detected: bool, same_slot: bool) -> str:
    """The operation a policy applies: ``"full"``, ``"mask"`` or ``"recompute"``."""
    act = {"keep-all": False, "detector-mask": detected, "detector-recompute": detected, "oracle-mask": bool(label),
           "oracle-recompute": bool(label), "latest-record": same_slot,
           "query-aware-mask": detected and query == "current", "always-mask": True}[policy]
    if not act:
        return "full"
    return "recompute" if policy.endswith("recompute") else "mask"


def read_decisions(run_dir: str | Path, detector: str, filtered: bool) -> dict[str, str]:
    """Decisions of ``detector`` in a detection run, by record case id (``rec-...``)."""
    from kvprobe.studies.runner import read_rows

    key = "filtered" if filtered else "decision"
    out = {}
    for row in read_rows(run_dir):
        if row["dataset"] == "records" and row["detector"] == detector:
            out[row["case_id"].split("/", 1)[1]] = row[key]
    if not out:
        raise ValueError(f"{run_dir}: no {detector!r} decisions on the record dataset")
    return out


def first_value(text: str, values: list[str]) -> str | None:
    """The value among ``values`` whose first occurrence in ``text`` comes first (case-folded)."""
    found = [(normalize(text).find(normalize(v)), i) for i, v in enumerate(values)]
    found = [(pos, i) for pos, i in found if pos >= 0]
    return values[min(found)[1]] if found else None


def grade(text: str, reference: str, values: list[str]) -> dict[str, Any]:
    """Exact-field grade (the paper's rule) plus diagnostics.

    ``lenient`` (ours, for models that answer in sentences): of the history's
    values, the first one the output mentions is the reference.
    """
    parsed = parse_strict(text, allow_fence=True)
    return {"correct": bool(parsed.ok and normalize(parsed.answer or "") == normalize(reference)),
            "parse": parsed.reason, "contains": normalize(reference) in normalize(text),
            "lenient": first_value(text, values) == reference}


@dataclass
class RecordsStudy:
    """The 300 test histories under the seven policies (runner protocol)."""

    split: str = "test"
    n_groups: int | None = None  # N items (6 histories each), taken from the families in turn; None: all
    detections: str | None = None  # a detection run directory; None: detect inline with the generator
    detector: str = "asserted-value"
    lexical_filter: bool = False
    max_new_tokens: int = MAX_NEW_TOKENS
    chat: bool | None = None
    seed: int = 20260910
    cases_per_batch: int = 4
    name: str = "records"
    _cases: list[RecordHistory] | None = field(default=None, repr=False, compare=False)
    _decisions: dict[str, str] | None = field(default=None, repr=False, compare=False)

    def config(self) -> dict[str, Any]:
        cfg = study_parameters(self)
        cfg["policies"] = list(POLICIES)
        if self.detections is not None:
            blob = "\n".join(f"{k}={v}" for k, v in sorted(self.decisions().items()))
            cfg["decisions_sha256"] = hashlib.sha256(blob.encode()).hexdigest()
        return cfg

    def cases(self) -> list[RecordHistory]:
        if self._cases is None:
            self._cases = selected_histories(self.split, self.seed, self.n_groups)
        return self._cases

    def decisions(self) -> dict[str, str]:
        if self._decisions is None:
            assert self.detections is not None
            self._decisions = read_decisions(self.detections, self.detector, self.lexical_filter)
        return self._decisions

    def _detect(self, model: kvprobe.Model, cases: list[RecordHistory]) -> list[dict[str, Any]]:
        if self.detections is not None:
            missing = [c.case_id for c in cases if c.case_id not in self.decisions()]
            if missing:
                raise ValueError(f"{self.detections}: no {self.detector!r} decision for {missing[0]}")
            return [{"decision": self.decisions()[c.case_id], "source": "run"} for c in cases]
        pairs = [RecordPair(c.case.a_text, c.case.b_text, c.case.old_value) for c in cases]
        verdicts = run_text_detectors(model, pairs, [self.detector])
        key = "filtered" if self.lexical_filter else "decision"
        return [{"decision": v[self.detector][key], "source": "inline", "parse": v[self.detector]["parse"]}
                for v in verdicts]

    def run_cases(self, model: kvprobe.Model, cases: list[RecordHistory]) -> list[list[dict[str, Any]]]:
        """Every (history, query, policy) row of a batch; distinct operations run in one batch."""
        from kvprobe.interventions import TextRecompute

        chat = use_chat(model, self.chat)
        detected = self._detect(model, cases)
        plans, items = [], []
        for case, det in zip(cases, detected):
            history = model.prefill(case.prompt(chat))
            operations = {"full": kvprobe.Full(), "mask": kvprobe.Mask(case.a_span(history), name="mask"),
                          "recompute": TextRecompute(["time1"])}
            label = case.case.labels["replacement"]
            index: dict[tuple[str, str], int] = {}  # (query, operation) -> its one generation
            plan: dict[tuple[str, str], tuple[str, int]] = {}  # (query, policy) -> (operation, generation)
            for kind, question, reference in case.queries():
                for policy in POLICIES:
                    op = policy_operation(policy, kind, label, det["decision"] == REPLACEMENT, case.same_slot)
                    if (kind, op) not in index:
                        index[(kind, op)] = len(items)
                        items.append((history, kvprobe.Request(question_text(question), operations[op])))
                    plan[(kind, policy)] = (op, index[(kind, op)])
            plans.append((case, det, history, plan, label))
        answers = decoding.answer(model, items, max_new_tokens=self.max_new_tokens)
        out = []
        for case, det, history, plan, label in plans:
            rows = []
            values = [case.case.old_value, case.case.new_value, case.other_value]
            for kind, question, reference in case.queries():
                for policy in POLICIES:
                    op, i = plan[(kind, policy)]
                    g = answers[i].generation
                    rows.append({
                        "case_id": case.case_id, "group": case.case.group, "family": case.case.family,
                        "variant": case.case.variant, "label": label, "query": kind, "policy": policy,
                        "operation": op, "detector_decision": det["decision"], "reference": reference,
                        "old_value": case.case.old_value, "output": g.text, "stop_reason": g.stop_reason,
                        "output_tokens": g.n_tokens, "history_tokens": len(history),
                        "prompt_sha256": history.rendered.sha256, **grade(g.text, reference, values),
                        "mentions_old": normalize(case.case.old_value) in normalize(g.text),
                    })
            check_unchanged(history, case.case_id)
            out.append(rows)
        return out


def selected_histories(split: str, seed: int, n_groups: int | None) -> list[RecordHistory]:
    """The record histories of ``split``, or those of ``n_groups`` items taken from the families in turn."""
    cases = record_histories(split, seed)
    if n_groups is not None:
        groups = _spread_groups(cases, n_groups)
        cases = [c for c in cases if c.case.group in groups]
    return cases


def _spread_groups(cases: list[RecordHistory], n: int) -> set[str]:
    """``n`` items taken from the families in turn (the first item of each family, then the second...)."""
    by_family: dict[str, list[str]] = {}
    for c in cases:
        items = by_family.setdefault(c.case.family, [])
        if c.case.group not in items:
            items.append(c.case.group)
    order = [items[i] for i in range(max(map(len, by_family.values()))) for items in by_family.values()
             if i < len(items)]
    return set(order[:n])
