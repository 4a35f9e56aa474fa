"""``kvprobe bench extract``: extraction throughput against a plain forward, and store bytes per case.

Measured side by side in one run, batch by batch and interleaved (this machine
is noisy): for the same padded batches of records, (a) ``extract.capture.encode``
(one traced forward capturing every layer's hidden states, then copying out
every layer's K and V from the cache) and (b) a plain transformers forward
over the same batch with a 2-D padding mask and no capture. Medians of the
per-batch ratio and total tokens per second. Then the same records written to
a store: bytes per case on disk (gzip) and raw feature bytes. Peak resident
memory against weight bytes.

Writes ``<out>/extract.json`` and ``<out>/extract.md``.
"""

from __future__ import annotations

import json
import platform
import statistics
import tempfile
from pathlib import Path
from typing import Any, Sequence

import torch

from kvprobe.rows import pad_suffix_block
from kvprobe.files import atomic_write_text

from kvprobe.extract.capture import encode
from kvprobe.extract.pipeline import extract, records_of

from .measure import interleave, peak_rss_bytes, timed, weight_bytes


def _plain_forward(model, batch) -> None:
    seqs = []
    for spec in batch:
        _, ids, _ = model.tokenize(spec.prompt()[0])
        seqs.append(ids.tolist())
    ids, valid = pad_suffix_block(seqs, model.pad_id, model.device)
    with torch.inference_mode():
        model.hf(input_ids=ids, attention_mask=valid.long(), use_cache=True, logits_to_keep=1)


def run_extract_bench(model, cases: Sequence[Any], out_dir: Path, batch_size: int = 16,
                      repeats: int = 3) -> dict[str, Any]:
    """Time extraction vs plain forwards on ``cases``' records; write extract.json / extract.md."""
    specs, _ = records_of(cases)
    batches = [specs[i : i + batch_size] for i in range(0, len(specs), batch_size)]
    n_tokens = 0
    for spec in specs:
        n_tokens += int(model.tokenize(spec.prompt()[0])[1].shape[0])
    encode(model, batches[0])  # warm-up
    _plain_forward(model, batches[0])
    ratios, t_capture, t_plain = [], [], []
    for _ in range(repeats):
        cap_total = plain_total = 0.0
        for batch in batches:  # batch by batch, the capture first
            runs, _ = interleave({"capture": lambda: encode(model, batch), "plain": lambda: _plain_forward(model, batch)},
                                 0, 1, alternate=False)
            (cap,), (plain,) = runs["capture"]["seconds"], runs["plain"]["seconds"]
            cap_total += cap
            plain_total += plain
            ratios.append(cap / plain)
        t_capture.append(cap_total)
        t_plain.append(plain_total)
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "bench.h5"
        _, stats = timed(lambda: extract(model, "bench", cases, store, batch_size=batch_size, progress=False))
        t_store = stats["seconds"]
        disk = store.stat().st_size
    weights = weight_bytes(model)
    capture, plain = statistics.median(t_capture), statistics.median(t_plain)
    result = {
        "model": model.name,
        "records": len(specs),
        "cases": len(cases),
        "tokens": n_tokens,
        "batch_size": batch_size,
        "repeats": repeats,
        "capture_seconds": capture,
        "plain_seconds": plain,
        "capture_tokens_per_second": n_tokens / capture,
        "plain_tokens_per_second": n_tokens / plain,
        "time_ratio_total": capture / plain,
        "time_ratio_median_batch": statistics.median(ratios),
        "goal_ratio": 1.3,
        "store_seconds_end_to_end": t_store,
        "store_bytes": disk,
        "store_bytes_per_case": disk / len(cases),
        "weight_bytes": weights,
        "peak_rss_bytes": peak_rss_bytes(),
        "machine": {"cpus": torch.get_num_threads(), "processor": platform.processor() or platform.machine(),
                    "platform": platform.platform()},
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out_dir / "extract.json", json.dumps(result, indent=2) + "\n")
    atomic_write_text(out_dir / "extract.md", format_extract_markdown(result))
    return result


def format_extract_markdown(r: dict[str, Any]) -> str:
    mib = 2**20
    return "\n".join([
        f"# Extraction benchmark: {r['model']}",
        "",
        f"{r['records']} records ({r['tokens']} tokens, {r['cases']} cases), batches of {r['batch_size']}, "
        f"medians of {r['repeats']} interleaved repeats on {r['machine']['cpus']} threads "
        f"({r['machine']['processor']}).",
        "",
        "| | seconds | tokens/s |",
        "|---|---|---|",
        f"| plain forward (no capture) | {r['plain_seconds']:.2f} | {r['plain_tokens_per_second']:.0f} |",
        f"| extraction (all-layer K, V, hidden) | {r['capture_seconds']:.2f} | "
        f"{r['capture_tokens_per_second']:.0f} |",
        "",
        f"Extraction / plain forward: {r['time_ratio_total']:.2f}x in total, median batch "
        f"{r['time_ratio_median_batch']:.2f}x (goal <= {r['goal_ratio']}x).",
        f"Store written end to end (encode + shards + assembly) in {r['store_seconds_end_to_end']:.1f} s: "
        f"{r['store_bytes'] / mib:.1f} MiB, {r['store_bytes_per_case'] / 1024:.0f} KiB per case "
        "(float16, gzip; token-level K of every layer).",
        f"Peak resident memory {r['peak_rss_bytes'] / mib:.0f} MiB; weights {r['weight_bytes'] / mib:.0f} MiB.",
        "",
    ])


def command(args, load) -> dict[str, Any]:
    """``kvprobe bench extract``: the first ``--cases`` cases of the records dataset."""
    from kvprobe.studies.datasets.recognition import generate_records

    model = load()
    return run_extract_bench(model, generate_records()[: args.cases], Path(args.out), batch_size=args.batch_size)
