"""Exact strings of the quantity task, quoted verbatim from the paper.

Source: "Positions Are Not Facts", appendix "Exact source and
response examples" (paper lines 3766-3815, spec partC section 1.2). Strings the
paper does not give are marked UNCLEAR and are parameters of the generator.
"""

# Common system instruction (paper L3775-3781).
SYSTEM = (
    "Use the ordered authoritative records, each valid at its stated reference time. "
    "A later entry changes only the entity and attribute it concerns. For a historical question, "
    "report the value at the requested reference time. Return exactly one JSON string field: "
    '{"answer": "complete queried value"}. Quantities must include their measurement unit. '
    "Do not convert units. If the requested value cannot be determined, return "
    '{"answer": "UNKNOWN"}.'
)

# Record A (paper L3784-3785).
RECORD_A = (
    "Reference time T1. Certified specification for {entity}: {attribute} = {old_num} {unit}. "
    "This is its single approved value at T1."
)

# Record B, B states the complete quantity (paper L3796-3797).
RECORD_B_UNIT_STATED = (
    "Reference time T2, after T1. The certified {attribute} of {entity} is {new_num} {unit}. "
    "This entry is effective at T2."
)

# Record B, B refers to A for its unit (paper L3810-3812).
RECORD_B_UNIT_FROM_A = (
    "Reference time T2, after T1. The certified {attribute} of {entity} is {new_num}. "
    "The measurement unit is the same as in record A at T1. This entry is effective at T2."
)

# Inspection record (paper L3788).
INSPECTION_RECORD = "The inspection label on {envelope} is {color}."

# Neutral note: six repetitions (paper L3771-3772).
NOTE_SENTENCE = "A square seal is printed beside a blank signature box. The cover is gray and the folder is closed."
NOTE_REPETITIONS = 6

# Current question (paper L3789-3790).
CURRENT_QUESTION = "At T2, what is the current {attribute} of {entity}? Return the complete quantity including its unit."

# Unrelated question (paper L3800-3801).
UNRELATED_QUESTION = "What is the inspection label on {envelope}? Return only the label in the answer field."

# Chat-template date (seed L3566-3567, app:v23_units_signals: "the date argument, where supported, is
# 16 Sep 2026"; L3402, app:v18_unified: "the template date is fixed to 16 September 2026"; L3983-3984,
# app:v33_models: the eight generators share "the prompt text and fixed template date"). Passed as the
# template's ``date_string`` by ``kvprobe.studies.common.chat_template``; templates without it ignore it.
TEMPLATE_DATE = "16 Sep 2026"

# Phrases of the capped-output diagnostics (seed L4434-4436, the Gemma capped outputs: "Every capped output
# contains ``Wait'', ``re-read'' or ``misread'', and most also state that a referent is missing"; the table
# note, L4455-4457: "The re-check phrase is ``Wait'', ``re-read'' or ``misread''; the missing-referent phrase
# includes wording such as ``not specified'', ``does not mention'' or ``missing''"). Read by
# ``grading.phrase_pattern``: a row's ``recheck_phrase`` / ``missing_referent_phrase`` is true when its output
# holds one of them as whole words.
RECHECK_PHRASES = ("Wait", "re-read", "misread")  # L4455-4456, also L4434
# UNCLEAR: "such as" leaves the list open; we match exactly these three (docs/fidelity.md).
MISSING_REFERENT_PHRASES = ("not specified", "does not mention", "missing")  # L4456-4457
# UNCLEAR: the paper does not say whether case matters ("Wait" is quoted capitalized, the others in lower
# case); ours: case-insensitive, whole words, the hyphen of "re-read" required (docs/fidelity.md).
PHRASES_CASE_SENSITIVE = False


def neutral_note(sentence: str = NOTE_SENTENCE, repetitions: int = NOTE_REPETITIONS) -> str:
    """The neutral note: ``repetitions`` copies of ``sentence`` joined by single spaces.

    UNCLEAR: the paper does not state the joiner between repetitions; a single
    space matches its quoted 31-token window (L3804-3806).
    """
    return " ".join([sentence] * repetitions)


#: Every string above as the paper prints it (the templates filled with the paper's own examples,
#: L3784-3812); tests/test_paper_strings.py compares each with the seed text.
PAPER_STRINGS = {
    "SYSTEM": SYSTEM,
    "RECORD_A": RECORD_A.format(entity="Assembly-TEST-011", attribute="inspection interval", old_num="233",
                                unit="hours"),
    "RECORD_B_UNIT_STATED": RECORD_B_UNIT_STATED.format(attribute="cycle duration", entity="Assembly-TEST-000",
                                                        new_num="628", unit="minutes"),
    "RECORD_B_UNIT_FROM_A": RECORD_B_UNIT_FROM_A.format(attribute="cycle duration", entity="Assembly-TEST-000",
                                                        new_num="628"),
    "INSPECTION_RECORD": INSPECTION_RECORD.format(envelope="Envelope-TEST-011", color="ochre"),
    "NOTE_SENTENCE": NOTE_SENTENCE,
    "CURRENT_QUESTION": CURRENT_QUESTION.format(attribute="inspection interval", entity="Assembly-TEST-011"),
    "UNRELATED_QUESTION": UNRELATED_QUESTION.format(envelope="Envelope-TEST-000"),
    "TEMPLATE_DATE": TEMPLATE_DATE,
    **{f"RECHECK_PHRASES[{i}]": p for i, p in enumerate(RECHECK_PHRASES)},
    **{f"MISSING_REFERENT_PHRASES[{i}]": p for i, p in enumerate(MISSING_REFERENT_PHRASES)},
}
