"""Soft session-order bias and hard session masks on conversational memory (paper app:guarded_validation,
L5924-5990, and app:v41_public_hard, L6185-6215; spec partD section 10, partE E1-E3).

``longmemeval`` (LongMemEval-Oracle schema loader, validation, development/validation split),
``fixtures`` (seeded synthetic update histories in that schema), ``strings`` (every prompt
string: the history's ours, UNCLEAR in the paper; the judge's LongMemEval's official ones), ``history`` (prompt segments, content spans, the three
conditions), ``grading`` (pluggable graders: rule-based default; the official LongMemEval answer-check prompts
through LongMemEval's one-prompt protocol, e.g. with a local model, or the paper's batched LLM-judge protocol),
``study`` (:class:`SessionBiasStudy`, runner protocol) and ``summary`` (paired group
bootstrap, ``report.md``).
"""

from .fixtures import write_fixtures
from .grading import (
    BatchedJudge,
    Grader,
    GradeTask,
    JudgeClient,
    JudgeReply,
    OfficialJudge,
    RuleGrader,
    Verdict,
    anscheck_prompt,
    grade_run,
)
from .history import CONDITIONS, build_prompt
from .data import (
    LongMemEvalFormatError,
    Question,
    load_longmemeval,
    split_questions,
)
from .study import SessionBiasStudy, run
from .summary import format_report, summarize

__all__ = [
    "BatchedJudge", "CONDITIONS", "GradeTask", "Grader", "JudgeClient", "JudgeReply", "LongMemEvalFormatError",
    "OfficialJudge", "Question", "RuleGrader", "SessionBiasStudy", "Verdict", "anscheck_prompt", "build_prompt", "format_report", "grade_run",
    "load_longmemeval", "run", "split_questions", "summarize", "write_fixtures",
]
