"""The batched LLM-judge protocol every graded study shares (paper app:v17_judge L6139-6183; spec partE E2).

A study turns each answer into one complete rubric prompt (question, references,
the answer's displayed text...; never the condition, model or any prior label) and
hands the prompts to :meth:`BatchedJudge.judge`, which returns one
:class:`Judgment` per prompt, in order. The protocol:

* identical prompts are judged once (the paper: "exact repeats share one judgment");
* the distinct prompts go out in random order (seeded) in requests of at most
  :data:`MAX_BATCH` prompts, each under an anonymous id (``task-01``...);
* a reply must be one JSON object (optionally in one Markdown fence) giving exactly
  one label from ``labels`` per id (and, where the judge has ``fields``, one value of
  each field from its allowed values: verdicts a rubric returns beside the label,
  e.g. FactConsolidation's source answerability), else the request is resubmitted,
  up to ``max_retries`` times, then :class:`JudgeError`;
* the model variant the client reports with every reply is logged (``log_path``,
  JSON lines: request, reply, validity) and named in each judgment's ``grader``.

The judge model itself is a :class:`JudgeClient` that users implement (an API
client...): nothing here opens a network connection, so offline runs use each study's
rule grader, or a local model (:class:`kvprobe.studies.common.local_judge.LocalJudgeClient`),
and say so in their reports.

:class:`PromptJudge` is the other protocol, a benchmark's own evaluation (LongMemEval's
``evaluate_qa.py``): one request per distinct prompt, the prompt alone, the label read from the
free reply by a rule (:func:`yes_label`, ``'yes' in reply.lower()``). Small local judges cannot
answer a 48-task JSON request, so a local model grades through this one.

Example::

    class Echo:  # a stand-in client: says "complete" to every task
        def complete(self, prompt):
            ids = [t["id"] for t in json.loads(prompt.split("\\n\\n", 1)[1])]
            results = [{"id": i, "verdict": "complete", "explanation": "ok"} for i in ids]
            return JudgeReply(json.dumps({"results": results}), "echo-1")

    judge = BatchedJudge(Echo(), labels=("complete", "wrong", "abstain"))
    [j.label for j in judge.judge(["rubric of answer 1", "rubric of answer 2"])]  # ['complete', 'complete']
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

#: The largest request (the paper's batches hold at most 48 answers).
MAX_BATCH = 48

#: The request's instructions; ``{labels}`` becomes the allowed verdicts (``"yes" or "no"``).
#: UNCLEAR (paper): the judge request that wraps a batch of rubric prompts. The paper says only
#: that "Each request contains up to 48 tasks in random order, with anonymous task identifiers.
#: A structured response contains one Yes/No decision and a short explanation for each task"
#: (L6152-6155). Ours asks for one JSON object.
BATCH_INSTRUCTIONS = (
    "You grade answers of a chat assistant. Below is a JSON list of tasks; each has an id and a "
    "complete grading prompt. Judge each task on its own, following its prompt. Reply with only one "
    'JSON object of the form {{"results": [{{"id": "<task id>", "verdict": {labels}, {fields}'
    '"explanation": "<one short sentence>"}}]}} with exactly one entry per task id.'
)

#: The names a reply's entries use for themselves (a judge's extra ``fields`` take other names).
RESERVED_KEYS = ("id", "verdict", "explanation")


@dataclass(frozen=True)
class JudgeReply:
    """A judge model's raw reply to one request and the exact model variant that produced it."""

    text: str
    model_variant: str


class JudgeClient(Protocol):
    """Send one request text to a judge model (users implement this; e.g. an API client)."""

    def complete(self, prompt: str) -> JudgeReply: ...


@dataclass(frozen=True)
class Judgment:
    """One verdict: a label from the judge's labels, a short reason, the grader (and model variant), and the
    value of each of the judge's extra ``fields`` (empty for a judge without any)."""

    label: str
    explanation: str
    grader: str
    fields: Mapping[str, str] = field(default_factory=dict)


class JudgeError(RuntimeError):
    """The judge kept returning invalid or incomplete replies."""


def _choices(values: Sequence[str]) -> str:
    quoted = [json.dumps(v) for v in values]
    return " or ".join(quoted) if len(quoted) <= 2 else ", ".join(quoted[:-1]) + " or " + quoted[-1]


def instructions_for(labels: Sequence[str], fields: Mapping[str, Sequence[str]] | None = None) -> str:
    """:data:`BATCH_INSTRUCTIONS` with the allowed verdicts filled in, and each extra field of ``fields``
    (name -> allowed values) in the reply's form after the verdict.

    Example: ``instructions_for(("yes", "no"), {"answerable": ("answerable", "unanswerable")})`` asks for
    ``"verdict": "yes" or "no", "answerable": "answerable" or "unanswerable", "explanation": ...``.
    """
    extra = "".join(f"{json.dumps(name)}: {_choices(values)}, " for name, values in (fields or {}).items())
    return BATCH_INSTRUCTIONS.format(labels=_choices(labels), fields=extra.replace("{", "{{").replace("}", "}}"))


def batch_request(items: Sequence[tuple[str, str]], instructions: str) -> str:
    """The request text of one batch of (anonymous id, full rubric prompt)."""
    tasks = [{"id": i, "prompt": p} for i, p in items]
    return instructions + "\n\n" + json.dumps(tasks, ensure_ascii=False, indent=1)


def parse_reply(text: str, ids: Sequence[str], labels: Sequence[str] = ("yes", "no"),
                fields: Mapping[str, Sequence[str]] | None = None) -> dict[str, tuple[str, str, dict[str, str]]] | None:
    """``{id: (label, explanation, {field: value})}`` if the reply is one JSON object judging exactly ``ids``
    with labels from ``labels`` and, for every extra field of ``fields``, a value from its allowed values
    (both case-insensitive); else None."""
    body = text.strip()
    fence = re.fullmatch(r"```(?:json)?\s*(.*?)\s*```", body, flags=re.DOTALL)
    if fence:
        body = fence.group(1)
    try:
        data = json.loads(body)
    except json.JSONDecodeError:
        return None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list):
        return None
    allowed = {name: {v.lower(): v for v in values} for name, values in {"verdict": labels, **(fields or {})}.items()}
    out: dict[str, tuple[str, str, dict[str, str]]] = {}
    for r in results:
        if not isinstance(r, dict) or r.get("id") not in ids or r["id"] in out:
            return None
        given = {name: str(r.get(name, "")).strip().lower() for name in allowed}
        if any(given[name] not in values for name, values in allowed.items()):
            return None
        out[r["id"]] = (allowed["verdict"][given["verdict"]], str(r.get("explanation", "")),
                        {name: allowed[name][given[name]] for name in fields or {}})
    return out if set(out) == set(ids) else None


class BatchedJudge:
    """The paper's judge protocol around a user-supplied :class:`JudgeClient` (module docstring).

    Args:
        client: sends one request, returns the reply and the model variant.
        labels: the verdicts a reply may give (``("yes", "no")``; FactConsolidation uses
            outcome names such as complete / wrong / abstain).
        instructions: the request's instructions (default :func:`instructions_for` ``labels``, ``fields``).
        batch_size: prompts per request (1..48).
        seed: the order in which distinct prompts are sent.
        max_retries: resubmissions of an invalid reply before :class:`JudgeError`.
        log_path: JSON-lines log of every request and reply (None: no log).
        name: the grader name in each judgment (``name:model_variant``).
        fields: extra verdicts every reply entry gives beside the label (name -> allowed values; none by
            default), returned in each judgment's ``fields``.
    """

    def __init__(self, client: JudgeClient, labels: Sequence[str] = ("yes", "no"), instructions: str | None = None,
                 batch_size: int = MAX_BATCH, seed: int = 0, max_retries: int = 3,
                 log_path: str | Path | None = None, name: str = "llm-judge",
                 fields: Mapping[str, Sequence[str]] | None = None) -> None:
        if not 1 <= batch_size <= MAX_BATCH:
            raise ValueError(f"batch_size must be in 1..{MAX_BATCH}, got {batch_size}")
        for what, values in {"labels": labels, **{f"field {k!r}": v for k, v in (fields or {}).items()}}.items():
            if len(set(map(str.lower, values))) != len(values) or len(values) < 2:
                raise ValueError(f"{what} must be at least two distinct verdicts, got {list(values)}")
        if clash := sorted(set(fields or {}) & set(RESERVED_KEYS)):
            raise ValueError(f"fields may not be named {', '.join(clash)} (a reply entry's own keys)")
        self.client, self.labels, self.batch_size = client, tuple(labels), batch_size
        self.fields = {name: tuple(values) for name, values in (fields or {}).items()}
        self.instructions = (instructions if instructions is not None else
                             instructions_for(self.labels, self.fields))
        self.seed, self.max_retries, self.name = seed, max_retries, name
        self.log_path = None if log_path is None else Path(log_path)
        self.requests = 0

    def judge(self, prompts: Sequence[str]) -> list[Judgment]:
        """One judgment per prompt, in order (identical prompts judged once)."""
        by_prompt: dict[str, list[int]] = {}
        for i, p in enumerate(prompts):
            by_prompt.setdefault(p, []).append(i)
        distinct = list(by_prompt)
        random.Random(self.seed).shuffle(distinct)
        out: list[Judgment | None] = [None] * len(prompts)
        for start in range(0, len(distinct), self.batch_size):
            chunk = distinct[start : start + self.batch_size]
            ids = [f"task-{k + 1:02d}" for k in range(len(chunk))]
            judged, variant = self._ask(list(zip(ids, chunk)), start // self.batch_size)
            for anon, prompt in zip(ids, chunk):
                label, why, values = judged[anon]
                for i in by_prompt[prompt]:
                    out[i] = Judgment(label, why, f"{self.name}:{variant}", values)
        return out  # type: ignore[return-value]

    def _ask(self, items: list[tuple[str, str]], batch: int) -> tuple[dict[str, tuple[str, str, dict[str, str]]], str]:
        request = batch_request(items, self.instructions)
        ids = [i for i, _ in items]
        for attempt in range(self.max_retries + 1):
            reply = self.client.complete(request)
            self.requests += 1
            parsed = parse_reply(reply.text, ids, self.labels, self.fields)
            self._log({"batch": batch, "attempt": attempt, "tasks": len(items), "model_variant": reply.model_variant,
                       "valid": parsed is not None, "request": request, "reply": reply.text})
            if parsed is not None:
                return parsed, reply.model_variant
        raise JudgeError(f"batch {batch}: no valid reply after {self.max_retries + 1} attempts")

    def _log(self, entry: dict) -> None:
        if self.log_path is not None:
            with open(self.log_path, "a") as f:
                f.write(json.dumps(entry, ensure_ascii=False) + "\n")


def judge_answered(judge: BatchedJudge, prompts: Sequence[str | None], empty_label: str,
                   explanation: str = "empty answer") -> list[Judgment]:
    """One judgment per prompt, in order; a ``None`` prompt (an empty answer: the paper marks it wrong without
    asking, L6345-6347) gets ``empty_label`` from ``judge.name`` and is never sent."""
    judged = iter(judge.judge([p for p in prompts if p is not None]))
    return [Judgment(empty_label, explanation, judge.name) if p is None else next(judged) for p in prompts]


# ----------------------------------------------------------------------------- one prompt per request

def yes_label(reply: str) -> str:
    """LongMemEval's reading of a judge reply (``evaluate_qa.py``: ``'yes' in reply.strip().lower()``): "yes" when
    the reply contains "yes" anywhere (also inside a word: "Yesterday", "eyes"), else "no".

    Example: ``yes_label(" Yes.")`` is ``"yes"``; ``yes_label("No, it does not.")`` is ``"no"``.
    """
    return "yes" if "yes" in reply.strip().lower() else "no"


class PromptJudge:
    """A judge asked once per distinct prompt, the prompt alone, its label read from the free reply.

    The protocol of a benchmark's own evaluation script (LongMemEval's ``evaluate_qa.py``: each answer-check
    prompt is the only user message of one request, the label ``'yes' in reply.lower()``), beside the paper's
    batched JSON protocol (:class:`BatchedJudge`). Identical prompts are judged once. A client with
    ``complete_many(prompts)`` (a local model decoding several prompts at once) gets the distinct prompts,
    ``chunk_size`` per call, in order; otherwise ``complete(prompt)`` is called for each. Every request
    and reply is logged as soon as its chunk is answered (``log_path``, JSON lines: prompt, reply, label, model
    variant); each judgment's ``grader`` is ``name:model_variant`` and its explanation the raw reply.

    Resuming: with ``resume=True`` a prompt already in the log under the client's own ``model_variant``
    attribute (a local model's name, dtype and weight digest) takes its logged reply instead of a new request,
    so a killed grading run loses at most one chunk. A client without that attribute cannot show the log is
    its own, and every prompt is asked again.

    Args:
        client: a :class:`JudgeClient` (optionally with ``complete_many`` and ``model_variant``).
        label_of: reply text -> label (default :func:`yes_label`).
        log_path: JSON-lines log (None: no log).
        name: the grader name in each judgment.
        resume: reuse the log's replies (above).
        progress: show a progress bar over the distinct prompts.
        chunk_size: prompts per ``complete_many`` call (and per log write).
    """

    def __init__(self, client: JudgeClient, label_of: Callable[[str], str] = yes_label,
                 log_path: str | Path | None = None, name: str = "judge", resume: bool = False,
                 progress: bool = False, chunk_size: int = 32) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        if resume and log_path is None:
            raise ValueError("resume=True needs a log_path to resume from")
        self.client, self.label_of, self.name = client, label_of, name
        self.log_path = None if log_path is None else Path(log_path)
        self.resume, self.progress, self.chunk_size = resume, progress, chunk_size
        self.requests = 0
        self._known: dict[str, JudgeReply] | None = None  # resuming: the log's replies, read at the first call

    def logged_replies(self) -> dict[str, JudgeReply]:
        """The log's replies from this client's model variant, by prompt (empty unless resuming)."""
        variant = getattr(self.client, "model_variant", None)
        if not self.resume or variant is None or not self.log_path.exists():
            return {}
        found = {}
        with open(self.log_path) as f:
            for n, line in enumerate(f, 1):
                try:
                    entry = json.loads(line)
                except json.JSONDecodeError:
                    raise JudgeError(f"{self.log_path} line {n}: not a JSON object") from None
                if entry.get("model_variant") == variant:
                    found[entry["prompt"]] = JudgeReply(entry["reply"], variant)
        return found

    def judge(self, prompts: Sequence[str]) -> list[Judgment]:
        """One judgment per prompt, in order (identical prompts judged once)."""
        distinct = list(dict.fromkeys(prompts))
        if self._known is None:  # once per judge: several judges may append to one log, each its own prompts
            self._drop_cut_line()
            self._known = self.logged_replies()
        replies = {p: self._known[p] for p in distinct if p in self._known}
        todo = [p for p in distinct if p not in replies]
        bar = None
        if self.progress:
            from tqdm import tqdm

            bar = tqdm(total=len(distinct), initial=len(distinct) - len(todo), desc=f"{self.name} judge",
                       unit="prompt")
        complete_many = getattr(self.client, "complete_many", None)
        for start in range(0, len(todo), self.chunk_size):
            chunk = todo[start:start + self.chunk_size]
            got = list(complete_many(chunk)) if complete_many is not None else [self.client.complete(p) for p in chunk]
            if len(got) != len(chunk):
                raise JudgeError(f"the client returned {len(got)} replies for {len(chunk)} prompts")
            self.requests += len(chunk)
            self._log(chunk, got)
            replies.update(zip(chunk, got))
            if self.resume:  # a later call finds them as it would in the log (this client's variant only)
                variant = getattr(self.client, "model_variant", None)
                self._known.update((p, r) for p, r in zip(chunk, got)
                                   if variant is not None and r.model_variant == variant)
            if bar is not None:
                bar.update(len(chunk))
        if bar is not None:
            bar.close()
        judged = {p: Judgment(self.label_of(r.text), r.text, f"{self.name}:{r.model_variant}")
                  for p, r in replies.items()}
        return [judged[p] for p in prompts]

    def _drop_cut_line(self) -> None:
        """Remove a last log line without its newline (a write cut short by a kill; its prompt is asked again)."""
        if self.log_path is None or not self.log_path.exists():
            return
        data = self.log_path.read_bytes()
        if data and not data.endswith(b"\n"):
            self.log_path.write_bytes(data[:data.rfind(b"\n") + 1])

    def _log(self, prompts: Sequence[str], replies: Sequence[JudgeReply]) -> None:
        if self.log_path is None:
            return
        with open(self.log_path, "a") as f:
            f.write("".join(json.dumps({"model_variant": r.model_variant, "label": self.label_of(r.text),
                                        "prompt": p, "reply": r.text}, ensure_ascii=False) + "\n"
                            for p, r in zip(prompts, replies)))
