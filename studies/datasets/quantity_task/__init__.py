"""The quantity task (paper section 3), shared by the quantity, detection and cross-checkpoint studies.

``strings`` (the paper's exact strings), ``tasks`` (the 120 test and 18 development groups,
prompts, questions, conditions) and ``grading`` (the answer classification).
"""
