"""Each study folder owns its claims: ``studies/<name>/claims.py`` holds the paper's claims the study tests
(quote, lines, numbers) and the measures of its own runs; the scorecard (``studies/scorecard.py``) only gathers
and renders them.

The rules, read from the source with :mod:`ast` (function-level imports included) and from the claims
themselves:

* a study's ``claims.py`` imports only its own folder, ``kvprobe.studies.common`` and the layers below the
  studies (kvprobe core, extract, interventions, readouts);
* only a study's ``claims.py`` builds claims and measures: no other module imports the claim builders of
  ``kvprobe.studies.common.claims`` (:data:`BUILDERS`);
* a claims module's claims are its own folder's studies, and each test reads a run of the claim's study;
* the scorecard gathers every ``claims.py`` on disk (by the registry convention), so none is left out;
* a claim's quote and numbers are written once: no module outside the claim's folder repeats them, but for
  the citations listed in :data:`CITED_ACROSS`.

No model is loaded.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvprobe.studies import scorecard
from kvprobe.studies.registry import COMMAND_STUDIES, STUDIES, study_anchors

ROOT = Path(__file__).resolve().parents[1]
#: Installed subpackage -> its folder.
FOLDERS = {"kvprobe.extract": "extract", "kvprobe.interventions": "interventions", "kvprobe.readouts": "readouts",
           "kvprobe.studies": "studies", "kvprobe": "kvprobe"}
#: What builds a claim or a measure (a claim's paper reference, its tests, a measurement, the summary reader).
BUILDERS = {"Paper", "Test", "Measurement", "pp_measurement", "read_summary"}
#: Claim numbers that another study's claims cite on purpose (claim key, the folder that cites them): the
#: fact map's claims rest on MQuAKE's recompute and rebuild numbers (fact-map.later-states quotes the recompute-current
#: sentence: its direction is the paper's recompute-current effect), the OAKS choice numbers are shared by the
#: matched-scores OAKS arm and the OAKS study, and the quantity rebuild is the answer-level analogue of MQuAKE's
#: rebuild sentence (the paper runs no quantity rebuild), so the two claims quote it both.
CITED_ACROSS = {("mquake.recompute-historical", "studies/fact_map/claims.py"),
                ("mquake.recompute-current", "studies/fact_map/claims.py"),
                ("fact-map.later-states", "studies/mquake/claims.py"),
                ("mquake.rebuild", "studies/fact_map/claims.py"),
                ("mquake.rebuild", "studies/quantity/claims.py"), ("quantity.rebuild", "studies/mquake/claims.py"),
                ("oaks.obsolete-choices", "studies/matched_scores/claims.py")}


def _module_name(path: Path) -> str:
    for package, folder in FOLDERS.items():
        base = ROOT / folder
        if path.is_relative_to(base):
            parts = [p for p in path.relative_to(base).with_suffix("").parts if p != "__init__"]
            return ".".join([package, *parts])
    raise ValueError(path)


def _claims_files() -> list[Path]:
    return sorted(p for p in (ROOT / "studies").rglob("claims.py") if "common" not in p.relative_to(ROOT).parts)


def _python_files() -> list[Path]:
    return sorted(p for folder in FOLDERS.values() for p in (ROOT / folder).rglob("*.py")
                  if "__pycache__" not in p.parts and not any(part.startswith(".") for part in p.parts))


def imported(source: str, module: str) -> list[tuple[str, list[str]]]:
    """``(module, names)`` of every import in ``source`` (the text of ``module``), relative imports resolved."""
    package = module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            found.append((target, [a.name for a in node.names]))
    return found


def claims_import_violations(source: str, module: str) -> list[str]:
    """What a claims module (``kvprobe.studies.<study>....claims``) imports beyond its own study folder,
    ``kvprobe.studies.common`` and the layers below the studies."""
    own = module.split(".")[2]
    bad = []
    for target, _ in imported(source, module):
        parts = target.split(".")
        if parts[0] != "kvprobe":
            continue
        if target in ("kvprobe.cli",) or parts[1:2] == ["tools"]:
            bad.append(f"{module} imports {target} (a layer above the studies)")
        elif parts[1:2] == ["studies"] and (len(parts) < 3 or parts[2] not in (own, "common")):
            bad.append(f"{module} imports {target} (another study's folder or the studies hall)")
    return bad


def test_a_claims_module_imports_only_its_folder_and_the_common_layers():
    bad = [v for path in _claims_files() for v in claims_import_violations(path.read_text(), _module_name(path))]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("source, expected", [
    ("from kvprobe.studies.mquake.claims import MQUAKE", "another study's folder"),
    ("from kvprobe.studies.scorecard import ORDER", "the studies hall"),
    ("from kvprobe.tools.figures import redraw", "a layer above"),
    ("from ..mquake import claims", "another study's folder"),
])
def test_the_import_rule_catches_a_planted_violation(source, expected):
    found = claims_import_violations(source, "kvprobe.studies.quantity.claims")
    assert len(found) == 1 and expected in found[0], found


def test_the_import_rule_accepts_the_allowed_layers():
    source = ("from kvprobe.readouts.stats import clopper_pearson\n"
              "from kvprobe.studies.common.claims import Claim\n"
              "from .summary import RULES\n"
              "from kvprobe.studies.quantity.data import Case\n")
    assert claims_import_violations(source, "kvprobe.studies.quantity.claims") == []


def test_only_claims_modules_build_claims_and_measures():
    bad = []
    claims_files = set(_claims_files())
    for path in _python_files():
        if path in claims_files or path == ROOT / "studies" / "common" / "claims.py":
            continue
        for target, names in imported(path.read_text(), _module_name(path)):
            if target == "kvprobe.studies.common.claims" and BUILDERS & set(names):
                bad.append(f"{path.relative_to(ROOT)} imports {sorted(BUILDERS & set(names))}")
    assert not bad, "measures and claims live in studies/<name>/claims.py:\n" + "\n".join(bad)


def _folder_studies() -> dict[str, set[str]]:
    """A study folder's claims module -> the study names whose claims it may hold (its registered studies: run
    studies' entries and command studies, ``kvprobe.studies.registry.study_anchors``)."""
    found: dict[str, set[str]] = {}
    for name, anchor in study_anchors().items():
        found.setdefault(scorecard.claims_module(anchor), set()).add(name)
    return found


def test_a_study_is_registered_once():
    """No command study has a run study's name: a claim's ``study`` names one registered study."""
    assert not set(STUDIES) & set(COMMAND_STUDIES)


def test_a_folder_claims_its_own_studies_and_reads_their_runs():
    import importlib

    bad = []
    for module, studies in _folder_studies().items():
        if not importlib.util.find_spec(module):
            continue
        for claim in importlib.import_module(module).CLAIMS:
            if claim.study not in studies:
                bad.append(f"{module}: {claim.key} is a claim of {claim.study}, not of {sorted(studies)}")
            if not claim.key.startswith(claim.study + "."):
                bad.append(f"{module}: {claim.key} is not keyed by its study {claim.study}")
            bad += [f"{module}: {claim.key} reads {t.run}, a run of another study" for t in claim.tests
                    if t.run.split("/")[0] != claim.study]
    assert not bad, "\n".join(bad)


def test_the_scorecard_gathers_every_claims_module():
    on_disk = {_module_name(p) for p in _claims_files()}
    assert on_disk == set(_folder_studies()) & on_disk, \
        f"claims.py the registry convention does not reach: {sorted(on_disk - set(_folder_studies()))}"
    gathered = {c.key for c in scorecard.claims()}
    import importlib

    declared = {c.key for m in sorted(on_disk) for c in importlib.import_module(m).CLAIMS}
    assert gathered == declared


def _strings(path: Path) -> list[str]:
    """The string constants of a module (adjacent literals joined, as Python reads them)."""
    return [n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]


def test_a_claim_is_quoted_once():
    texts = {p: "\n".join(_strings(p)) for p in _python_files()}
    found = set()
    for claim in scorecard.claims():
        module = next(m for m, studies in _folder_studies().items() if claim.study in studies)
        own = ROOT / "studies" / module.split(".")[2]
        for path, text in texts.items():
            if path.is_relative_to(own):
                continue
            if claim.paper.numbers in text or claim.paper.quote in text:
                found.add((claim.key, path.relative_to(ROOT).as_posix()))
    assert found <= CITED_ACROSS, f"paper text quoted outside its study's folder: {sorted(found - CITED_ACROSS)}"
    assert CITED_ACROSS <= found, f"no longer cited, remove from CITED_ACROSS: {sorted(CITED_ACROSS - found)}"
