"""MINTEval state-tracking sessions: the released schema as we infer it, a loader with named errors, JSON out.

The released files are not on this machine (they are not among kvprobe's data sets). The paper
(L1347-1350) says only: 99 sessions, 5,656 questions, 18-148 *ordered events* per
history, five question types (current location, historical location, counting,
ordering, multi-hop) with *supplied references*, and that the histories match original
bAbI source stories (L1357-1358). Everything below beyond that is INFERRED (ours):

* a file is a JSON list of sessions, an object ``{"sessions": [...]}``, or JSON lines
  (one session per line, ``.jsonl``);
* a session is ``{"session_id", "events", "questions"}`` plus an optional
  ``"source_stories"`` (bAbI story ids such as ``"qa3:12"``; when absent the study
  matches the event texts to the bAbI test release, ``components.py``);
* an event is ``{"id", "text", "kind", "person"}`` plus ``"object"`` (acquisition, drop,
  transfer), ``"location"`` (movement: the destination, which must occur in ``text``)
  and ``"recipient"`` (transfer); ``kind`` is one of :data:`KINDS`;
* a question is ``{"id", "type", "question", "answer"}`` plus optional
  ``"answer_aliases"`` (strings; an integer reference or alias, as a count may be, is read as
  its digits); ``type`` is one of :data:`QUESTION_TYPES`, matched
  case-insensitively with spaces, hyphens or underscores (``"Current location"`` is
  ``current_location``; ``counting`` / ``ordering``, the paper's words, are ``count`` / ``order``).

Unknown keys are kept in ``extra`` so :func:`to_json` round-trips. Every refusal is a
:class:`MINTEvalFormatError` naming the file, the session's index (and id) and the record.

Example::

    sessions = load_sessions("minteval_state.json")
    sessions[0].events[0].kind        # "movement"
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.studies.datasets.datafiles import need_fields, need_unique

#: Event kinds (the paper's words, L1350-1352: "person-movement record", "acquisition, drop, and transfer events").
KINDS = ("movement", "acquisition", "drop", "transfer")
#: Question types (paper L1348-1350: "Current location, historical location, counting, ordering, and multi-hop").
QUESTION_TYPES = ("current_location", "historical_location", "count", "order", "multi_hop")
#: Other spellings of the question types a released file may use (inferred).
_TYPE_ALIASES = {"counting": "count", "ordering": "order", "multihop": "multi_hop", "current": "current_location",
                 "historical": "historical_location", "history": "historical_location"}
#: Fields an event of each kind needs besides id, text, kind and person.
_KIND_FIELDS = {"movement": ("location",), "acquisition": ("object",), "drop": ("object",),
                "transfer": ("object", "recipient")}
_EVENT_KEYS = ("id", "text", "kind", "person", "object", "location", "recipient")
_QUESTION_KEYS = ("id", "type", "question", "answer", "answer_aliases")
_SESSION_KEYS = ("session_id", "source_stories", "events", "questions")


class MINTEvalFormatError(ValueError):
    """A MINTEval file or session that does not follow the schema (the message names file, session, record)."""


@dataclass(frozen=True)
class Event:
    """One history record: a person's movement, or an acquisition, drop or transfer of an object."""

    id: str
    text: str
    kind: str
    person: str
    object: str | None = None
    location: str | None = None
    recipient: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def destination_chars(event: Event) -> tuple[int, int]:
    """Character span of a movement's destination in its text: the last word-bounded occurrence.

    ``ValueError`` when the destination does not occur as a whole word (the loader refuses such files).

    Example::

        destination_chars(Event("e0", "Mary moved to the hallway.", "movement", "Mary", location="hallway"))
        # (18, 25)
    """
    found = [m.span() for m in re.finditer(rf"(?<!\w){re.escape(event.location or '')}(?!\w)", event.text)]
    if event.kind != "movement" or not event.location or not found:
        raise ValueError(f"event {event.id}: no destination {event.location!r} in {event.text!r}")
    return found[-1]


@dataclass(frozen=True)
class SessionQuestion:
    """One question with its supplied reference (``answer``) and accepted aliases."""

    id: str
    type: str
    question: str
    answer: str
    answer_aliases: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def answers(self) -> list[str]:
        """The reference and its aliases, without repeats."""
        return list(dict.fromkeys([self.answer, *self.answer_aliases]))


@dataclass(frozen=True)
class Session:
    """One state-tracking session: ordered events, the questions asked after them, their bAbI sources."""

    session_id: str
    events: tuple[Event, ...]
    questions: tuple[SessionQuestion, ...]
    source_stories: tuple[str, ...] | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def question_type(name: Any, where: str) -> str:
    """The canonical question type of ``name`` (``"Current location"`` -> ``current_location``)."""
    key = "_".join(str(name).strip().lower().replace("-", " ").replace("_", " ").split())
    key = _TYPE_ALIASES.get(key, key)
    if key not in QUESTION_TYPES:
        raise MINTEvalFormatError(f"{where}: question type {name!r} is not one of {', '.join(QUESTION_TYPES)}")
    return key


def _is_count(value: Any) -> bool:
    """A JSON integer (a count question's reference may be one; INFERRED), not a boolean."""
    return isinstance(value, int) and not isinstance(value, bool)


def _text(d: dict, key: str, where: str) -> str:
    value = d[key]
    if not isinstance(value, str) or not value.strip():
        raise MINTEvalFormatError(f"{where}: field {key} must be a non-empty string, got {value!r}")
    return value


def event_from_json(d: Any, where: str) -> Event:
    """One event; refuses a missing field, an unknown kind, or a destination absent from the text."""
    need_fields(d, ("id", "text", "kind", "person"), where, MINTEvalFormatError)
    kind = d["kind"]
    if kind not in KINDS:
        raise MINTEvalFormatError(f"{where}: event kind {kind!r} is not one of {', '.join(KINDS)}")
    need_fields(d, _KIND_FIELDS[kind], f"{where} ({kind})", MINTEvalFormatError)
    values = {k: _text(d, k, where) for k in ("text", "person", *_KIND_FIELDS[kind])}
    event = Event(id=str(d["id"]), kind=kind, extra={k: v for k, v in d.items() if k not in _EVENT_KEYS},
                  object=values.get("object"), location=values.get("location"), recipient=values.get("recipient"),
                  **{k: values[k] for k in ("text", "person")})
    if kind == "movement":
        try:  # the value mask needs the destination's characters
            destination_chars(event)
        except ValueError:
            raise MINTEvalFormatError(f"{where}: destination {event.location!r} does not occur as a word in its "
                                      f"text {event.text!r}") from None
    return event


def question_from_json(d: Any, where: str) -> SessionQuestion:
    """One question; refuses a missing field or an unknown type."""
    need_fields(d, ("id", "type", "question", "answer"), where, MINTEvalFormatError)
    aliases = d.get("answer_aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) or _is_count(a) for a in aliases):
        raise MINTEvalFormatError(f"{where}: answer_aliases must be a list of strings")
    answer = str(d["answer"]) if _is_count(d["answer"]) else _text(d, "answer", where)
    return SessionQuestion(id=str(d["id"]), type=question_type(d["type"], where),
                           question=_text(d, "question", where), answer=answer,
                           answer_aliases=tuple(str(a) for a in aliases),
                           extra={k: v for k, v in d.items() if k not in _QUESTION_KEYS})


def session_from_json(d: Any, where: str = "session") -> Session:
    """One session from its JSON object; errors name ``where``, the session id and the record index."""
    need_fields(d, ("session_id",), where, MINTEvalFormatError)
    where = f"{where} (session_id={d['session_id']})"
    need_fields(d, ("events", "questions"), where, MINTEvalFormatError)
    for key in ("events", "questions"):
        if not isinstance(d[key], list) or not d[key]:
            raise MINTEvalFormatError(f"{where}: {key} must be a non-empty list")
    events = tuple(event_from_json(e, f"{where} events[{i}]") for i, e in enumerate(d["events"]))
    questions = tuple(question_from_json(q, f"{where} questions[{i}]") for i, q in enumerate(d["questions"]))
    need_unique([e.id for e in events], "event id", where, MINTEvalFormatError)
    need_unique([q.id for q in questions], "question id", where, MINTEvalFormatError)
    sources = d.get("source_stories")
    if sources is not None and (not isinstance(sources, list) or not all(isinstance(s, str) for s in sources)):
        raise MINTEvalFormatError(f"{where}: source_stories must be a list of strings")
    return Session(session_id=str(d["session_id"]), events=events, questions=questions,
                   source_stories=None if sources is None else tuple(sources),
                   extra={k: v for k, v in d.items() if k not in _SESSION_KEYS})


def _records(path: Path) -> list[Any]:
    text = path.read_text(encoding="utf-8")
    try:
        if path.suffix == ".jsonl":
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise MINTEvalFormatError(f"{path}: not valid JSON ({e})") from e
    if isinstance(data, dict) and isinstance(data.get("sessions"), list):
        return data["sessions"]
    if not isinstance(data, list):
        raise MINTEvalFormatError(f"{path}: expected a JSON list of sessions or {{\"sessions\": [...]}}, "
                                  f"got {type(data).__name__}")
    return data


def load_sessions(path: str | Path) -> list[Session]:
    """Read a MINTEval state-tracking file (module docstring); session ids must be unique.

    Example: ``load_sessions("tests/fixtures/minteval_sessions.json")[0].session_id``.
    """
    path = Path(path)
    sessions = [session_from_json(d, f"{path} session #{i}") for i, d in enumerate(_records(path))]
    if not sessions:
        raise MINTEvalFormatError(f"{path}: no sessions")
    need_unique([s.session_id for s in sessions], "session id", str(path), MINTEvalFormatError)
    return sessions


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v is not None}


def to_json(session: Session) -> dict[str, Any]:
    """The session as a JSON-ready dict in the schema (inverse of :func:`session_from_json`)."""
    events = [_drop_none({"id": e.id, "text": e.text, "kind": e.kind, "person": e.person, "object": e.object,
                          "location": e.location, "recipient": e.recipient}) | e.extra for e in session.events]
    questions = [{"id": q.id, "type": q.type, "question": q.question, "answer": q.answer,
                  **({"answer_aliases": list(q.answer_aliases)} if q.answer_aliases else {}), **q.extra}
                 for q in session.questions]
    out: dict[str, Any] = {"session_id": session.session_id}
    if session.source_stories is not None:
        out["source_stories"] = list(session.source_stories)
    return {**out, "events": events, "questions": questions, **session.extra}


def save_sessions(sessions: list[Session], path: str | Path) -> None:
    """Write sessions as a JSON list (readable by :func:`load_sessions`)."""
    Path(path).write_text(json.dumps([to_json(s) for s in sessions], indent=1, ensure_ascii=False) + "\n",
                          encoding="utf-8")


def sessions_sha256(sessions: list[Session]) -> str:
    """SHA-256 of the sessions' JSON (the dataset's identity in ``config.json``)."""
    blob = json.dumps([to_json(s) for s in sessions], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()
