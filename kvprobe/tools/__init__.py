"""kvprobe's tools: what measures and proves the library, apart from the library itself.

``kvprobe.tools.verify``
    ``kvprobe verify`` and ``kvprobe matrix``: the access checks (a)-(i) (``access``), one or two checks
    per cache operation against an independent reference (``operations``), and the family x operation
    table (``matrix``). Layer: above ``kvprobe.interventions`` (it checks the operations), below the
    studies; the references it compares against are ``kvprobe.reference`` (core: studies and tests use
    them too).
``kvprobe.tools.bench``
    ``kvprobe bench``: one registry of benchmarks (``registry.BENCHES``: name -> options, run, report),
    one timing/interleave helper and one peak-memory helper (``measure``), one module per benchmark.
    Layer: the top, beside the CLI (the scale and extract benchmarks run studies); only the CLI loads
    it, on demand.

Nothing in ``kvprobe``'s core, ``interventions``, ``extract``, ``readouts`` or ``studies`` imports this
package (``tests/test_layering.py``), so ``import kvprobe.interventions`` loads no verifier.
"""
