"""Exact strings of the contextual MQuAKE study, in one place.

Paper strings: "Positions Are Not Facts", Appendix "Repeated Updates
and Contextual Multi-Hop Questions" (label app:v41_stream), paragraph "MQuAKE
contextual updates" (paper line 1380; spec partA section 1b). Relation templates: princeton-nlp/MQuAKE @
fb43dadc2d8c, ``prompts/templates/cloze_templates.json`` and
``question_templates.json`` (MIT), read at run time from the mquake data set (kvprobe data) for
the relations the generator uses. Everything else is ours and marked UNCLEAR.
"""

import re

# Historical question prefix, verbatim (paper appendix "Repeated Updates and Contextual
# Multi-Hop Questions", paragraph "MQuAKE contextual updates", L1380: 'the first, prefixed with ``According to earlier records, before
# updates:''').
HISTORICAL_PREFIX = "According to earlier records, before updates:"
# The no-context baseline's anchors, verbatim (paper appendix "A no-context baseline for historical
# questions", label app:v52_weights, L4555-4558): rates on the historical-wording cases the no-context
# model answers wrongly, the range over the paper's three models. ``\\%`` is the paper's ``\%``.
NO_CONTEXT_FINDING = ("Among historical-wording cases that the no-context model answers incorrectly, full access "
                      "answers 84.7--97.4\\% correctly across the three models, source masking 71.8--79.8\\%, value "
                      "masking 73.2--80.7\\%, and text recomputation 31.6--57.3\\%.")
#: Our policy name -> the paper's range (percent) in :data:`NO_CONTEXT_FINDING`, in the order it names them.
NO_CONTEXT_ANCHORS = dict(zip(("full", "source-mask", "value-mask", "recompute"),
                              ("-".join(pair) for pair in re.findall(r"(\d+\.\d)--(\d+\.\d)", NO_CONTEXT_FINDING))))

# UNCLEAR (paper, spec partA 1b "joiner UNCLEAR"): between prefix and question; we use one space.
HISTORICAL_JOINER = " "

# The boxed-answer instruction and its joiner, shared with MINTEval (studies/common/answers.py, paper L1409).
from kvprobe.studies.common.answers import BOXED_INSTRUCTION, QUESTION_JOINER  # noqa: E402,F401 (re-exported)

# UNCLEAR (paper, spec partA 1b "record wording UNCLEAR"): history record wording.
# A fact sentence is the MQuAKE cloze statement completed with its object and a period
# (``fact_sentence``); earlier records and remaining links are bare fact sentences and a
# later update record carries this prefix.
OLD_RECORD = "{fact}"
LINK_RECORD = "{fact}"
UPDATE_RECORD = "Update: {fact}"
# UNCLEAR (paper): joiner between history segments in the rendered text.
SEGMENT_JOINER = "\n"

# The MQuAKE relation templates and the generator's phrases (shared with FactConsolidation).
from kvprobe.studies.datasets.mquake.templates import (  # noqa: E402,F401 (re-exported)
    NOUN_PHRASES, RELATION_LABELS, RELATIONS, THIRD_PARAPHRASE, TYPE_QUESTION, cloze, cloze_template,
    fact_sentence, question_template, rewrite_prompt, single_hop_question)

#: Every string above quoted from the paper (checked against the seed by tests/test_paper_strings.py).
PAPER_STRINGS = {"HISTORICAL_PREFIX": HISTORICAL_PREFIX, "NO_CONTEXT_FINDING": NO_CONTEXT_FINDING}
