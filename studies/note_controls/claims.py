"""The paper's claims the note-controls study tests, with measures of the note-controls runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`). The run's summary (``summary._effects``) judges
the same claims, and those of :data:`REPORT_CLAIMS`, on :func:`note_change_measurement` and
:func:`note_margin_measurement` of the summary dict.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvprobe.studies.common.claims import (LENIENT, PAPER_RULE, Claim, Measurement, Paper, Test, find_entry,
                                           floor_reason, join_reasons, pp_measurement, read_summary)

__all__ = ["CLAIMS", "NOTES_QWEN", "NOTES_SMOL", "REPORT_CLAIMS", "note_by_rule", "note_change",
           "note_change_measurement", "note_early", "note_margin", "note_margin_measurement"]


NOTES_SMOL, NOTES_QWEN = "note-controls/smollm2-135m-instruct", "note-controls/qwen2.5-coder-0.5b-instruct"


def _note_config(s: dict[str, Any], name: str) -> dict[str, Any]:
    return find_entry(s["configurations"], configuration=name)


def _configuration_label(name: str) -> str:
    return {"full": "full access", "varied-full": "full access under the varied note"}.get(name, name)


def note_change(s: dict[str, Any], where: Sequence[str], rule: str) -> dict[str, Any] | None:
    """A paired change of a summary ``s`` under ``rule`` by its path: a configuration's ``(name, "vs_full")`` or
    ``(name, "vs_reference")``, else a ``by_rule`` contrast (``("near_far",)``, ``("note_profiles",
    "loss_difference")``); None where the run has none."""
    by = {c["configuration"]: c for c in s["configurations"]}
    if len(where) == 2 and where[0] in by:
        return by[where[0]][where[1]].get(rule)
    change = s["by_rule"][rule].get(where[0])
    return change.get(where[1]) if change and len(where) == 2 else change


def note_change_measurement(s: dict[str, Any], where: Sequence[str], rule: str,
                            baselines: Sequence[str]) -> Measurement:
    """:func:`note_change` of a summary ``s`` (pp, KeyError where the run has none); not testable when a
    ``baselines`` configuration (the reference arm: full access of the effect's note and question) is at the floor
    or not in the run.

    The run's summary (``summary._effects``) and the scorecard (:func:`note_early`, :func:`note_by_rule`) both
    judge this measurement.
    """
    ch = note_change(s, where, rule)
    if ch is None:
        raise KeyError(f"no change {'/'.join(where)} under {rule}")
    by = {c["configuration"]: c for c in s["configurations"]}
    rows = [by[b] for b in baselines if b in by]
    counts = "; ".join(f"{_configuration_label(a['configuration'])} {a['correct'][rule]}/{a['n']}" for a in rows)
    reason = join_reasons(*(floor_reason(a["correct"][rule], a["n"], _configuration_label(a["configuration"]))
                            for a in rows),
                          *(f"{_configuration_label(b)} not in the run" for b in baselines if b not in by))
    return pp_measurement(ch["pp"], ch["pp_ci"], f"{s['units']} histories, {s['groups']} groups", counts, reason,
                          units=s["groups"], answers=s["units"])


def note_early(rule: str) -> Callable[[Path], Measurement]:
    """Early-note control minus full access (pp) on the label question: :func:`note_change_measurement` of a
    committed run, with both arms' counts."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        early, full = _note_config(s, "early"), _note_config(s, "full")
        counts = f"full {full['correct'][rule]}/{full['n']}; early {early['correct'][rule]}/{early['n']}"
        return replace(note_change_measurement(s, ("early", "vs_full"), rule, ("full",)), reference=counts)
    return measure


def note_by_rule(contrast: Sequence[str], baselines: Sequence[str]) -> Callable[[str], Callable[[Path], Measurement]]:
    """A ``by_rule`` contrast, by its key path (``("near_far",)``, ``("note_profiles", "loss_difference")``);
    the floor is checked on the ``baselines`` configurations: :func:`note_change_measurement` of a committed run."""
    def for_rule(rule: str) -> Callable[[Path], Measurement]:
        def measure(run: Path) -> Measurement:
            return note_change_measurement(read_summary(run), contrast, rule, baselines)
        return measure
    return for_rule


def note_margin_measurement(s: dict[str, Any]) -> Measurement:
    """Change of the label-vs-UNKNOWN first-token margin under the early-note control (nats) in a summary ``s``;
    no interval when it gives none.

    The run's summary (``summary._effects``) and the scorecard (:func:`note_margin`) both judge this measurement.
    """
    m = _note_config(s, "early")["margin_vs_full"]
    return Measurement(m["mean"], None if m["ci"] is None else tuple(m["ci"]), "nats", "+.2f",
                       f"{s['units']} histories, {s['groups']} groups", "full", units=s["groups"])


def note_margin(run: Path) -> Measurement:
    """:func:`note_margin_measurement` of a committed run."""
    return note_margin_measurement(read_summary(run))


def _note_tests(compared: str, make: Callable[[str], Callable[[Path], Measurement]]) -> tuple[Test, ...]:
    """SmolLM2 under the paper's label rule (primary) and the lenient rule (secondary), Qwen2.5-Coder under the
    paper's rule."""
    paper = f"{PAPER_RULE}: label in the JSON answer field, EOS; {compared}"
    return (Test(NOTES_SMOL, paper, make("label_correct")),
            Test(NOTES_SMOL, f"{LENIENT}: label mentioned first; {compared}", make("lenient_correct"), primary=False),
            Test(NOTES_QWEN, paper, make("label_correct")))


_near_far = note_by_rule(("near_far",), ("full",))


_varied = note_by_rule(("note_profiles", "loss_difference"), ("full", "varied-full"))


CLAIMS: tuple[Claim, ...] = (
    Claim("note-controls.early", "note-controls", "Hiding the note's first tokens (the early control) loses "
          "correct labels",
          Paper("Masking the first 31 note tokens gives 8/240 correct answers, versus 146/240 with full access.",
                (3842, 3843), "Effects of control location and prompt wording on abstention",
                "146/240 -> 8/240"),
          "down",
          _note_tests("early control vs full", note_early), reference="full access", units="groups"),
    Claim("note-controls.occurrence", "note-controls", "Which copy of a repeated note window is hidden matters "
          "(far minus near)",
          Paper("Blocking the earlier copy gives 8/240 correct answers; blocking the later copy gives 146/240, with "
                "138 corrections and no reversals", (3850, 3851),
                "Effects of control location and prompt wording on abstention", "+57.5 pp [49.58, 65.42]",
                (3852, 3853)),
          "up",
          _note_tests("far copy vs near copy", _near_far), reference="near copy hidden", units="groups"),
    Claim("note-controls.varied", "note-controls", "A varied (non-repeated) note loses less under the early "
          "control",
          Paper("The early-mask loss is -57.50 points [-65.42,-50.00] under repeated text and -13.33 [-17.92,-9.17] "
                "under varied text.", (5417, 5418), "Varied Background Text and Early Note Access",
                "-57.50 (repeated) vs -13.33 (varied) pp"),
          "up",
          _note_tests("early-control loss, varied minus repeated note", _varied), reference="repeated note", units="groups"),
    Claim("note-controls.margin", "note-controls", "The early control lowers the label-vs-UNKNOWN first-token "
          "margin",
          Paper("The mean log-probability difference changes from +0.205 to -3.050 nats under the original control.",
                (3896, 3897), "Effects of control location and prompt wording on abstention",
                "+0.205 -> -3.050 nats"),
          "down",
          (Test(NOTES_SMOL, "first-value margin (label vs UNKNOWN); early control vs full", note_margin),
           Test(NOTES_QWEN, "first-value margin (label vs UNKNOWN); early control vs full", note_margin)),
          reference="full access", units="groups"),
)

#: Claims only the run's summary judges (the scorecard lists :data:`CLAIMS`): the paper's no-change findings of the
#: plain-note interaction and of the two prompt edits under the early control.
REPORT_CLAIMS: tuple[Claim, ...] = (
    Claim("note-controls.plain-note", "note-controls", "Replacing the note's color word leaves the early control's "
          "loss unchanged (gray->plain interaction)",
          Paper("The color word is therefore not necessary for the observed loss.", (3864, 3864),
                "Effects of control location and prompt wording on abstention", "+2.5 pp [-0.42, 5.42]",
                (3863, 3863)),
          "none", ()),
    Claim("note-controls.explicit-question", "note-controls", "With the explicit question the early control keeps "
          "the label (explicit early - explicit full)",
          Paper("Full and original control both score 240/240.", (3878, 3879),
                "Effects of control location and prompt wording on abstention", "240/240 -> 240/240"),
          "none", ()),
    Claim("note-controls.no-unknown", "note-controls", "Without the UNKNOWN clause the early control keeps the label "
          "(no-UNKNOWN early - no-UNKNOWN full)",
          Paper("After prefilling this new prompt, full and control again score 240/240.", (3881, 3882),
                "Effects of control location and prompt wording on abstention", "240/240 -> 240/240"),
          "none", ()),
)
