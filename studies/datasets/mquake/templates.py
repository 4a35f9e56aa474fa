"""MQuAKE's relation templates and the phrases our case generator builds on (shared by the MQuAKE and
FactConsolidation studies).

Relation templates: princeton-nlp/MQuAKE @ fb43dadc2d8c, ``prompts/templates/cloze_templates.json``
and ``question_templates.json`` (MIT), read at run time from the mquake data set (kvprobe data) for the relations
the generator uses. The noun phrases and question words are ours and marked UNCLEAR.
"""

import functools
import json
from pathlib import Path

from kvprobe.data import data_dir

#: Where the upstream relation templates live (read at run time; not copied into the repository).
def template_file(kind: str) -> Path:
    """MQuAKE's ``{kind}_templates.json`` (cloze or question; the ``mquake`` data set of :mod:`kvprobe.data`)."""
    return data_dir("mquake") / "prompts" / "templates" / f"{kind}_templates.json"


#: Wikidata relations the generator uses (their cloze and question templates: :func:`template_file`).
RELATIONS = ("P17", "P19", "P26", "P27", "P35", "P36", "P37", "P108", "P112", "P159", "P169", "P1412")


@functools.lru_cache(maxsize=None)
def _templates(kind: str) -> dict[str, str]:
    path = template_file(kind)
    if not path.exists():
        raise FileNotFoundError(f"MQuAKE {kind} templates not found at {path} (`kvprobe data pull mquake`)")
    table = json.loads(path.read_text())
    missing = [r for r in RELATIONS if r not in table]
    if missing:
        raise ValueError(f"{path} lacks templates for relations {missing}")
    return {r: table[r] for r in RELATIONS}


def cloze_template(relation_id: str) -> str:
    """Upstream cloze template of a relation, verbatim ([X] subject, __ object)."""
    return _templates("cloze")[relation_id]


def question_template(relation_id: str) -> str:
    """Upstream single-hop question template of a relation, verbatim ([X] subject)."""
    return _templates("question")[relation_id]



# UNCLEAR (upstream): the released multi-hop questions were written by gpt-3.5-turbo and no
# templates ship. Ours: two noun phrases per relation ({} = the subject phrase), nested to
# form the three paraphrases (see generate.multihop_questions).
# The second phrase of a relation must differ from its upstream question template phrase.
NOUN_PHRASES = {
    "P17": ("the country where {} is located", "the country in which {} lies"),
    "P19": ("the city where {} was born", "the birthplace of {}"),
    "P26": ("the spouse of {}", "the person married to {}"),
    "P27": ("the country of citizenship of {}", "the country that {} is a citizen of"),
    "P35": ("the head of state of {}", "the person who is head of state of {}"),
    "P36": ("the capital of {}", "the capital city of {}"),
    "P37": ("the official language of {}", "the language that is official in {}"),
    "P108": ("the employer of {}", "the company that employs {}"),
    "P112": ("the founder of {}", "the person who founded {}"),
    "P159": ("the headquarters city of {}", "the city where {} has its headquarters"),
    "P169": ("the chief executive officer of {}", "the CEO of {}"),
    "P1412": ("the language spoken by {}", "the language that {} speaks"),
}
# Relation labels as in orig.triples_labeled (upstream uses Wikidata property labels).
RELATION_LABELS = {
    "P17": "country", "P19": "place of birth", "P26": "spouse", "P27": "country of citizenship",
    "P35": "head of state", "P36": "capital", "P37": "official language", "P108": "employer",
    "P112": "founded by", "P159": "headquarters location", "P169": "chief executive officer",
    "P1412": "languages spoken, written or signed",
}
# Question word of the second paraphrase by answer type.
TYPE_QUESTION = {"person": "Who is {}?", "country": "Which country is {}?", "city": "Which city is {}?",
                 "language": "Which language is {}?", "company": "Which company is {}?"}
THIRD_PARAPHRASE = "What is the name of {}?"


def cloze(relation_id: str, subject: str) -> str:
    """The cloze statement without its object, as in ``single_hops[*].cloze``."""
    return cloze_template(relation_id).replace(" __", "").replace("[X]", subject)


def rewrite_prompt(relation_id: str) -> str:
    """The ``requested_rewrite[*].prompt`` form: subject as ``{}``."""
    return cloze_template(relation_id).replace(" __", "").replace("[X]", "{}")


def single_hop_question(relation_id: str, subject: str) -> str:
    return question_template(relation_id).replace("[X]", subject)


def fact_sentence(cloze_text: str, obj: str) -> str:
    """A completed cloze: ``'<cloze> <object>.'``."""
    return f"{cloze_text} {obj}."
