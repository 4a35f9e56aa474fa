"""``kvprobe bench operations``: what each cache operation costs, on real long histories.

Histories of ``lengths`` tokens are PG-19 filler text (one public-domain book,
read from the ``pg19`` data set (``kvprobe data``)) with the quantity task's record A placed at
the paper's five positions (10, 30, 50, 70 and 90 % of the history; seed L6414-6416) and record B at the end. For each
(length, position) cell and each operation we time, separately,

* the operation: building the condition's row state from the prefilled history
  (``Condition.prepare``: nothing for full access, a hidden vector for mask, copies and
  rotations for zero-kv/drop/compact, recomputation for rebuild and recompute);
* the first answer token after it: forking the cache, prefilling the question
  under the condition and computing the first token's logits.

The operations are the registered conditions that name this benchmark
(``benches`` in :data:`kvprobe.interventions.CONDITIONS`), each built from its example on
record A. Warm-ups are discarded and the median of the repeats is reported, with each
operation's ratio to masking and the KV bytes it holds and frees. The paper's
protocol is 3 warm-ups and a median of 9 (partE E5); on a 2-core CPU the
longest histories use fewer repeats (``--repeats-long``), recorded per cell.

Across the cells, the summary gives the paper's two statements: how many cells have the mask's median
above keeping the cache (``full``), with the exact two-sided sign test (ties dropped; the paper: 18 of
20, p = 0.0004), and the range of the stored-prefix recompute's ratio to the mask (the paper: 2.17-52.89x).
On CUDA every timing is synchronised and each operation's peak device allocation (one extra run of the
operation and its first token, above what was in use before) is recorded; elsewhere the run's peak RSS.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

import kvprobe
from kvprobe.decoding import question_logits
from kvprobe.files import atomic_write_text
from kvprobe.interventions.registry import CONDITIONS, covered_by, parse_condition

from kvprobe.readouts.stats import sign_test

from .measure import device_peak_bytes, median_time, peak_rss_bytes, weight_bytes
from .registry import parse_counts

RECORD_A = ("Reference time T1. Certified specification for Assembly-TEST-000: cycle duration = 159 minutes. "
            "This is its single approved value at T1.")
RECORD_B = ("Reference time T2, after T1. The certified cycle duration of Assembly-TEST-000 is 628. "
            "The measurement unit is the same as in record A at T1. This entry is effective at T2.")
QUESTION = "At T2, what is the current cycle duration of Assembly-TEST-000? Return the complete quantity including its unit."

#: The operations this benchmark times, in registry order (record A is their example segment).
OPERATIONS = covered_by("operations")


def find_book(data_dir: Path | str | None = None) -> Path:
    """The PG-19 book the histories are cut from: the first ``*.txt`` under ``data_dir/pg19``, or by default
    the ``pg19`` data set (:mod:`kvprobe.data`; a missing set names ``kvprobe data pull pg19``)."""
    if data_dir is None:
        from kvprobe.studies.datasets.filler import pg19_books

        return pg19_books()[0]
    folder = Path(data_dir) / "pg19"
    books = sorted(folder.glob("*.txt"))
    if not books:
        raise FileNotFoundError(f"no PG-19 text (*.txt) under {folder} (set --data to the folder holding pg19/)")
    return books[0]


def book_tokens(model: kvprobe.Model, data_dir: Path | str | None) -> list[int]:
    """Token ids of the PG-19 book: the first ``*.txt`` under ``data_dir/pg19``, or by default the ``pg19`` data
    set (:mod:`kvprobe.data`)."""
    return model.tokenizer(find_book(data_dir).read_text(encoding="utf-8"), add_special_tokens=False)["input_ids"]


def build_history(model: kvprobe.Model, book: list[int], length: int, fraction: float) -> kvprobe.History:
    """A chat history of about ``length`` tokens: filler, record A at ``fraction``, filler, record B."""
    overhead = len(model.tokenizer(RECORD_A + RECORD_B, add_special_tokens=False)["input_ids"]) + 40
    filler = max(length - overhead, 2)
    pre_n = int(filler * fraction)
    pre = model.tokenizer.decode(book[:pre_n]).strip() or "."
    post = model.tokenizer.decode(book[pre_n:filler]).strip() or "."
    prompt = kvprobe.Prompt([("pre", pre), ("A", RECORD_A), ("post", post), ("B", RECORD_B)],
                            system="Answer from the records.")
    return model.prefill(prompt)


def first_token(model: kvprobe.Model, history: kvprobe.History, state) -> int:
    """Fork the state, prefill the question, return the first answer token."""
    out = question_logits(model, history, QUESTION, [kvprobe.Prepared(state, "op")], logits_to_keep=1)
    return int(out.logits[0, -1].argmax())


def run_operations_bench(
    model: kvprobe.Model,
    out_dir: Path,
    data_dir: Path | str | None,
    lengths: tuple[int, ...] = (512, 1024, 2048, 4096, 8192),
    fractions: tuple[float, ...] = (0.1, 0.3, 0.5, 0.7, 0.9),
    warmups: int = 3,
    repeats: int = 9,
    long_from: int = 4096,
    warmups_long: int = 1,
    repeats_long: int = 3,
    progress: bool = True,
) -> dict[str, Any]:
    """Run the grid and write ``operations.json``, ``operations.md`` and ``operations.png`` (the JSON and markdown
    after every cell too, so a run stopped early keeps the cells it finished)."""
    book = book_tokens(model, data_dir)
    cells: list[dict[str, Any]] = []
    for length in lengths:
        w, r = (warmups_long, repeats_long) if length >= long_from else (warmups, repeats)
        for fraction in fractions:
            history = build_history(model, book, length, fraction)
            full_bytes = history.base_state().kv_bytes()
            cell = {"target_length": length, "history_tokens": len(history), "fraction": fraction,
                    "span": [history.span("A").start, history.span("A").end], "warmups": w, "repeats": r,
                    "operations": {}}
            for name in OPERATIONS:
                op = parse_condition(CONDITIONS[name].spec(name), history)
                op_s, state = median_time(lambda: op.prepare(model, history, QUESTION), w, r, model.device)
                tok_s, token = median_time(lambda: first_token(model, history, state), w, r, model.device)
                held = state.kv_bytes()
                cell["operations"][name] = {"op_ms": 1e3 * op_s, "first_token_ms": 1e3 * tok_s,
                                            "total_ms": 1e3 * (op_s + tok_s), "kv_bytes_held": held,
                                            "kv_bytes_freed": full_bytes - held, "first_token": token}
                if model.device.type == "cuda":
                    del state
                    cell["operations"][name]["device_peak_bytes"] = device_peak_bytes(
                        lambda: first_token(model, history, op.prepare(model, history, QUESTION)), model.device)
                if progress:
                    print(f"  T={len(history):5d} A@{fraction:.0%} {name:<17} op {1e3 * op_s:9.2f} ms  "
                          f"first token {1e3 * tok_s:8.1f} ms", flush=True)
            mask_total = cell["operations"]["mask"]["total_ms"]
            for entry in cell["operations"].values():
                entry["total_over_mask"] = entry["total_ms"] / mask_total
            cells.append(cell)
            if not history.check_digest():
                raise RuntimeError("an operation changed the shared history cache")
            _write(model, out_dir, cells, figure=False)
    return _write(model, out_dir, cells, figure=True)


def _write(model: kvprobe.Model, out_dir: Path, cells: list[dict[str, Any]], figure: bool) -> dict[str, Any]:
    """The result of the cells so far, written to ``operations.json`` and ``operations.md`` (and the figure)."""
    result = {
        "model": model.name,
        "dtype": str(model.dtype),
        "device": str(model.device),
        "device_name": torch.cuda.get_device_name(model.device) if model.device.type == "cuda" else "CPU",
        "threads": torch.get_num_threads(),
        "peak_rss_bytes": peak_rss_bytes(),
        "weight_bytes": weight_bytes(model),
        "summary": summarize(cells),
        "cells": cells,
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "operations.json", json.dumps(result, indent=2) + "\n")
    atomic_write_text(out_dir / "operations.md", format_markdown(result))
    if figure:
        plot(result, out_dir / "operations.png")
    return result


def summarize(cells: list[dict[str, Any]]) -> dict[str, Any]:
    """The paper's two statements over the cells: the mask's median total above keeping the cache (count,
    ties, exact two-sided sign test) and each operation's min/max ratio to the mask.

    Example:
        >>> cell = lambda full, mask: {"operations": {"full": {"total_ms": full, "total_over_mask": full / mask},
        ...                                          "mask": {"total_ms": mask, "total_over_mask": 1.0}}}
        >>> s = summarize([cell(1.0, 2.0)] * 18 + [cell(2.0, 1.0)] * 2)
        >>> s["mask_above_full"], s["mask_below_full"], round(s["sign_test_p"], 4)
        (18, 2, 0.0004)
    """
    pairs = [(c["operations"]["mask"]["total_ms"], c["operations"]["full"]["total_ms"]) for c in cells
             if "full" in c["operations"] and "mask" in c["operations"]]
    above = sum(m > f for m, f in pairs)
    below = sum(m < f for m, f in pairs)
    ratios = {name: [c["operations"][name]["total_over_mask"] for c in cells]
              for name in cells[0]["operations"]} if cells else {}
    return {"cells": len(pairs), "mask_above_full": above, "mask_below_full": below,
            "ties": len(pairs) - above - below, "sign_test_p": sign_test(above, below),
            "ratio_to_mask": {name: {"min": min(v), "max": max(v)} for name, v in ratios.items()}}


def format_markdown(result: dict[str, Any]) -> str:
    """Per (length, position): total time (operation + first token) and its ratio to the mask (the operations
    the result holds, in its order)."""
    names = list(result["cells"][0]["operations"])
    lines = [
        f"# Cache-operation cost: {result['model']} ({result['dtype']}, "
        f"{result.get('device_name', 'CPU')}, {result['threads']} threads)",
        "",
        "Total = operation + first answer token, median ms (ratio to mask). "
        "Operation time alone and KV bytes are in operations.json.",
        "",
        "| tokens | A at | reps | " + " | ".join(names) + " |",
        "|---|---|---|" + "---|" * len(names),
    ]
    for c in result["cells"]:
        ops = c["operations"]
        row = [f"{ops[n]['total_ms']:.0f} ({ops[n]['total_over_mask']:.2f}x)" for n in names]
        lines.append(f"| {c['history_tokens']} | {c['fraction']:.0%} | {c['warmups']}+{c['repeats']} | "
                     + " | ".join(row) + " |")
    lines += ["", "KV bytes freed (MiB) at the longest history, A at 50 %:", ""]
    longest = [c for c in result["cells"] if c["target_length"] == max(x["target_length"] for x in result["cells"])]
    mid = min(longest, key=lambda c: abs(c["fraction"] - 0.5))
    lines.append("| " + " | ".join(names) + " |")
    lines.append("|" + "---|" * len(names))
    lines.append("| " + " | ".join(f"{mid['operations'][n]['kv_bytes_freed'] / 2**20:.2f}" for n in names) + " |")
    mb = 2**20
    if "device_peak_bytes" in mid["operations"][names[0]]:
        lines += ["", "Peak device allocation (MiB, above the weights and the prefilled history) of one operation "
                  "and its first token, same cell:", "", "| " + " | ".join(names) + " |", "|" + "---|" * len(names),
                  "| " + " | ".join(f"{mid['operations'][n]['device_peak_bytes'] / mb:.1f}" for n in names) + " |"]
    if "summary" in result:
        s = result["summary"]
        lines += ["", f"Mask above keeping the cache (full) in {s['mask_above_full']} of {s['cells']} cells "
                  f"({s['mask_below_full']} below, {s['ties']} tied; exact two-sided sign test p = "
                  f"{s['sign_test_p']:.4f}). Ratio to the mask over the cells, min-max: "
                  + ", ".join(f"{n} {r['min']:.2f}-{r['max']:.2f}x" for n, r in s["ratio_to_mask"].items()
                              if n != "mask") + "."]
    lines += ["", f"Peak RSS {result['peak_rss_bytes'] / mb:.0f} MiB; weights {result['weight_bytes'] / mb:.0f} MiB.", ""]
    return "\n".join(lines)


def plot(result: dict[str, Any], path: Path) -> None:
    """Total time vs history length per operation (A at 50 %), log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mids = {}
    for c in result["cells"]:
        if abs(c["fraction"] - 0.5) < 1e-9:
            mids[c["history_tokens"]] = c["operations"]
    xs = sorted(mids)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in result["cells"][0]["operations"]:
        ax.plot(xs, [mids[x][name]["total_ms"] for x in xs], marker="o", label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("history tokens (record A at 50 %)")
    ax.set_ylabel("operation + first answer token (ms, median)")
    ax.set_title(f"Cache-operation cost, {result['model']}, {result.get('device_name', 'CPU')}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    tmp = path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    tmp.replace(path)


def command(args, load) -> dict[str, Any]:
    """``kvprobe bench operations``: ``--warmups``/``--repeats`` not given keep :func:`run_operations_bench`'s
    counts (fewer from 4096 tokens); given, they apply to every length."""
    # given counts hold for every length (the reduced long-history defaults are for a CPU)
    given = {"warmups": args.warmups, "repeats": args.repeats, "warmups_long": args.warmups,
             "repeats_long": args.repeats}
    return run_operations_bench(load(), Path(args.out), args.data, lengths=parse_counts(args.lengths, "--lengths"),
                                fractions=tuple(float(x) for x in args.fractions.split(",")),
                                **{k: v for k, v in given.items() if v is not None})
