"""``kvprobe bench internals``: what reading the forward costs beside scoring the same batch.

One history (the quantity demo's), five conditions (full access, a mask, the equal-token control, a
soft bias, a compaction), one question with two candidates. Three sides run interleaved, medians of
``--repeats`` after ``--warmups``:

* ``score``: ``Model.score`` of the batch (the question, then both candidates);
* ``run_with_cache``: ``Model.run_with_cache`` of the same batch keeping every layer's hidden states;
* ``trace``: ``Model.trace`` of the same batch with the candidates and no edits (an empty block).

The issue's goal for both is at most 1.2x ``score``; the ratios are reported beside it, not tuned.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path
from typing import Any

import torch

from kvprobe.access import Full, Mask, matched_control
from kvprobe.files import atomic_write_text
from kvprobe.interventions import Compact, SoftBias
from kvprobe.model import Model
from kvprobe.prompts import Prompt

from .measure import interleave, median_ms

#: The goal of the issue that asked for these paths (ratio to ``score`` of the same batch).
GOAL_RATIO = 1.2
QUESTION = "What is the current cycle duration of Assembly-TEST-000? Return the complete quantity including its unit."
CANDIDATES = ('{"answer": "628 minutes"}', '{"answer": "159 minutes"}')


def run_internals_bench(model: Model, prompt: Prompt, out_dir: Path, warmups: int = 2, repeats: int = 9
                        ) -> dict[str, Any]:
    """Time the three sides interleaved; write ``internals.json`` and ``internals.md`` under ``out_dir``."""
    h = model.prefill(prompt)
    span = h.span("A")
    access = {"full": Full(), "mask": Mask(span), "control": matched_control(h, Mask(span), "note"),
              "bias": SoftBias([(span, -0.69)]), "compact": Compact(span)}

    def traced() -> dict:
        with model.trace(h, QUESTION, access=access, candidates=CANDIDATES) as t:
            pass
        return t.scores

    sides = {"score": lambda: model.score(h, QUESTION, CANDIDATES, access=access),
             "run_with_cache": lambda: model.run_with_cache(h, QUESTION, access=access, names=("hidden",)),
             "trace": traced}
    runs, last = interleave(sides, warmups, repeats)
    scored, from_trace = last["score"], last["trace"]
    agree = max(abs(a - b) for name in access for a, b in zip(scored[name].logprobs, from_trace[name].logprobs))
    ms = {name: median_ms(r) for name, r in runs.items()}
    result = {
        "model": model.name, "dtype": str(model.dtype), "history_tokens": len(h), "conditions": list(access),
        "layers_captured": model.arch.num_layers, "warmups": warmups, "repeats": repeats,
        "median_ms": ms, "ratio_to_score": {k: ms[k] / ms["score"] for k in ("run_with_cache", "trace")},
        "goal_ratio_at_most": GOAL_RATIO, "trace_scores_max_abs_diff_nats": agree,
        "machine": {"threads": torch.get_num_threads(), "processor": platform.processor() or platform.machine(),
                    "platform": platform.platform()},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "internals.json", json.dumps(result, indent=2) + "\n")
    atomic_write_text(out_dir / "internals.md", format_internals_markdown(result))
    return result


def format_internals_markdown(r: dict[str, Any]) -> str:
    """The table docs/benchmarks.md quotes."""
    ms, ratio = r["median_ms"], r["ratio_to_score"]
    m = r["machine"]
    return "\n".join([
        f"# Reading the forward: {r['model']} ({r['dtype']}, {m['threads']} threads, {m['processor']})",
        "",
        f"{len(r['conditions'])} conditions ({', '.join(r['conditions'])}) over one {r['history_tokens']}-token history, "
        f"one question, two candidates; medians of {r['repeats']} interleaved runs after {r['warmups']} warm-ups.",
        "",
        "| side | median ms | ratio to score | goal |",
        "|---|---|---|---|",
        f"| score | {ms['score']:.1f} | 1.00x | |",
        f"| run_with_cache, hidden states of all {r['layers_captured']} layers | {ms['run_with_cache']:.1f} | "
        f"{ratio['run_with_cache']:.2f}x | <= {r['goal_ratio_at_most']:.1f}x |",
        f"| trace, no edits, with the candidates | {ms['trace']:.1f} | {ratio['trace']:.2f}x | "
        f"<= {r['goal_ratio_at_most']:.1f}x |",
        "",
        f"The trace's candidate scores equal score's within {r['trace_scores_max_abs_diff_nats']:.1e} nats.",
        "",
    ])


def command(args, load) -> dict[str, Any]:
    """``kvprobe bench internals`` on the quantity demo's history."""
    from kvprobe.studies.quantity.demo import build_prompt

    return run_internals_bench(load(), build_prompt(), Path(args.out), warmups=args.warmups, repeats=args.repeats)
