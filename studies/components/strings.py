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
# The record joiner, record wording, query wording and neutral notes (each marked UNCLEAR where it
# is defined) are the controlled histories' own, shared with the native record-pair study; quoted
# here so this module's digest (``config.json``'s ``strings_sha256``) covers every string of the prompt.
from kvprobe.studies.datasets.controlled_histories import (  # noqa: E402,F401
    LATER_RECORD, NOTE_JOINER, NOTE_SENTENCES, OLD_RECORD, OTHER_RECORD, QUERY, RECORD_JOINER)

# The history header is a segment of its own ("History:") followed by the segment separator, so the
# record joiner must equal the last character of HISTORY_OPEN (see data.prompt).
assert HISTORY_OPEN == "History:" + RECORD_JOINER
