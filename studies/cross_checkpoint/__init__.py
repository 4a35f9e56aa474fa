"""Cross-checkpoint cache reading (paper appendix "Reading a Cache Written by Another Checkpoint", spec E8).

A *writer* checkpoint prefills a history; a *reader* checkpoint (a sibling with
the same architecture and vocabulary) appends the question to a copy of that
cache and decodes greedily with its own weights, stopping on the union of both
checkpoints' EOS sets. The writer's cache is asserted unchanged after every case.

Modules:

* ``reading``: the mechanism (:func:`reading.cross_read`, :func:`reading.read_caches`),
  the first-token check against a plain uncached forward, the no-op / intervention
  check against a plain transformers forward on the writer's cache, and answer
  comparison helpers (Changed, Invalid).
* ``checks``: :func:`checks.check_compatible` (token ids, segment boundaries, mask
  spans, architecture shapes) with errors naming the mismatch.
* ``similarity``: per-layer K/V cosine and relative L2 between two caches.
* ``siblings``: sibling checkpoints: in-process (seeded weight noise, bf16 rounding,
  int8 fake quantization) and real Hub pairs (:func:`siblings.hub_pair`).
* ``study``: :class:`study.CrossCheckpointStudy` for ``studies.common.runner.run_study``.
* ``summary``: ``summarize`` and ``format_report`` (``common.summary.write_summary("cross-checkpoint", run_dir)``
  -> ``summary.json``, ``report.md``).
* ``transfer``: joint-K/V readout trained on the sibling, tested on the main model.
"""
