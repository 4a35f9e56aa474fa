"""Exact strings of the role-matched source-influence study, in one place.

Paper: "Positions Are Not Facts", appendix on prompt assembly
(L1302-1311): "Their prefix concatenates ``Earlier source:\\n{old}``,
``\\nUnrelated source:\\n{neutral}``, ``\\nLater source:\\n{later}``, and
``\\nQuestion: {query}\\nAnswer:``, followed by scoring the same two answer options
... No special tokens are added. For tokenizers that preserve segment encodings when
concatenated, segments are encoded independently. Mistral prefixes are instead
encoded once". Everything else is ours and marked UNCLEAR.
"""

# The four prompt segments, verbatim (L1303-1306). Each is encoded on its own (the paper's
# default) or the whole prefix at once (its Mistral variant).
EARLIER_SOURCE = "Earlier source:\n{old}"
UNRELATED_SOURCE = "\nUnrelated source:\n{neutral}"
LATER_SOURCE = "\nLater source:\n{later}"
QUESTION = "\nQuestion: {query}\nAnswer:"

# UNCLEAR (paper): the question wording. Ours: the record's entity and attribute in the
# family's first slot phrasing, as the recognition study's signed leave-one-out question.
QUERY = "What is {slot} now?"

# UNCLEAR (paper): whether the options follow "Answer:" with a space. Ours: one space, as
# a natural continuation of "Answer:" (a parameter: --option-prefix).
OPTION_PREFIX = " "

# UNCLEAR (paper): the unrelated source's text. Ours: two copies of the neutral note sentence
# of the quantity study (no value, no entity), long enough for every old record's tokens.
NEUTRAL_SOURCE = ("A square seal is printed beside a blank signature box. The cover is gray and the folder is "
                  "closed. A square seal is printed beside a blank signature box. The cover is gray and the "
                  "folder is closed.")

# Native format (L2015-2025; spec partA section 7): the raw concatenation as one user message,
# no system message, thinking off (seed L1868: "Qwen thinking is disabled"; the template settings
# are kvprobe.studies.common.chat_template's). UNCLEAR (paper): where the options go relative to the
# assistant turn; ours: right after the assistant header, without a leading space. Templates
# that insert their own default system message when none is given (SmolLM2, Qwen2.5) keep it.
