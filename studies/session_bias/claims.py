"""The paper's claims the session-bias study tests, with measures of the session-bias runs' ``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import (Claim, Measurement, Paper, Test, find_entry, floor_reason, join_reasons,
                                           judge_reason, pp_measurement, read_summary, rule_audit_note)

from .grading import RuleGrader

__all__ = ["CLAIMS", "PUBLIC_ARMS", "PUBLIC_RULE", "RULE_GRADER", "public_arm_tests", "session_bias"]


#: The public-arm session-bias run's protocol, as its tests name it.
PUBLIC_ARMS = ("official LongMemEval prompts, Qwen2.5-Coder-1.5B judge; capacity 512; questions without groups "
               "crossing the split")
#: The same run's answers under the rule grader (its labels stored in the rows), as its tests name it.
PUBLIC_RULE = ("rule grader (reference containment) on the same answers; capacity 512; questions without groups "
               "crossing the split")
#: The rule grader of the rows (its audit: ``artifacts/judge-audit/session-bias/rule-v1.md``).
RULE_GRADER = RuleGrader.name


def public_arm_tests(arm: str, label: str) -> tuple[Test, ...]:
    """The public-arm run's tests of one arm against full access: judged (primary, the paper's official rubric),
    then EOS-restricted (secondary, the paper's termination sensitivity) and the rule grader's labels of the same
    answers (secondary, shown beside the judge, which fails its audit)."""
    return (*(Test("session-bias/smollm2-val", f"{PUBLIC_ARMS}; {'EOS-restricted; ' * eos}{label} vs full",
                   session_bias("without_crossing_groups", arm, eos=eos), primary=not eos) for eos in (False, True)),
            Test("session-bias/smollm2-val", f"{PUBLIC_RULE}; {label} vs full",
                 session_bias("without_crossing_groups", arm, rule=True), primary=False))


def session_bias(subset: str, condition: str, eos: bool = False, rule: bool = False) -> Callable[[Path], Measurement]:
    """A condition's change against full access (pp) on a question subset; ``eos``: the EOS-restricted counts
    (correct and ended by EOS), the paper's termination sensitivity; ``rule``: the rule grader's labels of a judged
    run (its summary's ``rule_subsets``). Not testable where the run's model judge is not validated (no audit on
    the session-bias set, or one it fails: ``studies.common.claims.judge_reason``); a rule-graded row notes the rule
    grader's own audit (``studies.common.claims.rule_audit_note``: rule graders are shown, never gated)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        sub = find_entry(s["rule_subsets"] if rule else s["subsets"], key=subset)
        a, full = sub["arms"][condition], sub["arms"]["full"]
        ch, correct = (a["eos_vs_full"], full["eos_correct"]) if eos else (a["vs_full"], full["correct"])
        ruled = rule or list(s.get("graders", ())) == [RULE_GRADER]
        gate = None if rule else judge_reason(run, "session-bias", s.get("graders", ()))
        return pp_measurement(ch["pp"], ch["ci"], f"{sub['questions']} questions, {sub['groups']} groups",
                              f"full {correct}/{full['n']}",
                              join_reasons(gate, floor_reason(correct, full["n"], "full access")),
                              units=sub["groups"], answers=full["n"],
                              note=rule_audit_note(run, "session-bias", RULE_GRADER) if ruled else "")
    return measure


CLAIMS: tuple[Claim, ...] = (
    Claim("session-bias.soft-updates", "session-bias", "A soft bias against earlier sessions gains answers on "
          "knowledge updates",
          Paper("For all 38 questions labeled as knowledge updates, the pooled correct count changes from 165/228 to "
                "178/228.", (6002, 6003), "Reducing Attention to Earlier Sessions",
                "answerable updates +5.88 [+2.45, +9.80] pp", (6111, 6111)),
          "up",
          (Test("session-bias/smollm2-150", "rule grader; soft bias vs full; answerable updates",
                session_bias("answerable_updates", "soft")),
           Test("session-bias/smollm2-val", "validation split; official LongMemEval prompts, Qwen2.5-Coder-1.5B "
                "judge; soft bias vs full; answerable updates", session_bias("answerable_updates", "soft"),
                primary=False),
           Test("session-bias/smollm2-val", "validation split; rule grader (reference containment) on the same "
                "answers; soft bias vs full; answerable updates",
                session_bias("answerable_updates", "soft", rule=True), primary=False)),
          reference="full access", units="groups"),
    Claim("session-bias.validation-overall", "session-bias", "The soft bias leaves overall accuracy unchanged on "
          "held-out validation questions",
          Paper("overall change is -0.46 points [-1.25,0.32]", (6016, 6016), "Reducing Attention to Earlier Sessions",
                "-0.46 [-1.25, 0.32] pp without the validation questions linked to development"),
          "none",
          (Test("session-bias/smollm2-val", f"{PUBLIC_ARMS}; soft bias vs full",
                session_bias("without_crossing_groups", "soft")),
           Test("session-bias/smollm2-val", f"{PUBLIC_RULE}; soft bias vs full",
                session_bias("without_crossing_groups", "soft", rule=True), primary=False)),
          reference="full access", units="groups"),
    Claim("session-bias.public-source-mask", "session-bias", "The session guard's source mask loses public answers",
          Paper("Source masking still lowers the point counts in all three models.", (6384, 6384),
                "Query-Aware Cache Comparisons and Capacity Accounting",
                "full/source 193/182, 181/166, 268/226 of 368", (6380, 6383)),
          "down",
          public_arm_tests("hard", "source mask"), reference="full access", units="groups"),
    Claim("session-bias.finch-small", "session-bias", "FINCH at a 512-token capacity falls below full access in "
          "smaller models",
          Paper("At 512-token capacity on LongMemEval-Oracle, FINCH raises Qwen3-32B's official-rubric accuracy from "
                "73.2% (278/380) to 76.1% (289/380), but falls below full access in the two smaller models",
                (793, 795), "Other Access Choices Can Avoid Some Losses",
                "full/FINCH 193/169 (Qwen3-4B), 181/174 (Llama-3.2-3B) of 368", (6380, 6382)),
          "down",
          public_arm_tests("finch", "FINCH"), reference="full access", units="groups"),
    Claim("session-bias.quest-public", "session-bias", "Quest at a 512-token capacity loses public answers",
          Paper("Full/source/Quest/FINCH/RefreshKV counts are 193/182/136/169/179 for Qwen3-4B, 181/166/148/174/165 "
                "for Llama-3.2-3B, and 268/226/191/279/266 for Qwen3-32B", (6381, 6383),
                "Query-Aware Cache Comparisons and Capacity Accounting",
                "full/Quest 193/136, 181/148, 268/191 of 368", (6380, 6383)),
          "down",
          public_arm_tests("quest", "Quest"), reference="full access", units="groups"),
)
