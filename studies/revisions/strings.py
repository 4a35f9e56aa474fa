"""Exact strings of the revision-history study, in one place.

Paper: "Positions Are Not Facts", appendix "Answers to Questions about
Wikipedia Revision Histories" (label app:wiki_source_quality, lines 6781-6927; main text
section v53_wiki, lines 644-669; spec partE sections E9 and E10). The paper quotes none of
its prompts: the boxed-answer instruction, the revision header, the history layout and the
grader rubric are described, not given. Every such string below is ours and marked UNCLEAR
beside the paper's description (line numbers approximate). The paper's descriptions
themselves are kept verbatim in ``PAPER_*`` constants, which the report quotes.
"""

# --------------------------------------------------------------------------- the paper, verbatim
# L6786-6787.
PAPER_QUESTION_TIME = "Each question is asked after the end of the revision history."
# L6794-6795.
PAPER_DECODING = ("native chat templates, thinking disabled, greedy decoding and instructions to return "
                  "only a boxed final answer.")
# L6797-6801.
PAPER_OPERATIONS = ("Full access retains the complete history. Whole-source masking hides all non-final article "
                    "bodies. Changed-text masking hides only passages replaced or deleted between adjacent "
                    "revisions. Both masks retain revision headers and are fixed before the questions. "
                    "Recomputation deletes the non-final bodies and processes the remaining history again.")
# L6846-6848.
PAPER_PARSER = ("A fixed parser extracts the boxed answer when a box marker is present; otherwise it supplies "
                "the complete response.")
# L6848-6850.
PAPER_GRADER_CHECKS = ("The grader separately checks agreement with the original reference, coverage of the "
                       "requested details, unsupported or contradictory claims, and justified abstention.")
# L6878 (figure caption, fig:v53_wiki_answers).
PAPER_PRECEDENCE = "Capped outputs take precedence over semantic labels; all other outcomes require EOS."
# L6860-6862.
PAPER_BOOTSTRAP = ("Paired changes are question-weighted; 95% intervals use 10,000 bootstrap resamples of "
                   "complete articles, keeping each article's questions, generators and operations together.")
# L6790-6791.
PAPER_BUDGET = "a 1,024-token answer budget"
# L6822-6829 (table tab:v43_wiki_source_quality, column heads): the original question types.
PAPER_QUESTION_TYPES = ("Simple", "History", "Multi-hop", "Counting", "Ordering")
# L6812-6815: the source-answerability labels ("answerable, ... partially answerable, ... unanswerable
# and ... ambiguous").
PAPER_SOURCE_LABELS = ("answerable", "partial", "unanswerable", "ambiguous")
# L6878: the answer outcomes (complete, wrong, capped; partial, abstain, unverifiable).
PAPER_OUTCOMES = ("complete", "wrong", "capped", "partial", "abstain", "unverifiable")

# --------------------------------------------------------------------------- the prompt (ours, UNCLEAR)
# UNCLEAR (L6795 "instructions to return only a boxed final answer", text not given). Ours; it
# follows every question after QUESTION_JOINER.
BOXED_INSTRUCTION = "Return only your final answer, inside \\boxed{}."
QUESTION_JOINER = " "
# UNCLEAR (L6799 "revision headers"; the released header fields are not described beyond "Released
# contexts omit editor metadata", L6830). Ours: position, count and timestamp; the revision id stays
# in the data, not in the prompt.
REVISION_HEADER = "=== Revision {index} of {count} ({timestamp}) ==="
# UNCLEAR (the history layout is not given). Ours: one opening line naming the article, then
# header and body segments in order, oldest first.
HISTORY_INTRO = ("Below is the revision history of the article \"{title}\", oldest revision first. "
                 "Each revision gives the complete text of the article at that time.")
# UNCLEAR: text between segments (header, body, next header...).
SEGMENT_JOINER = "\n\n"

# --------------------------------------------------------------------------- generated questions (ours)
# The generated demonstration set (data.py) asks these, one family per paper type. {phrase} is
# an edited word's context with the word as "___" (three words on each side).
Q_SIMPLE = "In the final revision, which word fills the blank in \"{phrase}\"?"
Q_HISTORY_WORD = ("Revision {revision} changed the word in the blank of \"{phrase}\". "
                  "Which word stood there before that change?")
Q_HISTORY_DELETED = ("Revision {revision} deleted a sentence that began \"{start}\". "
                     "What were the last three words of that sentence?")
Q_HISTORY_INSERTED = "In which revision did the sentence beginning \"{start}\" first appear?"
Q_COUNTING = "Across all revisions, how many times was the word in the blank of \"{phrase}\" replaced?"
Q_ORDERING = ("Which change was made earlier: \"{old_a}\" replaced by \"{new_a}\", or \"{old_b}\" replaced by "
              "\"{new_b}\"? Answer with the new word of the earlier change.")
Q_MULTIHOP = ("The revision that deleted the sentence beginning \"{start}\" also replaced a word. "
              "Which new word did it introduce?")
# Title of a generated article: the book and the paragraph range it comes from.
GENERATED_TITLE = "{book}, paragraphs {first}-{last}"
# How the inserted-sentence question's revision may be written in an answer.
REVISION_ANSWER = "revision {index}"

# --------------------------------------------------------------------------- the LLM grader (ours, UNCLEAR)
# UNCLEAR (L6843-6850 describe what the grader sees and checks, not its wording). Ours: one prompt per
# answer with the complete history, the question, the references, the source label and the displayed
# answer; no operation, model or termination.
RUBRIC = (
    "You are grading an answer to a question about the revision history of an article. Judge it against "
    "the complete history below, including revisions the answerer may not have seen.\n\n"
    "History:\n{history}\n\n"
    "Question ({question_type}): {question}\n"
    "Reference answer(s): {references}\n"
    "Source assessment: {source}\n"
    "Answer to grade: {answer}\n\n"
    "Check agreement with the reference, coverage of the requested details, unsupported or contradictory "
    "claims, and justified abstention. Verdicts: \"complete\" (agrees with the reference and covers what "
    "was asked), \"partial\" (correct but incomplete), \"wrong\" (disagrees, contradicts the history or "
    "asserts something unsupported), \"abstain\" (declines to answer), \"unverifiable\" (the history cannot "
    "decide it)."
)

# ------------------------------------------------------------------ reference agreement (L6848-6850, L6856-6857)
# L6848-6850: "The grader separately checks agreement with the original reference, coverage of the requested
# details, unsupported or contradictory claims, and justified abstention." L6856-6857: "Reference agreement uses all
# 1,161 questions." The verdict words are ours (UNCLEAR: the paper gives no wording): the LLM grader returns
# JUDGE_FIELDS beside each label (``judge.BatchedJudge`` ``fields``); the rule grader's agreement is its
# ``complete`` (a reference, and no other offered option, in the displayed answer, with EOS).
REFERENCE_AGREEMENT = ("agrees", "disagrees")
JUDGE_FIELDS = {"reference": REFERENCE_AGREEMENT}
RUBRIC_REFERENCE = (
    "\nAlso give \"reference\": \"agrees\" if the answer agrees with the reference answer(s) as given, whatever "
    "the history says, else \"disagrees\"."
)

# --------------------------------------------------------------------------- target time (L6830, L6895-6897)
# L6830 (table note): "Original question types differ from target time: 745 questions ask about changes
# or aggregation, 419 about historical states, and only four about the current state." L6895-6896: "741
# questions about changes or aggregation, 416 about historical states and four about the current state"
# (after the article exclusion). The paper does not say how a question's target time was decided (UNCLEAR);
# the table note places the labels with the source review ("These source-only labels remain separate from
# subsequent answer judgments"), so ours come from the source review when a run has one, else from the
# question's ``target_time`` field, else (generated set) from the question family (review.GENERATED_TARGET_TIME),
# else TARGET_TIME_DEFAULT.
TARGET_TIMES = ("historical", "change-aggregation", "current")
#: A question with no review verdict, no ``target_time`` field and no family rule (UNCLEAR, ours: not guessed
#: from its type, since the paper's types "differ from target time").
TARGET_TIME_DEFAULT = "unclassified"

# --------------------------------------------------------------------------- the source review (L6807-6816)
# L6807-6810: "Before answer grading, a separate review checks whether each complete history supports the
# requested answer and specifies the relevant time or relation. The reviewer sees the history, questions and
# original references, without generated answers or cache-operation labels." The verdicts are the paper's four
# labels (PAPER_SOURCE_LABELS); the prompt wording is ours (UNCLEAR). One prompt per question, judged through
# ``kvprobe.studies.common.judge.BatchedJudge`` with the target time as an extra field.
REVIEW_PROMPT = (
    "You review a question about the revision history of an article before any answer is graded. Judge it "
    "against the complete history below.\n\n"
    "History:\n{history}\n\n"
    "Question ({question_type}): {question}\n"
    "Original reference answer(s): {references}\n\n"
    "Verdict: \"answerable\" if the history supports the requested answer and specifies the relevant time or "
    "relation; \"partial\" if it supports only part of it; \"unanswerable\" if it does not support it; "
    "\"ambiguous\" if the question's time or relation is unclear or the history supports several answers.\n"
    "Also give \"target_time\": \"historical\" if the question asks about the article's state at some past "
    "revision, \"change-aggregation\" if it asks about changes between revisions or aggregates over them "
    "(counts, order, when something changed), \"current\" if it asks about the final revision's state."
)
