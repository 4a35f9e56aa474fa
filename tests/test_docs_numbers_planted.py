"""The numbers checker rejects planted errors: every quoted number of the real pages, changed, fails.

Each test copies the committed pages (in memory; the sources stay the committed artifacts), plants
one kind of error at every site where it can occur, and requires :func:`numbers_checker.check_block`
(the checker of ``tests/test_docs_numbers.py``) to reject every planted copy, and the unchanged
block to pass. The kinds are those a test audit planted: a table row swapped with the same-key row
of another table (``unit_from_a`` / ``unit_stated``), a changed table cell, a changed range end
(``4.6-6.3``), a changed times figure (``65.6x``), a changed exponent (``2.65e-4``), a changed number
before a full stop, a flipped sign, and a number taken from another section of the same report.

A changed number is the quoted one with its last digit moved (9.56 -> 9.57, 65.6x -> 65.7x,
2.65e-4 -> 2.65e-5), skipping values that occur anywhere in the block's sources: a value the report
does hold is the "number from another section" case, planted separately where it can be told apart
(a paragraph quoting several numbers of one section).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from numbers_checker import SECTION, SEPARATOR, Source, _scope, blocks, check_block, prose, spans, tokens
from test_docs_numbers import DERIVED, PAGES, ROOT, derived_errors

CACHE: dict[Path, Source] = {}


def _blocks(passing: bool = True):
    """Every numbers block of the pages; with ``passing`` only those that pass unchanged (a block that
    fails already is reported by test_the_unchanged_pages_pass and proves nothing here)."""
    for page in PAGES:
        for start, spec, lines in blocks(page.read_text()):
            if not passing or not check_block(spec, lines, ROOT, CACHE):
                yield page, start, spec, lines


def _source_numbers(spec: str) -> set[str]:
    """Every number of a block's source files (whole files), as ``sign + digits`` and as digits."""
    out = set()
    for src, _ in _scope(re.sub(r"#[^,]*", "", spec), ROOT, CACHE).parts:
        for sign, num in src.numbers(0, len(src.lines)):
            out |= {sign + num, num}
    return out


def _bump(digits: str, taken: set[str]) -> str | None:
    """``digits`` with its last mantissa digit (or exponent digit) moved to a value the sources lack."""
    m = re.fullmatch(r"(.*?)(\d)((?:e-?\d*)?)", digits) if "e" not in digits else re.fullmatch(r"(.*)(\d)()", digits)
    head, last, tail = m.groups()
    for step in range(1, 10):
        new = f"{head}{(int(last) + step) % 10}{tail}"
        if new not in taken and new.lstrip("0.") != "":
            return new
    return None


def _kind(line: str, found: list[tuple[int, int, str, str]], k: int) -> str:
    start, end, sign, num = found[k]
    if "e" in num:
        return "exponent"
    if line[end - 1] == "x":
        return "times"
    if k and line[start - 1] in "-\u2013" and found[k - 1][1] == start - 1:
        return "range end"
    if line[end:end + 1] == "." and line[end + 1:end + 2] in ("", " "):
        return "full stop"
    return "signed" if sign else "plain"


def _prose_sites():
    """(page, block start, spec, lines, index of the line, span, kind) of every quoted prose number."""
    for page, start, spec, lines in _blocks():
        for i, (_, line) in enumerate(lines):
            s = line.strip()
            if not s or s.startswith("|") or SECTION.fullmatch(s):
                continue
            text = prose(line)
            found = spans(text)
            for k, span in enumerate(found):
                yield page, start, spec, lines, i, span, _kind(text, found, k)


def _swap_digits(text: str, span: tuple[int, int, str, str], new: str) -> str:
    """``text`` with the digits of the number at ``span`` replaced (its sign and times suffix kept)."""
    a, b, sign, _ = span
    a += len(sign) if text[a:a + 1] in "+-\u2212" else 0
    b -= 1 if text[b - 1] == "x" else 0
    return text[:a] + new + text[b:]


def _planted(lines, i, text: str):
    out = list(lines)
    out[i] = (lines[i][0], text)
    return out


def _assert_all_caught(planted: list[tuple[str, str, list]], kind: str, at_least: int = 1):
    assert len(planted) >= at_least, f"only {len(planted)} sites of kind {kind!r} on the pages"
    passed = [label for label, spec, lines in planted if not check_block(spec, lines, ROOT, CACHE)]
    assert not passed, f"{len(passed)} of {len(planted)} planted {kind} errors pass the checker: {passed[:10]}"


def test_the_unchanged_pages_pass():
    """Without this, the rejections below could be the checker failing everything."""
    failing = [f"{p.relative_to(ROOT)}:{s}" for p, s, spec, lines in _blocks(False) if check_block(spec, lines, ROOT, CACHE)]
    assert not failing, f"blocks failing before any error is planted: {failing}"


@pytest.mark.parametrize("kind,at_least", [("range end", 5), ("times", 5), ("full stop", 2), ("plain", 100)])
def test_changed_prose_numbers_fail(kind, at_least):
    planted = []
    for page, start, spec, lines, i, span, k in _prose_sites():
        if k != kind:
            continue
        line = lines[i][1]
        new = _bump(span[3], _source_numbers(spec))
        if new is None:
            continue
        changed = _swap_digits(line, span, new)
        planted.append((f"{page.relative_to(ROOT)}:{lines[i][0]} {line[span[0]:span[1]]!r} -> {new!r}", spec,
                        _planted(lines, i, changed)))
    _assert_all_caught(planted, kind, at_least)


def test_flipped_signs_fail():
    planted = []
    for page, start, spec, lines, i, (a, b, sign, num), k in _prose_sites():
        if not sign or float(num) == 0:
            continue
        flipped = "-" if sign == "+" else "+"
        if flipped + num in _source_numbers(spec) or (flipped == "+" and num in _source_numbers(spec)):
            continue  # the sources hold both signs: not an error the text alone can show
        line = lines[i][1]
        planted.append((f"{page.relative_to(ROOT)}:{lines[i][0]} {sign}{num} -> {flipped}{num}", spec,
                        _planted(lines, i, line[:a] + flipped + line[a + 1:])))
    _assert_all_caught(planted, "sign", at_least=50)


def test_an_exponent_changed_fails():
    """2.65e-4 (a derived figure of docs/architectures.md) and every exponent quoted in a block."""
    hits = [(page, quoted, computed) for page, quoted, computed in DERIVED if re.search(r"\de-\d", quoted)]
    assert hits, "no derived figure with an exponent"
    for page, quoted, computed in hits:
        for m in re.finditer(r"\d+(?:\.\d+)?e-(\d+)", quoted):
            wrong = quoted[:m.start(1)] + str(int(m.group(1)) + 1) + quoted[m.end(1):]
            text = (ROOT / page).read_text().replace(quoted, wrong)
            assert derived_errors(page, quoted, computed, text), f"{page}: {m.group(0)} changed passes"
    planted = []
    for page, start, spec, lines, i, span, k in _prose_sites():
        if k == "exponent":
            new = _bump(span[3], _source_numbers(spec))
            planted.append((f"{page.relative_to(ROOT)}:{lines[i][0]}", spec,
                            _planted(lines, i, _swap_digits(lines[i][1], span, new))))
    if planted:
        _assert_all_caught(planted, "exponent")


def _tables(lines):
    """Groups of (index, stripped row) of consecutive table rows, separators excluded."""
    out, current = [], []
    for i, (_, line) in enumerate(lines):
        s = line.strip()
        if s.startswith("|"):
            if not SEPARATOR.fullmatch(s):
                current.append((i, s))
        elif current:
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


def test_changed_table_cells_fail():
    planted = []
    for page, start, spec, lines in _blocks():
        taken = _source_numbers(spec)
        for table in _tables(lines):
            for i, row in table[1:]:
                cells = row.split("|")
                found = [(c, spans(cell)) for c, cell in enumerate(cells) if c > 1 and spans(cell)]
                if not found:
                    continue
                c, (span, *_) = found[0]
                new = _bump(span[3], taken)
                if new is None:
                    continue
                cells[c] = _swap_digits(cells[c], span, new)
                changed = "|".join(cells)
                line = lines[i][1]
                out = list(lines)
                out[i] = (lines[i][0], line.replace(row, changed))
                planted.append((f"{page.relative_to(ROOT)}:{lines[i][0]} {row[:40]}", spec, out))
    _assert_all_caught(planted, "table cell", at_least=100)


def test_rows_swapped_between_tables_fail():
    """The audit's case: the unit_from_a and unit_stated tables of the quantity README share their header and
    their first cells; a row moved from one to the other is still a row of the report."""
    planted = []
    for page, start, spec, lines in _blocks():
        tables = _tables(lines)
        for x in range(len(tables)):
            for y in range(x + 1, len(tables)):
                tx, ty = tables[x], tables[y]
                if tx[0][1] != ty[0][1]:
                    continue
                keys = {r.split("|")[1]: (i, r) for i, r in ty[1:]}
                for i, r in tx[1:]:
                    key = r.split("|")[1]
                    if key in keys and keys[key][1] != r:
                        j, other = keys[key]
                        out = list(lines)
                        out[i], out[j] = (lines[i][0], lines[j][1]), (lines[j][0], lines[i][1])
                        planted.append((f"{page.relative_to(ROOT)}:{lines[i][0]}<->{lines[j][0]}", spec, out))
    assert any("studies/quantity/README.md" in label for label, *_ in planted), \
        "the quantity README no longer has two tables sharing a header (unit_from_a / unit_stated)"
    _assert_all_caught(planted, "row swap", at_least=5)


def test_numbers_from_another_section_fail():
    """A paragraph whose numbers all come from one section of a report, with one of them replaced by a number
    the report holds elsewhere (not in any section holding the rest): the whole-file check passed these."""
    planted = []
    for page, start, spec, lines in _blocks():
        scope = _scope(spec, ROOT, CACHE)
        if scope.explicit:
            continue
        leaves = scope.leaf_numbers()
        paragraph: list[int] = []
        for i, (_, line) in enumerate([*lines, (0, "")]):
            s = line.strip()
            if s and not s.startswith("|") and not SECTION.fullmatch(s) and not re.match(r"\s*[-*]\s", line):
                paragraph.append(i)
                continue
            if len(paragraph) and not any("numbers section" in lines[j][1] for j in paragraph):
                quoted = [(j, sp) for j in paragraph for sp in spans(prose(lines[j][1]))]
                nums = {(sp[2] or "+", sp[3]) for _, sp in quoted}
                if len(nums) >= 2:
                    j, (a, b, sign, num) = quoted[-1]
                    rest = {(x[2] or "+", x[3]) for k, x in quoted if (k, x) != (j, (a, b, sign, num))}
                    home = [known for _, known in leaves
                            if rest <= {(g or "+", n) for g, n in known}]
                    if home:
                        elsewhere = sorted({n for _, known in leaves for g, n in known
                                            if n.count(".") == num.count(".") and len(n) == len(num)}
                                           - {n for known in home for _, n in known})
                        if elsewhere:
                            new = elsewhere[0]
                            planted.append((f"{page.relative_to(ROOT)}:{lines[j][0]} {num} -> {new}", spec,
                                            _planted(lines, j, _swap_digits(lines[j][1], (a, b, sign, num), new))))
            paragraph = [i] if s and re.match(r"\s*[-*]\s", line) else []
    _assert_all_caught(planted, "other-section number", at_least=10)


def test_tokens_read_what_the_audit_missed():
    """The number syntax the old regex missed: range ends, times suffixes, exponents, numbers before a stop."""
    assert tokens("4.6-6.3 min") == [("", "4.6"), ("", "6.3")]
    assert tokens("refresh is 65.6x a mask") == [("", "65.6")]
    assert tokens("tolerances are 2.65e-4 and 1.2e-3.") == [("", "2.65e-4"), ("", "1.2e-3")]
    assert tokens("it lost 15.") == [("", "15")]
    assert tokens("net -0.250 [-0.367, +0.150]") == [("-", "0.250"), ("-", "0.367"), ("+", "0.150")]
    assert tokens("qa3, L.95, x86_64, 135M, Qwen3-4B, SHA-256, torch 2.13.0, 2x1") == []
