"""The quantity and endpoint factorial (paper app:v17_scope, app:v35_factorial): source information x question
wording x neutral note x five access conditions on the synthetic record histories."""
