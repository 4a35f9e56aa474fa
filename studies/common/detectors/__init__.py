"""Replacement detectors on record pairs, shared by the detection, records, query-aware and requests studies.

``text`` (the paper's JSON classifiers, their decision rules and the YES/NO score), ``strings``
(their verbatim prompts and the record-history task's strings), ``coverage`` (coverage curves:
expected net corrections when acting on the top-ranked cases) and ``readout_scores`` (a
``kvprobe readout`` run's scores as detector scores).
"""
