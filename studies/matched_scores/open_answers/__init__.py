"""Open OAKS answers (paper app:v41_oaks_open): option-free generation and the source-aware grader."""
