"""Exact strings of the matched-scores study, quoted verbatim from the paper.

Source: "Positions Are Not Facts", appendix
"Candidate Scores and Generated Answers Under Matched Conditions" (app:v7_bridge, seed
L5561-5693) and the prompt assembly of the natural-source panels (seed L1302-1306).
``PAPER_STRINGS`` lists every quoted string as the paper prints it
(``tests/test_paper_strings.py`` checks each against the seed). Strings the paper does not
give are marked UNCLEAR with our choice.

The record histories themselves (system instruction, ``Ordered records:`` / ``Time 1:`` /
``Other record:`` / ``Time 2:`` / ``Question:``) are those of
:mod:`kvprobe.studies.common.detectors.strings`, laid out by :mod:`kvprobe.studies.datasets.record_histories`.
"""

# The notebook note, its repetitions and the chat template date are the record histories' own strings
# (kvprobe.studies.common.detectors.strings: NOTEBOOK_NOTE, NOTE_REPEATS, TEMPLATE_DATE).

# Seed L5616-5617: each score sums the log-probabilities of the canonical ``{"answer": "value"}`` string,
# without a prepended space or EOS. Filled with json.dumps(..., ensure_ascii=False) (same text for ASCII values).
CANONICAL_ANSWER = '{"answer": "value"}'


# ---------------------------------------------------------------------- OAKS native generation
# Seed L1302-1306: the natural-source prefix, segment by segment ("\n" is a newline).
EARLIER_SOURCE = "Earlier source:\n{old}"
UNRELATED_SOURCE = "\nUnrelated source:\n{neutral}"
LATER_SOURCE = "\nLater source:\n{later}"

# Seed L5653-5656 prints the candidates as "Candidate A: ..." and "Candidate B: ...", without temporal-role
# labels. UNCLEAR (paper): the rest of the question layout. Ours: the question, then one candidate per line.
CANDIDATES = "Candidate A: {a}\nCandidate B: {b}"
QUESTION = "Question: {query}\n" + CANDIDATES
#: The letters the model chooses from, and the abstention (seed L5648-5649: "a JSON A/B/UNKNOWN answer").
LETTERS = ("A", "B")
UNKNOWN_ANSWER = "UNKNOWN"

# UNCLEAR (paper, seed L5645-5646: "The native system instruction asks for the state after the later
# source"; its wording is not printed). Ours, worded like the record-history instruction.
OAKS_SYSTEM = ("Read the sources in order. Answer the question for the state of the story after the later "
               "source, choosing one of the two candidates. Return only JSON with one field: "
               '{"answer": "A"} or {"answer": "B"}. If it cannot be determined, use {"answer": "UNKNOWN"}.')

#: Every string above that the paper prints, as it prints it.
PAPER_STRINGS: dict[str, str] = {
    "CANONICAL_ANSWER": CANONICAL_ANSWER,
    # The paper prints the newlines as "\\n".
    **{name: text.replace("\n", "\\n") for name, text in (("EARLIER_SOURCE", EARLIER_SOURCE),
                                                           ("UNRELATED_SOURCE", UNRELATED_SOURCE),
                                                           ("LATER_SOURCE", LATER_SOURCE))},
    # Seed L5653-5655 (Qwen3-4B, P37_q01), filled into our layout.
    "CANDIDATES": CANDIDATES.format(a="Able to move their arms and legs and heads about in a way which was neither "
                                      "walking nor running nor sitting down", b="Able to walk and dig a little"),
}
