"""The component-intervention study (paper appendix "Component Interventions and Accuracy
Preservation", L5694-5760; spec partD section 7).

One case = one cluster in one state (CURRENT or SUPERSEDED). Its history is prefilled
once; both queries (target, unrelated) run under nine conditions, 18 rows per case,
all in one batched :func:`~kvprobe.studies.components.reasoning.reason_then_score` call per batch of cases
(the run loop is the protocol's, ``studies.common.protocol.HistoryStudy``; this study only
swaps its answer call):

==================  ===========================================================
``none``            no intervention
``zero-k-old``      K rows of the old record set to 0 (all attention layers, heads)
``zero-v-old``      V rows of the old record set to 0
``zero-kv-old``     both
``zero-k-matched``  the same on the matched span (as many tokens from the note's start)
``zero-v-matched``
``zero-kv-matched``
``mask-old``        Q-K attention mask on the old record (the positive control)
``mask-matched``    the same on the matched span
==================  ===========================================================

Every condition starts from its own copy of the prefilled cache and acts on every
token after the history: question, continuation, answer cue and options. Protocol per
row (paper L1293-1301): raw prompt ``History:\\n`` + history + ``\\nQuestion:\\n`` + query
+ ``\\nReasoning:\\n``, exactly ``budget`` greedy tokens without EOS stopping,
``\\nAnswer:\\n``, then both options scored by summed teacher-forced log-probability.
margin = logp(expected) - logp(alternative); correct = margin > 0 (a tie is wrong). The
row's ``output`` is the continuation (``stop_reason`` always ``cap``).

UNCLEAR in the paper, our choices:

* Zeroing happens on the condition's cache copy *before* the question and continuation
  (the continuation is generated from the zeroed cache), like the mask (spec partD
  section 7: "whether zeroing happens before or after the continuation" is unclear).
* The budget (8, 32 or 128 in the paper; 14,400 outcomes per model imply one): a
  parameter, default 8 (CPU).
* The matched span is the first tokens of the neutral note (``clusters`` explains why).
* Models that cannot zero K or V alone (MLA latent caches) leave those conditions out
  with a warning; the summary then reports only the components present.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import kvprobe
from kvprobe import decoding
from kvprobe.studies.common.protocol import CaseRun, HistoryStudy, InvalidParameter, Question, require_at_least, require_choices
from . import strings
from .data import FAMILIES, QUERIES, SEED, STATES, Cluster, clusters_hash, generate_clusters, prompt
from .reasoning import reason_then_score

#: Condition name -> (component, span); component "qk" is the attention mask.
CONDITIONS: dict[str, tuple[str, str]] = {
    "none": ("none", "none"),
    "zero-k-old": ("k", "old"),
    "zero-v-old": ("v", "old"),
    "zero-kv-old": ("kv", "old"),
    "zero-k-matched": ("k", "matched"),
    "zero-v-matched": ("v", "matched"),
    "zero-kv-matched": ("kv", "matched"),
    "mask-old": ("qk", "old"),
    "mask-matched": ("qk", "matched"),
}
#: Default continuation budget ([UNCLEAR] which of the paper's 8/32/128; 8 for CPU runs).
BUDGET = 8


@dataclass(frozen=True)
class ComponentCase:
    """One cluster in one state."""

    cluster: Cluster
    state: str

    @property
    def case_id(self) -> str:
        return f"{self.cluster.cluster_id}-{self.state}"


def conditions_for(history: kvprobe.History, control_skip: int = 0
                   ) -> tuple[dict[str, kvprobe.Condition], kvprobe.TokenSpan, kvprobe.TokenSpan]:
    """The nine conditions of a prefilled cluster history, the old span and the matched span.

    The old span is every token of the ``old`` record; the matched span is as many tokens
    of the ``note`` segment, from its token ``control_skip`` on (``kvprobe.matched_control``).
    """
    from kvprobe.interventions import Zero

    old = history.span("old")
    matched = kvprobe.matched_control(history, kvprobe.Mask(old), segment="note", skip=control_skip).spans[0]
    spans = {"old": old, "matched": matched}
    out: dict[str, kvprobe.Condition] = {}
    for name, (component, where) in CONDITIONS.items():
        if component == "none":
            out[name] = kvprobe.Full(name=name)
        elif component == "qk":
            out[name] = kvprobe.Mask(spans[where], name=name)
        else:
            out[name] = Zero(spans[where], component, name=name)
    return out, old, matched


@dataclass
class ComponentStudy(HistoryStudy):
    """Controlled history clusters under the nine component conditions (reason, then score both options)."""

    name: ClassVar[str] = "components"
    #: Clusters per family (the paper: 80, i.e. 400 clusters over 5 families).
    n_per_family: int = 80
    #: Generator seed of the clusters.
    seed: int = SEED
    #: Greedy continuation tokens before the answer cue ([UNCLEAR] which of the paper's 8/32/128; 8 for CPU).
    budget: int = BUDGET
    #: Cluster families to generate.
    families: tuple[str, ...] = FAMILIES
    #: Note tokens skipped before the matched span starts ([UNCLEAR] for this study; 0: the note's first token).
    control_skip: int = 0
    #: Cases answered in one batch (2: both states of one cluster).
    cases_per_batch: int = 2

    def __post_init__(self) -> None:
        self.families = tuple(self.families)
        if not self.families:
            raise InvalidParameter("families", "give at least one family")
        require_choices(self, families=FAMILIES)
        require_at_least(self, n_per_family=1, budget=0, control_skip=0, cases_per_batch=1)

    def make_cases(self) -> list[ComponentCase]:
        clusters = generate_clusters(self.n_per_family, self.seed, tuple(self.families))
        return [ComponentCase(c, s) for c in clusters for s in STATES]

    def data_sha256(self) -> str:
        """The generated clusters' digest (:func:`clusters_hash`: every field of every cluster)."""
        return clusters_hash([c.cluster for c in self.cases()][::len(STATES)])

    def config_extra(self) -> dict[str, Any]:
        """The conditions and the prompt's fixed strings (quoted whole: they are few)."""
        return {"conditions": list(CONDITIONS),
                "strings": {"history_open": strings.HISTORY_OPEN, "question_open": strings.QUESTION_OPEN,
                            "reasoning_open": strings.REASONING_OPEN, "answer_cue": strings.ANSWER_CUE}}

    def group(self, case: ComponentCase) -> str:
        """The bootstrap unit: the cluster (both states together)."""
        return case.cluster.cluster_id

    def prompt(self, model: kvprobe.Model, case: ComponentCase) -> kvprobe.Prompt:
        return prompt(case.cluster, case.state)

    def questions(self, model: kvprobe.Model, case: ComponentCase, history: kvprobe.History) -> list[Question]:
        """Both queries with their two options; ``info``: the index of the expected option."""
        cl = case.cluster
        out = []
        for query in QUERIES:
            options = tuple(cl.options(query))
            out.append(Question(query, cl.query(query), options, options.index(cl.expected(case.state, query))))
        return out

    def conditions(self, model: kvprobe.Model, case: ComponentCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        return conditions_for(history, self.control_skip)[0]

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        _, run.extra["old"], run.extra["matched"] = conditions_for(run.history, self.control_skip)

    def answer(self, model: kvprobe.Model, items: Sequence[tuple[kvprobe.History, kvprobe.Request]],
               candidates: Sequence[Sequence[str]] | None) -> list[decoding.Answer]:
        """Reason for exactly ``budget`` tokens, append the answer cue, score both options (one batch)."""
        if not items:
            return []
        return [decoding.Answer(scores, generation) for generation, scores in
                reason_then_score(model, items, candidates, self.budget, strings.ANSWER_CUE)]

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        cl, scores = run.case.cluster, answers[condition].scores
        generation = answers[condition].generation
        expected = question.info
        margin = scores.logprobs[expected] - scores.logprobs[1 - expected]
        component, where = CONDITIONS[condition]
        old, matched = run.extra["old"], run.extra["matched"]
        return {
            "cluster_id": cl.cluster_id, "family": cl.family, "state": run.case.state, "component": component,
            "span": where, "question": question.text, "options": list(question.candidates),
            "expected_index": expected, "logprobs": list(scores.logprobs),
            "option_tokens": list(scores.n_tokens), "margin": margin, "correct": margin > 0,
            "continuation_ids": list(generation.token_ids), "old_span": [old.start, old.end],
            "matched_span": [matched.start, matched.end], "position": cl.position, "direction": cl.direction,
        }
