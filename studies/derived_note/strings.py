"""Strings of the derived-note / selective-refresh study, in one place.

Source: "Positions Are Not Facts", appendix "Recomputing States
After a Derived Note" (label app:v5_propagation, paper lines 5819-5870; spec
partD section 8). The paper describes the records only in prose ("a rule mapping
two zones to two routes, an old zone A, its correctly derived Time-1 route C,
and an authoritative Time-2 zone update B") and publishes none of the strings,
so **every template here is ours (UNCLEAR in the paper)**, written to follow
that description. Names are fictional and generated (``data.py``).
"""

#: UNCLEAR (paper): the system message is not given for this study. This is the
#: verbatim system message of the paper's synthetic record histories (spec partD
#: section 3), which asks for the same one-field JSON answer and the UNKNOWN fallback.
SYSTEM = (
    "Use the ordered authoritative records. A later entry changes only the entity and attribute it "
    "concerns. Distinguish affirmed values from rejected alternatives. For a historical question use the "
    'requested time. Return only JSON with one field: {"answer": "the exact queried value"}. If it cannot '
    "be determined, use UNKNOWN."
)

#: UNCLEAR (paper): user-message layout. Ours follows spec partD section 3
#: ("Ordered records:" header, newline-separated records, two newlines, then
#: "Question:" and the question).
HEADER = "Ordered records:"
SEGMENT_SEP = "\n"
QUESTION_SEP = "\n\n"
QUESTION_PREFIX = "Question: "

#: UNCLEAR (paper): record wording. The rule lists the two zones in the group's
#: counterbalanced order (old zone first or second).
RULE = "Routing rule: shipments to zone {zone1} use route {route1}; shipments to zone {zone2} use route {route2}."
RECORD_A = "At Time 1, the depot of {entity} is in zone {old_zone}."
DERIVED_NOTE = "So at Time 1, {entity} ships by route {old_route}."
RECORD_B = "At Time 2, the depot of {entity} moved to zone {new_zone}."

#: UNCLEAR (paper): question wording. Current: the route after B; historical: the zone before B.
CURRENT_QUESTION = "At Time 2, after the move, which route does {entity} ship by?"
HISTORICAL_QUESTION = "At Time 1, before the Time 2 move, which zone was the depot of {entity} in?"

#: UNCLEAR (paper): the neutral note is not published. Ours names no zone, route,
#: depot, time or entity; its first N tokens replace the C interval (``history.py``).
NEUTRAL_SENTENCES = (
    "The break room has a green kettle, two folding chairs and a calendar with photographs of lighthouses.",
    "A small fern sits on the windowsill, and a radio plays quietly in the afternoon.",
    "Someone left a striped umbrella by the door next to a basket of wool scarves.",
)
NEUTRAL_REPETITIONS = 3

#: UNCLEAR (paper): fictional name parts. Zones are two or three syllables,
#: entities a made-up place name plus a trade word.
ZONE_SYLLABLES = ("kel", "var", "po", "me", "ru", "tan", "dor", "ilo", "sev", "qui", "bren", "ost",
                  "ula", "zen", "fai", "rho", "lin", "tes", "gar", "nov", "eth", "mir", "cal", "dra")
ENTITY_STEMS = ("Tarn", "Bel", "Holm", "Quen", "Vard", "Ost", "Lum", "Corr", "Fen", "Mar", "Sil", "Brack",
                "Dun", "Ell", "Grav", "Wyn")
ENTITY_ENDINGS = ("wick", "ford", "mere", "stead", "holt", "by", "ton", "moor")
ENTITY_TRADES = ("Supply", "Freight", "Traders", "Outfitters", "Mills", "Provisions", "Hardware", "Textiles")
ROUTE_FORMAT = "R-{number}"
ROUTE_NUMBERS = range(10, 100)


def neutral_note() -> str:
    """The long neutral note whose leading tokens replace the C interval."""
    return " ".join(list(NEUTRAL_SENTENCES) * NEUTRAL_REPETITIONS)
