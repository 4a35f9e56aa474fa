"""Numbers quoted in the README, docs/ and the study READMEs are the numbers the committed artifacts hold.

Results live where they are produced (``artifacts/**/report.md``, ``summary.json``,
``artifacts/bench/*.md``, ``matrix.json``). A page that quotes any of them does so inside a
block naming its sources::

    <!-- numbers from artifacts/quantity/smollm2-135m-instruct/report.md -->
    | condition | strict | ... |          <- table rows: copied verbatim from a source
    Prose with 9.56 nats ...               <- every number must occur in a source
    <!-- end numbers -->

Inside such a block every table row (other than a ``|---|`` separator) must be a line of one
of the sources, and every number in the prose must occur as a number in one of them (signs
and thousands separators ignored; numbers glued to letters, such as model names, are not
numbers). Numbers outside blocks are design facts or the paper's own figures; a few derived
figures are checked one by one below (:data:`DERIVED`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "studies").glob("*/README.md")])

#: Block markers: HTML comments on a line of their own.
BEGIN = re.compile(r"<!--\s*numbers from (.+?)\s*-->")
END = re.compile(r"<!--\s*end numbers\s*-->")
#: A number: not glued to a letter, digit, dot or dash before it, nor to a letter, digit or dot after it.
NUMBER = re.compile(r"(?<![\w.\-+])[-+]?\d[\d,]*(?:\.\d+)?(?![\w.])")


def numbers(text: str) -> set[str]:
    """The numbers of ``text``, without sign or thousands separators."""
    return {m.group(0).lstrip("+-").replace(",", "") for m in NUMBER.finditer(text)}


def prose(line: str) -> str:
    """A prose line without link targets and inline code (paths, commands, model names)."""
    line = re.sub(r"\]\([^)]*\)", "]", line)
    return re.sub(r"`[^`]*`", "", line)


def blocks(page: Path) -> list[tuple[int, list[Path], list[str]]]:
    """(line number, sources, lines) of every numbers block of a page."""
    out, current = [], None
    for i, line in enumerate(page.read_text().splitlines(), 1):
        if current is None:
            m = BEGIN.fullmatch(line.strip())
            if m:
                sources = [ROOT / s.strip() for s in m.group(1).split(",")]
                current = (i, sources, [])
        elif END.fullmatch(line.strip()):
            out.append(current)
            current = None
        else:
            current[2].append(line)
    assert current is None, f"{page.relative_to(ROOT)}:{current[0]}: numbers block without '<!-- end numbers -->'"
    return out


BLOCKS = [(page, *b) for page in PAGES for b in blocks(page)]


def test_pages_with_results_quote_them_in_checked_blocks():
    studies_with_runs = {p.parent.name for p in PAGES if p.parent.parent == ROOT / "studies"}
    quoting = {page.parent.name for page, *_ in BLOCKS if page.parent.parent == ROOT / "studies"}
    assert studies_with_runs <= quoting, f"study READMEs without a numbers block: {studies_with_runs - quoting}"


@pytest.mark.parametrize("page,start,sources,lines", BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}:{s}" for p, s, _, _ in BLOCKS])
def test_quoted_numbers_are_the_artifacts(page, start, sources, lines):
    name = page.relative_to(ROOT)
    missing = [s for s in sources if not s.is_file()]
    assert not missing, f"{name}:{start}: sources not found: {missing}"
    texts = [s.read_text() for s in sources]
    source_lines = {line.strip() for t in texts for line in t.splitlines()}
    source_numbers = set().union(*(numbers(t) for t in texts))
    for offset, line in enumerate(lines, start + 1):
        stripped = line.strip()
        if stripped.startswith("|"):
            if re.fullmatch(r"[|\-: ]+", stripped):
                continue
            assert stripped in source_lines, f"{name}:{offset}: table row not in {sources}: {line}"
        else:
            unknown = numbers(prose(line)) - source_numbers
            assert not unknown, f"{name}:{offset}: {sorted(unknown)} not in the sources: {line}"


# --------------------------------------------------------------------------- derived figures


def _matrix(path: str) -> dict:
    return json.loads((ROOT / path).read_text())


def _worst(path: str) -> tuple[float, str, str]:
    """(value / tolerance, check, model) of the check closest to its tolerance."""
    return max((r["value"] / r["tolerance"], r["check"], name) for name, e in _matrix(path).items()
               for r in e["results"] if r["tolerance"] and not r["refused"])


def _tolerance(path: str, model: str, check: str) -> float:
    (r,) = [r for r in _matrix(path)[model]["results"] if r["check"] == check]
    return r["tolerance"]


def _sig(x: float, digits: int = 1) -> str:
    """``8.58e-06`` -> ``9e-6`` (digits significant figures, the pages' notation)."""
    mantissa, exponent = f"{x:.{digits - 1}e}".split("e")
    return f"{mantissa}e{int(exponent)}"


REAL, TINY = "artifacts/matrix/real/matrix.json", "artifacts/matrix/matrix.json"
QUANTITY = ROOT / "artifacts" / "quantity"


def _quantity_cell(relation: str, information: str, query: str, condition: str) -> dict:
    summary = json.loads((QUANTITY / "smollm2-135m-instruct" / "summary.json").read_text())
    (cell,) = [c for c in summary["cells"] if (c["relation"], c["information"], c["query"], c["condition"])
               == (relation, information, query, condition)]
    return cell


#: (page, the text it must contain, the text computed from the artifact).
DERIVED = [
    ("docs/architectures.md", "the largest difference relative to its tolerance is\n0.20 of it (`zero_v_equals_plain_forward` on `smollm2-135m-instruct`)",
     lambda: "the largest difference relative to its tolerance is\n{:.2f} of it (`{}` on `{}`)".format(*_worst(REAL))),
    ("docs/architectures.md", "0.70 of it (`segment_rebuild_equals_one_pass` on `tiny-qwen3-moe`",
     lambda: "{:.2f} of it (`{}` on `{}`".format(*_worst(TINY))),
    ("docs/architectures.md", "logits reach 26.5 and its cached K/V 121, so its tolerances are 2.65e-4 and 1.2e-3",
     lambda: "logits reach {:.1f} and its cached K/V {:.0f}, so its tolerances are {} and {}".format(
         _tolerance(REAL, "gemma3-270m", "cached_equals_one_pass") / 1e-5,
         _tolerance(REAL, "gemma3-270m", "rebuild_equals_one_pass") / 1e-5,
         _sig(_tolerance(REAL, "gemma3-270m", "cached_equals_one_pass"), 3),
         _sig(_tolerance(REAL, "gemma3-270m", "rebuild_equals_one_pass"), 2))),
    ("studies/quantity/README.md", "at most 4.9 % at\n95 %",
     lambda: "at most {:.1f} % at\n95 %".format(
         100 * _quantity_cell("replacement", "unit_from_a", "current", "number")["zero_reversal_upper_bound"])),
]


@pytest.mark.parametrize("page,quoted,computed", DERIVED, ids=[q.replace("\n", " ") for _, q, _ in DERIVED])
def test_derived_figures_match_the_artifacts(page, quoted, computed):
    text = (ROOT / page).read_text()
    assert quoted in text, f"{page} no longer says {quoted!r}; update DERIVED"
    assert computed() == quoted, f"{page}: {quoted!r} but the artifact gives {computed()!r}"


def test_every_tolerance_is_the_scaled_one():
    """Each logit/K-V check's recorded tolerance is max(1e-4, 1e-5 x its reference's scale), never below 1e-4."""
    for path in (REAL, TINY):
        for e in _matrix(path).values():
            for r in e["results"]:
                if r["tolerance"] not in (0.0, 1e-3, 1e-5):
                    assert r["tolerance"] >= 1e-4, (path, r)


def test_five_condition_quantity_run_equals_the_eight_condition_one_where_they_share_cells():
    """studies/quantity/README.md: both committed runs give the same counts and margins in every shared cell."""
    def rows(run: str) -> set[str]:
        text = (QUANTITY / run / "report.md").read_text()
        return {line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| condition")}
    five, eight = rows("smollm2-135m-instruct-five-conditions"), rows("smollm2-135m-instruct")
    assert five and five - eight == set()


def test_babi_naive_rule_counts():
    """studies/babilong/README.md: the naive rule preserves every answer on 4 qa2 and 0 qa3 stories."""
    from kvprobe.studies.babilong.dependencies import verify_file

    babi = ROOT.parent / "shared" / "data" / "babi"
    files = [babi / "qa2_two-supporting-facts_test.txt", babi / "qa3_three-supporting-facts_test.txt"]
    if not all(f.is_file() for f in files):
        pytest.skip(f"bAbI qa2/qa3 test files not found under {babi}")
    ok = [verify_file(f, "naive")["stories_ok"] for f in files]
    assert "the naive rule does so on {} and {} stories".format(*ok) in (ROOT / "studies/babilong/README.md").read_text()
