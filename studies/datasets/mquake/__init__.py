"""MQuAKE data shared by the studies that build on it (mquake, factconsolidation): the released schema
and its loader (``schema``), the relation templates (``templates``) and the fictional case generator
(``generate``)."""
