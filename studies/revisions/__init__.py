"""Revision histories (paper appendix "Answers to Questions about Wikipedia Revision Histories"; spec partE E9).

The schema and loader (``schema``), the PG-19 demonstration generator (``book``, ``generate``),
the changed-text diff (``diff``), history segments (``history``), grading (``grading``),
the study (``study``) and its summary (``summary``); exact strings in ``strings``.
"""
