"""kvprobe.interventions: placeholder package; see README architecture."""
