"""The report of ``kvprobe bench long``: its goals, ``long.md`` and ``long.png``, from ``long.json`` alone.

:func:`goals` sets the issue's goals against what has been measured (reported, never tuned for);
:func:`format_long_markdown` writes the tables a person scans (one row per length, kvprobe beside
plain transformers), one section per kind of cell; :func:`plot_long` draws prefill tokens/s and the
decode step against history tokens. All three read a result as :mod:`.long` saves it, so a committed
``long.json`` redraws its committed ``long.md`` and ``long.png`` (``python -m kvprobe.tools.figures``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from .long_measures import OPERATIONS

#: The issue's goals (reported beside the measurements; nothing is tuned to meet them).
GOAL_PREFILL_SPEEDUP = 1.0
GOAL_RECOMPUTE_SPEEDUP = 1.0
GOAL_DECODE_SPEEDUP = 1.5
GOAL_DECODE_ROWS = 15
GOAL_LENGTH = 8192
GOAL_MEMORY_RATIO = 1.5
MIB = 2**20

Cells = list[tuple[int, dict, dict]]


def _measures(result: dict[str, Any], length: int | None = None) -> Iterator[tuple[int, dict, dict]]:
    """(target length, cell, its measures) in length order."""
    for key in sorted(result.get("cells", {}), key=int):
        cell = result["cells"][key]
        if length is None or int(key) == length:
            yield int(key), cell, cell.get("measures", {})


# --------------------------------------------------------------------------- goals


def _speedup_goal(result: dict[str, Any], measure: str, goal: float) -> dict[str, Any]:
    """``measure`` at least ``goal`` times plain's speed at every length."""
    ratios = {n: m[measure]["speedup"] for n, _, m in _measures(result) if measure in m}
    return {"goal": f"{measure} at least as fast as plain transformers + SDPA at every length",
            "measure": measure, "target": f"plain/kvprobe time >= {goal:.2f}x",
            "measured": {str(n): round(r, 3) for n, r in ratios.items()},
            "met": None if not ratios else all(r >= goal for r in ratios.values())}


def goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's goals against what has been measured so far (``met`` None: not measured)."""
    out = [_speedup_goal(result, "prefill", GOAL_PREFILL_SPEEDUP),
           _speedup_goal(result, "recompute", GOAL_RECOMPUTE_SPEEDUP)]
    decode = next((m.get(f"decode-{GOAL_DECODE_ROWS}") for _, _, m in _measures(result, GOAL_LENGTH)), None)
    out.append({"goal": f"{GOAL_DECODE_ROWS}-row masked decode step at least {GOAL_DECODE_SPEEDUP}x faster than the "
                        f"plain batched loop at {GOAL_LENGTH} tokens",
                "measure": f"decode-{GOAL_DECODE_ROWS}", "target": f"plain/kvprobe time >= {GOAL_DECODE_SPEEDUP:.2f}x",
                "measured": None if decode is None else round(decode["speedup"], 3),
                "met": None if decode is None else decode["speedup"] >= GOAL_DECODE_SPEEDUP})
    one = next((m.get("decode-1") for _, _, m in _measures(result, GOAL_LENGTH)), None)
    ratio = None
    if decode is not None and one is not None:
        ratio = decode["memory"]["kvprobe"]["peak_bytes"] / one["memory"]["kvprobe"]["peak_bytes"]
    out.append({"goal": f"peak memory of {GOAL_DECODE_ROWS} access-only rows over a {GOAL_LENGTH}-token history at "
                        f"most {GOAL_MEMORY_RATIO}x that of one row",
                "measure": "memory",
                "target": f"peak(decode-{GOAL_DECODE_ROWS}) / peak(decode-1) <= {GOAL_MEMORY_RATIO:.2f}x",
                "measured": None if ratio is None else round(ratio, 3),
                "met": None if ratio is None else ratio <= GOAL_MEMORY_RATIO})
    return out


# --------------------------------------------------------------------------- long.md


def _mib(n: float | None) -> str:
    if n is None:
        return "-"
    return f"{n / MIB:.0f}" if n >= 100 * MIB else f"{n / MIB:.1f}"


def _goal_cell(met: bool | None, text: str) -> str:
    return f"{text} ({'met' if met else 'not met'})" if met is not None else text


def _header(result: dict[str, Any]) -> list[str]:
    m, s = result.get("machine", {}), result["settings"]
    lines = [
        f"# Long-context benchmark: {result['model']} ({result['dtype']}, {result['threads']} torch thread(s), "
        f"{m.get('processor', '?')})",
        "",
        f"kvprobe against plain transformers (same weights, transformers' SDPA attention, the loop written by hand), "
        f"PG-19 histories with record A at {s['fraction_a']:.0%} and record B at the end. Timed runs interleaved "
        f"(the side going first alternates) after {s['warmups']} warm-up(s); medians of {s['repeats']} runs "
        f"(prefill, operations) or {s['decode_steps']} steps (decode). Ratios are plain time / kvprobe time: "
        f"above 1, kvprobe is faster. {m.get('platform', '')}, torch {m.get('torch', '?')}, "
        f"transformers {m.get('transformers', '?')}.",
        "",
    ]
    if result.get("skipped_lengths"):
        lines += [f"Default lengths {result['skipped_lengths']} skipped: beyond the model's context "
                  f"(max_position_embeddings {result.get('context_length')}).", ""]
    return lines


def _prefill_section(cells: Cells) -> list[str]:
    lines = ["## Prefill", "",
             "| target | tokens | kvprobe tok/s | plain tok/s | plain/kvprobe time | goal | last-layer K rel. diff "
             "| kvprobe tokenize + digest ms |",
             "|---|---|---|---|---|---|---|---|"]
    for n, cell, ms in cells:
        if "prefill" in ms:
            p = ms["prefill"]
            extra = p["kvprobe"].get("overhead_ms", {})
            lines.append(f"| {n} | {cell['history_tokens']} | {p['kvprobe']['tokens_per_s']:.0f} | "
                         f"{p['plain']['tokens_per_s']:.0f} | {p['speedup']:.3f}x | "
                         f"{_goal_cell(p['speedup'] >= GOAL_PREFILL_SPEEDUP, '>= 1.00x')} | "
                         f"{p['check']['relative_diff']:.1e}{'' if p['check']['passed'] else ' FAIL'} | "
                         f"{sum(extra.values()):.1f} |")
    return lines + ["", "kvprobe's prefill (`model.prefill(prompt)`) also tokenizes the prompt and hashes the cache "
                        "(SHA-256 digest); the last column times those two alone, once.", ""]


def _history_section(result: dict[str, Any], cells: Cells) -> list[str]:
    """The history every cell reads, and where question and decode tokens pass the model's context."""
    lines = []
    built = [(n, c) for n, c, _ in cells if "history_prefill" in c]
    if built:
        lines += ["The history every cell reads, prefilled once by kvprobe before the cells (one untimed-by-the-"
                  "cells run, no warm-up, no plain side):", "",
                  "| target | tokens | kvprobe s | tok/s | peak MiB (+incr) | weights + history K/V MiB |",
                  "|---|---|---|---|---|---|"]
        for n, c in built:
            h = c["history_prefill"]
            lines.append(f"| {n} | {c['history_tokens']} | {h['seconds']:.1f} | {h['tokens_per_s']:.0f} | "
                         f"{_mib(h['peak_bytes'])} (+{_mib(h['increment_bytes'])}) | "
                         f"{_mib(result['weight_bytes'] + c['history_kv_bytes'])} |")
        lines.append("")
    context = result.get("context_length")
    beyond = [f"{n} (up to position {c['last_position']})" for n, c, _ in cells
              if context and c.get("last_position", 0) > context]
    if beyond:
        lines += [f"Question and decode tokens run past the model's context ({context} positions) at: "
                  f"{', '.join(beyond)}.", ""]
    return lines


def _decode_goal(n: int, rows: int, speedup: float) -> str:
    if rows == GOAL_DECODE_ROWS and n == GOAL_LENGTH:
        return _goal_cell(speedup >= GOAL_DECODE_SPEEDUP, f">= {GOAL_DECODE_SPEEDUP:.2f}x")
    return f"(>= {GOAL_DECODE_SPEEDUP:.2f}x at {GOAL_LENGTH})" if rows == GOAL_DECODE_ROWS else ""


def _decode_section(cells: Cells) -> list[str]:
    lines = ["## Masked decode step (access-only: record A hidden)", "",
             "| target | tokens | rows | kvprobe ms | plain ms | plain/kvprobe | goal | logits diff | kvprobe cache |",
             "|---|---|---|---|---|---|---|---|---|"]
    for n, cell, ms in cells:
        for name in sorted((k for k in ms if k.startswith("decode-")), key=lambda k: int(k.split("-")[1])):
            d = ms[name]
            lines.append(f"| {n} | {cell['history_tokens']} | {d['rows']} | {d['kvprobe']['median_ms']:.1f} | "
                         f"{d['plain']['median_ms']:.1f} | {d['speedup']:.3f}x | "
                         f"{_decode_goal(n, d['rows'], d['speedup'])} | "
                         f"{d['check']['max_abs_diff']:.1e}{'' if d['check']['passed'] else ' FAIL'} | "
                         f"{d['kvprobe'].get('cache_layout', '')} |")
    return lines


def _operations_section(cells: Cells) -> list[str]:
    lines = ["", "## Operations: the condition's state + first answer token", "",
             "| target | tokens | operation | kvprobe ms | plain ms | plain/kvprobe | goal | same first token |",
             "|---|---|---|---|---|---|---|---|"]
    for n, cell, ms in cells:
        for name in (o for o in OPERATIONS if o in ms):
            o = ms[name]
            goal = _goal_cell(o["speedup"] >= GOAL_RECOMPUTE_SPEEDUP, ">= 1.00x") if name == "recompute" else ""
            lines.append(f"| {n} | {cell['history_tokens']} | {name} | {o['kvprobe']['median_ms']:.0f} | "
                         f"{o['plain']['median_ms']:.0f} | {o['speedup']:.3f}x | {goal} | "
                         f"{'yes' if o['check']['passed'] else 'NO'} |")
    return lines


def _memory_section(result: dict[str, Any], cells: Cells) -> list[str]:
    lines = ["", f"## Peak memory (MiB; {result.get('memory_method', '?')})", "",
             "Peak resident set during each piece (+ its increment over the resident set just before it), "
             f"against weights ({_mib(result.get('weight_bytes'))} MiB) + the K/V the piece needs; decode rows also "
             "against rows x history K/V (what per-row copies need). Prefill and operations: the largest of the timed "
             "runs; decode: each side alone (set-up, question, first step).", "",
             "| target | tokens | piece | kvprobe peak (+incr) | plain peak (+incr) | weights + history K/V | "
             "weights + rows x K/V |",
             "|---|---|---|---|---|---|---|"]
    for n, cell, ms in cells:
        for name, e in ms.items():
            mem = e["memory"]
            kv_side = mem.get("kvprobe", e.get("kvprobe", {}))
            plain_side = mem.get("plain", e.get("plain", {}))
            lines.append(f"| {n} | {cell['history_tokens']} | {name} | {_mib(kv_side.get('peak_bytes'))} "
                         f"(+{_mib(kv_side.get('increment_bytes'))}) | {_mib(plain_side.get('peak_bytes'))} "
                         f"(+{_mib(plain_side.get('increment_bytes'))}) | {_mib(mem['needs_bytes'])} | "
                         f"{_mib(mem.get('per_row_copies_bytes'))} |")
    return lines


def _measured_text(measured: Any) -> str:
    if isinstance(measured, dict):
        return ", ".join(f"{k}: {v:.3f}x" for k, v in measured.items()) or "-"
    return "not measured" if measured is None else f"{measured:.3f}x"


def _goals_section(result: dict[str, Any], cells: Cells) -> list[str]:
    lines = ["", "## Goals (the issue's; reported, not tuned for)", "", "| goal | target | measured | met |",
             "|---|---|---|---|"]
    for g in result.get("goals") or goals(result):
        met = {True: "yes", False: "no", None: "-"}[g["met"]]
        lines.append(f"| {g['goal']} | {g['target']} | {_measured_text(g['measured'])} | {met} |")
    failed = [f"{n}/{name}" for n, _, ms in cells for name, e in ms.items() if not e["check"]["passed"]]
    return lines + ["", "Agreement checks (kvprobe vs plain): " + ("all passed." if not failed else
                                                                  "FAILED: " + ", ".join(failed) + "."), ""]


def format_long_markdown(result: dict[str, Any]) -> str:
    """Tables a person can scan: one row per length, kvprobe beside plain transformers, the goals."""
    cells = list(_measures(result))
    return "\n".join([*_header(result), *_prefill_section(cells), *_history_section(result, cells),
                      *_decode_section(cells), *_operations_section(cells), *_memory_section(result, cells),
                      *_goals_section(result, cells)])


# --------------------------------------------------------------------------- long.png


_STYLES = {"kvprobe": ("-", "o", "kvprobe"), "plain": ("--", "s", "plain transformers + SDPA")}


def _plot_prefill(ax, result: dict[str, Any], cells: Cells) -> None:
    for side, (line, marker, label) in _STYLES.items():
        pts = [(c["history_tokens"], m["prefill"][side]["tokens_per_s"]) for _, c, m in cells if "prefill" in m]
        if pts:
            ax.plot(*zip(*pts), line, marker=marker, color="C0" if side == "kvprobe" else "C1", label=label)
    ax.set_title(f"Prefill ({result['settings']['chunk_size']}-token chunks)")
    ax.set_ylabel("tokens / s (median)")


def _plot_decode(ax, cells: Cells) -> None:
    rows = sorted({int(k.split("-")[1]) for _, _, m in cells for k in m if k.startswith("decode-")})
    for i, b in enumerate(rows):
        for side, (line, marker, label) in _STYLES.items():
            pts = [(c["history_tokens"], m[f"decode-{b}"][side]["median_ms"]) for _, c, m in cells
                   if f"decode-{b}" in m]
            if pts:
                ax.plot(*zip(*pts), line, marker=marker, color=f"C{i}",
                        label=f"{label}, {b} row{'s' if b > 1 else ''}")
    ax.set_title("Masked decode step (record A hidden)")
    ax.set_ylabel("ms per step (median)")


def plot_long(result: dict[str, Any], path: Path) -> None:
    """Prefill tokens/s and decode-step ms against history tokens, kvprobe and plain (log x)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = list(_measures(result))
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.5))
    _plot_prefill(left, result, cells)
    _plot_decode(right, cells)
    ticks = sorted({c["history_tokens"] for _, c, _ in cells if "history_tokens" in c})
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        if ticks:
            ax.set_xticks(ticks, [str(t) for t in ticks])
            ax.minorticks_off()
        ax.set_xlabel("history tokens")
        ax.grid(True, which="both", alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=8)
    fig.suptitle(f"kvprobe vs plain transformers, {result['model']}, {result['threads']} torch thread(s)")
    fig.tight_layout()
    tmp = path.with_name(f".{path.stem}.tmp.png")
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    tmp.replace(path)
