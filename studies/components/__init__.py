"""The component-intervention study (paper appendix "Component Interventions and Accuracy
Preservation", L5694-5760; spec partD section 7): controlled history clusters
(``clusters``), exact strings (``strings``), the study (``study``) and its summary
(``summary``)."""

from .data import FAMILIES, QUERIES, STATES, Cluster, generate_clusters, prompt, rendered_text

__all__ = ["FAMILIES", "QUERIES", "STATES", "Cluster", "generate_clusters", "prompt", "rendered_text"]
