"""The configurations of the note-control study: (prompt profile, question, access), one name each.

The paper's 14 control-factor configurations (seed L3821-3824, table tab:v35_control_all), its
near/far matched occurrence (L3846-3853) and the note ablations of tab:v41_note_controls
(L5402-5413) under the repeated and the varied note. The paper's 21 combinations per note
profile (L5397-5400) are not listed; ours are these 24 (and, with ``current_queries``, the
current question under full / whole-source / number-only access in the original and varied
profiles, L5433-5437).

Example::

    CATALOG["plain-early"]            # Configuration('plain-early', 'plain', 'unrelated', 'early')
    CATALOG["plain-early"].reference  # 'plain-full': the full access of its profile and question
"""

from __future__ import annotations

from dataclasses import dataclass

#: The question kinds: the unrelated label question, the explicit one, the current quantity question.
QUESTIONS = ("unrelated", "explicit", "current")


@dataclass(frozen=True)
class Configuration:
    """One configuration: which history (``profile``), which question, which access (a window name of
    :mod:`.windows`, ``full``, ``whole-a``, or for the current question ``source`` / ``number``)."""

    name: str
    profile: str
    question: str
    access: str

    @property
    def reference(self) -> str:
        """The configuration with full access to the same history and question."""
        return next(c.name for c in ALL if (c.profile, c.question, c.access) == (self.profile, self.question, "full"))


def _c(name: str, profile: str, access: str, question: str = "unrelated") -> Configuration:
    return Configuration(name, profile, question, access)


#: The paper's 14 control-factor configurations, in its table's order.
PAPER_FOURTEEN = (
    _c("full", "original", "full"), _c("early", "original", "early"), _c("middle", "original", "middle"),
    _c("late", "original", "late"), _c("sentence-end", "original", "sentence-end"),
    _c("all-note", "original", "all-note"), _c("whole-a", "original", "whole-a"),
    _c("plain-full", "plain", "full"), _c("plain-early", "plain", "early"),
    _c("explicit-full", "original", "full", "explicit"), _c("explicit-early", "original", "early", "explicit"),
    _c("no-unknown-full", "no-unknown", "full"), _c("no-unknown-early", "no-unknown", "early"),
    _c("no-note-full", "no-note", "full"),
)
#: The matched occurrence: the near and far copies of one token sequence.
MATCHED = (_c("near", "original", "near"), _c("far", "original", "far"))
#: The note ablations of tab:v41_note_controls under the repeated note (its full and early are above).
REPEATED_ABLATIONS = (_c("preserve-first-four", "original", "preserve-first-four"),
                      _c("first-four", "original", "first-four"), _c("last-four", "original", "last-four"))
#: The same five cells under the varied note.
VARIED = tuple(_c(f"varied-{a}", "varied", a) for a in ("full", "early", "preserve-first-four", "first-four",
                                                        "last-four"))
#: Every configuration the ``configurations`` parameter can name, in report order.
CONFIGURATIONS = PAPER_FOURTEEN + MATCHED + REPEATED_ABLATIONS + VARIED
#: The current question on the unit-dependent replacement cases (``current_queries``).
CURRENT = tuple(_c(f"{p}current-{a}", profile, a, "current")
                for p, profile in (("", "original"), ("varied-", "varied")) for a in ("full", "source", "number"))
ALL = CONFIGURATIONS + CURRENT
CATALOG = {c.name: c for c in ALL}
NAMES = tuple(c.name for c in CONFIGURATIONS)
