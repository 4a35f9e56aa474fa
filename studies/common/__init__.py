"""The shared study machinery: the protocol every study runs on, the runner, the registry of
studies, answer parsing and grading, statistics-backed reports, figures, the judge and the scorecard."""
