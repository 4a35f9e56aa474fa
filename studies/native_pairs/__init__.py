"""The native record-pair study (paper seed L2173-2190, L2312-2386, table tab:v39_native_pairs; spec partB D2):
record pairs without a question, scored on native forward paths by key similarity (matching) and V distance
(replacement), on an intrinsic and a controlled-history panel, with a connected-component bootstrap."""
