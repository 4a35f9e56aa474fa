"""Repeated-request cost workload (paper partE E6-E7): one update, ten requests, five policies, timed.

Modules: ``data`` (histories, background lines, the ten questions), ``detector``
(replaceable detectors), ``conditions`` (the policies' decision table), ``serving`` (timed encode and
request primitives), ``sequence`` (one case: cold start, every condition, checks),
``study`` (``RequestsStudy``, its timings side log), ``summary`` (``summarize``, ``format_report``).
"""
