"""Exact strings of the FactConsolidation study, in one place.

Paper: "Positions Are Not Facts", appendix "Current Answers after Accumulated Fact
Updates" (label app:v43_mab, L1514-1640) and "Why Net Accuracy Changes Differ between the Two Models"
(app:v45_mab_analysis, L1654-1770); spec partA section 3. The paper quotes none of its prompts: its
instruction, boxed-answer request and grader rubric are UNCLEAR. SYSTEM, HISTORY_HEAD/HISTORY_TAIL and
QUERY_TEMPLATE are MemoryAgentBench's own (``utils/templates.py``, sub-dataset ``factconsolidation``,
long-context agent; HUST-AI-HYZ/MemoryAgentBench, MIT). That file is absent from the stored snapshot of
the repository (@455306dcabc3, whose ``agent.py`` and ``conversation_creator.py`` import it); the text
here is as several independent copies of it quote it, identically. Everything else is ours, marked UNCLEAR.
"""

# MemoryAgentBench ``factconsolidation`` system message (``utils/templates.py``, ``SYSTEM_MESSAGE``), verbatim.
SYSTEM = "You are a helpful assistant that can read the context and memorize it for future retrieval."

# MemoryAgentBench ``factconsolidation`` memorize template, verbatim, split at its ``{context}``
# placeholder: HISTORY_HEAD + "\n" + context + "\n" + HISTORY_TAIL. Its ``\\n`` before ``<User>`` is a
# literal backslash and "n" in the upstream Python source, kept as is. ``{time_stamp}``: MemoryAgentBench
# inserts the wall-clock time; UNCLEAR for the paper; ours: TIME_STAMP (empty, so prompts are reproducible).
HISTORY_HEAD = ("Dialogue between User and Assistant {time_stamp} \\n<User> The following context is the facts I "
                "have learned: ")
HISTORY_TAIL = " <Assistant> I have learned the facts and I will answer the question you ask."
TIME_STAMP = ""
#: Between the head, every line of the context (numbered facts one per line) and the tail.
LINE_JOINER = "\n"

# MemoryAgentBench ``factconsolidation`` query template (long-context agent), verbatim.
QUERY_TEMPLATE = (
    "Pretend you are a knowledge management system. Each fact in the knowledge pool is provided with a "
    "serial number at the beginning, and the newer fact has larger serial number. \n You need to solve the "
    "conflicts of facts in the knowledge pool by finding the newest fact with larger serial number. You need "
    "to answer a question based on this rule. You should give a very concise answer without saying other "
    "words for the question **only** from the knowledge pool you have memorized rather than the real facts "
    "in real world. \n\nFor example:\n\n [Knowledge Pool] \n\n Question: Based on the provided Knowledge Pool, "
    "what is the name of the current president of Russia? \nAnswer: Donald Trump \n\n Now Answer the "
    "Question: Based on the provided Knowledge Pool, {question} \nAnswer:"
)

# Boxed-answer instruction. Paper L1550-1551: "The instruction requests only a boxed final answer"
# (also L6794-6795: "instructions to return only a boxed final answer"); the wording is not quoted:
# UNCLEAR, ours. It follows the released question, after QUESTION_JOINER, in either query template.
BOXED_INSTRUCTION = "Return only the final answer within \\boxed{}."
QUESTION_JOINER = " "

# The question as asked (``--query-template``). UNCLEAR (paper): its instruction is not quoted. Ours
# ("ours", the default) states MemoryAgentBench's latest-fact rule without its worked example (SmolLM2-135M
# answers that example's "Donald Trump" to every question under the verbatim template) and is followed by
# the boxed-answer instruction; "memoryagentbench" is QUERY_TEMPLATE verbatim with the question and the
# boxed-answer instruction as its {question}.
OUR_QUERY_TEMPLATE = (
    "Each fact above has a serial number, and a fact with a larger serial number is newer. When facts "
    "conflict, the newest fact holds. Answer the question only from these facts, not from real-world "
    "knowledge.\nQuestion: {question}"
)

# ----------------------------------------------------------------------------- the LLM grader (UNCLEAR, ours)
# Paper L1560-1577: GPT-5.6 sees the complete numbered history, the questions and references and
# anonymous answers; the rubric "applies the latest-fact rule at each reasoning step, requires quotations
# from the stated fact number, and separates reference agreement, complete or partial source-supported
# answers, wrong claims and abstention". The rubric text itself is not published; ours follows it.
JUDGE_LABELS = ("complete", "partial", "wrong", "abstain")
JUDGE_HISTORY = (
    "Every task below is about this numbered fact history. A fact with a larger number is newer; when two "
    "facts give the same subject and relation different values, the newer fact holds (the latest-fact rule), "
    "at every step of a multi-hop question.\n\n<history>\n{history}\n</history>"
)
RUBRIC = (
    "Question: {question}\n"
    "Original reference answers: {references}\n"
    "Answer to grade (its final boxed content, or the whole response when it has no box): {answer}\n\n"
    "Work out the answer the history supports under the latest-fact rule, quoting the fact number of every "
    "fact you use. Then give one verdict: \"complete\" if the answer gives the supported answer and asserts "
    "nothing the history contradicts; \"partial\" if it gives part of a multi-part supported answer and "
    "nothing false; \"wrong\" if it asserts a value the history does not support (an outdated value "
    "included); \"abstain\" if it declines to answer without a false claim. The reference may be wrong: "
    "judge against the history."
)
