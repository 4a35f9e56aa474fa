"""Pluggable grading of session-bias answers (paper app:v17_judge L6139-6183; spec partE E2).

Interface: a :class:`Grader` has a ``name`` and ``grade(tasks) -> verdicts``,
one :class:`Verdict` per :class:`GradeTask`, in order. A task carries only what
the paper's judge sees (question, question type, reference, complete response,
abstention flag): arm, model and prior labels are not in it, so a grader cannot
see them.

:class:`RuleGrader` (default, ours; the paper used GPT-5.6 with the official
LongMemEval rubric, which needs a network):

* an empty or whitespace-only response is incorrect (paper L6170-6171), abstention
  questions included;
* answerable questions: the normalized reference occurs in the normalized response
  as whole words (normalization: Unicode NFKC, case-folded, curly apostrophes made
  straight, possessive/contraction apostrophes dropped, every other
  non-alphanumeric character a space, number words zero..twenty as digits,
  whitespace collapsed). A response naming the old value next to the new one is
  correct, as the official knowledge-update rubric accepts. This is a crude proxy:
  long or paraphrased references (preference rubrics, most multi-session answers)
  are rarely matched verbatim;
* abstention questions: correct when the response declines, i.e. contains one of
  :data:`DECLINE_PHRASES` (e.g. "don't know", "not mentioned", "no information").

:func:`anscheck_prompt` is the official LongMemEval answer-check prompt of a task (``strings.ANSCHECK_*``,
verbatim; chosen as ``get_anscheck_prompt`` chooses: ``'_abs' in question_id`` takes the abstention
prompt, otherwise the question type's), the rubric of both judge graders:

* :class:`OfficialJudge`: LongMemEval's own protocol (``evaluate_qa.py``), one request per distinct prompt,
  the prompt alone, the label ``'yes' in reply.lower()``; for a local model
  (:class:`kvprobe.studies.common.local_judge.LocalJudgeClient`, greedy, at most 10 new tokens) or any
  :class:`JudgeClient`;
* :class:`BatchedJudge`: the paper's batched protocol (shared by every graded study:
  :mod:`kvprobe.studies.common.judge`) around a :class:`JudgeClient` that users implement (nothing here
  opens a network connection): identical full prompts are judged once; the distinct prompts go out in
  random order (seeded) in requests of at most 48 tasks with anonymous ids; a reply must give exactly one
  yes/no verdict per id, else the request is resubmitted (up to ``max_retries`` times, then
  :class:`JudgeError`); the model variant returned with every request is logged (``log_path``, JSON lines)
  and named in each verdict's ``grader``.

Both mark an empty or whitespace-only answer incorrect without asking (paper L6170-6171, L6345-6347).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from kvprobe.studies.common import judge
from kvprobe.studies.common.answers import DECLINE_PHRASES, NUMBER_WORDS, _apostrophes, declines  # noqa: F401 (re-exported)
from kvprobe.studies.common.grades import GRADES
from kvprobe.studies.common.judge import JudgeClient, JudgeError, JudgeReply  # noqa: F401 (re-exported)

from . import strings

@dataclass(frozen=True)
class GradeTask:
    """What a judge sees of one answer (no arm, model or label)."""

    question_id: str
    question_type: str
    question: str
    reference: str
    response: str
    is_abstention: bool


@dataclass(frozen=True)
class Verdict:
    """A judgment: correct or not, a short reason, and which grader (and model variant) gave it."""

    correct: bool
    explanation: str
    grader: str


class Grader(Protocol):
    """Anything with a name that grades a batch of tasks, one verdict per task in order."""

    name: str

    def grade(self, tasks: Sequence[GradeTask]) -> list[Verdict]: ...


def normalize(text: str) -> str:
    """Case-folded words and digits joined by single spaces (module docstring)."""
    t = _apostrophes(text)
    t = re.sub(r"(?<=\w)'(?=\w)", "", t)
    t = re.sub(r"[^\w]+|_", " ", t)
    words = [str(NUMBER_WORDS.index(w)) if w in NUMBER_WORDS else w for w in t.split()]
    return " ".join(words)


def contains_answer(response: str, reference: str) -> bool:
    """The normalized reference occurs as whole words in the normalized response."""
    ref = normalize(reference)
    return bool(ref) and f" {ref} " in f" {normalize(response)} "


class RuleGrader:
    """The default rule-based judge (module docstring)."""

    name = "rule-v1"

    def grade(self, tasks: Sequence[GradeTask]) -> list[Verdict]:
        return [self.grade_one(t) for t in tasks]

    def grade_one(self, task: GradeTask) -> Verdict:
        if not task.response.strip():
            return Verdict(False, "empty answer", self.name)
        if task.is_abstention:
            ok = declines(task.response)
            return Verdict(ok, "declines" if ok else "does not decline", self.name)
        ok = contains_answer(task.response, task.reference)
        return Verdict(ok, "contains the reference" if ok else "reference not found", self.name)


# ----------------------------------------------------------------------------- LLM judge protocol

def anscheck_prompt(task: GradeTask) -> str:
    """The official LongMemEval answer-check prompt of ``task`` (``evaluate_qa.py``, ``get_anscheck_prompt``):
    question, answer and response in its template, the abstention template when the id contains ``_abs``,
    else the question type's (ValueError for a type the official script does not know)."""
    if "_abs" in task.question_id:
        template = strings.ANSCHECK_ABSTENTION
    elif task.question_type in strings.ANSCHECK_BY_TYPE:
        template = strings.ANSCHECK_BY_TYPE[task.question_type]
    else:
        raise ValueError(f"{task.question_id}: no official answer-check prompt for question type "
                         f"{task.question_type!r}")
    return template.format(task.question, task.reference, task.response)


class OfficialJudge:
    """A :class:`Grader` with LongMemEval's own protocol (module docstring): :func:`anscheck_prompt` sent alone,
    once per distinct prompt, label ``'yes' in reply.lower()`` (:func:`kvprobe.studies.common.judge.yes_label`);
    empty answers are incorrect without asking. ``log_path``: JSON lines of every prompt and reply; ``resume``
    and ``progress``: as :class:`kvprobe.studies.common.judge.PromptJudge` (reuse the log's replies, show a bar)."""

    def __init__(self, client: JudgeClient, log_path: str | Path | None = None,
                 name: str = "longmemeval-anscheck", resume: bool = False, progress: bool = False) -> None:
        self.protocol = judge.PromptJudge(client, label_of=judge.yes_label, log_path=log_path, name=name,
                                          resume=resume, progress=progress)
        self.name = name

    @property
    def requests(self) -> int:
        return self.protocol.requests

    def grade(self, tasks: Sequence[GradeTask]) -> list[Verdict]:
        judged = judge.judge_answered(self.protocol, [anscheck_prompt(t) if t.response.strip() else None
                                                      for t in tasks], "no")
        return [Verdict(j.label == "yes", j.explanation, j.grader) for j in judged]


class BatchedJudge:
    """A :class:`Grader` asking a judge model yes/no through the shared protocol (:mod:`kvprobe.studies.common.judge`):
    empty answers are incorrect without asking; every other task becomes its full ``rubric(task)`` prompt
    (default: the official LongMemEval prompt, :func:`anscheck_prompt`).
    Keyword arguments (``batch_size``, ``seed``, ``max_retries``, ``log_path``, ``name``) go to
    :class:`kvprobe.studies.common.judge.BatchedJudge`."""

    def __init__(self, client: JudgeClient, rubric: Callable[[GradeTask], str] = anscheck_prompt,
                 **protocol: Any) -> None:
        self.protocol = judge.BatchedJudge(client, labels=("yes", "no"), **protocol)
        self.rubric, self.name = rubric, self.protocol.name

    @property
    def requests(self) -> int:
        return self.protocol.requests

    def grade(self, tasks: Sequence[GradeTask]) -> list[Verdict]:
        judged = judge.judge_answered(self.protocol, [self.rubric(t) if t.response.strip() else None for t in tasks],
                                      "no")
        return [Verdict(j.label == "yes", j.explanation, j.grader) for j in judged]


# ----------------------------------------------------------------------------- regrading a run



def task_of(row: dict) -> GradeTask:
    """The grading task of one result row (only the fields a judge may see)."""
    return GradeTask(row["case_id"], row["question_type"], row["question"], row["reference"],
                     row["output"] or "", bool(row["is_abstention"]))


def grade_run(run_dir: str | Path, grader: Grader, out_name: str = GRADES) -> Path:
    """Grade every generated row of a run with ``grader``; write ``out_name`` (one JSON line per
    (case_id, arm): correct, explanation, grader). ``common.summary.write_summary`` reads it with
    ``grades=``. Rows are passed in file order; a batching grader shuffles them itself."""
    from kvprobe.studies.common.runner import read_rows

    rows = [r for r in read_rows(run_dir) if not r.get("skipped")]
    verdicts = grader.grade([task_of(r) for r in rows])
    if len(verdicts) != len(rows):
        raise ValueError(f"grader {grader.name!r} returned {len(verdicts)} verdicts for {len(rows)} tasks")
    path = Path(run_dir) / out_name
    with open(path, "w") as f:
        for r, v in zip(rows, verdicts):
            f.write(json.dumps({"case_id": r["case_id"], "arm": r["condition"], "correct": bool(v.correct),
                                "explanation": v.explanation, "grader": v.grader}, sort_keys=True) + "\n")
    return path
