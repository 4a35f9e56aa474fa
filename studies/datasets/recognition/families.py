"""Vocabulary of the five update families, shared by the D1 and D3 generators.

A family supplies entities, values and *slot phrasings*: noun phrases naming the
attribute of an entity ("the office city of the Northfield team", "the city where the
Northfield team is based"). Sentence frames (in ``records.py`` / ``role_pairs.py``) put
a slot phrasing and one or two values together with a copula, so every frame reads
naturally with every family.

Everything here is [UNCLEAR] in the paper, our choice: the paper names the families
(office city, API endpoint, preferred plan, deadline, incident cause) and quotes no
entity, value or wording. Our choices:

* entities: teams "the Northfield team", services "the Stonegate service", customers
  "Redbrook Dental", projects "Project Ashwick" (160 compound names, each used by one
  family and split at most in D3), incidents "incident INC-4821";
* values: cities; endpoint paths "/v2/invoices" (resource x version); plans
  "Growth Annual" (tier x billing); dates "March 14" (month x day 10-28, two-digit days
  so no date is a prefix of another); incident causes such as "router firmware";
* six slot phrasings per family (D3 gives two to each split, D1 uses all six).

The paper's record dataset expresses its quantity targets in hours (seed L5522-5524: "The
quantity targets in this synthetic dataset are single values explicitly expressed in hours"),
which the unit studies need (factorial, matched scores, value categories). ``restate`` gives
a deadline in hours with ``deadline_unit="hours"``: the date (month m, day d) becomes
``f"{12 + 19 * (m - 1) + (d - 10)} hours"`` (12-239 hours, one per date). Generators draw dates
and restate the drawn values, so every random draw, and every other family's case, is the same
in both units. Dates remain the default of the studies committed before this choice existed.

Values are partitioned by *key* (city, resource, tier, month, cause), so value strings of
different keys never coincide.
"""

from __future__ import annotations

import random
from typing import Sequence

_STEM_FIRST = ("North", "West", "East", "South", "Stone", "Silver", "Oak", "Red", "Ash", "Elm", "Iron", "Fair",
               "High", "Green", "Mill", "Lake")
_STEM_SECOND = ("field", "ridge", "gate", "wood", "haven", "ford", "brook", "crest", "dale", "wick")
#: 160 compound names ("Northfield", "Ashwick", ...): entity keys of the four named families.
STEMS = tuple(a + b for a in _STEM_FIRST for b in _STEM_SECOND)
INDUSTRIES = ("Foods", "Logistics", "Dental", "Media", "Bikes", "Textiles", "Pharmacy", "Studios")
#: Incident numbers (entity keys of incident_cause); four digits.
INCIDENT_NUMBERS = range(1000, 10000)

#: Value keys per family; ``values`` expands keys into value strings.
VALUE_KEYS: dict[str, tuple[str, ...]] = {
    "office_city": ("Porto", "Milan", "Paris", "Turin", "Cairo", "Tunis", "Quito", "Lagos", "Seoul", "Delhi",
                    "Osaka", "Perth", "Miami", "Basel", "Leeds", "Dakar", "Lisbon", "Berlin", "Madrid",
                    "Vienna", "Prague", "Warsaw", "Dublin", "Geneva", "Athens", "Nantes", "Munich", "Zagreb",
                    "Bergen", "Denver", "Boston", "Austin"),
    "api_endpoint": ("invoices", "orders", "payments", "accounts", "refunds", "reports", "tickets", "profiles",
                     "uploads", "sessions", "shipments", "receipts", "contacts", "messages", "catalogs", "coupons",
                     "tenants", "webhooks", "metrics", "exports", "imports", "ledgers", "quotes", "batches"),
    "preferred_plan": ("Starter", "Growth", "Business", "Premium", "Scale", "Plus", "Basic", "Pro", "Enterprise",
                       "Essentials", "Standard", "Advanced", "Launch", "Studio", "Unlimited", "Core", "Select",
                       "Flex"),
    "deadline": ("January", "February", "March", "April", "May", "June", "July", "August", "September",
                 "October", "November", "December"),
    "incident_cause": ("router firmware", "cooling failure", "an expired certificate", "disk exhaustion",
                       "a DNS misconfiguration", "a power outage", "a memory leak", "configuration drift",
                       "a faulty deploy", "a network partition", "clock skew", "a fiber cut",
                       "a database deadlock", "a cache stampede", "a load balancer bug", "quota exhaustion",
                       "a storage controller fault", "a kernel panic", "license expiry", "rate limiting",
                       "a faulty switch", "credential rotation", "a schema migration", "token expiry"),
}

#: Six slot phrasings per family; ``{e}`` is the entity. Each starts with "the".
SLOTS: dict[str, tuple[str, ...]] = {
    "office_city": ("the office city of {e}", "the city that hosts {e}", "{e}'s office city",
                    "the home city of {e}", "the city where {e} is based", "the location of {e}'s office"),
    "api_endpoint": ("the endpoint of {e}", "the API path that {e} exposes", "{e}'s API endpoint",
                     "the route clients call for {e}", "the base path of {e}", "the address {e} answers on"),
    "preferred_plan": ("the preferred plan of {e}", "the plan that {e} prefers", "the subscription {e} favors",
                       "the plan chosen by {e}", "the tier {e} wants", "the favored plan of {e}"),
    "deadline": ("the deadline of {e}", "the due date for {e}", "the date {e} must ship by",
                 "the delivery deadline for {e}", "the cutoff date of {e}", "the target date for {e}"),
    "incident_cause": ("the cause of {e}", "the root cause behind {e}", "the reason for {e}",
                       "the underlying fault in {e}", "the trigger of {e}", "the diagnosed cause of {e}"),
}


def entity_name(family: str, key: int) -> str:
    """The entity of ``key``: an index into ``STEMS``, or the incident number for incident_cause."""
    if family == "incident_cause":
        return f"incident INC-{key}"
    stem = STEMS[key]
    if family == "office_city":
        return f"the {stem} team"
    if family == "api_endpoint":
        return f"the {stem} service"
    if family == "preferred_plan":
        return f"{stem} {INDUSTRIES[key % len(INDUSTRIES)]}"
    if family == "deadline":
        return f"Project {stem}"
    raise ValueError(f"unknown family {family!r}")


#: How the deadline family states its values: ``"date"`` ("March 14") or ``"hours"`` ("58 hours").
DEADLINE_UNITS = ("date", "hours")
_DEADLINE_DAYS = range(10, 29)


def deadline_hours(month: str, day: int) -> str:
    """The hours value standing for a deadline date: one distinct value per (month, day).

    >>> deadline_hours("January", 10), deadline_hours("March", 14)
    ('12 hours', '54 hours')
    """
    m = VALUE_KEYS["deadline"].index(month)
    return f"{12 + len(_DEADLINE_DAYS) * m + (day - _DEADLINE_DAYS.start)} hours"


def values(family: str, keys: Sequence[str]) -> list[str]:
    """Value strings of the given value keys."""
    if family == "api_endpoint":
        return [f"/v{v}/{k}" for k in keys for v in (1, 2, 3)]
    if family == "preferred_plan":
        return [f"{k} {billing}" for k in keys for billing in ("Monthly", "Annual")]
    if family == "deadline":
        return [f"{k} {day}" for k in keys for day in _DEADLINE_DAYS]
    return list(keys)


def restate(family: str, value: str, deadline_unit: str = "date") -> str:
    """``value`` as the family states it under ``deadline_unit`` (only deadlines change, to hours).

    >>> restate("deadline", "March 14", "hours"), restate("office_city", "Porto", "hours")
    ('54 hours', 'Porto')
    """
    if deadline_unit not in DEADLINE_UNITS:
        raise ValueError(f"deadline_unit must be one of {', '.join(DEADLINE_UNITS)}, got {deadline_unit!r}")
    if family != "deadline" or deadline_unit == "date":
        return value
    month, day = value.split()
    return deadline_hours(month, int(day))


#: Slot phrasings of the deadline family when its values are hours (a date noun would not fit "96 hours").
HOURS_DEADLINE_SLOTS = ("the deadline of {e}", "the time allowed for {e}", "the delivery window for {e}",
                        "the turnaround time of {e}", "the lead time of {e}", "the response window for {e}")


def slot(family: str, index: int, entity: str, deadline_unit: str = "date") -> str:
    """Slot phrasing ``index`` of ``family`` filled with ``entity`` (hours deadlines: :data:`HOURS_DEADLINE_SLOTS`)."""
    phrasings = HOURS_DEADLINE_SLOTS if family == "deadline" and deadline_unit == "hours" else SLOTS[family]
    return phrasings[index].format(e=entity)


def pick_pair(rng: random.Random, pool: Sequence[str]) -> tuple[str, str]:
    """Two different values (old, new) from ``pool``, of equal length when the pool allows it."""
    old = pool[rng.randrange(len(pool))]
    same = [v for v in pool if v != old and len(v) == len(old)]
    other = same or [v for v in pool if v != old]
    return old, other[rng.randrange(len(other))]
