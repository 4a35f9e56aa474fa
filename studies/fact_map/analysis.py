"""Where does a fact live in the cache? The propagation map of one source span.

Once a record A has been read, what it said is also written into later
positions: every later token attended to A and carries some of it forward.
Hiding A from the question (``Mask(A)``) removes the direct read only;
recomputing the history without A removes every copy. The map places the
difference: for a question and two candidate answers (current, old) it
measures the margin m = log p(current) - log p(old) under

* ``full`` and ``mask`` (A hidden from the question, every layer);
* ``mask@l-L``: A hidden from the question in layers ``l..L-1`` only, one per
  layer band start (which layers read A directly);
* ``rebuild:S``: A hidden from the question, and later piece S recomputed with
  A hidden (every other row as cached: :class:`~kvprobe.interventions.SegmentRebuild`);
* ``rebuild:..S``: the pieces up to S rebuilt in order (the last is
  ``SelectiveRefresh(A)``, every later row rebuilt);
* ``rebuild:S@l-h``: piece S rebuilt with A hidden in one layer band only (the
  heatmap: later pieces x layer bands);
* ``recompute``: the text without A prefilled again (``TextRecompute``; when
  the source is a whole segment), the target every rebuild is measured against.

Each rebuild's *recovery* is (m(op) - m(mask)) / (m(target) - m(mask)): the
share of the recompute effect beyond the mask that the op reproduces (1: all of
it, 0: nothing beyond hiding A). With ``|m(target) - m(mask)|`` below
``min_effect`` nats the ratio is undefined (``None``). Every entry records its
cost (seconds to prepare the cache, tokens recomputed).

Example::

    import kvprobe
    from kvprobe.studies.fact_map.analysis import fact_map
    m = kvprobe.load_model("smollm2-135m-instruct")
    h = m.prefill(prompt)                      # segments A, inspection, note, B
    fm = fact_map(m, h, "A", "At T2, what is ...?", ['{"answer": "628 minutes"}', '{"answer": "159 minutes"}'])
    print(fm.table())
    fm.heatmap()                               # Float[pieces, bands] recovery
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from kvprobe.access import Condition, Full, Mask, Prepared
from kvprobe.prompts import SpanError, TokenSpan

from kvprobe.interventions import SegmentRebuild, TextRecompute

if TYPE_CHECKING:
    from kvprobe.arch import ArchSummary
    from kvprobe.history import History
    from kvprobe.model import Model

#: Default number of contiguous layer bands of the heatmap.
N_BANDS = 4
#: Below this |m(target) - m(mask)| (nats) a recovery ratio is not reported.
MIN_EFFECT = 0.05
#: Entry kinds, in table order.
KINDS = ("full", "mask", "mask-layers", "rebuild", "cumulative", "band", "recompute")


def layer_bands(arch: "ArchSummary", n_bands: int = N_BANDS) -> list[tuple[int, int]]:
    """Contiguous bands ``(first, last)`` (inclusive) of the attention layers, as equal as possible.

    Example: 30 attention layers in 4 bands give ``[(0, 7), (8, 15), (16, 22), (23, 29)]``.
    """
    layers = list(arch.attention_layers)
    if n_bands < 1:
        raise SpanError(f"fact map: n_bands must be at least 1, got {n_bands}")
    n_bands = min(n_bands, len(layers))
    return [(int(part[0]), int(part[-1])) for part in np.array_split(np.array(layers), n_bands)]


def later_pieces(history: "History", source: TokenSpan) -> list[tuple[str, TokenSpan]]:
    """The history after ``source``, cut into labelled pieces that tile ``[source.end, T)``.

    Each named segment (or the rest of the segment the source lies in) is one piece;
    template tokens between segments join the piece after them; tokens after the last
    segment (the end of the history before the question) are a piece ``end``.
    """
    T = len(history)
    named = []
    for name in history.rendered.segments:
        span = history.span(name, strict=False)
        lo, hi = max(span.start, source.end), span.end
        if hi > lo:
            named.append((lo, hi, name if lo == span.start else f"{name} (after source)"))
    named.sort()
    if not named:
        raise SpanError(f"fact map: no segment text after the source {source!r}")
    pieces = []
    cursor = source.end
    for lo, hi, label in named:
        pieces.append((label, TokenSpan(cursor, hi, label)))  # glue before a segment joins it
        cursor = hi
    if cursor < T:
        pieces.append(("end", TokenSpan(cursor, T, "end")))
    return pieces


@dataclass
class MapEntry:
    """One condition of a fact map.

    Attributes:
        name: the condition's name (``rebuild:B@8-15``...).
        kind: one of :data:`KINDS`.
        piece: the later piece rebuilt (``rebuild``, ``band``) or the last one (``cumulative``).
        band: ``(first, last)`` layers (``band``: where the piece cannot see the source;
            ``mask-layers``: where the question cannot).
        margin: m = log p(current) - log p(old), nats.
        change_vs_mask: margin minus the mask's.
        recovered: (m - m(mask)) / (m(target) - m(mask)) for rebuilds; None for the masks,
            the target, and when the target effect is below ``min_effect``.
        seconds: wall time to prepare the condition's cache.
        recomputed_tokens: history tokens recomputed to prepare it.
    """

    name: str
    kind: str
    piece: str | None
    band: tuple[int, int] | None
    margin: float
    change_vs_mask: float = 0.0
    recovered: float | None = None
    seconds: float = 0.0
    recomputed_tokens: int = 0


@dataclass
class FactMap:
    """The propagation map of one source span for one question (see the module docstring)."""

    source: TokenSpan
    question: str
    candidates: tuple[str, str]
    pieces: list[tuple[str, TokenSpan]]
    bands: list[tuple[int, int]]
    target: str
    entries: list[MapEntry] = field(default_factory=list)
    min_effect: float = MIN_EFFECT

    def entry(self, name: str) -> MapEntry:
        """The entry of condition ``name``."""
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"no condition {name!r} in the fact map; conditions: {[e.name for e in self.entries]}")

    @property
    def target_effect(self) -> float:
        """m(target) - m(mask), nats: what recomputing without the source adds beyond hiding it."""
        return self.entry(self.target).margin - self.entry("mask").margin

    def heatmap(self) -> np.ndarray:
        """Float[pieces, bands]: recovery of each piece rebuilt in each band alone (NaN where undefined)."""
        out = np.full((len(self.pieces), len(self.bands)), np.nan)
        for i, (label, _) in enumerate(self.pieces):
            for j, band in enumerate(self.bands):
                r = self.entry(band_name(label, band)).recovered
                out[i, j] = np.nan if r is None else r
        return out

    def table(self) -> str:
        """A markdown table of every entry."""
        lines = ["| condition | margin (nats) | change vs mask | recovered | prepare (s) | recomputed tokens |",
                 "|---|---|---|---|---|---|"]
        for e in self.entries:
            rec = "" if e.recovered is None else f"{e.recovered:+.2f}"
            lines.append(f"| {e.name} | {e.margin:+.3f} | {e.change_vs_mask:+.3f} | {rec} | {e.seconds:.3f} | "
                         f"{e.recomputed_tokens} |")
        return "\n".join(lines)

    def to_json(self) -> dict[str, Any]:
        """Everything, JSON-ready."""
        return {
            "source": [self.source.start, self.source.end],
            "question": self.question,
            "candidates": list(self.candidates),
            "pieces": [{"label": label, "start": s.start, "end": s.end} for label, s in self.pieces],
            "bands": [list(b) for b in self.bands],
            "target": self.target,
            "target_effect": self.target_effect,
            "min_effect": self.min_effect,
            "entries": [asdict(e) for e in self.entries],
            "heatmap": [[None if np.isnan(x) else float(x) for x in row] for row in self.heatmap()],
        }


def band_name(piece: str, band: tuple[int, int]) -> str:
    """Condition name of piece ``piece`` rebuilt in layer band ``band``."""
    return f"rebuild:{piece}@{band[0]}-{band[1]}"


def map_conditions(
    model: "Model",
    history: "History",
    source: TokenSpan,
    pieces: Sequence[tuple[str, TokenSpan]],
    bands: Sequence[tuple[int, int]],
    source_segment: str | None = None,
) -> dict[str, tuple[str, str | None, tuple[int, int] | None, Condition]]:
    """name -> (kind, piece, band, condition) of every condition of a fact map, in table order."""
    last = model.arch.num_layers - 1
    out: dict[str, tuple[str, str | None, tuple[int, int] | None, Condition]] = {
        "full": ("full", None, None, Full()),
        "mask": ("mask", None, None, Mask(source, name="mask")),
    }
    for lo, _ in bands[1:]:
        name = f"mask@{lo}-{last}"
        out[name] = ("mask-layers", None, (lo, last), Mask(source, layers=range(lo, last + 1), name=name))
    for label, span in pieces:
        out[f"rebuild:{label}"] = ("rebuild", label, None, SegmentRebuild(source, [span], name=f"rebuild:{label}"))
    for k, (label, _) in enumerate(pieces[1:], 1):
        name = f"rebuild:..{label}"
        out[name] = ("cumulative", label, None, SegmentRebuild(source, [s for _, s in pieces[: k + 1]], name=name))
    if len(bands) > 1:
        for label, span in pieces:
            for band in bands:
                name = band_name(label, band)
                out[name] = ("band", label, band, SegmentRebuild(source, [span], layers=range(band[0], band[1] + 1),
                                                                 name=name))
    else:  # one band is the whole model: each band cell is the piece's plain rebuild (the same condition)
        for label, _ in pieces:
            out[band_name(label, bands[0])] = ("band", label, bands[0], out[f"rebuild:{label}"][3])
    if source_segment is not None:
        out["recompute"] = ("recompute", None, None, TextRecompute(source_segment, name="recompute"))
    return out


def fact_map(
    model: "Model",
    history: "History",
    source: str | TokenSpan,
    question: str,
    candidates: Sequence[str],
    pieces: Sequence[tuple[str, TokenSpan]] | None = None,
    n_bands: int = N_BANDS,
    min_effect: float = MIN_EFFECT,
) -> FactMap:
    """Map where the source's effect on one question lives (see the module docstring).

    Args:
        source: a segment name (the recompute target is then ``TextRecompute(source)``)
            or a token span (the target is then every later piece rebuilt, ``rebuild:..end``).
        question: the question asked after the history.
        candidates: (current, old) answers scored teacher-forced.
        pieces: later pieces to rebuild, ``[(label, span), ...]`` in order, tiling the rest
            of the history (default :func:`later_pieces`).
        n_bands: contiguous layer bands of the heatmap.
        min_effect: smallest |m(target) - m(mask)| for which recovery ratios are reported.
    """
    if len(candidates) != 2:
        raise SpanError(f"fact map: give two candidates (current, old), got {len(candidates)}")
    segment = source if isinstance(source, str) else None
    span = history.span(source) if isinstance(source, str) else source
    pieces = list(pieces) if pieces is not None else later_pieces(history, span)
    if not pieces or pieces[0][1].start < span.end or pieces[-1][1].end > len(history):
        raise SpanError(f"fact map: give one or more pieces between the source's end {span.end} and {len(history)}")
    bands = layer_bands(model.arch, n_bands)
    conditions = map_conditions(model, history, span, pieces, bands, segment)
    for name, (_, _, _, cond) in conditions.items():
        cond.validate(len(history), model.arch)
    prepared, costs, done = {}, {}, {}
    for name, (_, _, _, cond) in conditions.items():
        if id(cond) not in done:  # a condition listed under two names (one band) is prepared once
            t0 = time.perf_counter()
            p = Prepared.of(model, history, cond)
            done[id(cond)] = (p, (time.perf_counter() - t0, int(p.state.info.get("recomputed_tokens", 0))))
        prepared[name], costs[name] = done[id(cond)]
    scores = model.score(history, question, list(candidates), access=prepared)
    target = "recompute" if segment is not None else f"rebuild:..{pieces[-1][0]}"
    if target not in conditions:  # a single later piece: its rebuild is every later row
        target = f"rebuild:{pieces[-1][0]}"
    fm = FactMap(span, question, (candidates[0], candidates[1]), pieces, bands, target, min_effect=min_effect)
    m_mask = scores["mask"].margin()
    effect = scores[target].margin() - m_mask
    for name, (kind, piece, band, _) in conditions.items():
        m = scores[name].margin()
        rec = None
        if kind in ("rebuild", "cumulative", "band") and name != target and abs(effect) >= min_effect:
            rec = (m - m_mask) / effect
        seconds, tokens = costs[name]
        fm.entries.append(MapEntry(name, kind, piece, band, m, m - m_mask, rec, seconds, tokens))
    if not history.check_digest():
        raise RuntimeError("the shared history K/V changed while mapping")
    return fm
