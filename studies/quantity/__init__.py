"""The quantity task (paper section 3): exact strings and a one-history demo."""
