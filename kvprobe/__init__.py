"""kvprobe: probe and intervene on transformer KV caches used as updatable memory.

Core vocabulary::

    import kvprobe
    m = kvprobe.load_model("smollm2-135m-instruct")
    p = kvprobe.Prompt([("A", "..."), ("note", "..."), ("B", "...")], chat=True, system="...")
    h = m.prefill(p)
    old = kvprobe.Mask(h.span("A"), name="source")
    scores = m.score(h, "What is ...?", ['{"answer": "18 hours"}', '{"answer": "12 hours"}'], access=old)
    out = m.generate(h, "What is ...?", access=old, max_new_tokens=40)
"""

from .access import Condition, Compose, Full, Mask, Prepared, matched_control
from .arch import ArchSummary
from .decoding import CandidateScores, Generation, Request, margin_change
from .history import History
from .model import Model, load_model
from .prompts import Prompt, SpanError, TokenSpan

from .version import __version__

__all__ = [
    "ArchSummary",
    "CandidateScores",
    "Compose",
    "Condition",
    "Full",
    "Generation",
    "History",
    "Mask",
    "Model",
    "Prepared",
    "Prompt",
    "Request",
    "SpanError",
    "TokenSpan",
    "load_model",
    "margin_change",
    "matched_control",
]
