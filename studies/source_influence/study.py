"""The role-matched source-influence study (paper L1794-1812, prompt L1302-1311; spec partA section 5).

Per event (one role-matched group) the prefix ``Earlier source / Unrelated source / Later
source`` is prefilled once, without special tokens, its four segments encoded
independently (``--encoding segments``, the paper's default) or the whole prefix at once
(``--encoding whole``, its Mistral variant). The question ``\\nQuestion: {query}\\nAnswer:``
follows, and the two options (current and other value) are scored teacher-forced, with no
continuation, under three conditions sharing that prefill:

* ``full``: full access;
* ``source``: the earlier source's record (the old-source span, not its heading) hidden;
* ``control``: as many tokens hidden from the start of the unrelated source's text.

Rows hold both options' summed log-probabilities and the margin
``m = log p(current) - log p(other)``; the summary averages the eight wording patterns.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar

import kvprobe
from kvprobe import decoding
from kvprobe.studies.common.chat_template import study_prompt
from kvprobe.studies.common.protocol import CaseRun, HistoryStudy, Question, require_at_least, require_choices
from . import strings
from .data import LATER_VARIANTS, SPLITS, Event, generate_events

CONDITIONS = ("full", "source", "control")
#: Prompt formats: the paper's segment-by-segment encoding, the whole prefix encoded at once (its
#: Mistral variant, and the "raw" format of the prompt-format comparison), the native chat template.
FORMATS = ("segments", "whole", "raw", "native")
#: Segment names of the prefix (each one of the paper's segments).
SEGMENTS = ("earlier", "unrelated", "later")


def prompt_for(event: Event, prompt_format: str = "segments") -> kvprobe.Prompt:
    """The paper's prefix as three history segments; the question segment follows as the suffix.

    ``segments``/``whole``/``raw``: no special tokens, each segment encoded on its own
    (``segments``) or the prefix at once; ``native``: the same text as one user message of the
    chat template (no system message, thinking off), the options after the assistant header.
    """
    segments = [("earlier", strings.EARLIER_SOURCE.format(old=event.old)),
                ("unrelated", strings.UNRELATED_SOURCE.format(neutral=event.neutral)),
                ("later", strings.LATER_SOURCE.format(later=event.later))]
    head = strings.QUESTION.split("{query}")[0]
    if prompt_format == "native":
        return study_prompt(segments, chat=True, sep="", question_sep=head)
    return study_prompt(segments, chat=False, sep="", question_sep=head, raw_suffix="", special_tokens=False,
                        encode_segments=prompt_format == "segments")


def question_text(event: Event) -> str:
    """The question segment after its heading: ``{query}\nAnswer:``."""
    return event.query + strings.QUESTION.split("{query}")[1]


def source_spans(history: kvprobe.History, event: Event, trailing_newline: bool = False
                 ) -> tuple[kvprobe.TokenSpan, kvprobe.TokenSpan]:
    """(old-source span, unrelated-source text span): the record tokens, not their headings.

    ``trailing_newline``: the old span also covers the newline after the record (the first
    character of the next segment), as the paper's natural-source panel does (seed L1325-1327).
    """
    earlier_head = strings.EARLIER_SOURCE.index("{old}")
    unrelated_head = strings.UNRELATED_SOURCE.index("{neutral}")
    old = history.span("earlier", chars=(earlier_head, earlier_head + len(event.old)))
    if trailing_newline:
        newline = history.span("unrelated", chars=(0, 1))
        if newline.start != old.end:
            raise kvprobe.SpanError(f"{event.case_id}: the newline after the old source is not next to it")
        old = kvprobe.TokenSpan(old.start, newline.end, old.label)
    neutral = history.span("unrelated", chars=(unrelated_head, unrelated_head + len(event.neutral)))
    return old, neutral


@dataclass(frozen=True)
class FormattedEvent:
    """An event in one prompt format (the study's case)."""

    event: Event
    format: str

    @property
    def case_id(self) -> str:
        return f"{self.event.group}-{self.format}"


@dataclass
class EventStudy(HistoryStudy):
    """What every candidate-decision study shares: one prefill per event and format, three conditions,
    both options scored, the same rows (role-matched events, prompt formats, OAKS changes)."""

    strings: ClassVar[ModuleType] = strings

    #: Text before each option ([UNCLEAR] in the paper; default: one space after "Answer:", none after a chat
    #: template's assistant header).
    option_prefix: str | None = None
    #: Unrelated-source tokens skipped before the control starts (0: its first token).
    control_skip: int = 0
    #: Score only the first N events (None: all).
    n: int | None = None
    #: Events scored in one batch.
    cases_per_batch: int = 8
    #: The options are scored only: the paper generates no continuation.
    max_new_tokens: ClassVar[int] = 0
    #: Whether the old span includes the newline after the record (the natural-source panel's rule).
    trailing_newline: ClassVar[bool] = False

    def formats(self) -> tuple[str, ...]:
        raise NotImplementedError

    def events(self) -> list[Event]:
        """The study's events (every format is asked about each; read once, by :meth:`make_cases`)."""
        raise NotImplementedError

    def __post_init__(self) -> None:
        require_at_least(self, control_skip=0, n=1, cases_per_batch=1)

    def config_extra(self) -> dict[str, Any]:
        return {"conditions": list(CONDITIONS)}

    def make_cases(self) -> list[FormattedEvent]:
        """Every event in every format, format by format within an event (they share its groups)."""
        return [FormattedEvent(e, f) for e in self.events()[:self.n] for f in self.formats()]

    def group(self, case: FormattedEvent) -> str:
        """The bootstrap unit: the role-matched group (resampled within its wording pattern)."""
        return case.event.group

    def prompt(self, model: kvprobe.Model, case: FormattedEvent) -> kvprobe.Prompt:
        return prompt_for(case.event, case.format)

    def questions(self, model: kvprobe.Model, case: FormattedEvent, history: kvprobe.History) -> list[Question]:
        """The query with its two options (current first)."""
        e = case.event
        prefix = self.option_prefix if self.option_prefix is not None else \
            ("" if case.format == "native" else strings.OPTION_PREFIX)
        return [Question("current", question_text(e), (prefix + e.current, prefix + e.other))]

    def conditions(self, model: kvprobe.Model, case: FormattedEvent, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        old, neutral = source_spans(history, case.event, self.trailing_newline)
        source = kvprobe.Mask(old, name="source")
        return {"full": kvprobe.Full(), "source": source,
                "control": kvprobe.matched_control(history, source, neutral, skip=self.control_skip, name="control")}

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        """Both options' scores, the margin, and which option is chosen (ties count as the other option)."""
        event: Event = run.case.event
        lp_current, lp_other = answers[condition].scores.logprobs
        chosen = event.current if lp_current > lp_other else event.other
        return {"event": event.case_id, "format": run.case.format, "family": event.family, "pattern": event.pattern,
                "replicate": event.replicate, "split": event.split, "variant": event.variant,
                "current": event.current, "other": event.other, "lp_current": lp_current, "lp_other": lp_other,
                "margin": lp_current - lp_other, "correct": chosen == event.current,
                "old_choice": chosen == event.old_value,
                "masked_tokens": 0 if condition == "full" else run.originals["source"].n_tokens}


@dataclass
class RoleMatchedStudy(EventStudy):
    """Events of the role-matched dataset (source influence, prompt format)."""

    #: Events: evaluation (the paper's 320), development (its 80) or all (400).
    split: str = "evaluation"
    #: The later source: the Supersedes record (the paper's events) or the Duplicate record.
    variant: str = "supersedes"

    def __post_init__(self) -> None:
        super().__post_init__()
        require_choices(self, split=SPLITS, variant=LATER_VARIANTS)

    def events(self) -> list[Event]:
        return generate_events(self.split, self.variant)


@dataclass
class SourceInfluenceStudy(RoleMatchedStudy):
    """Role-matched events under full access, the old-source mask and its equal-token control."""

    name: ClassVar[str] = "source-influence"
    #: Prefix tokenization: each paper segment on its own (the paper's default) or the whole prefix (its Mistral variant).
    encoding: str = "segments"

    def __post_init__(self) -> None:
        super().__post_init__()
        require_choices(self, encoding=("segments", "whole"))

    def formats(self) -> tuple[str, ...]:
        return (self.encoding,)


@dataclass
class PromptFormatStudy(RoleMatchedStudy):
    """The same events tokenized as a whole in two formats: raw concatenation and the native chat template
    (paper L2015-2040; spec partA section 7)."""

    name: ClassVar[str] = "prompt-format"

    def formats(self) -> tuple[str, ...]:
        return ("raw", "native")


#: ``--source`` value for the offline demonstration set (generated from the PG-19 novel).
DEMONSTRATION = "demonstration"
OAKS_SPLITS = ("evaluation", "calibration", "development", "all")


@dataclass
class OaksStudy(EventStudy):
    """OAKS-Novel answer changes as candidate decisions (paper L1826-1852; spec partA section 6).

    Each kept change is an event: its old source sentence is the earlier source, its new source
    sentence the later one, unrelated text from another book the unrelated source (``oaks.py``), the
    question the query and the old and new answers the options. The old mask covers the old source
    and its trailing newline; books are the strata (weighted equally) and questions the resampled groups.
    """

    name: ClassVar[str] = "oaks"
    trailing_newline: ClassVar[bool] = True
    #: "demonstration" (an OAKS-schema set generated from the PG-19 novel in the pg19 data set (kvprobe data), labelled as
    #: generated) or the path of an OAKS JSON file in the schema of studies/datasets/oaks.py.
    source: str = DEMONSTRATION
    #: Books: evaluation (the paper's 5 held-out books), calibration, development (9) or all.
    split: str = "evaluation"
    #: Prefix tokenization: each paper segment on its own (the paper's default) or the whole prefix.
    encoding: str = "segments"

    def __post_init__(self) -> None:
        super().__post_init__()
        require_choices(self, split=OAKS_SPLITS, encoding=("segments", "whole"))
        if self.source != DEMONSTRATION:
            from kvprobe.studies.common.protocol import InvalidParameter

            from kvprobe.studies.datasets.oaks import OaksFormatError
            try:  # read the file now, so a bad file fails before any model loads
                self.cases()
            except (OSError, OaksFormatError) as e:
                raise InvalidParameter("source", str(e)) from e

    def formats(self) -> tuple[str, ...]:
        return (self.encoding,)

    def books(self) -> list:
        from kvprobe.studies.datasets import oaks

        if self.source == DEMONSTRATION:
            from kvprobe.studies.datasets.filler import pg19_books

            books = pg19_books()
            return oaks.parse_oaks(oaks.demonstration_set(books[0].read_text(encoding="utf-8")), "demonstration")
        return oaks.load_oaks(self.source)

    def events(self) -> list[Event]:
        from kvprobe.studies.datasets import oaks

        books = self.books()
        splits = oaks.split_books(books)
        chosen = books if self.split == "all" else splits[self.split]
        split_of = {b.book_id: name for name, bs in splits.items() for b in bs}
        return [Event(case_id=c.case_id, group=c.question_id, family=book.title, pattern=book.book_id, replicate=0,
                      split=split_of.get(book.book_id, "unassigned"), variant="oaks", old=c.old_source,
                      later=c.new_source, query=c.question, current=c.new_answer, other=c.old_answer,
                      old_value=c.old_answer, neutral=oaks.unrelated_text(books, book, c))
                for book in chosen for c in oaks.changes(book)]
