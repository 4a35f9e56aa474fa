"""The package layering holds: dependencies point one way, with no import cycles.

Layers, lowest first (a module may import its own layer and those below it)::

    kvprobe core (kvprobe/*.py, kvprobe/arch)      # prompts, history, access, rows, forward, decoding
    kvprobe.extract, kvprobe.interventions         # capture; cache operations (neither imports the other)
    kvprobe.tools.verify                           # kvprobe verify / matrix: core + interventions only
    kvprobe.readouts                               # pure math on feature stores
    kvprobe.studies                                # the paper's experiments
    kvprobe.tools.bench                            # kvprobe bench: runs studies and extraction
    kvprobe.tools.figures                          # redraws every committed figure (studies' and benches')
    kvprobe.tools.commands                         # the verify, matrix and bench commands (their wings on demand)
    kvprobe.cli                                    # argument plumbing; the only module that imports studies by
                                                   # name, and the only one that loads kvprobe.tools (on demand)

The tools wing (``kvprobe/tools/``) is a folder of the ``kvprobe`` import name, not a design-card
top-level folder; ``verify`` sits just above the operations it checks, ``bench`` at the top beside the CLI.
Nothing below the tools imports them, and no module keeps a deprecated alias (:func:`test_no_deprecated_aliases`).

Every import is read from the source with :mod:`ast` (function-level imports included), so
a lazy import cannot hide a wrong-way dependency. No two files import each other in a circle, type-only
imports (``if TYPE_CHECKING:``) included, anywhere in the tree (:func:`test_no_import_cycle_of_files`).
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path

import pytest

from kvprobe.studies.registry import COMMAND_STUDIES, study_anchors

ROOT = Path(__file__).resolve().parents[1]
#: Installed subpackage -> its top-level folder (setup.py's MAPPED_FOLDERS).
FOLDERS = {"kvprobe.extract": "extract", "kvprobe.interventions": "interventions",
           "kvprobe.readouts": "readouts", "kvprobe.studies": "studies", "kvprobe": "kvprobe"}
#: What each layer may import (besides the standard library and third-party packages).
ALLOWED = {
    "core": {"core"},
    "extract": {"core", "extract"},
    "interventions": {"core", "interventions"},
    "readouts": {"core", "extract", "interventions", "readouts"},
    "studies": {"core", "extract", "interventions", "readouts", "studies"},
    "verify": {"core", "interventions", "verify"},
    "bench": {"core", "extract", "interventions", "readouts", "studies", "bench"},
    "figures": {"core", "extract", "interventions", "readouts", "studies", "bench", "figures"},
    "tools": {"core", "verify", "bench", "tools"},  # kvprobe.tools.commands: the parsers of verify, matrix, bench
    "cli": {"core", "extract", "interventions", "readouts", "studies", "verify", "bench", "tools", "cli"},
}
#: The tools' wings: their layer is their name.
WINGS = ("verify", "bench", "figures")
GENERIC = ("studies", "extract", "readouts", "interventions")


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    """The parsed module at ``path`` (parsed once per test session; the tests only read the trees)."""
    return ast.parse(path.read_text(), str(path))


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the installed ``kvprobe`` namespace."""
    out = {}
    for package, folder in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            name = ".".join([package, *parts])
            if package == "kvprobe" or name not in out:
                out.setdefault(name, path)
    return out


def layer(module: str) -> str:
    """The layer of a ``kvprobe`` module."""
    if module == "kvprobe.cli":
        return "cli"
    for wing in WINGS:
        if module == f"kvprobe.tools.{wing}" or module.startswith(f"kvprobe.tools.{wing}."):
            return wing
    if module in ("kvprobe.tools", "kvprobe.tools.commands"):
        return "tools"
    for sub in GENERIC:
        if module == f"kvprobe.{sub}" or module.startswith(f"kvprobe.{sub}."):
            return sub
    return "core"


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (annotations only, never imported at run time)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return skip


def _imports(name: str, path: Path, runtime_only: bool = False) -> list[tuple[str, int]]:
    """Absolute ``kvprobe...`` modules imported by the module (relative imports resolved;
    ``runtime_only``: without those under ``if TYPE_CHECKING:``)."""
    tree = _tree(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    skip = _type_checking_nodes(tree) if runtime_only else set()
    found = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
            found += [(f"{target}.{a.name}", node.lineno) for a in node.names]
    return found


MODULES = _modules()


def _resolve(target: str) -> str | None:
    """The module a dotted import name refers to (``from pkg import name`` may name a module or an object)."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def test_no_generic_top_level_imports():
    """Code imports ``kvprobe.studies`` etc., never a top-level ``studies`` (it is not installed)."""
    bad = []
    for path in [*sorted(ROOT.glob("*/**/*.py")), *sorted(ROOT.glob("*.py"))]:
        if "artifacts" in path.parts or path.parts[len(ROOT.parts)] in ("build", "runs") or any(
                part.startswith(".") for part in path.parts[len(ROOT.parts):]):  # git, build output, local copies
            continue
        for node in ast.walk(_tree(path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            bad += [f"{path.relative_to(ROOT)}:{node.lineno}: import {n}" for n in names
                    if n.split(".")[0] in GENERIC]
    assert not bad, "\n".join(bad)


def test_dependencies_point_one_way():
    bad = []
    for name, path in MODULES.items():
        mine = layer(name)
        for target, line in _imports(name, path):
            module = _resolve(target)
            if module is None:
                continue
            if layer(module) not in ALLOWED[mine]:
                bad.append(f"{path.relative_to(ROOT)}:{line}: {mine} module {name} imports {module} "
                           f"({layer(module)})")
    assert not bad, "\n".join(bad)


def package(module: str) -> str:
    """The package a module belongs to (a package is its own; the CLI, the top layer, stands alone)."""
    if layer(module) == "cli":
        return module
    path = MODULES[module]
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def test_no_import_cycles_between_packages():
    """No two packages (``kvprobe``, ``kvprobe.arch``, ``kvprobe.interventions``, each study...) import
    each other, directly or through others, at run time (lazy imports included). Circles of files, inside
    a package too, are :func:`test_no_import_cycle_of_files`'s."""
    graph: dict[str, set[str]] = {package(name): set() for name in MODULES}
    for name, path in MODULES.items():
        for target, _ in _imports(name, path, runtime_only=True):
            module = _resolve(target)
            if module is None:
                continue
            a, b = package(name), package(module)
            # A package importing its own subpackages of the same layer (re-exports) is not a cycle.
            if a != b and not (b.startswith(a + ".") and layer(a) == layer(b)):
                graph[a].add(b)
    cycles = []
    state: dict[str, int] = {}

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(stack[stack.index(nxt):] + [nxt]))
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert not cycles, "\n".join(cycles)


def _file_imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of ``modules`` that the file imports, at any depth and type-only ones included: ``from pkg
    import x`` is an import of the module ``pkg.x`` when that is a module, else of ``pkg`` (a package's
    ``__init__`` only when a name is taken from it)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]

    def resolve(target: str) -> str | None:
        while target and target not in modules:
            target = target.rpartition(".")[0]
        return target or None

    found: set[str | None] = set()
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            found |= {resolve(a.name) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            target = ".".join(base + ([node.module] if node.module else []))
            found |= {f"{target}.{a.name}" if f"{target}.{a.name}" in modules else resolve(target)
                      for a in node.names}
    return {m for m in found if m is not None and m != name}


def import_cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The import circles of a graph (module -> the modules it imports): its strongly connected components
    of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        cycles.append(frozenset(component))
    return cycles


def file_import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules its file imports (:func:`_file_imports`), for every module of ``modules``."""
    return {name: _file_imports(name, path, modules) for name, path in modules.items()}


def _described(cycles) -> str:
    return "\n".join(" <-> ".join(sorted(c)) for c in sorted(cycles, key=sorted))


def test_no_import_cycle_of_files():
    """No two files of the tree (the core, the extraction and operations, the readouts, every study, the tools)
    import each other, directly or through others, in any way: at import time, inside a function, or only for
    type checking (``if TYPE_CHECKING:``). Modules import one another in one direction; what a lower module
    needs to name of a higher one is a protocol (``kvprobe.model_like.ModelLike``,
    ``kvprobe.forward_context.SelectorLike``) or a small module both import (``kvprobe.tools.verify.context``)."""
    cycles = import_cycles(file_import_graph(MODULES))
    assert not cycles, "import circles:\n" + _described(cycles)


def test_the_cycle_finder_catches_a_planted_circle(tmp_path):
    """A circle held only by a type-checking import, and one through a lazy import, are found; a chain is not."""
    files = {
        "pkg/__init__.py": "from .a import A\n",
        "pkg/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\nA = 1\n",
        "pkg/b.py": "from .a import A\nB = 2\n",
        "pkg/c.py": "def f():\n    from pkg import d\n",
        "pkg/d.py": "import pkg.c\n",
        "pkg/e.py": "from . import a, b\n",
    }
    modules = {}
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
        modules[rel[:-3].replace("/__init__", "").replace("/", ".")] = path
    cycles = import_cycles(file_import_graph(modules))
    assert sorted(map(sorted, cycles)) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


@pytest.mark.parametrize("module, expected", [("kvprobe.forward", "core"), ("kvprobe.cli", "cli"),
                                              ("kvprobe.studies.quantity.study", "studies"),
                                              ("kvprobe.interventions", "interventions"),
                                              ("kvprobe.tools.verify.matrix", "verify"),
                                              ("kvprobe.tools.bench.long", "bench"), ("kvprobe.tools", "tools"),
                                              ("kvprobe.tools.commands", "tools")])
def test_layer_names(module, expected):
    assert layer(module) == expected


def test_the_cli_loads_the_tools_on_demand():
    """``import kvprobe.cli`` (every command's start) loads no tool: its imports of ``kvprobe.tools`` are inside
    functions; and nothing but the CLI imports the tools at all."""
    tree = ast.parse((ROOT / "kvprobe" / "cli.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [ast.unparse(n) for n in top if "tools" in ast.unparse(n)]
    users = {name for name, path in MODULES.items() for target, _ in _imports(name, path)
             if (_resolve(target) or "").startswith("kvprobe.tools") and layer(name) not in ("verify", "bench", "figures", "tools")}
    assert users == {"kvprobe.cli"}


def test_no_deprecated_aliases():
    """0.1.0 was never released: a moved or renamed name is updated at every caller, never kept as an alias
    that warns and forwards (no ``DeprecationWarning`` raised; CHANGELOG.md lists what was removed)."""
    bad = [f"{path.relative_to(ROOT)}: DeprecationWarning" for path in MODULES.values()
           if any(isinstance(n, ast.Name) and n.id == "DeprecationWarning" for n in ast.walk(_tree(path)))]
    assert not bad, "\n".join(bad)


def test_an_install_adds_only_the_kvprobe_import_name(tmp_path):
    """A wheel of the project holds one top-level package, ``kvprobe``, with the design card's folders
    inside it (``kvprobe/studies/...``): ``import studies`` cannot collide with a user's own package."""
    import subprocess
    import sys
    import zipfile

    import shutil

    # Build from a copy: an in-tree build/ folder could hold modules deleted since.
    source = tmp_path / "src"
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy(ROOT / name, source / name if source.exists() else (source.mkdir() or source / name))
    for folder in FOLDERS.values():
        shutil.copytree(ROOT / folder, source / folder, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "-w", str(tmp_path), str(source)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    (wheel,) = tmp_path.glob("kvprobe-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"kvprobe"}
    for folder in GENERIC:
        inside = {n for n in names if n.startswith(f"kvprobe/{folder}/") and n.endswith(".py")}
        expected = {f"kvprobe/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / folder).rglob("*.py")}
        assert inside == expected, sorted(expected ^ inside)[:5]
    # Beside the modules, only the package data pyproject.toml names (the judge audit sets).
    import tomllib

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    declared = {f"{package.replace('.', '/')}/{name}" for package, files in data.items() for name in files}
    assert {n for n in names if not n.endswith(".py") and not n.split("/")[0].endswith(".dist-info")} == declared
    done = subprocess.run([sys.executable, "-c", "import studies"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode != 0 and "No module named 'studies'" in done.stderr


#: Study packages: the packages of the registered studies (``studies/registry.py``: the run studies' entries and
#: the command studies). What several studies use lives in shared modules instead, such as the recognition
#: datasets, ``quantity_task``, ``record_histories``, ``detectors``, ``filler`` and ``answers``.
def _packages(anchors: Iterable[str]) -> tuple[str, ...]:
    """The study packages of registry anchors (``"kvprobe.studies.NAME.module:name"``)."""
    return tuple(sorted({a.split(":")[0].split(".")[2] for a in anchors}))


STUDY_PACKAGES = _packages(study_anchors().values())
#: The packages of the command studies (``COMMAND_STUDIES``: ``kvprobe extract``/``readout``, not ``kvprobe run``).
COMMAND_PACKAGES = _packages(e.commands for e in COMMAND_STUDIES.values())
#: Imports of one study's modules by another that remain: none (the quantity task, the record histories,
#: the detectors and the PG-19 filler moved to shared modules). It stays empty.
CROSS_STUDY_DEBT: set[tuple[str, str]] = set()


def _study_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["kvprobe", "studies"] and parts[2] in STUDY_PACKAGES \
        else None


def test_study_packages_are_the_registered_studies():
    """A new study is covered by the cross-study rule as soon as it is registered: each registered study is a
    package of its own under studies/."""
    for name in STUDY_PACKAGES:
        assert (ROOT / "studies" / name / "__init__.py").is_file(), name


def test_no_new_cross_study_imports():
    found = set()
    for name, path in MODULES.items():
        mine = _study_of(name)
        for target, _ in _imports(name, path):
            module = _resolve(target)
            theirs = _study_of(module) if module else None
            if mine and theirs and mine != theirs:
                found.add((mine, theirs))
    assert found <= CROSS_STUDY_DEBT, f"new imports between studies: {sorted(found - CROSS_STUDY_DEBT)}"
    assert CROSS_STUDY_DEBT <= found, f"paid off, remove from CROSS_STUDY_DEBT: {sorted(CROSS_STUDY_DEBT - found)}"


def test_studies_import_style_is_consistent():
    """Inside ``studies/``: relative imports within a package (``from .grading import``), absolute ones
    across packages (``from kvprobe.studies.common.protocol import``); never ``from ..x`` or a package
    importing itself by its absolute name."""
    bad = []
    for path in sorted((ROOT / "studies").rglob("*.py")):
        rel = path.relative_to(ROOT / "studies")
        own = ".".join(["kvprobe", "studies", *rel.parts[:-1]])
        for node in ast.walk(_tree(path)):
            if not isinstance(node, ast.ImportFrom):
                continue
            where = f"studies/{rel}:{node.lineno}"
            if node.level > 1:
                bad.append(f"{where}: from {'.' * node.level}{node.module or ''} (use kvprobe.studies....)")
            elif node.level == 0 and len(rel.parts) > 1 and (node.module or "").startswith(own + "."):
                bad.append(f"{where}: from {node.module} (inside its own package: use a relative import)")
    assert not bad, "\n".join(bad)


def test_the_runner_drives_the_protocol_not_the_other_way():
    """``studies/common/protocol.py`` (the loop every study shares) imports nothing from ``studies/common/runner.py`` (which
    drives it): the tie points one way (``study_parameters`` and ``strings_sha256`` live in the protocol)."""
    name = "kvprobe.studies.common.protocol"
    targets = {_resolve(t) for t, _ in _imports(name, MODULES[name])}
    assert "kvprobe.studies.common.runner" not in targets


#: What the studies hall holds besides the study packages: the modules that span every study (the registry,
#: the study commands, the scorecard, its answer-level table, the cross-benchmark report) and the two shared folders.
HALL = {"__init__.py", "registry.py", "commands.py", "scorecard.py", "answer_level.py", "cross_benchmark.py", "common",
        "datasets"}
#: The fixed file names of a study folder (where the role exists: a study that reads only shared data has no
#: ``data.py``, one without verbatim paper text no ``strings.py``); a command study's folder has its commands
#: module instead of the study and summary modules.
FIXED = ("README.md", "study.py", "summary.py")
COMMAND_FIXED = ("README.md", "commands.py")


def test_the_studies_hall_shows_its_kinds():
    """``studies/`` holds the study packages, ``common/`` (the machinery every study runs on), ``datasets/``
    (data and loaders shared by several studies) and the modules above all studies; nothing else."""
    entries = {p.name for p in (ROOT / "studies").iterdir() if p.name != "__pycache__"}
    assert entries - HALL == set(STUDY_PACKAGES), sorted(entries - HALL)
    for name in STUDY_PACKAGES:
        fixed = COMMAND_FIXED if name in COMMAND_PACKAGES else FIXED
        missing = [f for f in fixed if not (ROOT / "studies" / name / f).is_file()]
        assert not missing, f"studies/{name}/ lacks {missing}"


#: The one shared module that reads the registry: ``write_summary(NAME, DIR)`` finds the study's entry by name.
READS_THE_REGISTRY = {"kvprobe.studies.common.summary"}


def test_the_shared_folders_sit_below_the_studies():
    """``studies/common`` imports no study and no shared dataset (only :data:`READS_THE_REGISTRY` reads the
    registry, which names studies as strings); ``studies/datasets`` imports the machinery and no study (so a
    study may use both, and neither depends on a study's code)."""
    bad = []
    for name, path in MODULES.items():
        for target, _ in _imports(name, path):
            module = _resolve(target) or ""
            for shared, allowed in (("common", ("common",)), ("datasets", ("common", "datasets"))):
                if name.startswith(f"kvprobe.studies.{shared}") and module.startswith("kvprobe.studies."):
                    if module == "kvprobe.studies.registry" and name in READS_THE_REGISTRY:
                        continue
                    if module.split(".")[2] not in allowed:
                        bad.append(f"{name} imports {module}")
    assert not bad, "\n".join(bad)


#: The one module outside a study's folder that imports its figure code: the redraw of every committed figure
#: (a run's figure it finds through the registry's ``Entry.figure``; it imports the calibration and map figures).
REDRAWS_FIGURES = {"kvprobe.tools.figures"}


def test_a_study_draws_its_own_figure():
    """A study's ``figure.py`` is imported only inside its own folder and by :data:`REDRAWS_FIGURES`; ``kvprobe report``
    draws it through the registry (``Entry.figure``), so nothing else draws a study's figure."""
    bad = []
    for name, path in MODULES.items():
        for target, _ in _imports(name, path):
            parts = (_resolve(target) or "").split(".")
            if len(parts) >= 4 and parts[:2] == ["kvprobe", "studies"] and parts[-1] == "figure":
                folder = ".".join(parts[:-1])
                if not name.startswith(folder + ".") and name not in REDRAWS_FIGURES:
                    bad.append(f"{name} imports {'.'.join(parts)}")
    assert not bad, "\n".join(bad)
