"""The note-control study: which note tokens, prompt wording and note content make a control abstain.

Built on the quantity task (120 test groups x 2 information conditions = 240 histories per
profile), it asks the UNRELATED question ("What is the inspection label on {envelope}? ...";
reference: the label's color; every other answer is wrong) under the configurations of
:mod:`.configurations`: the paper's 14 control-factor configurations (seed L3821-3824), the
near/far matched occurrence (L3846-3853) and the note ablations of tab:v41_note_controls under
the repeated and a varied note (L5389-5413).

A case is (group, information condition, prompt profile); every profile is its own prefill
(:mod:`.profiles`; consecutive profiles of a group share their common prefix K/V). The
configurations of a case are its conditions (masks of the windows of :mod:`.windows`, record A,
or full access), each asked with the question its configuration names (the original unrelated
question, or the explicit one on the unchanged history). Every row holds the greedy answer
graded with the paper's label rule (``quantity_task.grading.grade_label``, rule ``fenced``) and
the first-value-token margin log p(label's first token) - log p(UNKNOWN's first token) under the
canonical JSON prefix (:mod:`.first_token`), with its change against the full access of the same
history and question.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.studies.common.protocol import (CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least,
                                      require_choices)
from kvprobe.studies.datasets.quantity_task import grading, tasks
from kvprobe.studies.datasets.quantity_task import strings as task_strings

from . import strings
from .configurations import CATALOG, CONFIGURATIONS, CURRENT, NAMES, Configuration
from .first_token import label_candidates
from .profiles import PROFILES, VariedNote, build_varied_note, check_varied, note_layout, profile_prompt
from .windows import WINDOWS, note_windows, token_pieces

#: Answer budget (paper L3822-3823: 40 tokens, greedy, EOS).
MAX_NEW_TOKENS = 40
#: Cases answered in one batch (10: the ten histories of one group, measured fastest of 4, 10 on 2 CPUs).
CASES_PER_BATCH = 10


@functools.lru_cache(maxsize=4)
def _varied_note(tokenizer: Any, case: tasks.Case) -> VariedNote:
    """:func:`build_varied_note`, built once per (tokenizer, case): a pure function's memo, not run state."""
    return build_varied_note(tokenizer, case)


@dataclass(frozen=True)
class ProfileCase:
    """A quantity-task case (a group in one information condition) under one prompt profile."""

    task: tasks.Case
    profile: str

    @property
    def case_id(self) -> str:
        return f"{self.task.case_id}/{self.profile}"

    @property
    def unit_dependent(self) -> bool:
        """A replacement whose B takes its unit from A (the paper's unit-dependent replacement cases)."""
        return self.task.group.relation == "replacement" and self.task.information == "unit_from_a"


@dataclass
class NoteControlsStudy(HistoryStudy):
    """Unrelated-label answers under note windows, prompt profiles and a varied note (module docstring)."""

    name: ClassVar[str] = "note-controls"
    #: The study's own strings and the quantity task's (the unrelated question, the task prompts).
    strings: ClassVar[tuple[ModuleType, ...]] = (strings, task_strings)
    #: Generator seed of the quantity-task groups (values, units, entity names, label colors).
    seed: int = tasks.TaskConfig.seed
    #: Run only the first N test groups (each in both information conditions); None: all 120.
    n_groups: int | None = None
    #: Prompt profiles to prefill: original (repeated note), plain (gray->plain), varied (authored distinct
    #: sentences, same token count), no-note, no-unknown (system without the UNKNOWN clause).
    profiles: tuple[str, ...] = PROFILES
    #: Configurations to run (those whose profile is in --profiles): the paper's 14, near/far, and the note
    #: ablations under the repeated and varied note; see the README for the list.
    configurations: tuple[str, ...] = NAMES
    #: Also ask the current quantity question under full, whole-source and number-only access on the
    #: unit-dependent replacement cases, in the original and varied profiles (paper L5433-5437).
    current_queries: bool = False
    #: Note tokens skipped before the early window (0: the note's first word; the paper's quoted window
    #: starts there, seed L3803-3806).
    control_skip: int = 0
    #: Where the middle window lies: the fraction of the note's free room before it (UNCLEAR; 0.5: centered).
    middle_placement: float = 0.5
    #: Where the late window lies (UNCLEAR; 1.0: it ends with the note's last token).
    late_placement: float = 1.0
    #: Greedy answer budget in tokens (paper: 40).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Cases answered in one batch.
    cases_per_batch: int = CASES_PER_BATCH

    def __post_init__(self) -> None:
        self.profiles, self.configurations = tuple(self.profiles), tuple(self.configurations)
        require_at_least(self, n_groups=1, max_new_tokens=1, cases_per_batch=1, control_skip=0)
        require_choices(self, profiles=PROFILES, configurations=NAMES)
        for name in ("profiles", "configurations"):
            values = getattr(self, name)
            if len(set(values)) != len(values):
                raise InvalidParameter(name, f"repeats a value: {', '.join(values)}")
        for name in ("middle_placement", "late_placement"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
                raise InvalidParameter(name, f"must lie in [0, 1], got {value!r}")
        if not self.selected():
            raise InvalidParameter("configurations", f"none of {', '.join(self.configurations)} belongs to the "
                                   f"profiles {', '.join(self.profiles)}")

    # ------------------------------------------------------------------ what runs
    def selected(self) -> tuple[Configuration, ...]:
        """The configurations that run: those named whose profile is prefilled, plus the current ones."""
        chosen = [c for c in CONFIGURATIONS if c.name in self.configurations]
        if self.current_queries:
            chosen += CURRENT
        return tuple(c for c in chosen if c.profile in self.profiles)

    def _applies(self, config: Configuration, case: ProfileCase) -> bool:
        return config.profile == case.profile and (config.question != "current" or case.unit_dependent)

    def case_configurations(self, case: ProfileCase) -> list[Configuration]:
        """The configurations answered in ``case``."""
        return [c for c in self.selected() if self._applies(c, case)]

    def task_config(self) -> tasks.TaskConfig:
        return tasks.TaskConfig(seed=self.seed, n_groups=self.n_groups)

    def make_cases(self) -> list[ProfileCase]:
        out = []
        for group in tasks.generate_groups(self.task_config()):
            for profile in PROFILES:
                for info in tasks.INFORMATION:
                    case = ProfileCase(tasks.Case(group, info), profile)
                    if self.case_configurations(case):
                        out.append(case)
        return out

    def data_sha256(self) -> str:
        """The quantity-task cases' digest (:func:`tasks.dataset_hash` of the selected groups, both information
        conditions)."""
        return tasks.dataset_hash(tasks.generate_cases(self.task_config()))

    def config_extra(self) -> dict[str, Any]:
        return {"configurations_run": [c.name for c in self.selected()]}

    # ------------------------------------------------------------------ protocol hooks
    def group(self, case: ProfileCase) -> str:
        return case.task.group.group_id

    def reuse_key(self, case: ProfileCase) -> str:
        return case.task.group.group_id

    def varied_note(self, model: kvprobe.Model) -> VariedNote:
        """The varied note of ``model``'s tokenizer, built from the study's first varied case: the same note in
        every case of a run, whichever cases an invocation (a resumed run, a Ray worker) runs."""
        first = next(c for c in self.cases() if c.profile == "varied")
        return _varied_note(model.tokenizer, first.task)

    def prompt(self, model: kvprobe.Model, case: ProfileCase) -> kvprobe.Prompt:
        note = self.varied_note(model).text if case.profile == "varied" else None
        return profile_prompt(case.task, case.profile, varied_note=note)

    def questions(self, model: kvprobe.Model, case: ProfileCase, history: kvprobe.History) -> list[Question]:
        kinds = {c.question for c in self.case_configurations(case)}
        g = case.task.group
        out = []
        if kinds & {"unrelated", "explicit"}:
            candidates = label_candidates(model.tokenizer, g.color)
            texts = {"unrelated": task_strings.UNRELATED_QUESTION, "explicit": strings.EXPLICIT_QUESTION}
            out += [Question(kind, texts[kind].format(envelope=g.envelope), candidates, g.color)
                    for kind in ("unrelated", "explicit") if kind in kinds]
        if "current" in kinds:
            q = next(q for q in tasks.queries(case.task) if q.role == "current")
            out.append(Question("current", q.question, q.candidates, q.reference))
        return out

    def conditions(self, model: kvprobe.Model, case: ProfileCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        configs = self.case_configurations(case)
        accesses = {c.access for c in configs}
        windows: dict[str, kvprobe.TokenSpan] = {}
        if accesses & set(WINDOWS):
            pieces = token_pieces(history.text, history.offsets)
            ids = history.input_ids.tolist()
            windows = note_windows(ids, pieces, history.span("note"), len(history.span("A")),
                                   skip=self.control_skip, middle=self.middle_placement, late=self.late_placement,
                                   matched=bool(accesses & {"near", "far"}))
            if "near" in windows and ids[windows["near"].start:windows["near"].end] != \
                    ids[windows["far"].start:windows["far"].end]:
                raise AssertionError(f"{case.case_id}: the near and far windows hold different token ids")
        out: dict[str, kvprobe.Condition] = {}
        for c in configs:
            if c.access == "full":
                out[c.name] = kvprobe.Full()
            elif c.access in ("whole-a", "source"):
                out[c.name] = kvprobe.Mask(history.span("A"), name=c.name)
            elif c.access == "number":
                out[c.name] = kvprobe.Mask(tasks.number_span(history, case.task), name=c.name)
            else:
                out[c.name] = kvprobe.Mask(windows[c.access], name=c.name)
        return out

    def question_conditions(self, run: CaseRun, question: Question) -> dict[str, kvprobe.Condition]:
        return {name: c for name, c in run.conditions.items() if CATALOG[name].question == question.query}

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """The note span, record A's size and the token shift against the original profile's history; the
        varied note is proven equal to the repeated one outside the note (ids and positions)."""
        case, history = run.case, run.history
        has_note = "note" in history.rendered.segments
        run.extra["note"] = history.span("note") if has_note else None
        run.extra["a_tokens"] = len(history.span("A"))
        if case.profile == "varied":
            check_varied(model.tokenizer, case.task, self.varied_note(model).text)
        if case.profile == "original":
            run.extra["shift"] = 0
        else:
            original = note_layout(model.tokenizer, profile_prompt(case.task, "original"))
            run.extra["shift"] = len(history) - len(original.ids)

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        case, history, config = run.case, run.history, CATALOG[condition]
        g = case.task.group
        out, scores = answers[condition].generation, answers[condition].scores
        original = run.originals[condition]
        spans = list(original.spans) if isinstance(original, kvprobe.Mask) else []
        note = run.extra["note"]
        reference = answers.get(config.reference)
        margin = scores.margin()
        if config.question == "current":
            grade = grading.grade_quantity(out.text, out.stop_reason, question.info, old=g.old_value,
                                           rule="fenced")
        else:
            grade = grading.grade_label(out.text, out.stop_reason, question.info, rule="fenced")
        label = config.question != "current"
        return {
            "group_id": g.group_id,
            "relation": g.relation,
            "information": case.task.information,
            "profile": case.profile,
            "configuration": condition,
            "question_kind": config.question,
            "access": config.access,
            "reference_configuration": config.reference,
            "question_sha256": hashlib.sha256(question.text.encode()).hexdigest()[:16],
            "reference": question.info,
            "masked_spans": [[s.start, s.end] for s in spans],
            "note_offsets": ([[s.start - note.start, s.end - note.start] for s in spans]
                             if note and all(note.start <= s.start and s.end <= note.end for s in spans) else None),
            "masked_text": [history.token_text(s) for s in spans],
            "n_masked": sum(len(s) for s in spans),
            "note_span": [note.start, note.end] if note else None,
            "note_tokens": len(note) if note else 0,
            "a_tokens": run.extra["a_tokens"],
            "position_shift": run.extra["shift"],
            "candidates": list(question.candidates),
            "logp_right": round(scores[0], 6),
            "logp_other": round(scores[1], 6),
            "first_token_margin": round(margin, 6) if label else None,
            "candidate_margin": None if label else round(margin, 6),
            "margin_change_vs_reference": (None if reference is None or config.reference == condition
                                           else round(margin - reference.scores.margin(), 6)),
            "answer": grade.answer,
            "category": grade.category,
            "label_correct": grade.complete if label else None,
            "lenient_correct": grade.lenient_complete,
            "quantity_complete": None if label else grade.complete,
        }
