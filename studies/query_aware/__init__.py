"""Query-aware alternatives to a fixed mask at matched capacity: Quest, FINCH, RefreshKV (paper partE E4)."""
