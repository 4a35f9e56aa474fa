"""Question-relevance signals on the controlled histories (paper appendix "Attention, Lexical Relevance,
and Leave-One-Out Signals", seed L2265-2311; spec partB section 2).

The component study's clusters and protocol (``History:`` ... ``Reasoning:``, exactly ``budget``
greedy tokens, ``Answer:``, both options scored) under two conditions, ``none`` and ``mask-old``,
with three signals per (cluster, state, query):

* ``lexical``: overlap of the query's words with the old record's words (Jaccard of case-folded
  word sets; [UNCLEAR] in the paper, ours);
* ``attention_old``: attention to the old source under full access: the attention probability
  mass on the old record's tokens from the last token before the options (the answer cue's last
  token), averaged over heads and attention layers ([UNCLEAR] head/query-token pooling, ours);
* ``loo``: the signed leave-one-out score ``M(mask-old) - M(none)``, ``M = log p(expected) - log
  p(alternative)`` (computed in the summary from the two rows).

And per cluster state, with no question (L2271-2272, L2305-2310), the earlier (``old``) record against the
later one (``later``), written into every row of the state (:func:`pair_scores`):

* ``v_distance``: the jointly encoded V distance, :func:`kvprobe.readouts.fixed.value_distance` of the
  token-mean V of the old span (A) and the later span (B) read from the one prefilled history cache (the
  records "encoded together without the question"; every layer with K/V rows, B in the denominator);
* ``token_jaccard`` and ``char_distance``: the surface baselines
  (:func:`kvprobe.readouts.fixed.token_jaccard` of the two spans' history token ids,
  :func:`~kvprobe.readouts.fixed.char_distance` of the two segment texts). They need only the tokenizer, so
  :func:`backfill_surfaces` adds them to rows written before these columns existed.

The summary reports each signal's replacement AUC (SUPERSEDED above CURRENT, target queries) and
its question relevance (the fraction of cluster states whose target query scores higher than the
unrelated query; ``loo`` by its magnitude). The paper uses budgets 8, 32 and 128: one run per
budget, compared with ``kvprobe report question-relevance RUN RUN RUN --out DIR``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, ClassVar, Sequence

import torch

import kvprobe
from kvprobe import decoding
from kvprobe.forward import ForwardOutput
from kvprobe.rows import Rows
from kvprobe.prompts import char_span_to_tokens
from kvprobe.readouts.fixed import char_distance, token_jaccard, value_distance
from kvprobe.studies.common.protocol import CaseRun, Question
from . import strings
from .data import Cluster, generate_clusters, prompt
from .reasoning import reason_then_score
from .study import ComponentCase, ComponentStudy, conditions_for

#: The two conditions the signals need (names as in the component study).
RELEVANCE_CONDITIONS = ("none", "mask-old")
#: The earlier and the later record of the V-distance and surface comparisons (history segment names).
EARLIER, LATER = "old", "later"
#: Row columns of the pair scores (one value per cluster state).
SURFACE_COLUMNS = ("token_jaccard", "char_distance")
PAIR_COLUMNS = ("v_distance", *SURFACE_COLUMNS)
_WORD = re.compile(r"\w+")


def lexical_overlap(question: str, record: str) -> float:
    """Jaccard overlap of the case-folded word sets of a question and a record.

    Example: ``lexical_overlap("Where is Kor now?", "Kor is in Ask.")`` is 2/6 (``is``, ``kor`` of six words).
    """
    a, b = set(_WORD.findall(question.casefold())), set(_WORD.findall(record.casefold()))
    return len(a & b) / len(a | b) if a | b else 0.0


def attention_mass(out: ForwardOutput, rows: Rows, row: int, span: kvprobe.TokenSpan) -> float:
    """Attention probability from the block's last token to the history positions of ``span``,
    summed over the span, averaged over heads and the captured layers."""
    slots = rows.key_valid[row] & (rows.key_pos[row] >= span.start) & (rows.key_pos[row] < span.end)
    masses = [float(attn[row, :, -1, : slots.shape[0]][:, slots].sum(dim=-1).mean()) for attn in out.attention.values()]
    return sum(masses) / len(masses)


def surface_scores(cluster: Cluster, state: str, earlier_ids: Sequence[int], later_ids: Sequence[int]
                   ) -> dict[str, float]:
    """Token Jaccard of the two records' token ids and character distance of their texts (surface baselines)."""
    texts = dict(cluster.segments(state))
    return {"token_jaccard": token_jaccard(earlier_ids, later_ids),
            "char_distance": char_distance(texts[EARLIER], texts[LATER])}


def joint_value_distance(history: kvprobe.History, layers: Sequence[int]) -> float:
    """d_V of the old record (A) and the later record (B), both read from the one history cache: token-mean V
    per layer in ``layers`` ([kv heads, head dim]), :func:`kvprobe.readouts.fixed.value_distance`."""
    a, b = history.span(EARLIER), history.span(LATER)
    pooled = [(history.kv[l][1][0, :, a.start:a.end].double().mean(dim=1).cpu(),
               history.kv[l][1][0, :, b.start:b.end].double().mean(dim=1).cpu()) for l in layers]
    return value_distance([p for p, _ in pooled], [q for _, q in pooled])


def pair_scores(model: kvprobe.Model, case: ComponentCase, history: kvprobe.History) -> dict[str, float]:
    """The jointly encoded V distance and the surface baselines of one prefilled cluster state."""
    ids = history.input_ids.tolist()
    a, b = history.span(EARLIER), history.span(LATER)
    return {"v_distance": joint_value_distance(history, model.arch.kv_layers),
            **surface_scores(case.cluster, case.state, ids[a.start:a.end], ids[b.start:b.end])}


def tokenized_surfaces(tokenizer: Any, cluster: Cluster, state: str) -> dict[str, float]:
    """:func:`surface_scores` from the tokenizer alone: the history tokenized as the model's prefill does
    (``Prompt.tokenize``), each record's tokens found as ``History.span`` finds them."""
    rendered, ids, offsets = prompt(cluster, state).tokenize(tokenizer)
    ids = ids.tolist()
    spans = [char_span_to_tokens(offsets, rendered.history_text, *rendered.segments[name], label=name)
             for name in (EARLIER, LATER)]
    return surface_scores(cluster, state, *(ids[s.start:s.end] for s in spans))


def backfill_surfaces(out_dir: Any, tokenizer: Any) -> int:
    """Add ``token_jaccard`` and ``char_distance`` to every row of a run written without them (in place,
    :func:`kvprobe.studies.common.runner.regrade_results`); the clusters are regenerated from the run's
    config. Returns the number of rows changed. ``v_distance`` needs the model's cache: a new run."""
    import json
    from pathlib import Path

    from kvprobe.studies.common.runner import regrade_results

    study = json.loads((Path(out_dir) / "config.json").read_text())["study_config"]
    clusters = {c.cluster_id: c for c in generate_clusters(study["n_per_family"], study["seed"],
                                                           tuple(study["families"]))}
    cache: dict[tuple[str, str], dict[str, float]] = {}

    def add(row: dict[str, Any]) -> dict[str, Any]:
        key = (row["cluster_id"], row["state"])
        if key not in cache:
            cache[key] = tokenized_surfaces(tokenizer, clusters[key[0]], key[1])
        return {**row, **cache[key]}

    return regrade_results(out_dir, add)


@dataclass(frozen=True)
class CueAnswer(decoding.Answer):
    """An answer with the attention its answer cue's last token paid to the old record (:func:`attention_mass`;
    None: not read, as under ``mask-old``)."""

    attention_old: float | None = None


@dataclass
class RelevanceStudy(ComponentStudy):
    """The controlled clusters under no intervention and the old-record mask, with the attention signal."""

    name: ClassVar[str] = "question-relevance"

    def config_extra(self) -> dict[str, Any]:
        return {**super().config_extra(), "conditions": list(RELEVANCE_CONDITIONS)}

    def conditions(self, model: kvprobe.Model, case: ComponentCase, history: kvprobe.History
                   ) -> dict[str, kvprobe.Condition]:
        every = conditions_for(history, self.control_skip)[0]
        return {name: every[name] for name in RELEVANCE_CONDITIONS}

    def setup(self, model: kvprobe.Model, run: CaseRun) -> None:
        super().setup(model, run)
        run.extra["pair_scores"] = pair_scores(model, run.case, run.history)

    def answer(self, model: kvprobe.Model, items: Sequence[tuple[kvprobe.History, kvprobe.Request]],
               candidates: Sequence[Sequence[str]] | None) -> list[CueAnswer]:
        """The component study's answer call, each ``none`` answer with the attention to the old record."""
        if not items:
            return []
        attention: dict[int, float] = {}

        def read(group: list[int], rows: Rows, out: ForwardOutput) -> None:
            for r, i in enumerate(group):
                history, request = items[i]
                if request.access.name == "none":
                    attention[i] = attention_mass(out, rows, r, history.span("old"))

        answered = reason_then_score(model, items, candidates, self.budget, strings.ANSWER_CUE,
                                              capture_attention=model.arch.attention_layers, on_cue=read)
        return [CueAnswer(scores, generation, attention.get(i)) for i, (generation, scores) in enumerate(answered)]

    def row(self, run: CaseRun, question: Question, condition: str,
            answers: dict[str, decoding.Answer]) -> dict[str, Any]:
        out = super().row(run, question, condition, answers)
        old = dict(run.case.cluster.segments(run.case.state))["old"]
        out["lexical"] = lexical_overlap(question.text, old)
        out["attention_old"] = answers[condition].attention_old
        out.update(run.extra["pair_scores"])
        return out


if __name__ == "__main__":  # pragma: no cover - adds the surface columns to committed runs (tokenizer only)
    import sys

    from transformers import AutoTokenizer

    tokenizer_dir, *runs = sys.argv[1:]
    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    for d in runs:
        print(d, backfill_surfaces(d, tok), "rows changed")
