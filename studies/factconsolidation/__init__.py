"""FactConsolidation (MemoryAgentBench; paper appendices "Current Answers after Accumulated Fact Updates" and
"Why Net Accuracy Changes Differ between the Two Models"; spec partA section 3).

Data: the released schema and reader (``schema``), a generated offline set in it (``generate``), rows
grouped into histories (``histories``), numbered sentences mapped to MQuAKE relations with the latest
conflicting fact winning (``mapping``). Run: ``study``. Grading: ``rule_grader`` (the rule grader),
``grading`` (the LLM path); analysis: ``outcomes`` (capped-first net accuracy) and ``summary``. Exact
strings: ``strings``.
"""
