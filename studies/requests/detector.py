"""Replaceable replacement detectors for the request workload.

A detector is any callable ``detector(model, pair) -> Detection`` with a ``name``
attribute: it reads record A and the arriving record B (:class:`RecordPair`) and says
whether B replaces A's value. The workload times the call as "detection" (it includes
the detector's own tokenization and prefill), so a detector should do all its work
inside the call.

* :class:`JsonDetector` (default ``"asserted-value"``): one of the paper's JSON
  classifiers (``studies.common.detectors``, verbatim prompts, strict parsing, 128 greedy
  tokens), run serially on the generator model or on its own ``model``. Only a
  ``replacement`` decision fires; ``unresolved`` never does (paper L2578-2580).
  The instruction prefix of the detector prompt is encoded once per model and reused,
  as ``studies.common.detectors.text.prefill_detector`` does; the warm-up pays it.
* :class:`FixedDetector` (``"always"`` / ``"never"``): a constant decision, for tests
  and for separating the detector's cost from the policy's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

import kvprobe
from kvprobe.studies.common.detectors.text import (MAX_NEW_TOKENS, REPLACEMENT, TEXT_DETECTORS, RecordPair, detector_prompt,
                                            lexical_filter, parse_verdict)
from kvprobe.studies.common.protocol import use_chat

FIXED = ("always", "never")
DETECTOR_NAMES = (*TEXT_DETECTORS, *FIXED)


@dataclass(frozen=True)
class Detection:
    """A detector's verdict on one update.

    Attributes:
        fired: whether the policy should act (hide or delete record A).
        decision: ``replacement`` / ``no_replacement`` / ``unresolved`` (JSON detectors) or
            ``fixed``.
        info: JSON-serializable details (parse reason, output tokens, stop reason...).
    """

    fired: bool
    decision: str
    info: dict[str, Any] = field(default_factory=dict)


class Detector(Protocol):
    """What the workload calls when B arrives."""

    name: str

    def __call__(self, model: kvprobe.Model, pair: RecordPair) -> Detection: ...


@dataclass
class JsonDetector:
    """One of the paper's JSON detectors, run serially on one update.

    The same computation as ``studies.common.detectors.text.run_text_detectors`` for one
    pair (the same prompt, shared-prefix reuse, greedy tokens and decision rule; tested
    equal), through the timed primitives of :mod:`studies.requests.serving` so that no
    check (the K/V digest a ``Model.prefill`` takes) runs inside the timed call. The
    instruction prefix before record A is encoded once per model (the warm-up pays it).

    Args:
        name: ``"asserted-value"`` (default), ``"direct"`` or ``"expanded"``.
        lexical_filter: suppress a replacement when A's value occurs in both records.
        max_new_tokens: greedy detector budget (paper: 128 on the record dataset).
        chat: use the chat template (None: when the tokenizer has one).
        model: the model that detects (None: the generator model passed to the call).
    """

    name: str = "asserted-value"
    lexical_filter: bool = False
    max_new_tokens: int = MAX_NEW_TOKENS
    chat: bool | None = None
    model: kvprobe.Model | None = None
    _bases: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.name not in TEXT_DETECTORS:
            raise ValueError(f"unknown JSON detector {self.name!r}; choose from {list(TEXT_DETECTORS)}")

    def __call__(self, model: kvprobe.Model, pair: RecordPair) -> Detection:
        """Run the detector on one (A, B) pair and apply its decision rule."""
        from .serving import encode, now, seal, serve

        m = self.model if self.model is not None else model
        det = TEXT_DETECTORS[self.name]
        chat = use_chat(m.tokenizer, self.chat)
        key = (id(m), chat)
        if key not in self._bases:  # the instruction text, shared by every pair (untimed after the first call)
            base_prompt = detector_prompt(det.prompt, _STAND_IN, _STAND_IN, det.system, chat)[0]
            self._bases[key] = (m, seal(encode(m, base_prompt).history))
        t0 = now()
        prompt, later = detector_prompt(det.prompt, pair.a_text, pair.b_text, det.system, chat)
        enc = encode(m, prompt, reuse=self._bases[key][1])
        t1 = now()
        served = serve(m, enc.history, later, kvprobe.Full(), self.max_new_tokens)
        g = served.generation
        verdict = parse_verdict(det, g.text)
        decision = verdict.decision
        if self.lexical_filter:
            decision = lexical_filter(decision, pair.old_value, pair.a_text, pair.b_text)
        t2 = now()
        return Detection(decision == REPLACEMENT, decision,
                         {"parse": verdict.reason, "output_tokens": g.n_tokens, "stop_reason": g.stop_reason,
                          "output": g.text, "unfiltered": verdict.decision, "prompt_tokens": len(enc.history),
                          "prefill_ms": round(1000 * (t1 - t0), 3), "generate_ms": round(1000 * (t2 - t1), 3)})


#: The stand-in record of the shared instruction prefix (only the text before it is reused).
_STAND_IN = "-"


@dataclass(frozen=True)
class FixedDetector:
    """A detector that always (``fires=True``) or never fires, at no cost."""

    fires: bool

    @property
    def name(self) -> str:
        return "always" if self.fires else "never"

    def __call__(self, model: kvprobe.Model, pair: RecordPair) -> Detection:
        return Detection(self.fires, "fixed")


def make_detector(name: str, lexical_filter: bool = False, max_new_tokens: int = MAX_NEW_TOKENS,
                  chat: bool | None = None, model: kvprobe.Model | None = None) -> Detector:
    """The detector named ``name`` (:data:`DETECTOR_NAMES`)."""
    if name in FIXED:
        return FixedDetector(name == "always")
    return JsonDetector(name, lexical_filter, max_new_tokens, chat, model)


def detector_name(detector: str | Callable[..., Detection]) -> str:
    """A detector's name for configs and rows (its ``name`` attribute, else its type)."""
    if isinstance(detector, str):
        return detector
    return str(getattr(detector, "name", type(detector).__name__))
