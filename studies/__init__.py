"""kvprobe.studies: placeholder package; see README architecture."""
