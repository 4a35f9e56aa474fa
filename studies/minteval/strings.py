"""Exact strings of the MINTEval state-tracking study, in one place.

Paper: "Positions Are Not Facts", Appendix "Repeated Updates and
Contextual Multi-Hop Questions", paragraphs "MINTEval state tracking" (L1346-1370) and
"Five access policies" (L1401-1411); spec partA sections 1 and 1a. The paper quotes no
prompt text for MINTEval ("The prompt text is UNCLEAR", spec 1a): every string here
except the quoted anchors is ours and marked UNCLEAR.
"""

from kvprobe.studies.common.answers import BOXED_INSTRUCTION, QUESTION_JOINER

__all__ = ["BOXED_INSTRUCTION", "QUESTION_JOINER"]  # re-exported: the study reads every string from here

# Boxed-answer instruction: the paper keeps "Boxed-answer instructions" for MINTEval and MQuAKE alike
# (L1409-1410: "Boxed-answer instructions and the original normalization are retained") without
# quoting them: UNCLEAR. We use the MQuAKE study's instruction (imported above, one space before it).

# UNCLEAR (paper): the history's framing. Ours: one line before the events, then one event per line
# (segment separator EVENT_JOINER), then a blank line and the question (the chat template's user message).
HISTORY_HEADER = "Events, in the order they happened:"
EVENT_JOINER = "\n"
QUESTION_SEPARATOR = "\n\n"

# UNCLEAR (the released questions are not available): the generated sessions' question templates,
# one family per paper question type (L1348-1350: "Current location, historical location, counting,
# ordering, and multi-hop questions"). bAbI's own wording where bAbI has the question (qa1 "Where is
# Mary?", qa2 "Where is the apple?", qa3 "Where was the apple before the kitchen?").
CURRENT_PERSON = "Where is {person}?"
CURRENT_OBJECT = "Where is the {obj}?"
HISTORICAL_PERSON = "Where was {person} before the {location}?"
HISTORICAL_OBJECT = "Where was the {obj} before the {location}?"
COUNT_CARRIED = "How many objects is {person} carrying?"
COUNT_MOVES = "How many times did {person} move?"
ORDER_NTH = "What was the {ordinal} place {person} went to?"
ORDER_PAIR = "Which did {person} visit first, the {first} or the {second}?"
MULTIHOP_HOLDER = "Where is the person carrying the {obj}?"
MULTIHOP_DROP = "Where did {person} drop the {obj}?"
MULTIHOP_GIFT = "Where is the object that {giver} gave to {recipient}?"
MULTIHOP_MEETING = "Where was {person} when {other} went to the {location}?"
ORDINALS = ("first", "second", "third", "fourth", "fifth")
#: Count references are digits; the number word (and "none" for 0, bAbI qa7's word) are aliases.
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
                "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
                "nineteen", "twenty")
NONE_ALIAS = "none"

# UNCLEAR (paper: MINTEval is scored by normalized reference EM with EOS, L1431; no judge): the rubric of
# the optional LLM-judge sensitivity (grading.py), one answer per prompt.
JUDGE_RUBRIC = (
    "A model read a list of events (people moving between places, picking up, dropping and giving objects) "
    "and answered a question about them.\n"
    "Question: {question}\n"
    "Reference answer: {reference}\n"
    "Model answer: {response}\n"
    "Does the model answer give the reference answer (or an equivalent wording of it) as its final answer, "
    "without also asserting a different answer? Answer yes or no."
)

# Anchors, verbatim (paper L1362-1365): source minus full, all questions, percentage points [95% CI] over
# the 83 shared-source components; L1365 Llama-3.2-3B's current-location gain; L1366-1367 history
# answers fall by 12.86, 15.39 and 13.02 points.
ANCHORS_ALL = (("Qwen3-4B", -6.79, (-8.35, -5.31)), ("Llama-3.2-3B", -5.80, (-7.04, -4.62)),
               ("Qwen3-32B", -10.68, (-12.89, -8.61)))
ANCHOR_LLAMA_CURRENT = ("Llama-3.2-3B", "current_location", 9.72, (5.75, 13.90))
ANCHORS_HISTORICAL = (("Qwen3-4B", -12.86), ("Llama-3.2-3B", -15.39), ("Qwen3-32B", -13.02))
#: Paper L1347-1348 and L1357-1358: the released state subset.
PAPER_SIZE = {"sessions": 99, "questions": 5656, "components": 83, "events": (18, 148)}
