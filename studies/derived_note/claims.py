"""The paper's claims the derived-note study tests, with measures of the derived-note runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, find_entry,
                                           floor_reason, pp_measurement, read_summary)

__all__ = ["CLAIMS", "derived_accuracy", "derived_contrast"]


def derived_contrast(key: str) -> Callable[[Path], Measurement]:
    """A margin contrast of the derived-note summary (nats)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        st = find_entry(s["contrasts"], key=key)["stat"]
        return Measurement(st["mean"], tuple(st["ci"]), "nats", "+.2f", f"{st['n']} groups", "neutral note",
                           units=s["groups"])
    return measure


def derived_accuracy(note: str, query: str, condition: str, rule: str) -> Callable[[Path], Measurement]:
    """A condition's accuracy change against full access (pp) in one note condition; ``rule``: ``strict``
    (the paper's exact JSON field) or ``lenient``."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        cell = find_entry(s["cells"], note=note, query=query, condition=condition)
        full = find_entry(s["cells"], note=note, query=query, condition="full")
        ch = cell["vs_full"] if rule == "strict" else cell["vs_full"]["lenient"]
        column = "correct" if rule == "strict" else "lenient_correct"
        reason = floor_reason(full[column], full["n"], "full access")
        return pp_measurement(ch["pp"]["mean"], ch["pp"]["ci"], f"{cell['n']} groups",
                              f"full {full[column]}/{full['n']}; {condition} {cell[column]}/{cell['n']}", reason,
                              units=s["groups"], answers=cell["n"])
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("derived-note.margin", "derived-note", "Hiding the derived note C raises the current margin beyond the "
          "neutral control",
          Paper("For Llama, masking C gives a 26-point current-accuracy gain [14,38] over full access and a margin "
                "gain beyond the neutral control of 1.62 [1.32,1.92].", (5847, 5849),
                "Recomputing States After a Derived Note", "1.62 [1.32, 1.92] nats (Llama)"),
          "up",
          (Test("derived-note/smollm2-135m-instruct", "mask-C margin gain vs full, derived minus neutral note",
                derived_contrast("maskC_margin_beyond_neutral")),
           Test("derived-note/qwen2.5-coder-0.5b-instruct", "mask-C margin gain vs full, derived minus neutral note",
                derived_contrast("maskC_margin_beyond_neutral"))),
          reference="neutral note", units="groups"),
    Claim("derived-note.accuracy", "derived-note", "Hiding the derived note C raises current accuracy",
          Paper("For Llama, masking C gives a 26-point current-accuracy gain [14,38] over full access and a margin "
                "gain beyond the neutral control of 1.62 [1.32,1.92].", (5847, 5849),
                "Recomputing States After a Derived Note", "+26 [14, 38] pp (Llama)"),
          "up",
          (Test("derived-note/smollm2-135m-instruct", f"{PAPER_RULE}: exact JSON field; mask C vs full; derived "
                "note, current question", derived_accuracy("derived", "current", "mask-C", "strict")),
           Test("derived-note/smollm2-135m-instruct", f"{LENIENT}; mask C vs full; derived note, current question",
                derived_accuracy("derived", "current", "mask-C", "lenient"), primary=False),
           Test("derived-note/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact JSON field; mask C vs full; "
                "derived note, current question", derived_accuracy("derived", "current", "mask-C", "strict"))),
          reference="full access", units="groups"),
    Claim("derived-note.refresh-historical", "derived-note", "With a neutral note, refreshing later states with A "
          "hidden loses historical answers",
          Paper("With a neutral note, Gemma 4 31B's historical answers fall from 50/50 to 8/50 when later states "
                "are refreshed with A hidden", (5883, 5885), "Later States and Recomputing the History",
                "50/50 -> 8/50 (Gemma 4 31B)"),
          "down",
          (Test("derived-note/smollm2-135m-instruct", f"{PAPER_RULE}: exact JSON field; refresh vs full; neutral "
                "note, historical question", derived_accuracy("neutral", "historical", "refresh", "strict")),
           Test("derived-note/smollm2-135m-instruct", f"{LENIENT}; refresh vs full; neutral note, historical "
                "question", derived_accuracy("neutral", "historical", "refresh", "lenient"), primary=False),
           Test("derived-note/qwen2.5-coder-0.5b-instruct", f"{PAPER_RULE}: exact JSON field; refresh vs full; "
                "neutral note, historical question", derived_accuracy("neutral", "historical", "refresh",
                                                                      "strict"))),
          reference="full access", units="groups"),
)
