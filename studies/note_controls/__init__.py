"""The note-control study (``kvprobe run note-controls``): which note tokens, prompt wording and note content make an
equal-token control abstain (paper app:v24_control_factors and app:v41_controls; spec partD 1d and 2)."""
