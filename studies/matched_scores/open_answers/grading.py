"""Grading open OAKS answers: the rule grader, the literal-quotation check, the source-aware model grader.

Source-aware model grader (paper L4576-4603): per question, the judge sees the complete earlier,
later and unrelated excerpts, the question and the reference, and each distinct answer text of the
question (never the generator, the access condition or an earlier score); exact repeats share one
judgment. It gives five verdicts (``strings.PROMPTS``), one prompt each:

* per question: ``answerability`` (answerable / partial / unanswerable / ambiguous) and
  ``reference_support`` (supported / partial / unsupported / mismatched);
* per distinct answer: ``completeness`` (complete / partial / abstain / wrong), ``agreement`` with the
  reference (yes / no, excerpts shown: the same grader's reference agreement) and ``reference_only``
  (yes / no, without the excerpts: the paper's third protocol, a separate reference-only rubric).

An abstention is justified when the question is not judged answerable. A complete answer also needs
EOS (L4622); the summary applies that. The prompts go through the shared judge protocols
(:mod:`kvprobe.studies.common.judge`): a client with ``complete_many`` (a local model,
:class:`kvprobe.studies.common.local_judge.LocalJudgeClient`) is asked one prompt per request and its
label is the first label word of its free reply (:func:`first_label`; none: ``unparsed``); any other
:class:`~kvprobe.studies.common.judge.JudgeClient` (a hosted model) gets the paper's batched JSON protocol
(:class:`~kvprobe.studies.common.judge.BatchedJudge`, at most 48 prompts a request).

Rule grader (offline default, ``grader = rule-v1``; answers of one-word references, as in the generated
demonstration set), from the answer text:

* ``abstain``: it is empty or declines (the shared decline phrases, ``answers.declines``);
* ``complete``: otherwise, the reference occurs in it (word-bounded after SQuAD normalization) and the old
  answer does not;
* ``wrong``: otherwise (the old answer, both answers, or neither). The rule never says ``partial``.

Its reference agreement and reference-only verdicts are both "the reference occurs, the old answer does
not", so under the rule grader the three protocols coincide; its answerability is "the reference occurs in
the later excerpt" and its reference support "supported" when so.

Literal quotation of the masked record (``quotes_old_source``): the first run of :data:`QUOTE_WORDS`
consecutive words of the answer (lower-cased, punctuation stripped) that occurs in the earlier excerpt (the
record the mask hides) and in none of the texts the masked reader still sees (the question, the later and the
unrelated excerpts); None if there is none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import kvprobe
from kvprobe.studies.common.answers import contains_answer, declines
from kvprobe.studies.common.grades import GRADES, read_grade_lines
from kvprobe.studies.common.local_judge import LocalJudgeClient

from . import strings

RULE_GRADER = "rule-v1"
#: A reply that gives none of the labels.
UNPARSED = "unparsed"
#: Words in a literal quotation of the masked record (UNCLEAR, ours).
QUOTE_WORDS = 4
_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)?")


def words(text: str) -> list[str]:
    """Lower-cased words of ``text`` (letters and digits, an inner apostrophe kept).

    Example: ``words("Dick's boat, at Hammersmith.")`` is ``["dick's", "boat", "at", "hammersmith"]``.
    """
    return _WORD.findall(text.replace("\u2019", "'").casefold())


def _ngrams(ws: Sequence[str], n: int) -> set[tuple[str, ...]]:
    return {tuple(ws[i:i + n]) for i in range(len(ws) - n + 1)}


def masked_quote(answer: str, masked: str, visible: Sequence[str], n: int = QUOTE_WORDS) -> str | None:
    """The answer's first ``n``-word run that occurs in ``masked`` and in none of ``visible`` (module docstring).

    Example: ``masked_quote("He rowed to Hammersmith by boat", "Dick rowed to Hammersmith at noon",
    ["Dick rowed to Putney at noon"], n=3)`` is ``"rowed to hammersmith"``.
    """
    seen = set().union(*(_ngrams(words(v), n) for v in visible)) if visible else set()
    source = _ngrams(words(masked), n) - seen
    ws = words(answer)
    for i in range(len(ws) - n + 1):
        if tuple(ws[i:i + n]) in source:
            return " ".join(ws[i:i + n])
    return None


def rule_label(output: str, reference: str, old: str) -> str:
    """``complete``, ``abstain`` or ``wrong`` (module docstring).

    Example: ``rule_label("It is Hammersmith, not Putney.", "Hammersmith", "Putney")`` is ``"wrong"``.
    """
    if not output.strip() or declines(output):
        return "abstain"
    return "complete" if contains_answer(output, [reference]) and not contains_answer(output, [old]) else "wrong"


def rule_columns(output: str, stop_reason: str, reference: str, old: str, masked: str,
                 visible: Sequence[str]) -> dict[str, Any]:
    """The grading columns of one result row: the rule label, whether it names the reference and the old answer,
    the literal quotation of the masked record."""
    return {"label": rule_label(output, reference, old), "mentions_reference": contains_answer(output, [reference]),
            "mentions_old": contains_answer(output, [old]), "quotes_old_source": masked_quote(output, masked, visible),
            "grader": RULE_GRADER}


def rule_verdicts(row: dict[str, Any]) -> dict[str, str]:
    """The rule grader's five verdicts of one row (module docstring)."""
    agrees = "yes" if row["label"] == "complete" else "no"
    known = contains_answer(row["later"], [row["reference"]])
    return {"answerability": "answerable" if known else "unanswerable",
            "reference_support": "supported" if known else "unsupported",
            "completeness": row["label"], "agreement": agrees, "reference_only": agrees}


# ----------------------------------------------------------------------------- the model grader

def prompt(kind: str, row: dict[str, Any]) -> str:
    """The complete prompt of one verdict ``kind`` (``strings.PROMPTS``) for a result row: its excerpts, question,
    reference and (answer kinds) answer text; never the condition or the model."""
    template = strings.PROMPTS[kind][0]
    return template.format(earlier=row["earlier"], later=row["later"], unrelated=row["unrelated"],
                           question=row["question"], reference=row["reference"], answer=row["output"].strip())


def first_label(labels: Sequence[str]):
    """A reply reader: the label whose word occurs first in the reply (case-insensitive, whole words), else
    :data:`UNPARSED`.

    Example: ``first_label(("complete", "partial"))("Partial. It omits ...")`` is ``"partial"``.
    """
    pattern = re.compile(r"(?<![\w-])(" + "|".join(map(re.escape, labels)) + r")(?![\w-])", re.IGNORECASE)

    def read(reply: str) -> str:
        m = pattern.search(reply)
        return m.group(1).lower() if m else UNPARSED
    return read


def make_judge(client: Any, kind: str, log_path: str | Path | None = None, seed: int = 0):
    """The judge of one verdict ``kind``: one prompt per request, the first label word (a client with
    ``complete_many``: a local model; it reuses the replies ``log_path`` holds from the same model); else the
    paper's batched JSON protocol."""
    from kvprobe.studies.common.judge import BatchedJudge, PromptJudge

    labels = strings.PROMPTS[kind][1]
    if hasattr(client, "complete_many"):
        return PromptJudge(client, label_of=first_label(labels), log_path=log_path, name=f"source-aware-{kind}",
                           resume=log_path is not None)
    return BatchedJudge(client, labels=labels, seed=seed, log_path=log_path, name=f"source-aware-{kind}")


class PrefixSharingClient(LocalJudgeClient):
    """A :class:`~kvprobe.studies.common.local_judge.LocalJudgeClient` whose prefill reuses K/V: each prompt starts
    from the one of its ``keep`` most recent histories sharing the longest token prefix with it
    (``Model.prefill(reuse=...)``: equal to a fresh prefill up to float rounding). The prompts of one question share
    their excerpts (most of each prompt), so :func:`grade_rows` asks a few questions' prompts at a time."""

    keep = 24
    _recent: list | None = None

    def _start(self, ids: Any) -> Any:
        best, shared = None, 0
        for h in self._recent or ():
            m = min(len(ids), len(h.input_ids))
            same = (ids[:m] == h.input_ids[:m].to(ids.device)).long().cumprod(0).sum().item()
            if same > shared:
                best, shared = h, same
        return best

    def prefill(self, prompt: kvprobe.Prompt) -> kvprobe.History:
        rendered, ids, offsets = self.model.tokenize(prompt)
        history = self.model.prefill_tokens(prompt, rendered, ids, offsets, reuse=self._start(ids))
        self._recent = [*(self._recent or []), history][-self.keep:]
        return history


#: Questions whose prompts a local judge is asked together (every verdict kind of them in turn).
QUESTIONS_PER_CALL = 6


def grade_rows(rows: Sequence[dict[str, Any]], client: Any, log_path: str | Path | None = None,
               kinds: Sequence[str] = tuple(strings.PROMPTS), progress: bool = False) -> list[dict[str, Any]]:
    """One grade line per row (``case_id``, ``condition``, each kind's label, the grader): question kinds asked
    once per question, answer kinds once per distinct answer text of a question (identical prompts are judged
    once by the judge protocols). A local client (``complete_many``) is asked :data:`QUESTIONS_PER_CALL` questions
    at a time (their prompts share the excerpts, which :class:`PrefixSharingClient` reuses); a batched client kind
    by kind over all rows."""
    out = [{"case_id": r["case_id"], "condition": r["condition"]} for r in rows]
    judges = {kind: make_judge(client, kind, log_path) for kind in kinds}
    if hasattr(client, "complete_many"):
        by_case: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            by_case.setdefault(r["case_id"], []).append(i)
        cases = list(by_case.values())
        parts = [sum(cases[k:k + QUESTIONS_PER_CALL], []) for k in range(0, len(cases), QUESTIONS_PER_CALL)]
    else:
        parts = [list(range(len(rows)))]
    graders = set()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(rows), desc="source-aware judge", unit="answer")
    for idx in parts:
        for kind, judge in judges.items():
            for i, j in zip(idx, judge.judge([prompt(kind, rows[i]) for i in idx])):
                out[i][kind] = j.label
                graders.add(j.grader.split(":", 1)[1] if ":" in j.grader else j.grader)
        if bar is not None:
            bar.update(len(idx))
    if bar is not None:
        bar.close()
    for line in out:
        line["grader"] = "source-aware:" + ",".join(sorted(graders))
    return out


def grade_run(run_dir: str | Path, client: Any, out_name: str = GRADES,
              log_name: str | None = "judge.jsonl", progress: bool = False) -> Path:
    """Grade every row of a run with a model judge; write ``out_name`` (one JSON line per (case_id, condition)) and
    return its path (``log_name``: every prompt and reply, in the run, written as they are answered; a local
    judge reuses the replies it already holds from the same model, so a killed grading run resumes). Then
    ``common.summary.write_summary("oaks-open", run_dir)`` reads it (``kvprobe report oaks-open RUN
    --judge-model M`` does both with a local model).

    Args:
        client: a :class:`kvprobe.studies.common.judge.JudgeClient` (a local model: ``LocalJudgeClient``; a hosted
            one: users implement it; nothing here opens a network connection).
    """
    from kvprobe.studies.common.runner import read_rows

    run_dir = Path(run_dir)
    rows = list(read_rows(run_dir))
    log = None if log_name is None else run_dir / log_name
    lines = grade_rows(rows, client, log, progress=progress)
    out = run_dir / out_name
    out.write_text("".join(json.dumps(g, sort_keys=True) + "\n" for g in lines))
    return out


def read_grades(path: str | Path) -> dict[tuple[str, str], dict[str, Any]]:
    """``(case_id, condition) -> grade line`` of a grades file; every kind's label must be one of its labels (or
    :data:`UNPARSED`)."""
    return read_grade_lines(path, ("case_id", "condition"), _check_verdicts)


def _check_verdicts(g: dict[str, Any], where: str) -> None:
    bad = [f"{kind} {g.get(kind)!r}" for kind, (_, labels, _) in strings.PROMPTS.items()
           if g.get(kind) not in (*labels, UNPARSED)]
    if bad or "case_id" not in g or "condition" not in g:
        raise ValueError(f"{where}: missing case_id/condition or bad verdicts: {', '.join(bad)}")
