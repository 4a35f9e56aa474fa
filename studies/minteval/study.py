"""The MINTEval state-tracking study (paper app:v41_stream L1346-1370, L1401-1411; spec partA sections 1, 1a).

Per session the history (one prompt segment per event, in order) is prefilled once.
Every question (current location, historical location, count, order, multi-hop), each
followed by the boxed-answer instruction, is answered greedily (EOS or 128 tokens)
under the five conditions (the paper's policies):

* ``full``: full access;
* ``source``: hide every movement record but each person's latest (``rules.source_hidden``;
  acquisitions, drops and transfers stay; the rule sees the events only);
* ``value``: hide only the old destination string in each of those records;
* ``recompute``: delete those records' text and prefill the rest again;
* ``online``: hide each of those records from every token after the same person's next
  movement (``OnlineMask``), so later history states no longer read it.

Sessions are a released file (``--source FILE``, ``schema.py``) or, offline, generated from
the bAbI test stories in the same schema (``data.py``; labelled ``generated`` in the
config and report). The bootstrap group of a session is its connected component under shared
bAbI source stories (``components.py``); the session id is kept for the session-level
sensitivity. A session without a superseded movement gets full access under every condition
(nothing to hide). Answers are graded by normalized reference exact match with EOS
(``em``; ``em_strict_boxed``: the box only; ``contains``: the reference anywhere, a lenient
diagnostic). The run loop is the protocol's (``studies.common.protocol.HistoryStudy``); the row's
``query`` is the question type.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.studies.common.answers import contains_answer, normalized_exact_match
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.protocol import (CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least,
                                      require_choices, require_fits, use_chat)

from . import strings
from .components import components, session_sources
from .data import MAX_EVENTS, MIN_EVENTS, MINTEVAL_SEED, N_SESSIONS, SHARE, TASKS, generate_sessions
from .rules import online_pairs, source_hidden, value_spans
from .schema import QUESTION_TYPES, MINTEvalFormatError, Session, SessionQuestion, load_sessions, sessions_sha256

#: The condition set: the paper's five policies (L1401-1406), every one run for every session (L1415-1416:
#: "Each retained session group includes all five paired policies").
CONDITIONS = ("full", "source", "value", "recompute", "online")
#: Answer budget (paper L1408-1409: "a 128-token answer ceiling").
MAX_NEW_TOKENS = 128
#: ``--source`` value of the sessions generated from bAbI.
GENERATED = "generated"
#: Tokens kept free for the chat template's framing around a question (context-length check).
FRAMING_TOKENS = 32


@functools.lru_cache(maxsize=4)
def _generated(n: int, tasks: tuple[str, ...], min_events: int, max_events: int, share: float, seed: int
               ) -> tuple[Session, ...]:
    """Generated sessions, once per process and argument set (a study is built several times by the CLI)."""
    return tuple(generate_sessions(n, tasks, min_events, max_events, share, seed))


def event_segment(index: int) -> str:
    """The prompt segment name of event ``index``."""
    return f"event:{index}"


@dataclass(frozen=True)
class MINTEvalCase:
    """One session and its bootstrap component."""

    session: Session
    group: str

    @property
    def case_id(self) -> str:
        return self.session.session_id


@dataclass
class MINTEvalStudy(HistoryStudy):
    """MINTEval sessions (generated from bAbI, or a released file) under the five conditions."""

    name: ClassVar[str] = "minteval"
    strings: ClassVar[ModuleType] = strings
    #: "generated" (sessions built from the bAbI test stories in the babi data set (kvprobe data), offline) or the path
    #: of a released MINTEval state-tracking file (JSON list, {"sessions": [...]}, or .jsonl).
    source: str = GENERATED
    #: Sessions to run: the first N (generated: N are generated; the paper: all 99). None: all of the file.
    n_sessions: int | None = N_SESSIONS
    #: Questions per type and session: the first N of each type in the session's order (None: all, as the paper).
    questions_per_type: int | None = None
    #: Generated sessions: the bAbI test files their events come from.
    tasks: tuple[str, ...] = TASKS
    #: Generated sessions: fewest events per session (the paper's histories: 18-148).
    min_events: int = MIN_EVENTS
    #: Generated sessions: most events per session.
    max_events: int = MAX_EVENTS
    #: Generated sessions: probability that a session starts at an earlier session's start story (shared sources).
    share: float = SHARE
    #: Generated sessions: seed of lengths, windows and question samples.
    seed: int = MINTEVAL_SEED
    #: Greedy answer budget in tokens (the paper: 128).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Append the boxed-answer instruction to every question (the paper keeps it).
    boxed: bool = True
    #: Open the history with a header line (strings.HISTORY_HEADER; the paper's framing is not given).
    header: bool = True
    #: Ask through the chat template (auto: when the tokenizer has one; the paper: native chat templates).
    chat: bool | None = None
    #: Sessions answered in one batch (every question of a session under every condition is one batch row).
    cases_per_batch: int = 1

    def __post_init__(self) -> None:
        self.tasks = tuple(self.tasks)
        require_at_least(self, n_sessions=1, questions_per_type=1, min_events=1, max_events=1, share=0,
                         max_new_tokens=1, cases_per_batch=1)
        require_choices(self, tasks=TASKS)
        if not self.tasks:
            raise InvalidParameter("tasks", "give at least one")
        if self.max_events < self.min_events:
            raise InvalidParameter("max_events", f"must be at least min_events ({self.min_events}), "
                                   f"got {self.max_events}")
        if self.share > 1:
            raise InvalidParameter("share", f"must be a probability in [0, 1], got {self.share}")
        if self.source == GENERATED and self.n_sessions is None:
            raise InvalidParameter("n_sessions", "generated sessions need a count")
        try:  # read or generate the sessions now, so a bad file or an impossible draw fails before any model loads
            self.cases()
        except (OSError, MINTEvalFormatError) as e:
            raise InvalidParameter("source", str(e)) from e
        except RuntimeError as e:  # the files in ``tasks`` hold no consistent window left
            raise InvalidParameter("tasks", str(e)) from e

    # ------------------------------------------------------------------ data
    def sessions(self) -> list[Session]:
        """The sessions run (generated, or the first ``n_sessions`` of the file)."""
        if self.source == GENERATED:
            return list(_generated(self.n_sessions or N_SESSIONS, self.tasks, self.min_events, self.max_events,
                                   self.share, self.seed))
        return load_sessions(self.source)[: self.n_sessions]

    def make_cases(self) -> list[MINTEvalCase]:
        """Every session with its bootstrap component (sessions sharing a bAbI source story)."""
        sessions = self.sessions()
        group = components({s.session_id: session_sources(s) for s in sessions})
        return [MINTEvalCase(s, group[s.session_id]) for s in sessions]

    def data_sha256(self) -> str:
        """The digest of the sessions run (``schema.sessions_sha256``)."""
        return sessions_sha256([c.session for c in self.cases()])

    def config_extra(self) -> dict[str, Any]:
        """The conditions (``policies``, the paper's word), the data's name, the number of components, and the
        boxed-answer instruction and history header as asked."""
        return {"policies": list(CONDITIONS),
                "data": "generated" if self.source == GENERATED else Path(self.source).name,
                "components": len({c.group for c in self.cases()}),
                "boxed_instruction": strings.BOXED_INSTRUCTION if self.boxed else None,
                "history_header": strings.HISTORY_HEADER if self.header else None}

    def selected(self, session: Session) -> list[SessionQuestion]:
        """The session's questions run: the first ``questions_per_type`` of each type, each text once."""
        kept, per_type, seen = [], {t: 0 for t in QUESTION_TYPES}, set()
        for q in session.questions:
            if (q.type, q.question) in seen or (self.questions_per_type is not None
                                                and per_type[q.type] >= self.questions_per_type):
                continue
            seen.add((q.type, q.question))
            per_type[q.type] += 1
            kept.append(q)
        return kept

    # ------------------------------------------------------------------ protocol
    def prompt(self, model: kvprobe.Model, case: MINTEvalCase) -> kvprobe.Prompt:
        """The header line (unless ``header`` is off) and one segment per event, one per line."""
        segments = [("header", strings.HISTORY_HEADER)] if self.header else []
        segments += [(event_segment(i), e.text) for i, e in enumerate(case.session.events)]
        return study_prompt(segments, chat=use_chat(model.tokenizer, self.chat), sep=strings.EVENT_JOINER,
                            question_sep=strings.QUESTION_SEPARATOR)

    def questions(self, model: kvprobe.Model, case: MINTEvalCase, history: kvprobe.History) -> list[Question]:
        """Every selected question, with the boxed-answer instruction; refused when it does not fit the model."""
        suffix = strings.QUESTION_JOINER + strings.BOXED_INSTRUCTION if self.boxed else ""
        out = [Question(q.type, q.question + suffix, None, q) for q in self.selected(case.session)]
        require_fits(model, case.case_id, len(history), [q.text for q in out], self.max_new_tokens, FRAMING_TOKENS,
                     "source")
        return out

    def conditions(self, model: kvprobe.Model, case: MINTEvalCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        """The five conditions over the superseded movement records (full access when there is none)."""
        from kvprobe.interventions import OnlineMask, TextRecompute

        events = case.session.events
        hidden = [event_segment(i) for i in source_hidden(events)]
        if not hidden:
            return {c: kvprobe.Full(name=c) for c in CONDITIONS}
        pairs = online_pairs(events)
        return {
            "full": kvprobe.Full(),
            "source": kvprobe.Mask([history.span(name) for name in hidden], name="source"),
            "value": kvprobe.Mask([history.span(event_segment(i), chars=(a, b)) for i, a, b in value_spans(events)],
                                  name="value"),
            "recompute": TextRecompute(hidden),
            "online": OnlineMask([history.span(event_segment(old)) for old, _ in pairs],
                                 [history.span(event_segment(new)) for _, new in pairs], name="online"),
        }

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """The superseded records and their tokens (the same for every condition of the session)."""
        hidden = source_hidden(run.case.session.events)
        run.extra.update(hidden_records=len(hidden),
                         hidden_tokens=sum(len(run.history.span(event_segment(i))) for i in hidden))

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        g = answers[condition].generation
        q: SessionQuestion = question.info
        eos = g.stop_reason == "eos"
        return {
            "session": run.case.session.session_id, "question_id": q.id, "question": q.question,
            "answers": q.answers, "events": len(run.case.session.events), **run.extra,
            "em": normalized_exact_match(g.text, q.answers, eos),
            "em_strict_boxed": normalized_exact_match(g.text, q.answers, eos, strict_boxed=True),
            "contains": contains_answer(g.text, q.answers),
        }
