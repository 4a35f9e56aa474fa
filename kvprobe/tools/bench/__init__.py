"""``kvprobe bench SUITE``: every benchmark, one sub-command each, built from one registry (:data:`registry.BENCHES`).

=============  =============================================================  ==============================
name           what it measures                                               writes (under ``--out``)
=============  =============================================================  ==============================
``core``       traced mask path vs plain forward, batching, fast paths         core.json, core.md
``operations`` every cache operation + first answer token on PG-19 histories   operations.json/.md/.png
``extract``    extraction vs a plain forward, store bytes per case             extract.json, extract.md
``scale``      a study (or an extraction) on 1 vs 2 Ray workers vs local      scale.json, scale.md
``long``       kvprobe beside plain transformers on long histories (resumable) long.json/.md/.png
``internals``  run_with_cache and an empty trace beside score                 internals.json, internals.md
``latency``    the session-bias conditions one at a time, phase by phase      latency.json, latency.md
``gpu``        kvprobe beside plain transformers on an accelerator             gpu.json, gpu.md
=============  =============================================================  ==============================

:mod:`.measure` is how all of them time (warm-ups, interleaved runs, medians) and measure peak memory.
"""
