"""Exact strings of the FactConsolidation study, in one place.

Paper: "Positions Are Not Facts", appendix "Current Answers after Accumulated Fact
Updates" (label app:v43_mab, L1514-1640) and "Why Net Accuracy Changes Differ between the Two Models"
(app:v45_mab_analysis, L1654-1770); spec partA section 3. The paper quotes none of its prompts: its
instruction, boxed-answer request and grader rubric are UNCLEAR. SYSTEM, HISTORY_HEAD/HISTORY_TAIL and
QUERY_TEMPLATE are MemoryAgentBench's own (``utils/templates.py``, sub-dataset ``factconsolidation``,
long-context agent; HUST-AI-HYZ/MemoryAgentBench, MIT). That file is absent from the stored snapshot of
the repository (@455306dcabc3, whose ``agent.py`` and ``conversation_creator.py`` import it); the text
here is as several independent copies of it quote it, identically. Everything else is ours, marked UNCLEAR.
``PAPER_STRINGS`` lists the paper's own sentences this study implements, verbatim with their seed lines
(``tests/test_paper_strings.py`` checks each against the seed).
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
    "judge against the history.\n"
    "Also judge the question itself, whatever the answer: \"answerable\" if the history supports one answer "
    "to it, \"unanswerable\" if it supports none, \"ambiguous\" if it supports several; and the original "
    "reference: \"supported\" if the history supports it, \"unsupported\" if not, \"mismatched\" if it "
    "answers another question."
)

# The source review's two verdicts beside the label (paper L1569-1572: "Source assessments and answer labels
# are produced together", "The review identifies 373 answerable, 24 unanswerable and three ambiguous
# questions; 355 original references are supported, 38 unsupported and seven mismatched to the question").
# The verdict words are the paper's; the request wording (RUBRIC's last paragraph) is ours, UNCLEAR. Each
# judgment of an answer returns both (``judge.BatchedJudge`` ``fields``); a question's verdict is the one most
# of its judgments give, a tie JUDGE_TIES's (UNCLEAR: the paper's judge saw all answers to a question in one
# batch and gave one assessment; ours may split a question's answers across requests).
ANSWERABILITY = ("answerable", "unanswerable", "ambiguous")
REFERENCE_SUPPORT = ("supported", "unsupported", "mismatched")
#: Extra judge fields (name -> allowed values), in the reply's order.
JUDGE_FIELDS = {"answerable": ANSWERABILITY, "reference": REFERENCE_SUPPORT}
#: A question's verdict when its judgments tie (UNCLEAR, ours: neither verdict is confirmed).
JUDGE_TIES = {"answerable": "ambiguous", "reference": "unsupported"}

# ----------------------------------------------------------------------------- the paper's sentences

#: Every sentence of the paper this study implements beyond the prompts, verbatim, with its seed lines.
PAPER_STRINGS: dict[str, str] = {
    # L1532-1533: the exposure sensitivity (``exposed_questions``; summary ``exposure``).
    "EXPOSURE": ("Four questions exposed during runtime qualification are retained in the 400-question analysis "
                 "and excluded in a separate 396-question sensitivity."),
    # L1648-1649: what the sensitivity checks.
    "EXPOSURE_CHECK": ("The exclusion sensitivity retains 369 source-answerable questions and the same direction "
                       "of source masking for each model."),
    # L1552-1553: the prefill chunks (``prefill_chunk``, default PREFILL_CHUNK).
    "PREFILL": "Prefill uses 128-token chunks",
    # L1569-1572: the source review (JUDGE_FIELDS).
    "SOURCE_REVIEW": ("Source assessments and answer labels are produced together, rather than by an independent "
                      "source-only assessment."),
    "SOURCE_COUNTS": ("The review identifies 373 answerable, 24 unanswerable and three ambiguous questions; 355 "
                      "original references are supported, 38 unsupported and seven mismatched to the question."),
    # L1586-1587: which questions each metric uses (summary: complete + EOS and the transitions on the
    # source-answerable questions; the match and termination metrics on all).
    "ANSWERABLE_SCOPE": ("Source completeness with normal EOS uses the 373 source-answerable questions, while "
                         "original-reference metrics retain all 400."),
    # L4301-4304 (Table tab:v52_mquake_retained, note): the fallback and its oracle (summary ``fallback``).
    "FALLBACK": ("Its routing re-answers from the recomputed cache when the source-masked answer reaches the token "
                 "limit, and its oracle picks the better of the source mask and recomputation."),
    # L4317-4322: the paper's fallback result.
    "FALLBACK_RESULT": ("a fallback that re-answers from the recomputed cache after a capped source-masked answer "
                        "does not exceed recomputation alone"),
    # L4339-4341: the component bootstrap of the generated-token ratios (``unfinished.token_ratios``).
    "TOKEN_BOOTSTRAP": ("generated-token ratios use a bootstrap over 319 components of questions that share an "
                        "original MQuAKE case (10,000 draws)"),
    # L4344-4346: the search-loop rule (``unfinished.search_loop``; RECHECK_PHRASES, FACT_CITATION, SEARCH_LOOP_MIN).
    "SEARCH_LOOP": ("A search loop reaches the 1,024-token limit without a boxed answer, contains at least three "
                    're-check phrases such as "let me check" or "wait", and cites one fact number at least three '
                    "times."),
    # L4346-4347: the verbatim-loop rule (``unfinished.verbatim_loop``; NGRAM, NGRAM_UNIT, REPEATED_SHARE).
    "VERBATIM_LOOP": "A verbatim loop has more than half of its 8-grams repeated.",
    # L4347-4349: the quotation rule (``unfinished.quotes_masked_record``).
    "QUOTES_MASKED": ("A response quotes a masked record when one line cites a superseded record's fact number "
                      "together with that record's subject and old value."),
    # L4355-4356 (table caption): box-only and same style (``unfinished.style``).
    "BOX_ONLY": "A box-only answer consists of a single boxed answer.",
    "SAME_STYLE": "Same style compares each output with the full-access output for the same question.",
}

# ----------------------------------------------------------------------------- unfinished generation (L4331-4465)
# The lexical rules' parameters. The paper names its re-check phrases by example only ("such as 'let me check' or
# 'wait'", L4345-4346): UNCLEAR, ours: exactly those two, matched case-insensitively as whole words, every
# occurrence counted.
RECHECK_PHRASES = ("let me check", "wait")
#: "at least three re-check phrases" and "cites one fact number at least three times" (L4345-4346).
SEARCH_LOOP_MIN = 3
# How a response cites a fact number: UNCLEAR (the paper does not say); ours: "fact 12", "facts 12", "fact #12",
# "fact number 12", "fact no. 12", "record 12", "serial number 12", "#12", "[12]", or a line that starts with the
# number as the history writes it ("12. ...", "- 12. ...", "(12) ...").
FACT_CITATION = (r"(?:\b(?:facts?|records?|serial\s+number|number|no\.)\s*#?\s*(?P<a>\d+)\b)"
                 r"|(?:#(?P<b>\d+)\b)|(?:\[(?P<c>\d+)\])"
                 r"|(?:^[ \t]*(?:[-*>][ \t]*)?\(?(?P<d>\d+)[.):](?:\s|$))")
#: "8-grams" (L4347): n; their unit (UNCLEAR: tokens or words; ours: whitespace-separated words, as the stored
#: rows keep the text, not the token ids) and the share "more than half" (strictly above).
NGRAM = 8
NGRAM_UNIT = "words"
REPEATED_SHARE = 0.5

#: Prefill chunk in tokens (L1552-1553 "Prefill uses 128-token chunks"), for the history and the recompute.
PREFILL_CHUNK = 128
