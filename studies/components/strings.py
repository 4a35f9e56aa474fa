"""Exact strings of the component-intervention study, in one place.

Paper: "Positions Are Not Facts", appendix
"Runtime" (L1293-1301: the raw prompt of the controlled-history and component
experiments), appendix "Controlled Histories and Paired Analysis" (L1770-1795) and
appendix "Component Interventions and Accuracy Preservation" (L5694-5760); spec
partD section 7. The four prompt pieces below are quoted verbatim from L1293-1301;
everything else (record, note and query wording) is not published and is ours,
marked UNCLEAR.

The rendered prompt of one (history, query) is exactly::

    HISTORY_OPEN + history + QUESTION_OPEN + query + REASONING_OPEN
    + <N greedy tokens> + ANSWER_CUE + <option>

where ``history`` is the records joined by ``RECORD_JOINER``.
"""

# --- Verbatim (paper L1293-1301) -------------------------------------------------------------
# "the raw prefix is the exact concatenation of History:\n, the history, \nQuestion:\n, the
# query, and \nReasoning:\n. The model appends exactly 8, 32, or 128 greedy continuation
# tokens without EOS stopping, followed by \nAnswer:\n; the two options are then scored by
# unnormalized teacher-forced log-probability sum. The full prompt uses the tokenizer's
# special tokens, while the answer cue and options do not."
HISTORY_OPEN = "History:\n"
QUESTION_OPEN = "\nQuestion:\n"
REASONING_OPEN = "\nReasoning:\n"
ANSWER_CUE = "\nAnswer:\n"
#: Continuation budgets the paper names (L1296). UNCLEAR which one the component table used
#: (14,400 outcomes per model imply exactly one); the study takes the budget as a parameter.
BUDGETS = (8, 32, 128)

# --- UNCLEAR (ours) ---------------------------------------------------------------------------
# UNCLEAR: joiner between the records of a history (the paper says only "the history").
# It must equal the last character of HISTORY_OPEN: the history header is a segment of its
# own ("History:") followed by the segment separator (see clusters.prompt).
RECORD_JOINER = "\n"
assert HISTORY_OPEN == "History:" + RECORD_JOINER

# UNCLEAR: record wording. "Statements share entity and attribute phrases within each family"
# (L1776): the old record, the other entity's record and the later continuation use one frame
# and differ only in the label, the entity and the value. The continuation ("later
# statement") repeats the old value (CURRENT) or replaces it (SUPERSEDED).
OLD_RECORD = "Record: the {attribute} of {entity} is {value}."
OTHER_RECORD = "Record: the {attribute} of {entity} is {value}."
LATER_RECORD = "Later record: the {attribute} of {entity} is {value}."

# UNCLEAR: query wording. The two options are named in the query, in a counterbalanced order
# ("Answer order ... counterbalanced", L1777); the target and unrelated queries share the frame.
QUERY = "What is the {attribute} of {entity} now: {first} or {second}?"

# UNCLEAR: the neutral note whose first tokens form the matched span (spec partD section 0:
# "a neutral span that is disjoint from A and B and comes before the question"). Each note is
# two of these sentences (joined by one space), drawn per cluster; every note is longer in
# tokens than any old record, so an equal-token matched span always fits.
NOTE_SENTENCES = (
    "A square seal is printed beside a blank signature box.",
    "The cover is gray and the folder is closed.",
    "A paper clip holds the margin of the second page in place.",
    "The binder has a blue spine and a plain white label.",
    "A folded sheet lies under the stapler on the shelf.",
    "The envelope is sealed and its flap is slightly creased.",
    "A pencil mark is visible near the lower edge of the form.",
    "The archive box is stacked beside two empty trays.",
)
NOTE_JOINER = " "
