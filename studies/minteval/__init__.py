"""MINTEval state tracking (paper app:v41_stream, "MINTEval state tracking"; spec partA sections 1, 1a).

``schema`` (the released sessions as inferred, loader with named errors), ``rules`` (source
rule, value spans, online pairs: functions of the events only), ``stories`` / ``state`` /
``questions`` / ``generate`` (sessions in that schema from the bAbI test stories),
``components`` (bootstrap units: sessions sharing a bAbI source story), ``strings``,
``study`` (the five policies), ``summary``, ``grading`` (optional LLM judge).
"""
