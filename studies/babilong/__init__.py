"""BABILong object dependencies (paper section 2): bAbI parser, masking rules, symbolic verifier."""
