"""Strict parsing of model answers: one JSON object, the ``answer`` field, normalization.

Shared by every study whose prompt asks for JSON: answers ``{"answer": "..."}``
(quantity, records, query-aware, requests, derived note, cross-checkpoint) and
detector verdicts (``{"supersedes": ...}``, ``{"same_slot": ...}``).

Objects (:func:`parse_object`). Whether the object has the right fields is the
caller's rule; :func:`parse_object` only decides whether the whole response *is*
one object and, when it is not, names why, so every failure can be counted
rather than dropped. Rules: surrounding whitespace is ignored (our choice:
whitespace is not text); the rest must be one JSON object, with no duplicate key
and nothing beside it. With ``allow_fence`` exactly one outer Markdown code fence
(```` ``` ```` or ```` ```json ````) may wrap it (the paper's "fenced" allowance,
partD section 0; for detector outputs the paper leaves fence handling UNCLEAR,
so it is a parameter there too).

Answers (spec partC section 2), two parsers of a whole response, both through
:func:`parse_object` (no duplicate key, nothing beside the object):

* :func:`parse_answer_field`, the paper's *answer-field parser* (its scoring rules 1
  and 2, paper L4029-4030, L4819-4821): no fence (a fenced response is a format
  failure, L4080-4081); the object's ``answer`` field is read and additional fields
  are permitted. A numeric ``answer`` is read as its JSON number text: the paper
  counts such outputs as answer-field valid but not strict-single-field valid
  (L4822-4825), and a bare number is never a complete quantity. Any other
  non-string value (null, boolean, list, object) is ``"non_string"``.
* :func:`parse_strict` (rule 3 with ``allow_fence``, L4031-4037): the object must
  have exactly one key, ``answer``, whose value is a string.

Both record ``strict_single_field``: one string-valued ``answer`` and nothing else,
without any fence (paper L4820-4825).
:func:`find_answers` and :func:`first_answer` look for answer objects anywhere
in a text (the capped-output diagnostics and the lenient rules).

Normalization (:func:`normalize`): casefold and collapse whitespace, the
equality every exact-answer rule and the detectors' value comparisons use.

The record-history answer rule (:func:`grade`, the records, query-aware and requests
studies; paper L5447-5449): the exact ``answer`` field, plus diagnostics and a lenient
first-mentioned-value rule (:func:`first_value`).

Free-text answers (MQuAKE, MINTEval, FactConsolidation, revision histories; spec partA
section 1): :func:`normalize_answer` (SQuAD normalization), :func:`boxed_content` (the last
``\\boxed{}``), :func:`normalized_exact_match` (EM to an answer or alias, EOS required) and
:func:`contains_answer` (word-bounded occurrence, the lenient variant).
"""

from __future__ import annotations

import json
import re
import string
import unicodedata
from dataclasses import dataclass
from typing import Any, Callable

__all__ = ["FAILURES", "FENCE", "GRADE_RULES", "PLAIN_DECODER", "UNKNOWN", "ParseResult", "ParsedObject", "exact_equal",
           "find_answers", "find_objects", "first_answer", "first_value", "grade", "has_object", "normalize",
           "parse_answer_field",
           "parse_object", "parse_strict", "normalize_answer", "boxed_content", "normalized_exact_match",
           "contains_answer", "displayed_answer", "capped_first", "DECLINE_PHRASES", "NUMBER_WORDS", "declines"]

FENCE = "```"
_FENCE_RE = re.compile(r"\A```(?:[jJ][sS][oO][nN])?[ \t]*\n?(?P<body>.*?)\s*```\Z", re.DOTALL)

#: Every failure reason :func:`parse_object` can give, besides ``"ok"``.
FAILURES = ("empty", "not_json", "not_object", "text_outside", "multiple_objects", "duplicate_keys",
            "fenced", "multiple_fences", "unclosed_fence")


class _DuplicateKeyError(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise _DuplicateKeyError(keys)
    return dict(pairs)


_STRICT_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)
PLAIN_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ParsedObject:
    """Result of :func:`parse_object`.

    Attributes:
        obj: the object when ``reason == "ok"``, else None.
        reason: ``"ok"`` or one of :data:`FAILURES`.
        fenced: one outer code fence was present (removed when allowed).
    """

    obj: dict[str, Any] | None
    reason: str
    fenced: bool

    @property
    def ok(self) -> bool:
        return self.reason == "ok"


def _fail(reason: str, fenced: bool) -> ParsedObject:
    return ParsedObject(None, reason, fenced)


def _parse_body(body: str, fenced: bool, embedded: Callable[[str], bool]) -> ParsedObject:
    if not body:
        return _fail("empty", fenced)
    if not body.startswith("{"):
        try:
            PLAIN_DECODER.decode(body)
            return _fail("not_object", fenced)
        except json.JSONDecodeError:
            pass
        return _fail("text_outside" if embedded(body) else "not_json", fenced)
    try:
        obj, end = _STRICT_DECODER.raw_decode(body)
    except _DuplicateKeyError:
        return _fail("duplicate_keys", fenced)
    except json.JSONDecodeError:
        return _fail("not_json", fenced)
    rest = body[end:].strip()
    if rest:
        if rest.startswith("{"):
            try:
                PLAIN_DECODER.raw_decode(rest)
                return _fail("multiple_objects", fenced)
            except json.JSONDecodeError:
                pass
        return _fail("text_outside", fenced)
    if not isinstance(obj, dict):  # pragma: no cover - a body starting with "{" decodes to a dict
        return _fail("not_object", fenced)
    return ParsedObject(obj, "ok", fenced)


def has_object(text: str) -> bool:
    """Whether a JSON object starts somewhere in ``text``."""
    return bool(find_objects(text))


def parse_object(text: str, allow_fence: bool = True,
                 embedded: Callable[[str], bool] = has_object) -> ParsedObject:
    """Parse a whole response that must be exactly one JSON object.

    Args:
        text: the model output (EOS already removed).
        allow_fence: accept exactly one outer Markdown code fence around the object.
        embedded: for a body that does not start with ``{``, whether it still
            contains what the caller was looking for; then the failure is
            ``"text_outside"`` (an object surrounded by prose), else ``"not_json"``.
    """
    s = text.strip()
    n_fences = s.count(FENCE)
    if n_fences == 0:
        return _parse_body(s, False, embedded)
    if n_fences > 2:
        return _fail("multiple_fences", True)
    m = _FENCE_RE.fullmatch(s)
    if m is None:
        return _fail("unclosed_fence" if n_fences == 1 else "text_outside", True)
    if not allow_fence:
        return _fail("fenced", True)
    return _parse_body(m.group("body").strip(), True, embedded)


def find_objects(text: str, keep: Callable[[dict[str, Any]], bool] = lambda obj: True
                 ) -> list[tuple[dict[str, Any], int, int]]:
    """Every JSON object in ``text`` that ``keep`` accepts, in order, as ``(object, start, end)``.

    Scans with :meth:`json.JSONDecoder.raw_decode` from each ``{``; objects nested
    in an already found object are skipped. Duplicate keys are tolerated here
    (the last one wins, as in :mod:`json`).
    """
    found: list[tuple[dict[str, Any], int, int]] = []
    i = text.find("{")
    while i != -1:
        try:
            obj, end = PLAIN_DECODER.raw_decode(text, i)
        except json.JSONDecodeError:
            i = text.find("{", i + 1)
            continue
        if isinstance(obj, dict) and keep(obj):
            found.append((obj, i, end))
            i = text.find("{", end)
        else:
            i = text.find("{", i + 1)
    return found


#: The normalized form of the UNKNOWN answer the prompts allow.
UNKNOWN = "unknown"


def canonical_answer(value: str) -> str:
    """The canonical JSON answer candidates are scored as: ``{"answer": "value"}``, no leading space.

    >>> canonical_answer("109 hours")
    '{"answer": "109 hours"}'
    """
    return json.dumps({"answer": value}, ensure_ascii=False)


def normalize(s: str) -> str:
    """Casefold, collapse runs of whitespace to one space, and strip."""
    return " ".join(s.casefold().split())


@dataclass(frozen=True)
class ParseResult:
    """Result of :func:`parse_strict` or :func:`parse_answer_field`.

    Attributes:
        ok: the response is valid under the requested rule.
        answer: the answer when ``ok`` (a numeric answer field as its JSON text), else None.
        reason: ``"ok"`` or why it failed: ``"empty"``, ``"not_json"``,
            ``"not_object"``, ``"text_outside"``, ``"multiple_objects"``,
            ``"duplicate_keys"``, ``"missing_answer"``, ``"extra_fields"``,
            ``"non_string"``, ``"fenced"`` (fence present, not allowed),
            ``"multiple_fences"``, ``"unclosed_fence"``.
        fenced: one outer code fence was present and removed.
        strict_single_field: the response is exactly one string-valued ``answer``
            field, without any fence allowance.
    """

    ok: bool
    answer: str | None
    reason: str
    fenced: bool
    strict_single_field: bool


def _answer_fail(reason: str, fenced: bool = False) -> ParseResult:
    return ParseResult(ok=False, answer=None, reason=reason, fenced=fenced, strict_single_field=False)


def _parse_answer(text: str, allow_fence: bool, extra_fields: bool) -> ParseResult:
    """:func:`parse_object`, then the ``answer`` field (the two parsers differ only in their arguments)."""
    parsed = parse_object(text, allow_fence, embedded=lambda body: bool(find_answers(body)))
    if not parsed.ok:
        return _answer_fail(parsed.reason, parsed.fenced)
    obj, fenced = parsed.obj, parsed.fenced
    assert obj is not None
    if "answer" not in obj:
        return _answer_fail("missing_answer", fenced)
    value = obj["answer"]
    single = len(obj) == 1 and isinstance(value, str) and not fenced
    if len(obj) != 1 and not extra_fields:
        return _answer_fail("extra_fields", fenced)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and extra_fields:
        value = json.dumps(value)  # the answer-field parser reads a number (paper L4822-4825)
    if not isinstance(value, str):
        return _answer_fail("non_string", fenced)
    return ParseResult(ok=True, answer=value, reason="ok", fenced=fenced, strict_single_field=single)


def parse_strict(text: str, allow_fence: bool = True) -> ParseResult:
    """Strict single-string-field parse of a whole response.

    The stripped response must be exactly ``{"answer": "<string>"}`` (any JSON
    whitespace, no other key, no duplicate key, nothing else). With
    ``allow_fence`` (the "fenced complete" rule) exactly one outer Markdown code
    fence (```` ``` ```` or ```` ```json ````) may wrap it; the result then has
    ``fenced=True`` and ``strict_single_field=False``.
    """
    return _parse_answer(text, allow_fence, extra_fields=False)


def parse_answer_field(text: str) -> ParseResult:
    """The paper's answer-field parser (its scoring rules 1-2): read ``answer`` from one whole JSON object.

    Like :func:`parse_strict` without a fence (a fenced response fails with ``"fenced"``), except that
    additional fields are permitted and a numeric ``answer`` is read as its JSON number text
    (``{"answer": 628}`` gives ``"628"``). ``strict_single_field`` still records whether the response is
    exactly one string-valued field.
    """
    return _parse_answer(text, allow_fence=False, extra_fields=True)


def find_answers(text: str) -> list[tuple[str, int, int]]:
    """Every JSON object in ``text`` with a string ``answer`` field, in order.

    Scans with :meth:`json.JSONDecoder.raw_decode` from each ``{``; objects
    nested in an already found answer object are skipped. Returns
    ``(answer, start_char, end_char)`` triples. Duplicate keys and extra fields
    are tolerated here (last duplicate wins, as in :mod:`json`).
    """
    return [(obj["answer"], a, b) for obj, a, b in find_objects(text, lambda o: isinstance(o.get("answer"), str))]


def first_answer(text: str) -> str | None:
    """The ``answer`` string of the first JSON object anywhere in ``text`` that has one."""
    found = find_answers(text)
    return found[0][0] if found else None


def first_value(text: str, values: list[str]) -> str | None:
    """The value among ``values`` whose first occurrence in ``text`` comes first (case-folded)."""
    found = [(normalize(text).find(normalize(v)), i) for i, v in enumerate(values)]
    found = [(pos, i) for pos, i in found if pos >= 0]
    return values[min(found)[1]] if found else None


def grade(text: str, reference: str, values: list[str], rule: str = "fenced") -> dict[str, Any]:
    """Record-history grade: the exact ``answer`` field plus diagnostics.

    ``correct``: the ``answer`` field equals ``reference`` after :func:`normalize`, read by ``rule``:
    ``"fenced"`` (:func:`parse_strict`, one string field, one outer fence allowed) or ``"answer-field"``
    (:func:`parse_answer_field`, the paper's rules 1-2: extra fields permitted, no fence; L5453-5454);
    ``parse``: that parse's reason. With ``"answer-field"`` the strict fenced rule is kept beside it as
    ``correct_fenced``. ``contains``: the reference occurs in the output. ``lenient`` (ours, for models
    that answer in sentences): of the history's values, the first one the output mentions is the reference.

    >>> g = grade('{"answer": "Miami", "note": "moved"}', "miami", ["Tunis", "Miami"], rule="answer-field")
    >>> g["correct"], g["correct_fenced"], g["parse"]
    (True, False, 'ok')
    """
    if rule not in GRADE_RULES:
        raise ValueError(f"rule must be one of {', '.join(GRADE_RULES)}, got {rule!r}")
    fenced = parse_strict(text, allow_fence=True)
    parsed = fenced if rule == "fenced" else parse_answer_field(text)
    out = {"correct": exact_equal(parsed, reference), "parse": parsed.reason,
           "contains": normalize(reference) in normalize(text), "lenient": first_value(text, values) == reference}
    if rule == "answer-field":
        out["correct_fenced"] = exact_equal(fenced, reference)
    return out


#: The exact rules :func:`grade` reads the answer field by.
GRADE_RULES = ("fenced", "answer-field")


def exact_equal(parsed: ParseResult, reference: str) -> bool:
    """Whether a parse succeeded and its answer equals ``reference`` after :func:`normalize`."""
    return bool(parsed.ok and normalize(parsed.answer or "") == normalize(reference))


# ----------------------------------------------------------------------------- free-text answers (EM with EOS)
#: The boxed-answer instruction of the MQuAKE and MINTEval questions. The paper keeps "Boxed-answer
#: instructions" (L1409: "Boxed-answer instructions and the original normalization are retained")
#: without quoting them: UNCLEAR; ours is the common instruction of Qwen's chat models for boxed
#: answers. It follows every question after QUESTION_JOINER (UNCLEAR, ours: one space).
BOXED_INSTRUCTION = "Put your final answer within \\boxed{}."
QUESTION_JOINER = " "

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)
#: LaTeX markup a model wraps answers in (``\\boxed{...}``, ``\\text{...}``): a word boundary for
#: :func:`contains_answer`, where SQuAD normalization alone would glue the command to the answer's first word
#: (``\\boxed{Paris}`` -> "boxedparis").
_LATEX_MARKUP = re.compile(r"\\[A-Za-z]+|[{}]")


def normalize_answer(text: str) -> str:
    """SQuAD normalization: lowercase, drop punctuation, drop articles, collapse whitespace.

    Punctuation (``string.punctuation`` plus Unicode punctuation such as curly quotes) is
    deleted, as in SQuAD, so "Washington, D.C." -> "washington dc".
    """
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT and not unicodedata.category(ch).startswith("P"))
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def boxed_content(output: str) -> str | None:
    r"""Content of the last ``\boxed{...}`` (balanced braces), or None."""
    start = output.rfind("\\boxed{")
    if start < 0:
        return None
    i = start + len("\\boxed{")
    depth = 1
    for j in range(i, len(output)):
        if output[j] == "{":
            depth += 1
        elif output[j] == "}":
            depth -= 1
            if depth == 0:
                return output[i:j]
    return None


def displayed_answer(output: str) -> str:
    r"""What a grader reads of an answer: the last closed ``\boxed{}``'s content when present, else the
    whole response (paper L6846-6848: "the final boxed answer if present, otherwise the whole response").

    Example: ``displayed_answer("So \\boxed{Dick}.") == "Dick"``.
    """
    boxed = boxed_content(output)
    return output if boxed is None else boxed


def capped_first(stop_reason: str | None, label: str) -> str:
    """An answer's outcome when the answer budget takes precedence (paper L1661-1664, L6857): ``"capped"``
    unless the decode stopped at EOS, else the grader's ``label``.

    Example: ``capped_first("cap", "complete")`` is ``"capped"``; ``capped_first("eos", "wrong")`` is ``"wrong"``.
    """
    return label if stop_reason == "eos" else "capped"


def normalized_exact_match(output: str, answers: list[str], stopped_at_eos: bool, strict_boxed: bool = False) -> bool:
    r"""Primary metric: normalized exact match to an answer or alias, with EOS.

    "With EOS": the generation must have stopped at EOS (not at the token ceiling), and
    the normalized candidate must equal a normalized answer exactly. Candidates are the
    whole output (a correct bare answer still counts, spec partA section 1) and, when
    present, the content of the last ``\boxed{}``. ``strict_boxed=True`` (sensitivity)
    accepts only the boxed content. Answers that normalize to "" never match.
    """
    if not stopped_at_eos:
        return False
    boxed = boxed_content(output)
    candidates = [] if strict_boxed else [output]
    if boxed is not None:
        candidates.append(boxed)
    refs = {normalize_answer(a) for a in answers} - {""}
    return any(normalize_answer(c) in refs for c in candidates)


def _occurs(answer_norm: str, text_norm: str) -> bool:
    """Word-bounded occurrence of a normalized answer in normalized text."""
    return bool(answer_norm) and f" {answer_norm} " in f" {text_norm} "


def contains_answer(output: str, answers: list[str]) -> bool:
    r"""Lenient variant: a normalized answer occurs word-bounded anywhere in the output; no EOS needed.

    LaTeX commands and braces separate words first (:data:`_LATEX_MARKUP`), so a boxed answer is contained:
    ``contains_answer(r"\boxed{Paris}", ["Paris"])`` is True.
    """
    text = normalize_answer(_LATEX_MARKUP.sub(" ", output))
    return any(_occurs(normalize_answer(a), text) for a in answers)


# ----------------------------------------------------------------------------- declining to answer
#: Phrases that decline an answer (case-insensitive, whole words; :func:`declines`).
DECLINE_PHRASES = (
    "don't know", "do not know", "not mentioned", "never mentioned", "didn't mention", "did not mention",
    "haven't mentioned", "have not mentioned", "hasn't been mentioned", "has not been mentioned",
    "wasn't mentioned", "was not mentioned", "no mention", "no information", "not enough information",
    "information is not", "not provided", "didn't provide", "did not provide", "haven't provided",
    "have not provided", "not specified", "didn't specify", "did not specify", "not sure",
    "cannot determine", "can't determine", "cannot be determined", "unable to determine", "not available",
    "no record", "don't have", "do not have", "doesn't say", "does not say", "not stated", "unknown",
)
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
                "nineteen", "twenty")


def _apostrophes(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().replace("\u2019", "'").replace("\u2018", "'")


def declines(response: str) -> bool:
    """The response declines to answer (contains a decline phrase, case-insensitive, whole words)."""
    t = re.sub(r"\s+", " ", _apostrophes(response))
    return any(re.search(rf"(?<!\w){re.escape(p)}(?!\w)", t) for p in DECLINE_PHRASES)


def echoes_note(response: str, sentence: str, times: int = 2) -> bool:
    """The response loops on a neutral note: it repeats the note's ``sentence`` at least ``times`` times
    (a small model copying the note before Time 2 instead of answering).

    >>> echoes_note("A. A. A.", "A."), echoes_note("The answer. A.", "A.")
    (True, False)
    """
    return response.count(sentence) >= times
