"""The quantity study (paper section 3): rows, summary, threshold, figure and a one-history demo.

The task itself (generator, exact strings, answer rules) is the shared :mod:`kvprobe.studies.datasets.quantity_task`.
"""
