"""``kvprobe bench``: every benchmark, built from one registry (:data:`registry.BENCHES`).

=============  =============================================================  ==============================
name           what it measures                                               writes (under ``--out``)
=============  =============================================================  ==============================
``core``       traced mask path vs plain forward, batching, fast paths         core.json, core.md
``operations`` every cache operation + first answer token on PG-19 histories   operations.json/.md/.png
``extract``    extraction vs a plain forward, store bytes per case             extract.json, extract.md
``scale``      a study (or an extraction) on 1 vs 2 Ray workers vs local      scale.json, scale.md
``long``       kvprobe beside plain transformers on long histories (resumable) long.json/.md/.png
``gpu``        the same on an accelerator                                      gpu.json, gpu.md
=============  =============================================================  ==============================

:mod:`.measure` is how all of them time (warm-ups, interleaved runs, medians) and measure peak memory.
"""
