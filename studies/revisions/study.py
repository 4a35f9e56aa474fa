"""The revision-history study (paper appendix "Answers to Questions about Wikipedia Revision Histories",
seed L6781-6927; spec partE E9, E10).

Per article the history (an intro line, then a header and a body segment per revision,
``history.py``) is prefilled once; every question is asked after the last revision and
answered greedily under each operation:

* ``full``: full access;
* ``whole-source``: hide every non-final body (headers kept);
* ``changed-text``: hide the characters of each non-final body that the next revision
  replaces or deletes (``diff.py``; unit ``--diff-unit``; an insertion hides nothing);
  the tokens overlapping them are hidden;
* ``recompute``: delete the non-final bodies (headers kept) and prefill again.

An operation with nothing to hide (a one-revision article, or no change) is full access.
Articles whose history, longest question and answer budget do not fit the model's
context are skipped (rows marked ``skipped``; the paper kept the 161 of 196 histories
that fit, L6789-6791). Answers are graded by the rule grader (``rule_grader.py``); the
paper's LLM judge is ``grading.grade_run``. Data: the generated demonstration set
(``data.py``, the default) or a file in the schema of ``schema.py`` (``--source``).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.studies.common.protocol import CaseRun, HistoryStudy, InvalidParameter, Question, positions_needed, \
    require_at_least, require_choices, use_chat
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.runner import CONFIG
from . import strings
from .diff import UNITS
from .data import GENERATED, MAX_REVISIONS, REVISIONS_SEED, generate_articles
from .history import changed_segments, question_text, segments, source_segments
from .rule_grader import RULE_GRADER, rule_grade
from .schema import QUESTION_TYPES, Article, RevisionsFormatError, dataset_sha256, load_revisions

#: The paper's four operations (seed L6797-6801), in report order: the study's conditions.
CONDITIONS = ("full", "whole-source", "changed-text", "recompute")
#: The paper's answer budget (seed L6791: "a 1,024-token answer budget").
MAX_NEW_TOKENS = 1024
#: Tokens allowed for the chat template around the question when checking that a history fits.
TEMPLATE_MARGIN = 32


@dataclass(frozen=True)
class RevisionCase:
    """One article; its id is the case id and the bootstrap group (seed L6861: article resamples)."""

    article: Article

    @property
    def case_id(self) -> str:
        return self.article.article_id

    @property
    def group(self) -> str:
        return self.article.article_id


@dataclass
class RevisionsStudy(HistoryStudy):
    """Questions about article revision histories under full access, two masks and recompute."""

    name: ClassVar[str] = "revisions"
    strings: ClassVar[ModuleType] = strings
    #: "generated" (offline demonstration histories cut from PG-19 paragraphs with seeded edits) or the
    #: path of a revision-history JSON file (schema: studies/revisions/schema.py).
    source: str = GENERATED
    #: Articles to run: the first N of the file, or N generated ones (none: every article of a file).
    n_articles: int | None = 32
    #: Article ids to leave out (the paper held out 8 development articles and one lyrics article).
    exclude: tuple[str, ...] = ()
    #: Generator seed (generated set only).
    seed: int = REVISIONS_SEED
    #: Fewest revisions of a generated article (at least 3).
    min_revisions: int = 3
    #: Most revisions of a generated article (at most 10).
    max_revisions: int = 6
    #: Fewest words of a generated article's first revision.
    min_words: int = 100
    #: Most words of a generated article's first revision.
    max_words: int = 200
    #: Operations to run (full, whole-source, changed-text, recompute).
    condition_set: tuple[str, ...] = CONDITIONS
    #: Diff unit of the changed-text mask: word, sentence or character (the paper leaves it open).
    diff_unit: str = "word"
    #: Question types to ask (Simple, History, Multi-hop, Counting, Ordering).
    question_types: tuple[str, ...] = QUESTION_TYPES
    #: Greedy answer budget in tokens (the paper: 1,024).
    max_new_tokens: int = MAX_NEW_TOKENS
    #: Append the boxed-answer instruction to every question (the paper asks for a boxed final answer).
    boxed: bool = True
    #: Ask through the chat template (auto: when the tokenizer has one).
    chat: bool | None = None
    #: Articles answered in one batch.
    cases_per_batch: int = 1

    def __post_init__(self) -> None:
        self.exclude, self.condition_set = tuple(self.exclude), tuple(self.condition_set)
        self.question_types = tuple(self.question_types)
        require_at_least(self, n_articles=1, min_revisions=3, max_revisions=3, min_words=20, max_words=20,
                         max_new_tokens=1, cases_per_batch=1)
        require_choices(self, condition_set=CONDITIONS, diff_unit=UNITS, question_types=QUESTION_TYPES)
        if not self.condition_set or not self.question_types:
            raise InvalidParameter("condition_set" if not self.condition_set else "question_types", "must not be empty")
        if self.source == GENERATED:
            if self.n_articles is None:
                raise InvalidParameter("n_articles", "the generated set needs a number of articles")
            if not self.min_revisions <= self.max_revisions <= MAX_REVISIONS:
                raise InvalidParameter("max_revisions", f"must be in min_revisions..{MAX_REVISIONS}, "
                                       f"got {self.min_revisions}..{self.max_revisions}")
            if self.min_words > self.max_words:
                raise InvalidParameter("max_words", f"must be at least min_words ({self.min_words})")
        else:
            try:  # read the file now, so a bad file fails before any model loads
                self.articles()
            except (OSError, RevisionsFormatError) as e:
                raise InvalidParameter("source", str(e)) from e

    # ------------------------------------------------------------------ data
    def make_cases(self) -> list[RevisionCase]:
        """One case per article: generated or read, minus ``exclude``, the first ``n_articles``."""
        chosen = (generate_articles(self.n_articles, self.seed, self.min_revisions, self.max_revisions,
                                    self.min_words, self.max_words)
                  if self.source == GENERATED else load_revisions(self.source))
        return [RevisionCase(a) for a in chosen if a.article_id not in self.exclude][:self.n_articles]

    def articles(self) -> list[Article]:
        """The articles this run asks about (those of :meth:`cases`)."""
        return [c.article for c in self.cases()]

    def data_sha256(self) -> str:
        """The digest of the articles (``schema.dataset_sha256``)."""
        return dataset_sha256(self.articles())

    def config_extra(self) -> dict[str, Any]:
        """The data's name, the boxed-answer instruction as asked, and the grader."""
        return {"data": "generated" if self.source == GENERATED else Path(self.source).name,
                "boxed_instruction": strings.BOXED_INSTRUCTION if self.boxed else None, "grader": RULE_GRADER}

    # ------------------------------------------------------------------ the protocol's hooks
    def prompt(self, model: kvprobe.Model, case: RevisionCase) -> kvprobe.Prompt:
        """Intro, then a header and a body segment per revision (``history.py``); thinking off."""
        return study_prompt(segments(case.article), chat=use_chat(model.tokenizer, self.chat),
                            sep=strings.SEGMENT_JOINER)

    def _asked(self, case: RevisionCase) -> list[Any]:
        return [q for q in case.article.questions if q.type in self.question_types]

    def skip(self, model: kvprobe.Model, case: RevisionCase) -> list[dict[str, Any]] | None:
        """Rows without answers for an article whose history + longest question + budget exceeds the context."""
        limit = model.context_length
        if limit is None:
            return None
        rendered, ids, _ = model.tokenize(self.prompt(model, case))
        asked = self._asked(case)
        need, _ = positions_needed(model, len(ids), [question_text(q, self.boxed) for q in asked], self.max_new_tokens,
                                   TEMPLATE_MARGIN)
        if need <= limit:
            return None
        return [{**self._columns(case, q), "case_id": case.case_id, "group": case.group, "condition": op,
                 "query": q.type, "skipped": "history_too_long", "history_tokens": int(len(ids)),
                 "prompt_sha256": rendered.sha256, "output": None, "stop_reason": None, "output_tokens": None,
                 "hidden_tokens": None, "displayed": None, "outcome": None, "explanation": None, "grader": None}
                for q in asked for op in self.condition_set]

    def questions(self, model: kvprobe.Model, case: RevisionCase, history: kvprobe.History) -> list[Question]:
        """The article's questions of the chosen types; ``query`` is the type, ``info`` the question."""
        return [Question(q.type, question_text(q, self.boxed), None, q) for q in self._asked(case)]

    def conditions(self, model: kvprobe.Model, case: RevisionCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        """The chosen operations (module docstring); one with nothing to hide is full access."""
        from kvprobe.interventions import TextRecompute

        sources = source_segments(case.article)
        changed = [history.span(name, chars=(lo, hi), strict=False)
                   for name, lo, hi in changed_segments(case.article, self.diff_unit)]
        built = {
            "full": kvprobe.Full(),
            "whole-source": kvprobe.Mask([history.span(s) for s in sources], name="whole-source") if sources
            else kvprobe.Full(),
            "changed-text": kvprobe.Mask(changed, name="changed-text") if changed else kvprobe.Full(),
            "recompute": TextRecompute(sources) if sources else kvprobe.Full(),
        }
        return {op: built[op] for op in self.condition_set}

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        """Record how many history tokens each operation hides or deletes."""
        history = run.history
        spans: dict[str, list[Any]] = {
            name: list(c.spans) if isinstance(c, kvprobe.Mask)
            else [history.span(s) for s in getattr(c, "segments", ())] for name, c in run.originals.items()}
        run.extra["hidden_tokens"] = {name: len({p for s in ss for p in s.positions()}) for name, ss in spans.items()}

    def _columns(self, case: RevisionCase, q: Any) -> dict[str, Any]:
        a = case.article
        return {"article_id": a.article_id, "revisions": len(a.revisions), "question_id": q.question_id,
                "question_type": q.type, "question": q.question, "answers": list(q.answers),
                "options": list(q.options), "source_answerable": q.source_answerable, "target_time": q.target_time}

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        g = answers[condition].generation
        grade = rule_grade(g.text, g.stop_reason, question.info.answers, question.info.options)
        return {**self._columns(run.case, question.info), "hidden_tokens": run.extra["hidden_tokens"][condition],
                "displayed": grade.displayed, "outcome": grade.outcome, "explanation": grade.explanation,
                "grader": RULE_GRADER}


def study_from_config(run_dir: str | Path) -> RevisionsStudy:
    """The study of a run directory, rebuilt from its ``config.json`` (its articles' hash checked).

    Example: ``study_from_config("artifacts/revisions/smollm2-135m-instruct").articles()[0].title``.
    """
    cfg = json.loads((Path(run_dir) / CONFIG).read_text())["study_config"]
    names = {f.name for f in dataclasses.fields(RevisionsStudy) if not f.name.startswith("_")}
    study = RevisionsStudy(**{k: v for k, v in cfg.items() if k in names})
    if study.data_sha256() != cfg["data_sha256"]:
        raise ValueError(f"{run_dir}: the articles rebuilt from config.json differ from the run's "
                         f"(data_sha256 {cfg['data_sha256'][:12]}...)")
    return study
