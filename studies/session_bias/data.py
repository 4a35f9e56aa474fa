"""LongMemEval-Oracle loader, schema validation and the development/validation split.

Schema (the public ``longmemeval_oracle.json`` of LongMemEval, cleaned release,
github.com/xiaowu0162/LongMemEval): a JSON list of questions, each an object with

* ``question_id`` (str; abstention questions end in ``_abs``),
* ``question_type`` (one of :data:`QUESTION_TYPES`),
* ``question`` (str), ``answer`` (str; a few releases store numbers, kept as text),
* ``question_date`` (str, e.g. ``"2023/05/30 (Tue) 23:40"``),
* ``haystack_dates``, ``haystack_session_ids`` (lists of str, one per session),
* ``haystack_sessions`` (list of sessions, each a list of turns
  ``{"role": "user"|"assistant", "content": str, "has_answer": bool (optional)}``),
* ``answer_session_ids`` (list of str).

Unknown keys are kept (``extra``) so :func:`question_to_json` round-trips a file (a null one counts as
absent, as a null ``has_answer`` does: rows read through ``datasets`` give the same questions).
Every problem raises :class:`LongMemEvalFormatError` naming the file and the
question id. A source (:func:`load_longmemeval`) is the file, a folder holding it (the data package's
``longmemeval_oracle.json``, or the Hugging Face repository ``xiaowu0162/longmemeval``, whose files carry no
extension: ``longmemeval_oracle``), or ``hf:xiaowu0162/longmemeval[@REVISION][:FILE]`` (default the oracle
file; ``:longmemeval_s`` another), downloaded with ``huggingface_hub`` (the optional extra ``kvprobe[data]``)
and read here, so answers keep their JSON types and a turn without ``has_answer`` stays without it.
Tested on ``tests/fixtures/hf/xiaowu0162/longmemeval/longmemeval_oracle``, written in this schema.

Split (paper app:guarded_validation L5978-5981: "A deterministic split based on
question identifiers selects 120 development questions: 40 update-tagged, 25
temporal, 25 multi-session, and 10 of each single-session type"; the remaining
380 are validation). *How* identifiers decide is UNCLEAR; ours: within each
question type, questions are ranked by the SHA-256 hex digest of their
``question_id`` (ties impossible) and the first ``quota[type]`` go to
development. ``question_type`` of an abstention question is that of its base
type (as in LongMemEval), so quotas count abstention variants too; with the
500-question release this gives exactly 120/380 (40+25+25+10+10+10). For other
files the paper's quotas are scaled by ``len(questions) / 500`` (rounded) unless
``quotas`` are given. The split is by question, not by group, so an answerable
question and its ``_abs`` variant can fall on different sides (the paper counts
twelve such groups, L6202-6205); :func:`groups_crossing` names them.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from kvprobe.published_data import hf_file, parse_hf, published_files

QUESTION_TYPES = ("single-session-user", "single-session-assistant", "single-session-preference",
                  "multi-session", "knowledge-update", "temporal-reasoning")
ABSTENTION_SUFFIX = "_abs"
#: The oracle file of a release folder or repository, as the data package and the Hub name it.
ORACLE_FILES = ("longmemeval_oracle.json", "longmemeval_oracle", "data/longmemeval_oracle.json")
ROLES = ("user", "assistant")
REQUIRED = ("question_id", "question_type", "question", "answer", "question_date", "haystack_dates",
            "haystack_session_ids", "haystack_sessions", "answer_session_ids")
#: Paper development quotas per question type (L5979-5980); they sum to 120 of 500.
PAPER_DEV_QUOTAS = {"knowledge-update": 40, "temporal-reasoning": 25, "multi-session": 25,
                    "single-session-user": 10, "single-session-assistant": 10, "single-session-preference": 10}
PAPER_TOTAL = 500
SPLITS = ("all", "development", "validation")
#: LongMemEval's date format, e.g. "2023/05/20 (Sat) 02:21" (ISO dates are accepted too).
_DATE_RE = re.compile(r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})(?:\s*\(\w+\))?(?:\s+(\d{1,2}):(\d{2}))?\s*$")


class LongMemEvalFormatError(ValueError):
    """A LongMemEval file, or one question in it, does not follow the schema."""


@dataclass(frozen=True)
class Turn:
    """One chat turn; ``has_answer`` is None when the key is absent."""

    role: str
    content: str
    has_answer: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Session:
    """One dated session of a question's haystack."""

    session_id: str
    date: str
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    """One LongMemEval question with its haystack sessions (file order)."""

    question_id: str
    question_type: str
    question: str
    answer: str
    question_date: str
    sessions: tuple[Session, ...]
    answer_session_ids: tuple[str, ...]
    answer_raw: Any = field(default=None, compare=False)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def is_abstention(self) -> bool:
        """Abstention questions' ids end in ``_abs``."""
        return self.question_id.endswith(ABSTENTION_SUFFIX)

    @property
    def group(self) -> str:
        """Bootstrap unit: the id without ``_abs`` (a question and its abstention variant share it)."""
        return self.question_id[: -len(ABSTENTION_SUFFIX)] if self.is_abstention else self.question_id

    @property
    def is_update(self) -> bool:
        """A knowledge-update question (abstention variants included; see ``is_abstention``)."""
        return self.question_type == "knowledge-update"


def parse_date(text: str) -> datetime:
    """A LongMemEval date (``"2023/05/20 (Sat) 02:21"``) or an ISO date; ValueError otherwise."""
    m = _DATE_RE.match(text)
    if m:
        y, mo, d, h, mi = m.groups()
        return datetime(int(y), int(mo), int(d), int(h or 0), int(mi or 0))
    return datetime.fromisoformat(text.strip())


def _fail(source: str, qid: Any, message: str) -> LongMemEvalFormatError:
    who = f"question {qid!r}" if qid is not None else "an item"
    return LongMemEvalFormatError(f"{source}: {who}: {message}")


def _str_list(item: Mapping[str, Any], key: str, source: str, qid: Any) -> list[str]:
    value = item[key]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(source, qid, f"{key!r} must be a list of strings, got {type(value).__name__}")
    return value


def _turn(raw: Any, source: str, qid: Any, s: int, t: int) -> Turn:
    where = f"haystack_sessions[{s}][{t}]"
    if not isinstance(raw, dict):
        raise _fail(source, qid, f"{where} must be an object with 'role' and 'content', got {type(raw).__name__}")
    if raw.get("role") not in ROLES:
        raise _fail(source, qid, f"{where}: role must be one of {ROLES}, got {raw.get('role')!r}")
    if not isinstance(raw.get("content"), str):
        raise _fail(source, qid, f"{where}: 'content' must be a string")
    has = raw.get("has_answer")
    if has is not None and not isinstance(has, bool):
        raise _fail(source, qid, f"{where}: 'has_answer' must be true or false, got {has!r}")
    extra = {k: v for k, v in raw.items() if k not in ("role", "content", "has_answer") and v is not None}
    return Turn(raw["role"], raw["content"], has, extra)


def parse_question(item: Any, source: str = "<data>", index: int | None = None) -> Question:
    """Validate one raw question object and convert it (errors name ``source`` and the question id)."""
    if not isinstance(item, dict):
        raise _fail(source, None, f"item {index} must be a JSON object, got {type(item).__name__}")
    qid = item.get("question_id")
    if not isinstance(qid, str) or not qid:
        raise _fail(source, None, f"item {index} has no string 'question_id' (got {qid!r})")
    missing = [k for k in REQUIRED if k not in item]
    if missing:
        raise _fail(source, qid, f"missing keys {missing}")
    if item["question_type"] not in QUESTION_TYPES:
        raise _fail(source, qid, f"question_type {item['question_type']!r} is not one of {QUESTION_TYPES}")
    for key in ("question", "question_date"):
        if not isinstance(item[key], str) or not item[key].strip():
            raise _fail(source, qid, f"{key!r} must be a non-empty string")
    answer = item["answer"]
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        raise _fail(source, qid, f"'answer' must be a string (or a number), got {type(answer).__name__}")
    dates = _str_list(item, "haystack_dates", source, qid)
    ids = _str_list(item, "haystack_session_ids", source, qid)
    answer_ids = _str_list(item, "answer_session_ids", source, qid)
    sessions = item["haystack_sessions"]
    if not isinstance(sessions, list) or not sessions:
        raise _fail(source, qid, "'haystack_sessions' must be a non-empty list of sessions")
    if not len(sessions) == len(dates) == len(ids):
        raise _fail(source, qid, f"{len(sessions)} haystack_sessions but {len(dates)} haystack_dates and "
                                 f"{len(ids)} haystack_session_ids")
    for key, value in [("question_date", item["question_date"])] + [(f"haystack_dates[{i}]", d)
                                                                      for i, d in enumerate(dates)]:
        try:
            parse_date(value)
        except ValueError:
            raise _fail(source, qid, f"{key} {value!r} is not a date like '2023/05/20 (Sat) 02:21'") from None
    parsed = []
    for s, (sid, date, turns) in enumerate(zip(ids, dates, sessions)):
        if not isinstance(turns, list) or not turns:
            raise _fail(source, qid, f"haystack_sessions[{s}] must be a non-empty list of turns")
        parsed.append(Session(sid, date, tuple(_turn(t, source, qid, s, i) for i, t in enumerate(turns))))
    extra = {k: v for k, v in item.items() if k not in REQUIRED and v is not None}
    return Question(qid, item["question_type"], item["question"], str(answer), item["question_date"],
                    tuple(parsed), tuple(answer_ids), answer_raw=answer, extra=extra)


def parse_questions(data: Any, source: str = "<data>") -> list[Question]:
    """Validate a parsed JSON list of questions (unique ids)."""
    if not isinstance(data, list):
        raise LongMemEvalFormatError(f"{source}: the top level must be a JSON list of questions, "
                                     f"got {type(data).__name__}")
    if not data:
        raise LongMemEvalFormatError(f"{source}: the file holds no questions")
    out = [parse_question(item, source, i) for i, item in enumerate(data)]
    seen: set[str] = set()
    for q in out:
        if q.question_id in seen:
            raise _fail(source, q.question_id, "duplicate question_id")
        seen.add(q.question_id)
    return out


def load_longmemeval(source: str | Path) -> list[Question]:
    """Load and validate ``longmemeval_oracle.json`` (or any file in the same schema) from a source: the file, a
    folder holding the oracle file, or an ``hf:`` id (module docstring).

    Example: ``load_longmemeval("hf:xiaowu0162/longmemeval")`` (500 questions) or ``load_longmemeval(path)``.
    """
    hf = parse_hf(str(source))
    p = hf_file(hf, ORACLE_FILES) if hf is not None else Path(source)
    if p.is_dir():
        found = published_files(p, ORACLE_FILES)
        if not found:
            raise FileNotFoundError(f"{p}: no {', '.join(ORACLE_FILES)} in this folder (give LongMemEval's file, "
                                    "its folder, or hf:xiaowu0162/longmemeval)")
        p = found[0]
    if not p.is_file():
        raise FileNotFoundError(
            f"{p}: no such file. Pass the path of LongMemEval's longmemeval_oracle.json (cleaned release, "
            "see github.com/xiaowu0162/LongMemEval), its folder, or hf:xiaowu0162/longmemeval (needs kvprobe[data])")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise LongMemEvalFormatError(f"{p}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except UnicodeDecodeError as e:
        raise LongMemEvalFormatError(f"{p}: not UTF-8 text ({e})") from None
    return parse_questions(data, str(p))


def turn_to_json(t: Turn) -> dict[str, Any]:
    out: dict[str, Any] = {"role": t.role, "content": t.content}
    if t.has_answer is not None:
        out["has_answer"] = t.has_answer
    out.update(t.extra)
    return out


def question_to_json(q: Question) -> dict[str, Any]:
    """The question as a raw schema object (inverse of :func:`parse_question`)."""
    out: dict[str, Any] = {
        "question_id": q.question_id, "question_type": q.question_type, "question": q.question,
        "answer": q.answer if q.answer_raw is None else q.answer_raw, "question_date": q.question_date,
        "haystack_dates": [s.date for s in q.sessions],
        "haystack_session_ids": [s.session_id for s in q.sessions],
        "haystack_sessions": [[turn_to_json(t) for t in s.turns] for s in q.sessions],
        "answer_session_ids": list(q.answer_session_ids),
    }
    out.update(q.extra)
    return out


def write_questions(path: str | Path, questions: Iterable[Question]) -> Path:
    """Write questions as a schema JSON file."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps([question_to_json(q) for q in questions], indent=1, ensure_ascii=False) + "\n",
                 encoding="utf-8")
    return p


def id_rank_key(question_id: str) -> str:
    """The split's ranking key: SHA-256 hex digest of the question id."""
    return hashlib.sha256(question_id.encode("utf-8")).hexdigest()


def dev_quotas(questions: Sequence[Question], quotas: Mapping[str, int] | None = None) -> dict[str, int]:
    """Development questions per type: ``quotas``, or the paper's scaled by ``len(questions) / 500``."""
    if quotas is not None:
        bad = [(t, n) for t, n in quotas.items() if t not in QUESTION_TYPES or int(n) < 0]
        if bad:
            raise ValueError(f"quotas must map question types {QUESTION_TYPES} to counts >= 0, got {bad}")
        return {t: int(quotas.get(t, 0)) for t in QUESTION_TYPES}
    scale = len(questions) / PAPER_TOTAL
    return {t: round(PAPER_DEV_QUOTAS.get(t, 0) * scale) for t in QUESTION_TYPES}


def split_questions(questions: Sequence[Question], quotas: Mapping[str, int] | None = None
                    ) -> dict[str, list[Question]]:
    """``{"development": [...], "validation": [...]}``, each in input order (module docstring)."""
    want = dev_quotas(questions, quotas)
    dev: set[str] = set()
    for qtype in QUESTION_TYPES:
        ranked = sorted((q for q in questions if q.question_type == qtype), key=lambda q: id_rank_key(q.question_id))
        dev.update(q.question_id for q in ranked[: want[qtype]])
    return {"development": [q for q in questions if q.question_id in dev],
            "validation": [q for q in questions if q.question_id not in dev]}


def select_split(questions: Sequence[Question], split: str, quotas: Mapping[str, int] | None = None
                 ) -> list[Question]:
    """The questions of ``split`` ("all", "development" or "validation"), in input order."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    if split == "all":
        return list(questions)
    return split_questions(questions, quotas)[split]


def groups_crossing(questions: Sequence[Question], quotas: Mapping[str, int] | None = None) -> set[str]:
    """Groups (answerable + abstention variant) with questions on both sides of the split."""
    parts = split_questions(questions, quotas)
    dev = {q.group for q in parts["development"]}
    return dev & {q.group for q in parts["validation"]}


def publisher_sessions(question: Question) -> tuple[str, ...]:
    """The publisher's session ids of a question, sorted: its ``haystack_session_ids`` and ``answer_session_ids``."""
    return tuple(sorted({s.session_id for s in question.sessions} | set(question.answer_session_ids)))


def publisher_components(links: Mapping[str, tuple[str, Iterable[str]]]) -> dict[str, str]:
    """Question id -> its component: questions are linked when they share a base question (``group``) or a
    publisher session id (paper L6013-6015: "bootstrap draws group base-question variants and questions
    connected by publisher session identifiers"), transitively. ``links``: question id -> (group, session
    ids), in order; a component is named by its first question id (``readouts.stats.connected_components``).

    Example: ``publisher_components({"a": ("a", ["s1"]), "a_abs": ("a", ["s1"]), "b": ("b", ["s2", "s3"]),
    "c": ("c", ["s3"]), "d": ("d", ["s4"])})`` is ``{"a": "a", "a_abs": "a", "b": "b", "c": "b", "d": "d"}``.
    """
    from kvprobe.readouts.stats import connected_components

    return connected_components({qid: {("group", group), *(("session", s) for s in sessions)}
                                 for qid, (group, sessions) in links.items()})


def publisher_crossing(questions: Sequence[Question], quotas: Mapping[str, int] | None = None) -> set[str]:
    """Ids of the questions whose publisher component (:func:`publisher_components` over every question of the
    source) holds questions of both the development and the validation split (the paper's exclusion
    sensitivity, L6017-6019: "Fourteen validation questions connect to development through these
    identifiers")."""
    component = publisher_components({q.question_id: (q.group, publisher_sessions(q)) for q in questions})
    dev = {q.question_id for q in split_questions(questions, quotas)["development"]}
    sides: dict[str, set[bool]] = {}
    for qid, c in component.items():
        sides.setdefault(c, set()).add(qid in dev)
    return {qid for qid, c in component.items() if len(sides[c]) == 2}


def dataset_hash(questions: Iterable[Question]) -> str:
    """SHA-256 of the questions' canonical JSON (changes whenever any field changes)."""
    blob = json.dumps([question_to_json(q) for q in questions], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()
