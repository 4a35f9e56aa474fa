"""Strings of the session-bias study, in one place.

Source: "Positions Are Not Facts",
appendix "Conversational-Memory Inputs and Answer Evaluation" (app:v8_public,
L5906-5922), "Reducing Attention to Earlier Sessions" (app:guarded_validation,
L5924-5990), "Answer Evaluation and Validation" (app:v17_judge, L6139-6183) and
"Hard Masks on the Same Public Session Spans" (app:v41_public_hard, L6185-6215);
spec partD section 10, partE sections E1-E3.

The paper publishes **no prompt strings** for this study: it says only that the
controller "receives dated turns and question text" (L5958-5959), that the
history is prefilled separately from the question (L5954-5955) and that
"Headers, question tokens, and generated tokens have r_j = 0" (L5943-5944).
Every template below is therefore ours (UNCLEAR in the paper). The gate words
live in ``interventions/bias.py`` (``session_gate``), which quotes L5961-5967.
"""

#: UNCLEAR (paper): the system message. Ours asks for an answer from the sessions and
#: for saying so when they do not contain it (LongMemEval's abstention questions expect
#: the answer to be declined; the paper's judge keeps "the abstention rule", L6146). It holds
#: none of the rule grader's decline phrases: small models often echo the system message, and
#: an echo must not count as declining (tests/test_session_bias.py checks this).
SYSTEM = (
    "You are a helpful assistant with a memory of earlier chat sessions with the user. Answer the "
    "user's question using those sessions. If the sessions do not contain the answer, say so."
)

#: UNCLEAR (paper): layout of the history. Segments, in order (joined by SEGMENT_SEP):
#: ``intro`` (INTRO), then per session i a header ``header:i`` (SESSION_HEADER) and its
#: content ``session:i`` (the turns, one per line, TURN), then ``date`` (CURRENT_DATE).
#: Headers, ``intro`` and ``date`` get no bias (paper L5943: "Headers ... have r_j = 0");
#: the session content (role labels included: they are part of the dated turns) does.
INTRO = "Chat history with the user, oldest session first:"
SESSION_HEADER = "Session {number}, date {date}:"
TURN = "{role}: {content}"
#: Role labels of the turns (LongMemEval roles are "user" and "assistant").
ROLE_LABELS = {"user": "User", "assistant": "Assistant"}
TURN_SEP = "\n"
CURRENT_DATE = "Current date: {date}."
SEGMENT_SEP = "\n"
#: Between the history and the question (inside the same user message in chat mode).
QUESTION_SEP = "\n\n"
#: Prefix of the question text sent after the history. It holds no gate word, month or year,
#: so the gate g(q) of the prefixed question equals that of the bare question (checked at run time).
QUESTION_PREFIX = "Question: "

#: Our paraphrase (not the official wording) of the LongMemEval question-type rubric the paper's
#: judge uses unchanged (app:v17_judge, L6141-6147): it accepts complete intermediate steps, has a
#: one-unit temporal tolerance, accepts previous information next to the updated answer for
#: knowledge updates, a preference rubric, and an abstention rule. For paper fidelity pass the
#: official templates of the LongMemEval repository (src/evaluation/evaluate_qa.py) as the rubric.
RUBRIC_ANSWERABLE = (
    "Question: {question}\nCorrect answer: {reference}\nModel response: {response}\n"
    "Answer yes if the response contains the correct answer, or is equivalent to it, or contains all "
    "intermediate steps that lead to it; answer no if it gives only part of the required information.{extra}"
)
RUBRIC_EXTRA = {
    "temporal-reasoning": " Do not penalize off-by-one errors in counts of days, weeks, months or years.",
    "knowledge-update": " If the response mentions earlier information together with the updated answer, "
                        "it is correct as long as the updated answer is the one given as the answer.",
}
RUBRIC_PREFERENCE = (
    "Question: {question}\nRubric for a desired personalized response: {reference}\nModel response: "
    "{response}\nAnswer yes if the response recalls and uses the user's personal information correctly; "
    "it need not cover every point of the rubric."
)
RUBRIC_ABSTENTION = (
    "Question (unanswerable from the history): {question}\nExplanation: {reference}\nModel response: "
    "{response}\nAnswer yes if the response identifies the question as unanswerable, e.g. says the "
    "information is incomplete or that other information was given but not the one asked for."
)
