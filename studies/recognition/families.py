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


def values(family: str, keys: Sequence[str]) -> list[str]:
    """Value strings of the given value keys."""
    if family == "api_endpoint":
        return [f"/v{v}/{k}" for k in keys for v in (1, 2, 3)]
    if family == "preferred_plan":
        return [f"{k} {billing}" for k in keys for billing in ("Monthly", "Annual")]
    if family == "deadline":
        return [f"{k} {day}" for k in keys for day in range(10, 29)]
    return list(keys)


def slot(family: str, index: int, entity: str) -> str:
    """Slot phrasing ``index`` of ``family`` filled with ``entity``."""
    return SLOTS[family][index].format(e=entity)


def pick_pair(rng: random.Random, pool: Sequence[str]) -> tuple[str, str]:
    """Two different values (old, new) from ``pool``, of equal length when the pool allows it."""
    old = pool[rng.randrange(len(pool))]
    same = [v for v in pool if v != old and len(v) == len(old)]
    other = same or [v for v in pool if v != old]
    return old, other[rng.randrange(len(other))]
