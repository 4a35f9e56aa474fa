"""Text detectors: does a later record replace an earlier one? (paper partB section 4).

Three JSON classifiers read the two record texts with the paper's verbatim
prompts (:mod:`.strings`): the *direct* and *expanded* relation classifiers
(``{"supersedes": ...}``) and *asserted-value extraction*
(``{"same_slot": ..., "old_current": ..., "later_current": ...}``). A fourth,
*yes-no*, scores the single next-token answer YES against NO.

Every output is parsed strictly (:func:`studies.common.answers.parse_object`) and
every failure is kept with its reason. Decisions are three-valued:
``"replacement"``, ``"no_replacement"`` or ``"unresolved"``; an unresolved
verdict never triggers a mask (paper L2578-2580).

Decision rules:

* extraction (paper L2574-2578): replacement iff ``same_slot`` is the Boolean
  true and ``old_current`` and ``later_current`` are nonempty strings that differ
  after case folding and whitespace normalization; no containment test.
  ``same_slot`` false is a no-replacement verdict; anything missing or of the
  wrong type is unresolved.
* direct: ``supersedes`` is a Boolean (true: replacement). UNCLEAR (paper): the
  use of ``confidence``; ignored.
* expanded: as direct, and "additionally tests equivalence of the extracted
  values" (L2569). UNCLEAR (paper): the rule; ours turns a true verdict whose
  ``old_value`` and ``new_value`` are both nonempty strings equal after
  normalization into no replacement.
* lexical value filter (L2583-2585): a replacement verdict is suppressed when the
  supplied old value occurs in both records (case-folded substring test; UNCLEAR
  whether the paper folds case).

How a detector prompt becomes a kvprobe history: everything up to the later
record is the history (prefilled once per pair) and the later record is the
"question" with ``question_sep=""``, so the user message is the prompt exactly.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any, Sequence

import kvprobe
from kvprobe import decoding
from kvprobe.studies.common.answers import normalize, parse_object
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.protocol import use_chat
from . import strings

REPLACEMENT, NO_REPLACEMENT, UNRESOLVED = "replacement", "no_replacement", "unresolved"
#: Greedy detector budget (paper L2589: a 128-token detector limit on the record dataset).
MAX_NEW_TOKENS = 128


@dataclass(frozen=True)
class TextDetector:
    """A JSON classifier: its verbatim prompt, system message and decision rule."""

    name: str
    prompt: str
    rule: str  # "supersedes" | "expanded" | "extraction"
    system: str = strings.SYSTEM_RECORDS


TEXT_DETECTORS = {
    "direct": TextDetector("direct", strings.DIRECT, "supersedes"),
    "expanded": TextDetector("expanded", strings.EXPANDED, "expanded"),
    "asserted-value": TextDetector("asserted-value", strings.ASSERTED_VALUE, "extraction"),
}
YES_NO = "yes-no"
DETECTORS = (*TEXT_DETECTORS, YES_NO)
#: The chat-template date the paper states for a detector prompt (the YES/NO score's, seed L3566-3567); the JSON
#: classifiers' section states none (:mod:`kvprobe.studies.common.chat_template` decides).
TEMPLATE_DATES = {strings.YES_NO: strings.YES_NO_TEMPLATE_DATE}


def _nonempty_string(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


@dataclass(frozen=True)
class Verdict:
    """A parsed detector output.

    Attributes:
        decision: ``replacement``, ``no_replacement`` or ``unresolved``.
        reason: ``"ok"``, a parse failure (:data:`studies.common.answers.FAILURES`) or a
            field failure (``"missing:<field>"``, ``"type:<field>"``, ``"empty:<field>"``).
        fields: the parsed object (empty when parsing failed).
    """

    decision: str
    reason: str
    fields: dict[str, Any]


def _supersedes(obj: dict[str, Any], check_values: bool) -> Verdict:
    if "supersedes" not in obj:
        return Verdict(UNRESOLVED, "missing:supersedes", obj)
    if not isinstance(obj["supersedes"], bool):
        return Verdict(UNRESOLVED, "type:supersedes", obj)
    if not obj["supersedes"]:
        return Verdict(NO_REPLACEMENT, "ok", obj)
    old, new = obj.get("old_value"), obj.get("new_value")
    if check_values and _nonempty_string(old) and _nonempty_string(new) \
            and normalize(old) == normalize(new):
        return Verdict(NO_REPLACEMENT, "ok", obj)
    return Verdict(REPLACEMENT, "ok", obj)


def _extraction(obj: dict[str, Any]) -> Verdict:
    if "same_slot" not in obj:
        return Verdict(UNRESOLVED, "missing:same_slot", obj)
    if not isinstance(obj["same_slot"], bool):
        return Verdict(UNRESOLVED, "type:same_slot", obj)
    if not obj["same_slot"]:
        return Verdict(NO_REPLACEMENT, "ok", obj)
    for key in ("old_current", "later_current"):
        if key not in obj:
            return Verdict(UNRESOLVED, f"missing:{key}", obj)
        if not isinstance(obj[key], str):
            return Verdict(UNRESOLVED, f"type:{key}", obj)
        if not obj[key].strip():
            return Verdict(UNRESOLVED, f"empty:{key}", obj)
    same = normalize(obj["old_current"]) == normalize(obj["later_current"])  # case-folded, whitespace-normalized
    return Verdict(NO_REPLACEMENT if same else REPLACEMENT, "ok", obj)


def parse_verdict(detector: TextDetector, text: str, allow_fence: bool = True) -> Verdict:
    """Parse one detector output and apply the detector's decision rule.

    ``allow_fence``: accept one outer Markdown fence (UNCLEAR in the paper; default yes,
    and the row records whether a fence was there).
    """
    parsed = parse_object(text, allow_fence)
    if not parsed.ok:
        return Verdict(UNRESOLVED, parsed.reason, {})
    assert parsed.obj is not None
    if detector.rule == "extraction":
        return _extraction(parsed.obj)
    return _supersedes(parsed.obj, check_values=detector.rule == "expanded")


def lexical_filter(decision: str, old_value: str, a_text: str, b_text: str) -> str:
    """The legacy guard: no replacement when the supplied old value occurs in both records."""
    if decision != REPLACEMENT:
        return decision
    old = old_value.casefold()
    return NO_REPLACEMENT if old in a_text.casefold() and old in b_text.casefold() else decision


def detector_prompt(template: str, old: str, later: str, system: str | None, chat: bool,
                    question: str | None = None) -> tuple[kvprobe.Prompt, str]:
    """(prompt holding everything before the later record, the later record (and the template's
    trailing whitespace, e.g. the YES/NO template's two newlines) as the question).

    The user message (or raw text) is exactly ``strings.fill(template, old, later)``,
    preceded by the question-conditioned sentences when ``question`` is given. Chat-template settings:
    :mod:`kvprobe.studies.common.chat_template` (thinking off, seed L2449-2450; the date of :data:`TEMPLATE_DATES`).
    """
    text = strings.fill(template, old, strings.LATER_PLACEHOLDER)
    if question is not None:
        text = strings.QUESTION_CONDITIONED.format(question=question) + "\n\n" + text
    head, tail = text.split(strings.LATER_PLACEHOLDER)
    if tail.strip():
        raise ValueError("only whitespace may follow the later record in a detector prompt")
    prompt = study_prompt([("prompt", head)], chat=chat, system=system if chat else None, question_sep="",
                          raw_suffix="\n", date=TEMPLATE_DATES.get(template))
    return prompt, later + tail


@dataclass(frozen=True)
class RecordPair:
    """The input of a detector: two records and the old value (for the lexical filter)."""

    a_text: str
    b_text: str
    old_value: str



_BASES: weakref.WeakKeyDictionary[kvprobe.Model, dict[tuple[str, str | None, bool], kvprobe.History]] = \
    weakref.WeakKeyDictionary()
#: The stand-in record of the shared base prefill (only its instruction prefix is reused).
_BASE_RECORD = "-"


def prefill_detector(model: kvprobe.Model, template: str, system: str | None, chat: bool, old: str, later: str
                     ) -> tuple[kvprobe.History, str]:
    """Prefill one detector prompt, reusing the K/V of the template's instruction text.

    All prompts of one template share the instructions before the old record. They are
    prefilled once per (model, template, system, chat), from the template with a fixed
    stand-in record, and copied into each history (``Model.prefill(reuse=...)``), so a
    history never depends on which pairs share a batch or a run.
    """
    bases = _BASES.setdefault(model, {})
    key = (template, system, chat)
    if key not in bases:
        bases[key] = model.prefill(detector_prompt(template, _BASE_RECORD, _BASE_RECORD, system, chat)[0])
    prompt, question = detector_prompt(template, old, later, system, chat)
    return model.prefill(prompt, reuse=bases[key]), question


def run_text_detectors(model: kvprobe.Model, pairs: Sequence[RecordPair], names: Sequence[str],
                       max_new_tokens: int = MAX_NEW_TOKENS, chat: bool | None = None,
                       allow_fence: bool = True) -> list[dict[str, dict[str, Any]]]:
    """Greedy outputs and verdicts of the named JSON detectors on every pair, in one batch.

    Returns per pair ``{detector: fields}`` with the raw output, stop reason, token
    count, parse/field reason, the decision and the lexically filtered decision.
    """
    chat = use_chat(model.tokenizer, chat)
    items, keys = [], []
    for i, pair in enumerate(pairs):
        for name in names:
            det = TEXT_DETECTORS[name]
            history, later = prefill_detector(model, det.prompt, det.system, chat, pair.a_text, pair.b_text)
            items.append((history, kvprobe.Request(later, kvprobe.Full())))
            keys.append((i, name))
    answers = decoding.answer(model, items, max_new_tokens=max_new_tokens)
    out: list[dict[str, dict[str, Any]]] = [{} for _ in pairs]
    for (i, name), ans in zip(keys, answers):
        g = ans.generation
        verdict = parse_verdict(TEXT_DETECTORS[name], g.text, allow_fence)
        pair = pairs[i]
        out[i][name] = {
            "output": g.text, "stop_reason": g.stop_reason, "output_tokens": g.n_tokens,
            "parse": verdict.reason, "decision": verdict.decision,
            "filtered": lexical_filter(verdict.decision, pair.old_value, pair.a_text, pair.b_text),
        }
    return out


def yes_no_scores(model: kvprobe.Model, pairs: Sequence[RecordPair], chat: bool | None = None
                  ) -> list[dict[str, Any]]:
    """The paper's YES/NO replacement score of each pair (seed L3569-3578).

    ``YES`` and ``NO`` are tokenized alone (no special tokens) and scored by teacher
    forcing after the prompt (summed float32 log-probabilities: a tokenizer that splits a
    candidate still gets a sequence score; ``single_token`` says whether both were one
    token, as in the paper), and s = 1 / (1 + exp(clip(log p(NO) - log p(YES), -80, 80)))
    in float32: the probability of YES normalized over the two candidates.
    """
    import numpy as np

    chat = use_chat(model.tokenizer, chat)
    items = []
    for pair in pairs:
        history, later = prefill_detector(model, strings.YES_NO, strings.YES_NO_SYSTEM, chat, pair.a_text, pair.b_text)
        items.append((history, kvprobe.Request(later, kvprobe.Full())))
    answers = decoding.answer(model, items, candidates=[strings.YES_NO_TOKENS] * len(items))
    rows = []
    for ans in answers:
        s = ans.scores
        yes, no = s.logprobs
        log_odds = np.clip(np.float32(no) - np.float32(yes), -strings.YES_NO_CLIP, strings.YES_NO_CLIP)
        score = np.float32(1) / (np.float32(1) + np.exp(np.float32(log_odds)))
        rows.append({"score": float(score), "logp_yes": yes, "logp_no": no, "single_token": s.n_tokens == (1, 1)})
    return rows
