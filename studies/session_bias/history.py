"""The history prompt of one question and its three conditions (paper app:guarded_validation, app:v41_public_hard).

Segments (layout ours, UNCLEAR in the paper; texts in ``strings.py``):
``intro``, then per session i (chronological index, 0 = oldest) ``header:i``
("Session i+1, date ...:") and ``session:i`` (its turns, one per line, role
labels included), then ``date`` ("Current date: ..."), rendered with the model's
chat template as one user message after the system message; the question
("Question: ...") follows as the suffix. Session *content* segments are the
``session:i``; every other segment (and the question and generated tokens) gets
r = 0 (paper L5943-5944: "Headers, question tokens, and generated tokens have
r_j = 0"). Reference answers, question types, answer markers (``has_answer``) and
session ids never reach the prompt (L5958-5960).

Session order: the paper's input is "ordered by timestamp" (L5911). With
``order="timestamp"`` (default) sessions are sorted by their parsed date, stably,
so a file already in timestamp order keeps its order; ``order="file"`` keeps
the file order as is. ``SessionLayout.reordered`` records whether sorting moved
anything.

Conditions (all act only on question processing and decoding; the prefilled K/V are
shared and unchanged):

* ``full``: full access;
* ``soft``: ``interventions.SessionOrderBias`` over the content spans, gated by
  ``session_gate`` (b_j = log(oldest_weight) * g(q) * r_j; paper: -log 2);
* ``hard``: a ``kvprobe.Mask`` on exactly the positions with a negative soft bias
  for this question (paper L6192-6193: "Hard masking sets to negative infinity
  exactly the positions assigned a negative soft bias"); when no position has one
  (g(q) = 0 or a single session) it is full access, and the question is *inactive*.
  It is also the public comparison's source mask (L6268-6269: "For public questions
  the source mask follows the fixed temporal/session guard");
* the development policies (:data:`DEVELOPMENT`; paper L5980-5982: "Development compares
  complete-exchange retention, half or quarter weight for the oldest session, and
  question-dependent rules for disabling the bias"): ``soft-half`` and ``soft-quarter``
  (oldest-session weight 1/2 or 1/4, gated), ``soft-half-ungated`` and
  ``soft-quarter-ungated`` (the same without the gate: active whenever S > 1);
  retention is ``full`` (weight 1 adds no bias);
* the query-aware methods at a fixed capacity (:data:`QUERY_AWARE`; paper L6325-6326: "The
  fixed dynamic capacities are ... 512 on public inputs"): ``quest``, ``finch``,
  ``refreshkv`` and the ``recent-pages`` control, with the settings of
  ``studies.common.conditions.query_aware_condition``. They act on every question,
  whatever the gate says.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

import kvprobe
from kvprobe.interventions import SessionOrderBias, session_gate
from kvprobe.prompts import SpanError, TokenSpan
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.conditions import QUERY_AWARE_METHODS, query_aware_condition

from . import strings
from .data import Question, parse_date

#: The primary conditions (the default set): full access, the soft session-order bias, the hard mask.
PRIMARY = ("full", "soft", "hard")
#: The development policies: name -> (oldest-session weight, gated); retention is ``full``.
DEVELOPMENT = {"soft-half": (0.5, True), "soft-quarter": (0.25, True), "soft-half-ungated": (0.5, False),
               "soft-quarter-ungated": (0.25, False)}
#: The query-aware methods at a fixed capacity (paper E4; the recent-page control first).
QUERY_AWARE = QUERY_AWARE_METHODS
#: Every condition a run may ask for, in report order.
CONDITIONS = (*PRIMARY, *DEVELOPMENT, *QUERY_AWARE)
#: The conditions whose policy is the session-order bias (their positions depend on the question).
SESSION_ORDER = ("soft", "hard", *DEVELOPMENT)
#: The paper's fixed capacity for the public histories (L6325-6326).
PUBLIC_CAPACITY = 512
ORDERS = ("timestamp", "file")


@dataclass(frozen=True)
class SessionLayout:
    """Which prompt segments hold session content, oldest first."""

    content_segments: tuple[str, ...]
    header_segments: tuple[str, ...]
    session_ids: tuple[str, ...]
    dates: tuple[str, ...]
    reordered: bool

    @property
    def n_sessions(self) -> int:
        return len(self.content_segments)


def session_text(turns: Any) -> str:
    """A session's content: one ``Role: content`` line per turn."""
    return strings.TURN_SEP.join(
        strings.TURN.format(role=strings.ROLE_LABELS[t.role], content=t.content.strip()) for t in turns)


def ordered_sessions(question: Question, order: str = "timestamp") -> tuple[list[int], bool]:
    """Indices of the question's sessions in prompt order, and whether that differs from file order."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    idx = list(range(len(question.sessions)))
    if order == "timestamp":
        idx.sort(key=lambda i: parse_date(question.sessions[i].date))
    return idx, idx != sorted(idx)


def build_prompt(question: Question, chat: bool = True, order: str = "timestamp"
                 ) -> tuple[kvprobe.Prompt, SessionLayout]:
    """The history prompt of one question and which segments are session content (module docstring)."""
    idx, reordered = ordered_sessions(question, order)
    segs: list[tuple[str, str]] = [("intro", strings.INTRO)]
    content, headers = [], []
    for k, i in enumerate(idx):
        s = question.sessions[i]
        text = session_text(s.turns)
        if not text.strip():
            raise SpanError(f"{question.question_id}: session {s.session_id!r} has no text")
        segs += [(f"header:{k}", strings.SESSION_HEADER.format(number=k + 1, date=s.date)), (f"session:{k}", text)]
        headers.append(f"header:{k}")
        content.append(f"session:{k}")
    segs.append(("date", strings.CURRENT_DATE.format(date=question.question_date)))
    if not chat:
        segs = [("system", strings.SYSTEM), *segs]
    prompt = study_prompt(segs, chat=chat, system=strings.SYSTEM if chat else None, sep=strings.SEGMENT_SEP,
                          question_sep=strings.QUESTION_SEP)
    layout = SessionLayout(tuple(content), tuple(headers), tuple(question.sessions[i].session_id for i in idx),
                           tuple(question.sessions[i].date for i in idx), reordered)
    return prompt, layout


def question_text(question: Question) -> str:
    """The text asked after the history (prefix + question); its gate equals the bare question's."""
    text = strings.QUESTION_PREFIX + question.question.strip()
    if session_gate(text) != session_gate(question.question):
        raise ValueError(f"{question.question_id}: the question prefix {strings.QUESTION_PREFIX!r} changes the gate")
    return text


def content_spans(history: kvprobe.History, layout: SessionLayout) -> list[TokenSpan]:
    """Token spans of the session contents, oldest first (disjoint, in order)."""
    spans = [history.span(name) for name in layout.content_segments]
    for a, b in zip(spans, spans[1:]):
        if a.overlaps(b) or b.start < a.start:
            raise SpanError(f"session spans {a!r} and {b!r} overlap or are out of order (a token crosses "
                            "the boundary; change strings.SEGMENT_SEP)")
    return spans


def negative_spans(bias: torch.Tensor) -> list[TokenSpan]:
    """Maximal runs of positions with a negative bias, as token spans."""
    neg = (bias < 0).tolist()
    spans, start = [], None
    for j, v in enumerate(neg + [False]):
        if v and start is None:
            start = j
        elif not v and start is not None:
            spans.append(TokenSpan(start, j, "negative-bias"))
            start = None
    return spans


@dataclass(frozen=True)
class SessionConditions:
    """The conditions of one question on one prefilled history, and the facts rows record.

    ``gate``, ``active`` and ``biased_tokens`` are the primary policy's (``soft`` at the run's weight, gated;
    ``hard`` hides those ``biased_tokens``); ``negative`` gives every session-order condition's count of
    positions with a negative bias (hidden, for ``hard``): 0 means the condition is full access for this
    question."""

    conditions: dict[str, kvprobe.Condition]
    gate: int
    active: bool
    biased_tokens: int
    content_tokens: int
    negative: dict[str, int] = field(default_factory=dict)


def session_conditions(history: kvprobe.History, layout: SessionLayout, asked: str, oldest_weight: float = 0.5,
                       names: tuple[str, ...] = PRIMARY, capacity: int = PUBLIC_CAPACITY, gated: bool = True
                       ) -> SessionConditions:
    """The conditions ``names`` for the question text ``asked`` (module docstring): ``soft`` (and so ``hard``)
    with ``oldest_weight`` and the gate when ``gated``; the query-aware ones at ``capacity`` tokens."""
    unknown = set(names) - set(CONDITIONS)
    if unknown or not names:
        raise ValueError(f"conditions must be a non-empty subset of {CONDITIONS}, got {names}")
    spans = content_spans(history, layout)
    soft = SessionOrderBias(spans, oldest_weight=oldest_weight, gated=gated, name="soft")
    bias = soft.bias_vector(len(history), asked)
    negative = negative_spans(bias)
    hard = kvprobe.Mask(negative, name="hard") if negative else kvprobe.Full(name="hard")
    table: dict[str, kvprobe.Condition] = {"full": kvprobe.Full(), "soft": soft, "hard": hard}
    counts = {"soft": int((bias < 0).sum()), "hard": int((bias < 0).sum())}
    for name, (weight, policy_gated) in DEVELOPMENT.items():
        if name in names:
            table[name] = SessionOrderBias(spans, oldest_weight=weight, gated=policy_gated, name=name)
            counts[name] = int((table[name].bias_vector(len(history), asked) < 0).sum())
    for method in QUERY_AWARE:
        if method in names:
            table[method] = query_aware_condition(method, capacity)
    return SessionConditions({n: table[n] for n in CONDITIONS if n in names}, gate=session_gate(asked),
                             active=bool(negative), biased_tokens=counts["soft"],
                             content_tokens=sum(len(s) for s in spans),
                             negative={n: counts[n] for n in SESSION_ORDER if n in names})
