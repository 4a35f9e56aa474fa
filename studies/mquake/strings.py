"""Exact strings of the contextual MQuAKE study, in one place.

Paper strings: "Positions Are Not Facts" (../shared/seed), Appendix "Repeated Updates
and Contextual Multi-Hop Questions" (label app:v41_stream), paragraph "MQuAKE
contextual updates" (paper line 1380; spec partA section 1b). Relation templates: princeton-nlp/MQuAKE @
fb43dadc2d8c, ``prompts/templates/cloze_templates.json`` and
``question_templates.json`` (MIT), read at run time from ../shared/data/mquake for
the relations the generator uses. Everything else is ours and marked UNCLEAR.
"""

# Historical question prefix, verbatim (paper appendix "Repeated Updates and Contextual
# Multi-Hop Questions", paragraph "MQuAKE contextual updates", L1380: 'the first, prefixed with ``According to earlier records, before
# updates:''').
HISTORICAL_PREFIX = "According to earlier records, before updates:"
# UNCLEAR (paper, spec partA 1b "joiner UNCLEAR"): between prefix and question; we use one space.
HISTORICAL_JOINER = " "

# The boxed-answer instruction and its joiner, shared with MINTEval (studies/answers.py, paper L1409).
from kvprobe.studies.answers import BOXED_INSTRUCTION, QUESTION_JOINER  # noqa: E402,F401 (re-exported)

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
from kvprobe.studies.mquake_data.templates import (  # noqa: E402,F401 (re-exported)
    NOUN_PHRASES, RELATION_LABELS, RELATIONS, TEMPLATE_DIR, THIRD_PARAPHRASE, TYPE_QUESTION, cloze, cloze_template,
    fact_sentence, question_template, rewrite_prompt, single_hop_question)
