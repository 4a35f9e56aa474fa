"""The repeated-request cost workload (paper partE E6-E7): the study and its run directory.

Cases are (history, background length) pairs, history-major: 30 histories x
(0, 100, 300) background lines = 90 cases, each running every condition (the paper's
policies) in a seeded shuffled order on one resident history (``studies.requests.sequence``).

Output (``kvprobe run requests``, or :func:`~kvprobe.studies.common.runner.run_study` from Python):

* ``results.jsonl`` (the runner's): one row per (case, condition, question), the condition
  in the protocol's ``condition`` column: the operation the question read (full / mask /
  recompute), the detector's decision, the greedy answer and its grades (exact JSON
  field and the lenient first-value rule of ``studies.records``). No timings, so the
  file is byte-reproducible and resumable.
* ``timings.jsonl`` (its side log, :attr:`RequestsStudy.side_logs`): one line per (case, condition) with every timed component in
  milliseconds (history tokenization and prefill, detection, update tokenization,
  append or re-encode, mask, per question tokenization / cache copy / suffix prefill /
  decode), token counts, KV bytes, peak RSS and threads. It is appended after each
  case is run, before the runner writes the case's rows; a case redone after a crash
  appends new lines and readers keep the last line per (case, condition)
  (:func:`read_timings`), restricted to cases complete in ``results.jsonl``.
* ``config.json``, ``timing.json`` (the runner's), and ``summary.json`` / ``report.md``
  from :func:`studies.common.summary.write_summary`.

Timing on a shared machine: run nothing else meanwhile. Each process warms up once per
background length (one untimed sequence on the first case of that length).

Each condition updates and reads its own cache in a timed sequence
(``studies.requests.sequence``), not a history answered under conditions in one
batch, so the study subclasses the protocol's minimal
:class:`~kvprobe.studies.common.protocol.Study` and runs its cases itself; its rows carry the
protocol's common columns. The protocol still computes its cases (:meth:`RequestsStudy.make_cases`)
and writes its config (the workload's digest is its ``data_sha256``).
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import kvprobe
from kvprobe.studies.common.detectors.text import MAX_NEW_TOKENS as DETECTOR_MAX_NEW_TOKENS
from kvprobe.studies.common.protocol import InvalidParameter, RunState, Study, require_at_least, require_choices, \
    use_chat
from kvprobe.studies.common.runner import append_json_lines, read_rows
from . import conditions as cond
from .detector import DETECTOR_NAMES, Detector, detector_name, make_detector
from .sequence import Settings, run_case, warm_up
from .data import BACKGROUND_PLACES, BACKGROUND_SOURCES, LENGTHS, N_GROUPS, ORDER, SEED, WorkloadCase, \
    workload_cases

#: Answer budget of the 40-token workload (E6; E7 used 256).
MAX_NEW_TOKENS = 40
TIMINGS = "timings.jsonl"


def result_row(row: dict[str, Any]) -> dict[str, Any]:
    """A sequence's answer row as ``results.jsonl`` holds it: its ``policy`` in the protocol's ``condition`` column."""
    return {("condition" if k == "policy" else k): v for k, v in row.items()}


@dataclass
class RequestsStudy(Study):
    """The ten-request workload after one update, under the five conditions (the paper's policies)."""

    name: ClassVar[str] = "requests"
    #: The timing lines of every (case, condition), appended after each case (:func:`read_timings`).
    side_logs: ClassVar[dict[str, str]] = {"timings": TIMINGS}
    #: Record histories of the workload (the paper: 30); None: all 30.
    n_groups: int | None = N_GROUPS
    #: Background lines per history, one case each (the paper: 0, 100 and 300).
    lengths: tuple[int, ...] = LENGTHS
    #: Conditions run on every case, the paper's policies (keep-all, the paired reference, is required).
    condition_set: tuple[str, ...] = cond.CONDITIONS
    #: Greedy answer budget in tokens (E6: 40; E7 used 256).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: The detector: a JSON detector (direct, expanded, asserted-value) or always / never; from Python also
    #: any Detector callable (recorded by its name).
    detector: str = "asserted-value"
    #: Use the detector's lexically filtered decision (no replacement when A's value occurs in both records).
    lexical_filter: bool = False
    #: Greedy budget of the JSON detector in tokens (the paper: 128).
    detector_max_new_tokens: int = DETECTOR_MAX_NEW_TOKENS
    #: A separate model that detects; None: the generator detects (the paper used a fixed Qwen3-4B).
    detector_model: str | None = None
    #: What oracle-recompute deletes: label (the true replacements, the paper's oracle-label recomputation,
    #: L6473) or always (A in every history). UNCLEAR (brief vs paper).
    oracle: str = "label"
    #: Recompute reuses the resident rows before record A (default: re-encode all retained text).
    stored_prefix: bool = False
    #: Prefill the resident history again, timed, before every condition (default: one cold prefill per case).
    prefill_per_condition: bool = False
    #: Background lines: ledger (seeded synthetic) or pg19 (the pg19 data set (kvprobe data)).
    background: str = "ledger"
    #: Where the background lines go: after_time1 or before_time1.
    background_at: str = "after_time1"
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Seed of the record dataset and of the background lines.
    seed: int = SEED
    #: Seed of each case's shuffled condition order.
    order_seed: int = 0
    #: Run one untimed sequence per background length first (warm caches and allocators).
    warmup: bool = True
    #: Cases run per batch (each case is timed on its own).
    cases_per_batch: int = 1

    def __post_init__(self) -> None:
        self.n_groups = N_GROUPS if self.n_groups is None else self.n_groups
        self.lengths = tuple(self.lengths)
        self.condition_set = tuple(self.condition_set)
        require_at_least(self, n_groups=1, lengths=0, max_new_tokens=1, detector_max_new_tokens=1,
                         cases_per_batch=1)
        require_choices(self, condition_set=cond.CONDITIONS, oracle=cond.ORACLE_RULES, background=BACKGROUND_SOURCES,
                        background_at=BACKGROUND_PLACES)
        try:
            cond.check_condition_set(self.condition_set)
        except ValueError as exc:
            raise InvalidParameter("condition_set", str(exc)) from None
        if isinstance(self.detector, str):
            require_choices(self, detector=DETECTOR_NAMES)
        elif not callable(self.detector):
            raise InvalidParameter("detector", f"a detector name or a Detector callable, got {self.detector!r}")

    def make_cases(self) -> list[WorkloadCase]:
        return workload_cases(self.n_groups, self.lengths, self.background, self.background_at, self.seed)

    def data_sha256(self) -> str:
        """A digest of every case's prompt segments and questions."""
        blob = "\n".join(json.dumps([c.case_id, c.segments(), [q.text for q in c.questions()]]) for c in self.cases())
        return hashlib.sha256(blob.encode()).hexdigest()

    def config_extra(self) -> dict[str, Any]:
        """The detector by name (a Detector passed from Python too) and the ten requests' query order."""
        return {"detector": detector_name(self.detector), "order": list(ORDER)}

    def settings(self, model: kvprobe.Model) -> Settings:
        return Settings(self.condition_set, self.max_new_tokens, self.oracle, self.stored_prefix,
                        self.prefill_per_condition, use_chat(model.tokenizer, self.chat), self.order_seed)

    def build_detector(self) -> Detector:
        """The detector callable: the one passed from Python, or the named one (loading ``detector_model``)."""
        if not isinstance(self.detector, str):
            return self.detector
        other = kvprobe.load_model(self.detector_model) if self.detector_model else None
        return make_detector(self.detector, self.lexical_filter, self.detector_max_new_tokens, self.chat, other)

    def run_cases(self, model: kvprobe.Model, cases: list[WorkloadCase], state: RunState | None = None
                  ) -> list[list[dict[str, Any]]]:
        """Each case's answer rows; its timing lines go to the ``timings`` side log as soon as the case is done.
        The detector is built, the invocation stamped and each background length warmed up once per invocation
        (``state``)."""
        state = state or RunState()
        detector, settings = state.memo("detector", self.build_detector), self.settings(model)
        invocation = state.memo("invocation", lambda: time.strftime("%Y-%m-%dT%H:%M:%S"))
        warm: set[tuple[int, int]] = state.memo("warm", set)
        out = []
        for case in cases:
            key = (id(model), case.n_lines)
            if self.warmup and key not in warm:
                warm_up(model, case, detector, settings)
                warm.add(key)
            rows, timings = run_case(model, case, detector, settings)
            if (log := state.logs.get("timings")) is not None:
                append_json_lines(log, [{**t, "model": model.name, "invocation": invocation} for t in timings])
            out.append([result_row(r) for r in rows])
        return out


def read_timings(out_dir: Path | str) -> list[dict[str, Any]]:
    """Timing lines of cases complete in ``results.jsonl``: the last line per (case, condition), in file order."""
    path = Path(out_dir) / TIMINGS
    if not path.exists():
        return []
    done = {r["case_id"] for r in read_rows(out_dir)}
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            try:
                t = json.loads(line)
            except json.JSONDecodeError:  # a line cut off by a kill
                continue
            last.pop((t["case_id"], t["policy"]), None)
            last[(t["case_id"], t["policy"])] = t
    return [t for (case_id, _), t in last.items() if case_id in done]
