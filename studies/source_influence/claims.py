"""The paper's claims the source-influence, oaks and prompt-format studies test, with measures of their runs'
``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.studies.common.claims import Claim, Measurement, Paper, Test, read_summary

__all__ = ["CLAIMS", "SOURCE_MODELS", "prompt_format", "source_estimate"]


SOURCE_MODELS = ("smollm2-135m-instruct", "gemma3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")


def source_estimate(name: str, unit: str, fmt: str, fmt_name: str = "segments",
                    chance_accuracy: bool = False) -> Callable[[Path], Measurement]:
    """An estimate of the role-matched (or OAKS) protocol; ``chance_accuracy``: the control's two-way
    choice accuracy at or below 50 % makes it not testable."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        e = s["formats"][fmt_name]["estimates"]
        v = e[name]
        reason, reference = None, "control"
        if chance_accuracy:
            acc = e["accuracy_control"]["value"]
            reference = f"control accuracy {acc:.1f}%"
            if acc <= 50:
                reason = f"control at or below chance: {acc:.1f}% of two-way choices right"
        return Measurement(v["value"], tuple(v["ci"]), unit, fmt, f"{s['events']} events", reference,
                           units=s["groups"], not_testable=reason)
    return measure


def prompt_format(run: Path) -> Measurement:
    """Native minus raw Delta_m (nats), same draws for both formats."""
    s = read_summary(run)
    d = s["native_minus_raw"]["delta_m"]
    return Measurement(d["value"], tuple(d["ci"]), "nats", "+.2f", f"{s['events']} events", "raw format",
                       units=s["groups"])


CLAIMS: tuple[Claim, ...] = (
    Claim("source-influence.margin", "source-influence", "Hiding the earlier source raises the margin beyond the "
          "equal-token control",
          Paper("All 22 source-minus-control candidate-margin intervals are above zero; point estimates span "
                "0.539--2.985 nats.", (1918, 1919), "Candidate-Margin Changes Across Models",
                "+0.539 to +2.985 nats, 22 checkpoints"),
          "up",
          tuple(Test(f"source-influence/{model}", "Delta_m = m(source) - m(control); 320 held-out events, "
                     "segment-wise prompt", source_estimate("delta_m", "nats", "+.2f")) for model in SOURCE_MODELS)),
    Claim("oaks.obsolete-choices", "oaks", "Hiding the earlier source reduces obsolete answer choices on natural "
          "text",
          Paper("Twenty-one of 22 checkpoints meet the specified requirements of fewer obsolete choices, preserved "
                "control accuracy, and improvement across the required number of books.", (2098, 2100),
                "Natural-Source Candidate Decisions and the Gemma 4 31B Exception",
                "Qwen3-32B -16.77 [-21.16, -12.78] pp", (2118, 2118)),
          "down",
          tuple(Test(f"oaks/{model}", "old-choice change, source mask minus control; generated demonstration set",
                     source_estimate("old_choice_change_pp", "pp", "+.1f", chance_accuracy=True))
                for model in SOURCE_MODELS)),
    Claim("prompt-format.native", "prompt-format", "The native chat format shrinks the margin effect against raw "
          "text",
          Paper("Native-minus-raw contrasts are -1.302, -1.011, and -0.098; their paired 95% intervals are "
                "[-1.804,-0.780], [-1.182,-0.833], and [-0.264,0.068].", (1883, 1885),
                "Paired Prompt-Format Sensitivity", "-1.302, -1.011, -0.098 nats"),
          "down",
          tuple(Test(f"prompt-format/{model}", "Delta_m native minus raw (same draws)", prompt_format)
                for model in ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct"))),
)
