"""The component-intervention study (paper appendix "Component Interventions and Accuracy
Preservation", L5694-5760; spec partD section 7).

One case = one cluster in one state (CURRENT or SUPERSEDED). Its history is prefilled
once; both queries (target, unrelated) run under nine conditions, 18 rows per case,
all in one batched :func:`kvprobe.decoding.reason_then_score` call per batch of cases:

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
margin = logp(expected) - logp(alternative); correct = margin > 0 (a tie is wrong).

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

from dataclasses import dataclass, field
from typing import Any

import kvprobe
from kvprobe.decoding import reason_then_score

from ..conditions import check_unchanged, supported
from ..runner import study_parameters
from . import strings
from .clusters import FAMILIES, QUERIES, SEED, STATES, Cluster, clusters_hash, generate_clusters, prompt

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


def conditions_for(history: kvprobe.History) -> tuple[dict[str, kvprobe.Access], kvprobe.TokenSpan,
                                                      kvprobe.TokenSpan]:
    """The nine conditions of a prefilled cluster history, the old span and the matched span.

    The old span is every token of the ``old`` record; the matched span is as many tokens
    from the start of the ``note`` segment (``kvprobe.matched_control``).
    """
    from kvprobe.interventions import Zero

    old = history.span("old")
    matched = kvprobe.matched_control(history, kvprobe.Mask(old), segment="note").spans[0]
    spans = {"old": old, "matched": matched}
    out: dict[str, kvprobe.Access] = {}
    for name, (component, where) in CONDITIONS.items():
        if component == "none":
            out[name] = kvprobe.Full(name=name)
        elif component == "qk":
            out[name] = kvprobe.Mask(spans[where], name=name)
        else:
            out[name] = Zero(spans[where], component, name=name)
    return out, old, matched


@dataclass
class ComponentStudy:
    """Controlled history clusters under the nine component conditions (runner protocol)."""

    n_per_family: int = 80
    seed: int = SEED
    budget: int = BUDGET
    families: tuple[str, ...] = FAMILIES
    cases_per_batch: int = 2  # both states of one cluster per batch
    name: str = "components"
    _cases: list[ComponentCase] | None = field(default=None, repr=False, compare=False)

    def config(self) -> dict[str, Any]:
        cfg = study_parameters(self)
        cfg["conditions"] = list(CONDITIONS)
        cfg["strings"] = {"history_open": strings.HISTORY_OPEN, "question_open": strings.QUESTION_OPEN,
                          "reasoning_open": strings.REASONING_OPEN, "answer_cue": strings.ANSWER_CUE}
        cfg["clusters_sha256"] = clusters_hash([c.cluster for c in self.cases()][::len(STATES)])
        return cfg

    def cases(self) -> list[ComponentCase]:
        if self._cases is None:
            clusters = generate_clusters(self.n_per_family, self.seed, tuple(self.families))
            self._cases = [ComponentCase(c, s) for c in clusters for s in STATES]
        return self._cases

    def run_cases(self, model: kvprobe.Model, cases: list[ComponentCase]) -> list[list[dict[str, Any]]]:
        """Every (case, query, condition) row of a batch in one ``reason_then_score`` call."""
        prepared, items, candidates = [], [], []
        for case in cases:
            history = model.prefill(prompt(case.cluster, case.state))
            conditions, old, matched = conditions_for(history)
            conditions = supported(self.name, history, conditions)
            prepared.append((case, history, conditions, old, matched))
            for query in QUERIES:
                text, options = case.cluster.query(query), list(case.cluster.options(query))
                for condition in conditions.values():
                    items.append((history, kvprobe.Request(text, condition)))
                    candidates.append(options)
        results = iter(reason_then_score(model, items, candidates, self.budget, strings.ANSWER_CUE))
        out = []
        for case, history, conditions, old, matched in prepared:
            cl = case.cluster
            rows = []
            for query in QUERIES:
                options = list(cl.options(query))
                expected = options.index(cl.expected(case.state, query))
                for name in conditions:
                    generation, scores = next(results)
                    margin = scores.logprobs[expected] - scores.logprobs[1 - expected]
                    component, where = CONDITIONS[name]
                    rows.append({
                        "case_id": case.case_id, "cluster_id": cl.cluster_id, "family": cl.family,
                        "state": case.state, "query": query, "condition": name, "component": component,
                        "span": where, "question": cl.query(query), "options": options,
                        "expected_index": expected, "logprobs": list(scores.logprobs),
                        "option_tokens": list(scores.n_tokens), "margin": margin, "correct": margin > 0,
                        "continuation": generation.text, "continuation_ids": list(generation.token_ids),
                        "history_tokens": len(history), "old_span": [old.start, old.end],
                        "matched_span": [matched.start, matched.end], "position": cl.position,
                        "direction": cl.direction, "prompt_sha256": history.rendered.sha256,
                    })
            check_unchanged(history, case.case_id)
            out.append(rows)
        return out
