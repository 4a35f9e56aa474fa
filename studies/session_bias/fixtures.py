"""Seeded synthetic multi-session histories in the LongMemEval schema (ours, for offline runs and tests).

Each *base* history is 3-5 dated sessions (timestamp order) of short user /
assistant exchanges about one user's life; filler exchanges (small talk) pad
every session. Bases cycle through four question types:

* ``knowledge-update``: an earlier session states a fact (e.g. the user's city),
  a later one updates it; the question asks for the current value (no gate word,
  so the session bias is active);
* ``temporal-reasoning``: the same kind of update; the question asks for the
  value *before* the update, worded with a gate word ("before", "originally",
  "first", "previously"), so the bias is gated off;
* ``single-session-user``: a fact the user stated once, in one session;
* ``single-session-assistant``: something the assistant recommended once.

Knowledge-update and single-session-user bases also get an abstention variant
(id ``<base>_abs``, same sessions, same type) asking about something never
mentioned; its ``answer`` is an explanation, as in LongMemEval. Ids are
``fx<seed>-<8 hex>`` from SHA-256 of ``(seed, index)``; dates are
``"YYYY/MM/DD (Ddd) HH:MM"`` as in LongMemEval. Turns that state the answer have
``has_answer: true``; ``answer_session_ids`` name their sessions. Everything is
drawn from ``random.Random(seed)``. With SmolLM2's tokenizer a rendered history
is about 150-400 tokens.

``fillers`` > 0 (ours, for the fixed-capacity comparison: LongMemEval-Oracle histories are thousands of
tokens, so the paper's 512-token capacity binds there, and it would not on 400 tokens) pads every session
with that many extra small-talk exchanges from :data:`LONG_FILLERS` (longer assistant replies, none about
the facts asked), drawn without repeats within a session, and shuffles each session's exchanges, from a
generator of its own (``random.Random(f"{seed}:{index}:fillers")``), so the default fixtures (``fillers=0``)
are unchanged and the padded ones keep every base's facts, dates, ids and questions. An abstention
variant gets its base's padded sessions.
"""

from __future__ import annotations

import hashlib
import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

#: 20260919, the paper's interval seed reused for the appendix fixtures (every generated fixture
#: of the components, derived-note and session-bias studies); also the study's default seed.
SEED = 20260919

from .data import Question, parse_questions, write_questions

N_BASES = 24
BASE_TYPES = ("knowledge-update", "temporal-reasoning", "single-session-user", "single-session-assistant")
WITH_ABSTENTION = ("knowledge-update", "single-session-user")
DATE_FORMAT = "%Y/%m/%d (%a) %H:%M"

#: Updatable attributes: statement, update statement, current question, earlier-value questions
#: (each holds a gate word), values.
UPDATES: dict[str, dict[str, Any]] = {
    "city": {
        "state": "I just settled into my new apartment in {v}. The neighborhood is quiet.",
        "update": "Big news: I moved again, and I now live in {v}.",
        "current": "Which city do I live in now?",
        "earlier": ("Which city did I live in before I moved to {new}?", "Which city did I originally live in?"),
        "values": ("Lisbon", "Denver", "Osaka", "Tallinn", "Porto", "Calgary", "Leeds", "Valencia"),
    },
    "car": {
        "state": "I bought a {v} last week and it drives really smoothly.",
        "update": "I sold my old car and got a {v} instead.",
        "current": "What car do I drive now?",
        "earlier": ("What car did I drive before the {new}?", "Which car did I previously own?"),
        "values": ("Honda Civic", "Toyota Corolla", "Subaru Outback", "Mazda 3", "Ford Focus", "Kia Soul"),
    },
    "gym": {
        "state": "I signed up for a membership at {v} near my office.",
        "update": "I cancelled my old gym and joined {v} instead.",
        "current": "Which gym am I a member of now?",
        "earlier": ("Which gym was I a member of before {new}?", "Which gym did I first join?"),
        "values": ("Iron Peak Fitness", "Blue Wave Gym", "Summit Athletics", "Core Studio", "Pulse Fitness"),
    },
    "job": {
        "state": "I started working as a {v} this month and I like my team.",
        "update": "I changed jobs, and I am now working as a {v}.",
        "current": "What is my job now?",
        "earlier": ("What was my job before I became a {new}?", "What job did I originally have?"),
        "values": ("nurse", "graphic designer", "teacher", "accountant", "librarian", "chef"),
    },
    "coffee": {
        "state": "My usual coffee order is a {v} with oat milk.",
        "update": "I switched my usual coffee order to a {v}.",
        "current": "What is my usual coffee order these days?",
        "earlier": ("What was my usual coffee order before the {new}?", "What was my coffee order previously?"),
        "values": ("flat white", "cappuccino", "cold brew", "latte", "mocha", "americano"),
    },
}

#: Facts stated once: statement, question, values, and the abstention question (never answered).
ONCE: dict[str, dict[str, Any]] = {
    "dog": {"state": "My dog is called {v}, and he loves the park.", "question": "What is my dog's name?",
            "values": ("Biscuit", "Pepper", "Maple", "Rocket", "Juniper", "Mochi"),
            "abstain": "What is my cat's name?", "missing": "a cat"},
    "sister": {"state": "My sister {v} is visiting me next weekend.", "question": "What is my sister's name?",
               "values": ("Clara", "Nadia", "Ingrid", "Priya", "Sofia", "Hana"),
               "abstain": "What is my brother's name?", "missing": "a brother"},
    "instrument": {"state": "I have been learning to play the {v} for a few months.",
                   "question": "Which instrument am I learning to play?",
                   "values": ("cello", "ukulele", "trumpet", "banjo", "violin", "flute"),
                   "abstain": "Which language am I learning?", "missing": "learning a language"},
}

#: Recommendations by the assistant: user request, assistant reply, question, values.
RECOMMEND: dict[str, dict[str, Any]] = {
    "book": {"ask": "Can you suggest a short novel for my train trip?",
             "reply": "I recommend {v}, a short mystery that is easy to read on a train.",
             "question": "Which novel did you recommend for my train trip?",
             "values": ("The Silent Orchard", "Paper Lanterns", "A Map of Tides", "The Glass Harbor")},
    "trail": {"ask": "Do you know a good hiking trail for a beginner?",
              "reply": "Try the {v}; it is flat, shaded and about five kilometers long.",
              "question": "Which hiking trail did you suggest for a beginner?",
              "values": ("Cedar Loop", "Fox Hollow Path", "Riverbend Trail", "Pine Ridge Walk")},
    "recipe": {"ask": "What should I cook for a quick weeknight dinner?",
               "reply": "A {v} is quick: it takes about twenty minutes with basic ingredients.",
               "question": "Which dish did you suggest for a quick weeknight dinner?",
               "values": ("lemon garlic pasta", "chickpea curry", "vegetable stir fry", "mushroom risotto")},
}

#: Acknowledgements the assistant gives after a user statement.
ACKS = ("That sounds great, thanks for telling me!", "Good to know, I will keep that in mind.",
        "Nice! Let me know if I can help with anything.", "Thanks for the update.")

#: Small-talk exchanges (user, assistant) that pad every session.
FILLERS = (
    ("Any tip for keeping basil alive on a windowsill?", "Water it when the top soil is dry and give it lots of sun."),
    ("How long should I steep green tea?", "About two to three minutes in water just below boiling."),
    ("Can you give me a quick stretching idea for my desk?", "Roll your shoulders and stretch your neck gently."),
    ("What is a good way to remember birthdays?", "Put them in a shared calendar with a reminder."),
    ("How do I stop my glasses from fogging up?", "A drop of dish soap, rinsed and dried, helps a lot."),
    ("Any idea for a rainy afternoon?", "A board game or a new podcast works well on rainy days."),
    ("What is an easy houseplant for a dark room?", "A snake plant copes well with little light."),
    ("How can I fall asleep faster?", "Keep a regular bedtime and avoid screens late in the evening."),
)


#: Longer small-talk exchanges that pad the sessions of ``fillers`` > 0 (about 45-70 tokens each).
LONG_FILLERS = (
    ("Do you have any advice for keeping a small herb garden going through the winter?",
     "Move the pots to your brightest window, water less often than in summer, and turn them every few days "
     "so they grow evenly. A small grow light helps a lot when the days get short."),
    ("What is a simple way to start journaling every day?",
     "Keep it short: write three sentences each evening about what happened and how you felt. Leave the "
     "notebook somewhere visible, and do not worry about writing well."),
    ("How can I make my mornings less rushed?",
     "Prepare what you can the night before, such as clothes and breakfast, and set one alarm instead of "
     "several. Starting ten minutes earlier often removes most of the stress."),
    ("Any tips for a long drive so I do not get too tired?",
     "Take a short break every two hours, drink water, and keep the cabin a little cool. Light snacks are "
     "better than a heavy meal, and a podcast can help you stay alert."),
    ("How do I get better at remembering names when I meet people?",
     "Repeat the name once in conversation, link it to something about the person, and write it down "
     "afterwards if you can. Most people forget names because they never rehearse them."),
    ("What should I pack for a weekend camping trip?",
     "A tent, a warm sleeping bag, a headlamp, layers of clothing, a first aid kit, water, and simple food "
     "that needs little cooking. Check the weather forecast before you leave."),
    ("Can you explain how to brew good tea at home?",
     "Use fresh water, warm the pot first, and follow the steeping time for the tea type: black tea likes "
     "boiling water, while green and white teas prefer cooler water and shorter times."),
    ("How do I keep my inbox under control?",
     "Check email at set times rather than all day, archive anything you do not need to act on, and reply "
     "right away to messages that take less than two minutes."),
    ("What is a good stretching routine after a walk?",
     "Stretch your calves against a wall, then your hamstrings and hip flexors, holding each stretch for "
     "about thirty seconds. Breathe slowly and never bounce into a stretch."),
    ("Any ideas for a relaxing evening at home?",
     "Cook something simple, put your phone in another room, and read or listen to music for an hour. A "
     "warm shower before bed also helps many people unwind."),
    ("How can I save a bit more money each month?",
     "Track your spending for a month to see where it goes, cancel subscriptions you rarely use, and move a "
     "fixed amount to savings on payday before you can spend it."),
    ("How can I keep a bunch of flowers fresh for longer?",
     "Trim the stems at an angle, remove leaves below the waterline, and change the water every two days. "
     "Keeping the vase away from sunlight and ripe fruit also helps."),
    ("How often should I clean my kitchen sponge?",
     "Rinse it well after each use and let it dry. Many people replace a sponge every week or two, because "
     "bacteria build up quickly in a damp sponge."),
    ("Do you have a tip for writing a clear email?",
     "Put the main request in the first sentence, keep paragraphs short, and end with what you need and by "
     "when. Reading it once aloud before sending catches most mistakes."),
    ("What helps with a stiff neck after working at a laptop?",
     "Raise the screen to eye level, take short breaks to roll your shoulders, and keep your elbows close to "
     "your body. Gentle heat can relax the muscles in the evening."),
    ("How do I choose a good watermelon?",
     "Look for a creamy yellow spot where it rested on the ground, a heavy weight for its size, and a deep, "
     "hollow sound when you tap it."),
    ("Any advice for a first pottery class?",
     "Wear clothes that can get muddy, keep your nails short, and expect your first pieces to be uneven. "
     "Centering the clay on the wheel takes practice, so be patient."),
    ("How do I stay focused when studying at home?",
     "Work in blocks of about twenty-five minutes with short breaks, keep your phone out of reach, and "
     "decide before you start exactly what you want to finish."),
    ("What is a good way to organize a small closet?",
     "Take everything out, keep only what you wear, group clothes by type, and use the same hangers for "
     "everything. Boxes on the top shelf hold things you rarely need."),
    ("Can you suggest a way to make plain rice more interesting?",
     "Cook it in stock instead of water, add a bay leaf or some garlic, and finish it with butter, herbs or a "
     "squeeze of lime. Toasting the rice first adds a nutty taste."),
)


def _question_id(seed: int, index: int) -> str:
    return f"fx{seed}-" + hashlib.sha256(f"{seed}:{index}".encode()).hexdigest()[:8]


def _turn(role: str, content: str, evidence: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {"role": role, "content": content}
    if evidence:
        out["has_answer"] = True
    return out


def _sessions(rng: random.Random, n_sessions: int, evidence: dict[int, list[dict[str, Any]]]
              ) -> list[list[dict[str, Any]]]:
    """Sessions of filler exchanges; the evidence exchanges of session i come first in it."""
    fillers = rng.sample(FILLERS, len(FILLERS))
    out = []
    for i in range(n_sessions):
        turns = list(evidence.get(i, []))
        if not turns or rng.random() < 0.5:
            user, assistant = fillers[i % len(fillers)]
            turns += [_turn("user", user), _turn("assistant", assistant)]
        out.append(turns)
    return out


def _dates(rng: random.Random, n_sessions: int) -> tuple[list[str], str]:
    """Increasing session dates and a later question date."""
    t = datetime(2023, 1, 1) + timedelta(days=rng.randrange(0, 300), minutes=rng.randrange(8 * 60, 22 * 60))
    dates = []
    for _ in range(n_sessions):
        dates.append(t.strftime(DATE_FORMAT))
        t += timedelta(days=rng.randrange(2, 30), minutes=rng.randrange(-120, 120))
    return dates, t.strftime(DATE_FORMAT)


def _pad(sessions: list[list[dict[str, Any]]], fillers: int, seed: int, index: int) -> list[list[dict[str, Any]]]:
    """Each session with ``fillers`` more exchanges of :data:`LONG_FILLERS`, its exchanges shuffled (module
    docstring); a generator of its own, so the base's draws are unchanged."""
    if fillers > len(LONG_FILLERS):
        raise ValueError(f"fillers must be at most {len(LONG_FILLERS)}, got {fillers}")
    rng = random.Random(f"{seed}:{index}:fillers")
    out = []
    for turns in sessions:
        pairs = [turns[i:i + 2] for i in range(0, len(turns), 2)]
        pairs += [[_turn("user", u), _turn("assistant", a)] for u, a in rng.sample(LONG_FILLERS, fillers)]
        rng.shuffle(pairs)
        out.append([t for pair in pairs for t in pair])
    return out


def _base(rng: random.Random, seed: int, index: int, fillers: int = 0) -> list[dict[str, Any]]:
    """One base question (and its abstention variant), as raw schema objects."""
    qtype = BASE_TYPES[index % len(BASE_TYPES)]
    qid = _question_id(seed, index)
    n_sessions = rng.choice((3, 4, 5))

    def ack() -> dict[str, Any]:
        return _turn("assistant", rng.choice(ACKS))

    abstain: tuple[str, str] | None = None
    if qtype in ("knowledge-update", "temporal-reasoning"):
        slot = rng.choice(sorted(UPDATES))
        spec = UPDATES[slot]
        old, new = rng.sample(spec["values"], 2)
        a = rng.randrange(0, n_sessions - 1)
        b = rng.randrange(a + 1, n_sessions)
        evidence = {a: [_turn("user", spec["state"].format(v=old), True), ack()],
                    b: [_turn("user", spec["update"].format(v=new), True), ack()]}
        if qtype == "knowledge-update":
            question, answer = spec["current"], new
            other = rng.choice(sorted(set(UPDATES) - {slot}))
            abstain = (UPDATES[other]["current"],
                       f"The information provided is not enough: the user never mentioned their {other}.")
        else:
            question, answer = rng.choice(spec["earlier"]).format(new=new), old
        evidence_sessions = [a, b]
    elif qtype == "single-session-user":
        slot = rng.choice(sorted(ONCE))
        spec = ONCE[slot]
        value = rng.choice(spec["values"])
        a = rng.randrange(0, n_sessions)
        evidence = {a: [_turn("user", spec["state"].format(v=value), True), ack()]}
        question, answer = spec["question"], value
        abstain = (spec["abstain"],
                   f"The information provided is not enough: the user never mentioned {spec['missing']}.")
        evidence_sessions = [a]
    else:
        slot = rng.choice(sorted(RECOMMEND))
        spec = RECOMMEND[slot]
        value = rng.choice(spec["values"])
        a = rng.randrange(0, n_sessions)
        evidence = {a: [_turn("user", spec["ask"]), _turn("assistant", spec["reply"].format(v=value), True)]}
        question, answer = spec["question"], value
        evidence_sessions = [a]
    sessions = _sessions(rng, n_sessions, evidence)
    dates, question_date = _dates(rng, n_sessions)
    if fillers:
        sessions = _pad(sessions, fillers, seed, index)
    ids = [f"{qid}-s{i}" for i in range(n_sessions)]
    base = {"question_id": qid, "question_type": qtype, "question": question, "answer": answer,
            "question_date": question_date, "haystack_dates": dates, "haystack_session_ids": ids,
            "haystack_sessions": sessions, "answer_session_ids": [ids[i] for i in evidence_sessions]}
    out = [base]
    if abstain is not None:
        plain = [[{k: v for k, v in t.items() if k != "has_answer"} for t in s] for s in sessions]
        out.append({**base, "question_id": qid + "_abs", "question": abstain[0], "answer": abstain[1],
                    "haystack_dates": list(dates), "haystack_session_ids": list(ids),
                    "haystack_sessions": plain, "answer_session_ids": []})
    return out


def generate_raw(n_bases: int = N_BASES, seed: int = SEED, fillers: int = 0) -> list[dict[str, Any]]:
    """Raw schema objects of ``n_bases`` base questions plus their abstention variants (deterministic);
    ``fillers``: extra exchanges per session (module docstring)."""
    if n_bases < 1:
        raise ValueError(f"n_bases must be at least 1, got {n_bases}")
    if not 0 <= fillers <= len(LONG_FILLERS):
        raise ValueError(f"fillers must be in 0..{len(LONG_FILLERS)}, got {fillers}")
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    for i in range(n_bases):
        out += _base(rng, seed, i, fillers)
    return out


def generate(n_bases: int = N_BASES, seed: int = SEED, fillers: int = 0) -> list[Question]:
    """The fixture questions, parsed through the same validation as a LongMemEval file."""
    return parse_questions(generate_raw(n_bases, seed, fillers), source=f"<fixtures seed={seed}>")


def write_fixtures(path: str | Path, n_bases: int = N_BASES, seed: int = SEED, fillers: int = 0) -> Path:
    """Write the fixture questions as a LongMemEval-schema JSON file; returns the path."""
    return write_questions(path, generate(n_bases, seed, fillers))
