"""Exact strings of the quantity and endpoint factorial, quoted verbatim from the paper.

Source: "Positions Are Not Facts", appendix
"Varying Source Information, Mask Scope, and Answer Requirements" (app:v17_scope, seed
L4737-4897) and the matched-score experiment it builds on (app:v7_bridge, seed L5574-5577).
``PAPER_STRINGS`` lists every quoted string (``tests/test_paper_strings.py`` checks each one
against the seed). Strings the paper does not give are marked UNCLEAR and are our choice.

The record histories themselves (header, Time 1 / Other record / Time 2 labels, system
instruction, question wording) are those of :mod:`kvprobe.studies.common.detectors.strings`.
"""

# Seed L4769-4771 ("Source information and mask positions"): the B-refers-to-A condition removes every
# "hours" from B and prepends this sentence.
REFERS_TO_A = "Use the same measurement unit as the Time 1 entry."
#: The unit word removed from B in the B-refers-to-A condition (seed L4769-4770: "we remove all
#: occurrences of hours from B").
REMOVED_UNIT = "hours"

# Seed L4776-4778: the complete-answer question appends this to the current question.
COMPLETE_QUANTITY = ("Return the complete queried value, including its measurement unit, in the answer string. "
                     "Preserve the unit established by the records.")

# UNCLEAR (paper, seed L4861-4862: "the complete question requests all slashes and path segments"; the
# wording is not given). Ours mirrors the quantity wording.
COMPLETE_ENDPOINT = ("Return the complete queried endpoint, including all slashes and path segments, in the answer "
                     "string. Preserve the endpoint established by the records.")

# The two neutral notes (notebook, shelf), their 16 repetitions and the chat template date are the record
# histories' own strings: kvprobe.studies.common.detectors.strings (NOTE_SENTENCES, NOTE_REPEATS, TEMPLATE_DATE).

#: Every string above that the paper prints, as it prints it.
PAPER_STRINGS: dict[str, str] = {
    "REFERS_TO_A": REFERS_TO_A,
    "COMPLETE_QUANTITY": COMPLETE_QUANTITY,
}
