"""Detection versus action: text detectors, calibration, coverage curves."""
