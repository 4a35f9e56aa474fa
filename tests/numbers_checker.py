"""The checker behind ``tests/test_docs_numbers.py``: numbers quoted in a page are the numbers of their source.

A page quotes results inside a block naming its sources::

    <!-- numbers from artifacts/quantity/smollm2-135m-instruct/report.md#replacements-60-groups-unit_from_a-current-query -->
    | condition | strict | ... |          <- a table: every row is a row of ONE table of the sources
    Prose with +9.56 nats ...              <- every number occurs, with its sign, in the named sections
    <!-- end numbers -->

A source is a file path, optionally with ``#anchor``: the GitHub anchor of one of its markdown
headings, which narrows the source to that section (the heading's lines up to the next heading
of the same or a higher level). A path without an anchor is the whole file. Inside a block a line
``<!-- numbers section SRC[, SRC...] -->`` narrows the sources of the lines after it (up to the
next such line or the end of the block); SRC is ``path#anchor`` or ``#anchor`` (an anchor of the
block's first source).

Rules, exact:

* **Tables.** The consecutive ``|`` lines of a block form one table. All its rows (the header
  included, ``|---|`` separators excepted) must be rows of one single table of the sources, so a row
  matches the row with the same first cell of the same source table: a row copied from another
  table (another information condition, another model, another section) fails even when it is a row
  of the same file.
* **Prose.** Every number of a prose line must occur as a number in the line's sources (sections
  when anchored). A number written with a sign (``+9.56``, ``-0.250``) must occur with that sign
  (``+`` also matches an unsigned source number); an unsigned one matches either sign. Numbers are
  compared as written (``9.6`` is not ``9.56``), thousands separators dropped.
* **Numbers** (:func:`tokens`): decimal numbers with an optional exponent (``2.65e-4``) and an
  optional times suffix (``65.6x``); range ends (``4.6-6.3``: ``6.3`` is unsigned); numbers before a
  full stop, comma or bracket. Not numbers: anything glued to a letter, digit, underscore or dot
  before it (``qa3``, ``L.95``, ``x86_64``) or to a letter after it (``135M``, ``0.5b``), and the
  parts of versions (``2.13.0``). Link targets and inline code are not prose (:func:`prose`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

BEGIN = re.compile(r"<!--\s*numbers from (.+?)\s*-->")
SECTION = re.compile(r"<!--\s*numbers section (.+?)\s*-->")
END = re.compile(r"<!--\s*end numbers\s*-->")
HEADING = re.compile(r"(#{1,6})\s+(.*?)\s*#*\s*$")
SEPARATOR = re.compile(r"[|\-: ]+")

#: A candidate number: sign, digits with thousands separators, decimals, exponent, times suffix.
_CANDIDATE = re.compile(r"(?P<sign>[-+\u2212]?)(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
                        r"(?P<exp>[eE][-+\u2212]?\d+)?(?P<x>x)?")


def spans(text: str) -> list[tuple[int, int, str, str]]:
    """``(start, end, sign, digits)`` of every number of ``text`` (:func:`tokens` without the positions;
    ``start`` is where the digits or their sign begin, ``end`` after the digits, exponent and suffix)."""
    out, pos, last_end = [], 0, -1
    while True:
        m = _CANDIDATE.search(text, pos)
        if not m:
            return out
        start, end = m.start(), m.end()
        sign, num, exp, x = m.group("sign"), m.group("num"), m.group("exp") or "", m.group("x")
        pos = end
        before = text[start - 1] if start else ""
        if sign and (before.isalnum() or before == "_"):
            # "4.6-6.3": a range whose first end is a number, the dash separates; "SHA-256", "L1976-1979"
            # and "Qwen3-4B" are names
            if sign in "-\u2212" and start == last_end:
                sign, start = "", start + 1
                before = text[start - 1]
            else:
                pos = m.end("num")
                while pos < len(text) and (text[pos].isalnum() or text[pos] in "._"):
                    pos += 1
                continue
        if before and (before.isalnum() or before in "_."):
            pos = max(pos, m.start("num") + 1)
            while pos < len(text) and (text[pos].isalnum() or text[pos] in "._,"):
                pos += 1  # skip the rest of the glued word (version, model name)
            continue
        after = text[end] if end < len(text) else ""
        if after.isalnum() or after == "_":
            # "2x1" is a shape and "135M" a size, not numbers
            while pos < len(text) and (text[pos].isalnum() or text[pos] in "._"):
                pos += 1
            continue
        if after == "." and end + 1 < len(text) and text[end + 1].isdigit():
            while pos < len(text) and (text[pos].isalnum() or text[pos] in "._"):
                pos += 1  # a version such as 2.13.0
            continue
        sign = "-" if sign == "\u2212" else sign
        last_end = end
        out.append((start, end, sign, num.replace(",", "") + exp.lower().replace("\u2212", "-")))


def tokens(text: str) -> list[tuple[str, str]]:
    """The numbers of ``text`` as ``(sign, digits)``: sign ``"+"``, ``"-"`` or ``""``; digits without
    thousands separators, an exponent kept in lower case (``"2.65e-4"``), a times suffix dropped."""
    return [(sign, num) for _, _, sign, num in spans(text)]


def prose(line: str) -> str:
    """A prose line with link targets, inline code (paths, commands, model names) and HTML comments blanked
    out (same length, so positions stay those of the line)."""
    blank = lambda m: " " * len(m.group(0))  # noqa: E731
    line = re.sub(r"<!--.*?-->", blank, line)
    line = re.sub(r"(?<=\])\([^)]*\)", blank, line)
    return re.sub(r"`[^`]*`", blank, line)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as dashes."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


@dataclass
class Source:
    """A source file cut into sections (markdown headings) and tables."""

    path: Path
    lines: list[str]
    #: the path as the page names it
    name: str = ""
    #: anchor -> (first line index, end line index) of that heading's section
    sections: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: (first line index, rows) of every table; rows stripped, separators dropped
    tables: list[tuple[int, list[str]]] = field(default_factory=list)
    _numbers: dict[tuple[int, int], set[tuple[str, str]]] = field(default_factory=dict, repr=False)

    def numbers(self, lo: int, hi: int) -> set[tuple[str, str]]:
        """The numbers of lines ``lo:hi`` (cached)."""
        key = (lo, hi)
        if key not in self._numbers:
            self._numbers[key] = set(tokens("\n".join(self.lines[lo:hi])))
        return self._numbers[key]

    def leaves(self) -> list[tuple[int, int]]:
        """The spans between consecutive headings (the whole file when it has none)."""
        cuts = sorted({lo for lo, _ in self.sections.values()})
        cuts = [0, *cuts, len(self.lines)]
        return [(a, b) for a, b in zip(cuts, cuts[1:]) if b > a]

    @classmethod
    def read(cls, path: Path) -> "Source":
        text = path.read_text()
        lines = text.splitlines()
        src = cls(path, lines)
        if path.suffix == ".md":
            heads, fence = [], False
            for i, line in enumerate(lines):
                if line.lstrip().startswith("```"):
                    fence = not fence
                m = None if fence else HEADING.fullmatch(line)
                if m:
                    heads.append((i, len(m.group(1)), m.group(2)))
            seen: dict[str, int] = {}
            for k, (i, level, title) in enumerate(heads):
                end = next((j for j, lv, _ in heads[k + 1:] if lv <= level), len(lines))
                base = slug(title)
                n = seen.get(base, 0)
                seen[base] = n + 1
                src.sections[base if n == 0 else f"{base}-{n}"] = (i, end)
        current = None
        for i, line in enumerate(lines):
            s = line.strip()
            if s.startswith("|"):
                if current is None:
                    current = (i, [])
                    src.tables.append(current)
                if not SEPARATOR.fullmatch(s):
                    current[1].append(s)
            else:
                current = None
        return src

    def span(self, anchor: str | None) -> tuple[int, int]:
        if anchor is None:
            return 0, len(self.lines)
        if anchor not in self.sections:
            raise KeyError(f"{self.path}: no section #{anchor} (sections: {sorted(self.sections)})")
        return self.sections[anchor]


@dataclass
class Scope:
    """Sources of some lines of a block: (source, anchor or None)."""

    parts: list[tuple[Source, str | None]]

    #: True when the sections were named (an anchor or a section marker): numbers may come from any of them
    explicit: bool = False

    def numbers(self) -> set[tuple[str, str]]:
        out = set()
        for src, anchor in self.parts:
            out |= src.numbers(*src.span(anchor))
        return out

    def leaf_numbers(self) -> list[tuple[str, set[tuple[str, str]]]]:
        """(name, numbers) of every section between two headings of the sources."""
        out = []
        for src, anchor in self.parts:
            lo, hi = src.span(anchor)
            for a, b in src.leaves():
                if lo <= a < hi:
                    head = next((k for k, (i, _) in src.sections.items() if i == a), None)
                    out.append((f"{src.name or src.path.name}{'#' + head if head else ''}",
                                src.numbers(a, min(b, hi))))
        return out

    def tables(self) -> list[list[str]]:
        out = []
        for src, anchor in self.parts:
            lo, hi = src.span(anchor)
            out += [rows for start, rows in src.tables if lo <= start < hi]
        return out

    def names(self) -> str:
        return ", ".join(f"{s.name or s.path.name}{'#' + a if a else ''}" for s, a in self.parts)


def blocks(text: str) -> list[tuple[int, str, list[tuple[int, str]]]]:
    """(line number, header sources, [(line number, line)]) of every numbers block of a page."""
    out, current = [], None
    for i, line in enumerate(text.splitlines(), 1):
        if current is None:
            m = BEGIN.fullmatch(line.strip())
            if m:
                current = (i, m.group(1), [])
        elif END.fullmatch(line.strip()):
            out.append(current)
            current = None
        else:
            current[2].append((i, line))
    if current is not None:
        raise ValueError(f"line {current[0]}: numbers block without '<!-- end numbers -->'")
    return out


def _scope(spec: str, root: Path, cache: dict[Path, Source], default: Path | None = None,
           explicit: bool = False) -> Scope:
    parts = []
    for item in spec.split(","):
        item = item.strip()
        path, _, anchor = item.partition("#")
        if not path:
            if default is None:
                raise ValueError(f"{item}: an anchor without a file")
            file = default
        else:
            file = root / path
        if not file.is_file():
            raise FileNotFoundError(f"source not found: {path}")
        if file not in cache:
            cache[file] = Source.read(file)
            cache[file].name = path
        src = cache[file]
        src.span(anchor or None)  # an unknown anchor fails here
        parts.append((src, anchor or None))
    return Scope(parts, explicit=explicit or any(a for _, a in parts))


def _missing(quoted: list[tuple[str, str]], known: set[tuple[str, str]]) -> list[str]:
    """The quoted numbers not among ``known``: a signed one needs that sign (``+`` also matches unsigned)."""
    unsigned = {num for _, num in known}
    signed = {(sign or "+", num) for sign, num in known}
    return [sign + num for sign, num in quoted
            if (sign and (sign, num) not in signed) or (not sign and num not in unsigned)]


LIST_ITEM = re.compile(r"\s*(?:[-*+]|\d+[.)])\s")
INLINE_SECTION = re.compile(r"<!--\s*numbers section (.+?)\s*-->")


def check_block(spec: str, lines: list[tuple[int, str]], root: Path,
                cache: dict[Path, Source] | None = None) -> list[str]:
    """The errors of one block (empty when every quoted number is its source's).

    Prose is checked by paragraph (lines up to a blank line, a table, a list item or a marker): with named
    sections (an anchor in the block's header, a ``numbers section`` line before the paragraph or a
    ``<!-- numbers section ... -->`` comment inside it) every number must occur in one of them; without,
    all the paragraph's numbers must occur together in one section of the sources (between two
    headings), so a number taken from another part of a long report fails.
    """
    cache = {} if cache is None else cache
    errors: list[str] = []
    try:
        scope = _scope(spec, root, cache)
    except (KeyError, ValueError, FileNotFoundError) as err:
        return [str(err)]
    first = scope.parts[0][0].path
    table: list[tuple[int, str]] = []
    para: list[tuple[int, str]] = []

    def close_table():
        if not table:
            return
        rows = [s for _, s in table]
        candidates = scope.tables()
        if not any(set(rows) <= set(t) for t in candidates):
            known = set().union(*map(set, candidates)) if candidates else set()
            stray = [(n, s) for n, s in table if s not in known]
            if stray:
                errors.extend(f"{n}: table row not in a table of {scope.names()}: {s}" for n, s in stray)
            else:
                best = max(candidates, key=lambda t: len(set(rows) & set(t)))
                errors.extend(f"{n}: table row from another table than the rest of its table "
                              f"({scope.names()}): {s}" for n, s in table if s not in best)
        table.clear()

    def close_para():
        if not para:
            return
        here = scope
        for n, line in para:
            m = INLINE_SECTION.search(line)
            if m:
                try:
                    here = _scope(m.group(1), root, cache, default=first, explicit=True)
                except (KeyError, ValueError, FileNotFoundError) as err:
                    errors.append(f"{n}: {err}")
        quoted = [(n, line, t) for n, line in para for t in tokens(prose(line))]
        para.clear()
        if not quoted:
            return
        bad = [(n, line, sign + num) for n, line, (sign, num) in quoted
               if _missing([(sign, num)], here.numbers())]
        if bad:
            errors.extend(f"{n}: {x} not in {here.names()}: {line.strip()}" for n, line, x in bad)
            return
        if here.explicit:
            return
        wanted = [t for _, _, t in quoted]
        leaves = here.leaf_numbers()
        if any(not _missing(wanted, known) for _, known in leaves):
            return
        name, known = min(leaves, key=lambda item: len(_missing(wanted, item[1])))
        lost = _missing(wanted, known)
        n0 = quoted[0][0]
        errors.append(f"{n0}: the paragraph's numbers are not all in one section of {here.names()} (nearest "
                      f"{name} lacks {lost}); name the sections it quotes with <!-- numbers section ... -->")

    for n, line in lines:
        s = line.strip()
        m = SECTION.fullmatch(s)
        if m:
            close_table()
            close_para()
            try:
                scope = _scope(m.group(1), root, cache, default=first, explicit=True)
            except (KeyError, ValueError, FileNotFoundError) as err:
                errors.append(f"{n}: {err}")
            continue
        if s.startswith("|"):
            close_para()
            if not SEPARATOR.fullmatch(s):
                table.append((n, s))
            continue
        close_table()
        if not s or LIST_ITEM.match(line) or s.startswith("#"):
            close_para()
        if s:
            para.append((n, line))
    close_table()
    close_para()
    return errors


def check_page(text: str, root: Path) -> list[str]:
    """Every error of every numbers block of a page's text."""
    cache: dict[Path, Source] = {}
    errors = []
    for start, spec, lines in blocks(text):
        errors += [f"block at {start}: {e}" for e in check_block(spec, lines, root, cache)]
    return errors


def page_sources(text: str) -> list[str]:
    """The source specs of a page's blocks (for listing)."""
    return [spec for _, spec, _ in blocks(text)]


def load_json(path: Path):
    return json.loads(path.read_text())
