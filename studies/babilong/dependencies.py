"""Object dependencies of BABILong qa2/qa3: symbolic trace, two masking rules, verifier.

Paper section 2 (spec partA section 2) compares two "source" masks over the bAbI facts of a
BABILong input. A rule returns the fact indices it KEEPS visible; attention to every other fact
would be masked. Both rules look at the facts only, never at a question or a gold answer, and
neither ever hides an object event (pickup or drop): they differ only in which movements they keep.

* ``naive_keep``: each person's last movement, plus every object event.
* ``dependency_keep`` (the paper's "conservative rule"): naive, plus the carrier's last movement
  before each pickup and each drop (it places the event), plus every movement of a person who is
  carrying an object (it is part of the object's path).

``verify`` re-simulates with the kept facts only (a person is where their latest kept movement put
them, or nowhere known) and compares with the full simulation: object trajectories, pickup/drop
locations, final ownership, and whether each question's gold answer is still derivable.

Decisions the paper leaves open (UNCLEAR), with our choice:

* A person's location is unknown until their first (kept) movement. A pickup by a person of
  unknown location leaves the object where it was (possibly unknown); the object arrives
  wherever the person moves next.
* A trajectory lists each change of the object's known location (consecutive-distinct, so a
  revisited location appears again) with the index of the fact that caused it; a move to the
  place where one already is changes nothing. Trajectories are compared with these indices.
* qa3 "Where was the O before the L?": the location preceding the *last* arrival at L before the
  question (checked against every gold answer of the qa3 test file).
* A BABILong input is one question with the story facts before it, so ``verify_story`` checks the
  rule both on the whole story (all questions) and on each question's prefix (rule recomputed on
  the prefix, as it would be on that input); a story is ok only if all of these verify.

Usable as ``python -m studies.babilong.dependencies PATH [PATH ...] [--rule naive|dependency]``;
``verify_file`` returns the same numbers as a dict for a future ``kvprobe`` subcommand.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from kvprobe.studies.datasets.babi import Fact, Question, Story, parse_babi

MAX_REPORTED_MISMATCHES = 5


class Arrival(NamedTuple):
    """An object reaching ``location`` at fact index ``index``."""

    location: str
    index: int


@dataclass(frozen=True)
class ObjectEvent:
    """A pickup ("get") or drop at fact ``index``, placed where the person was (None: unknown)."""

    index: int
    kind: str
    person: str
    obj: str
    location: str | None


@dataclass
class Trace:
    """Symbolic state after a sequence of facts, with each object's history."""

    person_location: dict[str, str | None] = field(default_factory=dict)
    holder: dict[str, str | None] = field(default_factory=dict)  # final ownership (None: lying)
    object_location: dict[str, str | None] = field(default_factory=dict)
    trajectories: dict[str, list[Arrival]] = field(default_factory=lambda: defaultdict(list))
    events: dict[int, ObjectEvent] = field(default_factory=dict)  # by fact index
    warnings: list[str] = field(default_factory=list)  # inconsistencies in the facts themselves

    def path_before(self, obj: str, position: int) -> list[str]:
        """The object's locations, in order, among arrivals at fact indices below ``position``."""
        return [a.location for a in self.trajectories.get(obj, []) if a.index < position]

    def location_at(self, obj: str, position: int) -> str | None:
        """Where the object is after the first ``position`` facts (None: unknown)."""
        path = self.path_before(obj, position)
        return path[-1] if path else None


# --------------------------------------------------------------------------- simulation


def _arrive(trace: Trace, obj: str, location: str | None, index: int) -> None:
    """Move ``obj`` to ``location`` (if known and different), recording the arrival."""
    if location is not None and trace.object_location.get(obj) != location:
        trace.object_location[obj] = location
        trace.trajectories[obj].append(Arrival(location, index))


def _apply_move(trace: Trace, index: int, fact: Fact) -> None:
    """The person goes to the location; every object they hold goes with them."""
    trace.person_location[fact.person] = fact.location
    for obj, holder in trace.holder.items():
        if holder == fact.person:
            _arrive(trace, obj, fact.location, index)


def _apply_get(trace: Trace, index: int, fact: Fact) -> None:
    """The person takes the object where they are; it is now carried by them."""
    obj, where = fact.obj, trace.person_location.get(fact.person)
    previous = trace.holder.get(obj)
    if previous is not None and previous != fact.person:
        trace.warnings.append(f"line {fact.line_id}: {fact.person} gets the {obj} held by {previous}")
    lying = trace.object_location.get(obj)
    if previous is None and None not in (where, lying) and where != lying:
        trace.warnings.append(f"line {fact.line_id}: {fact.person} in the {where} gets the {obj} from the {lying}")
    trace.holder[obj] = fact.person
    trace.object_location.setdefault(obj, None)
    _arrive(trace, obj, where, index)
    trace.events[index] = ObjectEvent(index, "get", fact.person, obj, where)


def _apply_drop(trace: Trace, index: int, fact: Fact) -> None:
    """The person leaves the object at their current location."""
    obj = fact.obj
    if trace.holder.get(obj) != fact.person:
        trace.warnings.append(f"line {fact.line_id}: {fact.person} drops the {obj} without holding it")
    trace.holder[obj] = None
    trace.object_location.setdefault(obj, None)
    trace.events[index] = ObjectEvent(index, "drop", fact.person, obj, trace.person_location.get(fact.person))


_APPLY = {"move": _apply_move, "get": _apply_get, "drop": _apply_drop}


def simulate(facts: Sequence[Fact], kept: Collection[int] | None = None) -> Trace:
    """Symbolic trace of ``facts``; with ``kept``, facts whose index is not kept are skipped."""
    trace = Trace()
    for index, fact in enumerate(facts):
        if kept is None or index in kept:
            _APPLY[fact.kind](trace, index, fact)
    return trace


def answer(trace: Trace, question: Question) -> str | None:
    """The question's answer under ``trace`` (None if the trace does not determine it)."""
    if question.kind == "where_is":
        return trace.location_at(question.obj, question.position)
    path = trace.path_before(question.obj, question.position)
    if question.before not in path[1:]:
        return None
    last = len(path) - 1 - path[::-1].index(question.before)
    return path[last - 1]


# --------------------------------------------------------------------------- rules


def movement_indices(facts: Sequence[Fact]) -> list[int]:
    """Indices of the movement facts."""
    return [i for i, f in enumerate(facts) if f.kind == "move"]


def naive_keep(facts: Sequence[Fact]) -> set[int]:
    """Keep each person's last movement and every pickup and drop (object events never hidden)."""
    last_move = {facts[i].person: i for i in movement_indices(facts)}
    return set(last_move.values()) | {i for i, f in enumerate(facts) if f.kind != "move"}


def dependency_keep(facts: Sequence[Fact]) -> set[int]:
    """Naive, plus the movements that place each object event and that make up each object's path.

    Kept in addition: the carrier's last movement before every pickup and drop, and every movement
    of a person while they carry at least one object. Who carries what follows from the pickups and
    drops alone; no location, question or answer is consulted.
    """
    kept = naive_keep(facts)
    last_move: dict[str, int] = {}
    carrying: dict[str, set[str]] = defaultdict(set)
    for index, fact in enumerate(facts):
        if fact.kind == "move":
            last_move[fact.person] = index
            if carrying[fact.person]:
                kept.add(index)
            continue
        if fact.person in last_move:
            kept.add(last_move[fact.person])
        for held in carrying.values():
            held.discard(fact.obj)
        if fact.kind == "get":
            carrying[fact.person].add(fact.obj)
    return kept


RULES: dict[str, Callable[[Sequence[Fact]], set[int]]] = {"naive": naive_keep, "dependency": dependency_keep}


def hidden_movement_fraction(facts: Sequence[Fact], kept: Collection[int]) -> float | None:
    """Share of movement facts not kept (None when there is no movement)."""
    moves = movement_indices(facts)
    return sum(i not in kept for i in moves) / len(moves) if moves else None


# --------------------------------------------------------------------------- verification


@dataclass
class VerifyResult:
    """Outcome of comparing the kept-facts trace with the full trace."""

    ok: bool
    mismatches: list[str]
    questions_checked: int = 0
    questions_derivable: int = 0


def _line(facts: Sequence[Fact], index: int) -> int:
    return facts[index].line_id


def _place(location: str | None) -> str:
    return "an unknown location" if location is None else f"the {location}"


def _format_path(facts: Sequence[Fact], path: Sequence[Arrival]) -> str:
    return " > ".join(f"{a.location}@{_line(facts, a.index)}" for a in path) or "(unknown)"


def _compare_trajectories(facts: Sequence[Fact], full: Trace, part: Trace) -> list[str]:
    out = []
    for obj in sorted(set(full.trajectories) | set(part.trajectories)):
        want, got = full.trajectories.get(obj, []), part.trajectories.get(obj, [])
        if want != got:
            out.append(f"{obj}: trajectory {_format_path(facts, want)}; kept facts give {_format_path(facts, got)}")
    return out


def _compare_events(facts: Sequence[Fact], full: Trace, part: Trace) -> list[str]:
    out = []
    for index, event in sorted(full.events.items()):
        kept_event = part.events.get(index)
        where = f"line {_line(facts, index)} ({facts[index].text})"
        if kept_event is None:
            out.append(f"{where}: object event hidden")
        elif kept_event.location != event.location:
            out.append(f"{where}: happens in {_place(event.location)}; "
                       f"kept facts place it in {_place(kept_event.location)}")
    return out


def _compare_ownership(full: Trace, part: Trace) -> list[str]:
    return [f"{obj}: final holder {full.holder.get(obj)}; kept facts give {part.holder.get(obj)}"
            for obj in sorted(set(full.holder) | set(part.holder)) if full.holder.get(obj) != part.holder.get(obj)]


def _check_questions(full: Trace, part: Trace, questions: Sequence[Question]) -> tuple[list[str], int]:
    """Mismatches for questions whose gold answer the kept trace (or the full one) misses."""
    out, derivable = [], 0
    for q in questions:
        from_full, from_kept = answer(full, q), answer(part, q)
        if from_full != q.answer:
            out.append(f"line {q.line_id} ({q.text}): full trace answers {from_full}, gold {q.answer}")
        if from_kept == q.answer:
            derivable += 1
        else:
            out.append(f"line {q.line_id} ({q.text}): kept facts answer {from_kept}, gold {q.answer}")
    return out, derivable


def verify(facts: Sequence[Fact], kept: Collection[int], questions: Sequence[Question] = ()) -> VerifyResult:
    """Compare the trace of the kept facts with the full trace (and answer ``questions``, if any).

    Checked: each object's trajectory (locations and arrival facts), the location of every pickup
    and drop, final ownership, and each question's gold answer (questions must lie within
    ``facts``: ``position <= len(facts)``). Inconsistencies of the facts themselves are reported too.
    """
    kept = set(kept)
    if not kept <= set(range(len(facts))):
        raise ValueError(f"kept indices outside the {len(facts)} facts: {sorted(kept - set(range(len(facts))))}")
    if any(q.position > len(facts) for q in questions):
        raise ValueError("a question comes after the given facts")
    full, part = simulate(facts), simulate(facts, kept)
    mismatches = [f"full trace: {w}" for w in full.warnings]
    mismatches += _compare_trajectories(facts, full, part)
    mismatches += _compare_events(facts, full, part)
    mismatches += _compare_ownership(full, part)
    question_mismatches, derivable = _check_questions(full, part, questions)
    mismatches += question_mismatches
    return VerifyResult(not mismatches, mismatches, len(questions), derivable)


@dataclass
class StoryCheck:
    """A rule checked on one story: on the whole story and on each question's input (prefix)."""

    story: Story
    whole: VerifyResult
    inputs: list[VerifyResult]
    hidden_whole: float | None
    hidden_inputs: list[float | None]

    @property
    def ok(self) -> bool:
        return self.whole.ok and all(r.ok for r in self.inputs)


def verify_story(story: Story, rule: str = "dependency") -> StoryCheck:
    """Apply ``rule`` to the whole story and to each question's prefix, and verify each."""
    keep = RULES[rule]
    kept = keep(story.facts)
    whole = verify(story.facts, kept, story.questions)
    inputs, hidden_inputs = [], []
    for q in story.questions:
        prefix = story.facts[: q.position]
        prefix_kept = keep(prefix)
        inputs.append(verify(prefix, prefix_kept, [q]))
        hidden_inputs.append(hidden_movement_fraction(prefix, prefix_kept))
    return StoryCheck(story, whole, inputs, hidden_movement_fraction(story.facts, kept), hidden_inputs)


def _mean(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def _first_mismatches(checks: Sequence[StoryCheck], limit: int = MAX_REPORTED_MISMATCHES) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for check in checks:
        scopes = [("story", check.whole)] + [(f"input of line {q.line_id}", r)
                                               for q, r in zip(check.story.questions, check.inputs)]
        for scope, result in scopes:
            for mismatch in result.mismatches:
                if len(out) == limit:
                    return out
                out.append({"story": check.story.index, "scope": scope, "mismatch": mismatch})
    return out


def verify_file(path: str | Path, rule: str = "dependency") -> dict[str, Any]:
    """Verify ``rule`` on every story of a bAbI qa2/qa3 file; a JSON-ready report.

    ``stories_ok`` counts stories that verify both whole and on every question's input;
    ``inputs_ok`` counts question inputs (one per question, as in BABILong). Hidden-movement
    fractions are means over stories (whole) and over inputs.
    """
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}; choose from {sorted(RULES)}")
    checks = [verify_story(story, rule) for story in parse_babi(path)]
    inputs = [r for c in checks for r in c.inputs]
    return {
        "path": str(path),
        "rule": rule,
        "stories": len(checks),
        "stories_ok": sum(c.ok for c in checks),
        "whole_stories_ok": sum(c.whole.ok for c in checks),
        "inputs": len(inputs),
        "inputs_ok": sum(r.ok for r in inputs),
        "questions_derivable": sum(r.questions_derivable for r in inputs),
        "hidden_movements_story": _mean([c.hidden_whole for c in checks]),
        "hidden_movements_input": _mean([h for c in checks for h in c.hidden_inputs]),
        "first_mismatches": _first_mismatches([c for c in checks if not c.ok]),
    }


def format_report(report: dict[str, Any]) -> str:
    """One summary line for a ``verify_file`` report."""
    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.1%}"

    return (f"{Path(report['path']).name}: rule={report['rule']} "
            f"stories {report['stories_ok']}/{report['stories']} ok, "
            f"inputs {report['inputs_ok']}/{report['inputs']} ok, "
            f"movements hidden {pct(report['hidden_movements_story'])} (story) "
            f"{pct(report['hidden_movements_input'])} (input)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m studies.babilong.dependencies",
                                     description="verify a BABILong masking rule on bAbI qa2/qa3 files")
    parser.add_argument("paths", nargs="+", type=Path, help="bAbI files (qa2/qa3 format)")
    parser.add_argument("--rule", choices=sorted(RULES), default="dependency")
    parser.add_argument("--show", type=int, default=3, help="mismatches to print per failing file")
    return parser


def check_files(paths: Sequence[Path | str], rule: str = "dependency", show: int = 3) -> int:
    """Print one summary line per file (and up to ``show`` mismatches); 1 if any story fails, else 0."""
    failed = False
    for path in paths:
        report = verify_file(path, rule)
        print(format_report(report))
        for item in report["first_mismatches"][:show]:
            print(f"  story {item['story']} ({item['scope']}): {item['mismatch']}")
        failed |= report["stories_ok"] != report["stories"]
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m studies.babilong.dependencies``; the same as ``kvprobe babi-verify``."""
    args = build_parser().parse_args(argv)
    return check_files(args.paths, args.rule, args.show)


if __name__ == "__main__":
    sys.exit(main())
