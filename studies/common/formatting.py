"""Small formatting and counting helpers every study's report and figure share
(``kvprobe.studies.common.formatting``).

One spelling per quantity, so two reports never write the same number two ways:

- :func:`count`: ``k/n`` (an arm's correct answers of its n);
- :func:`share`: ``100 k / n`` to one decimal and the count, ``11.1% (1)``;
- :func:`share_of`: the same share with the count of n, ``11.1% (1/9)``; :func:`count_share`: the count first,
  ``1/9 (11.1%)``;
- :func:`pp` and :func:`pp_change`: a change in percentage points with its interval, ``+6.7 [+1.7, +13.3]``;
- :func:`proportion_pct`: a proportion (an accuracy) and its interval in percent, ``25.0 [10.0, 40.0]``;
- :func:`pp_of`: a paired change in answers as percentage points of n;
- :func:`eos_count`, :func:`cap_count` and :func:`stops`: how many answers stopped at EOS and how many hit
  the token cap.

Intervals and point estimates in other formats are :func:`kvprobe.studies.common.report.estimate`'s.

Example::

    count(7, 400)                       # '7/400'
    share(1, 9)                         # '11.1% (1)'
    share_of(1, 9, percent="")          # '11.1 (1/9)'
    count_share(1, 9)                   # '1/9 (11.1%)'
    pp(6.7, (1.7, 13.3))                # '+6.7 [+1.7, +13.3]'
    stops([{"stop_reason": "eos"}, {"stop_reason": "cap"}])   # {'eos': 1, 'capped': 1}
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from .report import estimate

__all__ = ["EOS", "CAP", "cap_count", "count", "count_share", "eos_count", "pp", "pp_change", "pp_of", "proportion_pct",
           "share", "share_of", "stops"]

#: A row's ``stop_reason`` when the answer ended at the end-of-sequence token, and when it hit the token cap.
EOS, CAP = "eos", "cap"


def count(k: int, n: int) -> str:
    """``k`` of ``n`` as ``k/n`` (``count(7, 400)`` is ``'7/400'``)."""
    return f"{k}/{n}"


def share(k: float, n: int, percent: str = "%", signed: bool = False, count_format: str = "",
          empty: str | None = None) -> str:
    """``100 k / n`` to one decimal, its ``percent`` sign (``"%"``, ``" %"`` or none) and ``(k)``:
    ``share(1, 9)`` is ``'11.1% (1)'``; ``signed``: both with their sign (``'+11.1% (+1)'``); ``count_format``: the
    count's format (``"g"`` for a fractional count). With ``n`` 0: ``empty``, or ``'- (k)'`` when it is None."""
    sign = "+" if signed else ""
    k_text = f"({k:{sign}{count_format}})"
    if not n:
        return f"- {k_text}" if empty is None else empty
    return f"{100 * k / n:{sign}.1f}{percent} {k_text}"


def share_of(k: int, n: int, percent: str = "%", empty: str = "-") -> str:
    """``100 k / n`` to one decimal, its ``percent`` sign and ``(k/n)``: ``share_of(1, 9)`` is ``'11.1% (1/9)'``,
    ``share_of(1, 9, percent="")`` is ``'11.1 (1/9)'``; ``empty`` when ``n`` is 0."""
    if not n:
        return empty
    return f"{100 * k / n:.1f}{percent} ({count(k, n)})"


def count_share(k: int, n: int, percent: str = "%") -> str:
    """``k/n`` and ``100 k / n`` to one decimal in parentheses: ``count_share(1, 9)`` is ``'1/9 (11.1%)'``;
    ``'0/0 (-)'`` when ``n`` is 0."""
    return f"{count(k, n)} ({f'{100 * k / n:.1f}{percent}' if n else '-'})"


def pp(value: float, ci: Sequence[float]) -> str:
    """A change in percentage points and its interval, one decimal with signs: ``'+6.7 [+1.7, +13.3]'``."""
    return estimate(value, ci, "+.1f")


def pp_change(change: Mapping[str, Any] | None, value: str = "pp", ci: str = "pp_ci") -> str:
    """:func:`pp` of a summary's change entry (its ``value`` and ``ci`` keys); empty when there is none (the
    reference arm) or its value is None."""
    if not change or change.get(value) is None:
        return ""
    return pp(change[value], change[ci])


def pp_of(k: float, ci: Sequence[float], n: int) -> str:
    """A paired change of ``k`` answers (interval ``ci``, in answers) as percentage points of ``n``:
    ``pp_of(2, (0.5, 4), 30)`` is ``'+6.7 [+1.7, +13.3]'``."""
    return pp(100 * k / n, [100 * x / n for x in ci])


def proportion_pct(value: float, ci: Sequence[float]) -> str:
    """A proportion and its interval (fractions of 1) in percent, one decimal: ``proportion_pct(0.25, (0.1, 0.4))``
    is ``'25.0 [10.0, 40.0]'``."""
    return estimate(100 * value, [100 * x for x in ci], ".1f")


def eos_count(rows: Iterable[Mapping[str, Any]]) -> int:
    """How many of ``rows`` stopped at EOS."""
    return sum(r["stop_reason"] == EOS for r in rows)


def cap_count(rows: Iterable[Mapping[str, Any]]) -> int:
    """How many of ``rows`` hit the token cap."""
    return sum(r["stop_reason"] == CAP for r in rows)


def stops(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """``{"eos": eos_count, "capped": cap_count}`` of ``rows`` (a summary cell's two stop counts)."""
    rows = list(rows)
    return {"eos": eos_count(rows), "capped": cap_count(rows)}
