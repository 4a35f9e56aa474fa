"""Exact strings of the detector prompts and the record-history task, quoted verbatim from the paper.

Source: "Positions Are Not Facts";
the study spec (partB) section 4 and ``partD.md`` section 3. The three
classifier prompts are the paper's ``verbatim`` blocks byte for byte, line
breaks included (``tests/test_detection.py`` compares them with the paper
text). ``<OLD RECORD>`` and ``<LATER RECORD>`` are substituted verbatim.

Strings the paper does not give are marked UNCLEAR and are our choice.
"""

OLD_PLACEHOLDER = "<OLD RECORD>"
LATER_PLACEHOLDER = "<LATER RECORD>"

# Paper L2455-2469 (appendix "Exact Scores and Detector Prompts", paragraph "Direct relation classifier").
DIRECT = """\
You are a strict memory-update classifier.
Decide whether LATER_MEMORY supersedes OLD_MEMORY for the same
mutable state slot. A duplicate confirmation with the same
value is not a superseding invalidation. An unrelated later
note is not a superseding invalidation.

Return only JSON with this schema:
{"supersedes": true, "slot": "short slot name or null",
"old_value": "old value or null", "new_value": "new value or
null", "confidence": 0.0}

OLD_MEMORY:
<OLD RECORD>

LATER_MEMORY:
<LATER RECORD>"""

# Paper L2477-2511 (appendix "Exact Scores and Detector Prompts", paragraph "Expanded relation classifier").
EXPANDED = """\
You are a strict memory-update classifier.
Decide whether LATER_MEMORY supersedes OLD_MEMORY for the same
mutable state slot. Return supersedes=false when LATER_MEMORY
merely confirms, repeats, restates, or says the same value
remains true. Return supersedes=true only when LATER_MEMORY
changes the value for the same slot. Treat semantic slot
overwrites as changes: current value, active value, live
state, deadline, endpoint, preference, location, incident root
cause, or outage root cause can all supersede the old value
when they give a concrete new value. Example: if OLD_MEMORY
says the incident root cause was router firmware and
LATER_MEMORY says the incident field now points to cooling
failure as the active value, return supersedes=true. Also
return supersedes=true when LATER_MEMORY gives an active
choice for the present request, even if the old value is not
repeated. Phrases like choose X, use X, treat X as active, or
ignore stale assumptions and use X are concrete replacements.
Example: if OLD_MEMORY says the incident was caused by queue
saturation and LATER_MEMORY says for the present request
choose region failover, return supersedes=true with new_value
region failover. Return supersedes=false when LATER_MEMORY
only says review is pending, a follow-up is required, no
replacement value has been approved, or otherwise does not
provide a concrete new value. An unrelated later note is not a
superseding invalidation.

Return only JSON with this schema:
{"supersedes": true, "slot": "short slot name or null",
"old_value": "old value or null", "new_value": "new value or
null", "confidence": 0.0}

OLD_MEMORY:
<OLD RECORD>

LATER_MEMORY:
<LATER RECORD>"""

# Paper L2519-2536 (appendix "Exact Scores and Detector Prompts", paragraph "Asserted-value extraction").
ASSERTED_VALUE = """\
Read the two ordered authoritative records below. Extract the
value AFFIRMED for the old record's entity and attribute in
each record. A rejected, negated, hypothetical, or historical
mention is not an affirmed current value. Both candidates may
appear in both records and exchange their affirmed and
rejected roles. Compare the affirmed values, not their mere
occurrence. If B concerns a different entity or attribute,
same_slot is false and later_current is null. A confirmation
affirms the same value. A replacement affirms a different
value for the same slot. Do not use outside knowledge.
Return only JSON, with no explanation:
{"same_slot": true, "old_current": "value affirmed by A",
"later_current": "value affirmed by B, or null"}

Record A:
<OLD RECORD>

Record B:
<LATER RECORD>"""


# System message of the development experiment (paper L2448-2449).
SYSTEM_COMPACT = "Return only compact JSON. Do not include reasoning, markdown fences, or natural language."

# System message of all three classifiers on the synthetic record dataset (paper L2571-2572).
SYSTEM_RECORDS = "Return only the requested JSON. Do not include reasoning or markdown."

# Question-conditioned variant: text prepended to the asserted-value prompt (paper L2906-2909).
# UNCLEAR (paper): the whitespace joining the two sentences and the prompt; we use one space and a blank line.
QUESTION_CONDITIONED = ("The target entity/attribute is specified by this question: {question} "
                        "Extract the states relevant to that target.")

# The replacement detector scored by forced YES/NO (paper appendix, seed L3543-3572): the system
# message and the exact user template. The paper typesets the instruction wrapped in a quote; the
# literal template is one instruction line, two newlines before "Record A:", one newline before each
# record, two newlines between A and "Record B:", and two trailing newlines (seed L3565-3567).
YES_NO = (
    "Do records A and B affirm DIFFERENT values for the SAME entity and the SAME single-valued attribute "
    "at their respective reference times? A later confirmation of the same quantity is not a replacement; "
    "updates to a different entity or attribute are not replacements of A. Resolve any explicit reference "
    "to A's unit. Answer only YES or NO.\n\nRecord A:\n<OLD RECORD>\n\nRecord B:\n<LATER RECORD>\n\n"
)
YES_NO_SYSTEM = "Return only the requested answer. Do not include reasoning or markdown."
#: The score's clip of the log-odds (seed L3577: s = 1 / (1 + exp(clip(log p(NO) - log p(YES), -80, 80)))).
YES_NO_CLIP = 80.0
YES_NO_TOKENS = ("YES", "NO")
# The YES/NO prompt's chat-template date (seed L3566-3567: "Native chat formatting supplies the
# assistant-generation prefix; the date argument, where supported, is 16 Sep 2026"), its ``date_string``
# (``kvprobe.studies.common.chat_template``). The JSON classifiers' section states no date.
YES_NO_TEMPLATE_DATE = "16 Sep 2026"

# Record-history generation task (paper L5481-5486, appendix "Synthetic Record Histories"): the shared
# system message. The paper typesets the JSON example with \texttt; line breaks are LaTeX wrapping.
RECORDS_SYSTEM = (
    "Use the ordered authoritative records. A later entry changes only the entity and attribute it "
    "concerns. Distinguish affirmed values from rejected alternatives. For a historical question use the "
    'requested time. Return only JSON with one field: {"answer": "the exact queried value"}. If it cannot '
    "be determined, use UNKNOWN."
)

# User message pieces (paper L5487-5491): "Ordered records:", then "Time 1:" and A, "Other record:" and
# the other entity's record, "Time 2:" and B, and "Question:" followed by the query, each section
# separated by a newline (two before the question).
# UNCLEAR (paper): the spacing inside a section; we put the label and its record on one line, separated
# by one space.
RECORDS_HEADER = "Ordered records:"
TIME_1 = "Time 1:"
OTHER_RECORD = "Other record:"
TIME_2 = "Time 2:"
QUESTION = "Question:"

# UNCLEAR (paper): the query wordings ("the exact strings ... are distributed in the dataset"). Ours name
# the time and the slot phrasing of the later record.
CURRENT_QUERY = "After the Time 2 record, what is {slot}?"
HISTORICAL_QUERY = "At Time 1, before the Time 2 record, what was {slot}?"
UNRELATED_QUERY = "What is {slot}?"


def fill(prompt: str, old: str, later: str) -> str:
    """``prompt`` with the two records substituted verbatim for the placeholders."""
    if prompt.count(OLD_PLACEHOLDER) != 1 or prompt.count(LATER_PLACEHOLDER) != 1:
        raise ValueError("a detector prompt must hold each record placeholder exactly once")
    return prompt.replace(OLD_PLACEHOLDER, old).replace(LATER_PLACEHOLDER, later)

# ----------------------------------------------------------------------------- neutral notes of the record histories
# Seed L5574-5577 (app:v7_bridge): "all arms add the same control note before Time 2: ``The notebook contains
# numbered pages and a plain cover.'' repeated 16 times"; seed L4779-4781 (app:v17_scope): the factorial's
# alternative note "repeats ``A wooden shelf holds a closed sketchbook beside a ceramic bowl.'' 16 times".
NOTEBOOK_NOTE = "The notebook contains numbered pages and a plain cover."
SHELF_NOTE = "A wooden shelf holds a closed sketchbook beside a ceramic bowl."
#: The notes a record history can carry before Time 2, by name.
NOTE_SENTENCES = {"notebook": NOTEBOOK_NOTE, "shelf": SHELF_NOTE}
#: How often a note sentence is repeated (seed L5577, L4779-4781: "16 times").
NOTE_REPEATS = 16
# UNCLEAR (paper): how the repetitions are joined and whether the note has a label. Ours: one space, no label,
# the note on its own line (its own prompt segment) between the other record and Time 2.
NOTE_JOINER = " "
# Seed L4763 (app:v17_scope, on the record histories of app:v7_bridge): "Llama's template date is fixed to
# 11 September 2026", passed as the chat template's ``date_string`` by ``kvprobe.studies.common.chat_template``
# (Llama 3 templates format it as "%d %b %Y"; templates without the variable ignore it). The matched-score
# experiment and the factorial use it; the record-history policies' section states no date.
TEMPLATE_DATE = "11 Sep 2026"

#: The strings above that the paper prints, as it prints them (tests/test_paper_strings.py).
PAPER_STRINGS: dict[str, str] = {"NOTEBOOK_NOTE": NOTEBOOK_NOTE, "SHELF_NOTE": SHELF_NOTE,
                                  "YES_NO_TEMPLATE_DATE": YES_NO_TEMPLATE_DATE}
