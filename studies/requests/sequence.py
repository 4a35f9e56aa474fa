"""One case of the workload: the resident history, then every condition's update and ten requests.

Per case (one history at one background length):

1. *Cold start* (timed): tokenize and prefill the resident history (records up to the
   other record). It is shared by the case's conditions (the paper's policies), as in the
   paper ("Cold TTFT additionally includes the shared tokenization and history prefill, not an
   independently repeated cold request", L6253); ``prefill_per_condition=True`` prefills it
   again, timed, before every condition instead.
2. Per condition, in an order shuffled per case with ``seed`` (*resident timing*, from B's
   arrival): the detector on (A, B) if the condition uses one; tokenization of the updated
   (or edited) history text; the edit (append B, or re-encode the text without the
   Time-1 section); building the mask if the condition hides A; then the ten questions in
   order, each on its own cache copy (:func:`studies.requests.serving.serve`).

The garbage collector is paused while a condition runs (and collected before it).
Untimed checks: after a condition's questions, the first and last K/V row of every layer
of its cache equal their values before the questions; every appended cache has the
same edge rows as the case's first appended cache (the masked conditions change no K/V,
L6460-6461); the resident cache's digest is unchanged at the end of the case. A failed
check raises. ``cold = history tokenization + prefill + resident``; every component is
reported separately (milliseconds).
"""

from __future__ import annotations

import dataclasses
import gc
import random
import resource
from dataclasses import dataclass
from typing import Any, Sequence

import torch

import kvprobe
from kvprobe.studies.common.answers import grade, normalize
from kvprobe.studies.common.conditions import check_unchanged

from . import conditions as cond
from .detector import Detection, Detector, detector_name
from .serving import (
    Encoded,
    Served,
    edge_rows,
    encode,
    now,
    same_rows,
    seal,
    serve,
)
from .data import Question, WorkloadCase


@dataclass(frozen=True)
class Settings:
    """What decides a sequence (the study's parameters that reach here)."""

    condition_set: tuple[str, ...] = cond.CONDITIONS
    max_new_tokens: int = 40
    oracle: str = "label"
    stored_prefix: bool = False  # recompute: reuse the resident rows before record A (False: encode all again)
    prefill_per_condition: bool = False
    chat: bool = True
    seed: int = 0


def condition_order(case_id: str, condition_set: Sequence[str], seed: int) -> list[str]:
    """The case's shuffled condition order (seeded by ``seed`` and the case id)."""
    order = list(condition_set)
    random.Random(f"{seed}:order:{case_id}").shuffle(order)
    return order


def _ms(seconds: float) -> float:
    return round(1000 * seconds, 3)


@dataclass
class ConditionRun:
    """What one condition did on one case."""

    condition: str
    position: int
    detection: Detection | None
    detect_s: float
    encoded: Encoded
    edit: str
    mask_s: float
    answers: list[tuple[Question, str, Served]]

    @property
    def fired(self) -> bool:
        return bool(self.detection and self.detection.fired)

    @property
    def resident_s(self) -> float:
        return (self.detect_s + self.encoded.tokenize_s + self.encoded.encode_s + self.mask_s
                + sum(s.total_s for _, _, s in self.answers))


def run_condition(model: kvprobe.Model, case: WorkloadCase, resident: kvprobe.History, condition: str,
                  detector: Detector, settings: Settings, questions: Sequence[Question] | None = None,
                  position: int = 0) -> ConditionRun:
    """B arrives on ``resident``; ``condition`` updates the cache and answers the questions (timed parts only)."""
    questions = case.questions() if questions is None else questions
    detection, detect_s = None, 0.0
    if cond.uses_detector(condition):
        t = now()
        detection = detector(model, case.pair)
        detect_s = now() - t
    fired = bool(detection and detection.fired)
    if cond.reencodes(condition, fired, case.label, settings.oracle):
        edit = "reencode"
        enc = encode(model, case.prompt(settings.chat, "edited"), reuse=resident if settings.stored_prefix else None)
    else:
        edit = "append"
        enc = encode(model, case.prompt(settings.chat, "updated"), reuse=resident)
    history = enc.history
    t = now()
    hides = edit == "append" and any(cond.masks(condition, fired, q.kind) for q in questions)
    mask = kvprobe.Mask(case.a_span(history), name="mask") if hides else None
    mask_s = now() - t
    full = kvprobe.Full()
    before = edge_rows(history)  # untimed
    answers = []
    for q in questions:
        op = cond.operation(condition, q.kind, fired, case.label, settings.oracle)
        access = mask if op == "mask" else full
        assert access is not None
        answers.append((q, op, serve(model, history, q.prompt_text, access, settings.max_new_tokens)))
    if not same_rows(before, edge_rows(history)):
        raise RuntimeError(f"{case.case_id} {condition}: the first or last K/V rows changed while the questions ran")
    return ConditionRun(condition, position, detection, detect_s, enc, edit, mask_s, answers)


def run_case(model: kvprobe.Model, case: WorkloadCase, detector: Detector, settings: Settings
             ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every condition on one case: (answer rows in ``condition_set`` order, one timing record per condition)."""
    gc.collect()
    resident = encode(model, case.prompt(settings.chat, "resident"))
    seal(resident.history)
    runs: dict[str, ConditionRun] = {}
    colds: dict[str, Encoded] = {}
    reference_edges: list[torch.Tensor] | None = None
    questions = case.questions()
    for position, condition in enumerate(condition_order(case.case_id, settings.condition_set, settings.seed)):
        cold = resident
        if settings.prefill_per_condition and position > 0:
            gc.collect()
            cold = encode(model, case.prompt(settings.chat, "resident"))
            seal(cold.history)
        gc.collect()
        gc.disable()  # no collector pauses inside the timed sequence (tensors are freed by reference counting)
        try:
            run = runs[condition] = run_condition(model, case, cold.history, condition, detector, settings, questions,
                                                  position)
        finally:
            gc.enable()
        colds[condition] = cold
        if run.edit == "append":
            edges = edge_rows(run.encoded.history)
            if reference_edges is None:
                reference_edges = edges
            elif not same_rows(reference_edges, edges):
                raise RuntimeError(f"{case.case_id} {condition}: the appended cache's first or last K/V rows differ "
                                   "from another condition's")
        if cold is not resident:
            check_unchanged(cold.history, case.case_id)
    check_unchanged(resident.history, case.case_id)
    decisions = {r.detection.decision for r in runs.values() if r.detection is not None}
    if len(decisions) > 1:
        raise RuntimeError(f"{case.case_id}: the detector gave different decisions to different conditions: "
                           f"{decisions}")
    rows = [row for condition in settings.condition_set for row in answer_rows(case, runs[condition])]
    timings = [timing_record(model, case, runs[condition], colds[condition], detector)
               for condition in settings.condition_set]
    return rows, timings


def answer_rows(case: WorkloadCase, run: ConditionRun) -> list[dict[str, Any]]:
    """One reproducible row per question (no timings; the condition under the paper's key ``policy``)."""
    c = case.record.case
    history = run.encoded.history
    det = run.detection
    rows = []
    for q, op, served in run.answers:
        g = served.generation
        rows.append({
            "case_id": case.case_id, "group": case.group, "family": c.family, "variant": c.variant,
            "label": case.label, "lines": case.n_lines, "policy": run.condition, "query": q.kind,
            "query_index": q.index, "question": q.text, "operation": op, "edit": run.edit, "fired": run.fired,
            "detector_decision": None if det is None else det.decision,
            "detector_parse": None if det is None else det.info.get("parse"),
            "reference": q.reference, "old_value": c.old_value, "output": g.text, "stop_reason": g.stop_reason,
            "output_tokens": g.n_tokens, "history_tokens": len(history), "prompt_sha256": history.rendered.sha256,
            **grade(g.text, q.reference, case.values()),
            "mentions_old": normalize(c.old_value) in normalize(g.text),
        })
    return rows


def timing_record(model: kvprobe.Model, case: WorkloadCase, run: ConditionRun, cold: Encoded,
                  detector: Detector) -> dict[str, Any]:
    """The condition's timed components on one case (milliseconds, the condition under the key ``policy``),
    with the facts needed to read them."""
    enc, det = run.encoded, run.detection
    queries = [{"index": q.index, "kind": q.kind, "operation": op, "tokenize_ms": _ms(s.tokenize_s),
                "copy_ms": _ms(s.copy_s), "prefill_ms": _ms(s.prefill_s), "decode_ms": _ms(s.decode_s),
                "total_ms": _ms(s.total_s), "output_tokens": s.generation.n_tokens,
                "stop_reason": s.generation.stop_reason} for q, op, s in run.answers]
    resident_ms = _ms(run.resident_s)
    history_ms = _ms(cold.tokenize_s + cold.encode_s)
    return {
        "case_id": case.case_id, "group": case.group, "lines": case.n_lines, "policy": run.condition,
        "position": run.position, "label": case.label, "variant": case.record.case.variant,
        "detector": detector_name(detector) if cond.uses_detector(run.condition) else None,
        "fired": run.fired, "decision": None if det is None else det.decision,
        "detector_info": None if det is None else det.info, "edit": run.edit,
        "resident_tokens": len(cold.history), "history_tokens": len(enc.history),
        "reused_tokens": enc.reused_tokens, "computed_tokens": enc.computed_tokens,
        "history_tokenize_ms": _ms(cold.tokenize_s), "history_prefill_ms": _ms(cold.encode_s),
        "detect_ms": _ms(run.detect_s), "update_tokenize_ms": _ms(enc.tokenize_s), "edit_ms": _ms(enc.encode_s),
        "mask_ms": _ms(run.mask_s), "queries_ms": round(sum(q["total_ms"] for q in queries), 3),
        "resident_ms": resident_ms, "cold_ms": round(history_ms + resident_ms, 3), "queries": queries,
        "kv_bytes": enc.history.base_state().kv_bytes(), "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "threads": torch.get_num_threads(), "invariants": "ok",
    }


def warm_up(model: kvprobe.Model, case: WorkloadCase, detector: Detector, settings: Settings, n_questions: int = 2
            ) -> None:
    """One untimed sequence (detector, append, a re-encode, ``n_questions`` requests) to warm caches and allocators."""
    resident = seal(encode(model, case.prompt(settings.chat, "resident")).history)
    questions = case.questions()[:n_questions]
    always = dataclasses.replace(settings, oracle="always")
    for condition in ("detector-mask", "oracle-recompute"):
        run_condition(model, case, resident, condition, detector, always, questions)
