"""MQuAKE case schema (princeton-nlp/MQuAKE @ fb43dadc2d8c, README "Data format").

The released files (``datasets/MQuAKE-CF-3k-v2.json``, ``MQuAKE-CF.json``, ``MQuAKE-T.json`` of the GitHub
repository) are a JSON list of cases. Dataclasses here mirror one case field for field; unknown keys (e.g.
MQuAKE-T's ``answer_extended``) are kept in ``extra`` so ``to_json`` round-trips (a null one is dropped, so rows
read through ``datasets``, which fills a field other cases have with null, give the same cases).

A source (:func:`load_mquake`) is a released file, the repository's folder (its
``datasets/MQuAKE-CF-3k-v2.json``, the paper's file), or a copy on the Hugging Face Hub,
``hf:OWNER/NAME[@REVISION][:FILE]`` (the file, default ``MQuAKE-CF-3k-v2.json``, downloaded with
``huggingface_hub`` from the optional extra ``kvprobe[data]`` and read here, so values keep their JSON types).
The dataset files are not among kvprobe's data sets; the loader is tested on
``tests/fixtures/mquake_sample.json``, written in the same schema.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvprobe.published_data import hf_file, parse_hf, published_files
from kvprobe.studies.datasets.datafiles import need_fields


#: The released file the paper samples from, and where the repository keeps it.
RELEASED_FILE = "MQuAKE-CF-3k-v2.json"
RELEASED_FILES = (f"datasets/{RELEASED_FILE}", RELEASED_FILE)


class MQuAKEFormatError(ValueError):
    """A case in an MQuAKE file does not follow the schema."""


@dataclass(frozen=True)
class Target:
    """``{"str": ..., "id": ...}`` (``str`` is stored as ``text``)."""

    text: str
    id: str


@dataclass(frozen=True)
class Rewrite:
    """One entry of ``requested_rewrite`` (CounterFact format; ``prompt`` holds ``{}``)."""

    prompt: str
    relation_id: str
    target_new: Target
    target_true: Target
    subject: str
    question: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def cloze(self) -> str:
        return self.prompt.format(self.subject)


@dataclass(frozen=True)
class SingleHop:
    """One entry of ``single_hops`` / ``new_single_hops``."""

    question: str
    cloze: str
    answer: str
    answer_alias: list[str]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Orig:
    """``orig``: the Wikidata triples (ids and labels) before and after editing."""

    triples: list[list[str]]
    triples_labeled: list[list[str]]
    new_triples: list[list[str]]
    new_triples_labeled: list[list[str]]
    edit_triples: list[list[str]]
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MQuAKECase:
    case_id: int
    requested_rewrite: list[Rewrite]
    questions: list[str]
    answer: str
    answer_alias: list[str]
    new_answer: str
    new_answer_alias: list[str]
    single_hops: list[SingleHop]
    new_single_hops: list[SingleHop]
    orig: Orig
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def hops(self) -> int:
        return len(self.orig.triples)


_CASE_KEYS = ("case_id", "requested_rewrite", "questions", "answer", "answer_alias", "new_answer",
              "new_answer_alias", "single_hops", "new_single_hops", "orig")
_REWRITE_KEYS = ("prompt", "relation_id", "target_new", "target_true", "subject", "question")
_HOP_KEYS = ("question", "cloze", "answer", "answer_alias")
_ORIG_KEYS = ("triples", "triples_labeled", "new_triples", "new_triples_labeled", "edit_triples")


def _need(obj: Any, keys: tuple[str, ...], where: str) -> None:
    need_fields(obj, keys, where, MQuAKEFormatError)


def _rest(d: dict, keys: tuple[str, ...]) -> dict[str, Any]:
    """The fields beyond ``keys``; a null one counts as absent (``datasets`` writes null for a field that only
    other cases have, such as MQuAKE-T's ``answer_extended``)."""
    return {k: v for k, v in d.items() if k not in keys and v is not None}


def _target(d: Any, where: str) -> Target:
    _need(d, ("str", "id"), where)
    return Target(d["str"], d["id"])


def _hop(d: Any, where: str) -> SingleHop:
    _need(d, _HOP_KEYS, where)
    return SingleHop(d["question"], d["cloze"], d["answer"], list(d["answer_alias"]), _rest(d, _HOP_KEYS))


def case_from_json(d: Any, where: str = "case") -> MQuAKECase:
    """One case from its JSON dict; errors name ``where`` and the case id."""
    _need(d, ("case_id",), where)
    where = f"{where} (case_id={d['case_id']})"
    _need(d, _CASE_KEYS, where)
    rewrites = []
    for j, r in enumerate(d["requested_rewrite"]):
        w = f"{where} requested_rewrite[{j}]"
        _need(r, _REWRITE_KEYS, w)
        rewrites.append(Rewrite(r["prompt"], r["relation_id"], _target(r["target_new"], w + ".target_new"),
                                _target(r["target_true"], w + ".target_true"), r["subject"], r["question"],
                                _rest(r, _REWRITE_KEYS)))
    o = d["orig"]
    _need(o, _ORIG_KEYS, f"{where} orig")
    orig = Orig(*(list(map(list, o[k])) for k in _ORIG_KEYS), extra=_rest(o, _ORIG_KEYS))
    if not (len(orig.triples) == len(orig.triples_labeled) == len(d["single_hops"])):
        raise MQuAKEFormatError(f"{where}: orig.triples, orig.triples_labeled and single_hops differ in length")
    if not (len(orig.new_triples) == len(orig.new_triples_labeled) == len(d["new_single_hops"])):
        raise MQuAKEFormatError(
            f"{where}: orig.new_triples, orig.new_triples_labeled and new_single_hops differ in length")
    return MQuAKECase(
        case_id=d["case_id"],
        requested_rewrite=rewrites,
        questions=list(d["questions"]),
        answer=d["answer"],
        answer_alias=list(d["answer_alias"]),
        new_answer=d["new_answer"],
        new_answer_alias=list(d["new_answer_alias"]),
        single_hops=[_hop(h, f"{where} single_hops[{i}]") for i, h in enumerate(d["single_hops"])],
        new_single_hops=[_hop(h, f"{where} new_single_hops[{i}]") for i, h in enumerate(d["new_single_hops"])],
        orig=orig,
        extra=_rest(d, _CASE_KEYS),
    )


def released_file(source: str | Path) -> Path:
    """The released MQuAKE file a source names (module docstring): the file itself, the repository folder's
    ``datasets/MQuAKE-CF-3k-v2.json``, or the file downloaded from an ``hf:`` id.

    Example: ``released_file("MQuAKE")`` is ``MQuAKE/datasets/MQuAKE-CF-3k-v2.json`` in a clone of the repository.
    """
    hf = parse_hf(str(source))
    if hf is not None:
        return hf_file(hf, RELEASED_FILES)
    path = Path(source)
    if path.is_dir():
        found = published_files(path, RELEASED_FILES)
        if not found:
            raise MQuAKEFormatError(f"{path}: no {' or '.join(RELEASED_FILES)} (give a released MQuAKE file or the "
                                    "repository's folder)")
        return found[0]
    return path


def load_mquake(source: str | Path) -> list[MQuAKECase]:
    """Read a released MQuAKE JSON file (a list of cases) from a source (:func:`released_file`).

    Example: ``load_mquake("MQuAKE/datasets/MQuAKE-CF-3k-v2.json")[0].case_id``.
    """
    path = released_file(source)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise MQuAKEFormatError(f"{path}: not valid JSON ({e})") from e
    if not isinstance(data, list):
        raise MQuAKEFormatError(f"{path}: expected a JSON list of cases, got {type(data).__name__}")
    return [case_from_json(d, f"{path} case #{i}") for i, d in enumerate(data)]


def _target_json(t: Target) -> dict[str, str]:
    return {"str": t.text, "id": t.id}


def _hop_json(h: SingleHop) -> dict[str, Any]:
    return {"question": h.question, "cloze": h.cloze, "answer": h.answer, "answer_alias": list(h.answer_alias),
            **h.extra}


def to_json(case: MQuAKECase) -> dict[str, Any]:
    """The case as a JSON-ready dict in the released schema (inverse of ``case_from_json``)."""
    o = case.orig
    return {
        "case_id": case.case_id,
        "requested_rewrite": [
            {"prompt": r.prompt, "relation_id": r.relation_id, "target_new": _target_json(r.target_new),
             "target_true": _target_json(r.target_true), "subject": r.subject, "question": r.question, **r.extra}
            for r in case.requested_rewrite],
        "questions": list(case.questions),
        "answer": case.answer,
        "answer_alias": list(case.answer_alias),
        "new_answer": case.new_answer,
        "new_answer_alias": list(case.new_answer_alias),
        "single_hops": [_hop_json(h) for h in case.single_hops],
        "new_single_hops": [_hop_json(h) for h in case.new_single_hops],
        "orig": {"triples": o.triples, "triples_labeled": o.triples_labeled, "new_triples": o.new_triples,
                 "new_triples_labeled": o.new_triples_labeled, "edit_triples": o.edit_triples, **o.extra},
        **case.extra,
    }


def save_mquake(cases: list[MQuAKECase], path: str | Path) -> None:
    Path(path).write_text(json.dumps([to_json(c) for c in cases], indent=1, ensure_ascii=False) + "\n",
                          encoding="utf-8")
