"""kvprobe.readouts: placeholder package; see README architecture."""
