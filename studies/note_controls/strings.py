"""Exact strings of the note-control study (paper appendices "Effects of control location and prompt
wording on abstention", seed L3819-3916, and "Varied Background Text and Early Note Access", seed
L5389-5437).

The records, the neutral note, the system message and the unrelated question are the quantity
task's (``kvprobe.studies.datasets.quantity_task.strings``); this module holds only what the control
configurations change. Strings the paper does not give are marked UNCLEAR with our choice.
"""

from kvprobe.studies.datasets.quantity_task import strings as task_strings

# The explicit question (paper L3872-3876). UNCLEAR: the paper typesets the inner quotation with TeX
# quotes; we send ASCII double quotes.
EXPLICIT_QUESTION = ('Read the explicit sentence beginning "The inspection label on {envelope} is". Report the '
                     "label stated in that sentence, not the specifications or the neutral note. Return only that "
                     "label in the JSON answer field.")

# The system clause the no-UNKNOWN profile removes (paper L3877-3878), with the space before it.
UNKNOWN_CLAUSE = 'If the requested value cannot be determined, return {"answer": "UNKNOWN"}.'

# The abstention value of that clause.
UNKNOWN_VALUE = "UNKNOWN"

# The color word of the note and its replacement (paper L3860-3861: "Replacing each of six gray tokens by plain").
GRAY = "gray"
PLAIN = "plain"

# UNCLEAR (paper L3894-3895 "the canonical JSON prefix up to the value token", not printed): the answer
# format of the system message, up to the value's opening quote.
ANSWER_PREFIX = '{"answer": "'

# UNCLEAR (paper L5393-5395: "An authored set of distinct complete sentences", not quoted): ours. Neutral
# office furniture; no color word, digit, unit, label, record or envelope. Used in this order; a sentence
# that would overshoot the repeated note's token count is skipped.
VARIED_SENTENCES = (
    "A wooden shelf stands against the far wall of the reading room.",
    "Two chairs face a long table beneath the window.",
    "The hallway carpet runs from the staircase to the back door.",
    "A ceramic bowl rests on the counter next to a closed sketchbook.",
    "Several framed maps hang above the writing desk.",
    "The window looks out over a quiet courtyard with a stone bench.",
    "A small clock ticks on the mantel above the fireplace.",
    "The bookcase holds dictionaries, atlases and bound journals.",
    "A coat rack stands beside the entrance.",
    "The floor is made of polished oak boards.",
    "The drawers of the filing cabinet slide open without a sound.",
    "A potted fern grows in the alcove by the stairs.",
    "Rain taps softly against the glass.",
    "A woven rug covers most of the floor.",
)

# UNCLEAR (ours): short complete sentences that pad the varied note to the repeated note's exact token
# count (the paper says only that the counts are equal).
FILLER_SENTENCES = (
    "All is still.",
    "The air is calm.",
    "Nobody is here.",
    "A door creaks.",
    "The room is quiet.",
    "Dust settles slowly.",
    "Time passes.",
    "It is evening.",
    "Somewhere a bird sings.",
    "The chairs are empty.",
)


def plain_note(repetitions: int = task_strings.NOTE_REPETITIONS) -> str:
    """The neutral note with every ``gray`` replaced by ``plain`` (the gray->plain profile).

    Example: ``plain_note(1)`` is ``"A square seal ... The cover is plain and the folder is closed."``.
    """
    return task_strings.neutral_note(task_strings.NOTE_SENTENCE.replace(GRAY, PLAIN), repetitions)


def system_without_unknown(system: str = task_strings.SYSTEM) -> str:
    """``system`` without the UNKNOWN clause and the space before it (the no-UNKNOWN profile).

    Raises ``ValueError`` unless the clause occurs exactly once.
    """
    clause = " " + UNKNOWN_CLAUSE
    if system.count(clause) != 1:
        raise ValueError(f"the system message holds the UNKNOWN clause {system.count(clause)} times, not once")
    return system.replace(clause, "")


#: Every string above that the paper prints, as it prints it (the explicit question with its own
#: ``{envelope}`` placeholder, L3872-3876); tests/test_paper_strings.py compares each with the seed.
PAPER_STRINGS = {
    "EXPLICIT_QUESTION": EXPLICIT_QUESTION,
    "UNKNOWN_CLAUSE": UNKNOWN_CLAUSE,
}
