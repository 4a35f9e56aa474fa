"""Role-matched source influence (paper appendix "Role-Matched Source Influence"; spec partA sections 5 and 7)."""
