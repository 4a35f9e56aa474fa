"""Exact strings of the open OAKS answers study and its source-aware grader.

Source: "Positions Are Not Facts", appendix "Open Answers on Natural Source Excerpts"
(app:v41_oaks_open, seed L4564-4736) and the control-conditions paragraph (seed L398-411).
``PAPER_STRINGS`` lists every string quoted from the paper as it prints it
(``tests/test_paper_strings.py`` checks each against the seed). The paper prints neither the
generation prompt nor the grader's prompts ("Its exact model identity, prompts and outputs are
retained in the evaluation records", L4580-4581, not released): every prompt below is ours,
marked UNCLEAR, built around the paper's own definitions, which are quoted.

The natural-source prefix (``Earlier source:`` / ``Unrelated source:`` / ``Later source:``) is the
matched-scores study's (:mod:`kvprobe.studies.matched_scores.strings`, seed L1302-1306).
"""

# ---------------------------------------------------------------------- generation
# Seed L4567-4569: "We remove the answer options and A/B/UNKNOWN response instruction from all 116 original OAKS
# questions, retaining each question, source excerpt, and selected reference-answer text."
# UNCLEAR (paper): the remaining instruction. Ours: the supplied-option study's instruction
# (matched_scores.strings.OAKS_SYSTEM, "asks for the state after the later source", L5645-5646) without its
# candidate and JSON sentences.
OPEN_SYSTEM = "Read the sources in order. Answer the question for the state of the story after the later source."
# UNCLEAR (paper): the question line. Ours: the supplied-option study's, without the candidates.
OPEN_QUESTION = "Question: {query}"

# ---------------------------------------------------------------------- the source-aware grader
# Seed L4587-4590: "For each question, it receives the complete original earlier, later, and unrelated excerpts, the
# original question and reference, and anonymous candidate answers. Generator, access condition, and previous
# scores are hidden." UNCLEAR (paper): every prompt's wording. Ours: one decision per prompt (a small local judge
# answers one word), the decision asked last, after a blank line.
EXCERPTS = ("Earlier excerpt:\n{earlier}\n\nLater excerpt:\n{later}\n\nUnrelated excerpt:\n{unrelated}\n\n"
            "Question: {question}\nReference answer: {reference}")

# The paper's definitions (quoted in PAPER_STRINGS below).
COMPLETE_DEFINITION = ("Complete requires all source-supported required details, no conflicting or unsupported "
                       "substantive claim, and EOS.")
PARTIAL_DEFINITION = ("keeps at least one required detail and omits another, without a wrong claim")

#: Per question: is it answerable from its excerpts? (seed L4598-4599: "92 answerable, 17 partially answerable,
#: six unanswerable, and one ambiguous question").
ANSWERABILITY_LABELS = ("answerable", "partial", "unanswerable", "ambiguous")
ANSWERABILITY = (EXCERPTS + "\n\nJudge the question against the excerpts only. answerable: the excerpts supply every "
                 "detail the question asks for; partial: they supply some of them; unanswerable: they supply none; "
                 "ambiguous: the question can be read in ways the excerpts answer differently."
                 "\n\nIs the question answerable from the excerpts? Reply with one word: answerable, partial, "
                 "unanswerable or ambiguous.")

#: Per question: does the source support the reference? (seed L4599-4601: "References are fully supported in 54
#: cases, partially supported in 51, unsupported in seven, and mismatched to the question in four").
REFERENCE_SUPPORT_LABELS = ("supported", "partial", "unsupported", "mismatched")
REFERENCE_SUPPORT = (EXCERPTS + "\n\nJudge the reference answer against the excerpts. supported: the excerpts support "
                     "all of it; partial: they support part of it; unsupported: they support none of it; mismatched: "
                     "it does not answer the question asked."
                     "\n\nHow well do the excerpts support the reference answer? Reply with one word: supported, "
                     "partial, unsupported or mismatched.")

#: Per distinct answer: source completeness (seed L4595-4597: the rubric "separates missing details, contradictory or
#: unsupported claims, and justified or unjustified abstention"; justification is read from the question's
#: answerability, so the judge gives one of four labels).
COMPLETENESS_LABELS = ("complete", "partial", "abstain", "wrong")
COMPLETENESS = (EXCERPTS + "\nCandidate answer: {answer}\n\nGrade the candidate answer against the excerpts, which "
                "are the evidence; the reference may omit details the excerpts supply or add details they do not. "
                "complete: the answer gives every detail the question asks for that the excerpts support, with no "
                "conflicting or unsupported claim; partial: it " + PARTIAL_DEFINITION + "; abstain: it declines to "
                "answer or says the excerpts do not tell; wrong: it makes a claim that conflicts with the excerpts or "
                "that they do not support."
                "\n\nGrade the candidate answer. Reply with one word: complete, partial, abstain or wrong.")

#: Per distinct answer: the same grader's agreement with the original reference (excerpts shown).
AGREEMENT_LABELS = ("yes", "no")
REFERENCE_AGREEMENT = (EXCERPTS + "\nCandidate answer: {answer}\n\nJudge only whether the candidate answer agrees with "
                       "the reference answer: it states the reference's answer, possibly in other words, and nothing "
                       "that contradicts it."
                       "\n\nDoes the candidate answer agree with the reference answer? Reply with one word: yes or no.")

#: Per distinct answer: the reference-only protocol, without the excerpts (seed L4690-4693: "a separate GPT-5.6 review
#: that applies the earlier reference-only rubric on all 116 questions, without the original excerpts or the
#: source-supported detail target"). UNCLEAR (paper): that rubric's text. Ours.
REFERENCE_ONLY = ("Question: {question}\nReference answer: {reference}\nCandidate answer: {answer}\n\nJudge only "
                  "whether the candidate answer agrees with the reference answer: it states the reference's answer, "
                  "possibly in other words, and nothing that contradicts it."
                  "\n\nDoes the candidate answer agree with the reference answer? Reply with one word: yes or no.")

#: The four prompt kinds and their labels; ``question`` kinds are asked once per question, ``answer`` kinds once per
#: distinct answer text of a question.
PROMPTS = {"answerability": (ANSWERABILITY, ANSWERABILITY_LABELS, "question"),
           "reference_support": (REFERENCE_SUPPORT, REFERENCE_SUPPORT_LABELS, "question"),
           "completeness": (COMPLETENESS, COMPLETENESS_LABELS, "answer"),
           "agreement": (REFERENCE_AGREEMENT, AGREEMENT_LABELS, "answer"),
           "reference_only": (REFERENCE_ONLY, AGREEMENT_LABELS, "answer")}

#: Every string above that the paper prints, as it prints it.
PAPER_STRINGS: dict[str, str] = {
    # Seed L4622-4623 (the note of tab:v41_oaks_open).
    "COMPLETE_DEFINITION": COMPLETE_DEFINITION,
    # Seed L4654-4656 (the note of tab:v43_oaks_error_types).
    "PARTIAL_DEFINITION": PARTIAL_DEFINITION,
}
