"""Detection versus action: every detector on record pairs, calibration, action reports.

The detectors, their prompts and the coverage curves are the shared :mod:`kvprobe.studies.common.detectors`.
"""
