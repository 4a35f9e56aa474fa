"""The paper's claims the source-influence, oaks and prompt-format studies test, with measures of their runs'
``summary.json``.

Each claim quotes the paper once, here; ``kvprobe report scorecard`` gathers :data:`CLAIMS` (the types, the
readers and the verdict rule: :mod:`kvprobe.studies.common.claims`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from kvprobe.readouts.stats import clopper_pearson
from kvprobe.studies.common.claims import Claim, Measurement, Paper, Test, chance_interval_reason, read_summary

from .summary import strata_needed

__all__ = ["CLAIMS", "OAKS_CHANCE_PCT", "SOURCE_MODELS", "oaks_books", "prompt_format", "source_estimate"]


SOURCE_MODELS = ("smollm2-135m-instruct", "gemma3-270m", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")


#: The paper's sentence of OAKS's three requirements (quote, lines, section), split into one claim each.
_REQUIREMENTS = ("Twenty-one of 22 checkpoints meet the specified requirements of fewer obsolete choices, preserved "
                 "control accuracy, and improvement across the required number of books.", (2098, 2100),
                 "Natural-Source Candidate Decisions and the Gemma 4 31B Exception")

#: Chance on the OAKS choices: a random pick of the two supplied answers (percent right).
OAKS_CHANCE_PCT = 50.0


def source_estimate(name: str, unit: str, fmt: str, fmt_name: str = "segments", chance_arm: str | None = None,
                    null: float = 0.0, lower: str = "ci") -> Callable[[Path], Measurement]:
    """An estimate of the role-matched (or OAKS) protocol against ``null``. ``chance_arm`` (``control`` or
    ``full``): that arm's two-way choice accuracy must lie above :data:`OAKS_CHANCE_PCT` by its bootstrap 95 %
    interval (else not testable). ``lower``: ``ci`` (the two-sided 95 % interval) or ``one-sided`` (the paper's
    one-sided 95 % lower bound L.95 beside the two-sided upper bound, as its preservation criterion)."""
    def measure(run: Path) -> Measurement:
        s = read_summary(run)
        e = s["formats"][fmt_name]["estimates"]
        v = e[name]
        reason, reference, note = None, "control", ""
        if chance_arm is not None:
            acc = e[f"accuracy_{chance_arm}"]
            reference = f"{chance_arm} accuracy {acc['value']:.1f}%"
            reason = chance_interval_reason(acc["value"], acc["ci"], OAKS_CHANCE_PCT, f"{chance_arm} accuracy",
                                            "a random pick of the two answers")
        ci = tuple(v["ci"])
        if lower == "one-sided":
            ci, note = (v["lower_one_sided"], v["ci"][1]), "lower bound: the paper's one-sided L.95"
        return Measurement(v["value"], ci, unit, fmt, f"{s['events']} events", reference, null=null,
                           units=s["groups"], not_testable=reason, note=note)
    return measure


def oaks_books(run: Path) -> Measurement:
    """Share of the books (the generated set's pseudo-books) whose old-choice change is favorable (below 0), with
    its exact binomial interval, against half the books; the paper's count criterion beside it. Not testable when
    the control does not choose above chance."""
    s = read_summary(run)
    f = s["formats"]["segments"]
    k, n = f["positive_patterns"], f["patterns"]
    acc = f["estimates"]["accuracy_control"]
    lo, hi = clopper_pearson(k, n)
    needed = strata_needed(n)
    return Measurement(k / n, (lo, hi), "share", ".3f", f"{n} books, {s['events']} events",
                       f"half the books; control accuracy {acc['value']:.1f}%", null=0.5, units=n,
                       not_testable=chance_interval_reason(acc["value"], acc["ci"], OAKS_CHANCE_PCT,
                                                           "control accuracy", "a random pick of the two answers"),
                       note=f"{k}/{n} books favorable (exact binomial interval); the paper's criterion, {needed} of "
                       f"{n}: {'met' if k >= needed else 'not met'}")


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
                     "segment-wise prompt", source_estimate("delta_m", "nats", "+.2f")) for model in SOURCE_MODELS),
          reference="control", units="events"),
    Claim("oaks.obsolete-choices", "oaks", "Hiding the earlier source reduces obsolete answer choices on natural "
          "text (the first of the paper's three requirements)",
          Paper(*_REQUIREMENTS,
                "Qwen3-32B -16.77 [-21.16, -12.78] pp", (2118, 2118)),
          "down",
          tuple(Test(f"oaks/{model}", "old-choice change, source mask minus control; generated demonstration set",
                     source_estimate("old_choice_change_pp", "pp", "+.1f", chance_arm="control"))
                for model in SOURCE_MODELS),
          reference="control", units="events"),
    Claim("oaks.control-accuracy", "oaks", "The equal-token control preserves the choice accuracy of full access "
          "(the second requirement: L.95 of control minus full above -3 pp)",
          Paper(*_REQUIREMENTS,
                "Qwen3-32B full 52.14, control 51.49 (%)", (2118, 2118)),
          "up",
          tuple(Test(f"oaks/{model}", "control minus full accuracy; one-sided L.95 vs -3 pp; generated "
                     "demonstration set", source_estimate("control_minus_full_pp", "pp", "+.1f", chance_arm="full",
                                                          null=-3.0, lower="one-sided"))
                for model in SOURCE_MODELS),
          reference="full access", units="events"),
    Claim("oaks.books", "oaks", "Obsolete choices fall in most books (the third requirement: the required number of "
          "books)",
          Paper(*_REQUIREMENTS,
                "Qwen3-32B 5/5 books", (2118, 2118)),
          "up",
          tuple(Test(f"oaks/{model}", "share of books with fewer obsolete choices (source mask minus control); vs "
                     "half; generated demonstration set", oaks_books) for model in SOURCE_MODELS),
          reference="half the books", units="books"),
    Claim("prompt-format.native", "prompt-format", "The native chat format shrinks the margin effect against raw "
          "text",
          Paper("Native-minus-raw contrasts are -1.302, -1.011, and -0.098; their paired 95% intervals are "
                "[-1.804,-0.780], [-1.182,-0.833], and [-0.264,0.068].", (1883, 1885),
                "Paired Prompt-Format Sensitivity", "-1.302, -1.011, -0.098 nats"),
          "down",
          tuple(Test(f"prompt-format/{model}", "Delta_m native minus raw (same draws)", prompt_format)
                for model in ("smollm2-135m-instruct", "qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")),
          reference="raw format", units="events"),
)
