"""The synthetic record-history study (paper partD section 3): seven policies, three queries."""
