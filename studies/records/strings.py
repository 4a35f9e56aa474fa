"""Paper strings and anchor numbers of the record-history study's value, error and control tables.

Source: "Positions Are Not Facts", appendices "Query
Preservation and Generation Errors" (app:v7_errors, seed L5510-5517), "Correct Values and Complete
Units" (app:v8_units, seed L5539-5549) and the matched-score experiment's control note (app:v7_bridge,
seed L5574-5577, Table tab:v7_bridge L5620). ``PAPER_STRINGS`` lists every quoted string
(``tests/test_paper_strings.py`` checks each against the seed). The record histories' own strings
(header, Time labels, system message, queries) are :mod:`kvprobe.studies.common.detectors.strings`.
"""

from __future__ import annotations

# The neutral note (NOTEBOOK_NOTE, repeated NOTE_REPEATS times) is the record histories' own string:
# kvprobe.studies.common.detectors.strings, inserted by kvprobe.studies.datasets.record_histories.with_note.

# Seed L5515-5516: "Llama detector-mask produces seven instances of {"answer": UNKNOWN}, which are invalid
# because the value is unquoted".
UNQUOTED_UNKNOWN = '{"answer": UNKNOWN}'

#: Every string above that the paper prints, as it prints it.
PAPER_STRINGS: dict[str, str] = {
    "UNQUOTED_UNKNOWN": UNQUOTED_UNKNOWN,
}

# ----------------------------------------------------------------------------- anchor numbers (3B-8B generators)
#: Current-query reversals of oracle-mask against keep-all, split as the paper splits them (seed L5511-5514):
#: (generator, reversals, omitted hours units, UNKNOWN, other values).
REVERSAL_ANCHORS = (("Qwen3-4B", 26, 17, 5, 4), ("Qwen3-8B", 17, 11, 6, 0))
#: Unquoted ``{"answer": UNKNOWN}`` outputs (seed L5515-5517): Llama-3.2-3B detector-mask 7, oracle-mask 0.
UNQUOTED_ANCHOR = ("Llama-3.2-3B", {"detector-mask": 7, "oracle-mask": 0})
#: Current queries, keep-all / oracle-mask, of 300 (seed L5539-5542): (generator, matching values,
#: correct-magnitude unit omissions).
VALUE_ANCHORS = (("Qwen3-4B", (297, 288), (2, 19)), ("Qwen3-8B", (295, 290), (20, 31)),
                 ("Llama-3.2-3B", (248, 251), (50, 51)))
#: Old mask against the equal-token control on the 150 replacement cases (seed L5545-5549 and Table
#: tab:v7_bridge, L5620): (generator, matching values control -> mask, exact change pp, C/R, reversals
#: omitting hours, reversals giving UNKNOWN).
CONTROL_ANCHORS = (("Qwen3-4B", "150 -> 147", "-5.3 [-8.7, -2.0]", "0 / 8", 5, 3),
                   ("Qwen3-8B", "150 -> 148", "-11.3 [-18.7, -4.7]", "0 / 17", 15, 2),
                   ("Llama-3.2-3B", "", "+0.7 [-2.0, 3.3]", "3 / 2", 0, 0))
