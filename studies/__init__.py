"""kvprobe.studies: the paper's experiments on one study protocol.

``protocol`` (the run loop every study shares), ``runner`` (resumable runs into a directory),
``registry`` (the studies ``kvprobe run`` knows), and one package per study with its data,
conditions, summary and report (see docs/adding-a-study.md).
"""
