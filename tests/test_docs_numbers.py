"""Numbers quoted in the README, docs/ and the study READMEs are the numbers the committed artifacts hold.

Results live where they are produced (``artifacts/**/report.md``, ``summary.json``,
``artifacts/bench/*.md``, ``matrix.json``). A page that quotes any of them does so inside a
block naming its sources (a path, or ``path#anchor`` for one section of a report)::

    <!-- numbers from artifacts/quantity/smollm2-135m-instruct/report.md -->
    | condition | strict | ... |          <- a table: all rows are rows of ONE table of the sources
    Prose with +9.56 nats ...              <- the numbers of a paragraph occur, signs included, in
                                              one section of the sources (or in the sections a
                                              <!-- numbers section path#anchor, #anchor --> names)
    <!-- end numbers -->

The rules and the number syntax (range ends, ``65.6x``, ``2.65e-4``, numbers before a full stop)
are in :mod:`numbers_checker`; ``tests/test_docs_numbers_planted.py`` plants errors in copies of
real pages and requires the checker to reject each one. Numbers outside blocks are design facts
or the paper's own figures; a few derived figures are checked one by one below (:data:`DERIVED`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from numbers_checker import BEGIN, END, blocks, check_block

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "studies").glob("*/README.md")])

BLOCKS = [(page, start, spec, lines) for page in PAGES for start, spec, lines in blocks(page.read_text())]


def test_pages_with_results_quote_them_in_checked_blocks():
    studies_with_runs = {p.parent.name for p in PAGES if p.parent.parent == ROOT / "studies"}
    quoting = {page.parent.name for page, *_ in BLOCKS if page.parent.parent == ROOT / "studies"}
    assert studies_with_runs <= quoting, f"study READMEs without a numbers block: {studies_with_runs - quoting}"


@pytest.mark.parametrize("page,start,spec,lines", BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}:{s}" for p, s, _, _ in BLOCKS])
def test_quoted_numbers_are_the_artifacts(page, start, spec, lines):
    errors = check_block(spec, lines, ROOT)
    assert not errors, f"{page.relative_to(ROOT)}:{start}:\n" + "\n".join(errors)


#: Pages generated from the committed summaries and checked by their own test (tests/test_scorecard.py).
GENERATED = {"docs/scorecard.md"}
#: A result as pages write one: a signed estimate followed by its interval, "+9.56 [+8.98, +10.16]".
RESULT = re.compile(r"[-+]\d+(?:\.\d+)?\s*\[[-+]?\d")
UNCHECKED = re.compile(r"<!--\s*unchecked numbers:\s*\S.*?-->")


def test_results_outside_blocks_are_generated_or_marked():
    """An estimate with its interval outside a numbers block is a result nobody checks: it must be in a block,
    on a generated page, or in a paragraph that says why not (``<!-- unchecked numbers: why -->``)."""
    stray = []
    for page in PAGES:
        name = str(page.relative_to(ROOT))
        if name in GENERATED:
            continue
        inside, fence, paragraph = False, False, []
        for i, line in enumerate([*page.read_text().splitlines(), ""], 1):
            s = line.strip()
            if s.startswith("```"):
                fence = not fence
            if BEGIN.fullmatch(s):
                inside = True
            elif END.fullmatch(s):
                inside = False
            if not s:
                if not any(UNCHECKED.search(text) for _, text in paragraph):
                    stray += [f"{name}:{n}: {text.strip()}" for n, text in paragraph
                              if RESULT.search(re.sub(r"`[^`]*`", "", text))]
                paragraph = []
            elif not inside and not fence:
                paragraph.append((i, line))
    assert not stray, "results outside numbers blocks:\n" + "\n".join(stray)


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
    ("docs/architectures.md", "0.85 of it (`run_with_cache_equals_plain_forward` on `tiny-gemma4`",
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


def derived_errors(page: str, quoted: str, computed, text: str | None = None) -> list[str]:
    """Why a DERIVED figure fails on ``text`` (the page's committed text by default)."""
    text = (ROOT / page).read_text() if text is None else text
    if quoted not in text:
        return [f"{page} no longer says {quoted!r}; update DERIVED"]
    if computed() != quoted:
        return [f"{page}: {quoted!r} but the artifact gives {computed()!r}"]
    return []


@pytest.mark.parametrize("page,quoted,computed", DERIVED, ids=[q.replace("\n", " ") for _, q, _ in DERIVED])
def test_derived_figures_match_the_artifacts(page, quoted, computed):
    errors = derived_errors(page, quoted, computed)
    assert not errors, errors[0]


def _results(path: str) -> dict:
    """matrix.json with its results as :class:`CheckResult` (what ``kvprobe matrix`` wrote them from)."""
    from kvprobe.tools.verify import CheckResult

    return {name: {**e, "results": [CheckResult(**r) for r in e["results"]]} for name, e in _matrix(path).items()}


@pytest.mark.parametrize("path,models", [(REAL, 3), (TINY, 12)])
def test_matrix_claims_recount_from_the_committed_values(path, models):
    """docs/architectures.md: "All checks pass on the three registry models ... and on all twelve tiny models".

    Recounted from each check's value and tolerance (not its stored ``passed`` flag): every non-refused
    check is within its tolerance, every logit/K-V tolerance is at least the 1e-4 floor, and the committed
    matrix.md is the table of the committed values."""
    from kvprobe.tools.verify.matrix import matrix_markdown

    data = _matrix(path)
    assert len(data) == models
    over = [(name, r["check"], r["value"], r["tolerance"]) for name, e in data.items() for r in e["results"]
            if not r["refused"] and not r["value"] <= r["tolerance"]]
    assert not over, f"{path}: checks above their tolerance: {over}"
    flags = [(name, r["check"]) for name, e in data.items() for r in e["results"]
             if r["passed"] != (bool(r["refused"]) or r["value"] <= r["tolerance"])]
    assert not flags, f"{path}: stored pass flags that the values contradict: {flags}"
    floor = [(name, r["check"], r["tolerance"]) for name, e in data.items() for r in e["results"]
             if r["tolerance"] not in (0.0, 1e-3, 1e-5) and r["tolerance"] < 1e-4]
    assert not floor, f"{path}: tolerances below the documented 1e-4 floor: {floor}"
    def cells(table: str) -> dict[tuple[str, str], str]:
        rows = [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("| ")]
        return {(row[0], column): value for row in rows[1:] for column, value in zip(rows[0], row)}

    committed, recomputed = cells((ROOT / path).with_name("matrix.md").read_text()), cells(matrix_markdown(_results(path)))
    # the real-model matrix predates the rebuild-segments column ("-": no check ran)
    assert committed == {k: v for k, v in recomputed.items() if k in committed}
    assert all(v == "-" for k, v in recomputed.items() if k not in committed)


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
