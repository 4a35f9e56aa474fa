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
Every history template below is therefore ours (UNCLEAR in the paper). The gate words
live in ``interventions/bias.py`` (``session_gate``), which quotes L5961-5967. The judge's
answer-check prompts are not ours: they are LongMemEval's official ones, verbatim (``ANSCHECK_*``).
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

#: The official LongMemEval answer-check prompts, verbatim (the paper's judge uses "the original LongMemEval
#: question-type rubric", L6141; "the unchanged official question-type rubric", L6196). Source:
#: github.com/xiaowu0162/LongMemEval, src/evaluation/evaluate_qa.py, ``get_anscheck_prompt`` (unchanged since
#: commit b11ff72 of 12 Oct 2024; checked at 9e0b455f4ef0e2ab8f2e582289761153549043fc). Byte for byte as
#: released, including the space before "\n\n" in three of them; ``{}`` are, in order, the question, the
#: answer (the correct answer, the preference rubric or the abstention explanation: the file's ``answer``
#: field) and the model response (``str.format``, positional). Which template: by ``question_type``; every
#: question whose id contains ``_abs`` takes :data:`ANSCHECK_ABSTENTION` (``'_abs' in question_id``).
ANSCHECK_DEFAULT = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes if the "
    "response contains the correct answer. Otherwise, answer no. If the response is equivalent to the "
    "correct answer or contains all the intermediate steps to get the correct answer, you should also "
    "answer yes. If the response only contains a subset of the information required by the answer, answer "
    "no. \n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\nIs the model response correct? "
    "Answer yes or no only."
)
ANSCHECK_TEMPORAL = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes if the "
    "response contains the correct answer. Otherwise, answer no. If the response is equivalent to the "
    "correct answer or contains all the intermediate steps to get the correct answer, you should also "
    "answer yes. If the response only contains a subset of the information required by the answer, answer "
    "no. In addition, do not penalize off-by-one errors for the number of days. If the question asks for "
    "the number of days/weeks/months, etc., and the model makes off-by-one errors (e.g., predicting 19 "
    "days when the answer is 18), the model's response is still correct. \n\nQuestion: {}\n\nCorrect "
    "Answer: {}\n\nModel Response: {}\n\nIs the model response correct? Answer yes or no only."
)
ANSCHECK_KNOWLEDGE_UPDATE = (
    "I will give you a question, a correct answer, and a response from a model. Please answer yes if the "
    "response contains the correct answer. Otherwise, answer no. If the response contains some previous "
    "information along with an updated answer, the response should be considered as correct as long as the "
    "updated answer is the required answer.\n\nQuestion: {}\n\nCorrect Answer: {}\n\nModel Response: {}\n\n"
    "Is the model response correct? Answer yes or no only."
)
ANSCHECK_PREFERENCE = (
    "I will give you a question, a rubric for desired personalized response, and a response from a model. "
    "Please answer yes if the response satisfies the desired response. Otherwise, answer no. The model "
    "does not need to reflect all the points in the rubric. The response is correct as long as it recalls "
    "and utilizes the user's personal information correctly.\n\nQuestion: {}\n\nRubric: {}\n\nModel "
    "Response: {}\n\nIs the model response correct? Answer yes or no only."
)
ANSCHECK_ABSTENTION = (
    "I will give you an unanswerable question, an explanation, and a response from a model. Please answer "
    "yes if the model correctly identifies the question as unanswerable. The model could say that the "
    "information is incomplete, or some other information is given but the asked information is not.\n\n"
    "Question: {}\n\nExplanation: {}\n\nModel Response: {}\n\nDoes the model correctly identify the "
    "question as unanswerable? Answer yes or no only."
)
#: Question type -> answer-check template (``get_anscheck_prompt``'s branches; another type is an error there).
ANSCHECK_BY_TYPE = {
    "single-session-user": ANSCHECK_DEFAULT,
    "single-session-assistant": ANSCHECK_DEFAULT,
    "multi-session": ANSCHECK_DEFAULT,
    "temporal-reasoning": ANSCHECK_TEMPORAL,
    "knowledge-update": ANSCHECK_KNOWLEDGE_UPDATE,
    "single-session-preference": ANSCHECK_PREFERENCE,
}
#: How the official evaluation asks and reads the judge (evaluate_qa.py): the prompt as the only user message,
#: temperature 0, at most 10 new tokens, and the label ``'yes' in reply.lower()`` (the reply stripped first).
ANSCHECK_MAX_NEW_TOKENS = 10
ANSCHECK_YES = "yes"
