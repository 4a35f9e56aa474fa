"""kvprobe.extract: placeholder package; see README architecture."""
