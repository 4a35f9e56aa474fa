"""The paper's Llama-3.2-3B numbers for the note-control configurations, quoted from the seed.

Counts are correct unrelated-label answers of 240 (120 groups x 2 information conditions); changes
are percentage points with their 95% group-bootstrap intervals; margins are the mean first-value
log-probability difference (correct label vs UNKNOWN, nats).
"""

from __future__ import annotations

MODEL = "Llama-3.2-3B"
N = 240

#: Correct answers of 240 per configuration: tab:v35_control_all (seed L5290-5297) for the 14
#: configurations, L3850-3851 for near/far, tab:v41_note_controls (L5408-5410) for the note ablations.
COUNTS = {
    "full": 146, "early": 8, "middle": 163, "late": 149, "sentence-end": 8, "all-note": 39, "whole-a": 199,
    "plain-full": 137, "plain-early": 5, "explicit-full": 240, "explicit-early": 240, "no-unknown-full": 240,
    "no-unknown-early": 240, "no-note-full": 65, "near": 8, "far": 146, "preserve-first-four": 18,
    "first-four": 143, "last-four": 155, "varied-full": 218, "varied-early": 186, "varied-preserve-first-four": 194,
    "varied-first-four": 211, "varied-last-four": 211,
}

#: Mean first-value margins (L3896-3899): full / original control, explicit question, no-UNKNOWN clause.
MARGINS = {"full": 0.205, "early": -3.050, "explicit-full": 11.304, "explicit-early": 8.477,
           "no-unknown-full": 13.019, "no-unknown-early": 11.526}

#: Far minus near (L3850-3853): +57.5 pp [49.58, 65.42], 138 corrections, 0 reversals; tab:v35_positions
#: (L5332) prints the interval as [49.6, 65.0] and the margin change +3.10 [2.98, 3.22] nats.
NEAR_FAR = {"pp": 57.5, "ci": (49.58, 65.42), "ci_table": (49.6, 65.0), "corrections": 138, "reversals": 0,
            "margin": 3.10, "margin_ci": (2.98, 3.22)}

#: The gray->plain control-effect interaction (L3862-3863): +2.5 pp [-0.42, 5.42].
PLAIN_INTERACTION = {"pp": 2.5, "ci": (-0.42, 5.42)}

#: Early-mask loss and the preserve-first-four gain per note profile (L5417-5420), pp.
NOTE_PROFILES = {
    "repeated": {"loss": (-57.50, -65.42, -50.00), "preserve": (4.17, 2.08, 6.67)},
    "varied": {"loss": (-13.33, -17.92, -9.17), "preserve": (3.33, 1.25, 5.83)},
}

#: Sign disagreements of the first-value margin with greedy outputs over 3,360 outputs (L3904-3907).
DISAGREEMENT = {"outputs": 3360, "disagreements": 39, "zero_ties_among_them": 23, "nonzero": 16,
                "nonzero_range": (-0.125, 0.25), "zero_ties": 37}

#: Current question on the 60 unit-dependent replacement cases, full / whole / number (L5433-5436);
#: Llama-3.2-3B's are not given.
CURRENT = {"Qwen3-4B": {"repeated": (60, 23, 60), "varied": (60, 17, 60)},
           "Qwen3-32B": {"repeated": (60, 36, 60), "varied": (60, 28, 60)}}
